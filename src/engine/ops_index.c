/* Import of the indexing ops GatherND, GatherElements and ScatterElements, and their geometry,
 * which the host rows (ops_host.c, constant tables folded at load) share. Their indices must be
 * constants or follow from shapes, as Gather's: every one is checked against the data whenever
 * the shapes are inferred, so a hostile model is refused at load and no kernel is handed an
 * index that leaves the data. */
#include <string.h>

#include "import.h"
#include "kernel_math.h"

/* The data's row-major strides, saturating (a dim of 0 may sit beside huge ones). */
static void strides_of(const si_shape *x, int64_t *st) {
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        st[d] = s;
        s = si_mul_sat(s, x->dims[d]);
    }
}

si_status si_elements_geom_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                              const si_shape *ix, int64_t axis, si_elements_geom *geo) {
    int nd = x->ndim, a = si_imp_norm_axis(axis, nd);
    if (nd < 1 || ix->ndim != nd)
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "indices of rank %d for data of rank %d (they must be equal, >= 1)",
                             ix->ndim, nd);
    if (a < 0 || a >= nd)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %lld out of range", (long long)axis);
    for (int d = 0; d < nd; d++)
        if (d != a && ix->dims[d] > x->dims[d])
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "indices' dimension %d (%lld) exceeds the data's (%lld)", d,
                                 (long long)ix->dims[d], (long long)x->dims[d]);
    *geo = (si_elements_geom){.nd = nd, .axis = a, .len = x->dims[a]};
    memcpy(geo->idims, ix->dims, sizeof(int64_t) * (size_t)nd);
    strides_of(x, geo->xstride);
    return SI_OK;
}

/* Indices' data as the device rows need it: present and integer. */
static si_status index_data(const si_graph *g, const si_gnode *n, const si_value *iv) {
    if (!iv->data) return si_node_error(g, n, SI_ERR_INTERNAL, "indices have no host data");
    if (iv->dtype != SI_DT_INT64)
        return si_node_error(g, n, SI_ERR_FORMAT, "indices must be integers");
    return SI_OK;
}

si_status si_elements_check(const si_graph *g, const si_gnode *n, const si_elements_geom *geo,
                            const si_value *iv) {
    si_status st = index_data(g, n, iv);
    if (st != SI_OK) return st;
    const int64_t *idx = iv->data;
    for (int64_t i = 0; i < si_value_numel(iv); i++)
        if (si_index_in(idx[i], geo->len) < 0)
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "index %lld (element %lld) is out of range for axis %d of "
                                 "length %lld",
                                 (long long)idx[i], (long long)i, geo->axis, (long long)geo->len);
    return SI_OK;
}

si_status si_gathernd_geom_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                              const si_shape *ix, int64_t batch_dims, si_gathernd_geom *geo,
                              si_shape *y) {
    int r = x->ndim, q = ix->ndim;
    int64_t b = batch_dims, k = q ? ix->dims[q - 1] : 0;
    if (r < 1 || q < 1 || b < 0 || b >= (r < q ? r : q))
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "batch_dims %lld for data of rank %d, indices "
                             "of rank %d",
                             (long long)b, r, q);
    if (k < 1 || k > r - b)
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "indices' last dimension %lld does not fit "
                             "data of rank %d after %lld batch dims",
                             (long long)k, r, (long long)b);
    if (q - 1 + r - b - k > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "result rank too high");
    *geo = (si_gathernd_geom){.k = (int)k, .per_batch = 1, .slice = 1};
    int64_t batches = 1, st[SI_MAX_DIMS];
    strides_of(x, st);
    for (int d = 0; d < b; d++) {
        if (ix->dims[d] != x->dims[d])
            return si_node_error(g, n, SI_ERR_FORMAT, "batch dimension %d differs (%lld, %lld)", d,
                                 (long long)x->dims[d], (long long)ix->dims[d]);
        batches = si_mul_sat(batches, x->dims[d]);
    }
    for (int d = (int)b; d < q - 1; d++) geo->per_batch = si_mul_sat(geo->per_batch, ix->dims[d]);
    for (int d = (int)(b + k); d < r; d++) geo->slice = si_mul_sat(geo->slice, x->dims[d]);
    geo->rows = si_mul_sat(batches, geo->per_batch);
    geo->batch_stride = b ? st[b - 1] : 0; /* one batch: row t / per_batch is 0 anyway */
    for (int j = 0; j < k; j++) {
        geo->dims[j] = x->dims[b + j];
        geo->strides[j] = st[b + j];
    }
    y->ndim = 0;
    for (int d = 0; d < q - 1; d++) y->dims[y->ndim++] = ix->dims[d];
    for (int d = (int)(b + k); d < r; d++) y->dims[y->ndim++] = x->dims[d];
    return SI_OK;
}

si_status si_gathernd_check(const si_graph *g, const si_gnode *n, const si_gathernd_geom *geo,
                            const si_value *iv) {
    si_status st = index_data(g, n, iv);
    if (st != SI_OK) return st;
    const int64_t *idx = iv->data;
    for (int64_t i = 0; i < si_value_numel(iv); i++)
        if (si_index_in(idx[i], geo->dims[i % geo->k]) < 0)
            return si_node_error(g, n, SI_ERR_FORMAT,
                                 "index %lld (element %lld) is out of range for a dimension of "
                                 "%lld",
                                 (long long)idx[i], (long long)i, (long long)geo->dims[i % geo->k]);
    return SI_OK;
}

bool si_scatter_reduction_of(si_builder *b, const si_node_proto *n, int *red) {
    static const char *names[] = {[SI_SCATTER_NONE] = "none",
                                  [SI_SCATTER_ADD] = "add",
                                  [SI_SCATTER_MUL] = "mul",
                                  [SI_SCATTER_MAX] = "max",
                                  [SI_SCATTER_MIN] = "min"};
    const si_attr *r = si_node_attr(n, "reduction");
    *red = SI_SCATTER_NONE;
    if (!r || !r->s) return true;
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (!strcmp(r->s, names[k])) {
            *red = k;
            return true;
        }
    si_b_unsupported(b, n, "reduction '%s'", r->s);
    return false;
}

/* --- device rows: data (and ScatterElements' updates) computed, indices a parameter ------------
 */
static bool add_indices(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    if (!si_imp_add_param(b, n, gn, 1, &gn->pslot[0])) return false;
    if (gn->pslot[0] < 0) si_b_unsupported(b, n, "the indices are missing");
    return gn->pslot[0] >= 0;
}

static bool convert_gathernd(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->batch_dims = (int)si_attr_int(n, "batch_dims", 0);
    return add_indices(b, n, gn, x);
}

static bool convert_gather_elements(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->axis = (int)si_attr_int(n, "axis", 0);
    return add_indices(b, n, gn, x);
}

static bool convert_scatter_elements(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->axis = (int)si_attr_int(n, "axis", 0);
    if (!si_scatter_reduction_of(b, n, &gn->reduction) || !add_indices(b, n, gn, x)) return false;
    int u = si_b_input(b, n, 2);
    if (u < 0) {
        si_b_unsupported(b, n, "the updates are missing");
        return false;
    }
    si_node_add_input(gn, u);
    return true;
}

static si_status infer_gathernd(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *iv = si_imp_param(g, n, 0);
    si_status st = si_gathernd_geom_of(g, n, x, &iv->shape, n->batch_dims, &n->gnd, y);
    return st != SI_OK ? st : si_gathernd_check(g, n, &n->gnd, iv);
}

static si_status infer_gather_elements(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *iv = si_imp_param(g, n, 0);
    si_status st = si_elements_geom_of(g, n, x, &iv->shape, n->axis, &n->elems);
    if (st != SI_OK) return st;
    *y = iv->shape;
    return si_elements_check(g, n, &n->elems, iv);
}

static si_status infer_scatter_elements(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_value *iv = si_imp_param(g, n, 0);
    const si_shape *us = &g->values[n->in[2]].shape;
    si_status st = si_elements_geom_of(g, n, x, &iv->shape, n->axis, &n->elems);
    if (st != SI_OK) return st;
    if (us->ndim != iv->shape.ndim ||
        memcmp(us->dims, iv->shape.dims, sizeof(int64_t) * (size_t)us->ndim))
        return si_node_error(g, n, SI_ERR_FORMAT, "updates and indices differ in shape");
    *y = *x;
    return si_elements_check(g, n, &n->elems, iv);
}

const si_import_row si_import_index_rows[] = {
    {.onnx = "GatherND",
     .kind = SI_OP_GATHER_ND,
     .convert = convert_gathernd,
     .infer = infer_gathernd},
    {.onnx = "GatherElements",
     .kind = SI_OP_GATHER_ELEMENTS,
     .convert = convert_gather_elements,
     .infer = infer_gather_elements},
    {.onnx = "ScatterElements",
     .kind = SI_OP_SCATTER_ELEMENTS,
     .convert = convert_scatter_elements,
     .infer = infer_scatter_elements},
    {.onnx = NULL},
};
