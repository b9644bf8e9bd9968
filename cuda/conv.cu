// The CUDA backend's convolutions: cuDNN's descriptors and a timed algorithm choice per conv at
// init, and the launch per batch (cuDNN, with bias + residual + ReLU fused where it fuses them, or
// our depthwise kernel, cuda/dwconv.cu, with the producer's bias and activation as its prologue,
// or our narrow-channel kernel, cuda/narrowconv.cu, where it beats cuDNN on the whole node).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/autotune.cuh"
#include "cuda/backend_internal.cuh"
#include "cuda/dwconv.cuh"
#include "cuda/narrowconv.cuh"

algo_memo *si_cuda_memo_new(void) {
    return (algo_memo *)si_xcalloc(1, sizeof(algo_memo));
}

void si_cuda_memo_free(algo_memo *m) {
    free(m);
}

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

bool si_cuda_conv_patch(const cuda_state *cs, const si_graph *g, int j) {
    return si_devplan_patch_conv(g, &g->nodes[j]) && dw_prologue_of(cs, g, j) < 0;
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
                st = cudnnFail(ds, "cuda: timing algorithm %d: ", (int)k[i].algo);
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

// The depthwise kernel runs conv j: only its prologue and its weights to set up.
static si_status conv_dw_init(si_engine *e, cuda_state *cs, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    conv_x *c = &cs->conv[j];
    c->dw = true;
    int pj = g->values[n->in[0]].producer;
    if (pj >= 0 && dw_prologue_of(cs, g, pj) == j) c->pro = pj;
    if (e->opts.verbose)
        fprintf(stderr, "cuda: %s (%s) depthwise kernel%s%s\n", n->name, n->op_type,
                c->pro >= 0 ? ", with the bias and activation of " : "",
                c->pro >= 0 ? g->nodes[c->pro].name : "");
    return si_cuda_dw_upload(cs, g, j);
}

// cuDNN's descriptors of conv c (shape s): NHWC tensors, KRSC filters, the padded input when
// prepad or cpad ask for it
static si_status conv_descriptors(cuda_state *cs, conv_x *c, const si_conv_shape *s) {
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
    return SI_OK;
}

// What the narrow-channel kernel's timing of a node depended on besides its shape: its bias,
// residual and activation (or none of them, raw).
static int conv_epi(const conv_x *c, const si_gnode *n) {
    if (c->raw) return 0;
    return 1 + (n->n_in - (n->residual >= 0) > 2) + 2 * (n->residual >= 0) + 4 * (int)n->act.kind;
}

// A choice made earlier for the same descriptors and epilogue: taken over (math type and the
// narrow kernel's verdict included); *hit says so.
static si_status memo_find(cuda_state *cs, conv_x *c, const si_conv_shape *s, int epi,
                           algo_memo *memo, bool *hit) {
    *hit = false;
    memo->asked++;
    for (int k = 0; k < memo->n; k++) {
        const memo_entry *m = &memo->e[k];
        if (!memcmp(&m->s, s, sizeof *s) && m->t == cs->t && m->cpad == c->cpad && m->epi == epi) {
            if (k < memo->loaded) memo->hits++;
            c->algo = m->algo;
            c->math = m->math;
            c->ws = m->ws;
            c->ms = m->ms;
            c->nconv = m->nconv != 0;
            if (cs->t != SI_GT_F32) cudnnCheck(cudnnSetConvolutionMathType(c->cd, m->math));
            *hit = true;
            return SI_OK;
        }
    }
    return SI_OK;
}

// An algorithm Find reported that fits the workspace (and, in FP32, does not use tensor cores).
static bool algo_usable(const cuda_state *cs, const cudnnConvolutionFwdAlgoPerf_t *p) {
    if (p->status != CUDNN_STATUS_SUCCESS || p->memory > cs->plan.workspace) return false;
    return !(cs->t == SI_GT_F32 && p->mathType != CUDNN_FMA_MATH &&
             p->mathType != CUDNN_DEFAULT_MATH);
}

// Find times each algorithm once, one after the other, and only the convolution. At load the
// GPU's clock is still rising, so the algorithms measured later looked faster: runs of
// MobileNetV2 picked IMPLICIT_GEMM or IMPLICIT_PRECOMP_GEMM for the same convs and ranged from
// 37K to 54K images/s. And a conv with a bias and no activation is fused by cuDNN only with
// IMPLICIT_PRECOMP_GEMM; the others pay an epilogue pass. So the candidates within 50% of Find's
// best are timed again, round-robin, median of 7, with the epilogue's cost (one read and one
// write of the output at 2.5 TB/s, an H100's practical bandwidth) added to those that need it.
// *pick: the chosen index into perf (-1 if none), *best its time.
static si_status conv_retime(cuda_state *cs, const si_graph *g, int j, void *xp,
                             const cudnnConvolutionFwdAlgoPerf_t *perf, int got, int *pick,
                             float *best) {
    const si_gnode *n = &g->nodes[j];
    const si_conv_shape *s = &n->conv;
    conv_x *c = &cs->conv[j];
    slot_x *sl = &cs->slots[0];
    bool has_b = n->n_in - (n->residual >= 0) > 2;
    double out_bytes = (double)s->n * s->m * s->oh * s->ow * (double)cs->plan.elem;
    cudnnConvolutionFwdAlgoPerf_t cand[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int idx[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], nc = 0;
    for (int k = 0; *pick >= 0 && k < got; k++) {
        if (!algo_usable(cs, &perf[k]) || perf[k].time > perf[*pick].time * 1.5f) continue;
        idx[nc] = k;
        cand[nc++] = perf[k];
    }
    float ms[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (nc > 0) {
        si_status st =
            time_convs(cs, c, xp, vptr(cs, g, sl, n->in[1]), vptr(cs, g, sl, n->out), cand, nc, ms);
        if (st != SI_OK) return st;
    }
    for (int i = 0; i < nc; i++) {
        bool epilogue = !c->raw && has_b && n->act.kind == SI_ACT_NONE &&
                        cand[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        if (epilogue) ms[i] += (float)(2.0 * out_bytes / 2.5e9); // ms
        if (i == 0 || ms[i] < *best) {
            *pick = idx[i];
            *best = ms[i];
        }
    }
    return SI_OK;
}

// cuDNN's Find on slot 0's buffers, the candidates timed again (conv_retime).
static si_status conv_choose(cuda_state *cs, const si_graph *g, int j) {
    const si_gnode *n = &g->nodes[j];
    const si_conv_shape *s = &n->conv;
    conv_x *c = &cs->conv[j];
    slot_x *sl = &cs->slots[0];
    void *xp = c->prepad || c->cpad != s->c ? sl->scratch : vptr(cs, g, sl, n->in[0]);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    cudnnCheck(cudnnFindConvolutionForwardAlgorithmEx(
        sl->dnn, c->xd, xp, c->wd, vptr(cs, g, sl, n->in[1]), c->cd, c->yd, vptr(cs, g, sl, n->out),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, sl->ws, cs->plan.workspace));
    int pick = -1;
    float best = 0;
    for (int k = 0; k < got && pick < 0; k++)
        if (algo_usable(cs, &perf[k])) pick = k;
    si_status st = conv_retime(cs, g, j, xp, perf, got, &pick, &best);
    if (st != SI_OK) return st;
    if (pick < 0)
        return NODE_ERR(g, n, SI_ERR_UNSUPPORTED,
                        "cuda: cuDNN has no algorithm for this convolution (%dx%dx%dx%d, "
                        "%d filters %dx%d, group %d) within the %zu MiB workspace",
                        s->n, s->c, s->h, s->w, s->m, s->kh, s->kw, s->group,
                        cs->plan.workspace >> 20);
    c->algo = perf[pick].algo;
    c->math = perf[pick].mathType;
    c->ws = perf[pick].memory;
    c->ms = best;
    if (cs->t != SI_GT_F32) cudnnCheck(cudnnSetConvolutionMathType(c->cd, c->math));
    return SI_OK;
}

// Whether cuDNN fuses conv j's bias, residual and activation with the algorithm chosen.
static si_status conv_fuse(si_engine *e, cuda_state *cs, int j) {
    const si_gnode *n = &e->g->nodes[j];
    conv_x *c = &cs->conv[j];
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

// The narrow-channel kernel's arguments for conv j on slot sl.
static si_nconv_args nconv_args(cuda_state *cs, const si_graph *g, slot_x *sl, int j) {
    const si_gnode *n = &g->nodes[j];
    const conv_x *c = &cs->conv[j];
    si_tview vx = tv_of(&g->values[n->in[0]]);
    si_nconv_args a;
    memset(&a, 0, sizeof a);
    a.s = n->conv;
    a.x = (const char *)vptr(cs, g, sl, n->in[0]) + vx.off * (int64_t)cs->plan.elem;
    for (int k = 0; k < 4; k++) a.xst[k] = vx.st[k];
    a.w = vptr(cs, g, sl, n->in[1]);
    a.wc = c->cpad; // the weights' channels, padded as cuDNN's input is
    a.y = vptr(cs, g, sl, n->out);
    if (!c->raw) { // raw: bias and activation are the depthwise conv's after it (no residual)
        a.b = n->n_in - (n->residual >= 0) > 2 ? vptr(cs, g, sl, n->in[2]) : NULL;
        a.z = n->residual >= 0 ? vptr(cs, g, sl, n->residual) : NULL;
        a.act = n->act;
    }
    return a;
}

// Whether the narrow-channel kernel can run conv j: its shape, and the operands' strides and
// alignment on slot 0, the same on every slot (their arenas are aligned alike).
static bool nconv_fits(cuda_state *cs, const si_graph *g, int j) {
    if (!si_nconv_supported(&g->nodes[j].conv)) return false;
    si_nconv_args a = nconv_args(cs, g, &cs->slots[0], j);
    return si_nconv_fits(&a);
}

// one run of conv j as it stands on slot 0 (si_cuda_time_best's launch)
typedef struct {
    si_engine *e;
    cuda_state *cs;
    int j;
} conv_run1;
static bool conv_run_once(void *ctx) {
    const conv_run1 *r = (const conv_run1 *)ctx;
    return si_cuda_conv_run(r->e, r->cs, &r->cs->slots[0], r->j) == SI_OK;
}

// Whether our narrow-channel kernel beats cuDNN on conv j: each timed as the whole node, cuDNN's
// with the copy into its padded input and the epilogue pass it needs (LeViT's stem: cuDNN fuses
// no HardSwish, and wants the image's 3 channels padded to 8).
static si_status nconv_choose(si_engine *e, cuda_state *cs, int j) {
    conv_x *c = &cs->conv[j];
    c->nconv = false;
    if (!nconv_fits(cs, e->g, j)) return SI_OK;
    conv_run1 r = {e, cs, j};
    float theirs = si_cuda_time_best(cs->slots[0].stream, conv_run_once, &r);
    c->nconv = true;
    float ours = si_cuda_time_best(cs->slots[0].stream, conv_run_once, &r);
    c->nconv = ours >= 0.f && (theirs < 0.f || ours < theirs);
    if (e->opts.verbose) {
        const si_gnode *n = &e->g->nodes[j];
        fprintf(stderr, "cuda: %s (%s) narrow-channel kernel %.3f ms, cuDNN's node %.3f ms\n",
                n->name, n->op_type, ours, theirs);
    }
    return SI_OK;
}

si_status si_cuda_conv_init(si_engine *e, cuda_state *cs, int j, algo_memo *memo) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    conv_x *c = &cs->conv[j];
    const si_conv_shape *s = &n->conv;
    // a 4-D computed input and a residual of the output's shape: cuda_supports_op refused the
    // rest at load. Weights computed at run time (ONNX's node tests feed them as inputs) are 4-D
    // runtime values, stored NHWC: as (M, C/g, kh, kw) that is KRSC, the filter layout cuDNN reads
    SI_ASSERT(g->values[n->in[0]].kind == SI_VAL_RUNTIME && g->values[n->in[0]].shape.ndim == 4);
    c->pro = -1;
    if (dw_kernel_runs(cs, g, j)) return conv_dw_init(e, cs, j);
    if (si_cuda_conv_patch(cs, g, j)) {
        c->patch = true;
        return si_cuda_patch_init(e, cs, j);
    }
    c->raw = dw_prologue_of(cs, g, j) >= 0;
    c->prepad = s->pt != s->pb || s->pl != s->pr;
    c->cpad = si_devplan_conv_cpad(g, n, cs->plan.elem);
    si_status st = conv_descriptors(cs, c, s);
    bool hit = false;
    int epi = conv_epi(c, n);
    if (st == SI_OK) st = memo_find(cs, c, s, epi, memo, &hit);
    if (st == SI_OK && !hit) st = conv_choose(cs, g, j);
    if (st == SI_OK) st = conv_fuse(e, cs, j);
    if (st == SI_OK && !hit) st = nconv_choose(e, cs, j);
    if (st != SI_OK) return st;
    if (!hit && memo->n < MEMO_CAP)
        memo->e[memo->n++] =
            (memo_entry){*s, cs->t, c->cpad, epi, c->algo, c->math, c->ws, c->ms, c->nconv};
    if (e->opts.sw.nconv != SI_CHOICE_TIMED) c->nconv = e->opts.sw.nconv == SI_CHOICE_ON;
    c->nconv = c->nconv && nconv_fits(cs, g, j);
    if (e->opts.verbose && c->nconv)
        fprintf(stderr, "cuda: %s (%s) the narrow-channel kernel runs it\n", n->name, n->op_type);
    return SI_OK;
}

void si_cuda_conv_release(conv_x *c) {
    if (c->xd) cudnnDestroyTensorDescriptor(c->xd);
    if (c->yd) cudnnDestroyTensorDescriptor(c->yd);
    if (c->bd) cudnnDestroyTensorDescriptor(c->bd);
    if (c->wd) cudnnDestroyFilterDescriptor(c->wd);
    if (c->cd) cudnnDestroyConvolutionDescriptor(c->cd);
    if (c->ad) cudnnDestroyActivationDescriptor(c->ad);
}

// The patch rows of a patch convolution by a strided copy of the input viewed as (n, oh, ow, kh,
// kw, c), each row's padding zeroed first (a 2D memset of a few bytes a row: slow where rows are
// padded, hence si_k_patchify there).
static si_status patch_rows(cuda_state *cs, const si_graph *g, const si_gnode *n, slot_x *sl,
                            const void *x, si_tview vx, int64_t kp) {
    const si_conv_shape *s = &n->conv;
    si_tview vp = tv_none(), vs = tv_none();
    int64_t d[6] = {s->n, s->oh, s->ow, s->kh, s->kw, s->c};
    int64_t xs[6] = {vx.st[0], vx.st[2] * s->kh, vx.st[3] * s->kw, vx.st[2], vx.st[3], vx.st[1]};
    int64_t k = (int64_t)s->kh * s->kw * s->c;
    vp.nd = vs.nd = 6;
    vs.off = vx.off;
    int64_t acc = 1;
    for (int i = 5; i >= 0; i--) {
        vp.dims[i] = vs.dims[i] = d[i];
        vp.st[i] = acc;
        vs.st[i] = xs[i];
        acc = i == 3 ? kp : acc * d[i]; // a patch's row: kp apart
    }
    if (kp != k) { // each row's padding is zero (its weights too)
        size_t es = cs->plan.elem;
        cudaCheck(cudaMemset2DAsync(sl->scratch + k * es, kp * es, 0, (kp - k) * es,
                                    (size_t)(s->n * s->oh * s->ow), sl->stream));
    }
    return map(sl->stream, SI_MAP_COPY, 0, no_act, cs->t, sl->scratch, vp, cs->t, x, vs);
}

si_status si_cuda_conv_run(si_engine *e, cuda_state *cs, slot_x *sl, int j) {
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
    if (c->nconv) {
        si_nconv_args a = nconv_args(cs, g, sl, j);
        cudaCheck(si_k_nconv(sl->stream, cs->t, &a));
        return SI_OK;
    }
    if (c->patch) { // patches as rows (n, oh, ow) of (kh, kw, c) and zeros to kp, then the GEMM
        si_tview vx = tv_of(&g->values[n->in[0]]);
        int64_t kp = si_devplan_patch_k(g, n, cs->plan.elem);
        si_k_patch pp = {(int)s->n,
                         s->c,
                         s->kh,
                         s->kw,
                         (int)s->oh,
                         (int)s->ow,
                         {vx.st[0], vx.st[1], vx.st[2], vx.st[3]},
                         kp};
        // rows padded to kp (DINOv2's 588 taps to 592): the staged kernel where it takes the
        // input; elsewhere the strided copy, measured as fast (ViT-B's, ConvNeXt's)
        cudaError_t e = cudaErrorNotSupported;
        if (kp != (int64_t)s->kh * s->kw * s->c)
            e = si_k_patchify(sl->stream, cs->t, &pp,
                              (const char *)x + vx.off * (int64_t)cs->plan.elem, sl->scratch);
        if (e == cudaErrorNotSupported) {
            si_status st = patch_rows(cs, g, n, sl, x, vx, kp);
            if (st != SI_OK) return st;
        } else {
            cudaCheck(e);
        }
        return si_cuda_lt_run(cs, sl, &cs->gemm[j], vptr(cs, g, sl, n->in[1]), sl->scratch, NULL,
                              y);
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
