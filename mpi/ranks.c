/* MPI start-up, shares, error agreement and the results gather. */
#include "ranks.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* one checking macro for MPI calls: a failure here is a broken invariant of the job */
#define mpiCheck(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int l_ = 0;                                                                            \
            MPI_Error_string(rc_, s_, &l_);                                                        \
            si_fatal(__FILE__, __LINE__, #call, "%s", s_);                                         \
        }                                                                                          \
    } while (0)

static void abort_job(int code) {
    int up = 0;
    MPI_Initialized(&up);
    int down = 0;
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

si_status si_mpi_init(int *argc, char ***argv, si_mpi *m) {
    memset(m, 0, sizeof *m);
    int provided;
    mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    m->comm = MPI_COMM_WORLD;
    /* errors on communicators come back as codes; mpiCheck turns them into an abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpiCheck(MPI_Comm_rank(m->comm, &m->rank));
    mpiCheck(MPI_Comm_size(m->comm, &m->size));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &m->local_rank));
    mpiCheck(MPI_Comm_size(local, &m->local_size));
    MPI_Comm_free(&local);
    si_log_set_rank(m->rank, m->size);
    si_set_abort_hook(abort_job);
    return SI_OK;
}

void si_mpi_finalize(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Finalize();
}

void si_mpi_share(uint64_t n, int size, int rank, uint64_t *first, uint64_t *count) {
    uint64_t q = n / (uint64_t)size, r = n % (uint64_t)size, k = (uint64_t)rank;
    *first = k * q + (k < r ? k : r);
    *count = q + (k < r ? 1 : 0);
}

si_status si_mpi_agree(const si_mpi *m, si_status st) {
    /* MINLOC over (failing rank or size) finds the lowest failing rank */
    int in[2] = {st == SI_OK ? m->size : m->rank, m->rank}, out[2];
    mpiCheck(MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MINLOC, m->comm));
    if (out[0] == m->size) return SI_OK;
    int failed_rank = out[0], code = (int)st;
    if (failed_rank == m->rank) si_log_error("%s", si_error_msg());
    mpiCheck(MPI_Bcast(&code, 1, MPI_INT, failed_rank, m->comm));
    return (si_status)code;
}

/* Chunks keep every MPI count far below INT_MAX whatever the share. */
#define GATHER_CHUNK (1u << 20)

enum { TAG_INDEX = 11, TAG_STATUS, TAG_CLASS, TAG_PROB, TAG_ERR_BYTES, TAG_ERR_DATA };

#define ERR_CHUNK (64u << 20) /* bytes per message: MPI counts stay far below INT_MAX */

/* Failed images' messages as one packed stream: (uint64 index, uint16 length, bytes) each. */
static void send_errors(const si_mpi *m, const si_share_result *mine) {
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < mine->n_errors; i++) {
        size_t l = strlen(mine->err_msg[i]);
        bytes += 10 + (l > 65535 ? 65535 : l);
    }
    uint8_t *buf = si_xmalloc(bytes ? bytes : 1), *p = buf;
    for (uint64_t i = 0; i < mine->n_errors; i++) {
        size_t l = strlen(mine->err_msg[i]);
        uint16_t l16 = (uint16_t)(l > 65535 ? 65535 : l);
        memcpy(p, &mine->err_index[i], 8);
        memcpy(p + 8, &l16, 2);
        memcpy(p + 10, mine->err_msg[i], l16);
        p += 10 + l16;
    }
    mpiCheck(MPI_Send(&bytes, 1, MPI_UINT64_T, 0, TAG_ERR_BYTES, m->comm));
    for (uint64_t o = 0; o < bytes; o += ERR_CHUNK) {
        int c = (int)(bytes - o < ERR_CHUNK ? bytes - o : ERR_CHUNK);
        mpiCheck(MPI_Send(buf + o, c, MPI_BYTE, 0, TAG_ERR_DATA, m->comm));
    }
    free(buf);
}

static void recv_errors(const si_mpi *m, int r, si_share_result *all) {
    uint64_t bytes = 0;
    mpiCheck(MPI_Recv(&bytes, 1, MPI_UINT64_T, r, TAG_ERR_BYTES, m->comm, MPI_STATUS_IGNORE));
    uint8_t *buf = si_xmalloc(bytes ? bytes : 1);
    for (uint64_t o = 0; o < bytes; o += ERR_CHUNK) {
        int c = (int)(bytes - o < ERR_CHUNK ? bytes - o : ERR_CHUNK);
        mpiCheck(MPI_Recv(buf + o, c, MPI_BYTE, r, TAG_ERR_DATA, m->comm, MPI_STATUS_IGNORE));
    }
    char msg[65536];
    for (uint64_t o = 0; o + 10 <= bytes;) {
        uint64_t idx;
        uint16_t l;
        memcpy(&idx, buf + o, 8);
        memcpy(&l, buf + o + 8, 2);
        SI_ASSERT(o + 10 + l <= bytes);
        memcpy(msg, buf + o + 10, l);
        msg[l] = 0;
        si_share_result_add_error(all, idx, msg);
        o += 10 + (uint64_t)l;
    }
    free(buf);
}

static int cmp_err(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

/* Sorts the messages by input index (ranks' shares need not arrive in order). */
static void sort_errors(si_share_result *all) {
    uint64_t n = all->n_errors;
    uint64_t *pairs = si_xmalloc(sizeof(uint64_t) * 2 * (n ? n : 1));
    for (uint64_t i = 0; i < n; i++) pairs[2 * i] = all->err_index[i], pairs[2 * i + 1] = i;
    qsort(pairs, (size_t)n, 2 * sizeof(uint64_t), cmp_err);
    char **msgs = si_xmalloc(sizeof(char *) * (n ? n : 1));
    for (uint64_t i = 0; i < n; i++) {
        msgs[i] = all->err_msg[pairs[2 * i + 1]];
        all->err_index[i] = pairs[2 * i];
    }
    if (n) memcpy(all->err_msg, msgs, sizeof(char *) * n);
    free(msgs);
    free(pairs);
}

si_status si_mpi_gather(const si_mpi *m, uint64_t n, int k, const si_share_result *mine,
                        si_share_result *all, si_share_result *stats_all) {
    /* per-rank statistics: fixed-size records */
    enum { NSTAT = 12 };
    double stats[NSTAT] = {(double)mine->first,  (double)mine->count, (double)mine->ok,
                           (double)mine->failed, mine->t_read,        mine->t_decode,
                           mine->t_infer,        mine->t_post,        mine->t_first,
                           mine->t_total,        mine->t_wait,        (double)mine->bytes_read};
    double *gathered = m->rank == 0 ? si_xmalloc(sizeof(double) * NSTAT * (size_t)m->size) : NULL;
    mpiCheck(MPI_Gather(stats, NSTAT, MPI_DOUBLE, gathered, NSTAT, MPI_DOUBLE, 0, m->comm));
    uint64_t counts_local = mine->count;
    uint64_t *counts = m->rank == 0 ? si_xmalloc(sizeof(uint64_t) * (size_t)m->size) : NULL;
    mpiCheck(MPI_Gather(&counts_local, 1, MPI_UINT64_T, counts, 1, MPI_UINT64_T, 0, m->comm));

    if (m->rank != 0) {
        for (uint64_t s = 0; s < mine->count; s += GATHER_CHUNK) {
            int c = (int)(mine->count - s < GATHER_CHUNK ? mine->count - s : GATHER_CHUNK);
            mpiCheck(MPI_Send(mine->index + s, c, MPI_UINT64_T, 0, TAG_INDEX, m->comm));
            mpiCheck(MPI_Send(mine->status + s, c, MPI_INT32_T, 0, TAG_STATUS, m->comm));
            mpiCheck(MPI_Send(mine->topk_class + s * (uint64_t)k, c * k, MPI_INT32_T, 0, TAG_CLASS,
                              m->comm));
            mpiCheck(MPI_Send(mine->topk_prob + s * (uint64_t)k, c * k, MPI_FLOAT, 0, TAG_PROB,
                              m->comm));
        }
        send_errors(m, mine);
        return SI_OK;
    }

    memset(all, 0, sizeof *all);
    all->count = n;
    all->index = si_xmalloc(sizeof(uint64_t) * (n ? n : 1));
    all->status = si_xmalloc(sizeof(int32_t) * (n ? n : 1));
    all->topk_class = si_xmalloc(sizeof(int32_t) * (n ? n : 1) * (size_t)k);
    all->topk_prob = si_xmalloc(sizeof(float) * (n ? n : 1) * (size_t)k);
    uint8_t *seen = si_xcalloc(n ? n : 1, 1);
    uint64_t *idx = si_xmalloc(sizeof(uint64_t) * GATHER_CHUNK);
    int32_t *sta = si_xmalloc(sizeof(int32_t) * GATHER_CHUNK);
    int32_t *cls = si_xmalloc(sizeof(int32_t) * GATHER_CHUNK * (size_t)k);
    float *prob = si_xmalloc(sizeof(float) * GATHER_CHUNK * (size_t)k);
    si_status st = SI_OK;
    uint64_t bad_index = 0, out_of_range = 0;
    for (int r = 0; r < m->size; r++) {
        for (uint64_t s = 0; s < counts[r]; s += GATHER_CHUNK) {
            int c = (int)(counts[r] - s < GATHER_CHUNK ? counts[r] - s : GATHER_CHUNK);
            const uint64_t *ci = idx;
            const int32_t *cs = sta, *cc = cls;
            const float *cp = prob;
            if (r == 0) {
                ci = mine->index + s;
                cs = mine->status + s;
                cc = mine->topk_class + s * (uint64_t)k;
                cp = mine->topk_prob + s * (uint64_t)k;
            } else {
                mpiCheck(MPI_Recv(idx, c, MPI_UINT64_T, r, TAG_INDEX, m->comm, MPI_STATUS_IGNORE));
                mpiCheck(MPI_Recv(sta, c, MPI_INT32_T, r, TAG_STATUS, m->comm, MPI_STATUS_IGNORE));
                mpiCheck(
                    MPI_Recv(cls, c * k, MPI_INT32_T, r, TAG_CLASS, m->comm, MPI_STATUS_IGNORE));
                mpiCheck(MPI_Recv(prob, c * k, MPI_FLOAT, r, TAG_PROB, m->comm, MPI_STATUS_IGNORE));
            }
            for (int j = 0; j < c; j++) {
                uint64_t i = ci[j];
                if (i >= n) {
                    out_of_range++;
                    continue;
                }
                if (seen[i] < 255) seen[i]++;
                all->index[i] = i;
                all->status[i] = cs[j];
                memcpy(all->topk_class + i * (uint64_t)k, cc + (size_t)j * k,
                       sizeof(int32_t) * (size_t)k);
                memcpy(all->topk_prob + i * (uint64_t)k, cp + (size_t)j * k,
                       sizeof(float) * (size_t)k);
            }
        }
    }
    for (uint64_t i = 0; i < mine->n_errors; i++)
        si_share_result_add_error(all, mine->err_index[i], mine->err_msg[i]);
    for (int r = 1; r < m->size; r++) recv_errors(m, r, all);
    sort_errors(all);
    uint64_t missing = 0, dup = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (seen[i] == 0 && missing++ == 0) bad_index = i;
        if (seen[i] > 1 && dup++ == 0 && missing == 0) bad_index = i;
    }
    if (missing || dup || out_of_range)
        st = si_error(SI_ERR_VERIFY,
                      "result verification failed: %llu of %llu input indices missing, %llu "
                      "duplicated, %llu out of range (first bad index %llu)",
                      (unsigned long long)missing, (unsigned long long)n, (unsigned long long)dup,
                      (unsigned long long)out_of_range, (unsigned long long)bad_index);
    for (uint64_t i = 0; i < n; i++) all->status[i] == 0 ? all->ok++ : all->failed++;
    for (int r = 0; r < m->size; r++) {
        const double *g = gathered + NSTAT * r;
        stats_all[r] = (si_share_result){.first = (uint64_t)g[0],
                                         .count = (uint64_t)g[1],
                                         .ok = (uint64_t)g[2],
                                         .failed = (uint64_t)g[3],
                                         .t_read = g[4],
                                         .t_decode = g[5],
                                         .t_infer = g[6],
                                         .t_post = g[7],
                                         .t_first = g[8],
                                         .t_total = g[9],
                                         .t_wait = g[10],
                                         .bytes_read = (uint64_t)g[11]};
    }
    free(seen);
    free(idx);
    free(sta);
    free(cls);
    free(prob);
    free(gathered);
    free(counts);
    return st;
}

int si_mpi_threads(const si_mpi *m) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    cpu_set_t set;
    int mine = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) mine = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    /* not bound apart (the mask spans the node): share the node's cores with the local ranks */
    if (online > 0 && mine >= online && m->local_size > 1) mine /= m->local_size;
    return mine > 0 ? mine : 1;
}
