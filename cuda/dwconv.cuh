/* The CUDA backend's own depthwise convolution (group == C_in == C_out, dilation 1) on NHWC
 * tensors, with the conv's epilogue (bias, residual, activation) and optionally the producer's
 * (prologue fusion: the conv that wrote x left out its bias and activation, and this kernel
 * applies them to each input value as it loads it), so each of x and y crosses memory once.
 * cuDNN runs every other convolution. The CPU backend is its reference: tests/gpu_tests.cmake
 * holds the two to each other on the si_dwconv_* cases of tests/make_ref_cases.py. */
#ifndef SI_CUDA_DWCONV_CUH
#define SI_CUDA_DWCONV_CUH

#include <cuda_runtime.h>

#include "cpu/kernels.h"

typedef struct {
    si_conv_shape s; /* n, c (== m == group), h, w, kh, kw, sh, sw, pt, pl, oh, ow */
    const void *x;   /* (n, h, w, c) */
    const float *w;  /* (kh, kw, c) float whatever t is: channel-last, unlike cuDNN's KRSC */
    const void *b;   /* (c) bias, or NULL */
    const void *z;   /* (n, oh, ow, c) residual added before act, or NULL */
    si_act act;
    /* the prologue: every in-bounds x becomes pact(x + pb[c]) before the conv (padding stays
     * zero: it pads the activated tensor); pb NULL and pact none leave x as it is */
    const void *pb; /* (c) or NULL */
    si_act pact;
    void *y; /* (n, oh, ow, c) */
} si_dwconv_args;

/* Whether the kernel runs this shape: group == c == m > 1, dilation 1, kernels up to
 * SI_DWCONV_MAX_K and strides up to 4 in each direction, and one image's input and output
 * addressable with 32-bit indices. */
#define SI_DWCONV_MAX_K 11
bool si_dwconv_supported(const si_conv_shape *s);

/* y = act(dwconv(pro(x), w) + b + z) on stream st, all tensors of element type t (si_gtype),
 * accumulating in float. Borrows every pointer of a (device memory). Launch only: capturable. */
cudaError_t si_k_dwconv(cudaStream_t st, int t, const si_dwconv_args *a);

#endif
