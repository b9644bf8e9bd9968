/* The CUDA backend's own convolution for few input channels (a vision model's stem: LeViT's 3 ->
 * 16 -> 32 -> 64 at stride 2). There cuDNN's implicit GEMM wants the image copied into a tensor
 * padded to 8 channels first, and runs any activation but ReLU as a pass of its own; this kernel
 * reads x where it lies, through its strides, and applies bias, residual and activation before
 * its one store. conv.cu times both at init and keeps the faster. Its reference is a plain C
 * loop in tests/test_gpu_narrowconv.cu; the si_ cases run through it in gpu_parity_*_nconv. */
#ifndef SI_CUDA_NARROWCONV_CUH
#define SI_CUDA_NARROWCONV_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cpu/kernels.h"

typedef struct {
    si_conv_shape s; /* n, c, h, w, m, kh, kw, sh, sw, pt, pl, oh, ow */
    const void *x;   /* element (n, c, y, x) at x[n*xst[0] + c*xst[1] + y*xst[2] + x*xst[3]] */
    int64_t xst[4];
    const void *w; /* (m, kh, kw, wc): KRSC, each tap's channels padded to wc >= c */
    int wc;
    const void *b; /* (m) bias, or NULL */
    const void *z; /* (n, oh, ow, m) residual added before act, or NULL */
    si_act act;
    void *y; /* (n, oh, ow, m) */
} si_nconv_args;

/* Whether the kernel runs this shape: group 1, dilation 1, c <= SI_NCONV_MAX_C, m a multiple of
 * 8, square kernels of 1 or 3, and each image's input and output addressable with 32-bit
 * indices. */
#define SI_NCONV_MAX_C 32
bool si_nconv_supported(const si_conv_shape *s);

/* Whether the kernel runs a: its shape supported, wc >= c, x's strides non-negative with one
 * image's span an int, and y, b and z 16-byte aligned. */
bool si_nconv_fits(const si_nconv_args *a);

/* y = act(conv(x, w) + b + z) on stream st, all tensors of element type t (si_gtype),
 * accumulating in float; cudaErrorInvalidValue where a does not fit. Borrows every pointer of a
 * (device memory). Launch only: capturable. */
cudaError_t si_k_nconv(cudaStream_t st, int t, const si_nconv_args *a);

#endif
