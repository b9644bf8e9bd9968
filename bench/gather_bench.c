/* Gathering GPU-resident per-image outputs (N rows x D floats on every rank's GPU, e.g. the
 * embeddings of --post embed) into one contiguous host buffer on rank 0, in rank order, two ways:
 *   host  cudaMemcpy D2H into pinned memory on every rank, then MPI_Gatherv to rank 0. Debian's
 *         OpenMPI is not CUDA-aware, so device pointers never reach MPI.
 *   nccl  grouped ncclSend from every rank / ncclRecv on rank 0 into one device buffer (rank 0's
 *         own rows copied D2D), then one D2H copy on rank 0 into pinned memory.
 * One rank per GPU (device = node-local rank % visible devices). Every element encodes its
 * (rank, row, col) exactly, and each method's result on rank 0 is checked after its timed
 * repeats, the last of which writes into poisoned buffers: a fast wrong answer fails the run.
 *
 *   mpirun -np G gather_bench [--rows 256,4096,65536] [--dims 512,2048] [--iters 10]
 *                             [--warmup 2] [--methods host,nccl] [--csv FILE]
 * Prints the median of --iters repeats per size and the effective GB/s (gathered bytes / time).
 * Exit codes: 0 every result verified, 1 a result was wrong, 2 usage, 77 no CUDA device on
 * some rank (every rank exits the same way). */
#define _POSIX_C_SOURCE 200809L /* setenv, gethostname under -std=c11 */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#define EXIT_SKIP 77
#define MAX_SIZES 16
#define MAX_ROWS  (1L << 21) /* the value encoding gives row and col 21 bits each */

static char host[256] = "?";
static int rank_id = -1;

static _Noreturn void die(const char *file, int line, const char *expr, const char *msg) {
    fprintf(stderr, "gather_bench: host %s rank %d: %s:%d: %s: %s\n", host, rank_id, file, line,
            expr, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

#define cudaCheck(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) die(__FILE__, __LINE__, #call, cudaGetErrorString(e_));             \
    } while (0)
#define ncclCheck(call)                                                                            \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            char m_[512];                                                                          \
            snprintf(m_, sizeof m_, "%s (%s)", ncclGetErrorString(r_), ncclGetLastError(NULL));    \
            die(__FILE__, __LINE__, #call, m_);                                                    \
        }                                                                                          \
    } while (0)
#define mpiCheck(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int l_ = 0;                                                                            \
            MPI_Error_string(rc_, s_, &l_);                                                        \
            die(__FILE__, __LINE__, #call, s_);                                                    \
        }                                                                                          \
    } while (0)

enum { HOST, NCCL, N_METHODS };
static const char *method_name[N_METHODS] = {"host", "nccl"};

typedef struct {
    long rows[MAX_SIZES], dims[MAX_SIZES];
    int n_rows, n_dims, iters, warmup;
    bool use[N_METHODS];
    const char *csv;
} options;

typedef struct {
    int rank, size;
    MPI_Comm comm;
    ncclComm_t nccl; /* NULL when the nccl method is not run */
    cudaStream_t stream;
    float *d_src;  /* (N, D): this rank's rows */
    float *d_recv; /* rank 0, nccl: (size, N, D) */
    float *h_send; /* pinned (N, D): the fill's staging and the host method's send buffer */
    float *h_out;  /* rank 0, pinned (size, N, D): where both methods deliver */
} bench;

/* splitmix64's finalizer: every bit of (rank, row, col) moves the value */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The value of element (row, col) of `rank`'s rows: an integer below 2^23, so the float holds it
 * exactly and is never NaN; a row landing at the wrong place or from the wrong rank differs. */
static float value_at(int rank, long row, long col) {
    uint64_t key = ((uint64_t)rank << 42) | ((uint64_t)row << 21) | (uint64_t)col;
    return (float)(mix(key) >> 41);
}

static int parse_list(const char *s, long *out, int cap, long lo, long hi) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || n == cap) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static const char usage[] =
    "usage: mpirun -np G gather_bench [--rows 256,4096,65536] [--dims 512,2048] [--iters 10]\n"
    "                                 [--warmup 2] [--methods host,nccl] [--csv FILE]\n"
    "  --rows LIST     rows per rank (1..2097152)\n"
    "  --dims LIST     floats per row (1..2097152)\n"
    "  --iters N       timed repeats per size and method; the median is reported\n"
    "  --warmup N      untimed repeats before them (NCCL connects lazily, on the first)\n"
    "  --methods LIST  host (D2H + MPI_Gatherv), nccl (ncclSend/ncclRecv + one D2H on rank 0)\n"
    "  --csv FILE      rank 0 writes method,ranks,rows_per_rank,dim,bytes_total,median_s,gbps,ok\n";

/* Returns NULL, "help" or the problem with the arguments. */
static const char *parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return "help";
        if (!v) return "an option without its value, or an unknown argument";
        i++;
        if (!strcmp(a, "--rows")) {
            if ((o->n_rows = parse_list(v, o->rows, MAX_SIZES, 1, MAX_ROWS)) <= 0)
                return "--rows: a comma list of 1..2097152";
        } else if (!strcmp(a, "--dims")) {
            if ((o->n_dims = parse_list(v, o->dims, MAX_SIZES, 1, MAX_ROWS)) <= 0)
                return "--dims: a comma list of 1..2097152";
        } else if (!strcmp(a, "--iters")) {
            if ((o->iters = atoi(v)) < 1) return "--iters: at least 1";
        } else if (!strcmp(a, "--warmup")) {
            if ((o->warmup = atoi(v)) < 0) return "--warmup: 0 or more";
        } else if (!strcmp(a, "--methods")) {
            o->use[HOST] = strstr(v, "host") != NULL;
            o->use[NCCL] = strstr(v, "nccl") != NULL;
            if (!o->use[HOST] && !o->use[NCCL]) return "--methods: host, nccl or host,nccl";
        } else if (!strcmp(a, "--csv")) {
            o->csv = v;
        } else {
            return "unknown option";
        }
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills this rank's (n, d) rows on the device, through the pinned staging buffer. */
static void fill(bench *b, long n, long d) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        for (long j = 0; j < d; j++) b->h_send[i * d + j] = value_at(b->rank, i, j);
    cudaCheck(
        cudaMemcpy(b->d_src, b->h_send, (size_t)(n * d) * sizeof(float), cudaMemcpyHostToDevice));
}

/* Rank 0: the number of wrong elements in h_out, and the first one described in `where`. */
static long verify(const bench *b, long n, long d, char *where, size_t cap) {
    long bad = 0, rows = (long)b->size * n;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (long g = 0; g < rows; g++) {
        int r = (int)(g / n);
        long i = g % n;
        for (long j = 0; j < d; j++) bad += b->h_out[g * d + j] != value_at(r, i, j);
    }
    for (long g = 0; bad && g < rows; g++)
        for (long j = 0; j < d; j++) {
            float want = value_at((int)(g / n), g % n, j), got = b->h_out[g * d + j];
            if (got != want) {
                snprintf(where, cap, "first at rank %ld row %ld col %ld: got %.9g, want %.9g",
                         g / n, g % n, j, (double)got, (double)want);
                return bad;
            }
        }
    return bad;
}

/* Rank 0 poisons where the results land (NaN bytes), so the repeat that follows must write all. */
static void poison(bench *b, long n, long d) {
    if (b->rank != 0) return;
    size_t bytes = (size_t)b->size * (size_t)(n * d) * sizeof(float);
    memset(b->h_out, 0xff, bytes);
    if (b->d_recv) cudaCheck(cudaMemset(b->d_recv, 0xff, bytes));
    cudaCheck(cudaDeviceSynchronize());
}

/* One gather, timed from a barrier to the rows being in rank 0's h_out; returns the slowest
 * rank's seconds (rank 0's, in practice: it finishes last). */
static double gather_once(bench *b, int method, long n, long d, MPI_Datatype row, const int *counts,
                          const int *displs) {
    size_t count = (size_t)(n * d), bytes = count * sizeof(float);
    mpiCheck(MPI_Barrier(b->comm));
    double t0 = MPI_Wtime();
    if (method == HOST) {
        /* rank 0 copies its own rows straight to their place and gathers in place */
        cudaCheck(cudaMemcpy(b->rank == 0 ? b->h_out : b->h_send, b->d_src, bytes,
                             cudaMemcpyDeviceToHost));
        mpiCheck(MPI_Gatherv(b->rank == 0 ? MPI_IN_PLACE : b->h_send, (int)n, row, b->h_out, counts,
                             displs, row, 0, b->comm));
    } else {
        if (b->rank == 0) {
            cudaCheck(
                cudaMemcpyAsync(b->d_recv, b->d_src, bytes, cudaMemcpyDeviceToDevice, b->stream));
            ncclCheck(ncclGroupStart());
            for (int r = 1; r < b->size; r++)
                ncclCheck(ncclRecv(b->d_recv + (size_t)r * count, count, ncclFloat, r, b->nccl,
                                   b->stream));
            ncclCheck(ncclGroupEnd());
            cudaCheck(cudaMemcpyAsync(b->h_out, b->d_recv, (size_t)b->size * bytes,
                                      cudaMemcpyDeviceToHost, b->stream));
        } else {
            ncclCheck(ncclGroupStart());
            ncclCheck(ncclSend(b->d_src, count, ncclFloat, 0, b->nccl, b->stream));
            ncclCheck(ncclGroupEnd());
        }
        cudaCheck(cudaStreamSynchronize(b->stream));
    }
    double t = MPI_Wtime() - t0, slowest = 0;
    mpiCheck(MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, b->comm));
    return slowest;
}

/* Warm-up, then iters timed repeats (the last into poisoned buffers), then the check on rank 0.
 * Returns the median seconds; *bad gets the wrong elements (rank 0). */
static double measure(bench *b, const options *o, int method, long n, long d, long *bad,
                      char *where, size_t cap) {
    MPI_Datatype row;
    mpiCheck(MPI_Type_contiguous((int)d, MPI_FLOAT, &row));
    mpiCheck(MPI_Type_commit(&row));
    int *counts = malloc(sizeof(int) * 2 * (size_t)b->size), *displs = counts + b->size;
    double *t = malloc(sizeof(double) * (size_t)o->iters);
    if (!counts || !t) die(__FILE__, __LINE__, "malloc", "no memory");
    for (int r = 0; r < b->size; r++) counts[r] = (int)n, displs[r] = (int)(r * n);
    for (int k = 0; k < o->warmup; k++) gather_once(b, method, n, d, row, counts, displs);
    for (int k = 0; k < o->iters; k++) {
        if (k == o->iters - 1) poison(b, n, d);
        t[k] = gather_once(b, method, n, d, row, counts, displs);
    }
    *bad = b->rank == 0 ? verify(b, n, d, where, cap) : 0;
    qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
    double med = o->iters % 2 ? t[o->iters / 2] : 0.5 * (t[o->iters / 2 - 1] + t[o->iters / 2]);
    free(t);
    free(counts);
    mpiCheck(MPI_Type_free(&row));
    return med;
}

int main(int argc, char **argv) {
    mpiCheck(MPI_Init(&argc, &argv));
    bench b = {.comm = MPI_COMM_WORLD};
    mpiCheck(MPI_Comm_rank(b.comm, &b.rank));
    mpiCheck(MPI_Comm_size(b.comm, &b.size));
    rank_id = b.rank;
    gethostname(host, sizeof host - 1);
    options o = {.rows = {256, 4096, 65536},
                 .n_rows = 3,
                 .dims = {512, 2048},
                 .n_dims = 2,
                 .iters = 10,
                 .warmup = 2,
                 .use = {true, true}};
    const char *problem = parse_args(argc, argv, &o);
    if (problem) { /* every rank parsed the same arguments: all leave the same way */
        bool help = !strcmp(problem, "help");
        if (b.rank == 0 && help) fputs(usage, stdout);
        if (b.rank == 0 && !help) fprintf(stderr, "gather_bench: %s\n%s", problem, usage);
        MPI_Finalize();
        return help ? 0 : 2;
    }
    long n_max = 0, d_max = 0;
    for (int i = 0; i < o.n_rows; i++) n_max = o.rows[i] > n_max ? o.rows[i] : n_max;
    for (int i = 0; i < o.n_dims; i++) d_max = o.dims[i] > d_max ? o.dims[i] : d_max;
    if (n_max * b.size > INT_MAX) { /* MPI_Gatherv's displacements, in rows */
        if (b.rank == 0) fprintf(stderr, "gather_bench: ranks x rows must stay below 2^31\n");
        MPI_Finalize();
        return 2;
    }

    /* no device on any rank: every rank reports the skip */
    int devices = 0, fewest = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    (void)cudaGetLastError();
    mpiCheck(MPI_Allreduce(&devices, &fewest, 1, MPI_INT, MPI_MIN, b.comm));
    if (fewest == 0) {
        if (b.rank == 0) printf("gather_bench: a rank sees no CUDA device: skipped\n");
        MPI_Finalize();
        return EXIT_SKIP;
    }
    MPI_Comm node;
    int local = 0, local_size = 1;
    mpiCheck(MPI_Comm_split_type(b.comm, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &local));
    mpiCheck(MPI_Comm_size(node, &local_size));
    mpiCheck(MPI_Comm_free(&node));
    int dev = local % devices, shared = local_size > devices, any_shared = 0;
    mpiCheck(MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, b.comm));
    cudaCheck(cudaSetDevice(dev));
    cudaCheck(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));

    /* who runs where, in rank order */
    char line[256], *lines = b.rank == 0 ? malloc(sizeof line * (size_t)b.size) : NULL;
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    snprintf(line, sizeof line,
             "rank %d: host %.64s, node-local rank %d, GPU %d (%.64s, PCI %02x:%02x)", b.rank, host,
             local, dev, prop.name, prop.pciBusID, prop.pciDeviceID);
    mpiCheck(MPI_Gather(line, sizeof line, MPI_CHAR, lines, sizeof line, MPI_CHAR, 0, b.comm));
    if (b.rank == 0) {
        int nv = 0;
        ncclCheck(ncclGetVersion(&nv));
        printf("gather_bench: %d rank%s, NCCL %d.%d.%d, %d warm-up + %d timed repeats, median\n",
               b.size, b.size > 1 ? "s" : "", nv / 10000, nv / 100 % 100, nv % 100, o.warmup,
               o.iters);
        for (int r = 0; r < b.size; r++) printf("  %s\n", lines + (size_t)r * sizeof line);
    }
    free(lines);
    if (o.use[NCCL] && any_shared) { /* NCCL refuses two ranks on one GPU */
        o.use[NCCL] = false;
        if (b.rank == 0)
            printf("gather_bench: more ranks than GPUs on a node: the nccl method is skipped\n");
    }

    /* malloc and point: one device and one pinned allocation, for the largest size */
    size_t per_rank = (size_t)(n_max * d_max), all = (size_t)b.size * per_rank;
    bool root = b.rank == 0;
    size_t dev_floats = per_rank + (root && o.use[NCCL] ? all : 0);
    size_t pin_floats = per_rank + (root ? all : 0);
    float *dmem = NULL, *pmem = NULL;
    cudaCheck(cudaMalloc((void **)&dmem, dev_floats * sizeof(float)));
    cudaCheck(cudaMallocHost((void **)&pmem, pin_floats * sizeof(float)));
    b.d_src = dmem;
    b.d_recv = root && o.use[NCCL] ? dmem + per_rank : NULL;
    b.h_send = pmem;
    b.h_out = root ? pmem + per_rank : NULL;

    if (o.use[NCCL]) {
        /* env.sh sets it; keep NVLink multicast off when this runs without env.sh too */
        setenv("NCCL_NVLS_ENABLE", "0", 0);
        ncclUniqueId id;
        if (root) ncclCheck(ncclGetUniqueId(&id));
        mpiCheck(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, b.comm));
        ncclCheck(ncclCommInitRank(&b.nccl, b.size, id, b.rank));
    }

    FILE *csv = NULL;
    int csv_failed = 0;
    if (root && o.csv) {
        csv = fopen(o.csv, "w");
        if (csv)
            fprintf(csv, "method,ranks,rows_per_rank,dim,bytes_total,median_s,gbps,ok\n");
        else
            csv_failed = 1, perror(o.csv);
    }
    mpiCheck(MPI_Bcast(&csv_failed, 1, MPI_INT, 0, b.comm));
    long errors = 0; /* rank 0's count of wrong results */
    if (!csv_failed) {
        if (root)
            printf("%-6s %5s %10s %6s %11s %11s %9s  %s\n", "method", "ranks", "rows/rank", "dim",
                   "MB gathered", "median ms", "GB/s", "verified");
        for (int di = 0; di < o.n_dims; di++)
            for (int ni = 0; ni < o.n_rows; ni++) {
                long n = o.rows[ni], d = o.dims[di];
                fill(&b, n, d);
                double bytes = (double)b.size * (double)n * (double)d * sizeof(float);
                for (int m = 0; m < N_METHODS; m++) {
                    if (!o.use[m]) continue;
                    char where[256] = "";
                    long bad = 0;
                    double med = measure(&b, &o, m, n, d, &bad, where, sizeof where);
                    if (!root) continue;
                    double gbps = bytes / med / 1e9;
                    printf("%-6s %5d %10ld %6ld %11.2f %11.3f %9.2f  %s\n", method_name[m], b.size,
                           n, d, bytes / 1e6, med * 1e3, gbps, bad ? "WRONG" : "yes");
                    if (bad)
                        fprintf(stderr, "gather_bench: %s, %ld rows x %ld: %ld wrong values, %s\n",
                                method_name[m], n, d, bad, where);
                    if (csv)
                        fprintf(csv, "%s,%d,%ld,%ld,%.0f,%.9g,%.6g,%d\n", method_name[m], b.size, n,
                                d, bytes, med, gbps, bad == 0);
                    errors += bad != 0;
                    fflush(stdout);
                }
            }
    }
    if (csv && fclose(csv) != 0) perror(o.csv), errors++;
    /* every rank leaves with rank 0's verdict */
    mpiCheck(MPI_Bcast(&errors, 1, MPI_LONG, 0, b.comm));
    if (b.nccl) ncclCheck(ncclCommDestroy(b.nccl));
    cudaCheck(cudaFreeHost(pmem));
    cudaCheck(cudaFree(dmem));
    cudaCheck(cudaStreamDestroy(b.stream));
    if (root && errors) printf("gather_bench: %ld result%s wrong\n", errors, errors > 1 ? "s" : "");
    MPI_Finalize();
    return csv_failed ? 2 : errors ? 1 : 0;
}
