/* GPU memory plan: activations by liveness (memplan), constants packed once, per-slot buffers. */
#include "devplan.h"

#include "io/resample.h"

#include <stdlib.h>
#include <string.h>

static size_t up(size_t n) {
    return (n + SI_DEV_ALIGN - 1) / SI_DEV_ALIGN * SI_DEV_ALIGN;
}

bool si_devplan_nhwc(const si_value *v) {
    return v->kind == SI_VAL_RUNTIME && v->shape.ndim == 4 && v->spatial;
}

bool si_devplan_rowmajor(const si_value *v) {
    if (!si_devplan_nhwc(v)) return true;
    return v->shape.dims[1] == 1 || v->shape.dims[2] * v->shape.dims[3] == 1;
}

bool si_devplan_data_input(const si_gnode *n, int k) {
    for (int s = 0; s < 4; s++)
        if (n->pslot[s] == k) return false;
    return true;
}

bool si_devplan_rowmajor_op(const si_graph *g, const si_gnode *n) {
    switch (n->op) {
    case SI_OP_MATMUL:
    case SI_OP_SOFTMAX:
    case SI_OP_LAYERNORM:
    case SI_OP_INSTANCENORM:
    case SI_OP_ATTENTION:
    case SI_OP_REDUCE:
    case SI_OP_GATHER:
    case SI_OP_GATHER_ND:
    case SI_OP_GATHER_ELEMENTS:
    case SI_OP_SCATTER_ELEMENTS:
    case SI_OP_ROTARY:
    case SI_OP_ROWNORM:
    case SI_OP_PAD:
    case SI_OP_RESIZE: return true;
    case SI_OP_GLOBAL_AVGPOOL: return g->values[n->in[0]].shape.ndim != 4; /* as a Reduce */
    default: return false;
    }
}

/* A view that cannot share bytes: the input's order and the output's differ. */
static bool view_copies(const si_graph *g, const si_gnode *n) {
    const si_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    if (x->kind != SI_VAL_RUNTIME) return true; /* a constant is copied into the arena */
    if (si_devplan_rowmajor(x) && si_devplan_rowmajor(y)) return false;
    if (si_devplan_nhwc(x) && si_devplan_nhwc(y)) {
        bool same = true;
        for (int d = 0; d < 4; d++) same = same && x->shape.dims[d] == y->shape.dims[d];
        if (same) return false;
    }
    return true;
}

/* The order of v's dims in memory, outermost first: NHWC for an image-like 4-D value. */
static void memory_order(const si_value *v, int *o) {
    static const int nhwc[4] = {0, 2, 3, 1};
    bool image = !si_devplan_rowmajor(v) && v->shape.ndim == 4;
    for (int d = 0; d < v->shape.ndim; d++) o[d] = image ? nhwc[d] : d;
}

/* A Transpose whose input and output hold the same bytes: an NHWC-stored (N, C, H, W) read as
 * its row-major (N, H, W, C) permutation and back (ConvNeXt's blocks, around their LayerNorm and
 * MLP). The input dims of extent > 1 meet in the same memory order on both sides. */
static bool transpose_same_bytes(const si_graph *g, const si_gnode *n) {
    const si_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    int nd = x->shape.ndim, ox[SI_MAX_DIMS], oy[SI_MAX_DIMS], a = 0, b = 0;
    if (n->op != SI_OP_TRANSPOSE || x->kind != SI_VAL_RUNTIME || y->shape.ndim != nd) return false;
    memory_order(x, ox);
    memory_order(y, oy);
    int sx[SI_MAX_DIMS], sy[SI_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        if (x->shape.dims[ox[i]] > 1) sx[a++] = ox[i];
        int d = n->perm[oy[i]]; /* output dim oy[i] is input dim perm[oy[i]] */
        if (x->shape.dims[d] > 1) sy[b++] = d;
    }
    return a == b && memcmp(sx, sy, sizeof(int) * (size_t)a) == 0;
}

/* A Reshape merging H and W of an NHWC-stored (N, C, H, W) into (N, C, H W) that only a Transpose
 * to (N, H W, C) reads: that output is the NHWC bytes in row-major order, so neither node copies
 * (a ViT's patch embedding, flatten(2) then transpose(1, 2); the (N, C, H W) between them is
 * never read). The Transpose's node index, or -1. */
static int flatten_transpose(const si_graph *g, int j) {
    const si_gnode *n = &g->nodes[j];
    if (n->op != SI_OP_VIEW) return -1;
    const si_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    if (si_devplan_rowmajor(x) || y->shape.ndim != 3 || y->uses != 1 ||
        y->shape.dims[0] != x->shape.dims[0] || y->shape.dims[1] != x->shape.dims[1] ||
        y->shape.dims[2] != x->shape.dims[2] * x->shape.dims[3])
        return -1;
    for (int k = j + 1; k < g->n_nodes; k++) {
        const si_gnode *t = &g->nodes[k];
        if (t->n_in < 1 || t->in[0] != n->out) continue;
        bool swap =
            t->op == SI_OP_TRANSPOSE && t->perm[0] == 0 && t->perm[1] == 2 && t->perm[2] == 1;
        return swap ? k : -1;
    }
    return -1;
}

bool si_devplan_patch_conv(const si_graph *g, const si_gnode *n) {
    if (n->op != SI_OP_CONV) return false;
    const si_conv_shape *s = &n->conv;
    const si_value *w = &g->values[n->in[1]];
    return s->group == 1 && s->kh == s->sh && s->kw == s->sw && s->kh * s->kw > 1 && s->dh == 1 &&
           s->dw == 1 && !s->pt && !s->pl && !s->pb && !s->pr && w->kind == SI_VAL_CONST &&
           w->shape.ndim == 4 && n->residual < 0 &&
           (n->act.kind == SI_ACT_NONE || n->act.kind == SI_ACT_RELU) && s->oh > 0 && s->ow > 0;
}

int si_devplan_conv_cpad(const si_graph *g, const si_gnode *n, size_t elem) {
    int c = n->conv.c;
    if (si_devplan_patch_conv(g, n)) return c; /* a GEMM: its rows padded instead (patch_k) */
    if (elem == 2 && c < 8 && n->conv.group == 1 && g->values[n->in[1]].kind == SI_VAL_CONST)
        return 8;
    return c;
}

int64_t si_devplan_patch_k(const si_graph *g, const si_gnode *n, size_t elem) {
    (void)g;
    int64_t k = (int64_t)n->conv.kh * n->conv.kw * n->conv.c;
    return elem == 2 ? (k + 7) / 8 * 8 : k; /* DINOv2's 14 x 14 x 3 = 588 -> 592 */
}

bool si_devplan_dwconv(const si_graph *g, const si_gnode *n) {
    if (n->op != SI_OP_CONV) return false;
    const si_conv_shape *s = &n->conv;
    const si_value *w = &g->values[n->in[1]];
    return s->group > 1 && s->group == s->c && s->m == s->c && w->kind == SI_VAL_CONST &&
           w->shape.ndim == 4;
}

int64_t si_devplan_node_scratch(const si_graph *g, const si_gnode *n, size_t elem) {
    const si_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    int64_t need = 0;
    if (n->op == SI_OP_VIEW) {
        /* NHWC to another NHWC shape goes through row-major order */
        if (x->kind == SI_VAL_RUNTIME && !si_devplan_rowmajor(x) && !si_devplan_rowmajor(y) &&
            view_copies(g, n))
            need = si_shape_numel(&x->shape);
    } else if (si_devplan_patch_conv(g, n)) {
        const si_conv_shape *c = &n->conv;
        need = (int64_t)c->n * c->oh * c->ow * si_devplan_patch_k(g, n, elem);
    } else if (n->op == SI_OP_CONV) {
        const si_conv_shape *c = &n->conv;
        bool asym = c->pt != c->pb || c->pl != c->pr; /* cuDNN pads symmetrically */
        int cp = si_devplan_conv_cpad(g, n, elem);
        if (asym || cp != c->c)
            need = (int64_t)c->n * cp * (c->h + (asym ? c->pt + c->pb : 0)) *
                   (c->w + (asym ? c->pl + c->pr : 0));
    } else if (si_devplan_rowmajor_op(g, n)) {
        for (int k = 0; k < n->n_in; k++) {
            const si_value *v = &g->values[n->in[k]];
            if (si_devplan_data_input(n, k) && v->kind == SI_VAL_RUNTIME && !si_devplan_rowmajor(v))
                need += (int64_t)(up((size_t)si_shape_numel(&v->shape) * 4) / 4);
        }
        if (!si_devplan_rowmajor(y))
            need += (int64_t)(up((size_t)si_shape_numel(&y->shape) * 4) / 4);
    }
    return need;
}

/* The input and output staging: each graph input and output at its offset (pixels: the one
 * image input as (B, H, W, 3) bytes; otherwise floats). */
static void plan_staging(const si_graph *g, bool pixels, si_devplan *p) {
    p->in_off = si_xcalloc((size_t)g->n_inputs + 1, sizeof(size_t));
    p->out_off = si_xcalloc((size_t)g->n_outputs + 1, sizeof(size_t));
    p->out_row = si_xcalloc((size_t)g->n_outputs + 1, sizeof(int64_t));
    size_t in = 0, out = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        size_t numel = (size_t)si_shape_numel(&g->values[g->inputs[i]].shape);
        p->in_off[i] = in;
        in += up(pixels && i == 0 ? numel : numel * sizeof(float));
    }
    for (int o = 0; o < g->n_outputs; o++) {
        const si_shape *s = &g->values[g->outputs[o]].shape;
        p->out_off[o] = out;
        out += up((size_t)si_shape_numel(s) * sizeof(float));
        p->out_row[o] = s->ndim && s->dims[0] ? si_shape_numel(s) / s->dims[0] : 0;
    }
    p->input = in;
    p->output = out;
}

/* One slot's blocks: on the device the arena, scratch, workspace, input and output staging and
 * the packed images then their items; pinned the same staging, images and items. */
static void carve(si_devplan *p, size_t pool, size_t area) {
    si_devplan_carve *d = &p->dev, *h = &p->pin;
    d->arena = 0;
    d->scratch = d->arena + p->activations;
    d->workspace = d->scratch + p->scratch;
    d->input = d->workspace + p->workspace;
    d->output = d->input + p->input;
    d->pack = p->pack ? d->output + p->output : SIZE_MAX;
    d->area = p->pack && area ? d->pack + pool : SIZE_MAX;
    d->items = p->pack ? d->pack + pool + area : SIZE_MAX;
    p->slot_bytes = d->output + p->output + p->pack + area;
    h->arena = h->scratch = h->workspace = h->area = SIZE_MAX;
    h->input = 0;
    h->output = h->input + p->input;
    h->pack = p->pack ? h->output + p->output : SIZE_MAX;
    h->items = p->pack ? h->pack + pool : SIZE_MAX;
}

si_status si_devplan_build(si_graph *g, int batch, size_t elem, int slots, size_t workspace,
                           bool pixels, size_t pack_per_image, size_t area_per_image,
                           si_devplan *p) {
    memset(p, 0, sizeof *p);
    si_status st = si_graph_infer(g, batch);
    if (st != SI_OK) return st;
    p->batch = batch;
    p->slots = slots;
    p->elem = elem;
    p->pixels = pixels;
    p->copy_view = si_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
    p->same_bytes = si_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
    p->const_off = si_xmalloc(sizeof(size_t) * (size_t)(g->n_values ? g->n_values : 1));
    p->aux_off = si_xmalloc(sizeof(size_t) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    p->dw_off = si_xmalloc(sizeof(size_t) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    for (int i = 0; i < g->n_values; i++) p->const_off[i] = SIZE_MAX;
    for (int j = 0; j < g->n_nodes; j++) p->dw_off[j] = SIZE_MAX;
    int64_t scratch = 0;
    size_t w = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *n = &g->nodes[j];
        p->aux_off[j] = SIZE_MAX;
        if (n->op == SI_OP_HOST) continue;
        if (n->op == SI_OP_VIEW) p->copy_view[j] = view_copies(g, n);
        int pair = flatten_transpose(g, j); /* then both hold the NHWC bytes */
        if (pair >= 0) {
            p->copy_view[j] = 0;
            p->same_bytes[pair] = 1;
        }
        p->same_bytes[j] =
            p->same_bytes[j] ||
            (n->op == SI_OP_VIEW ? g->values[n->in[0]].kind == SI_VAL_RUNTIME && !p->copy_view[j]
                                 : transpose_same_bytes(g, n));
        int64_t s = si_devplan_node_scratch(g, n, elem);
        if (s > scratch) scratch = s;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            const si_value *val = &g->values[v];
            if (val->kind == SI_VAL_RUNTIME || !si_devplan_data_input(n, k)) continue;
            if (p->const_off[v] != SIZE_MAX) continue;
            p->const_off[v] = w;
            size_t numel = (size_t)si_shape_numel(&val->shape);
            if (si_devplan_patch_conv(g, n) && k == 1) /* padded rows */
                numel = (size_t)n->conv.m * (size_t)si_devplan_patch_k(g, n, elem);
            else if (n->op == SI_OP_CONV && k == 1 && val->shape.ndim == 4) /* padded channels */
                numel = numel / (size_t)val->shape.dims[1] *
                        (size_t)(si_devplan_conv_cpad(g, n, elem) / n->conv.group);
            w += up(numel * elem);
        }
        if (si_devplan_dwconv(g, n)) {
            p->dw_off[j] = w;
            w += up((size_t)si_shape_numel(&g->values[n->in[1]].shape) * sizeof(float));
        }
        if (n->op == SI_OP_GATHER || n->op == SI_OP_GATHER_ND || n->op == SI_OP_GATHER_ELEMENTS ||
            n->op == SI_OP_SCATTER_ELEMENTS) { /* the indices, int64 */
            p->aux_off[j] = w;
            w += up(sizeof(int64_t) * (size_t)si_shape_numel(&g->values[n->in[n->pslot[0]]].shape));
        }
    }
    p->weights = w;
    si_memplan_build_ex(g, SI_DEV_ALIGN, elem, p->same_bytes, &p->acts);
    p->activations = up(p->acts.arena_bytes);
    p->scratch = up((size_t)scratch * elem);
    p->workspace = up(workspace);
    plan_staging(g, pixels, p);
    size_t pool = pack_per_image && pixels ? up((size_t)batch * pack_per_image) : 0;
    p->pack = pool ? pool + up(sizeof(si_rs_item) * (size_t)batch) : 0;
    p->pack_cap = pool ? (size_t)batch * pack_per_image : 0;
    size_t area = pool && area_per_image ? up((size_t)batch * area_per_image) : 0;
    p->area_cap = area ? (size_t)batch * area_per_image : 0;
    p->pinned = p->input + p->output + p->pack;
    p->device_total = p->weights + (size_t)slots * (p->activations + p->scratch + p->workspace +
                                                    p->input + p->output + p->pack + area);
    carve(p, pool, area);
    p->pinned_total = (size_t)slots * p->pinned;
    return SI_OK;
}

void si_devplan_free(si_devplan *p) {
    if (!p) return;
    si_memplan_free(&p->acts);
    free(p->copy_view);
    free(p->same_bytes);
    free(p->const_off);
    free(p->aux_off);
    free(p->dw_off);
    free(p->in_off);
    free(p->out_off);
    free(p->out_row);
    memset(p, 0, sizeof *p);
}

size_t si_devplan_slot_dev(const si_devplan *p, int k) {
    return p->weights + (size_t)k * p->slot_bytes;
}

size_t si_devplan_slot_pin(const si_devplan *p, int k) {
    return (size_t)k * p->pinned;
}

int si_devplan_max_batch(si_graph *g, size_t elem, int slots, size_t workspace, bool pixels,
                         size_t pack_per_image, size_t area_per_image, size_t limit) {
    int lo = 0, hi = 1;
    /* grow until it no longer fits, then bisect */
    for (;;) {
        si_devplan p;
        if (si_devplan_build(g, hi, elem, slots, workspace, pixels, pack_per_image, area_per_image,
                             &p) != SI_OK)
            break;
        bool fits = p.device_total <= limit;
        si_devplan_free(&p);
        if (!fits) break;
        lo = hi;
        if (hi >= (1 << 20)) break;
        hi *= 2;
    }
    while (hi - lo > 1 && lo > 0) {
        int mid = lo + (hi - lo) / 2;
        si_devplan p;
        bool fits = si_devplan_build(g, mid, elem, slots, workspace, pixels, pack_per_image,
                                     area_per_image, &p) == SI_OK &&
                    p.device_total <= limit;
        si_devplan_free(&p);
        if (fits)
            lo = mid;
        else
            hi = mid;
    }
    if (lo > 0) si_graph_infer(g, lo);
    return lo;
}
