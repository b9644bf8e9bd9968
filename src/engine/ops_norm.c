/* Import of the normalisations that compute their statistics from the data at run time:
 * LayerNormalization (opset 17, vision transformers) and InstanceNormalization. Inputs stay in
 * ONNX's order: in[0] X, in[1] Scale, in[2] B (LayerNorm's B is optional). */
#include "import.h"

/* Only Y: the training outputs Mean and InvStdDev would need a second and third output value
 * per node, which no inference model reads. */
static bool convert_layernorm(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i][0]) {
            si_b_unsupported(b, n,
                             "output '%s' (Mean/InvStdDev) is not supported; only Y is computed",
                             n->outputs[i]);
            return false;
        }
    if (si_attr_int(n, "stash_type", 1) != 1) {
        si_b_unsupported(b, n, "stash_type %lld (only 1, float32 statistics, is supported)",
                         (long long)si_attr_int(n, "stash_type", 1));
        return false;
    }
    int scale = si_b_input(b, n, 1), bias = si_b_input(b, n, 2);
    if (scale < 0) {
        si_b_unsupported(b, n, "needs input Scale");
        return false;
    }
    gn->axis = (int)si_attr_int(n, "axis", -1);
    gn->epsilon = si_attr_float(n, "epsilon", 1e-5f);
    si_node_add_input(gn, x);
    si_node_add_input(gn, scale);
    if (bias >= 0) si_node_add_input(gn, bias);
    return true;
}

static bool convert_instancenorm(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    int scale = si_b_input(b, n, 1), bias = si_b_input(b, n, 2);
    if (scale < 0 || bias < 0) {
        si_b_unsupported(b, n, "needs inputs scale and B");
        return false;
    }
    gn->epsilon = si_attr_float(n, "epsilon", 1e-5f);
    si_node_add_input(gn, x);
    si_node_add_input(gn, scale);
    si_node_add_input(gn, bias);
    return true;
}

/* Whether p broadcasts to the normalised dims x[axis:] by repeating itself: its shape, leading
 * 1s dropped, is a suffix of them. The kernels then index it as j % numel. */
static bool suffix_broadcast(const si_shape *p, const si_shape *x, int axis) {
    int pd = 0;
    while (pd < p->ndim && p->dims[pd] == 1) pd++;
    int k = p->ndim - pd;
    if (k > x->ndim - axis) return false;
    for (int i = 0; i < k; i++)
        if (p->dims[p->ndim - 1 - i] != x->dims[x->ndim - 1 - i]) return false;
    return true;
}

static si_status infer_layernorm(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int a = si_imp_norm_axis(n->axis, x->ndim);
    if (a < 0 || a >= x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range for rank %d", n->axis,
                             x->ndim);
    for (int k = 1; k < (si_layernorm_has_bias(n) ? 3 : 2); k++)
        if (!suffix_broadcast(&g->values[n->in[k]].shape, x, a))
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "%s does not broadcast to the normalised dims (axis %d on)",
                                 k == 1 ? "Scale" : "B", a);
    for (int k = 0; k < 2; k++) { /* fused operands, norm_fusion.c: x's shape exactly */
        int v = k ? n->residual : n->premul;
        if (v >= 0 && !si_shape_same(&g->values[v].shape, x))
            return si_node_error(g, n, SI_ERR_FORMAT, "fused %s's shape differs from X's",
                                 k ? "residual" : "multiplier");
    }
    n->axis = a;
    *y = *x;
    return SI_OK;
}

static si_status infer_instancenorm(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim < 3)
        return si_node_error(g, n, SI_ERR_FORMAT, "input of rank %d (needs N, C and spatial dims)",
                             x->ndim);
    for (int k = 1; k < 3; k++)
        if (si_shape_numel(&g->values[n->in[k]].shape) != x->dims[1])
            return si_node_error(g, n, SI_ERR_FORMAT, "%s's length differs from C (%lld)",
                                 k == 1 ? "scale" : "B", (long long)x->dims[1]);
    *y = *x;
    return SI_OK;
}

const si_import_row si_import_norm_rows[] = {
    {.onnx = "LayerNormalization",
     .kind = SI_OP_LAYERNORM,
     .convert = convert_layernorm,
     .infer = infer_layernorm},
    {.onnx = "InstanceNormalization",
     .kind = SI_OP_INSTANCENORM,
     .convert = convert_instancenorm,
     .infer = infer_instancenorm},
    {.onnx = NULL},
};
