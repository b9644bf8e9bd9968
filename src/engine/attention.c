/* Scaled dot-product attention as one op, Y = softmax(scale * Q K^T + bias) V over the last two
 * axes: ONNX's Attention (opset 23, its plain form), and the fusion of the pattern exporters
 * write for it (MatMul -> scale -> [Add bias] -> Softmax -> MatMul, the scale on the scores or
 * split over Q and K, K given transposed or not). Backends run the fused node without writing
 * the T x S scores to memory (the GPU's is a flash-attention kernel). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import.h"

/* Inputs: Q (..., T, D), K (..., S, D) or, with trans_b == 0, K^T (..., D, S), V (..., S, Dv),
 * and an optional bias broadcast to (..., T, S). alpha: the scale (0: 1/sqrt(D), resolved at
 * infer). Output (..., T, Dv). */
static si_status infer_attention(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_attn_view op[4];
    if (n->aview) { /* strided operands (attention_views.c): their logical shapes */
        si_status st = si_attention_view_shapes(g, n, op);
        if (st != SI_OK) return st;
    }
    const si_shape *q = n->aview ? &op[0].shape : x;
    const si_shape *k = n->aview ? &op[1].shape : &g->values[n->in[1]].shape;
    const si_shape *v = n->aview ? &op[2].shape : &g->values[n->in[2]].shape;
    int nd = q->ndim;
    if (nd < 3 || k->ndim != nd || v->ndim != nd)
        return si_node_error(g, n, SI_ERR_FORMAT, "Q, K and V must have one rank of 3 or more");
    for (int d = 0; d < nd - 2; d++)
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d])
            return si_node_error(g, n, SI_ERR_FORMAT, "Q, K and V differ in dimension %d", d);
    int64_t dq = q->dims[nd - 1], s = n->trans_b ? k->dims[nd - 2] : k->dims[nd - 1];
    int64_t dk = n->trans_b ? k->dims[nd - 1] : k->dims[nd - 2];
    if (dk != dq || v->dims[nd - 2] != s)
        return si_node_error(g, n, SI_ERR_FORMAT, "Q, K and V's sizes do not match");
    *y = *q;
    y->dims[nd - 1] = v->dims[nd - 1];
    if (n->aview) { /* Y is written into a value of another shape */
        if (memcmp(y->dims, op[3].shape.dims, sizeof(int64_t) * (size_t)nd) != 0)
            return si_node_error(g, n, SI_ERR_FORMAT, "Y no longer fits its strided view");
        *y = op[3].src;
    }
    int qsc = si_attention_qk_scale(n);
    if (n->qk_norm && (!n->trans_b || !(n->epsilon > 0.f) ||
                       (qsc >= 0 && (n->rn_div < 1 || n->rn_mod < 1 ||
                                     si_shape_numel(&g->values[qsc].shape) != n->rn_mod))))
        return si_node_error(g, n, SI_ERR_FORMAT, "the normalisation of q and k does not fit");
    if (si_attention_bias(n) >= 0) { /* broadcast to the scores; a tiled bias's batch dims
                                        divide theirs */
        const si_shape *b = &g->values[si_attention_bias(n)].shape;
        bool ok = b->ndim <= nd;
        for (int d = 0; d < b->ndim && ok; d++) {
            int64_t bd = b->dims[d],
                    sd = d + nd - b->ndim == nd - 1 ? s : q->dims[d + nd - b->ndim];
            bool tiles = n->bias_tiles && d + nd - b->ndim < nd - 2 && bd > 0 && sd % bd == 0;
            ok = bd == 1 || bd == sd || tiles;
        }
        if (!ok)
            return si_node_error(g, n, SI_ERR_FORMAT, "the mask does not broadcast to the scores");
    }
    if (n->host_f == 0.f) n->alpha = dq > 0 ? (float)(1.0 / sqrt((double)dq)) : 1.f;
    return SI_OK;
}

/* ONNX Attention-23 in its plain 4-D form: Q, K, V (B, H, T|S, D), an optional float mask
 * added to the scores; no causal mask, softcap, past key/values or extra outputs. */
static bool convert_attention(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    int k = si_b_input(b, n, 1), v = si_b_input(b, n, 2), mask = si_b_input(b, n, 3);
    if (k < 0 || v < 0) {
        si_b_unsupported(b, n, "needs Q, K and V");
        return false;
    }
    const char *why = si_attr_int(n, "is_causal", 0)               ? "is_causal"
                      : si_attr_float(n, "softcap", 0.f) != 0.f    ? "softcap"
                      : si_attr_int(n, "qk_matmul_output_mode", 0) ? "qk_matmul_output_mode"
                      : si_b_input(b, n, 4) >= 0 || si_b_input(b, n, 5) >= 0 ? "past key/value"
                      : n->n_outputs > 1 && n->outputs[1][0]                 ? "extra outputs"
                      : b->g->values[x].shape.ndim != 4 ? "3-D inputs (q_num_heads)"
                                                        : NULL;
    if (why) {
        si_b_unsupported(b, n, "%s is not supported", why);
        return false;
    }
    if (mask >= 0 && b->g->values[mask].dtype != SI_DT_FLOAT) {
        si_b_unsupported(b, n, "a boolean attn_mask is not supported");
        return false;
    }
    gn->host_f = si_attr_float(n, "scale", 0.f); /* 0: the default, 1/sqrt(D) */
    gn->alpha = gn->host_f;
    gn->trans_b = 1;
    si_node_add_input(gn, x);
    si_node_add_input(gn, k);
    si_node_add_input(gn, v);
    if (mask >= 0) si_node_add_input(gn, mask);
    return true;
}

const si_import_row si_import_attention_rows[] = {
    {.onnx = "Attention",
     .kind = SI_OP_ATTENTION,
     .convert = convert_attention,
     .infer = infer_attention},
    {.onnx = NULL},
};

/* --- the fusion ------------------------------------------------------------------------------ */
/* The batch-2 value of every one-element float HOST value (NAN otherwise), set by
 * si_fuse_attention's caller: a scale computed from shapes (the TorchScript exporter's
 * Sqrt(1 / Sqrt(D)) on Q and K) may be taken when it is the same at batch 1 and 2. */
static const float *host_at_2;

/* The scalar of a one-element float constant (or batch-independent host value), or NAN. */
static float scalar(const si_graph *g, int v) {
    const si_value *c = &g->values[v];
    if (c->kind == SI_VAL_RUNTIME || c->dtype != SI_DT_FLOAT || si_shape_numel(&c->shape) != 1 ||
        !c->data)
        return NAN;
    float f = ((const float *)c->data)[0];
    if (c->kind == SI_VAL_HOST && (!host_at_2 || host_at_2[v] != f)) return NAN;
    return f;
}

/* v = Mul(u, c) or Div(u, c) with c a scalar constant and v read once: *u and the factor. */
static bool scaled(si_graph *g, int v, int *u, float *f) {
    si_gnode *p = si_graph_producer(g, v);
    if (!p || p->op != SI_OP_BINARY || p->act.kind || g->values[v].uses != 1) return false;
    for (int side = 0; side < 2; side++) {
        float c = scalar(g, p->in[1 - side]);
        if (isnan(c) || (p->binop == SI_BIN_DIV && side == 1)) continue;
        if (p->binop == SI_BIN_MUL)
            *f = c;
        else if (p->binop == SI_BIN_DIV && c != 0.f)
            *f = 1.f / c;
        else
            continue;
        *u = p->in[side];
        return true;
    }
    return false;
}

/* v = Mul(u, c) read once, c a constant that varies over the scores' leading (head) axes only,
 * its last two dims 1: Swin V2's learned logit scale per head (folded from exp(clamp(p))).
 * *mul: the Mul's node index. */
static bool head_scaled(si_graph *g, int v, int *u, int *mul) {
    si_gnode *p = si_graph_producer(g, v);
    if (!p || p->op != SI_OP_BINARY || p->binop != SI_BIN_MUL || p->act.kind ||
        g->values[v].uses != 1)
        return false;
    for (int side = 0; side < 2; side++) {
        const si_value *c = &g->values[p->in[1 - side]];
        int nd = c->shape.ndim;
        if (c->kind != SI_VAL_CONST || c->dtype != SI_DT_FLOAT || !c->data || nd < 2 ||
            nd > g->values[v].shape.ndim || c->shape.dims[nd - 1] != 1 ||
            c->shape.dims[nd - 2] != 1)
            continue;
        *u = p->in[side];
        *mul = (int)(p - g->nodes);
        return true;
    }
    return false;
}

/* What one matched pattern absorbs: the nodes that die, and the fused node's inputs. */
typedef struct {
    int dead[16], n_dead;
    int q, k, v, bias, trans_b;
    int mask, windows; /* Swin's shifted-window mask (-1: none), tiled over `windows` */
    int head_mul;      /* Swin V2's Mul of the scores by a per-head constant (-1: none) */
    float scale;
} match;

static void kill_producer(si_graph *g, match *m, int v) {
    m->dead[m->n_dead++] = g->values[v].producer;
}

/* scores = MatMul(q', k') where q' = [q * a] and k' = [k^T * b] or [kt * b]. */
static bool match_scores(si_graph *g, int sv, match *m) {
    si_gnode *mm = si_graph_producer(g, sv);
    if (!mm || mm->op != SI_OP_MATMUL || mm->bias >= 0 || mm->residual >= 0 || mm->act.kind ||
        g->values[sv].uses != 1)
        return false;
    kill_producer(g, m, sv);
    int q = mm->in[0], kt = mm->in[1], u;
    float f;
    if (scaled(g, q, &u, &f)) {
        kill_producer(g, m, q);
        m->scale *= f;
        q = u;
    }
    if (scaled(g, kt, &u, &f)) {
        kill_producer(g, m, kt);
        m->scale *= f;
        kt = u;
    }
    m->q = q;
    m->k = kt;
    m->trans_b = 0;
    si_gnode *t = si_graph_producer(g, kt);
    int nd = g->values[kt].shape.ndim;
    if (t && t->op == SI_OP_TRANSPOSE && g->values[kt].uses == 1 && nd >= 3) {
        bool swap = t->perm[nd - 1] == nd - 2 && t->perm[nd - 2] == nd - 1;
        for (int d = 0; d < nd - 2; d++) swap = swap && t->perm[d] == d;
        if (swap) {
            kill_producer(g, m, kt);
            m->k = t->in[0];
            m->trans_b = 1;
        }
    }
    return g->values[m->q].kind == SI_VAL_RUNTIME && g->values[m->k].kind == SI_VAL_RUNTIME;
}

static bool is_const(const si_graph *g, int v) {
    const si_value *c = &g->values[v];
    return c->kind == SI_VAL_CONST && c->dtype == SI_DT_FLOAT && c->data;
}

/* Swin's shifted windows: x = Reshape(Reshape(y, (B_/W, W, H, T, S)) + mask, (B_, H, T, S)), the
 * mask a constant (1, W, 1|H, T, S) for the W windows of an image. *x becomes y. */
static bool match_window_mask(si_graph *g, int *x, match *m) {
    si_gnode *r2 = si_graph_producer(g, *x), *ad = r2 ? si_graph_producer(g, r2->in[0]) : NULL;
    if (!r2 || r2->op != SI_OP_VIEW || g->values[*x].uses != 1 || !ad || ad->op != SI_OP_BINARY ||
        ad->binop != SI_BIN_ADD || ad->act.kind || g->values[r2->in[0]].uses != 1)
        return false;
    for (int side = 0; side < 2; side++) {
        int r1v = ad->in[side], mk = ad->in[1 - side];
        si_gnode *r1 = si_graph_producer(g, r1v);
        if (!r1 || r1->op != SI_OP_VIEW || g->values[r1v].uses != 1 || !is_const(g, mk)) continue;
        const si_shape *y = &g->values[r1->in[0]].shape, *v5 = &g->values[r1v].shape,
                       *ms = &g->values[mk].shape, *xs = &g->values[*x].shape;
        if (y->ndim != 4 || v5->ndim != 5 || ms->ndim > 5 || xs->ndim != 4 ||
            memcmp(xs->dims, y->dims, sizeof(int64_t) * 4) != 0 ||
            v5->dims[0] * v5->dims[1] != y->dims[0] ||
            memcmp(v5->dims + 2, y->dims + 1, sizeof(int64_t) * 3) != 0)
            continue;
        int64_t md[5];
        for (int d = 0; d < 5; d++) md[d] = d < 5 - ms->ndim ? 1 : ms->dims[d - (5 - ms->ndim)];
        if (md[0] != 1) continue; /* a mask per image is no window's */
        bool fits = true;
        for (int d = 1; d < 5; d++) fits = fits && (md[d] == 1 || md[d] == v5->dims[d]);
        if (!fits) continue;
        m->dead[m->n_dead++] = (int)(r2 - g->nodes);
        m->dead[m->n_dead++] = (int)(ad - g->nodes);
        m->dead[m->n_dead++] = (int)(r1 - g->nodes);
        m->mask = mk;
        m->windows = (int)v5->dims[1];
        *x = r1->in[0];
        return true;
    }
    return false;
}

/* Element (w, h, i, j) of value v read with numpy broadcasting against (W, H, T, S). */
static float at4(const si_value *c, const int64_t *ix) {
    const si_shape *s = &c->shape;
    int64_t off = 0;
    for (int d = 0; d < s->ndim; d++) {
        int64_t i = ix[4 - s->ndim + d];
        off = off * s->dims[d] + (s->dims[d] == 1 ? 0 : i);
    }
    return ((const float *)c->data)[off];
}

/* The window mask and the bias before it (Swin's relative positions, both constant) as one
 * (W, H, T, S) constant whose batch dims tile the scores' (B_, H): window b % W. */
static bool combine_mask(si_graph *g, match *m) {
    if (m->bias >= 0 &&
        (!is_const(g, m->bias) || g->values[m->bias].shape.ndim > 4 ||
         (g->values[m->bias].shape.ndim == 4 && g->values[m->bias].shape.dims[0] != 1)))
        return false;
    const si_shape *q = &g->values[m->q].shape, *v = &g->values[m->v].shape;
    int64_t s = v->dims[v->ndim - 2];
    si_shape cs = {4, {m->windows, q->dims[1], q->dims[2], s}};
    const si_value *mk = &g->values[m->mask];
    si_value mk4 = *mk; /* the mask without its leading 1 (images) */
    if (mk4.shape.ndim == 5) {
        mk4.shape.ndim = 4;
        memmove(mk4.shape.dims, mk4.shape.dims + 1, sizeof(int64_t) * 4);
    }
    float *c = si_xmalloc(sizeof(float) * (size_t)si_shape_numel(&cs));
    int64_t ix[4], k = 0;
    for (ix[0] = 0; ix[0] < cs.dims[0]; ix[0]++)
        for (ix[1] = 0; ix[1] < cs.dims[1]; ix[1]++)
            for (ix[2] = 0; ix[2] < cs.dims[2]; ix[2]++)
                for (ix[3] = 0; ix[3] < cs.dims[3]; ix[3]++) {
                    float b = m->bias >= 0 ? at4(&g->values[m->bias], ix) : 0.f;
                    c[k++] = b + at4(&mk4, ix);
                }
    char name[96];
    snprintf(name, sizeof name, "%.60s+window_mask", g->values[m->mask].name);
    m->bias = si_graph_add_const(g, name, &cs, c);
    return true;
}

/* Whether node n, reading p, may stand between an attention's Softmax and its MatMul: an
 * identity view, or NaN replaced by 0. */
static bool between_softmax_and_matmul(const si_gnode *n, int p) {
    if (n->in[0] != p || n->n_in != 1) return false;
    return (n->op == SI_OP_VIEW && n->view_kind == SI_VIEW_IDENTITY) ||
           (n->op == SI_OP_ACTIVATION && n->act.kind == SI_ACT_NAN_TO && n->act.alpha == 0.f &&
            n->residual < 0 && n->bias < 0);
}

/* Whether bias b, known now, has no row over its last axis that is all -inf (or holds a NaN):
 * then the scores' Softmax cannot give NaN from finite q and k, and zeroing its NaN changes
 * nothing, so the fused kernel need not. A bias computed from image data is not known. */
static bool no_masked_row(const si_graph *g, int b) {
    const si_value *c = &g->values[b];
    if (c->kind == SI_VAL_RUNTIME || !c->data || c->shape.ndim < 1) return false;
    int64_t n = si_shape_numel(&c->shape), s = c->shape.dims[c->shape.ndim - 1];
    for (int64_t r = 0; r + s <= n && s > 0; r += s) {
        bool masked = true;
        for (int64_t j = 0; j < s; j++) {
            double v = si_value_f64(c, r + j);
            if (v != v) return false;
            masked = masked && v == -INFINITY;
        }
        if (masked) return false;
    }
    return true;
}

/* Softmax node sm over the last axis, read by one MatMul as its A: walk back to the scores. */
static bool match_at(si_graph *g, si_gnode *sm, si_gnode **out_mm, match *m, const char **why) {
    const si_value *sv = &g->values[sm->out];
    int nd = sv->shape.ndim;
    *why = "the Softmax is not over the last axis of a rank-3 or larger tensor";
    if (nd < 3 || (sm->axis != -1 && sm->axis != nd - 1)) return false;
    if (sm->legacy_axis && sm->axis != nd - 1 && sm->axis != -1) return false;
    si_gnode *mm2 = NULL;
    /* the nodes between die with the pattern: identity views (the legacy exporter's Casts of
     * Hugging Face's probabilities to float32 and back) and torch's Where(IsNaN(p), 0, p) */
    int p = sm->out, casts[4], n_casts = 0;
    bool nan_zero = false;
    for (int k = 0; k < g->n_nodes && g->values[p].uses == 1 && n_casts < 4; k++)
        if (between_softmax_and_matmul(&g->nodes[k], p)) {
            nan_zero |= g->nodes[k].op == SI_OP_ACTIVATION;
            casts[n_casts++] = k;
            p = g->nodes[k].out;
            k = -1;
        }
    for (int k = 0; k < g->n_nodes && g->values[p].uses == 1; k++)
        if (g->nodes[k].op == SI_OP_MATMUL && g->nodes[k].in[0] == p) mm2 = &g->nodes[k];
    *why = "the Softmax is not read by one MatMul alone, as its first input";
    if (!mm2) return false;
    *why = "the MatMul after the Softmax adds a bias, a residual or an activation";
    if (mm2->bias >= 0 || mm2->residual >= 0 || mm2->act.kind) return false;
    memset(m, 0, sizeof *m);
    m->scale = 1.f;
    m->bias = m->mask = m->head_mul = -1;
    m->dead[m->n_dead++] = (int)(sm - g->nodes);
    for (int c = 0; c < n_casts; c++) m->dead[m->n_dead++] = casts[c];
    int x = sm->in[0], u;
    float f;
    if (!match_window_mask(g, &x, m) &&
        scaled(g, x, &u, &f)) { /* scale after the bias would scale the bias too: not fused */
        kill_producer(g, m, x);
        m->scale *= f;
        x = u;
    }
    si_gnode *ad = si_graph_producer(g, x);
    if (ad && ad->op == SI_OP_BINARY && ad->binop == SI_BIN_ADD && !ad->act.kind &&
        g->values[x].uses == 1 && m->scale == 1.f) {
        for (int side = 0; side < 2 && m->bias < 0; side++) {
            match t = *m;
            t.dead[t.n_dead++] = (int)(ad - g->nodes);
            int s = ad->in[side];
            if (scaled(g, s, &u, &f)) {
                kill_producer(g, &t, s);
                t.scale *= f;
                s = u;
            } else if (head_scaled(g, s, &u, &t.head_mul)) {
                s = u;
            }
            if (match_scores(g, s, &t)) {
                t.bias = ad->in[1 - side];
                *m = t;
            }
        }
        *why = "the Add before the Softmax adds to no scores MatMul of two computed tensors";
        if (m->bias < 0) return false;
    } else if (ad && ad->op == SI_OP_BINARY && ad->binop == SI_BIN_ADD && m->scale != 1.f) {
        *why = "the scale comes after the Add of a bias, so it scales the bias too";
        return false;
    } else if (!match_scores(g, x, m)) {
        *why = "the Softmax's input is not a MatMul of two computed tensors, read once, behind at "
               "most a constant scale and an Add";
        return false;
    }
    m->v = mm2->in[1];
    *out_mm = mm2;
    *why = "a window mask on scores of a rank other than 4";
    if (g->values[m->q].shape.ndim != 4 && m->mask >= 0) return false;
    *why = "V is not a computed tensor, or the window mask and bias do not combine";
    if (g->values[m->v].kind != SI_VAL_RUNTIME || (m->mask >= 0 && !combine_mask(g, m)))
        return false;
    *why = "NaN is zeroed after the Softmax, and a row of its bias may be all -inf";
    return !nan_zero || m->bias < 0 || no_masked_row(g, m->bias);
}

/* The shapes the fused op needs (same batch dims, K and V agree), at the inferred batch. */
static bool shapes_fit(const si_graph *g, const match *m) {
    const si_shape *q = &g->values[m->q].shape, *k = &g->values[m->k].shape,
                   *v = &g->values[m->v].shape;
    int nd = q->ndim;
    if (nd < 3 || k->ndim != nd || v->ndim != nd) return false;
    for (int d = 0; d < nd - 2; d++)
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d]) return false;
    int64_t s = m->trans_b ? k->dims[nd - 2] : k->dims[nd - 1];
    int64_t dk = m->trans_b ? k->dims[nd - 1] : k->dims[nd - 2];
    return dk == q->dims[nd - 1] && v->dims[nd - 2] == s &&
           (m->bias < 0 || g->values[m->bias].shape.ndim <= nd);
}

/* A Softmax over the last axis of a rank-3+ tensor whose output a MatMul reads as its A: the
 * shape of attention, whether or not the rest of the pattern is there. */
static bool looks_like_attention(const si_graph *g, const si_gnode *sm) {
    if (g->values[sm->out].shape.ndim < 3) return false;
    int p = sm->out;
    for (int k = 0, hops = 0; k < g->n_nodes && hops < 4; k++)
        if (between_softmax_and_matmul(&g->nodes[k], p)) {
            p = g->nodes[k].out;
            k = -1;
            hops++;
        }
    for (int k = 0; k < g->n_nodes; k++)
        if (g->nodes[k].op == SI_OP_MATMUL && g->nodes[k].in[0] == p) return true;
    return false;
}

/* The per-head scale of the scores moves onto q: (q c) k^T = (q k^T) c where c varies over
 * the head axes alone. Its Mul node, which runs before the fused node, now scales q. */
static void scale_q_per_head(si_graph *g, match *m) {
    si_gnode *hm = &g->nodes[m->head_mul];
    int c = g->values[hm->in[0]].kind == SI_VAL_CONST ? hm->in[0] : hm->in[1];
    if (si_rownorm_take_scale(g, m->q, c)) { /* Swin V2: the normalisation of q scales it */
        g->nodes[m->head_mul].op = -1;
        return;
    }
    si_shape qs = g->values[m->q].shape;
    size_t len = strlen(g->values[m->q].name) + 16;
    char *name = si_xmalloc(len);
    snprintf(name, len, "%s/head_scaled", g->values[m->q].name);
    int v = si_graph_add_runtime(g, name, &qs);
    free(name);
    hm->n_in = 0;
    si_node_add_input(hm, m->q);
    si_node_add_input(hm, c);
    hm->out = hm->outs[0] = v;
    g->values[v].producer = m->head_mul;
    m->q = v;
}

int si_fuse_attention(si_graph *g, const float *host_scalars_at_2) {
    int fused = 0;
    host_at_2 = host_scalars_at_2;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *sm = &g->nodes[j], *mm2;
        match m;
        const char *why = NULL;
        if (sm->op != SI_OP_SOFTMAX) continue;
        bool matched = match_at(g, sm, &mm2, &m, &why);
        if (!matched || !shapes_fit(g, &m)) {
            if (matched) why = "Q, K and V's shapes do not agree";
            if (looks_like_attention(g, sm) && g->attention_missed++ < 4)
                si_log_warn("%s: Softmax node '%s' looks like attention but is not fused (%s): "
                            "it runs as MatMul, Softmax and MatMul, writing every score to memory",
                            g->path, sm->name, why);
            continue;
        }
        if (m.head_mul >= 0) scale_q_per_head(g, &m);
        mm2->op = SI_OP_ATTENTION;
        mm2->n_in = 0;
        si_node_add_input(mm2, m.q);
        si_node_add_input(mm2, m.k);
        si_node_add_input(mm2, m.v);
        if (m.bias >= 0) si_node_add_input(mm2, m.bias);
        mm2->trans_b = m.trans_b;
        mm2->bias_tiles = m.mask >= 0;
        mm2->alpha = m.scale;
        mm2->host_f = m.scale; /* given: infer keeps it */
        /* Swin V2: q and k's L2 normalisation runs in the kernels as they load q and k */
        bool cosine = si_rownorm_into_attention(g, mm2);
        size_t len = strlen(mm2->op_type) + 64;
        char *type = si_xmalloc(len);
        snprintf(type, len, "Attention(%sMatMul+%sSoftmax+MatMul)", cosine ? "RowNorm(q,k)+" : "",
                 m.mask >= 0   ? "Add+Add(window mask)+"
                 : m.bias >= 0 ? "Add+"
                               : "");
        free(mm2->op_type);
        mm2->op_type = type;
        for (int d = 0; d < m.n_dead; d++) g->nodes[m.dead[d]].op = -1;
        si_graph_compact(g);
        fused++;
        j = -1; /* node indices moved */
    }
    host_at_2 = NULL;
    return fused;
}

/* Whether value v holds known data, all zero. */
static bool all_zero(const si_graph *g, int v) {
    const si_value *c = &g->values[v];
    if (c->kind == SI_VAL_RUNTIME || !c->data) return false;
    for (int64_t i = 0; i < si_shape_numel(&c->shape); i++)
        if (si_value_f64(c, i) != 0.0) return false;
    return true;
}

int si_attention_drop_zero_bias(si_graph *g) {
    bool *zero = si_xcalloc((size_t)g->n_nodes + 1, sizeof *zero);
    int dropped = 0;
    for (int j = 0; j < g->n_nodes; j++) zero[j] = g->nodes[j].op == SI_OP_ATTENTION;
    for (int b = 2; b <= 3; b++) {
        if (si_graph_infer(g, b) != SI_OK) {
            si_error_clear();
            memset(zero, 0, (size_t)g->n_nodes + 1);
        }
        for (int j = 0; j < g->n_nodes; j++) {
            const si_gnode *n = &g->nodes[j];
            zero[j] = zero[j] && si_attention_bias(n) >= 0 && !n->bias_tiles &&
                      all_zero(g, si_attention_bias(n));
        }
    }
    for (int j = 0; j < g->n_nodes; j++) {
        if (!zero[j]) continue;
        si_gnode *n = &g->nodes[j];
        n->in[3] = n->in[n->n_in - 1]; /* a cosine attention's scales of q stay last */
        n->n_in--;
        free(n->op_type);
        n->op_type = si_xstrdup(n->qk_norm ? "Attention(RowNorm(q,k)+MatMul+Softmax+MatMul)"
                                           : "Attention(MatMul+Softmax+MatMul)");
        dropped++;
    }
    free(zero);
    g->inferred_batch = -1;
    if (dropped) si_graph_compact(g); /* recounts the uses the biases lost */
    return dropped;
}
