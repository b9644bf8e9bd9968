// Whether cuDNN's graph API can run a Linear layer with its bias and ONNX's erf GELU as one
// fused kernel at cuBLASLt's speed (issue 14: fc1 + GELU is a third of a ViT's time, and
// cuBLASLt's GELU epilogue is the tanh approximation, so the CUDA backend runs the GEMM with its
// bias and then an erf-GELU pass over the 4x-wide hidden tensor). For each shape, FP16:
//   lt         cuBLASLt, bias epilogue (the GEMM alone: the bound a fused kernel could reach)
//   lt + gelu  the same and an erf-GELU pass (what the backend does today)
//   cudnn #k   cuDNN's matmul -> add bias -> GELU_FWD graph, each engine config its heuristics
//              give, with the max |diff| of its output against lt + gelu
// Medians of 20 after a warm-up. Needs a GPU. (The erf-GELU pass here is a plain one, slower than
// the backend's vectorised map: docs/performance.md compares with the backend's.)
//
//   gemm_gelu_probe [M K N]...      (default: ViT-B/16, DeiT-S and ConvNeXt-T fc1 at batch 256)
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe_util.cuh"

__global__ void k_gelu(__half *y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float x = __half2float(y[i]);
        y[i] = __float2half(0.5f * x * (1.f + erff(x * 0.70710678118654752f)));
    }
}

// What time_ms runs: one of the three launches below, with its arguments.
typedef struct {
    int what; // 0: cuBLASLt, 1: the GELU pass, 2: cuDNN's plan
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    const cublasLtMatmulAlgo_t *algo;
    cudnnHandle_t h;
    cudnnBackendDescriptor_t plan, vp;
    const void *a, *b;
    void *y, *ws;
    size_t wsb;
    long n;
    cudaStream_t s;
    int failed; // a launch's error status, 0 if none
} launch;

static void run(launch *L) {
    const float one = 1, zero = 0;
    long r = 0;
    if (L->what == 0)
        r = cublasLtMatmul(L->lt, L->op, &one, L->a, L->la, L->b, L->lb, &zero, L->y, L->ld, L->y,
                           L->ld, L->algo, L->ws, L->wsb, L->s);
    else if (L->what == 1)
        k_gelu<<<132 * 8, 256, 0, L->s>>>((__half *)L->y, L->n);
    else
        r = cudnnBackendExecute(L->h, L->plan, L->vp);
    if (r) L->failed = (int)r;
}

// the median ms of 20 runs of L after one more
static float time_ms(launch *L) {
    enum { REPS = 20 };
    float t[REPS];
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    run(L);
    cudaStreamSynchronize(L->s);
    for (int r = 0; r < REPS; r++) {
        cudaEventRecord(a, L->s);
        run(L);
        cudaEventRecord(b, L->s);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[r], a, b);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    qsort(t, REPS, sizeof t[0], cmp_float);
    return t[REPS / 2];
}

typedef cudnnBackendDescriptor_t desc;

static desc make(cudnnBackendDescriptorType_t type) {
    desc d = NULL;
    cudnnBackendCreateDescriptor(type, &d);
    return d;
}

static int set(desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
               int64_t n, const void *v) {
    CK(cudnnBackendSetAttribute(d, name, type, n, v));
    return 0;
}

// a row-major (1, r, c) tensor, uid, half or (virtual) float
static desc tensor(int64_t r, int64_t c, int64_t uid, bool virt) {
    desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t dt = virt ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF;
    int64_t dims[3] = {1, r, c}, strides[3] = {r * c, c, 1}, align = 16;
    if (set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims) ||
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides) ||
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt) ||
        cudnnBackendFinalize(t))
        return NULL;
    return t;
}

static desc pointwise(cudnnPointwiseMode_t mode, desc x, desc b, desc y) {
    desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        cudnnBackendFinalize(pw))
        return NULL;
    op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &pw) ||
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        (b &&
         set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        cudnnBackendFinalize(op))
        return NULL;
    return op;
}

// y (M, N) = gelu(x (M, K) w (K, N) + bias (N)) through cuDNN; every engine config its
// heuristics offer, timed and checked against ref
static int cudnn_case(cudnnHandle_t h, cudaStream_t s, long M, long K, long N, __half *x, __half *w,
                      __half *bias, __half *y, const __half *ref, void *ws, size_t wsb,
                      float lt_ms) {
    enum { UX = 1, UW, UB, UY, UC, UD };
    desc tx = tensor(M, K, UX, false), tw = tensor(K, N, UW, false), tb = tensor(1, N, UB, false),
         ty = tensor(M, N, UY, false), tc = tensor(M, N, UC, true), td = tensor(M, N, UD, true);
    if (!tx || !tw || !tb || !ty || !tc || !td) return -1;
    desc mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    if (set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
        cudnnBackendFinalize(mm))
        return -1;
    desc op_mm = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    if (set(op_mm, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx) ||
        set(op_mm, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw) ||
        set(op_mm, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tc) ||
        set(op_mm, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm) ||
        cudnnBackendFinalize(op_mm))
        return -1;
    desc op_add = pointwise(CUDNN_POINTWISE_ADD, tc, tb, td);
    desc op_gelu = pointwise(CUDNN_POINTWISE_GELU_FWD, td, NULL, ty);
    if (!op_add || !op_gelu) return -1;
    desc ops[3] = {op_mm, op_add, op_gelu};
    desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 3, ops) ||
        set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h))
        return -1;
    cudnnStatus_t fs = cudnnBackendFinalize(graph);
    if (fs) {
        printf("  cudnn: the graph is refused: %s\n", cudnnGetErrorString(fs));
        return 0;
    }
    for (int mode_i = 0; mode_i < 2; mode_i++) {
        cudnnBackendHeurMode_t mode = mode_i ? CUDNN_HEUR_MODE_B : CUDNN_HEUR_MODE_A;
        desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        if (set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &graph) ||
            set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode))
            return -1;
        if ((fs = cudnnBackendFinalize(heur))) {
            printf("  cudnn heuristics %c: %s\n", mode_i ? 'B' : 'A', cudnnGetErrorString(fs));
            continue;
        }
        enum { MAXCFG = 8 };
        desc cfg[MAXCFG];
        for (int k = 0; k < MAXCFG; k++) cfg[k] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, MAXCFG, &got, cfg));
        printf("  cudnn heuristics %c: %ld engine configs\n", mode_i ? 'B' : 'A', (long)got);
        for (int k = 0; k < got; k++) {
            desc plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            if (set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &cfg[k]))
                return -1;
            cudaEvent_t c0, c1;
            cudaEventCreate(&c0), cudaEventCreate(&c1);
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            fs = cudnnBackendFinalize(plan);
            clock_gettime(CLOCK_MONOTONIC, &b);
            double build = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
            if (fs) {
                printf("  cudnn %c#%d: plan refused (%s)\n", mode_i ? 'B' : 'A', k,
                       cudnnGetErrorString(fs));
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            int64_t need = 0, n_ws = 0;
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n_ws, &need);
            char name[256] = "";
            int64_t nlen = 0;
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                     CUDNN_TYPE_CHAR, sizeof name - 1, &nlen, name);
            name[nlen < (int64_t)sizeof name - 1 ? nlen : (int64_t)sizeof name - 1] = 0;
            if ((size_t)need > wsb) {
                printf("  cudnn %c#%d: needs %ld bytes of workspace\n", mode_i ? 'B' : 'A', k,
                       (long)need);
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            void *ptrs[4] = {x, w, bias, y};
            int64_t uids[4] = {UX, UW, UB, UY};
            desc vp = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
            if (set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 4, uids) ||
                set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 4, ptrs) ||
                set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) ||
                cudnnBackendFinalize(vp))
                return -1;
            cudaMemsetAsync(y, 0xff, (size_t)M * N * 2, s);
            launch L;
            memset(&L, 0, sizeof L);
            L.what = 2;
            L.h = h;
            L.plan = plan;
            L.vp = vp;
            L.s = s;
            L.failed = 0;
            float ms = time_ms(&L);
            if (L.failed) {
                printf("  cudnn %c#%d: execute failed (%s)\n", mode_i ? 'B' : 'A', k,
                       cudnnGetErrorString((cudnnStatus_t)L.failed));
            } else {
                long n = M * N;
                __half *hy = (__half *)malloc((size_t)n * 2), *hr = (__half *)malloc((size_t)n * 2);
                cudaMemcpy(hy, y, (size_t)n * 2, cudaMemcpyDeviceToHost);
                cudaMemcpy(hr, ref, (size_t)n * 2, cudaMemcpyDeviceToHost);
                double md = 0;
                for (long i = 0; i < n; i++) {
                    double d = fabs((double)__half2float(hy[i]) - (double)__half2float(hr[i]));
                    if (!(d <= md)) md = d; // NaN sticks
                }
                free(hy), free(hr);
                printf("  cudnn %c#%d: %7.3f ms, %5.0f TFLOP/s, %.2fx lt, max|diff| vs lt + gelu "
                       "%.4g, "
                       "plan built in %.2f s, %.60s\n",
                       mode_i ? 'B' : 'A', k, ms, 2.0 * M * N * K / ms / 1e9, ms / lt_ms, md, build,
                       name);
            }
            cudnnBackendDestroyDescriptor(vp);
            cudnnBackendDestroyDescriptor(plan);
        }
    }
    return 0;
}

static int lt_case(cublasLtHandle_t lt, cudaStream_t s, long M, long K, long N, __half *x,
                   __half *w, __half *bias, __half *y, void *ws, size_t wsb, float *lt_ms) {
    // row-major Y (M, N) = X (M, K) W (K, N): column-major Y^T (N, M) = W^T (N, K) X^T (K, M)
    lt_linear d;
    cublasLtMatmulHeuristicResult_t res[8];
    int got = 0;
    if (lt_linear_make(lt, M, N, K, bias, wsb, &d, res, 8, &got)) return -1;
    launch L;
    memset(&L, 0, sizeof L);
    L.what = 0;
    L.lt = lt;
    L.op = d.op;
    L.la = d.la;
    L.lb = d.lb;
    L.ld = d.ld;
    L.a = w;
    L.b = x;
    L.y = y;
    L.ws = ws;
    L.wsb = wsb;
    L.n = M * N;
    L.s = s;
    L.failed = 0;
    float best = 1e30f;
    int bi = 0;
    for (int k = 0; k < got; k++) { // the best of its first 8 (the backend times them too)
        L.algo = &res[k].algo;
        float ms = time_ms(&L);
        if (ms < best && !L.failed) best = ms, bi = k;
    }
    L.what = 1;
    float gelu = time_ms(&L);
    cudaMemsetAsync(y, 0, (size_t)M * N * 2, s);
    L.what = 0, L.algo = &res[bi].algo;
    run(&L);
    L.what = 1;
    run(&L);
    cudaStreamSynchronize(s);
    printf("  lt: %7.3f ms, %5.0f TFLOP/s; erf-GELU pass %.3f ms (%.0f GB/s); lt + gelu %.3f ms\n",
           best, 2.0 * M * N * K / best / 1e9, gelu, 4.0 * M * N / gelu / 1e6, best + gelu);
    *lt_ms = best;
    lt_linear_free(&d);
    return 0;
}

int main(int argc, char **argv) {
    long shapes[16][3] = {{256 * 197, 768, 3072},
                          {256 * 197, 384, 1536},
                          {256 * 56 * 56, 96, 384},
                          {256 * 14 * 14, 384, 1536}};
    int n = 4;
    if (argc > 3)
        for (n = 0; n < 16 && 3 * n + 3 < argc; n++)
            for (int d = 0; d < 3; d++) shapes[n][d] = atol(argv[1 + 3 * n + d]);
    cudnnHandle_t h;
    cublasLtHandle_t lt;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudnnCreate(&h));
    CK(cudnnSetStream(h, s));
    CK(cublasLtCreate(&lt));
    printf("cuDNN %zu, cuBLASLt %zu\n", cudnnGetVersion(), cublasLtGetVersion());
    const size_t wsb = (size_t)256 << 20;
    for (int c = 0; c < n; c++) {
        long M = shapes[c][0], K = shapes[c][1], N = shapes[c][2];
        printf("M %ld K %ld N %ld (%.1f GFLOP)\n", M, K, N, 2.0 * M * N * K / 1e9);
        __half *x, *w, *b, *y, *ref;
        void *ws;
        CK(cudaMalloc(&x, (size_t)M * K * 2));
        CK(cudaMalloc(&w, (size_t)K * N * 2));
        CK(cudaMalloc(&b, (size_t)N * 2));
        CK(cudaMalloc(&y, (size_t)M * N * 2));
        CK(cudaMalloc(&ref, (size_t)M * N * 2));
        CK(cudaMalloc(&ws, wsb));
        k_fill<<<1024, 256, 0, s>>>(x, M * K, 1, 4.f);
        k_fill<<<1024, 256, 0, s>>>(w, K * N, 2, 4.f / (float)K);
        k_fill<<<64, 256, 0, s>>>(b, N, 3, 1.f);
        float lt_ms = 0;
        if (lt_case(lt, s, M, K, N, x, w, b, ref, ws, wsb, &lt_ms)) return 1;
        if (cudnn_case(h, s, M, K, N, x, w, b, y, ref, ws, wsb, lt_ms)) return 1;
        cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(y), cudaFree(ref), cudaFree(ws);
    }
    return 0;
}
