// The CUDA backend's Gemm and MatMul on cuBLASLt: a matmul descriptor, layouts and an algorithm
// per node at init (bias and ReLU as epilogues where cuBLASLt has them; for a large matmul the
// fastest of cuBLASLt's heuristic candidates, timed, or the autotune cache's choice), one call per
// node (or per output matrix of a partially broadcast MatMul) at run time. A Linear layer with
// bias and GELU, SiLU or Swish runs instead as one CUTLASS kernel on sm_90 (linear90.cuh), its
// tile chosen by timing.
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/autotune.cuh"
#include "cuda/backend_internal.cuh"

static bool l90_params(si_engine *e, cuda_state *cs, int j, int64_t M, int64_t N, int64_t K,
                       const void *bias, const void *res, si_linear90 *p);
static float linear90_init(si_engine *e, cuda_state *cs, int j, int64_t M, int64_t N, int64_t K,
                           const void *bias, const void *res);

// The operands a matmul is timed on at init: slot 0's buffers (NULL a: not timed). l90: a Linear
// layer (M, N, K, with bias, and c its residual or NULL) that CUTLASS's kernel may run instead
typedef struct {
    const void *a, *b, *c;
    void *y;
    bool l90;
    int64_t M, N, K;
    const void *bias;
} lt_io;

typedef struct {
    cuda_state *cs;
    gemm_x *x;
    const lt_io *io;
} lt_try;
static bool run_lt(void *ctx) {
    const lt_try *t = (const lt_try *)ctx;
    return si_cuda_lt_run(t->cs, &t->cs->slots[0], t->x, t->io->a, t->io->b, t->io->c,
                          t->io->y) == SI_OK;
}

// Of cuBLASLt's heuristic candidates the first is not always the fastest: on an H100 the fastest
// of eight ran ViT-B/16's QKV projection 8.5% faster, DeiT-S's 12.9%, the other Linear layers of
// four transformers 1-9% (bench/lt_probe.cu). A matmul of at least LT_TIMED_FLOP is timed on
// slot 0 once per distinct set of descriptors, against CUTLASS's kernel where it is a Linear
// layer that one can run; the autotune cache keeps the choice (memo rank: cuBLASLt's candidate,
// or -1 - the CUTLASS variant), so a warm start neither times nor changes it. Smaller ones take
// cuBLASLt's first.
#define LT_CANDIDATES 8
#define LT_TIMED_FLOP 2e9
static void lt_choose(si_engine *e, cuda_state *cs, int j, gemm_x *x, const gemm_memo_entry *key,
                      double flop, const cublasLtMatmulHeuristicResult_t *res, int got,
                      const lt_io *io, algo_memo *memo) {
    x->algo = res[0].algo;
    if (!io || !io->a || !memo || !cs->lt_timed || flop < LT_TIMED_FLOP) return;
    const char *name = e->g->nodes[j].name;
    memo->gasked++;
    int stale = -1; // an entry for these descriptors that cannot be followed: timed again
    for (int k = 0; k < memo->gn && stale < 0; k++) {
        const gemm_memo_entry *m = &memo->ge[k];
        if (memcmp(m, key, offsetof(gemm_memo_entry, rank)) != 0) continue;
        if (m->rank >= got) {
            stale = k;
            continue;
        }
        if (m->rank >= 0) {
            x->algo = res[m->rank].algo;
        } else { // CUTLASS's variant -1 - rank, if these buffers still allow it
            si_linear90 p;
            size_t ws = 0;
            if (!l90_params(e, cs, j, io->M, io->N, io->K, io->bias, io->c, &p) ||
                !si_cuda_linear90_ok(&p, -1 - m->rank, &ws) || ws > cs->plan.workspace) {
                stale = k;
                continue;
            }
            x->l90 = -1 - m->rank;
            x->l90p = p;
        }
        if (k < memo->gloaded) memo->ghits++;
        return;
    }
    int pick = 0;
    float best = -1.f, first = -1.f;
    for (int i = 0; i < got; i++) {
        x->algo = res[i].algo;
        lt_try t = {cs, x, io};
        float ms = si_cuda_time_best(cs->slots[0].stream, run_lt, &t);
        if (i == 0) first = ms;
        if (ms >= 0.f && (best < 0.f || ms < best)) best = ms, pick = i;
    }
    x->algo = res[pick].algo;
    int32_t rank = pick;
    float l90 = io->l90 ? linear90_init(e, cs, j, io->M, io->N, io->K, io->bias, io->c) : -1.f;
    int l90v = x->l90;
    if (l90 >= 0.f && (best < 0.f || l90 < best)) {
        rank = -1 - x->l90;
        best = l90;
    } else {
        x->l90 = -1;
    }
    if (best < 0.f) return; // none ran: the first, untimed, and nothing remembered
    gemm_memo_entry m = *key;
    m.rank = rank;
    m.ms = best;
    if (stale >= 0) {
        memo->ge[stale] = m;
        memo->dirty = true;
    } else if (memo->gn < GEMM_MEMO_CAP) {
        memo->ge[memo->gn++] = m;
    }
    if (e->opts.verbose) {
        char alt[96] = "";
        if (l90 >= 0.f)
            snprintf(alt, sizeof alt, "; CUTLASS's %s tile %.3f ms", si_cuda_linear90_tile(l90v),
                     l90);
        fprintf(stderr, "cuda: %s: %s, %.3f ms (cuBLASLt's first of %d candidates %.3f ms%s)\n",
                name, rank < 0 ? "CUTLASS's kernel" : "cuBLASLt", best, got, first, alt);
    }
}

// Row-major Y (M, N) = X (M, K) W (K, N) is column-major Y^T (N, M) = W^T X^T: cuBLASLt's A is
// the weight side, B the activation side, and D's rows are output features, so a bias along N
// is cuBLASLt's per-row bias epilogue.
static si_status lt_setup(si_engine *e, cuda_state *cs, int j, gemm_x *x, int opA, int64_t ar,
                          int64_t ac, int opB, int64_t br, int64_t bc, int64_t m, int64_t nn,
                          int batch, int64_t sa, int64_t sb, cublasLtEpilogue_t epi,
                          const void *bias, const lt_io *io, algo_memo *memo) {
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
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int got = 0;
    double t0 = si_now();
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cs->lt, x->op, x->a, x->b, x->d, x->d, pref,
                                                       LT_CANDIDATES, res, &got);
    cs->lt_heur_s += si_now() - t0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || got == 0)
        return si_error(SI_ERR_UNSUPPORTED, "cuBLASLt has no algorithm (status %d)", (int)hs);
    gemm_memo_entry key;
    memset(&key, 0, sizeof key);
    int64_t dims[8] = {ar, ac, br, bc, m, nn, sa, sb};
    memcpy(key.dims, dims, sizeof dims);
    key.opa = opA;
    key.opb = opB;
    key.batch = batch;
    key.epi = (int32_t)epi;
    key.t = cs->t;
    key.beta = x->beta != 0.f;
    key.l90 = io && io->l90 && cs->linear90;
    double flop = 2.0 * (double)m * (double)nn * (double)(opA ? ar : ac) * (double)batch;
    lt_choose(e, cs, j, x, &key, flop, res, got, io, memo);
    return SI_OK;
}

si_status si_cuda_gemm_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo) {
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
    slot_x *s0 = &cs->slots[0];
    lt_io io = {};
    io.a = vptr(cs, g, s0, n->in[1]);
    io.b = vptr(cs, g, s0, n->in[0]);
    io.y = vptr(cs, g, s0, n->out);
    si_status st = lt_setup(e, cs, j, x, n->trans_b, n->trans_b ? K : N, n->trans_b ? N : K,
                            n->trans_a, n->trans_a ? M : K, n->trans_a ? K : M, N, M, 1, 0, 0, epi,
                            bias, &io, memo);
    if (st != SI_OK) return si_error_prefix(st, "node '%s' (Gemm): ", n->name);
    return SI_OK;
}

// A patchify conv as Y (P, M) = X (P, K) W^T + b: X the patches (rows of kh * kw * C, copied into
// scratch at run time), W the KRSC weights as (M, K), Y the NHWC output
si_status si_cuda_patch_init(si_engine *e, cuda_state *cs, int j) {
    const si_gnode *n = &e->g->nodes[j];
    const si_conv_shape *s = &n->conv;
    gemm_x *x = &cs->gemm[j];
    // K: the taps of a patch, padded with zeros as the weights' rows are (si_devplan_patch_k)
    int64_t P = (int64_t)s->n * s->oh * s->ow, M = s->m,
            K = si_devplan_patch_k(e->g, n, cs->plan.elem);
    x->alpha = 1.f;
    x->beta = 0.f;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = NULL;
    if (n->n_in > 2) {
        epi = CUBLASLT_EPILOGUE_BIAS;
        bias = cs->consts + cs->plan.const_off[n->in[2]];
    }
    if (n->act.kind == SI_ACT_RELU)
        epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    si_status st = lt_setup(e, cs, j, x, 1, K, M, 0, K, P, M, P, 1, 0, 0, epi, bias, NULL, NULL);
    if (st != SI_OK) return si_error_prefix(st, "node '%s' (Conv as GEMM): ", n->name);
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

// one run of a fused Linear variant on slot 0 (si_cuda_time_best's launch)
typedef struct {
    const si_linear90 *p;
    int v;
    slot_x *sl;
} l90_run;
static bool run_l90(void *ctx) {
    const l90_run *r = (const l90_run *)ctx;
    return si_cuda_linear90_run(r->p, r->v, r->sl->ws, r->sl->stream) == cudaSuccess;
}

// node j's operands on slot 0 as the fused kernel takes them; false where it cannot run here
static bool l90_params(si_engine *e, cuda_state *cs, int j, int64_t M, int64_t N, int64_t K,
                       const void *bias, const void *res, si_linear90 *p) {
    si_graph *g = e->g;
    const si_gnode *n = &g->nodes[j];
    if (!cs->linear90 || cs->t == SI_GT_F32 || M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return false;
    int act = n->act.kind == SI_ACT_GELU        ? SI_LINEAR90_GELU
              : n->act.kind == SI_ACT_GELU_TANH ? SI_LINEAR90_GELU_TANH
              : n->act.kind == SI_ACT_NONE      ? SI_LINEAR90_NONE
                                                : SI_LINEAR90_SWISH;
    *p = (si_linear90){cs->t == SI_GT_BF16 ? SI_LINEAR90_BF16 : SI_LINEAR90_F16,
                       act,
                       n->act.kind == SI_ACT_SWISH ? n->act.alpha : 1.f,
                       (int)M,
                       (int)N,
                       (int)K,
                       vptr(cs, g, &cs->slots[0], n->in[0]),
                       vptr(cs, g, &cs->slots[0], n->in[1]),
                       bias,
                       res,
                       vptr(cs, g, &cs->slots[0], n->out)};
    return true;
}

// Linear + bias + GELU (or SiLU, QuickGELU; or none, with or without a residual) as one kernel
// where this device and build have one: sets x->l90 to the fastest variant (the same shape
// earlier in the graph reuses its choice) and returns its time (0 when reused or alone), or
// leaves -1 and returns -1. The variants give the same bits (test_gpu_linear90), so the timing's
// winner does not change results from run to run.
static float linear90_init(si_engine *e, cuda_state *cs, int j, int64_t M, int64_t N, int64_t K,
                           const void *bias, const void *res) {
    si_graph *g = e->g;
    const si_gnode *n = &g->nodes[j];
    gemm_x *x = &cs->gemm[j];
    x->l90 = -1;
    si_linear90 p;
    if (!l90_params(e, cs, j, M, N, K, bias, res, &p)) return -1.f;
    for (int i = 0; i < j; i++) {
        const gemm_x *o = &cs->gemm[i];
        if (g->nodes[i].op == SI_OP_MATMUL && o->l90 >= 0 && o->l90p.type == p.type &&
            o->l90p.act == p.act && o->l90p.alpha == p.alpha && o->l90p.m == p.m &&
            o->l90p.n == p.n && o->l90p.k == p.k && !o->l90p.c == !p.c) {
            size_t ws = 0;
            if (si_cuda_linear90_ok(&p, o->l90, &ws) && ws <= cs->plan.workspace) {
                x->l90 = o->l90;
                x->l90p = p;
                return 0.f;
            }
        }
    }
    int vs[16], nv = si_cuda_linear90_variants(&p, vs, 16);
    const char *only = getenv("SI_LINEAR90_TILE"); // one tile, for profiling and A/B runs
    if (only && *only) {
        int kept = 0;
        for (int i = 0; i < nv; i++)
            if (strstr(si_cuda_linear90_tile(vs[i]), only)) vs[kept++] = vs[i];
        nv = kept;
    }
    float best = -1.f;
    char said[640] = "";
    for (int i = 0; i < nv; i++) {
        size_t ws = 0;
        if (!si_cuda_linear90_ok(&p, vs[i], &ws) || ws > cs->plan.workspace) continue;
        l90_run r = {&p, vs[i], &cs->slots[0]};
        float ms = nv == 1 ? 0.f : si_cuda_time_best(cs->slots[0].stream, run_l90, &r);
        size_t at = strlen(said);
        snprintf(said + at, sizeof said - at, "%s%s %.3f ms", at ? ", " : "",
                 si_cuda_linear90_tile(vs[i]), ms);
        if (ms >= 0.f && (best < 0.f || ms < best)) {
            best = ms;
            x->l90 = vs[i];
        }
    }
    if (x->l90 >= 0) x->l90p = p;
    if (e->opts.verbose && x->l90 >= 0 && p.act != SI_LINEAR90_NONE) // lt_choose says the rest
        fprintf(stderr, "cuda: %s: Linear + bias + activation as one GEMM, %s tile (%s)\n",
                n->name, si_cuda_linear90_tile(x->l90), said);
    return x->l90 >= 0 ? best : -1.f;
}

si_status si_cuda_matmul_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo) {
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
    if (pb == 1 && a_full) { // one B for every A: A's matrices stack into rows of one GEMM
        M *= batch;
        batch = pa = 1;
    }
    // a Linear layer's fused bias (epilogue), residual (C = residual, beta 1), activation
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = NULL;
    if (n->bias >= 0) {
        epi = CUBLASLT_EPILOGUE_BIAS;
        bias = cs->consts + cs->plan.const_off[n->bias];
    }
    if (n->residual >= 0) x->beta = 1.f;
    if (n->act.kind == SI_ACT_RELU)
        epi = epi == CUBLASLT_EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    x->act_after = n->act.kind && n->act.kind != SI_ACT_RELU;
    SI_ASSERT(batch == 1 || (n->bias < 0 && n->residual < 0)); // fused only into Linear layers
    if ((!a_full && pa != 1) || (!b_full && pb != 1) || batch > INT32_MAX) {
        x->loop_nd = nd;
        memcpy(x->ad, ad, sizeof ad);
        memcpy(x->bd, bd, sizeof bd);
        memcpy(x->yd, yd, sizeof yd);
        batch = 1;
    }
    x->l90 = -1;
    if (x->act_after && batch == 1 && !x->loop_nd && bias && n->residual < 0 &&
        (n->act.kind == SI_ACT_GELU || n->act.kind == SI_ACT_GELU_TANH ||
         n->act.kind == SI_ACT_SWISH || n->act.kind == SI_ACT_SILU))
        linear90_init(e, cs, j, M, N, K, bias, NULL);
    // timed where cuBLASLt runs it: one launch for the whole node (the fused kernel's nodes and
    // the matrix-by-matrix loops take the first candidate)
    slot_x *s0 = &cs->slots[0];
    lt_io io = {};
    if (x->l90 < 0 && !x->loop_nd) {
        io.a = vptr(cs, g, s0, n->in[1]);
        io.b = vptr(cs, g, s0, n->in[0]);
        io.y = vptr(cs, g, s0, n->out);
        if (n->residual >= 0) io.c = vptr(cs, g, s0, n->residual);
        // a plain Linear layer (bias, maybe a residual, no activation): CUTLASS's kernel too
        io.l90 = bias && n->act.kind == SI_ACT_NONE && batch == 1;
        io.M = M, io.N = N, io.K = K, io.bias = bias;
    }
    si_status st = lt_setup(e, cs, j, x, 0, N, K, 0, K, M, N, M, (int)batch, pb == 1 ? 0 : K * N,
                            pa == 1 ? 0 : M * K, epi, bias, &io, memo);
    if (st != SI_OK) return si_error_prefix(st, "node '%s' (MatMul): ", n->name);
    return SI_OK;
}

si_status si_cuda_lt_run(cuda_state *cs, slot_x *sl, gemm_x *x, const void *a, const void *b,
                         const void *c, void *y) {
    ltCheck(cublasLtMatmul(cs->lt, x->op, &x->alpha, a, x->a, b, x->b, &x->beta, c ? c : y, x->d, y,
                           x->d, &x->algo, sl->ws, cs->plan.workspace, sl->stream));
    return SI_OK;
}

void si_cuda_gemm_release(gemm_x *x) {
    if (x->op) cublasLtMatmulDescDestroy(x->op);
    if (x->a) cublasLtMatrixLayoutDestroy(x->a);
    if (x->b) cublasLtMatrixLayoutDestroy(x->b);
    if (x->d) cublasLtMatrixLayoutDestroy(x->d);
}
