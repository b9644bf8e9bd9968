/* The CUDA backend's own kernels (everything cuDNN and cuBLASLt do not do), as launchers the
 * backend calls on a stream. Activations are T = float, __half or __nv_bfloat16; every kernel
 * computes in float. Each kernel has a CPU twin in src/cpu/kernels.c, and the backend's parity
 * tests (tests/gpu_tests.cmake) hold them to it.
 *
 * Layout: 4-D activations live in NHWC (what cuDNN's tensor-core convolutions want). Most ops
 * therefore work on a tview: a tensor's logical dims (ONNX's order) with the physical element
 * strides of its storage, so one kernel serves NCHW constants, NHWC activations, broadcasts
 * (stride 0), slices, transposes and concat/split sub-blocks alike. */
#ifndef SI_CUDA_KERNELS_CUH
#define SI_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cpu/kernels.h"

#define SI_TV_MAXD 8

/* A strided view: element (i0..i{nd-1}) is at off + sum(i_d * st[d]). */
typedef struct {
    int nd;
    int64_t dims[SI_TV_MAXD];
    int64_t st[SI_TV_MAXD];
    int64_t off;
} si_tview;

/* Element types of the backend's tensors. */
typedef enum { SI_GT_F32 = 0, SI_GT_F16, SI_GT_BF16 } si_gtype;
size_t si_gtype_size(int t);

/* What k_map computes per element (y, a, b, c are views over the same logical dims). */
typedef enum {
    SI_MAP_COPY = 0, /* y = a (with type conversion) */
    SI_MAP_BINARY,   /* y = act(a op b) */
    SI_MAP_FMA,      /* y = a * b + c (BatchNormalization left unfolded) */
    SI_MAP_ACT       /* y = act(a) */
} si_map_kind;

/* y[..] = f(a[..], b[..], c[..]) over y's dims; ty is y's type, ta the inputs'. Reorders and
 * merges dims so that y is walked in memory order and contiguous runs index cheaply. */
cudaError_t si_k_map(cudaStream_t s, int kind, int binop, si_act act, int ty, void *y, si_tview vy,
                     int ta, const void *a, si_tview va, const void *b, si_tview vb, const void *c,
                     si_tview vc);

/* conv epilogue in place on NHWC y (n elements, k channels): y = act(y + bias[c] + z); bias
 * (k) and z (like y) are of type t, either may be NULL */
cudaError_t si_k_bias_act(cudaStream_t s, int t, void *y, int64_t n, int k, const void *bias,
                          const void *z, si_act act);

/* y = act(a op b) with a, y NHWC (n, hw, c) and b one value per (image, channel): b[img * bs + c]
 * (bs = c, or 0 when b is shared by the batch): squeeze-and-excitation's scaling */
cudaError_t si_k_chan_binary(cudaStream_t s, int t, int op, si_act act, void *y, const void *a,
                             const void *b, int64_t n, int64_t hw, int c, int64_t bs);

/* pooling on NHWC (s->n, s->h, s->w, s->c) -> (n, oh, ow, c) */
cudaError_t si_k_maxpool(cudaStream_t s, int t, const si_pool_shape *p, const void *x, void *y);
cudaError_t si_k_avgpool(cudaStream_t s, int t, const si_pool_shape *p, int count_include_pad,
                         const void *x, void *y);
/* NHWC (n, hw, c) -> (n, c) means */
cudaError_t si_k_global_avgpool(cudaStream_t s, int t, int n, int64_t hw, int c, const void *x,
                                void *y);

/* Row-major ops (inputs and outputs contiguous in ONNX's order), twins of the CPU kernels. */
cudaError_t si_k_softmax(cudaStream_t s, int t, const void *x, int64_t outer, int64_t len,
                         int64_t inner, void *y);
/* LayerNormalization: rows of len, scale (ns) and bias (nb, or NULL) repeated over a row; the
 * fused neighbours (NULL if none, rows of len like x): x times mul first, res added last.
 * InstanceNormalization: (n, c, inner), scale and bias per channel. Scale and bias in type t. */
cudaError_t si_k_layernorm(cudaStream_t s, int t, const void *x, const void *mul, int64_t rows,
                           int64_t len, const void *scale, int64_t ns, const void *bias, int64_t nb,
                           const void *res, float eps, void *y);
cudaError_t si_k_instancenorm(cudaStream_t s, int t, const void *x, int64_t n, int64_t c,
                              int64_t inner, const void *scale, const void *bias, float eps,
                              void *y);
cudaError_t si_k_reduce(cudaStream_t s, int t, int op, int ndim, const int64_t *x_dims,
                        const void *x, const uint8_t *reduce, void *y);
cudaError_t si_k_gather(cudaStream_t s, int t, const void *x, int64_t outer, int64_t len,
                        int64_t inner, const int64_t *idx_dev, int64_t n, void *y);
/* Rotary embedding of (rows, t, d) x into y (rotary.c's SI_OP_ROTARY), x's rows where rg says
 * they start: tokens before skip copied, the others rotated with row t - skip of c and s
 * ((t - skip, d), the activations' type); half: partners d/2 apart. Twin of si_cpu_rotary. */
cudaError_t si_k_rotary(cudaStream_t s, int t, const void *x, const si_row_geom *rg, int64_t rows,
                        int64_t tok, int64_t d, int64_t skip, bool half, const void *c,
                        const void *sn, void *y);
/* Rows of d, each where rg says it starts in x: y = x s[(r / div) % mod] / max(|x row|_2, eps)
 * (s NULL or mod 0: 1), y row-major, 4 to 32 lanes a row, the sum in float. Twin of
 * si_cpu_rownorm. */
cudaError_t si_k_rownorm(cudaStream_t s, int t, const void *x, const si_row_geom *rg, int64_t rows,
                         int64_t d, float eps, const void *sc, int64_t div, int64_t mod, void *y);
/* GatherND, GatherElements and ScatterElements by their geometry (engine/ops.h), the indices
 * int64 on the device; twins of si_cpu_gather_nd and friends, an index out of range (refused at
 * load) read as 0 or skipped just as there. ScatterElements copies x (nx values) into y, then
 * one thread per column along the axis reduces its updates in index order. */
cudaError_t si_k_gather_nd(cudaStream_t s, int t, const si_gathernd_geom *geo, const void *x,
                           const int64_t *idx_dev, void *y);
cudaError_t si_k_gather_elements(cudaStream_t s, int t, const si_elements_geom *geo, const void *x,
                                 const int64_t *idx_dev, void *y);
cudaError_t si_k_scatter_elements(cudaStream_t s, int t, const si_elements_geom *geo, int red,
                                  const void *x, int64_t nx, const int64_t *idx_dev,
                                  const void *upd, void *y);
cudaError_t si_k_pad(cudaStream_t s, int t, int mode, int ndim, const int64_t *x_dims,
                     const void *x, const int64_t *pads, float value, const int64_t *y_dims,
                     void *y);
cudaError_t si_k_resize(cudaStream_t s, int t, const si_resize_params *p, int64_t nc, int ih,
                        int iw, int oh, int ow, float scale_h, float scale_w, const void *x,
                        void *y);

/* The pixel path: (rows, h, w, 3) uint8 -> NHWC T, (x/255 - mean) / std in one pass. */
cudaError_t si_k_normalize_nhwc(cudaStream_t s, int t, const uint8_t *src, int64_t pixels,
                                const float scale[3], const float shift[3], void *y);

/* A patch convolution's input as GEMM rows (stride = kernel, no padding: a ViT's patch
 * embedding): row (n, oh, ow) holds its patch's taps (kh, kw, c) and zeros up to kp. x: the
 * (n, c, h, w) input at element strides st[4]; a block a row of patches, staged in shared memory.
 * cudaErrorNotSupported where one row of patches does not fit a block's shared memory, or the
 * input is stored channels last (st[1] == 1 with c > 1). */
typedef struct {
    int n, c, kh, kw, oh, ow;
    int64_t st[4], kp;
} si_k_patch;
cudaError_t si_k_patchify(cudaStream_t s, int t, const si_k_patch *p, const void *x, void *y);

/* fills n elements of type t with v (poisoning in tests, zero padding) */
cudaError_t si_k_fill(cudaStream_t s, int t, void *y, int64_t n, float v);

#endif
