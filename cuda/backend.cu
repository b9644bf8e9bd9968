// The CUDA backend: the engine's graph on one GPU. cuDNN runs the convolutions (NHWC, FP16 on
// tensor cores by default, bias + residual + ReLU fused where cuDNN fuses them), cuBLASLt the
// Gemm/MatMul (bias and ReLU as epilogues), cuda/kernels.cu the rest.
//
// Memory is planned by src/engine/devplan.c and allocated at init in one device block and one pinned
// block ("malloc and point"): weights once, then per slot an activation arena, scratch, a
// workspace, input staging and float outputs. A slot also has a stream, a cuDNN handle, an
// event and a CUDA Graph of the model captured at init; the steady state allocates nothing and
// only replays graphs, so S slots keep upload, compute and download of S batches in flight.
#include <cublasLt.h>
#include <cudnn.h>
#include <nvtx3/nvToolsExt.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/check.cuh"
#include "cuda/cuda.h"
#include "cuda/dwconv.cuh"
#include "cuda/kernels.cuh"
#include "cuda/resize.cuh"
extern "C" {
#include "engine/devplan.h"
#include "engine/engine.h"
}

#define cudnnCheck(call)                                                                           \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return si_error(SI_ERR_INTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,           \
                            cudnnGetErrorString(s_));                                              \
    } while (0)

#define ltCheck(call)                                                                              \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return si_error(SI_ERR_INTERNAL, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__,    \
                            #call, (int)s_);                                                       \
    } while (0)

// a node's name in messages
#define NODE_ERR(g, n, code, ...) si_node_error(g, n, code, __VA_ARGS__)

typedef struct {
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    bool fused;  // cudnnConvolutionBiasActivationForward
    bool prepad; // asymmetric pads applied by a copy into scratch
    int cpad;    // channels the input is padded to in scratch (the first conv's 3 -> 8)
    float ms;    // the algorithm's time as cuDNN measured it
    bool dw;     // our depthwise kernel (cuda/dwconv.cu) runs it, not cuDNN
    int pro;     // dw: the conv whose bias and activation it applies to its input, -1 if none
    bool raw;    // its output is such a dw conv's input: it adds no bias and no activation
} conv_x;

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; // a' = the weight side, b' = the activation side (see init)
    cublasLtMatmulAlgo_t algo;
    float alpha, beta;
    bool prefill;   // y = broadcast(C) first, then y = alpha*A*B + beta*y
    bool act_after; // activation not done by the epilogue
    // MatMul whose batch dims broadcast partially: one launch per output matrix
    int loop_nd;
    int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
} gemm_x;

typedef struct {
    cudaStream_t stream;
    cudaEvent_t done;
    cudaEvent_t t_begin, t_end; // timed: when the GPU started and finished the slot's batch
    cudnnHandle_t dnn;
    uint8_t *arena, *scratch, *ws, *in_d, *out_d; // device
    uint8_t *in_h, *out_h;                        // pinned host
    uint8_t *pack_d, *pack_h;                     // --resize-on gpu: packed decoded images
    si_rs_item *items_d, *items_h;                // and their items
    cudaGraphExec_t exec;
    int rows; // of the batch in flight
} slot_x;

typedef struct {
    si_devplan plan;
    int t; // si_gtype of activations
    cudnnDataType_t dt;
    cudaDataType_t ct;
    uint8_t *dev, *host; // the two allocations
    uint8_t *consts;
    cublasLtHandle_t lt;
    slot_x *slots;
    conv_x *conv; // per node
    gemm_x *gemm; // per node
    size_t *in_off, *out_off;
    int64_t *out_row;  // per output: floats per batch row (numel / dims[0])
    bool batch_rows;   // every output's dim 0 is the batch: short batches download fewer rows
    int64_t in_pixels; // H * W of the pixel input
    bool dw_cudnn;     // SI_CUDNN_DEPTHWISE=1: cuDNN runs depthwise convs, no prologue fusion
    float pscale[3], pshift[3];
    cudaEvent_t t_ref; // a timed event and the host clock when it completed: the GPU's times on
    double t_ref_host; // the host's clock (--timeline)
} cuda_state;

static long n_alloc_calls;

static si_status dev_alloc(void **p, size_t bytes) {
    __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
    cudaCheck(cudaMalloc(p, bytes ? bytes : 1));
    return SI_OK;
}

static si_status host_alloc(void **p, size_t bytes) {
    __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
    cudaCheck(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable));
    return SI_OK;
}

extern "C" long si_cuda_backend_alloc_calls(void) {
    return __atomic_load_n(&n_alloc_calls, __ATOMIC_RELAXED);
}

static size_t up(size_t n) {
    return (n + SI_DEV_ALIGN - 1) / SI_DEV_ALIGN * SI_DEV_ALIGN;
}

// --- views ------------------------------------------------------------------------------------
static si_tview tv_rowmajor(const si_shape *s) {
    si_tview t;
    memset(&t, 0, sizeof t);
    t.nd = s->ndim;
    int64_t acc = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        t.dims[d] = s->dims[d];
        t.st[d] = acc;
        acc *= s->dims[d];
    }
    return t;
}

// a value's view of its storage: NHWC for 4-D runtime values, row-major otherwise
static si_tview tv_of(const si_value *v) {
    si_tview t = tv_rowmajor(&v->shape);
    if (si_devplan_nhwc(v)) {
        int64_t C = v->shape.dims[1], H = v->shape.dims[2], W = v->shape.dims[3];
        t.st[0] = H * W * C;
        t.st[1] = 1;
        t.st[2] = W * C;
        t.st[3] = C;
    }
    return t;
}

// right-aligns v to nd dims (leading dims of 1)
static si_tview tv_align(si_tview v, int nd) {
    si_tview t;
    memset(&t, 0, sizeof t);
    t.nd = nd;
    t.off = v.off;
    int lead = nd - v.nd;
    for (int d = 0; d < nd; d++) {
        t.dims[d] = d < lead ? 1 : v.dims[d - lead];
        t.st[d] = d < lead ? 0 : v.st[d - lead];
    }
    return t;
}

static si_tview tv_none(void) {
    si_tview t;
    memset(&t, 0, sizeof t);
    return t;
}

static void *vptr(cuda_state *cs, const si_graph *g, const slot_x *sl, int v) {
    if (g->values[v].kind == SI_VAL_RUNTIME) return sl->arena + cs->plan.acts.offset[v];
    size_t off = cs->plan.const_off[v];
    return off == SIZE_MAX ? NULL : cs->consts + off;
}

static si_status map(cudaStream_t s, int kind, int op, si_act act, int ty, void *y, si_tview vy,
                     int ta, const void *a, si_tview va, const void *b = NULL,
                     si_tview vb = tv_none(), const void *c = NULL, si_tview vc = tv_none()) {
    cudaCheck(si_k_map(s, kind, op, act, ty, y, vy, ta, a, va, b, vb, c, vc));
    return SI_OK;
}

static const si_act no_act = {0, 0, 0, 0, 0};

// host float -> the backend's type
static void to_type(const float *src, size_t n, int t, void *dst) {
    if (t == SI_GT_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (t == SI_GT_F16) {
        for (size_t i = 0; i < n; i++) ((__half *)dst)[i] = __float2half_rn(src[i]);
    } else {
        for (size_t i = 0; i < n; i++) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    }
}

// --- init: constants --------------------------------------------------------------------------
static si_status upload_consts(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    const si_devplan *p = &cs->plan;
    size_t bytes = p->weights;
    uint8_t *h = (uint8_t *)malloc(bytes ? bytes : 1);
    if (!h) return si_error(SI_ERR_NOMEM, "cannot stage %zu bytes of weights", bytes);
    memset(h, 0, bytes);
    // conv weights go in as KRSC (NHWC filters); remember which values those are
    int *is_w = (int *)calloc((size_t)g->n_values + 1, sizeof(int)); // padded channels + 1
    for (int j = 0; j < g->n_nodes; j++)
        if (g->nodes[j].op == SI_OP_CONV)
            is_w[g->nodes[j].in[1]] =
                1 + si_devplan_conv_cpad(g, &g->nodes[j], p->elem) / g->nodes[j].conv.group;
    float *tmp = NULL;
    size_t tmp_n = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (p->const_off[v] == SIZE_MAX) continue;
        const si_value *val = &g->values[v];
        size_t n = (size_t)si_shape_numel(&val->shape);
        int64_t CP = is_w[v] && val->shape.ndim == 4 ? is_w[v] - 1 : 0; // KRSC channels
        if (CP) n = n / (size_t)val->shape.dims[1] * (size_t)CP;
        if (n > tmp_n) {
            free(tmp);
            tmp = (float *)malloc(sizeof(float) * n);
            tmp_n = n;
        }
        if (val->dtype == SI_DT_INT64) {
            for (size_t i = 0; i < n; i++) tmp[i] = (float)((const int64_t *)val->data)[i];
        } else if (is_w[v] && val->shape.ndim == 4) {
            const float *w = (const float *)val->data;
            int64_t M = val->shape.dims[0], C = val->shape.dims[1], R = val->shape.dims[2],
                    S = val->shape.dims[3];
            memset(tmp, 0, sizeof(float) * n); // padded channels weigh nothing
            for (int64_t m = 0; m < M; m++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t s = 0; s < S; s++)
                            tmp[((m * R + r) * S + s) * CP + c] = w[((m * C + c) * R + r) * S + s];
        } else {
            memcpy(tmp, val->data, sizeof(float) * n);
        }
        to_type(tmp, n, cs->t, h + p->const_off[v]);
    }
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *n = &g->nodes[j];
        if (p->aux_off[j] == SIZE_MAX) continue;
        { // Gather's indices as int64
            const si_value *iv = &g->values[n->in[n->pslot[0]]];
            int64_t ni = si_shape_numel(&iv->shape);
            int64_t *dst = (int64_t *)(h + p->aux_off[j]);
            for (int64_t i = 0; i < ni; i++)
                dst[i] = iv->dtype == SI_DT_INT64 ? ((const int64_t *)iv->data)[i]
                                                  : (int64_t)((const float *)iv->data)[i];
        }
    }
    free(tmp);
    free(is_w);
    cudaError_t ce = cudaMemcpy(cs->consts, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    cudaCheck(ce);
    return SI_OK;
}

// --- init: convolutions -----------------------------------------------------------------------
// cuDNN's choice per conv shape: the key is what the descriptors are made of (the shape, the
// type and the padded channels); the math type is part of the choice
typedef struct {
    si_conv_shape s;
    int t, cpad;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    size_t ws;
    float ms;
} algo_memo;

// Whether our depthwise kernel runs conv node j (cuDNN runs the others).
static bool dw_kernel_runs(const cuda_state *cs, const si_graph *g, int j) {
    return !cs->dw_cudnn && cs->plan.dw_off[j] != SIZE_MAX &&
           si_dwconv_supported(&g->nodes[j].conv);
}

// The depthwise conv that applies conv j's bias and activation to j's output as it loads it, or
// -1. Then j writes its plain sum, saving a pass over the tensor (in MobileNet and EfficientNet
// blocks, the expanded one: the largest). It needs j's output read by that conv's data input
// alone (not a graph output, no other reader), and j run by cuDNN with no residual, which would
// have to be added before the activation. Decided at init, the same for j and the consumer.
static int dw_prologue_of(const cuda_state *cs, const si_graph *g, int j) {
    const si_gnode *p = &g->nodes[j];
    if (p->op != SI_OP_CONV || p->residual >= 0 || dw_kernel_runs(cs, g, j)) return -1;
    if (g->values[p->out].uses != 1) return -1; // uses counts graph outputs too
    for (int k = j + 1; k < g->n_nodes; k++) {
        const si_gnode *d = &g->nodes[k];
        for (int i = 0; i < d->n_in; i++)
            if (d->in[i] == p->out)
                return d->op == SI_OP_CONV && i == 0 && dw_kernel_runs(cs, g, k) ? k : -1;
    }
    return -1;
}

// Our depthwise kernel's weights: (C, 1, kh, kw) as float (kh, kw, C) at the plan's dw_off, so a
// thread reads its channels' taps as vectors and converts nothing.
static si_status dw_upload(cuda_state *cs, const si_graph *g, int j) {
    const si_gnode *n = &g->nodes[j];
    const si_value *wv = &g->values[n->in[1]];
    int64_t C = wv->shape.dims[0], R = wv->shape.dims[2], S = wv->shape.dims[3];
    size_t count = (size_t)(C * R * S);
    float *tmp = (float *)malloc(sizeof(float) * (count ? count : 1));
    if (!tmp) return si_error(SI_ERR_NOMEM, "cannot stage the weights of '%s'", n->name);
    const float *w = (const float *)wv->data;
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t s = 0; s < S; s++) tmp[(r * S + s) * C + c] = w[(c * R + r) * S + s];
    cudaError_t ce = cudaMemcpy(cs->consts + cs->plan.dw_off[j], tmp, sizeof(float) * count,
                                cudaMemcpyHostToDevice);
    free(tmp);
    cudaCheck(ce);
    return SI_OK;
}

// Times the n candidate algorithms k[] of conv c on slot 0, round-robin (so a GPU clock that
// is still ramping up at load biases none of them): one untimed round, then the median of 7 per
// candidate, in ms, into ms[].
#define TIME_ROUNDS 7
static si_status time_convs(cuda_state *cs, conv_x *c, void *x, void *w, void *y,
                            const cudnnConvolutionFwdAlgoPerf_t *k, int n, float *ms) {
    slot_x *sl = &cs->slots[0];
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    float one = 1.f, zero = 0.f, t[CUDNN_CONVOLUTION_FWD_ALGO_COUNT][TIME_ROUNDS + 1];
    si_status st = SI_OK;
    for (int r = 0; r <= TIME_ROUNDS && st == SI_OK; r++)
        for (int i = 0; i < n && st == SI_OK; i++) {
            if (cs->t != SI_GT_F32) cudnnCheck(cudnnSetConvolutionMathType(c->cd, k[i].mathType));
            cudaEventRecord(a, sl->stream);
            cudnnStatus_t ds =
                cudnnConvolutionForward(sl->dnn, &one, c->xd, x, c->wd, w, c->cd, k[i].algo, sl->ws,
                                        k[i].memory, &zero, c->yd, y);
            cudaEventRecord(b, sl->stream);
            if (ds != CUDNN_STATUS_SUCCESS)
                st = si_error(SI_ERR_INTERNAL, "cuda: timing algorithm %d: %s", (int)k[i].algo,
                              cudnnGetErrorString(ds));
            else if (cudaEventSynchronize(b) != cudaSuccess ||
                     cudaEventElapsedTime(&t[i][r], a, b) != cudaSuccess)
                st = si_error(SI_ERR_INTERNAL, "cuda: timing algorithm %d failed", (int)k[i].algo);
        }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (st != SI_OK) return st;
    for (int i = 0; i < n; i++) { // round 0 was the warm-up: the median of rounds 1..7
        float *v = t[i] + 1;
        for (int p = 0; p < TIME_ROUNDS; p++)
            for (int q = p + 1; q < TIME_ROUNDS; q++)
                if (v[q] < v[p]) {
                    float u = v[p];
                    v[p] = v[q];
                    v[q] = u;
                }
        ms[i] = v[TIME_ROUNDS / 2];
    }
    return SI_OK;
}

static si_status conv_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo, int *n_memo) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    conv_x *c = &cs->conv[j];
    const si_conv_shape *s = &n->conv;
    const si_value *x = &g->values[n->in[0]];
    if (x->kind != SI_VAL_RUNTIME || x->shape.ndim != 4)
        return NODE_ERR(g, n, SI_ERR_UNSUPPORTED,
                        "cuda: the input of a 2-D Conv must be a 4-D "
                        "computed tensor");
    // weights computed at run time (ONNX's node tests feed them as inputs) are 4-D runtime
    // values, stored NHWC: as (M, C/g, kh, kw) that is KRSC, the filter layout cuDNN reads
    if (n->residual >= 0) {
        const si_shape *r = &g->values[n->residual].shape, *y = &g->values[n->out].shape;
        if (memcmp(r->dims, y->dims, sizeof(int64_t) * 4) != 0)
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: residual shape differs from Conv's");
    }
    c->pro = -1;
    if (dw_kernel_runs(cs, g, j)) {
        c->dw = true;
        int pj = x->producer;
        if (pj >= 0 && dw_prologue_of(cs, g, pj) == j) c->pro = pj;
        if (e->opts.verbose)
            fprintf(stderr, "cuda: %s (%s) depthwise kernel%s%s\n", n->name, n->op_type,
                    c->pro >= 0 ? ", with the bias and activation of " : "",
                    c->pro >= 0 ? g->nodes[c->pro].name : "");
        return dw_upload(cs, g, j);
    }
    c->raw = dw_prologue_of(cs, g, j) >= 0;
    c->prepad = s->pt != s->pb || s->pl != s->pr;
    c->cpad = si_devplan_conv_cpad(g, n, cs->plan.elem);
    int h = s->h + (c->prepad ? s->pt + s->pb : 0), w = s->w + (c->prepad ? s->pl + s->pr : 0);
    cudnnCheck(cudnnCreateTensorDescriptor(&c->xd));
    cudnnCheck(cudnnCreateTensorDescriptor(&c->yd));
    cudnnCheck(cudnnCreateTensorDescriptor(&c->bd));
    cudnnCheck(cudnnCreateFilterDescriptor(&c->wd));
    cudnnCheck(cudnnCreateConvolutionDescriptor(&c->cd));
    cudnnCheck(cudnnCreateActivationDescriptor(&c->ad));
    cudnnCheck(cudnnSetTensor4dDescriptor(c->xd, CUDNN_TENSOR_NHWC, cs->dt, s->n, c->cpad, h, w));
    cudnnCheck(
        cudnnSetTensor4dDescriptor(c->yd, CUDNN_TENSOR_NHWC, cs->dt, s->n, s->m, s->oh, s->ow));
    cudnnCheck(cudnnSetTensor4dDescriptor(c->bd, CUDNN_TENSOR_NCHW, cs->dt, 1, s->m, 1, 1));
    cudnnCheck(cudnnSetFilter4dDescriptor(c->wd, cs->dt, CUDNN_TENSOR_NHWC, s->m,
                                          c->cpad / s->group, s->kh, s->kw));
    cudnnCheck(cudnnSetConvolution2dDescriptor(c->cd, c->prepad ? 0 : s->pt, c->prepad ? 0 : s->pl,
                                               s->sh, s->sw, s->dh, s->dw, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT));
    cudnnCheck(cudnnSetConvolutionGroupCount(c->cd, s->group));
    // FP32 stays FP32 (no TF32): the 1e-4 parity with the CPU depends on it
    cudnnCheck(cudnnSetConvolutionMathType(c->cd, cs->t == SI_GT_F32 ? CUDNN_FMA_MATH
                                                                     : CUDNN_TENSOR_OP_MATH));
    cudnnCheck(
        cudnnSetActivationDescriptor(c->ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    for (int k = 0; k < *n_memo; k++)
        if (!memcmp(&memo[k].s, s, sizeof *s) && memo[k].t == cs->t && memo[k].cpad == c->cpad) {
            c->algo = memo[k].algo;
            c->ws = memo[k].ws;
            c->ms = memo[k].ms;
            if (cs->t != SI_GT_F32) cudnnCheck(cudnnSetConvolutionMathType(c->cd, memo[k].math));
            goto found;
        }
    {
        slot_x *sl = &cs->slots[0];
        void *xp = c->prepad || c->cpad != s->c ? sl->scratch : vptr(cs, g, sl, n->in[0]);
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0;
        cudnnCheck(cudnnFindConvolutionForwardAlgorithmEx(
            sl->dnn, c->xd, xp, c->wd, vptr(cs, g, sl, n->in[1]), c->cd, c->yd,
            vptr(cs, g, sl, n->out), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, sl->ws,
            cs->plan.workspace));
        int pick = -1;
        float best = 0;
        for (int k = 0; k < got && pick < 0; k++) {
            if (perf[k].status != CUDNN_STATUS_SUCCESS || perf[k].memory > cs->plan.workspace)
                continue;
            if (cs->t == SI_GT_F32 && perf[k].mathType != CUDNN_FMA_MATH &&
                perf[k].mathType != CUDNN_DEFAULT_MATH)
                continue;
            pick = k;
        }
        // Find times each algorithm once, one after the other, and only the convolution. At load
        // the GPU's clock is still rising, so the algorithms measured later looked faster: runs
        // of MobileNetV2 picked IMPLICIT_GEMM or IMPLICIT_PRECOMP_GEMM for the same convs and
        // ranged from 37K to 54K images/s. And a conv with a bias and no activation is fused by
        // cuDNN only with IMPLICIT_PRECOMP_GEMM; the others pay an epilogue pass. So the
        // candidates within 50% of Find's best are timed again, round-robin, median of 7, with
        // the epilogue's cost (one read and one write of the output at 2.5 TB/s, an H100's
        // practical bandwidth) added to those that need it.
        bool has_b = n->n_in - (n->residual >= 0) > 2;
        double out_bytes = (double)s->n * s->m * s->oh * s->ow * (double)cs->plan.elem;
        cudnnConvolutionFwdAlgoPerf_t cand[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int idx[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], nc = 0;
        for (int k = 0; pick >= 0 && k < got; k++) {
            if (perf[k].status != CUDNN_STATUS_SUCCESS || perf[k].memory > cs->plan.workspace ||
                perf[k].time > perf[pick].time * 1.5f)
                continue;
            if (cs->t == SI_GT_F32 && perf[k].mathType != CUDNN_FMA_MATH &&
                perf[k].mathType != CUDNN_DEFAULT_MATH)
                continue;
            idx[nc] = k;
            cand[nc++] = perf[k];
        }
        float ms[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (nc > 0) {
            si_status st = time_convs(cs, c, xp, vptr(cs, g, sl, n->in[1]), vptr(cs, g, sl, n->out),
                                      cand, nc, ms);
            if (st != SI_OK) return st;
        }
        for (int i = 0; i < nc; i++) {
            bool epilogue = !c->raw && has_b && n->act.kind == SI_ACT_NONE &&
                            cand[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
            if (epilogue) ms[i] += (float)(2.0 * out_bytes / 2.5e9); // ms
            if (i == 0 || ms[i] < best) {
                pick = idx[i];
                best = ms[i];
            }
        }
        if (pick < 0)
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED,
                            "cuda: cuDNN has no algorithm for this convolution (%dx%dx%dx%d, "
                            "%d filters %dx%d, group %d) within the %zu MiB workspace",
                            s->n, s->c, s->h, s->w, s->m, s->kh, s->kw, s->group,
                            cs->plan.workspace >> 20);
        c->algo = perf[pick].algo;
        c->ws = perf[pick].memory;
        c->ms = best;
        if (cs->t != SI_GT_F32) cudnnCheck(cudnnSetConvolutionMathType(c->cd, perf[pick].mathType));
        if (*n_memo < 512)
            memo[(*n_memo)++] =
                (algo_memo){*s, cs->t, c->cpad, c->algo, perf[pick].mathType, c->ws, c->ms};
    }
found:
    if (e->opts.verbose)
        fprintf(stderr, "cuda: %s (%s) algo %d ws %zu KiB %.3f ms%s\n", n->name, n->op_type,
                (int)c->algo, c->ws >> 10, c->ms,
                c->raw ? ", bias and activation left to the depthwise conv after it" : "");
    bool has_bias = n->n_in - (n->residual >= 0) > 2;
    // cuDNN fuses bias + residual + ReLU; identity only with IMPLICIT_PRECOMP_GEMM
    c->fused = !c->raw && has_bias &&
               (n->act.kind == SI_ACT_RELU ||
                (n->act.kind == SI_ACT_NONE &&
                 c->algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM));
    if (c->fused && n->act.kind == SI_ACT_NONE)
        cudnnCheck(cudnnSetActivationDescriptor(c->ad, CUDNN_ACTIVATION_IDENTITY,
                                                CUDNN_NOT_PROPAGATE_NAN, 0.0));
    return SI_OK;
}

static si_status conv_run(si_engine *e, cuda_state *cs, slot_x *sl, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    conv_x *c = &cs->conv[j];
    const si_conv_shape *s = &n->conv;
    const void *x = vptr(cs, g, sl, n->in[0]);
    void *y = vptr(cs, g, sl, n->out);
    const void *z = n->residual >= 0 ? vptr(cs, g, sl, n->residual) : NULL;
    bool has_bias = n->n_in - (n->residual >= 0) > 2;
    if (c->dw) {
        si_dwconv_args a;
        memset(&a, 0, sizeof a);
        a.s = *s;
        a.x = x;
        a.w = (const float *)(cs->consts + cs->plan.dw_off[j]);
        a.b = has_bias ? vptr(cs, g, sl, n->in[2]) : NULL;
        a.z = z;
        a.act = n->act;
        a.y = y;
        if (c->pro >= 0) { // the producer wrote its plain sum (raw): its epilogue comes here
            const si_gnode *p = &g->nodes[c->pro];
            a.pb = p->n_in > 2 ? vptr(cs, g, sl, p->in[2]) : NULL; // no residual: in[2] is bias
            a.pact = p->act;
        }
        cudaCheck(si_k_dwconv(sl->stream, cs->t, &a));
        return SI_OK;
    }
    if (c->prepad || c->cpad != s->c) { // zeros, then the input into the interior
        int64_t hp = s->h + (c->prepad ? s->pt + s->pb : 0),
                wp = s->w + (c->prepad ? s->pl + s->pr : 0), cp = c->cpad;
        cudaCheck(si_k_fill(sl->stream, cs->t, sl->scratch, (int64_t)s->n * cp * hp * wp, 0.f));
        si_tview vy = tv_none();
        vy.nd = 4;
        int64_t d[4] = {s->n, s->c, s->h, s->w}, st4[4] = {hp * wp * cp, 1, wp * cp, cp};
        for (int k = 0; k < 4; k++) vy.dims[k] = d[k], vy.st[k] = st4[k];
        vy.off = c->prepad ? (s->pt * wp + s->pl) * cp : 0;
        si_status st = map(sl->stream, SI_MAP_COPY, 0, no_act, cs->t, sl->scratch, vy, cs->t, x,
                           tv_of(&g->values[n->in[0]]));
        if (st != SI_OK) return st;
        x = sl->scratch;
    }
    const float one = 1.f, zero = 0.f;
    if (c->fused) {
        const float alpha2 = z ? 1.f : 0.f;
        cudnnCheck(cudnnConvolutionBiasActivationForward(
            sl->dnn, &one, c->xd, x, c->wd, vptr(cs, g, sl, n->in[1]), c->cd, c->algo, sl->ws,
            c->ws, &alpha2, c->yd, z ? z : y, c->bd, vptr(cs, g, sl, n->in[2]), c->ad, c->yd, y));
        return SI_OK;
    }
    cudnnCheck(cudnnConvolutionForward(sl->dnn, &one, c->xd, x, c->wd, vptr(cs, g, sl, n->in[1]),
                                       c->cd, c->algo, sl->ws, c->ws, &zero, c->yd, y));
    if (!c->raw && (has_bias || z || n->act.kind)) {
        const void *bias = has_bias ? vptr(cs, g, sl, n->in[2]) : NULL;
        cudaCheck(si_k_bias_act(sl->stream, cs->t, y, si_shape_numel(&g->values[n->out].shape),
                                s->m, bias, z, n->act));
    }
    return SI_OK;
}

// --- init: Gemm and MatMul with cuBLASLt ------------------------------------------------------
// Row-major Y (M, N) = X (M, K) W (K, N) is column-major Y^T (N, M) = W^T X^T: cuBLASLt's A is
// the weight side, B the activation side, and D's rows are output features, so a bias along N
// is cuBLASLt's per-row bias epilogue.
static si_status lt_setup(cuda_state *cs, gemm_x *x, int opA, int64_t ar, int64_t ac, int opB,
                          int64_t br, int64_t bc, int64_t m, int64_t nn, int batch, int64_t sa,
                          int64_t sb, cublasLtEpilogue_t epi, const void *bias) {
    ltCheck(cublasLtMatmulDescCreate(&x->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = opA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = opB ? CUBLAS_OP_T : CUBLAS_OP_N;
    ltCheck(cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ltCheck(cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        ltCheck(
            cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias)
            ltCheck(cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof bias));
    }
    ltCheck(cublasLtMatrixLayoutCreate(&x->a, cs->ct, (uint64_t)ar, (uint64_t)ac, ar));
    ltCheck(cublasLtMatrixLayoutCreate(&x->b, cs->ct, (uint64_t)br, (uint64_t)bc, br));
    ltCheck(cublasLtMatrixLayoutCreate(&x->d, cs->ct, (uint64_t)m, (uint64_t)nn, m));
    if (batch > 1) {
        int64_t sd = m * nn;
        cublasLtMatrixLayout_t ls[3] = {x->a, x->b, x->d};
        int64_t strides[3] = {sa, sb, sd};
        for (int k = 0; k < 3; k++) {
            ltCheck(cublasLtMatrixLayoutSetAttribute(ls[k], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                     &batch, sizeof batch));
            ltCheck(cublasLtMatrixLayoutSetAttribute(
                ls[k], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[k], sizeof(int64_t)));
        }
    }
    cublasLtMatmulPreference_t pref;
    ltCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = cs->plan.workspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                         sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(cs->lt, x->op, x->a, x->b, x->d, x->d, pref, 1, &res, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || got == 0)
        return si_error(SI_ERR_UNSUPPORTED, "cuBLASLt has no algorithm (status %d)", (int)hs);
    x->algo = res.algo;
    return SI_OK;
}

static si_status gemm_init(si_engine *e, cuda_state *cs, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    gemm_x *x = &cs->gemm[j];
    const si_shape *ys = &g->values[n->out].shape, *bs = &g->values[n->in[1]].shape;
    int64_t M = ys->dims[0], N = ys->dims[1], K = n->trans_b ? bs->dims[1] : bs->dims[0];
    x->alpha = n->alpha;
    x->beta = n->n_in > 2 ? n->beta : 0.f;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = NULL;
    if (n->n_in > 2 && x->beta != 0.f) {
        const si_value *cv = &g->values[n->in[2]];
        int64_t cn = cv->shape.ndim ? cv->shape.dims[cv->shape.ndim - 1] : 1;
        int64_t cm = cv->shape.ndim == 2 ? cv->shape.dims[0] : 1;
        if (x->beta == 1.f && cm == 1 && cn == N && cv->kind != SI_VAL_RUNTIME) {
            epi = CUBLASLT_EPILOGUE_BIAS;
            bias = cs->consts + cs->plan.const_off[n->in[2]];
            x->beta = 0.f;
        } else {
            x->prefill = true;
        }
    }
    if (n->act.kind == SI_ACT_RELU)
        epi = epi == CUBLASLT_EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    x->act_after = n->act.kind && n->act.kind != SI_ACT_RELU;
    // A' = W: (N, K) op, stored (K, N) row-major = col-major N x K, or (N, K) = col-major K x N
    // B' = X: stored (M, K) row-major = col-major K x M, or (K, M) = col-major M x K
    si_status st = lt_setup(cs, x, n->trans_b, n->trans_b ? K : N, n->trans_b ? N : K, n->trans_a,
                            n->trans_a ? M : K, n->trans_a ? K : M, N, M, 1, 0, 0, epi, bias);
    if (st != SI_OK) return si_error_prefix(st, "node '%s' (Gemm): ", n->name);
    return SI_OK;
}

// promotes MatMul operands like numpy (src/cpu/backend.c does the same)
static void matmul_dims(const si_graph *g, const si_gnode *n, int *nd, int64_t *ad, int64_t *bd,
                        int64_t *yd) {
    si_shape a = g->values[n->in[0]].shape, b = g->values[n->in[1]].shape;
    if (a.ndim == 1) a = (si_shape){2, {1, a.dims[0]}};
    if (b.ndim == 1) b = (si_shape){2, {b.dims[0], 1}};
    *nd = a.ndim > b.ndim ? a.ndim : b.ndim;
    for (int d = 0; d < *nd; d++) {
        int ia = d - (*nd - a.ndim), ib = d - (*nd - b.ndim);
        ad[d] = ia >= 0 ? a.dims[ia] : 1;
        bd[d] = ib >= 0 ? b.dims[ib] : 1;
    }
    for (int d = 0; d < *nd - 2; d++) yd[d] = ad[d] > bd[d] ? ad[d] : bd[d];
    yd[*nd - 2] = ad[*nd - 2];
    yd[*nd - 1] = bd[*nd - 1];
}

static si_status matmul_init(si_engine *e, cuda_state *cs, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    int nd;
    int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
    matmul_dims(g, n, &nd, ad, bd, yd);
    int64_t M = yd[nd - 2], N = yd[nd - 1], K = ad[nd - 1], batch = 1, pa = 1, pb = 1;
    bool a_full = true, b_full = true;
    for (int d = 0; d < nd - 2; d++) {
        batch *= yd[d];
        pa *= ad[d];
        pb *= bd[d];
        a_full = a_full && ad[d] == yd[d];
        b_full = b_full && bd[d] == yd[d];
    }
    gemm_x *x = &cs->gemm[j];
    x->alpha = 1.f;
    x->beta = 0.f;
    if ((!a_full && pa != 1) || (!b_full && pb != 1) || batch > INT32_MAX) {
        x->loop_nd = nd;
        memcpy(x->ad, ad, sizeof ad);
        memcpy(x->bd, bd, sizeof bd);
        memcpy(x->yd, yd, sizeof yd);
        batch = 1;
    }
    si_status st = lt_setup(cs, x, 0, N, K, 0, K, M, N, M, (int)batch, pb == 1 ? 0 : K * N,
                            pa == 1 ? 0 : M * K, CUBLASLT_EPILOGUE_DEFAULT, NULL);
    if (st != SI_OK) return si_error_prefix(st, "node '%s' (MatMul): ", n->name);
    return SI_OK;
}

static si_status lt_run(cuda_state *cs, slot_x *sl, gemm_x *x, const void *a, const void *b,
                        void *y) {
    ltCheck(cublasLtMatmul(cs->lt, x->op, &x->alpha, a, x->a, b, x->b, &x->beta, y, x->d, y, x->d,
                           &x->algo, sl->ws, cs->plan.workspace, sl->stream));
    return SI_OK;
}

// --- the per-node launch ----------------------------------------------------------------------
static si_status run_rowmajor(si_engine *e, cuda_state *cs, slot_x *sl, int j);

static si_status run_node(si_engine *e, cuda_state *cs, slot_x *sl, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    cudaStream_t s = sl->stream;
    const int t = cs->t;
    const si_value *xv = &g->values[n->in[0]], *yv = &g->values[n->out];
    void *y = vptr(cs, g, sl, n->out);
    const void *x = vptr(cs, g, sl, n->in[0]);
    if (si_devplan_rowmajor_op(g, n)) return run_rowmajor(e, cs, sl, j);
    switch (n->op) {
    case SI_OP_CONV: return conv_run(e, cs, sl, j);
    case SI_OP_MAXPOOL: cudaCheck(si_k_maxpool(s, t, &n->pool, x, y)); return SI_OK;
    case SI_OP_AVGPOOL:
        cudaCheck(si_k_avgpool(s, t, &n->pool, n->win.count_include_pad, x, y));
        return SI_OK;
    case SI_OP_GLOBAL_AVGPOOL: // 4-D NHWC (other ranks go the row-major way)
        cudaCheck(si_k_global_avgpool(s, t, (int)xv->shape.dims[0],
                                      xv->shape.dims[2] * xv->shape.dims[3], (int)xv->shape.dims[1],
                                      x, y));
        return SI_OK;
    case SI_OP_GEMM: {
        gemm_x *gx = &cs->gemm[j];
        if (gx->prefill) {
            const si_value *cv = &g->values[n->in[2]];
            si_status st = map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t,
                               vptr(cs, g, sl, n->in[2]), tv_align(tv_of(cv), 2));
            if (st != SI_OK) return st;
        }
        si_status st = lt_run(cs, sl, gx, vptr(cs, g, sl, n->in[1]), x, y);
        if (st != SI_OK) return st;
        if (gx->act_after) return map(s, SI_MAP_ACT, 0, n->act, t, y, tv_of(yv), t, y, tv_of(yv));
        return SI_OK;
    }
    case SI_OP_BINARY: {
        int nd = yv->shape.ndim;
        // squeeze-and-excitation: NHWC x (N, C, H, W) op a per-channel (N or 1, C, 1, 1)
        for (int side = 0; side < 2 && nd == 4 && si_devplan_nhwc(yv); side++) {
            if (side == 1 && n->binop != SI_BIN_ADD && n->binop != SI_BIN_MUL) break;
            const si_value *full = &g->values[n->in[side]], *per = &g->values[n->in[1 - side]];
            si_tview vp = tv_align(tv_rowmajor(&per->shape), 4);
            int64_t C = yv->shape.dims[1], N = yv->shape.dims[0];
            if (memcmp(full->shape.dims, yv->shape.dims, sizeof(int64_t) * 4) ||
                full->kind != SI_VAL_RUNTIME || C % 2 || vp.dims[1] != C || vp.dims[2] != 1 ||
                vp.dims[3] != 1 || (vp.dims[0] != 1 && vp.dims[0] != N))
                continue;
            int64_t hw = yv->shape.dims[2] * yv->shape.dims[3], numel = N * C * hw;
            if (numel / 2 >= INT32_MAX) break;
            cudaCheck(si_k_chan_binary(s, t, n->binop, n->act, y, vptr(cs, g, sl, n->in[side]),
                                       vptr(cs, g, sl, n->in[1 - side]), numel, hw, (int)C,
                                       vp.dims[0] == 1 ? 0 : C));
            return SI_OK;
        }
        return map(s, SI_MAP_BINARY, n->binop, n->act, t, y, tv_of(yv), t, x,
                   tv_align(tv_of(xv), nd), vptr(cs, g, sl, n->in[1]),
                   tv_align(tv_of(&g->values[n->in[1]]), nd));
    }
    case SI_OP_ACTIVATION: return map(s, SI_MAP_ACT, 0, n->act, t, y, tv_of(yv), t, x, tv_of(xv));
    case SI_OP_AFFINE: {
        si_tview vc = tv_none();
        vc.nd = xv->shape.ndim;
        for (int d = 0; d < vc.nd; d++) vc.dims[d] = 1;
        vc.dims[1] = xv->shape.dims[1];
        vc.st[1] = 1;
        return map(s, SI_MAP_FMA, 0, no_act, t, y, tv_of(yv), t, x, tv_of(xv),
                   vptr(cs, g, sl, n->in[1]), vc, vptr(cs, g, sl, n->in[2]), vc);
    }
    case SI_OP_VIEW: {
        if (!cs->plan.copy_view[j]) return SI_OK; // same bytes
        bool xr = xv->kind != SI_VAL_RUNTIME || si_devplan_rowmajor(xv);
        if (xr) { // the input's bytes are the output's logical order
            si_tview va = tv_rowmajor(&yv->shape);
            return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t, x, va);
        }
        if (si_devplan_rowmajor(yv)) // write the input's logical order
            return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_rowmajor(&xv->shape), t, x, tv_of(xv));
        si_status st = map(s, SI_MAP_COPY, 0, no_act, t, sl->scratch, tv_rowmajor(&xv->shape), t, x,
                           tv_of(xv));
        if (st != SI_OK) return st;
        return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t, sl->scratch,
                   tv_rowmajor(&yv->shape));
    }
    case SI_OP_CONCAT: {
        int a = n->axis < 0 ? n->axis + yv->shape.ndim : n->axis;
        si_tview vy = tv_of(yv);
        int64_t cum = 0;
        for (int i = 0; i < n->n_in; i++) {
            const si_value *iv = &g->values[n->in[i]];
            si_tview part = vy;
            part.dims[a] = iv->shape.dims[a];
            part.off = vy.off + cum * vy.st[a];
            cum += iv->shape.dims[a];
            if (part.dims[a] == 0) continue;
            si_status st =
                map(s, SI_MAP_COPY, 0, no_act, t, y, part, t, vptr(cs, g, sl, n->in[i]), tv_of(iv));
            if (st != SI_OK) return st;
        }
        return SI_OK;
    }
    case SI_OP_SPLIT: {
        si_tview vx = tv_of(xv);
        int64_t cum = 0;
        for (int o = 0; o < n->n_out; o++) {
            si_tview part = vx;
            part.dims[n->axis] = n->split_sizes[o];
            part.off = vx.off + cum * vx.st[n->axis];
            cum += n->split_sizes[o];
            const si_value *ov = &g->values[n->outs[o]];
            si_status st = map(s, SI_MAP_COPY, 0, no_act, t, vptr(cs, g, sl, n->outs[o]), tv_of(ov),
                               t, x, part);
            if (st != SI_OK) return st;
        }
        return SI_OK;
    }
    case SI_OP_SLICE: {
        si_tview va = tv_of(xv);
        for (int d = 0; d < va.nd; d++) {
            va.off += n->starts[d] * va.st[d];
            va.st[d] *= n->steps[d];
            va.dims[d] = yv->shape.dims[d];
        }
        if (si_shape_numel(&yv->shape) == 0) return SI_OK;
        return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t, x, va);
    }
    case SI_OP_TRANSPOSE: {
        si_tview vx = tv_of(xv), va = vx;
        for (int d = 0; d < vx.nd; d++) {
            va.dims[d] = vx.dims[n->perm[d]];
            va.st[d] = vx.st[n->perm[d]];
        }
        return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t, x, va);
    }
    case SI_OP_EXPAND:
        return map(s, SI_MAP_COPY, 0, no_act, t, y, tv_of(yv), t, x,
                   tv_align(tv_of(xv), yv->shape.ndim));
    default: return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: no kernel for %s", si_op_name(n->op));
    }
}

// ops that read and write contiguous row-major tensors: NHWC operands are converted in scratch
static si_status run_rowmajor(si_engine *e, cuda_state *cs, slot_x *sl, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    cudaStream_t s = sl->stream;
    const int t = cs->t;
    const size_t el = cs->plan.elem;
    uint8_t *cur = sl->scratch;
    const void *in[16] = {0};
    for (int k = 0; k < n->n_in && k < 16; k++) {
        const si_value *v = &g->values[n->in[k]];
        in[k] = vptr(cs, g, sl, n->in[k]);
        if (!si_devplan_data_input(n, k) || v->kind != SI_VAL_RUNTIME || si_devplan_rowmajor(v))
            continue;
        si_status st =
            map(s, SI_MAP_COPY, 0, no_act, t, cur, tv_rowmajor(&v->shape), t, in[k], tv_of(v));
        if (st != SI_OK) return st;
        in[k] = cur;
        cur += up((size_t)si_shape_numel(&v->shape) * el);
    }
    const si_value *xv = &g->values[n->in[0]], *yv = &g->values[n->out];
    const si_shape *xs = &xv->shape, *ys = &yv->shape;
    void *yfinal = vptr(cs, g, sl, n->out), *y = yfinal;
    bool convert_out = !si_devplan_rowmajor(yv);
    if (convert_out) y = cur;
    const void *x = in[0];
    switch (n->op) {
    case SI_OP_MATMUL: {
        gemm_x *gx = &cs->gemm[j];
        if (!gx->loop_nd) {
            si_status st = lt_run(cs, sl, gx, in[1], x, y);
            if (st != SI_OK) return st;
            break;
        }
        int nd = gx->loop_nd;
        int64_t M = gx->yd[nd - 2], N = gx->yd[nd - 1], K = gx->ad[nd - 1], nb = 1;
        for (int d = 0; d < nd - 2; d++) nb *= gx->yd[d];
        for (int64_t bi = 0; bi < nb; bi++) { // numpy broadcasting, matrix by matrix
            int64_t rem = bi, ia = 0, ib = 0, sa = 1, sb = 1;
            for (int d = nd - 3; d >= 0; d--) {
                int64_t c = rem % gx->yd[d];
                rem /= gx->yd[d];
                ia += (gx->ad[d] == 1 ? 0 : c) * sa;
                ib += (gx->bd[d] == 1 ? 0 : c) * sb;
                sa *= gx->ad[d];
                sb *= gx->bd[d];
            }
            si_status st =
                lt_run(cs, sl, gx, (const uint8_t *)in[1] + ib * K * N * el,
                       (const uint8_t *)x + ia * M * K * el, (uint8_t *)y + bi * M * N * el);
            if (st != SI_OK) return st;
        }
        break;
    }
    case SI_OP_SOFTMAX: {
        int a = n->axis < 0 ? n->axis + xs->ndim : n->axis;
        int64_t outer = 1, len = xs->dims[a], inner = 1;
        for (int d = 0; d < a; d++) outer *= xs->dims[d];
        for (int d = a + 1; d < xs->ndim; d++) inner *= xs->dims[d];
        if (n->legacy_axis) {
            len *= inner;
            inner = 1;
        }
        cudaCheck(si_k_softmax(s, t, x, outer, len, inner, y));
        break;
    }
    case SI_OP_REDUCE:
    case SI_OP_GLOBAL_AVGPOOL: {
        uint8_t mask[SI_MAX_DIMS] = {0};
        int op = SI_REDUCE_MEAN;
        if (n->op == SI_OP_REDUCE) {
            memcpy(mask, n->reduce_mask, sizeof mask);
            op = n->reduce_op;
            if (si_shape_numel(xs) == si_shape_numel(ys) && n->noop_with_empty_axes)
                memset(mask, 0, sizeof mask);
        } else {
            for (int d = 2; d < xs->ndim; d++) mask[d] = 1;
        }
        cudaCheck(si_k_reduce(s, t, op, xs->ndim, xs->dims, x, mask, y));
        break;
    }
    case SI_OP_GATHER: {
        const si_value *iv = &g->values[n->in[n->pslot[0]]];
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < n->axis; d++) outer *= xs->dims[d];
        for (int d = n->axis + 1; d < xs->ndim; d++) inner *= xs->dims[d];
        cudaCheck(si_k_gather(s, t, x, outer, xs->dims[n->axis], inner,
                              (const int64_t *)(cs->consts + cs->plan.aux_off[j]),
                              si_shape_numel(&iv->shape), y));
        break;
    }
    case SI_OP_PAD:
        cudaCheck(
            si_k_pad(s, t, n->pad_mode, xs->ndim, xs->dims, x, n->pads, n->pad_value, ys->dims, y));
        break;
    case SI_OP_RESIZE:
        cudaCheck(si_k_resize(s, t, &n->resize, xs->dims[0] * xs->dims[1], (int)xs->dims[2],
                              (int)xs->dims[3], (int)ys->dims[2], (int)ys->dims[3], n->scales[0],
                              n->scales[1], x, y));
        break;
    default: SI_ASSERT(!"not a row-major op");
    }
    if (convert_out)
        return map(s, SI_MAP_COPY, 0, no_act, t, yfinal, tv_of(yv), t, y, tv_rowmajor(ys));
    return SI_OK;
}

// the model: every node, then the outputs as float row-major into the slot's out_d
static si_status enqueue_model(si_engine *e, cuda_state *cs, slot_x *sl) {
    si_graph *g = e->g;
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op == SI_OP_HOST) continue;
        double t0 = e->node_seconds ? si_now() : 0;
        si_status st = run_node(e, cs, sl, j);
        if (st != SI_OK) return st;
        if (e->node_seconds) {
            cudaCheck(cudaStreamSynchronize(sl->stream));
            e->node_seconds[j] += si_now() - t0;
        }
    }
    for (int o = 0; o < g->n_outputs; o++) {
        const si_value *v = &g->values[g->outputs[o]];
        if (v->kind != SI_VAL_RUNTIME || si_shape_numel(&v->shape) == 0) continue;
        si_status st =
            map(sl->stream, SI_MAP_COPY, 0, no_act, SI_GT_F32, sl->out_d + cs->out_off[o],
                tv_rowmajor(&v->shape), cs->t, vptr(cs, g, sl, g->outputs[o]), tv_of(v));
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status launch_model(si_engine *e, cuda_state *cs, slot_x *sl) {
    if (sl->exec && !e->node_seconds) {
        cudaCheck(cudaGraphLaunch(sl->exec, sl->stream));
        return SI_OK;
    }
    return enqueue_model(e, cs, sl);
}

// float inputs (the engine API: exec, bench, tests) into the input values
static si_status enqueue_float_inputs(si_engine *e, cuda_state *cs, slot_x *sl) {
    si_graph *g = e->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const si_value *v = &g->values[g->inputs[i]];
        size_t bytes = sizeof(float) * (size_t)si_shape_numel(&v->shape);
        if (bytes == 0) continue;
        cudaCheck(cudaMemcpyAsync(sl->in_d + cs->in_off[i], sl->in_h + cs->in_off[i], bytes,
                                  cudaMemcpyHostToDevice, sl->stream));
        si_status st = map(sl->stream, SI_MAP_COPY, 0, no_act, cs->t, vptr(cs, g, sl, g->inputs[i]),
                           tv_of(v), SI_GT_F32, sl->in_d + cs->in_off[i], tv_rowmajor(&v->shape));
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status enqueue_download(si_engine *e, cuda_state *cs, slot_x *sl, int rows) {
    si_graph *g = e->g;
    for (int o = 0; o < g->n_outputs; o++) {
        const si_value *v = &g->values[g->outputs[o]];
        if (v->kind != SI_VAL_RUNTIME) continue;
        size_t n = cs->batch_rows ? (size_t)rows * (size_t)cs->out_row[o]
                                  : (size_t)si_shape_numel(&v->shape);
        if (n == 0) continue;
        cudaCheck(cudaMemcpyAsync(sl->out_h + cs->out_off[o], sl->out_d + cs->out_off[o],
                                  n * sizeof(float), cudaMemcpyDeviceToHost, sl->stream));
    }
    return SI_OK;
}

// --- backend entry points ---------------------------------------------------------------------
static void cuda_release(si_engine *e);

static si_status cuda_init_inner(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    double t0 = si_now();
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    int prec = e->opts.precision;
    cs->t = prec == SI_PREC_FP16 ? SI_GT_F16 : prec == SI_PREC_BF16 ? SI_GT_BF16 : SI_GT_F32;
    cs->dt = prec == SI_PREC_FP16   ? CUDNN_DATA_HALF
             : prec == SI_PREC_BF16 ? CUDNN_DATA_BFLOAT16
                                    : CUDNN_DATA_FLOAT;
    cs->ct = prec == SI_PREC_FP16 ? CUDA_R_16F : prec == SI_PREC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    bool pixels = e->opts.pixels;
    if (pixels) {
        const si_value *in = &g->values[g->inputs[0]];
        if (g->n_inputs != 1 || in->shape.ndim != 4 || in->shape.dims[1] != 3)
            return si_error(SI_ERR_UNSUPPORTED,
                            "cuda: the pixel path needs one (N, 3, H, W) input");
        cs->in_pixels = in->shape.dims[2] * in->shape.dims[3];
        for (int c = 0; c < 3; c++) {
            cs->pscale[c] = 1.0f / (255.0f * e->opts.std[c]);
            cs->pshift[c] = -e->opts.mean[c] / e->opts.std[c];
        }
    }
    // do the outputs scale with the batch? (then a short batch downloads only its rows)
    int B = e->max_batch;
    si_shape *at_max = (si_shape *)si_xcalloc((size_t)g->n_outputs + 1, sizeof(si_shape));
    for (int o = 0; o < g->n_outputs; o++) at_max[o] = g->values[g->outputs[o]].shape;
    si_status st = si_graph_infer(g, 1);
    cs->batch_rows = st == SI_OK;
    for (int o = 0; st == SI_OK && o < g->n_outputs; o++) {
        const si_shape *s1 = &g->values[g->outputs[o]].shape;
        bool ok = s1->ndim >= 1 && s1->ndim == at_max[o].ndim && s1->dims[0] == 1 &&
                  at_max[o].dims[0] == B;
        for (int d = 1; ok && d < s1->ndim; d++) ok = s1->dims[d] == at_max[o].dims[d];
        cs->batch_rows = cs->batch_rows && ok;
    }
    free(at_max);
    int slots = e->opts.slots;
    st = si_devplan_build(g, B, si_gtype_size(cs->t), slots, e->opts.workspace_bytes, pixels,
                          e->opts.pack_per_image, &cs->plan);
    if (st != SI_OK) return st;
    const si_devplan *p = &cs->plan;
    // node support, before anything is allocated
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_HOST) continue;
        for (int k = 0; k < n->n_in; k++)
            if (si_devplan_data_input(n, k) && g->values[n->in[k]].kind != SI_VAL_RUNTIME &&
                p->const_off[n->in[k]] == SIZE_MAX)
                return NODE_ERR(g, n, SI_ERR_INTERNAL, "cuda: constant input %d not planned", k);
        if ((n->op == SI_OP_MAXPOOL || n->op == SI_OP_AVGPOOL) &&
            (g->values[n->in[0]].kind != SI_VAL_RUNTIME || g->values[n->in[0]].shape.ndim != 4))
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: pooling needs a 4-D computed input");
        if (n->op == SI_OP_GLOBAL_AVGPOOL && g->values[n->in[0]].shape.ndim == 4 &&
            g->values[n->in[0]].kind != SI_VAL_RUNTIME)
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: pooling needs a computed input");
        if (n->op == SI_OP_RESIZE && g->values[n->in[0]].shape.ndim != 4)
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: Resize of a %d-D tensor",
                            g->values[n->in[0]].shape.ndim);
    }
    // the two allocations
    cs->in_off = (size_t *)si_xcalloc((size_t)g->n_inputs + 1, sizeof(size_t));
    cs->out_off = (size_t *)si_xcalloc((size_t)g->n_outputs + 1, sizeof(size_t));
    cs->out_row = (int64_t *)si_xcalloc((size_t)g->n_outputs + 1, sizeof(int64_t));
    size_t off = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        cs->in_off[i] = off;
        size_t numel = (size_t)si_shape_numel(&g->values[g->inputs[i]].shape);
        off += up(pixels && i == 0 ? numel : numel * sizeof(float));
    }
    off = 0;
    for (int o = 0; o < g->n_outputs; o++) {
        const si_shape *s = &g->values[g->outputs[o]].shape;
        cs->out_off[o] = off;
        off += up((size_t)si_shape_numel(s) * sizeof(float));
        cs->out_row[o] = s->ndim && s->dims[0] ? si_shape_numel(s) / s->dims[0] : 0;
    }
    size_t per_slot = p->activations + p->scratch + p->workspace + p->input + p->output + p->pack;
    size_t pool = p->pack ? up((size_t)B * e->opts.pack_per_image) : 0;
    st = dev_alloc((void **)&cs->dev, p->weights + (size_t)slots * per_slot);
    if (st != SI_OK)
        return si_error_prefix(st,
                               "cannot allocate the planned %.1f MiB on the GPU (shardinfer "
                               "plan shows the budget; lower --batch or --slots): ",
                               (double)p->device_total / 1048576.0);
    if ((st = host_alloc((void **)&cs->host, (size_t)slots * p->pinned)) != SI_OK) return st;
    cs->consts = cs->dev;
    ltCheck(cublasLtCreate(&cs->lt));
    cs->slots = (slot_x *)si_xcalloc((size_t)slots, sizeof(slot_x));
    e->n_slots = slots;
    for (int k = 0; k < slots; k++) {
        slot_x *sl = &cs->slots[k];
        uint8_t *b = cs->dev + p->weights + (size_t)k * per_slot;
        sl->arena = b;
        sl->scratch = b + p->activations;
        sl->ws = sl->scratch + p->scratch;
        sl->in_d = sl->ws + p->workspace;
        sl->out_d = sl->in_d + p->input;
        sl->in_h = cs->host + (size_t)k * p->pinned;
        sl->out_h = sl->in_h + p->input;
        if (p->pack) { // the pool, then B items, after the outputs
            sl->pack_d = sl->out_d + p->output;
            sl->items_d = (si_rs_item *)(sl->pack_d + pool);
            sl->pack_h = sl->out_h + p->output;
            sl->items_h = (si_rs_item *)(sl->pack_h + pool);
        }
        cudaCheck(cudaStreamCreateWithFlags(&sl->stream, cudaStreamNonBlocking));
        cudaCheck(
            cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming | cudaEventBlockingSync));
        cudaCheck(cudaEventCreate(&sl->t_begin));
        cudaCheck(cudaEventCreate(&sl->t_end));
        cudnnCheck(cudnnCreate(&sl->dnn));
        cudnnCheck(cudnnSetStream(sl->dnn, sl->stream));
        // defined contents everywhere: garbage rows of a short batch stay finite
        cudaCheck(cudaMemset(b, 0, per_slot));
        memset(sl->in_h, 0, p->pinned);
    }
    if ((st = upload_consts(e, cs)) != SI_OK) return st;
    cs->conv = (conv_x *)si_xcalloc((size_t)g->n_nodes + 1, sizeof(conv_x));
    cs->gemm = (gemm_x *)si_xcalloc((size_t)g->n_nodes + 1, sizeof(gemm_x));
    algo_memo *memo = (algo_memo *)si_xcalloc(512, sizeof(algo_memo));
    int n_memo = 0;
    const char *dw_env = getenv("SI_CUDNN_DEPTHWISE"); // read once: the A/B switch
    cs->dw_cudnn = dw_env && *dw_env && strcmp(dw_env, "0") != 0;
    for (int j = 0; j < g->n_nodes && st == SI_OK; j++) {
        int op = g->nodes[j].op;
        if (op == SI_OP_CONV)
            st = conv_init(e, cs, j, memo, &n_memo);
        else if (op == SI_OP_GEMM)
            st = gemm_init(e, cs, j);
        else if (op == SI_OP_MATMUL)
            st = matmul_init(e, cs, j);
    }
    free(memo);
    if (st != SI_OK) return st;
    // warm-up: one plain run per slot (cuDNN and cuBLASLt set themselves up, and a fused call
    // cuDNN refuses falls back to conv + epilogue), then the capture, then one replay
    for (int k = 0; k < slots; k++) {
        slot_x *sl = &cs->slots[k];
        for (int j = 0; j < g->n_nodes; j++) {
            if (g->nodes[j].op != SI_OP_CONV || !cs->conv[j].fused) continue;
            st = conv_run(e, cs, sl, j);
            if (st != SI_OK) { // cuDNN would not fuse this one
                si_error_clear();
                cs->conv[j].fused = false;
                if (e->opts.verbose)
                    fprintf(stderr, "cuda: %s: fused conv refused, conv + epilogue instead\n",
                            g->nodes[j].name);
            }
        }
        if ((st = enqueue_model(e, cs, sl)) != SI_OK) return st;
        cudaCheck(cudaStreamSynchronize(sl->stream));
    }
    if (!e->opts.no_graphs) {
        for (int k = 0; k < slots; k++) {
            slot_x *sl = &cs->slots[k];
            cudaGraph_t graph;
            cudaCheck(cudaStreamBeginCapture(sl->stream, cudaStreamCaptureModeThreadLocal));
            st = enqueue_model(e, cs, sl);
            cudaError_t ce = cudaStreamEndCapture(sl->stream, &graph);
            if (st != SI_OK) return st;
            cudaCheck(ce);
            ce = cudaGraphInstantiate(&sl->exec, graph, 0);
            cudaGraphDestroy(graph);
            cudaCheck(ce);
            cudaCheck(cudaGraphLaunch(sl->exec, sl->stream));
            cudaCheck(cudaStreamSynchronize(sl->stream));
        }
    }
    // the engine's host buffers are slot 0's pinned staging
    for (int i = 0; i < g->n_inputs; i++)
        e->host_in[i] = (float *)(cs->slots[0].in_h + cs->in_off[i]);
    for (int o = 0; o < g->n_outputs; o++)
        e->host_out[o] = (const float *)(cs->slots[0].out_h + cs->out_off[o]);
    si_engine_memory *m = &e->mem;
    m->weights = p->weights;
    m->activations = (size_t)slots * p->activations;
    m->scratch = (size_t)slots * p->scratch;
    m->workspace = (size_t)slots * p->workspace;
    m->input = (size_t)slots * (p->input + p->pack);
    m->output = (size_t)slots * p->output;
    m->pinned = p->pinned_total;
    m->device_total = p->device_total;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        m->device_used_after_init = total_b - free_b;
    cudaCheck(cudaEventCreate(&cs->t_ref));
    cudaCheck(cudaEventRecord(cs->t_ref, cs->slots[0].stream));
    cudaCheck(cudaEventSynchronize(cs->t_ref));
    cs->t_ref_host = si_now();
    m->init_seconds = si_now() - t0;
    e->activation_bytes = p->activations;
    e->naive_bytes = p->acts.naive_bytes;
    return SI_OK;
}

static si_status cuda_init(si_engine *e) {
    if (si_cuda_device_count() == 0)
        return si_error(SI_ERR_UNSUPPORTED,
                        "--backend cuda: no CUDA device is visible "
                        "(CUDA_VISIBLE_DEVICES='%s')",
                        getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
    cuda_state *cs = (cuda_state *)si_xcalloc(1, sizeof *cs);
    e->state = cs;
    nvtxRangePushA("engine init");
    si_status st = cuda_init_inner(e, cs);
    nvtxRangePop();
    return st;
}

static si_status cuda_run(si_engine *e, int batch) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!cs->batch_rows && batch != e->max_batch)
        return si_error(SI_ERR_UNSUPPORTED,
                        "cuda: this model's outputs do not scale with the "
                        "batch; run it at the batch it was planned for (%d)",
                        e->max_batch);
    slot_x *sl = &cs->slots[0];
    si_status st = enqueue_float_inputs(e, cs, sl);
    if (st == SI_OK) st = launch_model(e, cs, sl);
    if (st == SI_OK) st = enqueue_download(e, cs, sl, batch);
    if (st != SI_OK) return st;
    cudaCheck(cudaStreamSynchronize(sl->stream));
    for (int o = 0; o < e->g->n_outputs; o++) {
        const si_value *v = &e->g->values[e->g->outputs[o]];
        e->host_out[o] = v->kind == SI_VAL_RUNTIME ? (const float *)(sl->out_h + cs->out_off[o])
                                                   : (const float *)v->data;
    }
    return SI_OK;
}

static uint8_t *cuda_pixels(si_engine *e, int slot) {
    cuda_state *cs = (cuda_state *)e->state;
    return cs->slots[slot].in_h;
}

static uint8_t *cuda_pack(si_engine *e, int slot, si_rs_item **items, size_t *cap) {
    cuda_state *cs = (cuda_state *)e->state;
    *items = cs->slots[slot].items_h;
    *cap = (size_t)e->max_batch * e->opts.pack_per_image;
    return cs->slots[slot].pack_h;
}

static si_status cuda_submit(si_engine *e, int slot, int rows, size_t packed) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!e->opts.pixels) return si_error(SI_ERR_INTERNAL, "cuda: submit without the pixel path");
    if (!cs->batch_rows && rows != e->max_batch)
        return si_error(SI_ERR_UNSUPPORTED, "cuda: this model's outputs do not scale with the "
                                            "batch; a short batch cannot be run");
    slot_x *sl = &cs->slots[slot];
    sl->rows = rows;
    cudaCheck(cudaEventRecord(sl->t_begin, sl->stream));
    int64_t px = (int64_t)rows * cs->in_pixels;
    nvtxRangePushA("upload");
    cudaError_t ce;
    if (packed) { // the decoded images as they are, resized here into the crops in_d holds
        if (!sl->pack_h || packed > (size_t)e->max_batch * e->opts.pack_per_image)
            return si_error(SI_ERR_INTERNAL, "cuda: %zu packed bytes, planned for %zu", packed,
                            sl->pack_h ? (size_t)e->max_batch * e->opts.pack_per_image : 0);
        const si_value *in = &e->g->values[e->g->inputs[0]];
        ce = cudaMemcpyAsync(sl->pack_d, sl->pack_h, packed, cudaMemcpyHostToDevice, sl->stream);
        if (ce == cudaSuccess)
            ce = cudaMemcpyAsync(sl->items_d, sl->items_h, sizeof(si_rs_item) * (size_t)rows,
                                 cudaMemcpyHostToDevice, sl->stream);
        if (ce == cudaSuccess)
            ce = si_k_resize_crop(sl->stream, sl->pack_d, sl->items_d, rows, (int)in->shape.dims[2],
                                  (int)in->shape.dims[3], sl->in_d);
    } else {
        ce =
            cudaMemcpyAsync(sl->in_d, sl->in_h, (size_t)px * 3, cudaMemcpyHostToDevice, sl->stream);
    }
    if (ce == cudaSuccess)
        ce = si_k_normalize_nhwc(sl->stream, cs->t, sl->in_d, px, cs->pscale, cs->pshift,
                                 vptr(cs, e->g, sl, e->g->inputs[0]));
    nvtxRangePop();
    cudaCheck(ce);
    nvtxRangePushA("compute");
    si_status st = launch_model(e, cs, sl);
    nvtxRangePop();
    if (st != SI_OK) return st;
    nvtxRangePushA("download");
    st = enqueue_download(e, cs, sl, rows);
    nvtxRangePop();
    if (st != SI_OK) return st;
    cudaCheck(cudaEventRecord(sl->t_end, sl->stream));
    cudaCheck(cudaEventRecord(sl->done, sl->stream));
    return SI_OK;
}

static si_status cuda_collect(si_engine *e, int slot, const float **outs) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[slot];
    cudaCheck(cudaEventSynchronize(sl->done));
    for (int o = 0; o < e->g->n_outputs; o++) {
        const si_value *v = &e->g->values[e->g->outputs[o]];
        outs[o] = v->kind == SI_VAL_RUNTIME ? (const float *)(sl->out_h + cs->out_off[o])
                                            : (const float *)v->data;
    }
    return SI_OK;
}

// when the GPU began and ended the slot's last batch (collected), on the host's si_now() clock
static si_status cuda_times(si_engine *e, int slot, double *t0, double *t1) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[slot];
    float a = 0, b = 0;
    cudaCheck(cudaEventElapsedTime(&a, cs->t_ref, sl->t_begin));
    cudaCheck(cudaEventElapsedTime(&b, cs->t_ref, sl->t_end));
    *t0 = cs->t_ref_host + a / 1000.0;
    *t1 = cs->t_ref_host + b / 1000.0;
    return SI_OK;
}

static si_status cuda_run_compute(si_engine *e) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[0];
    si_status st = launch_model(e, cs, sl);
    if (st != SI_OK) return st;
    cudaCheck(cudaStreamSynchronize(sl->stream));
    return SI_OK;
}

static void cuda_release(si_engine *e) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!cs) return;
    si_graph *g = e->g;
    if (cs->slots) {
        for (int k = 0; k < e->n_slots; k++) {
            slot_x *sl = &cs->slots[k];
            if (sl->stream) cudaStreamSynchronize(sl->stream);
            if (sl->exec) cudaGraphExecDestroy(sl->exec);
            if (sl->dnn) cudnnDestroy(sl->dnn);
            if (sl->done) cudaEventDestroy(sl->done);
            if (sl->t_begin) cudaEventDestroy(sl->t_begin);
            if (sl->t_end) cudaEventDestroy(sl->t_end);
            if (sl->stream) cudaStreamDestroy(sl->stream);
        }
    }
    for (int j = 0; cs->conv && j < g->n_nodes; j++) {
        conv_x *c = &cs->conv[j];
        if (c->xd) cudnnDestroyTensorDescriptor(c->xd);
        if (c->yd) cudnnDestroyTensorDescriptor(c->yd);
        if (c->bd) cudnnDestroyTensorDescriptor(c->bd);
        if (c->wd) cudnnDestroyFilterDescriptor(c->wd);
        if (c->cd) cudnnDestroyConvolutionDescriptor(c->cd);
        if (c->ad) cudnnDestroyActivationDescriptor(c->ad);
    }
    for (int j = 0; cs->gemm && j < g->n_nodes; j++) {
        gemm_x *x = &cs->gemm[j];
        if (x->op) cublasLtMatmulDescDestroy(x->op);
        if (x->a) cublasLtMatrixLayoutDestroy(x->a);
        if (x->b) cublasLtMatrixLayoutDestroy(x->b);
        if (x->d) cublasLtMatrixLayoutDestroy(x->d);
    }
    if (cs->lt) cublasLtDestroy(cs->lt);
    if (cs->dev) {
        __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
        cudaFree(cs->dev);
    }
    if (cs->host) {
        __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
        cudaFreeHost(cs->host);
    }
    si_devplan_free(&cs->plan);
    free(cs->slots);
    free(cs->conv);
    free(cs->gemm);
    free(cs->in_off);
    free(cs->out_off);
    free(cs->out_row);
    free(cs);
    e->state = NULL;
    e->n_slots = 0;
}

extern "C" const si_backend si_cuda_backend = {
    "cuda",    cuda_init,   cuda_run,     cuda_release, cuda_pixels,
    cuda_pack, cuda_submit, cuda_collect, cuda_times,   cuda_run_compute,
};
