/* The GPU backend's memory, planned on the host before anything is allocated: where every
 * activation, constant and buffer lives, for a batch size, a precision and a number of slots.
 * The CUDA backend allocates exactly this (cuda/backend.cu) and `shardinfer plan` prints it, so
 * the budget a user reads before a run is the one the run uses; plain C, it needs no GPU.
 *
 * Layout rule: 4-D runtime values are NHWC (what cuDNN's tensor-core convolutions read); the
 * rest, and every constant, is row-major in ONNX's order. A view (Reshape, Flatten, ...) shares
 * its input's bytes when both orders agree and copies otherwise. */
#ifndef SI_DEVPLAN_H
#define SI_DEVPLAN_H

#include "graph.h"
#include "memplan.h"

#define SI_DEV_ALIGN 256

/* Where each buffer of one slot lies, in bytes from the start of the slot's block (SIZE_MAX: not
 * in that block). */
typedef struct {
    size_t arena, scratch, workspace, input, output, pack, items;
    size_t area; /* device only: the area work on the slot's stream writes images into, for the
                    resize (a hardware JPEG decoder's; SIZE_MAX: none) */
} si_devplan_carve;

typedef struct {
    int batch, slots;
    size_t elem;         /* bytes per activation element (4 FP32, 2 FP16/BF16) */
    bool pixels;         /* input arrives as uint8 (B, H, W, 3) */
    si_memplan acts;     /* one slot's activation arena */
    uint8_t *copy_view;  /* per node: a view that copies */
    uint8_t *same_bytes; /* per node: its output is its input's bytes (no storage, no kernel) */
    size_t *const_off;   /* per value: offset in the constant buffer, SIZE_MAX if not there */
    size_t *aux_off;     /* per node: the indices of Gather and the other indexing ops as int64, the
                            node's parameter slot 0 (SIZE_MAX if none) */
    size_t *dw_off; /* per node: a depthwise Conv's float weights as (kh, kw, C), or SIZE_MAX */
    /* bytes; per slot unless said otherwise */
    size_t weights;                    /* constants on the device (all slots share them) */
    size_t activations;                /* the arena */
    size_t scratch;                    /* layout changes and explicitly padded conv inputs */
    size_t workspace;                  /* cuDNN and cuBLASLt workspace (the budget given) */
    size_t input;                      /* device input staging: uint8 pixels or float inputs */
    size_t output;                     /* device float outputs */
    size_t pack;                       /* --resize-on gpu: decoded images and their items */
    size_t pinned;                     /* page-locked host memory: input staging and outputs */
    size_t device_total, pinned_total; /* everything, all slots */
    /* what the backend carves: the device block is the weights, then slot k's block at
     * si_devplan_slot_dev(p, k), slot_bytes each; the pinned block is slot k's `pinned` bytes at
     * si_devplan_slot_pin(p, k). Input and output staging share one layout on both sides. */
    size_t slot_bytes;    /* one slot's device block */
    si_devplan_carve dev; /* in a slot's device block */
    si_devplan_carve pin; /* in a slot's pinned block (input, output, pack, items) */
    size_t pack_cap;      /* bytes of decoded images a slot's packed buffer takes (0: none) */
    size_t area_cap;      /* bytes of the device-only area, right after the packed buffer's
                             pool on the device (no pinned twin; 0: none) */
    size_t *in_off;       /* per graph input: offset in the input staging */
    size_t *out_off;      /* per graph output: offset of its floats in the output staging */
    int64_t *out_row;     /* per graph output: floats per batch row (numel / dims[0]; 0 if none) */
} si_devplan;

/* A 4-D runtime value: stored NHWC. */
bool si_devplan_nhwc(const si_value *v);
/* Its bytes are in ONNX's row-major order (not NHWC, or NHWC with C == 1 or H*W == 1). */
bool si_devplan_rowmajor(const si_value *v);
/* Whether node n reads input k as data (not a parameter such as a shape or axes). */
bool si_devplan_data_input(const si_gnode *n, int k);
/* Whether op runs on contiguous row-major inputs and outputs (the others read strided views). */
bool si_devplan_rowmajor_op(const si_graph *g, const si_gnode *n);
/* The channels a Conv's input is padded to on the GPU: 8 for FP16/BF16 (elem 2) convs with
 * fewer than 8 input channels, no groups and constant weights (the image's 3 channels: cuDNN's
 * tensor-core kernels want C % 8 == 0, and measured 3.7 ms of MobileNetV2's 14 ms at batch 256
 * without); otherwise the channels as they are. */
int si_devplan_conv_cpad(const si_graph *g, const si_gnode *n, size_t elem);
/* A patch conv's GEMM depth: its kh kw C taps, padded with zeros to 16-byte rows for 2-byte
 * types (the patches in scratch and the KRSC weights alike). */
int64_t si_devplan_patch_k(const si_graph *g, const si_gnode *n, size_t elem);
/* A depthwise Conv (group == C == M > 1) with constant 4-D weights. The CUDA backend runs these
 * with its own kernel (cuda/dwconv.cu, which reads the weights channel-last: dw_off) unless the
 * shape is beyond it or SI_CUDNN_DEPTHWISE=1 hands them to cuDNN (which reads the KRSC copy at
 * const_off): both copies are planned, so the plan holds either way. */
bool si_devplan_dwconv(const si_graph *g, const si_gnode *n);
/* A patchify Conv (a vision transformer's patch embedding, ConvNeXt's stem and downsamplers):
 * kernel == stride, no padding or dilation, one group, constant weights, no residual, ReLU at
 * most. The GPU runs it as one GEMM: the input's patches copied into scratch as rows of
 * (kh, kw, C), times the KRSC weights read as an (M, kh * kw * C) matrix. */
bool si_devplan_patch_conv(const si_graph *g, const si_gnode *n);
/* Scratch elements node n needs for layout changes (0 if none). */
int64_t si_devplan_node_scratch(const si_graph *g, const si_gnode *n, size_t elem);

/* Plans for the graph's shapes at `batch` (infers them). pack_per_image > 0: each slot also
 * holds a packed buffer of batch * pack_per_image bytes of decoded images and their
 * si_rs_items, on the device and pinned (--resize-on gpu); area_per_image > 0 (with it): batch *
 * area_per_image more on the device, between the pool and the items, where work queued on the
 * slot's stream writes images (a hardware JPEG decoder's, --decode gpu). Caller frees with
 * si_devplan_free. */
si_status si_devplan_build(si_graph *g, int batch, size_t elem, int slots, size_t workspace,
                           bool pixels, size_t pack_per_image, size_t area_per_image,
                           si_devplan *p);
void si_devplan_free(si_devplan *p);
/* Offset of slot k's block in the device allocation and in the pinned allocation. */
size_t si_devplan_slot_dev(const si_devplan *p, int k);
size_t si_devplan_slot_pin(const si_devplan *p, int k);

/* The largest batch whose plan fits `limit` device bytes (0 if not even batch 1 does); leaves
 * the graph inferred for that batch. */
int si_devplan_max_batch(si_graph *g, size_t elem, int slots, size_t workspace, bool pixels,
                         size_t pack_per_image, size_t area_per_image, size_t limit);

#endif
