/* Import of the ops that move data without arithmetic: the views (Flatten, Reshape, Squeeze,
 * Unsqueeze, Identity, Dropout, Cast to float: same bytes), Concat, Split, Slice, Transpose,
 * Expand, Tile and Gather. Shape inference resolves their parameter inputs (shape, axes, starts,
 * split sizes, repeats, indices) into the node. */
#include <string.h>

#include "import.h"
#include "kernel_math.h"

/* Identity, Dropout (without its mask) and Cast to float. */
static bool convert_identity(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    gn->view_kind = SI_VIEW_IDENTITY;
    if (!strcmp(n->op_type, "Cast")) {
        int64_t to = si_attr_int(n, "to", SI_DT_FLOAT);
        if (to != SI_DT_FLOAT) {
            si_b_unsupported(b, n, "casting image data to %s is not supported",
                             si_dtype_name((int)to));
            return false;
        }
    } else if (!strcmp(n->op_type, "Dropout") && n->n_outputs > 1 && n->outputs[1][0]) {
        si_b_unsupported(b, n, "the mask output is not supported");
        return false;
    }
    return true;
}

static bool convert_flatten(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    si_node_add_input(gn, x);
    gn->view_kind = SI_VIEW_FLATTEN;
    gn->axis = (int)si_attr_int(n, "axis", 1);
    return true;
}

/* Attaches the required parameter input 1 in slot 0; `what` names it when it is missing. */
static bool required_param(si_builder *b, const si_node_proto *n, si_gnode *gn, const char *what) {
    if (si_imp_add_param(b, n, gn, 1, &gn->pslot[0]) && gn->pslot[0] >= 0) return true;
    if (si_b_param(b, n, 1) == -2) si_b_unsupported(b, n, "%s", what);
    return false;
}

static bool convert_reshape(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    gn->view_kind = SI_VIEW_RESHAPE;
    gn->win.count_include_pad = (int)si_attr_int(n, "allowzero", 0);
    if (b->m->opset < 5) return si_imp_store_attr_ints(b, n, gn, "shape");
    return required_param(b, n, gn, "the shape input is missing");
}

/* Squeeze, Unsqueeze: axes attribute before opset 13, input after. */
static bool convert_squeeze(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    gn->view_kind = n->op_type[0] == 'S' ? SI_VIEW_SQUEEZE : SI_VIEW_UNSQUEEZE;
    if (b->m->opset >= 13) return si_imp_add_param(b, n, gn, 1, &gn->pslot[0]);
    if (!si_imp_store_attr_ints(b, n, gn, "axes")) return false;
    gn->split_from_attr = si_node_attr_ints(n, "axes") != NULL;
    return true;
}

static bool convert_concat(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)x;
    const si_attr *ax = si_node_attr(n, "axis");
    if (!ax && b->m->opset >= 4) {
        si_b_unsupported(b, n, "the axis attribute is required");
        return false;
    }
    gn->axis = ax ? (int)ax->i : 1;
    for (int i = 0; i < n->n_inputs; i++) {
        int id = si_b_input(b, n, i);
        if (id >= 0) si_node_add_input(gn, id);
    }
    return true;
}

static bool convert_split(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->axis = (int)si_attr_int(n, "axis", 0);
    si_node_add_input(gn, x);
    if (b->m->opset >= 13) return si_imp_add_param(b, n, gn, 1, &gn->pslot[0]);
    if (!si_imp_store_attr_ints(b, n, gn, "split")) return false;
    gn->split_from_attr = si_node_attr(n, "split") != NULL;
    return true;
}

/* Slice before opset 10: starts, ends, axes as attributes, kept as [starts | ends] in attr_ints
 * and the axes in split_sizes. */
static bool slice_attrs(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const si_attr *s = si_node_attr_ints(n, "starts"), *e = si_node_attr_ints(n, "ends"),
                  *a = si_node_attr_ints(n, "axes");
    if (!s || !e || s->n != e->n || s->n > SI_MAX_DIMS || (a && a->n != s->n)) {
        si_b_unsupported(b, n, "starts/ends/axes attributes are missing or inconsistent");
        return false;
    }
    gn->n_attr_ints = s->n;
    memcpy(gn->attr_ints, s->ints, sizeof(int64_t) * (size_t)s->n);
    memcpy(gn->attr_ints + SI_MAX_DIMS, e->ints, sizeof(int64_t) * (size_t)s->n);
    gn->split_from_attr = a != NULL;
    for (int i = 0; i < s->n; i++) gn->split_sizes[i] = a ? a->ints[i] : i;
    return true;
}

static bool convert_slice(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    if (b->m->opset < 10) return slice_attrs(b, n, gn);
    for (int k = 1; k <= 4; k++)
        if (!si_imp_add_param(b, n, gn, k, &gn->pslot[k - 1])) return false;
    if (gn->pslot[0] < 0 || gn->pslot[1] < 0) {
        si_b_unsupported(b, n, "starts and ends are required");
        return false;
    }
    return true;
}

static bool convert_transpose(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    const si_attr *p = si_node_attr_ints(n, "perm");
    gn->n_attr_ints = -1; /* no perm: reverse the dims */
    if (!p) return true;
    if (p->n > SI_MAX_DIMS) {
        si_b_unsupported(b, n, "perm has %d values", p->n);
        return false;
    }
    gn->n_attr_ints = p->n;
    memcpy(gn->attr_ints, p->ints, sizeof(int64_t) * (size_t)p->n);
    return true;
}

static bool convert_expand(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    return required_param(b, n, gn, "the shape input is missing");
}

static bool convert_tile(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    if (b->m->opset < 6) {
        si_b_unsupported(b, n, "Tile before opset 6 (tiles and axis inputs) is not supported");
        return false;
    }
    si_node_add_input(gn, x);
    return required_param(b, n, gn, "the repeats input is missing");
}

static bool convert_gather(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->axis = (int)si_attr_int(n, "axis", 0);
    si_node_add_input(gn, x);
    return required_param(b, n, gn, "the indices are missing");
}

/* --- shape inference ------------------------------------------------------------------------ */
/* Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred. */
static si_status infer_reshape(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *sv = si_imp_param(g, n, 0);
    int nd = sv ? (int)si_value_numel(sv) : n->n_attr_ints;
    if (nd > SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_UNSUPPORTED, "rank %d", nd);
    int64_t total = si_shape_numel(x), known = 1;
    int infer = -1;
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t v = sv ? si_value_i64(sv, d) : n->attr_ints[d];
        if (v == 0 && !n->win.count_include_pad) {
            if (d >= x->ndim)
                return si_node_error(g, n, SI_ERR_FORMAT,
                                     "0 at position %d copies no input dimension", d);
            v = x->dims[d];
        } else if (v == -1) {
            if (infer >= 0) return si_node_error(g, n, SI_ERR_FORMAT, "more than one -1");
            infer = d;
            v = 1;
        } else if (v < 0) {
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid dimension %lld", (long long)v);
        }
        y->dims[d] = v;
        known = si_mul_sat(known, v);
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            return si_node_error(g, n, SI_ERR_FORMAT, "cannot infer -1 from %lld elements",
                                 (long long)total);
        y->dims[infer] = total / known;
    } else if (known != total) {
        return si_node_error(g, n, SI_ERR_FORMAT, "target shape holds %lld elements, input %lld",
                             (long long)known, (long long)total);
    }
    return SI_OK;
}

static si_status infer_flatten(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int axis = si_imp_norm_axis(n->axis, x->ndim);
    if (axis < 0 || axis > x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range for rank %d", n->axis,
                             x->ndim);
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer = si_mul_sat(outer, x->dims[d]);
    *y = (si_shape){.ndim = 2, .dims = {outer, outer ? si_shape_numel(x) / outer : 0}};
    return SI_OK;
}

static si_status infer_squeeze(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int k = si_imp_read_axes(g, n, axes);
    uint8_t drop[SI_MAX_DIMS] = {0};
    for (int i = 0; i < k; i++) {
        int a = si_imp_norm_axis(axes[i], x->ndim);
        if (a < 0 || a >= x->ndim || x->dims[a] != 1)
            return si_node_error(g, n, SI_ERR_FORMAT, "cannot squeeze axis %lld",
                                 (long long)axes[i]);
        drop[a] = 1;
    }
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (k >= 0 ? !drop[d] : x->dims[d] != 1) y->dims[y->ndim++] = x->dims[d];
    return SI_OK;
}

static si_status infer_unsqueeze(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int k = si_imp_read_axes(g, n, axes);
    int nd = x->ndim + (k > 0 ? k : 0);
    if (k < 1 || nd > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_FORMAT, "invalid axes for Unsqueeze");
    uint8_t ins[SI_MAX_DIMS] = {0};
    for (int i = 0; i < k; i++) {
        int a = si_imp_norm_axis(axes[i], nd);
        if (a < 0 || a >= nd || ins[a])
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axes[i]);
        ins[a] = 1;
    }
    y->ndim = nd;
    for (int d = 0, s = 0; d < nd; d++) y->dims[d] = ins[d] ? 1 : x->dims[s++];
    return SI_OK;
}

static si_status infer_view(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    switch (n->view_kind) {
    case SI_VIEW_FLATTEN: return infer_flatten(g, n, x, y);
    case SI_VIEW_RESHAPE: return infer_reshape(g, n, x, y);
    case SI_VIEW_SQUEEZE: return infer_squeeze(g, n, x, y);
    case SI_VIEW_UNSQUEEZE: return infer_unsqueeze(g, n, x, y);
    default: *y = *x; return SI_OK;
    }
}

/* Inputs read through a Slice (concat_views.c) count as their parts. */
static si_status infer_concat(si_graph *g, si_gnode *n, const si_shape *x0, si_shape *y) {
    si_shape x, s;
    si_status st = si_concat_input_shape(g, n, 0, &x);
    if (st != SI_OK) return st;
    (void)x0;
    int a = si_imp_norm_axis(n->axis, x.ndim);
    if (a < 0 || a >= x.ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
    *y = x;
    y->dims[a] = 0;
    for (int i = 0; i < n->n_in; i++) {
        if ((st = si_concat_input_shape(g, n, i, &s)) != SI_OK) return st;
        bool ok = s.ndim == x.ndim;
        for (int d = 0; ok && d < s.ndim; d++) ok = d == a || s.dims[d] == x.dims[d];
        if (!ok) return si_node_error(g, n, SI_ERR_FORMAT, "input %d's shape does not match", i);
        y->dims[a] += s.dims[a];
    }
    return SI_OK;
}

/* Split sizes from the input, the attribute, or equal parts (the last one smaller, opset 18);
 * writes every output's shape. */
static si_status infer_split(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    (void)y;
    int a = si_imp_norm_axis(n->axis, x->ndim);
    if (a < 0 || a >= x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
    const si_value *sv = si_imp_param(g, n, 0);
    int64_t total = 0;
    for (int o = 0; o < n->n_out; o++) {
        int64_t sz;
        if (sv)
            sz = si_value_numel(sv) == n->n_out ? si_value_i64(sv, o) : -1;
        else if (n->split_from_attr)
            sz = n->n_attr_ints == n->n_out ? n->attr_ints[o] : -1;
        else
            sz = (x->dims[a] + n->n_out - 1) / n->n_out;
        if (!sv && !n->split_from_attr && o == n->n_out - 1) sz = x->dims[a] - total;
        if (sz < 0)
            return si_node_error(g, n, SI_ERR_FORMAT, "split sizes do not match the outputs");
        n->split_sizes[o] = sz;
        total += sz;
        si_shape *ys = &g->values[n->outs[o]].shape;
        *ys = *x;
        ys->dims[a] = sz;
    }
    if (total != x->dims[a])
        return si_node_error(g, n, SI_ERR_FORMAT, "split sizes sum to %lld, axis has %lld",
                             (long long)total, (long long)x->dims[a]);
    n->axis = a;
    return SI_OK;
}

/* One slice axis clamped as ONNX does: [0, dim] for positive steps, [-1, dim-1] for negative.
 * Returns the length. */
static int64_t slice_axis(int64_t dim, int64_t *st, int64_t en, int64_t step) {
    if (*st < 0) *st += dim;
    if (en < 0) en += dim;
    if (step > 0) {
        *st = *st < 0 ? 0 : *st > dim ? dim : *st;
        en = en < 0 ? 0 : en > dim ? dim : en;
    } else {
        *st = *st < 0 ? -1 : *st > dim - 1 ? dim - 1 : *st;
        en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
    }
    int64_t len = step > 0 ? (en - *st + step - 1) / step : (*st - en + (-step) - 1) / (-step);
    return len < 0 ? 0 : len;
}

static si_status infer_slice(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *sv = si_imp_param(g, n, 0), *ev = si_imp_param(g, n, 1),
                   *av = si_imp_param(g, n, 2), *tv = si_imp_param(g, n, 3);
    int k = sv ? (int)si_value_numel(sv) : n->n_attr_ints;
    if ((ev && si_value_numel(ev) != k) || (av && si_value_numel(av) != k) ||
        (tv && si_value_numel(tv) != k) || k > x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "starts, ends, axes and steps differ in length");
    *y = *x;
    for (int d = 0; d < x->ndim; d++) n->starts[d] = 0, n->steps[d] = 1;
    uint8_t seen[SI_MAX_DIMS] = {0};
    for (int i = 0; i < k; i++) {
        int64_t axis = av ? si_value_i64(av, i) : (sv ? i : n->split_sizes[i]);
        int a = si_imp_norm_axis(axis, x->ndim);
        if (a < 0 || a >= x->ndim || seen[a])
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axis);
        seen[a] = 1;
        int64_t st = sv ? si_value_i64(sv, i) : n->attr_ints[i];
        int64_t en = ev ? si_value_i64(ev, i) : n->attr_ints[SI_MAX_DIMS + i];
        int64_t step = tv ? si_value_i64(tv, i) : 1;
        if (step == 0) return si_node_error(g, n, SI_ERR_FORMAT, "step 0");
        y->dims[a] = slice_axis(x->dims[a], &st, en, step);
        n->starts[a] = st;
        n->steps[a] = step;
    }
    return SI_OK;
}

si_status si_transpose_perm(si_graph *g, si_gnode *n, int nd, int *perm) {
    if (n->n_attr_ints >= 0 && n->n_attr_ints != nd)
        return si_node_error(g, n, SI_ERR_FORMAT, "perm has %d values for rank %d", n->n_attr_ints,
                             nd);
    uint8_t seen[SI_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
        int p = n->n_attr_ints < 0 ? nd - 1 - d : (int)n->attr_ints[d];
        if (p < 0 || p >= nd || seen[p])
            return si_node_error(g, n, SI_ERR_FORMAT, "perm is not a permutation");
        seen[p] = 1;
        perm[d] = p;
    }
    return SI_OK;
}

static si_status infer_transpose(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_status st = si_transpose_perm(g, n, x->ndim, n->perm);
    if (st != SI_OK) return st;
    y->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) y->dims[d] = x->dims[n->perm[d]];
    return SI_OK;
}

static si_status infer_expand(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *sv = si_imp_param(g, n, 0);
    si_shape t = {.ndim = (int)si_value_numel(sv)};
    if (t.ndim > SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_UNSUPPORTED, "rank too high");
    for (int d = 0; d < t.ndim; d++) t.dims[d] = si_value_i64(sv, d);
    return si_imp_broadcast(g, n, x, &t, y);
}

si_status si_tile_shape_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                           const si_value *reps, si_shape *y) {
    if (!reps || !reps->data || reps->shape.ndim != 1 || reps->shape.dims[0] != x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "repeats must be %d integers (one per dimension of the input)",
                             x->ndim);
    *y = *x;
    for (int d = 0; d < x->ndim; d++) {
        int64_t r = si_value_i64(reps, d);
        if (r < 0)
            return si_node_error(g, n, SI_ERR_FORMAT, "repeats %lld for dimension %d is negative",
                                 (long long)r, d);
        y->dims[d] = si_mul_sat(x->dims[d], r);
        if (y->dims[d] > SI_TILE_MAX_ELEMS)
            return si_node_error(
                g, n, SI_ERR_UNSUPPORTED, "repeats %lld make dimension %d %lld long (at most %lld)",
                (long long)r, d, (long long)y->dims[d], (long long)SI_TILE_MAX_ELEMS);
    }
    int64_t numel = si_shape_numel(y);
    if (numel > SI_TILE_MAX_ELEMS)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                             "repeats make an output of %lld elements (at most %lld)",
                             (long long)numel, (long long)SI_TILE_MAX_ELEMS);
    return SI_OK;
}

/* Repeats that follow from shapes (a batch of learned probes) are read again at every batch. */
static si_status infer_tile(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_status st = si_tile_shape_of(g, n, x, si_imp_param(g, n, 0), y);
    if (st != SI_OK) return st;
    int64_t bx[SI_TILE_MAXD], by[SI_TILE_MAXD], mult[SI_TILE_MAXD];
    int src[SI_TILE_MAXD];
    if (si_tile_split(x->ndim, x->dims, y->dims, bx, by, src, mult) < 0)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                             "repeating this many of %d dims needs a broadcast of more than %d",
                             x->ndim, SI_TILE_MAXD);
    return SI_OK;
}

static si_status infer_gather(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *iv = si_imp_param(g, n, 0);
    int a = si_imp_norm_axis(n->axis, x->ndim);
    if (a < 0 || a >= x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
    if (x->ndim - 1 + iv->shape.ndim > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "result rank too high");
    for (int64_t i = 0; i < si_value_numel(iv); i++) {
        int64_t k = si_value_i64(iv, i);
        if (k < -x->dims[a] || k >= x->dims[a])
            return si_node_error(g, n, SI_ERR_FORMAT, "index %lld out of range", (long long)k);
    }
    n->axis = a;
    y->ndim = 0;
    for (int d = 0; d < a; d++) y->dims[y->ndim++] = x->dims[d];
    for (int d = 0; d < iv->shape.ndim; d++) y->dims[y->ndim++] = iv->shape.dims[d];
    for (int d = a + 1; d < x->ndim; d++) y->dims[y->ndim++] = x->dims[d];
    return SI_OK;
}

#define VIEW(name, fn)                                                                             \
    { .onnx = name, .kind = SI_OP_VIEW, .convert = fn, .infer = infer_view }

const si_import_row si_import_tensor_rows[] = {
    VIEW("Flatten", convert_flatten),
    VIEW("Reshape", convert_reshape),
    VIEW("Squeeze", convert_squeeze),
    VIEW("Unsqueeze", convert_squeeze),
    VIEW("Identity", convert_identity),
    VIEW("Dropout", convert_identity),
    VIEW("Cast", convert_identity),
    {.onnx = "Concat", .kind = SI_OP_CONCAT, .convert = convert_concat, .infer = infer_concat},
    {.onnx = "Split", .kind = SI_OP_SPLIT, .convert = convert_split, .infer = infer_split},
    {.onnx = "Slice", .kind = SI_OP_SLICE, .convert = convert_slice, .infer = infer_slice},
    {.onnx = "Transpose",
     .kind = SI_OP_TRANSPOSE,
     .convert = convert_transpose,
     .infer = infer_transpose},
    {.onnx = "Expand", .kind = SI_OP_EXPAND, .convert = convert_expand, .infer = infer_expand},
    {.onnx = "Gather", .kind = SI_OP_GATHER, .convert = convert_gather, .infer = infer_gather},
    {.onnx = "Tile", .kind = SI_OP_TILE, .convert = convert_tile, .infer = infer_tile},
    {.onnx = NULL},
};
