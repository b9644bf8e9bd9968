/* Device ops: conversion of ONNX nodes (attributes checked, opset differences resolved) and
 * shape inference, which also resolves parameters given as CONST/HOST inputs (Reshape's shape,
 * Slice's starts, Resize's scales, Pad's pads, ...) into the node for the backends. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

enum { VIEW_IDENTITY = 0, VIEW_FLATTEN, VIEW_RESHAPE, VIEW_SQUEEZE, VIEW_UNSQUEEZE };

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
    const si_attr *pads = si_node_attr_ints(n, "pads");
    if (pads) {
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
    }
    const si_attr *ap = si_node_attr(n, "auto_pad");
    if (ap && ap->s) {
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
    }
    return true;
}

static const si_value *const_in(si_builder *b, const si_node_proto *n, int i) {
    int id = si_b_input(b, n, i);
    return id >= 0 && b->g->values[id].kind == SI_VAL_CONST ? &b->g->values[id] : NULL;
}

/* A float scalar parameter that must be constant (Clip's bounds). */
static bool const_scalar(si_builder *b, const si_node_proto *n, int i, float *out) {
    if (i >= n->n_inputs || !n->inputs[i][0]) return true;
    const si_value *v = const_in(b, n, i);
    if (!v || si_shape_numel(&v->shape) != 1) {
        si_b_unsupported(b, n, "input %d ('%s') must be a constant scalar", i, n->inputs[i]);
        return false;
    }
    *out = (float)si_value_f64(v, 0);
    return true;
}

/* Attaches parameter input i if present (CONST or HOST). Returns false when it is computed
 * from image data (recorded). */
static bool add_param(si_builder *b, const si_node_proto *n, si_gnode *gn, int i, int *slot) {
    *slot = -1;
    int id = si_b_param(b, n, i);
    if (id == -1) return false;
    if (id >= 0) {
        *slot = gn->n_in;
        si_node_add_input(gn, id);
    }
    return true;
}

static bool store_attr_ints(si_builder *b, const si_node_proto *n, si_gnode *gn, const char *name) {
    const si_attr *a = si_node_attr_ints(n, name);
    if (!a) return true;
    if (a->n > 2 * SI_MAX_DIMS) {
        si_b_unsupported(b, n, "attribute %s has %d values", name, a->n);
        return false;
    }
    gn->n_attr_ints = a->n;
    memcpy(gn->attr_ints, a->ints, sizeof(int64_t) * (size_t)a->n);
    return true;
}

#define PSLOT(gn, k) ((gn)->pslot[k])

bool si_convert_device_op(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const char *op = n->op_type;
    int64_t opset = b->m->opset;
    int x = si_b_input(b, n, 0);
    for (int k = 0; k < 4; k++) PSLOT(gn, k) = -1;
    if (x < 0 && strcmp(op, "Constant")) {
        si_b_unsupported(b, n, "the first input is missing");
        return false;
    }
    if (!strcmp(op, "Conv")) {
        gn->op = SI_OP_CONV;
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
    } else if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool")) {
        bool max = op[0] == 'M';
        gn->op = max ? SI_OP_MAXPOOL : SI_OP_AVGPOOL;
        if (!parse_window(b, n, gn, true)) return false;
        gn->win.ceil_mode = (int)si_attr_int(n, "ceil_mode", 0);
        gn->win.count_include_pad = (int)si_attr_int(n, "count_include_pad", 0);
        if (max &&
            (si_attr_int(n, "storage_order", 0) != 0 || (n->n_outputs > 1 && n->outputs[1][0]))) {
            si_b_unsupported(b, n, "the Indices output is not supported");
            return false;
        }
        si_node_add_input(gn, x);
    } else if (!strcmp(op, "GlobalAveragePool")) {
        gn->op = SI_OP_GLOBAL_AVGPOOL;
        si_node_add_input(gn, x);
    } else if (!strcmp(op, "GlobalMaxPool")) {
        gn->op = SI_OP_REDUCE;
        gn->reduce_op = SI_REDUCE_MAX;
        gn->keepdims = 1;
        gn->axis = -2; /* all spatial dims, resolved at infer */
        si_node_add_input(gn, x);
    } else if (!strcmp(op, "Gemm")) {
        gn->op = SI_OP_GEMM;
        gn->trans_a = (int)si_attr_int(n, "transA", 0);
        gn->trans_b = (int)si_attr_int(n, "transB", 0);
        gn->alpha = si_attr_float(n, "alpha", 1.f);
        gn->beta = si_attr_float(n, "beta", 1.f);
        int bb = si_b_input(b, n, 1), c = si_b_input(b, n, 2);
        if (bb < 0) {
            si_b_unsupported(b, n, "needs inputs A and B");
            return false;
        }
        si_node_add_input(gn, x);
        si_node_add_input(gn, bb);
        if (c >= 0) si_node_add_input(gn, c);
    } else if (!strcmp(op, "MatMul")) {
        gn->op = SI_OP_MATMUL;
        int bb = si_b_input(b, n, 1);
        if (bb < 0) {
            si_b_unsupported(b, n, "needs inputs A and B");
            return false;
        }
        si_node_add_input(gn, x);
        si_node_add_input(gn, bb);
    } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") ||
               !strcmp(op, "Div")) {
        if (opset < 7 && si_attr_int(n, "broadcast", 0) && si_node_attr(n, "axis")) {
            si_b_unsupported(b, n, "legacy broadcast with an axis attribute (opset < 7)");
            return false;
        }
        gn->op = SI_OP_BINARY;
        gn->binop = op[0] == 'A'   ? SI_BIN_ADD
                    : op[0] == 'S' ? SI_BIN_SUB
                    : op[0] == 'M' ? SI_BIN_MUL
                                   : SI_BIN_DIV;
        int y = si_b_input(b, n, 1);
        if (y < 0) {
            si_b_unsupported(b, n, "needs two inputs");
            return false;
        }
        si_node_add_input(gn, x);
        si_node_add_input(gn, y);
    } else if (!strcmp(op, "Relu") || !strcmp(op, "Sigmoid") || !strcmp(op, "HardSigmoid") ||
               !strcmp(op, "HardSwish") || !strcmp(op, "LeakyRelu") || !strcmp(op, "Clip")) {
        gn->op = SI_OP_ACTIVATION;
        si_node_add_input(gn, x);
        if (!strcmp(op, "Relu"))
            gn->act.kind = SI_ACT_RELU;
        else if (!strcmp(op, "Sigmoid"))
            gn->act.kind = SI_ACT_SIGMOID;
        else if (!strcmp(op, "HardSwish"))
            gn->act.kind = SI_ACT_HARDSWISH;
        else if (!strcmp(op, "HardSigmoid")) {
            gn->act.kind = SI_ACT_HARDSIGMOID;
            gn->act.alpha = si_attr_float(n, "alpha", 0.2f);
            gn->act.beta = si_attr_float(n, "beta", 0.5f);
        } else if (!strcmp(op, "LeakyRelu")) {
            gn->act.kind = SI_ACT_LEAKYRELU;
            gn->act.alpha = si_attr_float(n, "alpha", 0.01f);
        } else {
            gn->act.kind = SI_ACT_CLIP;
            if (opset < 11) {
                gn->act.lo = si_attr_float(n, "min", -FLT_MAX);
                gn->act.hi = si_attr_float(n, "max", FLT_MAX);
            } else {
                gn->act.lo = -INFINITY;
                gn->act.hi = INFINITY;
                if (!const_scalar(b, n, 1, &gn->act.lo) || !const_scalar(b, n, 2, &gn->act.hi))
                    return false;
            }
        }
    } else if (!strcmp(op, "BatchNormalization")) {
        if (si_attr_int(n, "training_mode", 0) != 0) {
            si_b_unsupported(b, n, "training_mode = 1 (only inference is supported)");
            return false;
        }
        for (int i = 1; i < n->n_outputs; i++)
            if (n->outputs[i][0]) {
                si_b_unsupported(b, n, "training outputs (running statistics) are not supported");
                return false;
            }
        if (opset < 9 && si_attr_int(n, "spatial", 1) == 0) {
            si_b_unsupported(b, n, "spatial = 0 is not supported");
            return false;
        }
        const si_value *p[4];
        for (int i = 0; i < 4; i++)
            if (!(p[i] = const_in(b, n, i + 1)) || p[i]->dtype != SI_DT_FLOAT) {
                si_b_unsupported(b, n, "scale, B, mean and var must be float constants");
                return false;
            }
        int64_t c = si_shape_numel(&p[0]->shape);
        for (int i = 1; i < 4; i++)
            if (si_shape_numel(&p[i]->shape) != c) {
                si_b_unsupported(b, n, "scale, B, mean and var differ in length");
                return false;
            }
        /* statistics folded into scale and shift now; the Conv folding pass reuses them */
        float eps = si_attr_float(n, "epsilon", 1e-5f);
        float *scale = si_xmalloc(sizeof(float) * (size_t)(c ? c : 1));
        float *shift = si_xmalloc(sizeof(float) * (size_t)(c ? c : 1));
        const float *gam = p[0]->data, *bet = p[1]->data, *mean = p[2]->data, *var = p[3]->data;
        for (int64_t i = 0; i < c; i++) {
            scale[i] = (float)((double)gam[i] / sqrt((double)var[i] + (double)eps));
            shift[i] = (float)((double)bet[i] - (double)mean[i] * scale[i]);
        }
        char nm[600];
        snprintf(nm, sizeof nm, "%s/scale", n->name);
        int sid = si_b_add_value(b, nm);
        snprintf(nm, sizeof nm, "%s/shift", n->name);
        int hid = si_b_add_value(b, nm);
        si_value *sv = &b->g->values[sid], *hv = &b->g->values[hid];
        sv->kind = hv->kind = SI_VAL_CONST;
        sv->shape = hv->shape = (si_shape){1, {c}};
        sv->data = scale;
        hv->data = shift;
        gn->op = SI_OP_AFFINE;
        si_node_add_input(gn, x);
        si_node_add_input(gn, sid);
        si_node_add_input(gn, hid);
    } else if (!strcmp(op, "Flatten") || !strcmp(op, "Reshape") || !strcmp(op, "Squeeze") ||
               !strcmp(op, "Unsqueeze") || !strcmp(op, "Identity") || !strcmp(op, "Dropout") ||
               !strcmp(op, "Cast")) {
        gn->op = SI_OP_VIEW;
        si_node_add_input(gn, x);
        if (!strcmp(op, "Cast")) {
            int64_t to = si_attr_int(n, "to", SI_DT_FLOAT);
            if (to != SI_DT_FLOAT) {
                si_b_unsupported(b, n, "casting image data to %s is not supported",
                                 si_dtype_name((int)to));
                return false;
            }
        } else if (!strcmp(op, "Dropout")) {
            if (n->n_outputs > 1 && n->outputs[1][0]) {
                si_b_unsupported(b, n, "the mask output is not supported");
                return false;
            }
        } else if (!strcmp(op, "Identity")) {
            gn->view_kind = VIEW_IDENTITY;
        } else if (!strcmp(op, "Flatten")) {
            gn->view_kind = VIEW_FLATTEN;
            gn->axis = (int)si_attr_int(n, "axis", 1);
        } else if (!strcmp(op, "Reshape")) {
            gn->view_kind = VIEW_RESHAPE;
            gn->win.count_include_pad = (int)si_attr_int(n, "allowzero", 0);
            if (opset < 5) {
                if (!store_attr_ints(b, n, gn, "shape")) return false;
            } else if (!add_param(b, n, gn, 1, &PSLOT(gn, 0)) || PSLOT(gn, 0) < 0) {
                if (PSLOT(gn, 0) < 0 && si_b_param(b, n, 1) == -2)
                    si_b_unsupported(b, n, "the shape input is missing");
                return false;
            }
        } else { /* Squeeze, Unsqueeze: axes attribute before opset 13, input after */
            gn->view_kind = op[0] == 'S' ? VIEW_SQUEEZE : VIEW_UNSQUEEZE;
            if (opset < 13) {
                if (!store_attr_ints(b, n, gn, "axes")) return false;
                gn->split_from_attr = si_node_attr_ints(n, "axes") != NULL;
            } else if (!add_param(b, n, gn, 1, &PSLOT(gn, 0))) {
                return false;
            }
        }
    } else if (!strcmp(op, "Concat")) {
        gn->op = SI_OP_CONCAT;
        const si_attr *ax = si_node_attr(n, "axis");
        if (!ax && opset >= 4) {
            si_b_unsupported(b, n, "the axis attribute is required");
            return false;
        }
        gn->axis = ax ? (int)ax->i : 1;
        for (int i = 0; i < n->n_inputs; i++) {
            int id = si_b_input(b, n, i);
            if (id >= 0) si_node_add_input(gn, id);
        }
    } else if (!strcmp(op, "Split")) {
        gn->op = SI_OP_SPLIT;
        gn->axis = (int)si_attr_int(n, "axis", 0);
        si_node_add_input(gn, x);
        if (opset < 13) {
            if (!store_attr_ints(b, n, gn, "split")) return false;
            gn->split_from_attr = si_node_attr(n, "split") != NULL;
        } else if (!add_param(b, n, gn, 1, &PSLOT(gn, 0))) {
            return false;
        }
    } else if (!strcmp(op, "Slice")) {
        gn->op = SI_OP_SLICE;
        si_node_add_input(gn, x);
        if (opset < 10) {
            /* starts, ends, axes as attributes: kept as [starts | ends | axes] */
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
        } else {
            for (int k = 1; k <= 4; k++)
                if (!add_param(b, n, gn, k, &PSLOT(gn, k - 1))) return false;
            if (PSLOT(gn, 0) < 0 || PSLOT(gn, 1) < 0) {
                si_b_unsupported(b, n, "starts and ends are required");
                return false;
            }
        }
    } else if (!strcmp(op, "Transpose")) {
        gn->op = SI_OP_TRANSPOSE;
        si_node_add_input(gn, x);
        const si_attr *p = si_node_attr_ints(n, "perm");
        gn->n_attr_ints = -1; /* no perm: reverse the dims */
        if (p) {
            if (p->n > SI_MAX_DIMS) {
                si_b_unsupported(b, n, "perm has %d values", p->n);
                return false;
            }
            gn->n_attr_ints = p->n;
            memcpy(gn->attr_ints, p->ints, sizeof(int64_t) * (size_t)p->n);
        }
    } else if (!strcmp(op, "Expand")) {
        gn->op = SI_OP_EXPAND;
        si_node_add_input(gn, x);
        if (!add_param(b, n, gn, 1, &PSLOT(gn, 0)) || PSLOT(gn, 0) < 0) {
            if (si_b_param(b, n, 1) == -2) si_b_unsupported(b, n, "the shape input is missing");
            return false;
        }
    } else if (!strcmp(op, "Gather")) {
        gn->op = SI_OP_GATHER;
        gn->axis = (int)si_attr_int(n, "axis", 0);
        si_node_add_input(gn, x);
        if (!add_param(b, n, gn, 1, &PSLOT(gn, 0)) || PSLOT(gn, 0) < 0) {
            if (si_b_param(b, n, 1) == -2) si_b_unsupported(b, n, "the indices are missing");
            return false;
        }
    } else if (!strcmp(op, "Resize") || !strcmp(op, "Upsample")) {
        gn->op = SI_OP_RESIZE;
        si_node_add_input(gn, x);
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
        gn->resize.cubic_a = si_attr_float(n, "cubic_coeff_a", -0.75f);
        gn->resize.exclude_outside = (int)si_attr_int(n, "exclude_outside", 0);
        const si_attr *ct = si_node_attr(n, "coordinate_transformation_mode");
        const char *c =
            ct && ct->s ? ct->s : (opset >= 11 && op[0] == 'R' ? "half_pixel" : "asymmetric");
        static const char *coords[] = {"half_pixel",           "asymmetric",
                                       "align_corners",        "pytorch_half_pixel",
                                       "tf_half_pixel_for_nn", "half_pixel_symmetric"};
        gn->resize.coord = -1;
        for (int i = 0; i < 6; i++)
            if (!strcmp(c, coords[i])) gn->resize.coord = i;
        if (gn->resize.coord < 0) {
            si_b_unsupported(b, n, "coordinate_transformation_mode '%s' is not supported", c);
            return false;
        }
        const si_attr *nm = si_node_attr(n, "nearest_mode");
        const char *nmode =
            nm && nm->s ? nm->s : (opset >= 11 && op[0] == 'R' ? "round_prefer_floor" : "floor");
        static const char *nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        gn->resize.nearest = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(nmode, nearest[i])) gn->resize.nearest = i;
        if (gn->resize.nearest < 0) {
            si_b_unsupported(b, n, "nearest_mode '%s' is not supported", nmode);
            return false;
        }
        if (si_attr_int(n, "antialias", 0) || si_node_attr_ints(n, "axes") ||
            (si_node_attr(n, "keep_aspect_ratio_policy") &&
             strcmp(si_node_attr(n, "keep_aspect_ratio_policy")->s, "stretch"))) {
            si_b_unsupported(b, n,
                             "antialias, axes and keep_aspect_ratio_policy are not "
                             "supported");
            return false;
        }
        if (op[0] == 'U' && opset < 9) {
            const si_attr *sc = si_node_attr(n, "scales");
            if (!sc || sc->type != SI_ATTR_FLOATS || sc->n != 4) {
                si_b_unsupported(b, n, "scales attribute of 4 values is required");
                return false;
            }
            gn->scales[0] = sc->floats[2];
            gn->scales[1] = sc->floats[3];
            gn->split_from_attr = true;
        } else if (op[0] == 'U' || opset < 11) { /* (X, scales) */
            if (!add_param(b, n, gn, 1, &PSLOT(gn, 1))) return false;
        } else { /* (X, roi, scales, sizes) */
            if (!add_param(b, n, gn, 2, &PSLOT(gn, 1)) || !add_param(b, n, gn, 3, &PSLOT(gn, 2)))
                return false;
            if (gn->resize.mode != SI_RESIZE_NEAREST || gn->resize.coord != 5) {
                /* roi only matters for tf_crop_and_resize, which is refused above */
            }
        }
    } else if (!strcmp(op, "Softmax")) {
        gn->op = SI_OP_SOFTMAX;
        gn->legacy_axis = opset < 13;
        gn->axis = (int)si_attr_int(n, "axis", opset < 13 ? 1 : -1);
        si_node_add_input(gn, x);
    } else if (!strcmp(op, "Pad")) {
        gn->op = SI_OP_PAD;
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
        if (opset < 11) {
            if (!store_attr_ints(b, n, gn, "pads")) return false;
            gn->pad_value = si_attr_float(n, "value", 0.f);
            gn->split_from_attr = true;
        } else {
            for (int k = 1; k <= 3; k++)
                if (!add_param(b, n, gn, k, &PSLOT(gn, k - 1))) return false;
            if (PSLOT(gn, 0) < 0) {
                si_b_unsupported(b, n, "the pads input is required");
                return false;
            }
        }
    } else if (!strcmp(op, "ReduceMean") || !strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMax") ||
               !strcmp(op, "ReduceMin")) {
        gn->op = SI_OP_REDUCE;
        gn->reduce_op = !strcmp(op, "ReduceMean")  ? SI_REDUCE_MEAN
                        : !strcmp(op, "ReduceSum") ? SI_REDUCE_SUM
                        : !strcmp(op, "ReduceMax") ? SI_REDUCE_MAX
                                                   : SI_REDUCE_MIN;
        gn->keepdims = (int)si_attr_int(n, "keepdims", 1);
        gn->noop_with_empty_axes = (int)si_attr_int(n, "noop_with_empty_axes", 0);
        si_node_add_input(gn, x);
        bool axes_input = gn->reduce_op == SI_REDUCE_SUM ? opset >= 13 : opset >= 18;
        if (!axes_input) {
            if (!store_attr_ints(b, n, gn, "axes")) return false;
            gn->split_from_attr = si_node_attr_ints(n, "axes") != NULL;
        } else if (!add_param(b, n, gn, 1, &PSLOT(gn, 0))) {
            return false;
        }
    } else {
        si_b_unsupported(b, n, "operator not supported");
        return false;
    }
    for (int i = 0; i < gn->n_in; i++) {
        const si_value *iv = &b->g->values[gn->in[i]];
        bool is_param = false;
        for (int k = 0; k < 4; k++)
            if (PSLOT(gn, k) == i) is_param = true;
        if (!is_param && iv->dtype != SI_DT_FLOAT && gn->op != SI_OP_AFFINE) {
            si_b_unsupported(b, n, "input '%s' has type %s; only float tensors are supported",
                             iv->name, si_dtype_name(iv->dtype));
            return false;
        }
    }
    return true;
}

/* --- shape inference ---------------------------------------------------------------------------
 */
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

static int norm_axis(int64_t axis, int ndim) {
    return (int)(axis < 0 ? axis + ndim : axis);
}

/* Parameter slot k's value, or NULL. */
static const si_value *param(const si_graph *g, const si_gnode *n, int k) {
    int slot = n->pslot[k];
    return slot >= 0 ? &g->values[n->in[slot]] : NULL;
}

static si_status infer_window(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim != 4)
        return si_node_error(g, n, SI_ERR_FORMAT, "input has rank %d, expected 4 (N, C, H, W)",
                             x->ndim);
    int kh = n->win.kh, kw = n->win.kw;
    int64_t m = x->dims[1];
    if (n->op == SI_OP_CONV) {
        const si_shape *w = &g->values[n->in[1]].shape;
        if (w->ndim != 4)
            return si_node_error(g, n, SI_ERR_UNSUPPORTED, "weight has rank %d, expected 4",
                                 w->ndim);
        if (kh && (kh != w->dims[2] || kw != w->dims[3]))
            return si_node_error(g, n, SI_ERR_FORMAT, "kernel_shape disagrees with the weight");
        kh = (int)w->dims[2];
        kw = (int)w->dims[3];
        m = w->dims[0];
        if (x->dims[1] % n->win.group || m % n->win.group ||
            w->dims[1] * n->win.group != x->dims[1])
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "input has %lld channels, weight expects %lld x %d groups",
                                 (long long)x->dims[1], (long long)w->dims[1], n->win.group);
        int nb = n->n_in - (n->residual >= 0 ? 1 : 0);
        if (nb > 2 && si_shape_numel(&g->values[n->in[2]].shape) != m)
            return si_node_error(g, n, SI_ERR_FORMAT, "bias has %lld values for %lld channels",
                                 (long long)si_shape_numel(&g->values[n->in[2]].shape),
                                 (long long)m);
    }
    int pt = n->win.pads[0], pl = n->win.pads[1], pb = n->win.pads[2], pr = n->win.pads[3];
    int oh, ow;
    if (!window_axis((int)x->dims[2], kh, n->win.sh, n->win.dh, n->win.auto_pad, n->win.ceil_mode,
                     &pt, &pb, &oh) ||
        !window_axis((int)x->dims[3], kw, n->win.sw, n->win.dw, n->win.auto_pad, n->win.ceil_mode,
                     &pl, &pr, &ow) ||
        oh < 1 || ow < 1)
        return si_node_error(g, n, SI_ERR_FORMAT, "window %dx%d does not fit the input %lldx%lld",
                             kh, kw, (long long)x->dims[2], (long long)x->dims[3]);
    if (n->op == SI_OP_CONV)
        n->conv = (si_conv_shape){(int)x->dims[0],
                                  (int)x->dims[1],
                                  (int)x->dims[2],
                                  (int)x->dims[3],
                                  (int)m,
                                  kh,
                                  kw,
                                  n->win.group,
                                  n->win.sh,
                                  n->win.sw,
                                  n->win.dh,
                                  n->win.dw,
                                  pt,
                                  pl,
                                  pb,
                                  pr,
                                  oh,
                                  ow};
    else
        n->pool = (si_pool_shape){(int)x->dims[0],
                                  (int)x->dims[1],
                                  (int)x->dims[2],
                                  (int)x->dims[3],
                                  kh,
                                  kw,
                                  n->win.sh,
                                  n->win.sw,
                                  n->win.dh,
                                  n->win.dw,
                                  pt,
                                  pl,
                                  pb,
                                  pr,
                                  oh,
                                  ow};
    *y = (si_shape){4, {x->dims[0], m, oh, ow}};
    if (n->residual >= 0) {
        const si_shape *r = &g->values[n->residual].shape;
        bool same = r->ndim == 4;
        for (int d = 0; same && d < 4; d++) same = r->dims[d] == y->dims[d];
        if (!same)
            return si_node_error(g, n, SI_ERR_FORMAT, "residual shape differs from the output");
    }
    return SI_OK;
}

static si_status infer_broadcast(si_graph *g, si_gnode *n, const si_shape *a, const si_shape *b2,
                                 si_shape *y) {
    int nd = a->ndim > b2->ndim ? a->ndim : b2->ndim;
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t da = d - (nd - a->ndim) >= 0 ? a->dims[d - (nd - a->ndim)] : 1;
        int64_t db = d - (nd - b2->ndim) >= 0 ? b2->dims[d - (nd - b2->ndim)] : 1;
        if (da != db && da != 1 && db != 1)
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "shapes cannot be broadcast (dimension %d: %lld vs %lld)", d,
                                 (long long)da, (long long)db);
        y->dims[d] = da == 1 ? db : da;
    }
    return SI_OK;
}

/* Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred. */
static si_status infer_reshape(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *sv = param(g, n, 0);
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
                                     "0 at position %d copies no input "
                                     "dimension",
                                     d);
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

/* Axes of Squeeze/Unsqueeze/Reduce: from the parameter input or the attribute. Returns count. */
static int read_axes(const si_graph *g, const si_gnode *n, int64_t *axes) {
    const si_value *av = param(g, n, 0);
    if (av) {
        int k = (int)si_value_numel(av);
        for (int i = 0; i < k && i < 2 * SI_MAX_DIMS; i++) axes[i] = si_value_i64(av, i);
        return k;
    }
    if (!n->split_from_attr) return -1; /* no axes given */
    memcpy(axes, n->attr_ints, sizeof(int64_t) * (size_t)n->n_attr_ints);
    return n->n_attr_ints;
}

static si_status infer_view(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    switch (n->view_kind) {
    case VIEW_FLATTEN: {
        int axis = norm_axis(n->axis, x->ndim);
        if (axis < 0 || axis > x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range for rank %d", n->axis,
                                 x->ndim);
        int64_t outer = 1;
        for (int d = 0; d < axis; d++) outer = si_mul_sat(outer, x->dims[d]);
        *y = (si_shape){2, {outer, outer ? si_shape_numel(x) / outer : 0}};
        return SI_OK;
    }
    case VIEW_RESHAPE: return infer_reshape(g, n, x, y);
    case VIEW_SQUEEZE: {
        int k = read_axes(g, n, axes);
        uint8_t drop[SI_MAX_DIMS] = {0};
        for (int i = 0; i < k; i++) {
            int a = norm_axis(axes[i], x->ndim);
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
    case VIEW_UNSQUEEZE: {
        int k = read_axes(g, n, axes);
        int nd = x->ndim + (k > 0 ? k : 0);
        if (k < 1 || nd > SI_MAX_DIMS)
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axes for Unsqueeze");
        uint8_t ins[SI_MAX_DIMS] = {0};
        for (int i = 0; i < k; i++) {
            int a = norm_axis(axes[i], nd);
            if (a < 0 || a >= nd || ins[a])
                return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axes[i]);
            ins[a] = 1;
        }
        y->ndim = nd;
        for (int d = 0, s = 0; d < nd; d++) y->dims[d] = ins[d] ? 1 : x->dims[s++];
        return SI_OK;
    }
    default: *y = *x; return SI_OK;
    }
}

static si_status infer_slice(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *sv = param(g, n, 0), *ev = param(g, n, 1), *av = param(g, n, 2),
                   *tv = param(g, n, 3);
    int k = sv ? (int)si_value_numel(sv) : n->n_attr_ints;
    if ((ev && si_value_numel(ev) != k) || (av && si_value_numel(av) != k) ||
        (tv && si_value_numel(tv) != k) || k > x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "starts, ends, axes and steps differ in length");
    *y = *x;
    for (int d = 0; d < x->ndim; d++) n->starts[d] = 0, n->steps[d] = 1;
    uint8_t seen[SI_MAX_DIMS] = {0};
    for (int i = 0; i < k; i++) {
        int64_t axis = av ? si_value_i64(av, i) : (sv ? i : n->split_sizes[i]);
        int a = norm_axis(axis, x->ndim);
        if (a < 0 || a >= x->ndim || seen[a])
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axis);
        seen[a] = 1;
        int64_t dim = x->dims[a];
        int64_t st = sv ? si_value_i64(sv, i) : n->attr_ints[i];
        int64_t en = ev ? si_value_i64(ev, i) : n->attr_ints[SI_MAX_DIMS + i];
        int64_t step = tv ? si_value_i64(tv, i) : 1;
        if (step == 0) return si_node_error(g, n, SI_ERR_FORMAT, "step 0");
        if (st < 0) st += dim;
        if (en < 0) en += dim;
        /* clamp as ONNX does: [0, dim] for positive steps, [-1, dim-1] for negative */
        if (step > 0) {
            st = st < 0 ? 0 : st > dim ? dim : st;
            en = en < 0 ? 0 : en > dim ? dim : en;
        } else {
            st = st < 0 ? -1 : st > dim - 1 ? dim - 1 : st;
            en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
        }
        int64_t len = step > 0 ? (en - st + step - 1) / step : (st - en + (-step) - 1) / (-step);
        if (len < 0) len = 0;
        n->starts[a] = st;
        n->steps[a] = step;
        y->dims[a] = len;
    }
    return SI_OK;
}

static si_status infer_resize(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim != 4)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "only 4-D (N, C, H, W) inputs");
    const si_value *scv = param(g, n, 1), *szv = param(g, n, 2);
    *y = *x;
    if (szv && si_value_numel(szv) > 0) {
        if (si_value_numel(szv) != 4)
            return si_node_error(g, n, SI_ERR_FORMAT, "sizes has %lld values",
                                 (long long)si_value_numel(szv));
        if (si_value_i64(szv, 0) != x->dims[0] || si_value_i64(szv, 1) != x->dims[1])
            return si_node_error(g, n, SI_ERR_UNSUPPORTED, "resizing N or C is not supported");
        y->dims[2] = si_value_i64(szv, 2);
        y->dims[3] = si_value_i64(szv, 3);
        n->scales[0] = (float)y->dims[2] / (float)x->dims[2];
        n->scales[1] = (float)y->dims[3] / (float)x->dims[3];
    } else {
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
    }
    return SI_OK;
}

static si_status infer_pad(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int nd = x->ndim;
    const si_value *pv = param(g, n, 0), *cv = param(g, n, 1), *av = param(g, n, 2);
    int64_t pads[2 * SI_MAX_DIMS] = {0};
    int k = pv ? (int)si_value_numel(pv) : n->n_attr_ints;
    int naxes = av ? (int)si_value_numel(av) : nd;
    if (k != 2 * naxes || naxes > nd)
        return si_node_error(g, n, SI_ERR_FORMAT, "pads has %d values for %d axes", k, naxes);
    for (int i = 0; i < naxes; i++) {
        int a = av ? norm_axis(si_value_i64(av, i), nd) : i;
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
                                 "reflect pads must be smaller than the "
                                 "dimension");
        n->pads[d] = pads[d];
        n->pads[nd + d] = pads[nd + d];
    }
    return SI_OK;
}

static si_status infer_reduce(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int k;
    memset(n->reduce_mask, 0, sizeof n->reduce_mask);
    if (n->axis == -2) { /* GlobalMaxPool: every spatial dim */
        k = 0;
        for (int d = 2; d < x->ndim; d++) axes[k++] = d;
    } else {
        k = read_axes(g, n, axes);
    }
    if (k <= 0) {
        if (n->noop_with_empty_axes) {
            *y = *x;
            return SI_OK;
        }
        for (int d = 0; d < x->ndim; d++) n->reduce_mask[d] = 1;
    }
    for (int i = 0; i < k; i++) {
        int a = norm_axis(axes[i], x->ndim);
        if (a < 0 || a >= x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axes[i]);
        n->reduce_mask[a] = 1;
    }
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!n->reduce_mask[d])
            y->dims[y->ndim++] = x->dims[d];
        else if (n->keepdims)
            y->dims[y->ndim++] = 1;
    }
    return SI_OK;
}

si_status si_graph_infer_node(si_graph *g, si_gnode *n) {
    const si_shape *x = &g->values[n->in[0]].shape;
    si_shape *y = &g->values[n->out].shape;
    switch (n->op) {
    case SI_OP_CONV:
    case SI_OP_MAXPOOL:
    case SI_OP_AVGPOOL: return infer_window(g, n, x, y);
    case SI_OP_GLOBAL_AVGPOOL:
        if (x->ndim < 3)
            return si_node_error(g, n, SI_ERR_FORMAT, "input has rank %d, expected >= 3", x->ndim);
        *y = *x;
        for (int d = 2; d < y->ndim; d++) y->dims[d] = 1;
        return SI_OK;
    case SI_OP_GEMM: {
        const si_shape *bs = &g->values[n->in[1]].shape;
        if (x->ndim != 2 || bs->ndim != 2)
            return si_node_error(g, n, SI_ERR_FORMAT, "A and B must be matrices (ranks %d, %d)",
                                 x->ndim, bs->ndim);
        int64_t m = n->trans_a ? x->dims[1] : x->dims[0], k = n->trans_a ? x->dims[0] : x->dims[1];
        int64_t kb = n->trans_b ? bs->dims[1] : bs->dims[0];
        int64_t nn = n->trans_b ? bs->dims[0] : bs->dims[1];
        if (k != kb)
            return si_node_error(g, n, SI_ERR_FORMAT, "inner dimensions differ (%lld vs %lld)",
                                 (long long)k, (long long)kb);
        if (n->n_in > 2) {
            const si_shape *c = &g->values[n->in[2]].shape;
            int64_t cm = c->ndim == 2 ? c->dims[0] : 1;
            int64_t cn = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
            if (c->ndim > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != nn))
                return si_node_error(g, n, SI_ERR_FORMAT, "C cannot be broadcast to (%lld, %lld)",
                                     (long long)m, (long long)nn);
        }
        *y = (si_shape){2, {m, nn}};
        return SI_OK;
    }
    case SI_OP_MATMUL: {
        si_shape a = *x, b2 = g->values[n->in[1]].shape;
        if (a.ndim < 1 || b2.ndim < 1)
            return si_node_error(g, n, SI_ERR_FORMAT, "MatMul of a scalar");
        bool a1 = a.ndim == 1, b1 = b2.ndim == 1;
        if (a1) a = (si_shape){2, {1, a.dims[0]}};
        if (b1) b2 = (si_shape){2, {b2.dims[0], 1}};
        if (a.dims[a.ndim - 1] != b2.dims[b2.ndim - 2])
            return si_node_error(g, n, SI_ERR_FORMAT, "inner dimensions differ (%lld vs %lld)",
                                 (long long)a.dims[a.ndim - 1], (long long)b2.dims[b2.ndim - 2]);
        si_shape ab = a, bb = b2, yb;
        ab.ndim -= 2;
        bb.ndim -= 2;
        si_status st = infer_broadcast(g, n, &ab, &bb, &yb);
        if (st != SI_OK) return st;
        *y = yb;
        if (!a1) y->dims[y->ndim++] = a.dims[a.ndim - 2];
        if (!b1) y->dims[y->ndim++] = b2.dims[b2.ndim - 1];
        return SI_OK;
    }
    case SI_OP_BINARY: return infer_broadcast(g, n, x, &g->values[n->in[1]].shape, y);
    case SI_OP_ACTIVATION: *y = *x; return SI_OK;
    case SI_OP_AFFINE:
        if (x->ndim < 2 || x->dims[1] != si_shape_numel(&g->values[n->in[1]].shape))
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "channel count differs from the "
                                 "statistics' length");
        *y = *x;
        return SI_OK;
    case SI_OP_VIEW: return infer_view(g, n, x, y);
    case SI_OP_CONCAT: {
        int a = norm_axis(n->axis, x->ndim);
        if (a < 0 || a >= x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
        *y = *x;
        y->dims[a] = 0;
        for (int i = 0; i < n->n_in; i++) {
            const si_shape *s = &g->values[n->in[i]].shape;
            bool ok = s->ndim == x->ndim;
            for (int d = 0; ok && d < s->ndim; d++) ok = d == a || s->dims[d] == x->dims[d];
            if (!ok)
                return si_node_error(g, n, SI_ERR_FORMAT, "input %d's shape does not match", i);
            y->dims[a] += s->dims[a];
        }
        return SI_OK;
    }
    case SI_OP_SPLIT: {
        int a = norm_axis(n->axis, x->ndim);
        if (a < 0 || a >= x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
        const si_value *sv = param(g, n, 0);
        int64_t total = 0;
        for (int o = 0; o < n->n_out; o++) {
            int64_t sz;
            if (sv)
                sz = si_value_numel(sv) == n->n_out ? si_value_i64(sv, o) : -1;
            else if (n->split_from_attr)
                sz = n->n_attr_ints == n->n_out ? n->attr_ints[o] : -1;
            else /* equal parts, the last one smaller (opset 18) */
                sz = (x->dims[a] + n->n_out - 1) / n->n_out;
            if (!sv && !n->split_from_attr && o == n->n_out - 1) sz = x->dims[a] - total;
            if (sz < 0)
                return si_node_error(g, n, SI_ERR_FORMAT,
                                     "split sizes do not match "
                                     "the outputs");
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
    case SI_OP_SLICE: return infer_slice(g, n, x, y);
    case SI_OP_TRANSPOSE: {
        int nd = x->ndim;
        if (n->n_attr_ints >= 0 && n->n_attr_ints != nd)
            return si_node_error(g, n, SI_ERR_FORMAT, "perm has %d values for rank %d",
                                 n->n_attr_ints, nd);
        uint8_t seen[SI_MAX_DIMS] = {0};
        y->ndim = nd;
        for (int d = 0; d < nd; d++) {
            int p = n->n_attr_ints < 0 ? nd - 1 - d : (int)n->attr_ints[d];
            if (p < 0 || p >= nd || seen[p])
                return si_node_error(g, n, SI_ERR_FORMAT, "perm is not a permutation");
            seen[p] = 1;
            n->perm[d] = p;
            y->dims[d] = x->dims[p];
        }
        return SI_OK;
    }
    case SI_OP_EXPAND: {
        const si_value *sv = param(g, n, 0);
        si_shape t = {(int)si_value_numel(sv), {0}};
        if (t.ndim > SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_UNSUPPORTED, "rank too high");
        for (int d = 0; d < t.ndim; d++) t.dims[d] = si_value_i64(sv, d);
        return infer_broadcast(g, n, x, &t, y);
    }
    case SI_OP_GATHER: {
        const si_value *iv = param(g, n, 0);
        int a = norm_axis(n->axis, x->ndim);
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
    case SI_OP_RESIZE: return infer_resize(g, n, x, y);
    case SI_OP_SOFTMAX: {
        int a = norm_axis(n->axis, x->ndim);
        if (a < 0 || a >= x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
        *y = *x;
        return SI_OK;
    }
    case SI_OP_PAD: return infer_pad(g, n, x, y);
    case SI_OP_REDUCE: return infer_reduce(g, n, x, y);
    default: SI_ASSERT(!"unknown op");
    }
    return SI_OK;
}
