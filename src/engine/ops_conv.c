/* Import of the spatial ops: Conv, MaxPool, AveragePool, GlobalAveragePool, Resize (Upsample)
 * and Pad. Converters check attributes and resolve opset differences; inferrers compute the
 * output shape and the resolved window, scales or pads the backends read. */
#include <math.h>
#include <string.h>

#include "import.h"

/* Reads a 2-element spatial list attribute (kernel_shape, strides, dilations). */
static bool attr_pair(si_builder *b, const si_node_proto *n, const char *name, int *y, int *x,
                      int def) {
    const si_attr *a = si_node_attr_ints(n, name);
    *y = *x = def;
    if (!a) return true;
    if (a->n != 2) {
        si_b_unsupported(b, n, "%s has %d values; only 2-D (N, C, H, W) is supported", name, a->n);
        return false;
    }
    if (a->ints[0] < 1 || a->ints[1] < 1 || a->ints[0] > 65535 || a->ints[1] > 65535) {
        si_b_unsupported(b, n, "%s = [%lld, %lld] is out of range", name, (long long)a->ints[0],
                         (long long)a->ints[1]);
        return false;
    }
    *y = (int)a->ints[0];
    *x = (int)a->ints[1];
    return true;
}

static bool parse_pads(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const si_attr *pads = si_node_attr_ints(n, "pads");
    if (!pads) return true;
    if (pads->n != 4) {
        si_b_unsupported(b, n, "pads has %d values; only 2-D is supported", pads->n);
        return false;
    }
    for (int i = 0; i < 4; i++) { /* ONNX order: [top, left, bottom, right] */
        if (pads->ints[i] < 0 || pads->ints[i] > 65535) {
            si_b_unsupported(b, n, "pads value %lld is out of range", (long long)pads->ints[i]);
            return false;
        }
        gn->win.pads[i] = (int)pads->ints[i];
    }
    return true;
}

static bool parse_auto_pad(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const si_attr *ap = si_node_attr(n, "auto_pad");
    if (!ap || !ap->s) return true;
    if (!strcmp(ap->s, "SAME_UPPER"))
        gn->win.auto_pad = SI_PAD_SAME_UPPER;
    else if (!strcmp(ap->s, "SAME_LOWER"))
        gn->win.auto_pad = SI_PAD_SAME_LOWER;
    else if (!strcmp(ap->s, "VALID"))
        gn->win.auto_pad = SI_PAD_VALID;
    else if (strcmp(ap->s, "NOTSET") && ap->s[0]) {
        si_b_unsupported(b, n, "auto_pad '%s' is not a valid value", ap->s);
        return false;
    }
    return true;
}

/* Conv and pooling windows: kernel_shape, strides, dilations, pads, auto_pad. */
static bool parse_window(si_builder *b, const si_node_proto *n, si_gnode *gn, bool need_kernel) {
    if (!attr_pair(b, n, "strides", &gn->win.sh, &gn->win.sw, 1) ||
        !attr_pair(b, n, "dilations", &gn->win.dh, &gn->win.dw, 1))
        return false;
    if (si_node_attr(n, "kernel_shape")) {
        if (!attr_pair(b, n, "kernel_shape", &gn->win.kh, &gn->win.kw, 1)) return false;
    } else if (need_kernel) {
        si_b_unsupported(b, n, "kernel_shape is required");
        return false;
    }
    return parse_pads(b, n, gn) && parse_auto_pad(b, n, gn);
}

static bool convert_conv(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    if (!parse_window(b, n, gn, false)) return false;
    gn->win.group = (int)si_attr_int(n, "group", 1);
    int w = si_b_input(b, n, 1);
    if (w < 0) {
        si_b_unsupported(b, n, "needs inputs X and W");
        return false;
    }
    const si_value *wv = &b->g->values[w];
    if (wv->shape.ndim != 4 && wv->kind == SI_VAL_CONST) {
        si_b_unsupported(b, n,
                         "weight '%s' has rank %d; only 2-D convolution (rank-4 "
                         "weights) is supported",
                         n->inputs[1], wv->shape.ndim);
        return false;
    }
    if (gn->win.group < 1) {
        si_b_unsupported(b, n, "group = %d is invalid", gn->win.group);
        return false;
    }
    si_node_add_input(gn, x);
    si_node_add_input(gn, w);
    int bias = si_b_input(b, n, 2);
    if (bias >= 0) si_node_add_input(gn, bias);
    return true;
}

static bool convert_pool(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    bool max = gn->op == SI_OP_MAXPOOL;
    if (!parse_window(b, n, gn, true)) return false;
    gn->win.ceil_mode = (int)si_attr_int(n, "ceil_mode", 0);
    gn->win.count_include_pad = (int)si_attr_int(n, "count_include_pad", 0);
    if (max &&
        (si_attr_int(n, "storage_order", 0) != 0 || (n->n_outputs > 1 && n->outputs[1][0]))) {
        si_b_unsupported(b, n, "the Indices output is not supported");
        return false;
    }
    si_node_add_input(gn, x);
    return true;
}

/* Ops whose only input is the image data and that have no attributes to check. */
static bool convert_unary(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    (void)n;
    si_node_add_input(gn, x);
    return true;
}

/* Index of `s` in `names`, or -1. */
static int name_index(const char *s, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Resize's string attributes: mode, coordinate_transformation_mode, nearest_mode. */
static bool resize_modes(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    bool new_resize = b->m->opset >= 11 && n->op_type[0] == 'R';
    const si_attr *mode = si_node_attr(n, "mode");
    const char *m = mode && mode->s ? mode->s : "nearest";
    gn->resize.mode = !strcmp(m, "nearest")                              ? SI_RESIZE_NEAREST
                      : (!strcmp(m, "linear") || !strcmp(m, "bilinear")) ? SI_RESIZE_LINEAR
                      : !strcmp(m, "cubic")                              ? SI_RESIZE_CUBIC
                                                                         : -1;
    if (gn->resize.mode < 0) {
        si_b_unsupported(b, n, "mode '%s' is not supported", m);
        return false;
    }
    const si_attr *ct = si_node_attr(n, "coordinate_transformation_mode");
    const char *c = ct && ct->s ? ct->s : (new_resize ? "half_pixel" : "asymmetric");
    static const char *const coords[] = {"half_pixel",           "asymmetric",
                                         "align_corners",        "pytorch_half_pixel",
                                         "tf_half_pixel_for_nn", "half_pixel_symmetric"};
    gn->resize.coord = name_index(c, coords, 6);
    if (gn->resize.coord < 0) {
        si_b_unsupported(b, n, "coordinate_transformation_mode '%s' is not supported", c);
        return false;
    }
    const si_attr *nm = si_node_attr(n, "nearest_mode");
    const char *nmode = nm && nm->s ? nm->s : (new_resize ? "round_prefer_floor" : "floor");
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"};
    gn->resize.nearest = name_index(nmode, nearest, 4);
    if (gn->resize.nearest < 0) {
        si_b_unsupported(b, n, "nearest_mode '%s' is not supported", nmode);
        return false;
    }
    return true;
}

static bool convert_resize(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    bool upsample = n->op_type[0] == 'U';
    int64_t opset = b->m->opset;
    si_node_add_input(gn, x);
    if (!resize_modes(b, n, gn)) return false;
    gn->resize.cubic_a = si_attr_float(n, "cubic_coeff_a", -0.75f);
    gn->resize.exclude_outside = (int)si_attr_int(n, "exclude_outside", 0);
    const si_attr *kar = si_node_attr(n, "keep_aspect_ratio_policy");
    if (si_attr_int(n, "antialias", 0) || si_node_attr_ints(n, "axes") ||
        (kar && strcmp(kar->s, "stretch"))) {
        si_b_unsupported(b, n, "antialias, axes and keep_aspect_ratio_policy are not supported");
        return false;
    }
    if (upsample && opset < 9) {
        const si_attr *sc = si_node_attr(n, "scales");
        if (!sc || sc->type != SI_ATTR_FLOATS || sc->n != 4) {
            si_b_unsupported(b, n, "scales attribute of 4 values is required");
            return false;
        }
        gn->scales[0] = sc->floats[2];
        gn->scales[1] = sc->floats[3];
        gn->split_from_attr = true;
        return true;
    }
    if (upsample || opset < 11) /* (X, scales) */
        return si_imp_add_param(b, n, gn, 1, &gn->pslot[1]);
    /* (X, roi, scales, sizes): roi only matters for tf_crop_and_resize, refused above */
    return si_imp_add_param(b, n, gn, 2, &gn->pslot[1]) &&
           si_imp_add_param(b, n, gn, 3, &gn->pslot[2]);
}

static bool convert_pad(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    const si_attr *md = si_node_attr(n, "mode");
    const char *m = md && md->s ? md->s : "constant";
    gn->pad_mode = !strcmp(m, "constant")  ? SI_PAD_CONSTANT
                   : !strcmp(m, "reflect") ? SI_PAD_REFLECT
                   : !strcmp(m, "edge")    ? SI_PAD_EDGE
                   : !strcmp(m, "wrap")    ? SI_PAD_WRAP
                                           : -1;
    if (gn->pad_mode < 0) {
        si_b_unsupported(b, n, "mode '%s' is not supported", m);
        return false;
    }
    if (b->m->opset < 11) {
        if (!si_imp_store_attr_ints(b, n, gn, "pads")) return false;
        gn->pad_value = si_attr_float(n, "value", 0.f);
        gn->split_from_attr = true;
        return true;
    }
    for (int k = 1; k <= 3; k++)
        if (!si_imp_add_param(b, n, gn, k, &gn->pslot[k - 1])) return false;
    if (gn->pslot[0] < 0) {
        si_b_unsupported(b, n, "the pads input is required");
        return false;
    }
    return true;
}

/* --- shape inference ------------------------------------------------------------------------ */
/* Output size and begin/end pads of one spatial axis. */
static bool window_axis(int in, int k, int s, int d, int auto_pad, int ceil_mode, int *pb, int *pe,
                        int *out) {
    int ek = (k - 1) * d + 1;
    if (auto_pad == SI_PAD_SAME_UPPER || auto_pad == SI_PAD_SAME_LOWER) {
        int o = (in + s - 1) / s;
        int total = (o - 1) * s + ek - in;
        if (total < 0) total = 0;
        *pb = auto_pad == SI_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *pe = total - *pb;
        *out = o;
        return true;
    }
    if (auto_pad == SI_PAD_VALID) *pb = *pe = 0;
    int span = in + *pb + *pe - ek;
    if (span < 0) return false;
    int o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    /* the last window must start inside the input or its begin padding (PyTorch, onnxruntime) */
    if (ceil_mode && (o - 1) * s >= in + *pb) o--;
    *out = o;
    return true;
}

/* Conv's kernel size and output channels from its weight, checked against the input. */
static si_status conv_weight(si_graph *g, si_gnode *n, const si_shape *x, int *kh, int *kw,
                             int64_t *m) {
    const si_shape *w = &g->values[n->in[1]].shape;
    if (w->ndim != 4)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "weight has rank %d, expected 4", w->ndim);
    if (*kh && (*kh != w->dims[2] || *kw != w->dims[3]))
        return si_node_error(g, n, SI_ERR_FORMAT, "kernel_shape disagrees with the weight");
    *kh = (int)w->dims[2];
    *kw = (int)w->dims[3];
    *m = w->dims[0];
    if (x->dims[1] % n->win.group || *m % n->win.group || w->dims[1] * n->win.group != x->dims[1])
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "input has %lld channels, weight expects %lld x %d groups",
                             (long long)x->dims[1], (long long)w->dims[1], n->win.group);
    int nb = n->n_in - (n->residual >= 0 ? 1 : 0);
    if (nb > 2 && si_shape_numel(&g->values[n->in[2]].shape) != *m)
        return si_node_error(g, n, SI_ERR_FORMAT, "bias has %lld values for %lld channels",
                             (long long)si_shape_numel(&g->values[n->in[2]].shape), (long long)*m);
    return SI_OK;
}

/* Stores the resolved window as the backends read it: si_conv_shape or si_pool_shape. */
static void store_window(si_gnode *n, const si_shape *x, int64_t m, int kh, int kw,
                         const int pad[4], int oh, int ow) {
    if (n->op == SI_OP_CONV)
        n->conv = (si_conv_shape){.n = (int)x->dims[0],
                                  .c = (int)x->dims[1],
                                  .h = (int)x->dims[2],
                                  .w = (int)x->dims[3],
                                  .m = (int)m,
                                  .kh = kh,
                                  .kw = kw,
                                  .group = n->win.group,
                                  .sh = n->win.sh,
                                  .sw = n->win.sw,
                                  .dh = n->win.dh,
                                  .dw = n->win.dw,
                                  .pt = pad[0],
                                  .pl = pad[1],
                                  .pb = pad[2],
                                  .pr = pad[3],
                                  .oh = oh,
                                  .ow = ow};
    else
        n->pool = (si_pool_shape){.n = (int)x->dims[0],
                                  .c = (int)x->dims[1],
                                  .h = (int)x->dims[2],
                                  .w = (int)x->dims[3],
                                  .kh = kh,
                                  .kw = kw,
                                  .sh = n->win.sh,
                                  .sw = n->win.sw,
                                  .dh = n->win.dh,
                                  .dw = n->win.dw,
                                  .pt = pad[0],
                                  .pl = pad[1],
                                  .pb = pad[2],
                                  .pr = pad[3],
                                  .oh = oh,
                                  .ow = ow};
}

static si_status infer_window(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim != 4)
        return si_node_error(g, n, SI_ERR_FORMAT, "input has rank %d, expected 4 (N, C, H, W)",
                             x->ndim);
    int kh = n->win.kh, kw = n->win.kw;
    int64_t m = x->dims[1];
    if (n->op == SI_OP_CONV) {
        si_status st = conv_weight(g, n, x, &kh, &kw, &m);
        if (st != SI_OK) return st;
    }
    int pad[4] = {n->win.pads[0], n->win.pads[1], n->win.pads[2], n->win.pads[3]}; /* t l b r */
    int oh, ow;
    if (!window_axis((int)x->dims[2], kh, n->win.sh, n->win.dh, n->win.auto_pad, n->win.ceil_mode,
                     &pad[0], &pad[2], &oh) ||
        !window_axis((int)x->dims[3], kw, n->win.sw, n->win.dw, n->win.auto_pad, n->win.ceil_mode,
                     &pad[1], &pad[3], &ow) ||
        oh < 1 || ow < 1)
        return si_node_error(g, n, SI_ERR_FORMAT, "window %dx%d does not fit the input %lldx%lld",
                             kh, kw, (long long)x->dims[2], (long long)x->dims[3]);
    store_window(n, x, m, kh, kw, pad, oh, ow);
    *y = (si_shape){.ndim = 4, .dims = {x->dims[0], m, oh, ow}};
    if (n->residual >= 0) {
        const si_shape *r = &g->values[n->residual].shape;
        bool same = r->ndim == 4;
        for (int d = 0; same && d < 4; d++) same = r->dims[d] == y->dims[d];
        if (!same)
            return si_node_error(g, n, SI_ERR_FORMAT, "residual shape differs from the output");
    }
    return SI_OK;
}

static si_status infer_global_pool(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim < 3)
        return si_node_error(g, n, SI_ERR_FORMAT, "input has rank %d, expected >= 3", x->ndim);
    *y = *x;
    for (int d = 2; d < y->ndim; d++) y->dims[d] = 1;
    return SI_OK;
}

/* Output H and W from `sizes`, which must keep N and C. */
static si_status resize_by_sizes(si_graph *g, si_gnode *n, const si_value *szv, const si_shape *x,
                                 si_shape *y) {
    if (si_value_numel(szv) != 4)
        return si_node_error(g, n, SI_ERR_FORMAT, "sizes has %lld values",
                             (long long)si_value_numel(szv));
    if (si_value_i64(szv, 0) != x->dims[0] || si_value_i64(szv, 1) != x->dims[1])
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "resizing N or C is not supported");
    y->dims[2] = si_value_i64(szv, 2);
    y->dims[3] = si_value_i64(szv, 3);
    n->scales[0] = (float)y->dims[2] / (float)x->dims[2];
    n->scales[1] = (float)y->dims[3] / (float)x->dims[3];
    return SI_OK;
}

static si_status infer_resize(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim != 4)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "only 4-D (N, C, H, W) inputs");
    const si_value *scv = si_imp_param(g, n, 1), *szv = si_imp_param(g, n, 2);
    *y = *x;
    if (szv && si_value_numel(szv) > 0) return resize_by_sizes(g, n, szv, x, y);
    if (scv) {
        if (si_value_numel(scv) != 4)
            return si_node_error(g, n, SI_ERR_FORMAT, "scales has %lld values",
                                 (long long)si_value_numel(scv));
        if (si_value_f64(scv, 0) != 1.0 || si_value_f64(scv, 1) != 1.0)
            return si_node_error(g, n, SI_ERR_UNSUPPORTED, "scaling N or C is not supported");
        n->scales[0] = (float)si_value_f64(scv, 2);
        n->scales[1] = (float)si_value_f64(scv, 3);
    } else if (!n->split_from_attr) {
        return si_node_error(g, n, SI_ERR_FORMAT, "neither scales nor sizes given");
    }
    if (!(n->scales[0] > 0) || !(n->scales[1] > 0))
        return si_node_error(g, n, SI_ERR_FORMAT, "scales must be positive");
    y->dims[2] = si_f2i_sat(floor((double)x->dims[2] * n->scales[0]));
    y->dims[3] = si_f2i_sat(floor((double)x->dims[3] * n->scales[1]));
    return SI_OK;
}

static si_status infer_pad(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int nd = x->ndim;
    const si_value *pv = si_imp_param(g, n, 0), *cv = si_imp_param(g, n, 1),
                   *av = si_imp_param(g, n, 2);
    int64_t pads[2 * SI_MAX_DIMS] = {0};
    int k = pv ? (int)si_value_numel(pv) : n->n_attr_ints;
    int naxes = av ? (int)si_value_numel(av) : nd;
    if (k != 2 * naxes || naxes > nd)
        return si_node_error(g, n, SI_ERR_FORMAT, "pads has %d values for %d axes", k, naxes);
    for (int i = 0; i < naxes; i++) {
        int a = av ? si_imp_norm_axis(si_value_i64(av, i), nd) : i;
        if (a < 0 || a >= nd) return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis");
        pads[a] = pv ? si_value_i64(pv, i) : n->attr_ints[i];
        pads[nd + a] = pv ? si_value_i64(pv, naxes + i) : n->attr_ints[naxes + i];
    }
    if (cv && si_value_numel(cv) > 0) n->pad_value = (float)si_value_f64(cv, 0);
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        y->dims[d] = x->dims[d] + pads[d] + pads[nd + d];
        if (y->dims[d] < 0) return si_node_error(g, n, SI_ERR_FORMAT, "pads crop below zero");
        if (n->pad_mode == SI_PAD_REFLECT && (pads[d] >= x->dims[d] || pads[nd + d] >= x->dims[d]))
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "reflect pads must be smaller than the dimension");
        n->pads[d] = pads[d];
        n->pads[nd + d] = pads[nd + d];
    }
    return SI_OK;
}

const si_import_row si_import_conv_rows[] = {
    {.onnx = "Conv", .kind = SI_OP_CONV, .convert = convert_conv, .infer = infer_window},
    {.onnx = "MaxPool", .kind = SI_OP_MAXPOOL, .convert = convert_pool, .infer = infer_window},
    {.onnx = "AveragePool", .kind = SI_OP_AVGPOOL, .convert = convert_pool, .infer = infer_window},
    {.onnx = "GlobalAveragePool",
     .kind = SI_OP_GLOBAL_AVGPOOL,
     .convert = convert_unary,
     .infer = infer_global_pool},
    {.onnx = "Resize", .kind = SI_OP_RESIZE, .convert = convert_resize, .infer = infer_resize},
    {.onnx = "Upsample", .kind = SI_OP_RESIZE, .convert = convert_resize, .infer = infer_resize},
    {.onnx = "Pad", .kind = SI_OP_PAD, .convert = convert_pad, .infer = infer_pad},
    {.onnx = NULL},
};
