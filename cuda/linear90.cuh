// Linear + bias + GELU (or + residual) in one Hopper GEMM (cuda/linear_sm90.cu, CUTLASS): the interface gemm.cu
// uses. Built where CUTLASS's headers were found (SI_HAVE_LINEAR90); the functions below then
// exist, and a caller still asks si_cuda_linear90_ok for each node, on an sm_90 device only.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SI_LINEAR90_F16 = 0, SI_LINEAR90_BF16 = 1 };
enum { SI_LINEAR90_GELU = 0, SI_LINEAR90_GELU_TANH = 1, SI_LINEAR90_SWISH = 2, SI_LINEAR90_NONE = 3 };

// Y (m, n) = act(X (m, k) W (k, n) + bias (n) + C (m, n)), every matrix row-major and dense;
// borrows all. act: erf GELU, tanh GELU, x sigmoid(alpha x) (SiLU, QuickGELU) or none; C, a
// residual, NULL for none (only with act none)
typedef struct {
    int type, act;
    float alpha;
    int m, n, k;
    const void *x, *w, *bias, *c;
    void *y;
} si_linear90;

#ifdef SI_HAVE_LINEAR90
// the table's variants (tile shapes) for p's type, activation and residual: writes up to cap,
// returns count
int si_cuda_linear90_variants(const si_linear90 *p, int *out, int cap);
// 1 if variant runs p (shapes, alignment), with its workspace bytes in *ws; 0 if not
int si_cuda_linear90_ok(const si_linear90 *p, int variant, size_t *ws);
// enqueues p on s; ws holds at least si_cuda_linear90_ok's bytes (capturable into a graph)
cudaError_t si_cuda_linear90_run(const si_linear90 *p, int variant, void *ws, cudaStream_t s);
// the variant's tile, in words (for --verbose)
const char *si_cuda_linear90_tile(int variant);
#else // built without CUTLASS: no variant runs anything
static inline int si_cuda_linear90_variants(const si_linear90 *p, int *out, int cap) {
    return 0;
}
static inline int si_cuda_linear90_ok(const si_linear90 *p, int variant, size_t *ws) {
    return 0;
}
static inline cudaError_t si_cuda_linear90_run(const si_linear90 *p, int variant, void *ws,
                                               cudaStream_t s) {
    return cudaErrorNotSupported;
}
static inline const char *si_cuda_linear90_tile(int variant) {
    return "?";
}
#endif

#ifdef __cplusplus
}
#endif
