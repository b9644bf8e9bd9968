/* Parallel writing of chunk rows with MPI-IO (see pwrite.h). */
#include "mpi/pwrite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the partial file's columns are little-endian and are written as memory is");

struct si_pwriter {
    MPI_File fh;
    char *path;
    si_post_plan plan;
    uint64_t off[SI_POST_MAX_COLS + 1]; /* [0] status, [1 + c] column c */
    si_bytes col;
    uint64_t bytes;
};

static const char *mpi_err(int rc, char *s) {
    int l = 0;
    MPI_Error_string(rc, s, &l);
    return s;
}

si_status si_pwriter_open(const si_mpi *m, const char *partial, const si_post_plan *plan,
                          const uint64_t *offsets, si_pwriter **out) {
    si_pwriter *w = si_xcalloc(1, sizeof *w);
    w->plan = *plan;
    if (m->rank == 0) memcpy(w->off, offsets, sizeof(uint64_t) * (size_t)(plan->n_cols + 1));
    mpiCheck(MPI_Bcast(w->off, plan->n_cols + 1, MPI_UINT64_T, 0, m->comm));
    /* each rank opens the file on its own: MPI_File_sync is collective over the opening group,
     * and a rank syncs its rows whenever one of its chunks is done */
    char s[MPI_MAX_ERROR_STRING];
    int rc = MPI_File_open(MPI_COMM_SELF, partial, MPI_MODE_WRONLY, MPI_INFO_NULL, &w->fh);
    if (rc != MPI_SUCCESS) {
        free(w);
        return si_error(SI_ERR_IO, "%s: cannot open with MPI-IO: %s", partial, mpi_err(rc, s));
    }
    MPI_File_set_errhandler(w->fh, MPI_ERRORS_RETURN);
    w->path = si_xstrdup(partial);
    *out = w;
    return SI_OK;
}

/* MPI-IO wrote only part of a piece (OpenMPI's posix driver prints the OS error and reports a
 * short count): the rest written with pwrite(2), which either finishes it or says why not. */
static si_status finish_short(si_pwriter *w, uint64_t at, const char *buf, size_t len, int got) {
    int fd = open(w->path, O_WRONLY);
    if (fd < 0)
        return si_error(SI_ERR_IO,
                        "%s: MPI-IO wrote %d of %zu bytes at %llu, and reopening failed: %s",
                        w->path, got, len, (unsigned long long)at, strerror(errno));
    size_t o = (size_t)got;
    int err = 0;
    while (o < len) {
        ssize_t k = pwrite(fd, buf + o, len - o, (off_t)(at + o));
        if (k <= 0) {
            err = k < 0 ? errno : ENOSPC; /* 0 bytes written: no room, as write(2) reports it */
            break;
        }
        o += (size_t)k;
    }
    close(fd);
    if (err)
        return si_error(SI_ERR_IO, "%s: cannot write %zu bytes of rows at %llu: %s", w->path,
                        len - (size_t)got, (unsigned long long)(at + (uint64_t)got), strerror(err));
    return SI_OK;
}

static si_status write_at(si_pwriter *w, uint64_t at, const void *buf, size_t len) {
    for (size_t o = 0; o < len;) { /* MPI counts are int: large columns go in pieces */
        int c = (int)(len - o < (1u << 30) ? len - o : 1u << 30), got = 0;
        MPI_Status st;
        char s[MPI_MAX_ERROR_STRING];
        int rc =
            MPI_File_write_at(w->fh, (MPI_Offset)(at + o), (const char *)buf + o, c, MPI_BYTE, &st);
        if (rc != MPI_SUCCESS)
            return si_error(SI_ERR_IO, "%s: MPI-IO write of %d bytes at %llu failed: %s", w->path,
                            c, (unsigned long long)(at + o), mpi_err(rc, s));
        if (MPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS || got == MPI_UNDEFINED) got = 0;
        if (got < c) {
            si_status fs = finish_short(w, at + o, (const char *)buf + o, (size_t)c, got);
            if (fs != SI_OK) return fs;
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
    if (st != SI_OK) return st;
    /* on disk before the tail goes to rank 0's journal, which then names these rows as done */
    char s[MPI_MAX_ERROR_STRING];
    int rc = MPI_File_sync(w->fh);
    if (rc != MPI_SUCCESS)
        return si_error(SI_ERR_IO, "%s: cannot sync the rows of images %llu..%llu: %s", w->path,
                        (unsigned long long)c->first, (unsigned long long)(c->first + c->n - 1),
                        mpi_err(rc, s));
    return SI_OK;
}

uint64_t si_pwriter_bytes(const si_pwriter *w) {
    return w ? w->bytes : 0;
}

void si_pwriter_close(si_pwriter *w) {
    if (!w) return;
    MPI_File_close(&w->fh);
    si_bytes_free(&w->col);
    free(w->path);
    free(w);
}
