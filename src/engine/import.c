/* Device-op import: finds a node's row in the family tables, runs its converter with the checks
 * every op shares, and dispatches shape inference by op kind. Plus the small helpers the
 * converters and inferrers of every family use. */
#include <string.h>

#include "import.h"

static const si_import_row *const families[] = {si_import_conv_rows,      si_import_tensor_rows,
                                                si_import_math_rows,      si_import_norm_rows,
                                                si_import_attention_rows, si_import_index_rows};

/* A linear scan: it runs once per node at load, never per batch. */
const si_import_row *si_import_device(const char *op_type) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const si_import_row *r = families[f]; r->onnx; r++)
            if (!strcmp(r->onnx, op_type)) return r;
    return NULL;
}

static si_import_infer_fn infer_of(int kind) {
    if (kind == SI_OP_ROTARY) return si_infer_rotary; /* made by passes, no ONNX op of their own */
    if (kind == SI_OP_ROWNORM) return si_infer_rownorm;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const si_import_row *r = families[f]; r->onnx; r++)
            if (r->kind == kind) return r->infer;
    return NULL;
}

/* Image-data inputs must be float; parameter inputs (pslot) may be int64. */
static bool inputs_are_float(si_builder *b, const si_node_proto *n, const si_gnode *gn) {
    for (int i = 0; i < gn->n_in; i++) {
        const si_value *iv = &b->g->values[gn->in[i]];
        bool is_param = false;
        for (int k = 0; k < 4; k++)
            if (gn->pslot[k] == i) is_param = true;
        if (!is_param && iv->dtype != SI_DT_FLOAT && gn->op != SI_OP_AFFINE) {
            si_b_unsupported(b, n, "input '%s' has type %s; only float tensors are supported",
                             iv->name, si_dtype_name(iv->dtype));
            return false;
        }
    }
    return true;
}

bool si_convert_device_op(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const si_import_row *row = si_import_device(n->op_type);
    for (int k = 0; k < 4; k++) gn->pslot[k] = -1;
    if (!row) {
        si_b_unsupported(b, n, SI_UNSUPPORTED_OP);
        return false;
    }
    int x = si_b_input(b, n, 0);
    if (x < 0) {
        si_b_unsupported(b, n, "the first input is missing");
        return false;
    }
    gn->op = row->kind;
    return row->convert(b, n, gn, x) && inputs_are_float(b, n, gn);
}

si_status si_graph_infer_node(si_graph *g, si_gnode *n) {
    si_import_infer_fn infer = infer_of(n->op);
    SI_ASSERT(infer != NULL);
    return infer(g, n, &g->values[n->in[0]].shape, &g->values[n->out].shape);
}

const si_value *si_imp_const_in(si_builder *b, const si_node_proto *n, int i) {
    int id = si_b_input(b, n, i);
    return id >= 0 && b->g->values[id].kind == SI_VAL_CONST ? &b->g->values[id] : NULL;
}

bool si_imp_add_param(si_builder *b, const si_node_proto *n, si_gnode *gn, int i, int *slot) {
    *slot = -1;
    int id = si_b_param(b, n, i);
    if (id == -1) return false;
    if (id >= 0) {
        *slot = gn->n_in;
        si_node_add_input(gn, id);
    }
    return true;
}

bool si_imp_store_attr_ints(si_builder *b, const si_node_proto *n, si_gnode *gn, const char *name) {
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

int si_imp_norm_axis(int64_t axis, int ndim) {
    return (int)(axis < 0 ? axis + ndim : axis);
}

const si_value *si_imp_param(const si_graph *g, const si_gnode *n, int k) {
    int slot = n->pslot[k];
    return slot >= 0 ? &g->values[n->in[slot]] : NULL;
}

si_status si_imp_broadcast(si_graph *g, si_gnode *n, const si_shape *a, const si_shape *b,
                           si_shape *y) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t da = d - (nd - a->ndim) >= 0 ? a->dims[d - (nd - a->ndim)] : 1;
        int64_t db = d - (nd - b->ndim) >= 0 ? b->dims[d - (nd - b->ndim)] : 1;
        if (da != db && da != 1 && db != 1)
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "shapes cannot be broadcast (dimension %d: %lld vs %lld)", d,
                                 (long long)da, (long long)db);
        y->dims[d] = da == 1 ? db : da;
    }
    return SI_OK;
}

int si_imp_read_axes(const si_graph *g, const si_gnode *n, int64_t *axes) {
    const si_value *av = si_imp_param(g, n, 0);
    if (av) {
        int k = (int)si_value_numel(av);
        for (int i = 0; i < k && i < 2 * SI_MAX_DIMS; i++) axes[i] = si_value_i64(av, i);
        return k;
    }
    if (!n->split_from_attr) return -1; /* no axes given */
    memcpy(axes, n->attr_ints, sizeof(int64_t) * (size_t)n->n_attr_ints);
    return n->n_attr_ints;
}
