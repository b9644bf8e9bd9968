// What the GPU probes in bench/ share (gemm_gelu_probe.cu, lt_probe.cu): a check that returns -1
// with the failing call, seeded FP16 operands, the float comparison for medians, and a Linear
// layer's cuBLASLt descriptors as cuda/gemm.cu makes them.
#pragma once
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <stdio.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        long r_ = (long)(x);                                                                       \
        if (r_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %ld\n", __FILE__, __LINE__, #x, r_);                       \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

// uniform in [-scale / 2, scale / 2] from a hash of the index
__global__ void k_fill(__half *p, long n, unsigned seed, float scale) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2half(((float)(h & 0xffff) / 65535.f - 0.5f) * scale);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// Row-major Y (M, N) = X (M, K) W (K, N) + bias as column-major Y^T (N, M) = W^T X^T with the bias
// epilogue, FP16 in, FP32 accumulation; up to cap of cuBLASLt's heuristic candidates into res
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
} lt_linear;
static int lt_linear_make(cublasLtHandle_t lt, long M, long N, long K, const __half *bias,
                          size_t wsb, lt_linear *d, cublasLtMatmulHeuristicResult_t *res, int cap,
                          int *got) {
    CK(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                      sizeof bias));
    CK(cublasLtMatrixLayoutCreate(&d->la, CUDA_R_16F, N, K, N));
    CK(cublasLtMatrixLayoutCreate(&d->lb, CUDA_R_16F, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&d->ld, CUDA_R_16F, N, M, N));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                            sizeof wsb));
    *got = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, d->op, d->la, d->lb, d->ld, d->ld, pref, cap, res, got);
    cublasLtMatmulPreferenceDestroy(pref);
    CK(st);
    return 0;
}
static void lt_linear_free(lt_linear *d) {
    cublasLtMatrixLayoutDestroy(d->la);
    cublasLtMatrixLayoutDestroy(d->lb);
    cublasLtMatrixLayoutDestroy(d->ld);
    cublasLtMatmulDescDestroy(d->op);
}
