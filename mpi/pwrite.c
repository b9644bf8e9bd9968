/* Parallel writing of chunk rows with MPI-IO (see pwrite.h). */
#include "mpi/pwrite.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the partial file's columns are little-endian and are written as memory is");

struct si_pwriter {
    MPI_File fh;
    si_post_plan plan;
    uint64_t off[SI_POST_MAX_COLS + 1]; /* [0] status, [1 + c] column c */
    si_bytes col;
    uint64_t bytes;
};

si_status si_pwriter_open(const si_mpi *m, const char *partial, const si_post_plan *plan,
                          const uint64_t *offsets, si_pwriter **out) {
    si_pwriter *w = si_xcalloc(1, sizeof *w);
    w->plan = *plan;
    if (m->rank == 0) memcpy(w->off, offsets, sizeof(uint64_t) * (size_t)(plan->n_cols + 1));
    mpiCheck(MPI_Bcast(w->off, plan->n_cols + 1, MPI_UINT64_T, 0, m->comm));
    int rc = MPI_File_open(m->comm, partial, MPI_MODE_WRONLY, MPI_INFO_NULL, &w->fh);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int l = 0;
        MPI_Error_string(rc, s, &l);
        free(w);
        return si_error(SI_ERR_IO, "%s: cannot open with MPI-IO: %s", partial, s);
    }
    MPI_File_set_errhandler(w->fh, MPI_ERRORS_RETURN);
    *out = w;
    return SI_OK;
}

static si_status write_at(si_pwriter *w, uint64_t at, const void *buf, size_t len) {
    for (size_t o = 0; o < len;) { /* MPI counts are int: large columns go in pieces */
        int c = (int)(len - o < (1u << 30) ? len - o : 1u << 30);
        MPI_Status st;
        int rc =
            MPI_File_write_at(w->fh, (MPI_Offset)(at + o), (const char *)buf + o, c, MPI_BYTE, &st);
        if (rc != MPI_SUCCESS) {
            char s[MPI_MAX_ERROR_STRING];
            int l = 0;
            MPI_Error_string(rc, s, &l);
            return si_error(SI_ERR_IO, "MPI-IO write of %d bytes at %llu failed: %s", c,
                            (unsigned long long)(at + o), s);
        }
        o += (size_t)c;
    }
    w->bytes += len;
    return SI_OK;
}

si_status si_pwriter_put(si_pwriter *w, const si_chunk *c) {
    si_status st = write_at(w, w->off[0] + c->first * 4, c->status, 4 * (size_t)c->n);
    for (int k = 0; k < w->plan.n_cols && st == SI_OK; k++) {
        const si_post_col *col = &w->plan.cols[k];
        if ((st = si_bytes_reserve(&w->col, col->bytes * c->n)) != SI_OK) break;
        si_post_column(&w->plan, k, c->rows, c->n, w->col.data);
        st = write_at(w, w->off[1 + k] + c->first * col->bytes, w->col.data, col->bytes * c->n);
    }
    return st;
}

uint64_t si_pwriter_bytes(const si_pwriter *w) {
    return w ? w->bytes : 0;
}

void si_pwriter_close(si_pwriter *w) {
    if (!w) return;
    MPI_File_close(&w->fh);
    si_bytes_free(&w->col);
    free(w);
}
