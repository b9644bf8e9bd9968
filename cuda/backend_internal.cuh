// The CUDA backend's own state, shared by its files (backend.cu: the si_backend entry points and
// the slot ring; consts.cu: weight uploads; conv.cu: cuDNN convolutions; gemm.cu: cuBLASLt Gemm
// and MatMul; dispatch.cu: the per-node launch). Internal: the extern "C" boundary is cuda/cuda.h
// and the si_backend table.
#ifndef SI_CUDA_BACKEND_INTERNAL_CUH
#define SI_CUDA_BACKEND_INTERNAL_CUH

#include <cublasLt.h>
#include <cudnn.h>

#include <string.h>

#include "cuda/attention.cuh"
#include "cuda/check.cuh"
#include "cuda/kernels.cuh"
#include "cuda/linear90.cuh"
extern "C" {
#include "engine/devplan.h"
#include "engine/backend.h"
}

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
    bool patch;  // a patchify conv: patches into scratch, one cuBLASLt GEMM (cs->gemm[j])
    int pro;     // dw: the conv whose bias and activation it applies to its input, -1 if none
    bool raw;    // its output is such a dw conv's input: it adds no bias and no activation
    bool nconv;  // our narrow-channel kernel (cuda/narrowconv.cu) runs it, not cuDNN
    cudnnMathType_t math; // cuDNN's math type for algo
} conv_x;

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; // a' = the weight side, b' = the activation side (see gemm.cu)
    cublasLtMatmulAlgo_t algo;
    float alpha, beta;
    bool prefill;   // y = broadcast(C) first, then y = alpha*A*B + beta*y
    bool act_after; // activation not done by the epilogue
    // a Linear layer with bias and GELU on an sm_90 device: CUTLASS's fused kernel (linear90.cuh)
    // runs it, variant l90 (-1: cuBLASLt and the activation pass); l90p holds its shapes
    int l90;
    si_linear90 l90p;
    // MatMul whose batch dims broadcast partially: one launch per output matrix
    int loop_nd;
    int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
} gemm_x;

// an attention node: our kernel's parameters and the operands' element offsets in their values;
// cuDNN's fused SDPA plan where init chose it (owns: this node built it, else an earlier node
// with the same operands did)
typedef struct {
    si_k_attn p;
    int64_t off[4];
    int ours; // which of our kernels runs it (si_k_attention_kernel, on slot 0's operands)
    cudnnBackendDescriptor_t plan;
    bool owns, decided;
} attn_x;

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
    si_devplan plan; // every offset below comes from it (in_off, out_off, the slots' carve)
    int t;           // si_gtype of activations
    cudnnDataType_t dt;
    cudaDataType_t ct;
    uint8_t *dev, *host; // the two allocations
    uint8_t *consts;
    cublasLtHandle_t lt;
    slot_x *slots;
    conv_x *conv;      // per node
    gemm_x *gemm;      // per node
    attn_x *attn;      // per node
    bool batch_rows;   // every output's dim 0 is the batch: short batches download fewer rows
    int64_t in_pixels; // H * W of the pixel input
    bool dw_cudnn;     // SI_CUDNN_DEPTHWISE=1: cuDNN runs depthwise convs, no prologue fusion
    float pscale[3], pshift[3];
    bool linear90;    // Linear + bias + GELU may run as one Hopper GEMM (SI_LINEAR90=0: never)
    bool lt_timed;    // cuBLASLt's candidates for a large matmul are timed (SI_LT_TIME=0: never)
    double lt_heur_s; // seconds in cuBLASLt's heuristic queries at init (--verbose says them)
    bool
        host_mapped; // the page-locked block is si_pages_alloc's, registered (else cudaHostAlloc's)
    cudaEvent_t t_ref; // a timed event and the host clock when it completed: the GPU's times on
    double t_ref_host; // the host's clock (--timeline)
} cuda_state;

// --- views ------------------------------------------------------------------------------------
static inline si_tview tv_rowmajor(const si_shape *s) {
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
static inline si_tview tv_of(const si_value *v) {
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
static inline si_tview tv_align(si_tview v, int nd) {
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

static inline si_tview tv_none(void) {
    si_tview t;
    memset(&t, 0, sizeof t);
    return t;
}

// where value v lives for slot sl: its arena offset, or the constant buffer (NULL if not there)
static inline void *vptr(cuda_state *cs, const si_graph *g, const slot_x *sl, int v) {
    if (g->values[v].kind == SI_VAL_RUNTIME) return sl->arena + cs->plan.acts.offset[v];
    size_t off = cs->plan.const_off[v];
    return off == SIZE_MAX ? NULL : cs->consts + off;
}

static inline si_status map(cudaStream_t s, int kind, int op, si_act act, int ty, void *y,
                            si_tview vy, int ta, const void *a, si_tview va, const void *b = NULL,
                            si_tview vb = tv_none(), const void *c = NULL,
                            si_tview vc = tv_none()) {
    cudaCheck(si_k_map(s, kind, op, act, ty, y, vy, ta, a, va, b, vb, c, vc));
    return SI_OK;
}

static const si_act no_act = {0, 0, 0, 0, 0};

static inline size_t up(size_t n) {
    return (n + SI_DEV_ALIGN - 1) / SI_DEV_ALIGN * SI_DEV_ALIGN;
}

// --- cuda_util.cu ------------------------------------------------------------------------------
// ms per call of launch(ctx), which queues one run on stream s and says whether it could: the
// best of three after one that loads and warms it; < 0 if a launch or the timing failed (its
// error cleared). Init's choices between kernels use it.
float si_cuda_time_best(cudaStream_t s, bool (*launch)(void *ctx), void *ctx);

// --- consts.cu --------------------------------------------------------------------------------
// The constants into cs->consts at the plan's offsets (conv weights as KRSC, Gather's indices
// as int64), in the backend's type; stages them in host memory it frees.
si_status si_cuda_upload_consts(si_engine *e, cuda_state *cs);
// Depthwise conv j's weights as float (kh, kw, C) at the plan's dw_off.
si_status si_cuda_dw_upload(cuda_state *cs, const si_graph *g, int j);

// --- conv.cu ----------------------------------------------------------------------------------
// Per-init memory of cuDNN's algorithm choices (the same conv shape is timed once).
typedef struct algo_memo algo_memo;
algo_memo *si_cuda_memo_new(void);
void si_cuda_memo_free(algo_memo *m); // accepts NULL
// Sets conv j up: our depthwise kernel or cuDNN's descriptors and a timed algorithm choice.
si_status si_cuda_conv_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo);
// Whether conv j runs as patches and one GEMM (its weights' rows padded to si_devplan_patch_k).
bool si_cuda_conv_patch(const cuda_state *cs, const si_graph *g, int j);
si_status si_cuda_conv_run(si_engine *e, cuda_state *cs, slot_x *sl, int j);
void si_cuda_conv_release(conv_x *c);

// --- gemm.cu ----------------------------------------------------------------------------------
// Gemm and MatMul j: cuBLASLt's descriptors and algorithm (a large one's timed among cuBLASLt's
// candidates, or taken from memo), or the fused Linear + activation kernel
si_status si_cuda_gemm_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo);
si_status si_cuda_matmul_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo);
si_status si_cuda_patch_init(si_engine *e, cuda_state *cs, int j);
// y = alpha * a b + beta * c (c NULL: y itself) and the epilogue
si_status si_cuda_lt_run(cuda_state *cs, slot_x *sl, gemm_x *x, const void *a, const void *b,
                         const void *c, void *y);
void si_cuda_gemm_release(gemm_x *x);

// --- sdpa.cu ----------------------------------------------------------------------------------
// Our attention kernel's parameters for node n and the element offsets of Q, K, V and Y in their
// values.
void si_cuda_attn_params(const si_graph *g, const si_gnode *n, si_k_attn *p, int64_t off[4]);
// Sets attention node j up: cuDNN's fused SDPA if it takes the node and (SI_SDPA_TIMED) runs
// faster than our kernel on slot 0 or (SI_SDPA_ALWAYS) runs at all, else our kernel.
enum { SI_SDPA_NEVER, SI_SDPA_TIMED, SI_SDPA_ALWAYS }; // SI_CUDNN_SDPA=0, unset, 1
// The choice is the autotune cache's where memo has it (mode SI_SDPA_TIMED), and is added there.
si_status si_cuda_attn_init(si_engine *e, cuda_state *cs, int j, int mode, algo_memo *memo);
enum { SI_ATTN_INPUTS = 5 };
// Attention node n's operands among its inputs node_in[] (the node's order) into in[]: Q, K, V,
// then the bias and q's scales (a cosine attention's), NULL where it has none.
void si_cuda_attn_inputs(const si_gnode *n, const void *const *node_in,
                         const void *in[SI_ATTN_INPUTS]);
// Queues node j on sl: Q, K, V, bias (or NULL), a cosine attention's scales of Q (or NULL) and
// Y's values at in[0..4] and y, row-major.
si_status si_cuda_attn_run(cuda_state *cs, slot_x *sl, const si_graph *g, int j,
                           const void *const in[SI_ATTN_INPUTS], void *y);
void si_cuda_attn_release(attn_x *x); // the plan if it owns it

// --- dispatch.cu ------------------------------------------------------------------------------
// Queues node j on slot sl's stream.
si_status si_cuda_run_node(si_engine *e, cuda_state *cs, slot_x *sl, int j);
// Whether the backend runs node n; false: a short reason in why[cap] (cuda_supports_op).
bool si_cuda_node_ok(const si_graph *g, const si_gnode *n, char *why, size_t cap);

#endif
