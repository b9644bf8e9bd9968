/* Chunk scheduling (mpi/sched.c) under mpirun with several ranks: for random done-bitmaps, every
 * chunk not done is handed out exactly once over all ranks and no done chunk ever is, static
 * shares are contiguous runs of the pending list, and a stop requested by one rank ends the
 * claiming on all. Also the pending list's k-th lookup against a plain scan. */
#include "mpi/sched.h"
#include "tests/test_util.h"

#include <string.h>

static unsigned seed = 12345;

/* Claims everything this rank gets; gathers the claims to rank 0, which checks them. */
static void check_claims(const si_mpi *m, si_sched_kind kind, uint64_t n_chunks,
                         const uint8_t *done) {
    si_sched *s = NULL;
    CHECK(si_sched_create(m, kind, n_chunks, done, &s) == SI_OK);
    uint64_t *mine = malloc(sizeof *mine * (n_chunks + 1)), id;
    int k = 0;
    while (si_sched_next(s, &id)) mine[k++] = id;
    CHECK(si_sched_claimed(s) == (uint64_t)k);
    if (kind == SI_SCHED_STATIC) /* a contiguous run of the pending list, ascending */
        for (int i = 1; i < k; i++) CHECK(mine[i] > mine[i - 1]);
    int *counts = m->rank == 0 ? malloc(sizeof(int) * (size_t)m->size) : NULL;
    MPI_Gather(&k, 1, MPI_INT, counts, 1, MPI_INT, 0, m->comm);
    int *displs = NULL, total = 0;
    uint64_t *all = NULL;
    if (m->rank == 0) {
        displs = malloc(sizeof(int) * (size_t)m->size);
        for (int r = 0; r < m->size; r++) displs[r] = total, total += counts[r];
        all = malloc(sizeof *all * ((size_t)total + 1));
    }
    MPI_Gatherv(mine, k, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T, 0, m->comm);
    if (m->rank == 0) {
        uint8_t *seen = calloc(n_chunks + 1, 1);
        for (int i = 0; i < total; i++) {
            CHECK_MSG(all[i] < n_chunks, "chunk %llu out of range", (unsigned long long)all[i]);
            if (all[i] < n_chunks) seen[all[i]]++;
        }
        for (uint64_t c = 0; c < n_chunks; c++) {
            int want = done && (done[c / 8] >> (c % 8) & 1) ? 0 : 1;
            CHECK_MSG(seen[c] == want, "%s: chunk %llu handed out %d times, expected %d",
                      kind == SI_SCHED_STATIC ? "static" : "dynamic", (unsigned long long)c,
                      seen[c], want);
        }
        free(seen);
    }
    si_sched_free(s);
    free(mine);
    free(counts);
    free(displs);
    free(all);
}

int main(int argc, char **argv) {
    si_mpi m;
    si_mpi_init(&argc, &argv, &m);
    uint64_t sizes[] = {0, 1, 5, 63, 64, 65, 4095, 4096, 4097, 20000};
    for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        uint64_t n = sizes[t];
        uint8_t *done = calloc(n / 8 + 1, 1);
        for (int density = 0; density < 3; density++) { /* none, some, most done */
            memset(done, 0, n / 8 + 1);
            for (uint64_t c = 0; c < n; c++)
                if (density && test_rand(&seed) % 4 < (unsigned)density * 2 - 1)
                    done[c / 8] |= (uint8_t)(1u << (c % 8));
            MPI_Bcast(done, (int)(n / 8 + 1), MPI_BYTE, 0, m.comm);
            check_claims(&m, SI_SCHED_STATIC, n, done);
            check_claims(&m, SI_SCHED_DYNAMIC, n, done);
            /* the k-th pending chunk against a scan */
            si_sched *s = NULL;
            si_sched_create(&m, SI_SCHED_DYNAMIC, n, done, &s);
            uint64_t k = 0;
            for (uint64_t c = 0; c < n; c++)
                if (!(done[c / 8] >> (c % 8) & 1)) {
                    CHECK_MSG(si_sched_pending_at(s, k) == c, "pending %llu",
                              (unsigned long long)k);
                    k++;
                }
            CHECK(si_sched_pending_count(s) == k);
            si_sched_free(s);
        }
        free(done);
    }
    /* a stop from the last rank ends everyone's claiming */
    si_sched *s = NULL;
    si_sched_create(&m, SI_SCHED_DYNAMIC, 100000, NULL, &s);
    uint64_t id;
    if (m.rank == m.size - 1) si_sched_stop(s);
    MPI_Barrier(m.comm);
    CHECK(!si_sched_next(s, &id));
    si_sched_free(s);
    int fails = test_fail, all_fails = 0;
    MPI_Reduce(&fails, &all_fails, 1, MPI_INT, MPI_SUM, 0, m.comm);
    if (m.rank == 0) printf("rank 0: ");
    int rc = test_finish();
    if (m.rank == 0 && all_fails) rc = 1;
    si_mpi_finalize();
    return rc;
}
