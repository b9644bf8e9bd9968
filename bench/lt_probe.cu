// How far cuBLASLt's first heuristic answer is from its best on a transformer's Linear layers
// (issue 14: QKV, the attention's output projection and fc2 are half of a ViT's time, each run
// with the one algorithm cuBLASLt's heuristics rank first). For each shape, FP16 in, FP32
// accumulation, the bias epilogue, and for `r` shapes the residual as C with beta 1, laid out as
// the CUDA backend lays them (cuda/gemm.cu): every algorithm the heuristics return (up to 16),
// its median time of 20 after a warm-up, and the best against the first. Needs a GPU.
//
//   lt_probe [M N K r|-]...   (default: ViT-B/16, DeiT-S, DINOv2-S and ConvNeXt-T at batch 256)
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_util.cuh"

typedef struct {
    long m, n, k;
    int residual;
    const char *what;
} shape;

static int probe(cublasLtHandle_t lt, const shape *s, void *ws, size_t wsb, cudaStream_t st) {
    __half *x, *w, *b, *r, *y;
    CK(cudaMalloc(&x, s->m * s->k * 2));
    CK(cudaMalloc(&w, s->k * s->n * 2));
    CK(cudaMalloc(&b, s->n * 2));
    CK(cudaMalloc(&r, s->m * s->n * 2));
    CK(cudaMalloc(&y, s->m * s->n * 2));
    k_fill<<<1024, 256>>>(x, s->m * s->k, 1, 0.1f);
    k_fill<<<1024, 256>>>(w, s->k * s->n, 2, 0.1f);
    k_fill<<<1024, 256>>>(b, s->n, 3, 0.1f);
    k_fill<<<1024, 256>>>(r, s->m * s->n, 4, 0.1f);
    // row-major Y (M, N) = X W as column-major Y^T (N, M) = W^T X^T, as cuda/gemm.cu does
    lt_linear d;
    cublasLtMatmulHeuristicResult_t res[16];
    int got = 0;
    if (lt_linear_make(lt, s->m, s->n, s->k, b, wsb, &d, res, 16, &got)) return -1;
    float one = 1.f, beta = s->residual ? 1.f : 0.f, first = 0.f, best = 0.f;
    int besti = -1;
    double flop = 2.0 * s->m * s->n * s->k;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%s (M %ld, N %ld, K %ld%s): %d algorithms\n", s->what, s->m, s->n, s->k,
           s->residual ? ", residual" : "", got);
    for (int a = 0; a < got; a++) {
        float t[20];
        int ok = 1;
        for (int i = -3; i < 20 && ok; i++) {
            cudaEventRecord(e0, st);
            ok = cublasLtMatmul(lt, d.op, &one, w, d.la, x, d.lb, &beta, s->residual ? r : y, d.ld,
                                y, d.ld, &res[a].algo, ws, wsb, st) == CUBLAS_STATUS_SUCCESS;
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            if (i >= 0) cudaEventElapsedTime(&t[i], e0, e1);
        }
        if (!ok) {
            printf("  #%-2d failed\n", a);
            continue;
        }
        qsort(t, 20, sizeof t[0], cmp_float);
        float med = (t[9] + t[10]) / 2;
        int tile = 0, stages = 0, split = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&res[a].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                             sizeof split, NULL);
        printf("  #%-2d %.4f ms  %5.0f TFLOP/s  tile %d stages %d split %d ws %zu\n", a, med,
               flop / med / 1e9, tile, stages, split, res[a].workspaceSize);
        if (a == 0) first = med;
        if (besti < 0 || med < best) best = med, besti = a;
    }
    if (besti >= 0)
        printf("  best #%d %.4f ms against the first's %.4f: %.1f%% faster\n", besti, best, first,
               100.0 * (first / best - 1.0));
    lt_linear_free(&d);
    cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(r), cudaFree(y);
    return 0;
}

int main(int argc, char **argv) {
    static const shape dflt[] = {
        {50432, 2304, 768, 0, "ViT-B/16 QKV"},      {50432, 768, 768, 1, "ViT-B/16 proj"},
        {50432, 768, 3072, 1, "ViT-B/16 fc2"},      {50432, 3072, 768, 0, "ViT-B/16 fc1 (bare)"},
        {50432, 1152, 384, 0, "DeiT-S QKV"},        {50432, 384, 384, 1, "DeiT-S proj"},
        {50432, 384, 1536, 1, "DeiT-S fc2"},        {65792, 1152, 384, 0, "DINOv2-S QKV"},
        {65792, 384, 1536, 1, "DINOv2-S fc2"},      {802816, 96, 384, 1, "ConvNeXt-T fc2 s1"},
        {200704, 192, 768, 1, "ConvNeXt-T fc2 s2"}, {50176, 384, 1536, 1, "ConvNeXt-T fc2 s3"},
    };
    shape own[16];
    const shape *ss = dflt;
    int ns = (int)(sizeof dflt / sizeof dflt[0]);
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i + 3 < argc && ns < 16; i += 4)
            own[ns++] = (shape){atol(argv[i]), atol(argv[i + 1]), atol(argv[i + 2]),
                                argv[i + 3][0] == 'r', "given"};
        ss = own;
    }
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    size_t wsb = 64u << 20;
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    for (int i = 0; i < ns; i++)
        if (probe(lt, &ss[i], ws, wsb, st)) return 1;
    return 0;
}
