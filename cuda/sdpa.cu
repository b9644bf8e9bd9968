// The attention node (SI_OP_ATTENTION) on the GPU: cuDNN's fused scaled-dot-product attention
// (the graph API's SDPA_FWD operation, cuDNN 9.13 and later, FP16/BF16, no bias, head size 32, 64
// or 128) where cuDNN takes the node's operands as they lie, gives our kernel's result on random
// operands, and ran faster than our flash kernel (cuda/attention.cu) at init; that kernel
// otherwise (FP32, a bias or Swin's mask, an older cuDNN, a layout cuDNN refuses or gets wrong,
// or simply slower). Both read Q, K and V as strided views of the QKV projection and write the
// merged heads in place, so the choice moves no data. cuDNN 9.14 on an H100 took K given as K^T
// and computed it wrongly (the check refuses it), and at head size 40 passed the check yet gave
// wrong results in the model's run (si_attention_head_40, SI_CUDNN_SDPA=1): hence the head
// sizes allowed, each with its case in the GPU tests (tests/sdpa_check.sh).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/attention.cuh"
#include "cuda/autotune.cuh"
#include "cuda/backend_internal.cuh"
#include "cuda/elem.cuh"

typedef cudnnBackendDescriptor_t desc;

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE };

void si_cuda_attn_params(const si_graph *g, const si_gnode *n, si_k_attn *p, int64_t off[4]) {
    si_attn_view op[4];
    si_attention_operands(g, n, op);
    const si_shape *q = &op[0].shape, *v = &op[2].shape;
    int nd = q->ndim;
    memset(p, 0, sizeof *p);
    p->nb = 1;
    p->nbd = nd - 2;
    for (int d = 0; d < nd - 2; d++) {
        p->nb *= q->dims[d];
        p->bdims[d] = q->dims[d];
        for (int i = 0; i < 4; i++) p->ost[i][d] = op[i].st[d];
    }
    for (int i = 0; i < 4; i++) {
        p->ld[i] = op[i].st[nd - 2];
        off[i] = op[i].off;
    }
    p->t = q->dims[nd - 2];
    p->s = v->dims[nd - 2];
    p->d = q->dims[nd - 1];
    p->dv = v->dims[nd - 1];
    p->scale = n->alpha;
    p->trans_b = n->trans_b;
    p->act = n->act;
    if (n->qk_norm) {
        p->qk_eps = n->epsilon;
        p->qs_div = n->qk_norm == 2 ? n->rn_div : 1;
        p->qs_mod = n->qk_norm == 2 ? n->rn_mod : 1;
    }
    if (si_attention_bias(n) >= 0) {
        si_tview bv = tv_align(tv_rowmajor(&g->values[si_attention_bias(n)].shape), nd);
        for (int d = 0; d < nd; d++)
            if (bv.dims[d] == 1) bv.st[d] = 0;
        for (int d = 0; d < nd - 2; d++) {
            p->bst[d] = bv.st[d];
            p->bmod[d] = bv.dims[d] > 0 ? bv.dims[d] : 1;
        }
        p->bst_t = bv.st[nd - 2];
        p->bst_s = bv.st[nd - 1];
    }
}

// cuDNN's (B, H, rows, cols) for operand i: the batch dims as two (leading ones merged where
// their strides allow it); false if they cannot be, or one broadcasts (stride 0)
static bool dims4(const si_k_attn *p, int i, int64_t rows, int64_t cols, int64_t dims[4],
                  int64_t st[4]) {
    const int nbd = p->nbd;
    const int64_t *bd = p->bdims, *os = p->ost[i];
    for (int d = 0; d < nbd; d++)
        if (bd[d] > 1 && os[d] == 0) return false;
    int64_t h = nbd ? bd[nbd - 1] : 1, sh = nbd ? os[nbd - 1] : rows * cols, b = 1;
    for (int d = 0; d < nbd - 1; d++) {
        if (d < nbd - 2 && os[d] != os[d + 1] * bd[d + 1]) return false;
        b *= bd[d];
    }
    dims[0] = b, dims[1] = h, dims[2] = rows, dims[3] = cols;
    st[0] = nbd >= 2 ? os[nbd - 2] : h * sh, st[1] = sh;
    return true;
}

static desc make(cudnnBackendDescriptorType_t type) {
    desc d = NULL;
    return cudnnBackendCreateDescriptor(type, &d) == CUDNN_STATUS_SUCCESS ? d : NULL;
}

static void drop(desc d) {
    if (d) cudnnBackendDestroyDescriptor(d);
}

#define SET(d, name, type, n, v)                                                                   \
    (cudnnBackendSetAttribute(d, name, type, n, v) == CUDNN_STATUS_SUCCESS)

// a finalized tensor descriptor (NULL if cuDNN refuses it); by_value: a host scalar
static desc tensor(cudnnDataType_t dt, const int64_t dims[4], const int64_t st[4], int64_t uid,
                   bool by_value) {
    desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = by_value ? 4 : 16;
    if (!t || !SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        !SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) ||
        !SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st) ||
        !SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        !SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
        (by_value && !SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)) ||
        cudnnBackendFinalize(t) != CUDNN_STATUS_SUCCESS) {
        drop(t);
        return NULL;
    }
    return t;
}

// The finalized SDPA_FWD operation graph of p on handle h, or NULL with the reason in why.
// Owns nothing it returns but the graph (the descriptors it references are destroyed here; cuDNN
// copies what it needs at finalize).
static desc sdpa_graph(cudnnHandle_t h, cudnnDataType_t dt, const si_k_attn *p, const char **why) {
    int64_t dq[4], sq[4], dk[4], sk[4], dv[4], sv[4], dout[4], so[4];
    if (!dims4(p, 0, p->t, p->d, dq, sq) || !dims4(p, 1, p->s, p->d, dk, sk) ||
        !dims4(p, 2, p->s, p->dv, dv, sv) || !dims4(p, 3, p->t, p->dv, dout, so)) {
        *why = "batch dims that do not merge into two";
        return NULL;
    }
    // cuDNN's layouts (BHSD, BSHD, interleaved) read the head dim contiguous, in 16-byte
    // vectors; it accepted K^T's (the head dim strided) and computed something else (1.01 of
    // max |y| off ViT-B/16 from torchvision, whose K reached it transposed)
    if (!p->trans_b) {
        *why = "K given transposed (its head dim strided): no layout of cuDNN's SDPA";
        return NULL;
    }
    const int64_t es = dt == CUDNN_DATA_FLOAT ? 4 : 2;
    for (int i = 0; i < 4; i++) {
        const int64_t *st = i == 0 ? sq : i == 1 ? sk : i == 2 ? sv : so;
        if ((p->ld[i] * es) % 16 || (st[0] * es) % 16 || (st[1] * es) % 16) {
            *why = "strides that are not multiples of 16 bytes";
            return NULL;
        }
    }
    sq[2] = p->ld[0], sq[3] = 1;
    sk[2] = p->ld[1], sk[3] = 1; // K's rows are keys
    sv[2] = p->ld[2], sv[3] = 1;
    so[2] = p->ld[3], so[3] = 1;
    const int64_t one[4] = {1, 1, 1, 1};
    desc t[5] = {tensor(dt, dq, sq, UID_Q, false), tensor(dt, dk, sk, UID_K, false),
                 tensor(dt, dv, sv, UID_V, false), tensor(dt, dout, so, UID_O, false),
                 tensor(CUDNN_DATA_FLOAT, one, one, UID_SCALE, true)};
    desc op = NULL, graph = NULL;
    *why = "a tensor cuDNN refuses";
    if (!t[0] || !t[1] || !t[2] || !t[3] || !t[4]) goto done;
    *why = "no SDPA operation in this cuDNN (9.13 or later has it)";
    op = make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    if (!op) goto done;
    *why = "cuDNN refuses the SDPA operation";
    if (!SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[0]) ||
        !SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[1]) ||
        !SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[2]) ||
        !SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[3]) ||
        !SET(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &t[4]) ||
        cudnnBackendFinalize(op) != CUDNN_STATUS_SUCCESS)
        goto done;
    *why = "cuDNN refuses the operation graph";
    graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!graph ||
        !SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op) ||
        !SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        cudnnBackendFinalize(graph) != CUDNN_STATUS_SUCCESS) {
        drop(graph);
        graph = NULL;
    }
done:
    drop(op);
    for (int i = 0; i < 5; i++) drop(t[i]);
    return graph;
}

// Queues the plan on sl's stream: Q, K, V, Y at those device addresses, the scale by value.
static cudnnStatus_t sdpa_exec(desc plan, cudnnHandle_t h, void *ws, float scale, const void *q,
                               const void *k, const void *v, void *y) {
    int64_t uids[5] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE};
    void *ptrs[5] = {(void *)q, (void *)k, (void *)v, y, &scale};
    desc vp = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    if (!vp) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnStatus_t st = CUDNN_STATUS_BAD_PARAM;
    if (SET(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids) &&
        SET(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs) &&
        SET(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) &&
        (st = cudnnBackendFinalize(vp)) == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendExecute(h, plan, vp);
    drop(vp);
    return st;
}

// node j's Q, K, V, bias and Y where they lie in slot sl (init's timing reads and writes them
// there; a run converts operands stored NHWC into row-major scratch first, dispatch.cu)
void si_cuda_attn_inputs(const si_gnode *n, const void *const *node_in,
                         const void *in[SI_ATTN_INPUTS]) {
    for (int i = 0; i < 3; i++) in[i] = node_in[i];
    in[3] = si_attention_bias(n) >= 0 ? node_in[3] : NULL;
    in[4] = si_attention_qk_scale(n) >= 0 ? node_in[n->n_in - 1] : NULL;
}

static void operands(cuda_state *cs, const si_graph *g, const slot_x *sl, int j,
                     const void *in[SI_ATTN_INPUTS], void **y) {
    const si_gnode *n = &g->nodes[j];
    const void *node_in[SI_ATTN_INPUTS];
    SI_ASSERT(n->n_in <= SI_ATTN_INPUTS); // Q, K, V, a bias, q's scales
    for (int i = 0; i < n->n_in; i++) node_in[i] = vptr(cs, g, sl, n->in[i]);
    si_cuda_attn_inputs(n, node_in, in);
    *y = vptr(cs, g, sl, n->out);
}

// which of our kernels runs node j on slot 0's operands (init times it there)
static int our_kernel(cuda_state *cs, const si_graph *g, int j) {
    const attn_x *x = &cs->attn[j];
    const void *in[SI_ATTN_INPUTS];
    void *y;
    operands(cs, g, &cs->slots[0], j, in, &y);
    size_t es = si_gtype_size(cs->t);
    return si_k_attention_kernel(
        cs->t, &x->p, (const char *)in[0] + x->off[0] * es, (const char *)in[1] + x->off[1] * es,
        (const char *)in[2] + x->off[2] * es, in[3], (char *)y + x->off[3] * es);
}

si_status si_cuda_attn_run(cuda_state *cs, slot_x *sl, const si_graph *g, int j,
                           const void *const in[SI_ATTN_INPUTS], void *y) {
    const attn_x *x = &cs->attn[j];
    size_t es = si_gtype_size(cs->t);
    const char *q = (const char *)in[0] + x->off[0] * es, *k = (const char *)in[1] + x->off[1] * es,
               *v = (const char *)in[2] + x->off[2] * es;
    char *yy = (char *)y + x->off[3] * es;
    if (x->plan) {
        cudnnStatus_t st = sdpa_exec(x->plan, sl->dnn, sl->ws, x->p.scale, q, k, v, yy);
        if (st != CUDNN_STATUS_SUCCESS)
            return cudnnFail(st, "node '%s' (cuDNN's fused attention): ", g->nodes[j].name);
        return SI_OK;
    }
    si_k_attn p = x->p;
    p.qk_scale = in[4]; // a cosine attention's scales of q, where this slot has them
    cudaCheck(si_k_attention(sl->stream, cs->t, &p, q, k, v, in[3], yy));
    return SI_OK;
}

// one run of node j as it stands (plan or our kernel) on slot 0 (si_cuda_time_best's launch)
typedef struct {
    cuda_state *cs;
    const si_graph *g;
    int j;
} node_run;
static bool run_node(void *ctx) {
    const node_run *r = (const node_run *)ctx;
    const void *in[SI_ATTN_INPUTS];
    void *y;
    operands(r->cs, r->g, &r->cs->slots[0], r->j, in, &y);
    return si_cuda_attn_run(r->cs, &r->cs->slots[0], r->g, r->j, in, y) == SI_OK;
}

// ms per call of node j as it stands on slot 0; < 0 if it failed
static float time_node(cuda_state *cs, const si_graph *g, int j) {
    node_run r = {cs, g, j};
    return si_cuda_time_best(cs->slots[0].stream, run_node, &r);
}

static bool same_shape(const si_k_attn *a, const si_k_attn *b) {
    if (a->nb != b->nb || a->t != b->t || a->s != b->s || a->d != b->d || a->dv != b->dv ||
        a->trans_b != b->trans_b || a->nbd != b->nbd)
        return false;
    for (int i = 0; i < 4; i++) {
        if (a->ld[i] != b->ld[i]) return false;
        for (int d = 0; d < a->nbd; d++)
            if (a->ost[i][d] != b->ost[i][d]) return false;
    }
    for (int d = 0; d < a->nbd; d++)
        if (a->bdims[d] != b->bdims[d]) return false;
    return true;
}

// The first execution plan of cuDNN's heuristics for graph that finalizes and fits ws bytes of
// workspace, or NULL.
static desc first_plan(cudnnHandle_t h, desc graph, size_t ws, const char **why) {
    enum { MAXCFG = 4 };
    desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), cfg[MAXCFG] = {0}, plan = NULL;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t got = 0;
    *why = "cuDNN has no engine for it";
    if (!heur ||
        !SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &graph) ||
        !SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
        cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS)
        goto done;
    for (int i = 0; i < MAXCFG; i++) cfg[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 MAXCFG, &got, cfg) != CUDNN_STATUS_SUCCESS)
        got = 0;
    for (int i = 0; i < got && !plan; i++) {
        plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        int64_t need = 0, n = 0;
        if (!plan || !SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
            !SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &cfg[i]) ||
            cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &need) != CUDNN_STATUS_SUCCESS ||
            (size_t)need > ws) {
            if (need > 0 && (size_t)need > ws) *why = "its workspace exceeds the plan's";
            drop(plan);
            plan = NULL;
        }
    }
done:
    for (int i = 0; i < MAXCFG; i++) drop(cfg[i]);
    drop(heur);
    return plan;
}

// uniform values in [-2, 2) from a hash of the index: Q, K and V for the check below
template <typename T> __global__ void k_rand(T *y, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        y[i] = si_from_f<T>((float)(h & 0xffff) / 16384.f - 2.f);
    }
}

// out[0] = max |a - b|, out[1] = max |a| (as the bits of non-negative floats, which order as
// unsigned integers), out[2] = elements NaN in one and not the other (the poison either left)
template <typename T> __global__ void k_compare(const T *a, const T *b, int64_t n, unsigned *out) {
    float md = 0.f, ma = 0.f;
    unsigned odd = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = si_to_f(a[i]), y = si_to_f(b[i]);
        if (isnan(x) || isnan(y)) {
            odd += isnan(x) != isnan(y);
            continue;
        }
        md = fmaxf(md, fabsf(x - y));
        ma = fmaxf(ma, fabsf(x));
    }
    atomicMax(&out[0], __float_as_uint(md));
    atomicMax(&out[1], __float_as_uint(ma));
    if (odd) atomicAdd(&out[2], odd);
}

// Whether plan computes node j as our kernel does, on random Q, K and V in slot 0, with cuDNN's
// run captured in a CUDA Graph and replayed as the model's is (cuDNN 9.14 accepts layouts it
// then gets wrong: K given as K^T). Leaves the node's computed values zero, as slot_create made
// them. *err: max |cudnn - ours| / max |ours|, or -1 if
// the check itself could not run (then the plan is not kept either).
static bool plan_agrees(cuda_state *cs, const si_graph *g, int j, desc plan, float *err) {
    const si_gnode *n = &g->nodes[j];
    slot_x *sl = &cs->slots[0];
    attn_x *x = &cs->attn[j];
    const int64_t ny = si_shape_numel(&g->values[n->out].shape);
    const size_t es = si_gtype_size(cs->t);
    const void *in[SI_ATTN_INPUTS];
    void *y, *ref = NULL;
    unsigned *cmp = NULL, got[3] = {0, 0, 0};
    *err = -1.f;
    operands(cs, g, sl, j, in, &y);
    bool ok = cudaMalloc(&ref, (size_t)ny * es) == cudaSuccess &&
              cudaMalloc((void **)&cmp, sizeof got) == cudaSuccess &&
              cudaMemsetAsync(cmp, 0, sizeof got, sl->stream) == cudaSuccess;
    for (int i = 0; ok && i < 3; i++) { // the computed ones: a constant keeps its values
        if (g->values[n->in[i]].kind != SI_VAL_RUNTIME) continue;
        int64_t nv = si_shape_numel(&g->values[n->in[i]].shape);
        if (cs->t == SI_GT_BF16)
            k_rand<<<264, 256, 0, sl->stream>>>((__nv_bfloat16 *)in[i], nv, 977u * (i + 1));
        else
            k_rand<<<264, 256, 0, sl->stream>>>((__half *)in[i], nv, 977u * (i + 1));
    }
    ok = ok && si_k_fill(sl->stream, cs->t, y, ny, NAN) == cudaSuccess;
    ok = ok && si_cuda_attn_run(cs, sl, g, j, in, y) == SI_OK; // ours: x->plan is NULL
    ok = ok && cudaMemcpyAsync(ref, y, (size_t)ny * es, cudaMemcpyDeviceToDevice, sl->stream) ==
                   cudaSuccess;
    ok = ok && si_k_fill(sl->stream, cs->t, y, ny, NAN) == cudaSuccess;
    ok = ok && cudaStreamSynchronize(sl->stream) == cudaSuccess;
    // cuDNN's run as the model runs it: captured in a CUDA Graph and replayed
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    x->plan = plan;
    if (ok && cudaStreamBeginCapture(sl->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        ok = si_cuda_attn_run(cs, sl, g, j, in, y) == SI_OK;
        ok = cudaStreamEndCapture(sl->stream, &graph) == cudaSuccess && ok;
    } else {
        ok = false;
    }
    x->plan = NULL;
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
         cudaGraphLaunch(exec, sl->stream) == cudaSuccess;
    if (ok) {
        if (cs->t == SI_GT_BF16)
            k_compare<<<264, 256, 0, sl->stream>>>((const __nv_bfloat16 *)ref,
                                                   (const __nv_bfloat16 *)y, ny, cmp);
        else
            k_compare<<<264, 256, 0, sl->stream>>>((const __half *)ref, (const __half *)y, ny, cmp);
        ok = cudaMemcpyAsync(got, cmp, sizeof got, cudaMemcpyDeviceToHost, sl->stream) ==
                 cudaSuccess &&
             cudaStreamSynchronize(sl->stream) == cudaSuccess;
    }
    for (int i = 0; i < 3; i++)
        if (g->values[n->in[i]].kind == SI_VAL_RUNTIME)
            cudaMemsetAsync((void *)in[i], 0,
                            (size_t)si_shape_numel(&g->values[n->in[i]].shape) * es, sl->stream);
    cudaMemsetAsync(y, 0, (size_t)ny * es, sl->stream);
    cudaStreamSynchronize(sl->stream);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaFree(ref);
    cudaFree(cmp);
    si_error_clear();
    cudaGetLastError();
    if (!ok) return false;
    float md, ma;
    memcpy(&md, &got[0], sizeof md);
    memcpy(&ma, &got[1], sizeof ma);
    *err = got[2] ? INFINITY : md / (ma > 0.f ? ma : 1.f);
    // our kernel and cuDNN's both accumulate in FP32 and round the probabilities to the type:
    // they differ by a few of its roundings (a wrong layout gives errors of order 1)
    return *err <= (cs->t == SI_GT_BF16 ? 3e-2f : 1e-2f);
}

// The autotune cache's key of an attention node (autotune.cuh): what same_shape compares, and
// which of our kernels the choice was timed against (SI_ATTN90=0 changes it on the same GPU)
static void attn_key(const attn_x *x, int64_t key[ATTN_KEY]) {
    const si_k_attn *p = &x->p;
    memset(key, 0, sizeof(int64_t) * ATTN_KEY);
    const int64_t head[] = {p->nb,  p->t,     p->s,     p->d,     p->dv,    p->trans_b,
                            p->nbd, p->ld[0], p->ld[1], p->ld[2], p->ld[3], x->ours};
    int k = 0;
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) key[k++] = head[i];
    for (int d = 0; d < p->nbd && k + 5 <= ATTN_KEY; d++) {
        key[k++] = p->bdims[d];
        for (int i = 0; i < 4; i++) key[k++] = p->ost[i][d];
    }
}

// plan (NULL: none) if it computes node j as our kernel does, else NULL (plan dropped) with why
// set and err by how much they differ (< 0 if the check could not run): a plan built here and
// one loaded from the autotune cache pass the same check
static desc agreeing(cuda_state *cs, const si_graph *g, int j, desc plan, const char **why,
                     float *err, char *said, size_t cap) {
    if (!plan || plan_agrees(cs, g, j, plan, err)) return plan;
    if (*err >= 0.f)
        snprintf(said, cap, "disagrees with our kernel by %.3g of max |y|", *err);
    else
        snprintf(said, cap, "its check could not run");
    *why = said;
    drop(plan);
    return NULL;
}

// cuDNN's plan for node j, or NULL with why set: built, and checked against our kernel
static desc checked_plan(cuda_state *cs, const si_graph *g, int j, const si_k_attn *p,
                         const char **why, float *err, char *said, size_t cap) {
    desc graph = sdpa_graph(cs->slots[0].dnn, cs->dt, p, why);
    desc plan = graph ? first_plan(cs->slots[0].dnn, graph, cs->plan.workspace, why) : NULL;
    drop(graph);
    return agreeing(cs, g, j, plan, why, err, said, cap);
}

// A plan's serialized form (cuDNN's JSON representation, which carries a runtime-compiled
// engine's kernel), malloc'd with *n its bytes, or NULL where cuDNN gives none
static char *plan_serialize(desc plan, size_t *n) {
    int64_t count = 0;
    *n = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, 0, &count, NULL) != CUDNN_STATUS_SUCCESS ||
        count <= 0)
        return NULL;
    char *data = (char *)malloc((size_t)count);
    if (!data ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, count, &count, data) != CUDNN_STATUS_SUCCESS) {
        free(data);
        return NULL;
    }
    *n = (size_t)count;
    return data;
}

// The plan that data (plan_serialize's) describes, finalized on handle h, or NULL if cuDNN
// refuses it (another driver, a damaged blob) or it needs more than ws bytes of workspace
static desc plan_deserialize(cudnnHandle_t h, const char *data, size_t n, size_t ws) {
    desc plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    int64_t need = 0, got = 0;
    if (!plan || !SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        !SET(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)n,
             data) ||
        cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &got, &need) != CUDNN_STATUS_SUCCESS ||
        (size_t)need > ws) {
        drop(plan);
        return NULL;
    }
    return plan;
}

// The name of node j's serialized plan beside the autotune cache: a hash of its cache key
static void plan_tag(const int64_t key[ATTN_KEY], int t, char tag[40]) {
    uint64_t h = 1469598103934665603ull; // FNV-1a over the key's bytes and the type
    const unsigned char *b = (const unsigned char *)key;
    for (size_t i = 0; i < sizeof(int64_t) * ATTN_KEY; i++) h = (h ^ b[i]) * 1099511628211ull;
    h = (h ^ (unsigned)t) * 1099511628211ull;
    snprintf(tag, 40, "sdpa-%016llx", (unsigned long long)h);
}

// cuDNN's plan for node j from the blob beside the autotune cache, checked against our kernel as
// a built one is; NULL if there is none or it does not load or agree (then it is built)
static desc cached_plan(cuda_state *cs, const si_graph *g, int j, const algo_memo *memo,
                        const int64_t key[ATTN_KEY]) {
    char tag[40];
    plan_tag(key, cs->t, tag);
    size_t n = 0;
    char *data = (char *)si_cuda_autotune_blob_load(memo, tag, &n);
    desc plan = data ? plan_deserialize(cs->slots[0].dnn, data, n, cs->plan.workspace) : NULL;
    free(data);
    const char *why = NULL;
    float err = -1.f;
    char said[96];
    return agreeing(cs, g, j, plan, &why, &err, said, sizeof said);
}

// Keeps node j's plan beside the autotune cache for the next start (a failure is said by save)
static void keep_plan(const cuda_state *cs, const algo_memo *memo, const int64_t key[ATTN_KEY],
                      desc plan) {
    char tag[40];
    plan_tag(key, cs->t, tag);
    size_t n = 0;
    char *data = plan_serialize(plan, &n);
    if (data) si_cuda_autotune_blob_save(memo, tag, data, n);
    free(data);
}

// The autotune cache's choice for node j (true: taken, its plan loaded or built where it is
// cuDNN's), else false with *at the entry to replace (-1: none)
static bool cached_choice(si_engine *e, cuda_state *cs, int j, const int64_t key[ATTN_KEY],
                          algo_memo *memo, int *at) {
    const si_graph *g = e->g;
    attn_x *x = &cs->attn[j];
    *at = -1;
    int i = 0;
    while (i < memo->an && (memo->ae[i].t != cs->t ||
                            memcmp(memo->ae[i].key, key, sizeof(int64_t) * ATTN_KEY) != 0))
        i++;
    if (i == memo->an) return false;
    const char *why = NULL;
    float err = -1.f;
    char said[96] = "";
    const char *how = NULL;
    double t0 = si_now();
    if (memo->ae[i].cudnn) {
        desc plan = cached_plan(cs, g, j, memo, key);
        how = "loaded from the cache";
        if (!plan) {
            plan = checked_plan(cs, g, j, &x->p, &why, &err, said, sizeof said);
            if (!plan) { // the cache's choice no longer builds or agrees here: timed again
                *at = i;
                return false;
            }
            keep_plan(cs, memo, key, plan);
            how = "built";
        }
        x->plan = plan;
        x->owns = true;
    }
    if (i < memo->aloaded) memo->ahits++;
    if (!e->opts.verbose) return true;
    char plan_said[64] = "";
    if (how) snprintf(plan_said, sizeof plan_said, "; its plan %s in %.3f s", how, si_now() - t0);
    char who[48] = "cuDNN's fused SDPA";
    if (!x->plan) snprintf(who, sizeof who, "our %s kernel", si_k_attention_kernel_name(x->ours));
    fprintf(stderr, "cuda: %s: attention by %s (the autotune cache's choice, %.3f ms%s)\n",
            g->nodes[j].name, who, memo->ae[i].ms, plan_said);
    return true;
}

// A 16-bit attention node left to the one-block-per-row kernel, several times slower than the
// fused ones (torchvision's ViT-B/16 ran 3.4 times slower a node before its K came in place):
// said at load, with the reason, so that no model is slow in silence.
static void warn_rows(cuda_state *cs, const si_graph *g, int j) {
    const attn_x *x = &cs->attn[j];
    if (x->plan || x->ours != SI_ATTN_ROWS || cs->t == SI_GT_F32) return;
    const void *in[SI_ATTN_INPUTS];
    void *y;
    operands(cs, g, &cs->slots[0], j, in, &y);
    size_t es = si_gtype_size(cs->t);
    char buf[160];
    const char *why = si_k_attention_rows_why(
        cs->t, &x->p, (const char *)in[0] + x->off[0] * es, (const char *)in[1] + x->off[1] * es,
        (const char *)in[2] + x->off[2] * es, (char *)y + x->off[3] * es, buf, sizeof buf);
    si_log_warn("cuda: attention node '%s' runs on the row-by-row kernel, several times slower "
                "than the fused ones: %s",
                g->nodes[j].name, why);
}

static si_status attn_choose(si_engine *e, cuda_state *cs, int j, int mode, algo_memo *memo);

si_status si_cuda_attn_init(si_engine *e, cuda_state *cs, int j, int mode, algo_memo *memo) {
    si_status st = attn_choose(e, cs, j, mode, memo);
    if (st == SI_OK) warn_rows(cs, e->g, j);
    return st;
}

static si_status attn_choose(si_engine *e, cuda_state *cs, int j, int mode, algo_memo *memo) {
    const si_graph *g = e->g;
    const si_gnode *n = &g->nodes[j];
    attn_x *x = &cs->attn[j];
    si_cuda_attn_params(g, n, &x->p, x->off);
    x->ours = our_kernel(cs, g, j);
    const char *ours = si_k_attention_kernel_name(x->ours);
    const char *why = NULL;
    if (mode == SI_SDPA_NEVER)
        why = "SI_CUDNN_SDPA=0";
    else if (cs->t == SI_GT_F32)
        why = "FP32";
    else if (n->qk_norm)
        why = "q and k normalised in our kernel (cosine attention)";
    else if (n->act.kind)
        why = "an activation on its output, applied by our kernel";
    else if (si_attention_bias(n) >= 0)
        why = "a bias or mask";
    else if ((x->p.d != 32 && x->p.d != 64 && x->p.d != 128) || x->p.dv != x->p.d)
        why = "a head size other than 32, 64 or 128";
    if (why) {
        if (e->opts.verbose)
            fprintf(stderr, "cuda: %s: attention by our %s kernel (cuDNN's SDPA not tried: %s)\n",
                    n->name, ours, why);
        return SI_OK;
    }
    for (int i = 0; i < j; i++) { // the same operands (and kernel) earlier: its choice and plan
        const attn_x *o = &cs->attn[i];
        if (g->nodes[i].op == SI_OP_ATTENTION && o->decided && o->ours == x->ours &&
            same_shape(&o->p, &x->p)) {
            x->plan = o->plan;
            x->decided = true;
            return SI_OK;
        }
    }
    x->decided = true;
    // the choice of an earlier run, from the autotune cache: the same kernel, the same bits
    int64_t key[ATTN_KEY];
    attn_key(x, key);
    int stale = -1;
    const bool cached = memo && mode == SI_SDPA_TIMED;
    if (cached) {
        memo->aasked++;
        if (cached_choice(e, cs, j, key, memo, &stale)) return SI_OK;
    }
    float own = mode == SI_SDPA_ALWAYS ? -1.f : time_node(cs, g, j);
    float theirs = -1.f;
    float err = -1.f;
    char said[96] = "";
    double t0 = si_now();
    desc plan = checked_plan(cs, g, j, &x->p, &why, &err, said, sizeof said);
    double built = si_now() - t0;
    if (plan) { // timed also when forced: a plan that fails to run is not kept
        x->plan = plan;
        theirs = time_node(cs, g, j);
        x->plan = NULL;
        if (theirs < 0.f) why = "its execution failed";
    }
    if (theirs >= 0.f && (mode == SI_SDPA_ALWAYS || own < 0.f || theirs < own)) {
        x->plan = plan;
        x->owns = true;
    } else {
        drop(plan);
    }
    if (cached && own >= 0.f) { // remembered for the next run, cuDNN's plan with it
        if (x->plan) keep_plan(cs, memo, key, x->plan);
        attn_memo_entry m;
        memset(&m, 0, sizeof m);
        memcpy(m.key, key, sizeof key);
        m.t = cs->t;
        m.cudnn = x->plan != NULL;
        m.ms = x->plan ? theirs : own;
        if (stale >= 0) {
            memo->ae[stale] = m;
            memo->dirty = true;
        } else if (memo->an < ATTN_MEMO_CAP) {
            memo->ae[memo->an++] = m;
        }
    }
    if (!e->opts.verbose) return SI_OK;
    if (x->plan && mode == SI_SDPA_ALWAYS)
        fprintf(stderr,
                "cuda: %s: attention by cuDNN's fused SDPA (%.3f ms, within %.2g of our kernel; "
                "SI_CUDNN_SDPA=1)\n",
                n->name, theirs, err);
    else if (x->plan)
        fprintf(stderr,
                "cuda: %s: attention by cuDNN's fused SDPA (%.3f ms, within %.2g of our kernel's "
                "result; our %s kernel %.3f ms; its plan built in %.3f s)\n",
                n->name, theirs, err, ours, own, built);
    else if (theirs >= 0.f)
        fprintf(stderr,
                "cuda: %s: attention by our %s kernel (%.3f ms; cuDNN's SDPA %.3f ms, within %.2g, "
                "its plan built in %.3f s)\n",
                n->name, ours, own, theirs, err, built);
    else
        fprintf(stderr, "cuda: %s: attention by our %s kernel (cuDNN's SDPA: %s)\n", n->name, ours,
                why);
    return SI_OK;
}

void si_cuda_attn_release(attn_x *x) {
    if (x->owns) drop(x->plan);
    x->plan = NULL;
    x->owns = false;
}
