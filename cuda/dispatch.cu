// The CUDA backend's per-node launch: a table indexed by si_op of small functions. Most ops read
// and write strided views of NHWC or row-major storage; the row-major ones (MatMul, Softmax,
// Reduce, Gather, Pad, Resize, LayerNorm, InstanceNorm, non-4-D GlobalAveragePool) get their NHWC
// operands converted in scratch first. The table is a constexpr array filled in si_op's order (C++
// has no array designators) with a static_assert that checks the order.
#include <stdio.h>
#include <string.h>

#include "cuda/attention.cuh"
#include "cuda/backend_internal.cuh"
#include "engine/kernel_math.h"

// One node's launch: its values, their storage and the slot's stream
typedef struct {
    si_engine *e;
    cuda_state *cs;
    slot_x *sl;
    int j;
    si_graph *g;
    si_gnode *n;
    cudaStream_t s;
    int t; // the activations' si_gtype
    const si_value *xv, *yv;
    const void *x;         // input 0 (row-major ops: its row-major copy)
    void *y;               // the output (row-major ops: where the row-major result goes)
    const void *const *in; // row-major ops: every input, converted where needed
} op_ctx;

typedef si_status (*op_fn)(const op_ctx *c);

typedef struct {
    int op;
    op_fn strided;  // on the values' own storage
    op_fn rowmajor; // on row-major copies (si_devplan_rowmajor_op)
} op_entry;

// --- strided ops ------------------------------------------------------------------------------
static si_status run_conv(const op_ctx *c) {
    return si_cuda_conv_run(c->e, c->cs, c->sl, c->j);
}

static si_status run_maxpool(const op_ctx *c) {
    cudaCheck(si_k_maxpool(c->s, c->t, &c->n->pool, c->x, c->y));
    return SI_OK;
}

static si_status run_avgpool(const op_ctx *c) {
    cudaCheck(si_k_avgpool(c->s, c->t, &c->n->pool, c->n->win.count_include_pad, c->x, c->y));
    return SI_OK;
}

// 4-D NHWC (other ranks go the row-major way, as a Reduce)
static si_status run_global_avgpool(const op_ctx *c) {
    const si_shape *xs = &c->xv->shape;
    cudaCheck(si_k_global_avgpool(c->s, c->t, (int)xs->dims[0], xs->dims[2] * xs->dims[3],
                                  (int)xs->dims[1], c->x, c->y));
    return SI_OK;
}

static si_status run_gemm(const op_ctx *c) {
    const si_graph *g = c->g;
    const si_gnode *n = c->n;
    gemm_x *gx = &c->cs->gemm[c->j];
    const int t = c->t;
    if (gx->prefill) {
        const si_value *cv = &g->values[n->in[2]];
        si_status st = map(c->s, SI_MAP_COPY, 0, no_act, t, c->y, tv_of(c->yv), t,
                           vptr(c->cs, g, c->sl, n->in[2]), tv_align(tv_of(cv), 2));
        if (st != SI_OK) return st;
    }
    si_status st =
        si_cuda_lt_run(c->cs, c->sl, gx, vptr(c->cs, g, c->sl, n->in[1]), c->x, NULL, c->y);
    if (st != SI_OK) return st;
    if (gx->act_after)
        return map(c->s, SI_MAP_ACT, 0, n->act, t, c->y, tv_of(c->yv), t, c->y, tv_of(c->yv));
    return SI_OK;
}

static si_status run_binary(const op_ctx *c) {
    const si_graph *g = c->g;
    const si_gnode *n = c->n;
    const si_value *yv = c->yv;
    const int t = c->t;
    int nd = yv->shape.ndim;
    // squeeze-and-excitation: NHWC x (N, C, H, W) op a per-channel (N or 1, C, 1, 1)
    for (int side = 0; side < 2 && nd == 4 && si_devplan_nhwc(yv); side++) {
        if (side == 1 && n->binop != SI_BIN_ADD && n->binop != SI_BIN_MUL &&
            n->binop != SI_BIN_MIN && n->binop != SI_BIN_MAX) // the operands swap: commutative
            break;
        const si_value *full = &g->values[n->in[side]], *per = &g->values[n->in[1 - side]];
        si_tview vp = tv_align(tv_rowmajor(&per->shape), 4);
        int64_t C = yv->shape.dims[1], N = yv->shape.dims[0];
        if (memcmp(full->shape.dims, yv->shape.dims, sizeof(int64_t) * 4) ||
            full->kind != SI_VAL_RUNTIME || C % 2 || vp.dims[1] != C || vp.dims[2] != 1 ||
            vp.dims[3] != 1 || (vp.dims[0] != 1 && vp.dims[0] != N))
            continue;
        int64_t hw = yv->shape.dims[2] * yv->shape.dims[3], numel = N * C * hw;
        if (numel / 2 >= INT32_MAX) break;
        cudaCheck(si_k_chan_binary(
            c->s, t, n->binop, n->act, c->y, vptr(c->cs, g, c->sl, n->in[side]),
            vptr(c->cs, g, c->sl, n->in[1 - side]), numel, hw, (int)C, vp.dims[0] == 1 ? 0 : C));
        return SI_OK;
    }
    return map(c->s, SI_MAP_BINARY, n->binop, n->act, t, c->y, tv_of(yv), t, c->x,
               tv_align(tv_of(c->xv), nd), vptr(c->cs, g, c->sl, n->in[1]),
               tv_align(tv_of(&g->values[n->in[1]]), nd));
}

static si_status run_activation(const op_ctx *c) {
    return map(c->s, SI_MAP_ACT, 0, c->n->act, c->t, c->y, tv_of(c->yv), c->t, c->x, tv_of(c->xv));
}

static si_status run_affine(const op_ctx *c) {
    const si_value *xv = c->xv;
    si_tview vc = tv_none();
    vc.nd = xv->shape.ndim;
    for (int d = 0; d < vc.nd; d++) vc.dims[d] = 1;
    vc.dims[1] = xv->shape.dims[1];
    vc.st[1] = 1;
    return map(c->s, SI_MAP_FMA, 0, no_act, c->t, c->y, tv_of(c->yv), c->t, c->x, tv_of(xv),
               vptr(c->cs, c->g, c->sl, c->n->in[1]), vc, vptr(c->cs, c->g, c->sl, c->n->in[2]),
               vc);
}

static si_status run_view(const op_ctx *c) {
    if (!c->cs->plan.copy_view[c->j]) return SI_OK; // same bytes
    const si_value *xv = c->xv, *yv = c->yv;
    const int t = c->t;
    bool xr = xv->kind != SI_VAL_RUNTIME || si_devplan_rowmajor(xv);
    if (xr) { // the input's bytes are the output's logical order
        si_tview va = tv_rowmajor(&yv->shape);
        return map(c->s, SI_MAP_COPY, 0, no_act, t, c->y, tv_of(yv), t, c->x, va);
    }
    if (si_devplan_rowmajor(yv)) // write the input's logical order
        return map(c->s, SI_MAP_COPY, 0, no_act, t, c->y, tv_rowmajor(&xv->shape), t, c->x,
                   tv_of(xv));
    si_status st = map(c->s, SI_MAP_COPY, 0, no_act, t, c->sl->scratch, tv_rowmajor(&xv->shape), t,
                       c->x, tv_of(xv));
    if (st != SI_OK) return st;
    return map(c->s, SI_MAP_COPY, 0, no_act, t, c->y, tv_of(yv), t, c->sl->scratch,
               tv_rowmajor(&yv->shape));
}

static si_status run_concat(const op_ctx *c) {
    const si_gnode *n = c->n;
    int a = n->axis < 0 ? n->axis + c->yv->shape.ndim : n->axis;
    si_tview vy = tv_of(c->yv);
    int64_t cum = 0;
    for (int i = 0; i < n->n_in; i++) {
        const si_value *iv = &c->g->values[n->in[i]];
        si_tview vx = tv_of(iv); // an input read through its Slice: the part of in[i]
        if (n->sview && n->sview[i].on) {
            const si_slice_view *v = &n->sview[i];
            si_shape ps;
            si_concat_input_shape(c->g, n, i, &ps);
            for (int d = 0; d < vx.nd; d++) {
                vx.off += v->starts[d] * vx.st[d];
                vx.st[d] *= v->steps[d];
                vx.dims[d] = ps.dims[d];
            }
        }
        si_tview part = vy;
        part.dims[a] = vx.dims[a];
        part.off = vy.off + cum * vy.st[a];
        cum += vx.dims[a];
        if (part.dims[a] == 0) continue;
        si_status st = map(c->s, SI_MAP_COPY, 0, no_act, c->t, c->y, part, c->t,
                           vptr(c->cs, c->g, c->sl, n->in[i]), vx);
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status run_split(const op_ctx *c) {
    const si_gnode *n = c->n;
    si_tview vx = tv_of(c->xv);
    int64_t cum = 0;
    for (int o = 0; o < n->n_out; o++) {
        si_tview part = vx;
        part.dims[n->axis] = n->split_sizes[o];
        part.off = vx.off + cum * vx.st[n->axis];
        cum += n->split_sizes[o];
        const si_value *ov = &c->g->values[n->outs[o]];
        si_status st = map(c->s, SI_MAP_COPY, 0, no_act, c->t, vptr(c->cs, c->g, c->sl, n->outs[o]),
                           tv_of(ov), c->t, c->x, part);
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status run_slice(const op_ctx *c) {
    const si_gnode *n = c->n;
    si_tview va = tv_of(c->xv);
    for (int d = 0; d < va.nd; d++) {
        va.off += n->starts[d] * va.st[d];
        va.st[d] *= n->steps[d];
        va.dims[d] = c->yv->shape.dims[d];
    }
    if (si_shape_numel(&c->yv->shape) == 0) return SI_OK;
    return map(c->s, SI_MAP_COPY, 0, no_act, c->t, c->y, tv_of(c->yv), c->t, c->x, va);
}

static si_status run_transpose(const op_ctx *c) {
    if (c->cs->plan.same_bytes[c->j]) return SI_OK; // NHWC <-> its row-major (N, H, W, C)
    si_tview vx = tv_of(c->xv), va = vx;
    for (int d = 0; d < vx.nd; d++) {
        va.dims[d] = vx.dims[c->n->perm[d]];
        va.st[d] = vx.st[c->n->perm[d]];
    }
    return map(c->s, SI_MAP_COPY, 0, no_act, c->t, c->y, tv_of(c->yv), c->t, c->x, va);
}

static si_status run_expand(const op_ctx *c) {
    return map(c->s, SI_MAP_COPY, 0, no_act, c->t, c->y, tv_of(c->yv), c->t, c->x,
               tv_align(tv_of(c->xv), c->yv->shape.ndim));
}

// Tile as the broadcast of si_tile_split over the storage's strides (NHWC images too): y's dim
// d of r * x_d elements is (r, x_d), the first x_d times dim d's stride apart, x's (1, x_d)
static_assert(SI_TILE_MAXD <= SI_TV_MAXD, "a Tile's broadcast must fit a view");
static si_status run_tile(const op_ctx *c) {
    si_tview vx = tv_of(c->xv), vy = tv_of(c->yv), tx = tv_none(), ty = tv_none();
    int64_t bx[SI_TILE_MAXD], by[SI_TILE_MAXD], mult[SI_TILE_MAXD];
    int src[SI_TILE_MAXD];
    int k = si_tile_split(vx.nd, vx.dims, vy.dims, bx, by, src, mult);
    if (k < 0) return NODE_ERR(c->g, c->n, SI_ERR_INTERNAL, "cuda: Tile's broadcast is too deep");
    tx.nd = ty.nd = k;
    tx.off = vx.off;
    ty.off = vy.off;
    for (int i = 0; i < k; i++) {
        tx.dims[i] = bx[i];
        tx.st[i] = bx[i] == 1 ? 0 : vx.st[src[i]];
        ty.dims[i] = by[i];
        ty.st[i] = vy.st[src[i]] * mult[i];
    }
    return map(c->s, SI_MAP_COPY, 0, no_act, c->t, c->y, ty, c->t, c->x, tx);
}

// --- row-major ops ----------------------------------------------------------------------------
static si_status run_matmul(const op_ctx *c) {
    gemm_x *gx = &c->cs->gemm[c->j];
    const si_gnode *n = c->n;
    const void *r = NULL; // the fused residual, read as it is laid out for this op
    for (int k = 2; k < n->n_in; k++)
        if (n->in[k] == n->residual) r = c->in[k];
    if (gx->l90 >= 0) { // Linear + bias + activation (or + residual) in one kernel
        si_linear90 p = gx->l90p;
        p.x = c->x;
        p.w = c->in[1];
        p.c = r;
        p.y = c->y;
        cudaCheck(si_cuda_linear90_run(&p, gx->l90, c->sl->ws, c->s));
        return SI_OK;
    }
    if (!gx->loop_nd) {
        si_status st = si_cuda_lt_run(c->cs, c->sl, gx, c->in[1], c->x, r, c->y);
        if (st != SI_OK || !gx->act_after) return st;
        return map(c->s, SI_MAP_ACT, 0, n->act, c->t, c->y, tv_rowmajor(&c->yv->shape), c->t, c->y,
                   tv_rowmajor(&c->yv->shape));
    }
    const size_t el = c->cs->plan.elem;
    int nd = gx->loop_nd;
    int64_t M = gx->yd[nd - 2], N = gx->yd[nd - 1], K = gx->ad[nd - 1], nb = 1;
    for (int d = 0; d < nd - 2; d++) nb *= gx->yd[d];
    for (int64_t bi = 0; bi < nb; bi++) { // numpy broadcasting, matrix by matrix
        int64_t rem = bi, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t k = rem % gx->yd[d];
            rem /= gx->yd[d];
            ia += (gx->ad[d] == 1 ? 0 : k) * sa;
            ib += (gx->bd[d] == 1 ? 0 : k) * sb;
            sa *= gx->ad[d];
            sb *= gx->bd[d];
        }
        si_status st = si_cuda_lt_run(c->cs, c->sl, gx, (const uint8_t *)c->in[1] + ib * K * N * el,
                                      (const uint8_t *)c->x + ia * M * K * el, NULL,
                                      (uint8_t *)c->y + bi * M * N * el);
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status run_softmax(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape;
    int a = n->axis < 0 ? n->axis + xs->ndim : n->axis;
    int64_t outer = 1, len = xs->dims[a], inner = 1;
    for (int d = 0; d < a; d++) outer *= xs->dims[d];
    for (int d = a + 1; d < xs->ndim; d++) inner *= xs->dims[d];
    if (n->legacy_axis) {
        len *= inner;
        inner = 1;
    }
    cudaCheck(si_k_softmax(c->s, c->t, c->x, outer, len, inner, c->y));
    return SI_OK;
}

// rows of x[..axis) by the normalised dims x[axis..) (axis resolved at infer), as the CPU's
static si_status run_lnorm(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape;
    int64_t rows = 1, len = 1;
    for (int d = 0; d < xs->ndim; d++) *(d < n->axis ? &rows : &len) *= xs->dims[d];
    bool has_b = si_layernorm_has_bias(n);
    int64_t ns = si_shape_numel(&c->g->values[n->in[1]].shape);
    int64_t nb = has_b ? si_shape_numel(&c->g->values[n->in[2]].shape) : 1;
    const void *mul = NULL, *res = NULL; // the fused neighbours (norm_fusion.c), after ONNX's
    for (int k = has_b ? 3 : 2; k < n->n_in; k++) {
        if (n->in[k] == n->premul && !mul)
            mul = c->in[k];
        else if (n->in[k] == n->residual)
            res = c->in[k];
    }
    cudaCheck(si_k_layernorm(c->s, c->t, c->x, mul, rows, len, c->in[1], ns,
                             has_b ? c->in[2] : NULL, nb, res, n->epsilon, c->y));
    return SI_OK;
}

// softmax(alpha Q K^T + bias) V: cuDNN's fused SDPA or our kernel, as init chose (sdpa.cu)
static si_status run_attention(const op_ctx *c) {
    const void *in[SI_ATTN_INPUTS];
    si_cuda_attn_inputs(c->n, c->in, in);
    return si_cuda_attn_run(c->cs, c->sl, c->g, c->j, in, c->y);
}

// (N, C, spatial...) rows of the spatial dims
static si_status run_inorm(const op_ctx *c) {
    const si_shape *xs = &c->xv->shape;
    int64_t inner = 1;
    for (int d = 2; d < xs->ndim; d++) inner *= xs->dims[d];
    cudaCheck(si_k_instancenorm(c->s, c->t, c->x, xs->dims[0], xs->dims[1], inner, c->in[1],
                                c->in[2], c->n->epsilon, c->y));
    return SI_OK;
}

// Reduce, and GlobalAveragePool of other than 4-D as a mean over dims 2..
static si_status run_reduce(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape, *ys = &c->yv->shape;
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
    cudaCheck(si_k_reduce(c->s, c->t, op, xs->ndim, xs->dims, c->x, mask, c->y));
    return SI_OK;
}

static si_status run_gather(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape;
    const si_value *iv = &c->g->values[n->in[n->pslot[0]]];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= xs->dims[d];
    for (int d = n->axis + 1; d < xs->ndim; d++) inner *= xs->dims[d];
    cudaCheck(si_k_gather(c->s, c->t, c->x, outer, xs->dims[n->axis], inner,
                          (const int64_t *)(c->cs->consts + c->cs->plan.aux_off[c->j]),
                          si_shape_numel(&iv->shape), c->y));
    return SI_OK;
}

// the indexing ops' indices, int64 at the plan's aux_off (consts.cu put them there)
static const int64_t *index_dev(const op_ctx *c) {
    return (const int64_t *)(c->cs->consts + c->cs->plan.aux_off[c->j]);
}

static si_status run_gather_nd(const op_ctx *c) {
    cudaCheck(si_k_gather_nd(c->s, c->t, &c->n->gnd, c->x, index_dev(c), c->y));
    return SI_OK;
}

static si_status run_gather_elements(const op_ctx *c) {
    cudaCheck(si_k_gather_elements(c->s, c->t, &c->n->elems, c->x, index_dev(c), c->y));
    return SI_OK;
}

// rows of the last axis, read where si_node_rows says (q or k of a projection, in place)
static si_status run_rotary(const op_ctx *c) {
    const si_shape *ys = &c->g->values[c->n->out].shape;
    si_row_geom rg;
    int64_t rows, d;
    si_status st = si_node_rows(c->g, c->n, &rg, &rows, &d);
    if (st != SI_OK) return st;
    int64_t tok = ys->dims[ys->ndim - 2];
    cudaCheck(si_k_rotary(c->s, c->t, c->x, &rg, rows / tok, tok, d, c->n->rot_skip, c->n->rot_half,
                          c->in[1], c->in[2], c->y));
    return SI_OK;
}

// rows of the last axis, read where si_node_rows says (the packed projection's q or k)
static si_status run_rownorm(const op_ctx *c) {
    si_row_geom rg;
    int64_t rows, d;
    si_status st = si_node_rows(c->g, c->n, &rg, &rows, &d);
    if (st != SI_OK) return st;
    cudaCheck(si_k_rownorm(c->s, c->t, c->x, &rg, rows, d, c->n->epsilon,
                           c->n->n_in > 1 ? c->in[1] : NULL, c->n->rn_div, c->n->rn_mod, c->y));
    return SI_OK;
}

static si_status run_scatter_elements(const op_ctx *c) {
    cudaCheck(si_k_scatter_elements(c->s, c->t, &c->n->elems, c->n->reduction, c->x,
                                    si_shape_numel(&c->xv->shape), index_dev(c), c->in[2], c->y));
    return SI_OK;
}

static si_status run_pad(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape;
    cudaCheck(si_k_pad(c->s, c->t, n->pad_mode, xs->ndim, xs->dims, c->x, n->pads, n->pad_value,
                       c->yv->shape.dims, c->y));
    return SI_OK;
}

static si_status run_resize(const op_ctx *c) {
    const si_gnode *n = c->n;
    const si_shape *xs = &c->xv->shape, *ys = &c->yv->shape;
    cudaCheck(si_k_resize(c->s, c->t, &n->resize, xs->dims[0] * xs->dims[1], (int)xs->dims[2],
                          (int)xs->dims[3], (int)ys->dims[2], (int)ys->dims[3], n->scales[0],
                          n->scales[1], c->x, c->y));
    return SI_OK;
}

// --- the table --------------------------------------------------------------------------------
static constexpr op_entry op_table[] = {
    {SI_OP_CONV, run_conv, NULL},
    {SI_OP_MAXPOOL, run_maxpool, NULL},
    {SI_OP_AVGPOOL, run_avgpool, NULL},
    {SI_OP_GLOBAL_AVGPOOL, run_global_avgpool, run_reduce},
    {SI_OP_GEMM, run_gemm, NULL},
    {SI_OP_MATMUL, NULL, run_matmul},
    {SI_OP_BINARY, run_binary, NULL},
    {SI_OP_ACTIVATION, run_activation, NULL},
    {SI_OP_AFFINE, run_affine, NULL},
    {SI_OP_VIEW, run_view, NULL},
    {SI_OP_CONCAT, run_concat, NULL},
    {SI_OP_SPLIT, run_split, NULL},
    {SI_OP_SLICE, run_slice, NULL},
    {SI_OP_TRANSPOSE, run_transpose, NULL},
    {SI_OP_EXPAND, run_expand, NULL},
    {SI_OP_GATHER, NULL, run_gather},
    {SI_OP_RESIZE, NULL, run_resize},
    {SI_OP_SOFTMAX, NULL, run_softmax},
    {SI_OP_PAD, NULL, run_pad},
    {SI_OP_REDUCE, NULL, run_reduce},
    {SI_OP_HOST, NULL, NULL}, // evaluated on the host at load
    {SI_OP_LAYERNORM, NULL, run_lnorm},
    {SI_OP_INSTANCENORM, NULL, run_inorm},
    {SI_OP_ATTENTION, NULL, run_attention},
    {SI_OP_GATHER_ND, NULL, run_gather_nd},
    {SI_OP_GATHER_ELEMENTS, NULL, run_gather_elements},
    {SI_OP_SCATTER_ELEMENTS, NULL, run_scatter_elements},
    {SI_OP_ROTARY, NULL, run_rotary},
    {SI_OP_TILE, run_tile, NULL},
    {SI_OP_ROWNORM, NULL, run_rownorm},
};

static constexpr bool table_in_order(void) {
    for (int i = 0; i < SI_OP_COUNT; i++)
        if (op_table[i].op != i) return false;
    return true;
}
static_assert(sizeof op_table / sizeof op_table[0] == SI_OP_COUNT, "an si_op without a row");
static_assert(table_in_order(), "op_table's rows must follow si_op's order");

// The function that runs node n: the row-major one for the ops devplan lays out row-major.
static op_fn op_fn_of(const si_graph *g, const si_gnode *n) {
    const op_entry *r = &op_table[n->op];
    return si_devplan_rowmajor_op(g, n) ? r->rowmajor : r->strided;
}

// NHWC operands converted into scratch as row-major, then f, then its row-major result into the
// output's own layout
static si_status run_rowmajor(op_ctx c, op_fn f) {
    const si_gnode *n = c.n;
    uint8_t *cur = c.sl->scratch;
    const void *in[16] = {0};
    for (int k = 0; k < n->n_in && k < 16; k++) {
        const si_value *v = &c.g->values[n->in[k]];
        in[k] = vptr(c.cs, c.g, c.sl, n->in[k]);
        if (!si_devplan_data_input(n, k) || v->kind != SI_VAL_RUNTIME || si_devplan_rowmajor(v))
            continue;
        si_status st = map(c.s, SI_MAP_COPY, 0, no_act, c.t, cur, tv_rowmajor(&v->shape), c.t,
                           in[k], tv_of(v));
        if (st != SI_OK) return st;
        in[k] = cur;
        cur += up((size_t)si_shape_numel(&v->shape) * c.cs->plan.elem);
    }
    void *yfinal = c.y;
    bool convert_out = !si_devplan_rowmajor(c.yv);
    if (convert_out) c.y = cur;
    c.x = in[0];
    c.in = in;
    si_status st = f(&c);
    if (st != SI_OK) return st;
    if (convert_out)
        return map(c.s, SI_MAP_COPY, 0, no_act, c.t, yfinal, tv_of(c.yv), c.t, c.y,
                   tv_rowmajor(&c.yv->shape));
    return SI_OK;
}

si_status si_cuda_run_node(si_engine *e, cuda_state *cs, slot_x *sl, int j) {
    si_graph *g = e->g;
    si_gnode *n = &g->nodes[j];
    op_ctx c;
    c.e = e;
    c.cs = cs;
    c.sl = sl;
    c.j = j;
    c.g = g;
    c.n = n;
    c.s = sl->stream;
    c.t = cs->t;
    c.xv = &g->values[n->in[0]];
    c.yv = &g->values[n->out];
    c.x = vptr(cs, g, sl, n->in[0]);
    c.y = vptr(cs, g, sl, n->out);
    c.in = NULL;
    op_fn f = op_fn_of(g, n);
    if (si_devplan_rowmajor_op(g, n)) {
        SI_ASSERT(f); // cuda_supports_op refused the rest at load
        return run_rowmajor(c, f);
    }
    if (!f) return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "cuda: no kernel for %s", si_op_name(n->op));
    return f(&c);
}

// --- what the backend runs (cuda_supports_op) -------------------------------------------------
// The limits of the launches above, answered before anything is allocated; the messages are the
// ones init gave when it found them.
bool si_cuda_node_ok(const si_graph *g, const si_gnode *n, char *why, size_t cap) {
    if (n->op == SI_OP_HOST) return true;
    const si_value *x = &g->values[n->in[0]];
    if (!op_fn_of(g, n)) {
        snprintf(why, cap, "cuda: no kernel for %s", si_op_name(n->op));
        return false;
    }
    if ((n->op == SI_OP_MAXPOOL || n->op == SI_OP_AVGPOOL) &&
        (x->kind != SI_VAL_RUNTIME || x->shape.ndim != 4)) {
        snprintf(why, cap, "cuda: pooling needs a 4-D computed input");
        return false;
    }
    if (n->op == SI_OP_GLOBAL_AVGPOOL && x->shape.ndim == 4 && x->kind != SI_VAL_RUNTIME) {
        snprintf(why, cap, "cuda: pooling needs a computed input");
        return false;
    }
    if (n->op == SI_OP_RESIZE && x->shape.ndim != 4) {
        snprintf(why, cap, "cuda: Resize of a %d-D tensor", x->shape.ndim);
        return false;
    }
    if (n->op == SI_OP_CONV && (x->kind != SI_VAL_RUNTIME || x->shape.ndim != 4)) {
        snprintf(why, cap, "cuda: the input of a 2-D Conv must be a 4-D computed tensor");
        return false;
    }
    if (n->op == SI_OP_ATTENTION) {
        si_attn_view op[4];
        si_attention_operands(g, n, op);
        const si_shape *q = &op[0].shape, *v = &op[2].shape;
        int64_t d = q->dims[q->ndim - 1], s = v->dims[v->ndim - 2];
        if (!si_k_attention_fits(d, s)) { // the FP32 kernel's row of scores in shared memory
            snprintf(why, cap, "cuda: attention over %lld keys of head size %lld", (long long)s,
                     (long long)d);
            return false;
        }
    }
    if (n->op == SI_OP_CONV && n->residual >= 0 &&
        memcmp(g->values[n->residual].shape.dims, g->values[n->out].shape.dims,
               sizeof(int64_t) * 4) != 0) {
        snprintf(why, cap, "cuda: residual shape differs from Conv's");
        return false;
    }
    return true;
}
