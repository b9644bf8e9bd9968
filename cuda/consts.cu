// The CUDA backend's constants: every weight the plan places in the device's constant block,
// converted once at init to the backend's type and layout (conv filters as KRSC, Gather's indices
// as int64, depthwise filters as float (kh, kw, C) for cuda/dwconv.cu).
#include <stdlib.h>
#include <string.h>

#include "cuda/backend_internal.cuh"

// host float -> the backend's type
static void to_type(const float *src, size_t n, int t, void *dst) {
    if (t == SI_GT_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (t == SI_GT_F16) {
        for (size_t i = 0; i < n; i++) ((__half *)dst)[i] = __float2half_rn(src[i]);
    } else {
        for (size_t i = 0; i < n; i++) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    }
}

static int by_size_desc(const void *a, const void *b, void *ctx) {
    const si_graph *g = (const si_graph *)ctx;
    int64_t na = si_shape_numel(&g->values[*(const int *)a].shape),
            nb = si_shape_numel(&g->values[*(const int *)b].shape);
    return na < nb ? 1 : na > nb ? -1 : *(const int *)a - *(const int *)b;
}

si_status si_cuda_upload_consts(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    const si_devplan *p = &cs->plan;
    size_t bytes = p->weights;
    // zeroed pages (the padding between values stays zero), faulted in by the threads that
    // write them rather than by one memset over the whole block (CLIP's 172 MB)
    uint8_t *h = (uint8_t *)calloc(bytes ? bytes : 1, 1);
    if (!h) return si_error(SI_ERR_NOMEM, "cannot stage %zu bytes of weights", bytes);
    // conv weights go in as KRSC (NHWC filters); remember which values those are
    int *is_w = (int *)calloc((size_t)g->n_values + 1, sizeof(int)); // padded channels + 1
    // and the row of a patch conv's filter, padded for its GEMM (0: KRSC's own, R S CP)
    int64_t *row = (int64_t *)calloc((size_t)g->n_values + 1, sizeof(int64_t));
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op != SI_OP_CONV) continue;
        is_w[g->nodes[j].in[1]] =
            1 + si_devplan_conv_cpad(g, &g->nodes[j], p->elem) / g->nodes[j].conv.group;
        if (si_cuda_conv_patch(cs, g, j))
            row[g->nodes[j].in[1]] = si_devplan_patch_k(g, &g->nodes[j], p->elem);
    }
    // the values, largest first, converted by the OpenMP team (the host's half conversion is
    // software: ResNet-50's 25M weights took 0.25 s of the engine's set-up on one thread)
    int *order = (int *)malloc(sizeof(int) * ((size_t)g->n_values + 1)), n_order = 0;
    for (int v = 0; v < g->n_values; v++)
        if (p->const_off[v] != SIZE_MAX) order[n_order++] = v;
    qsort_r(order, (size_t)n_order, sizeof *order, by_size_desc, g);
    bool lost = false;
#pragma omp parallel for schedule(dynamic, 1) reduction(|| : lost)
    for (int o = 0; o < n_order; o++) {
        const int v = order[o];
        const si_value *val = &g->values[v];
        size_t n = (size_t)si_shape_numel(&val->shape);
        int64_t CP = is_w[v] && val->shape.ndim == 4 ? is_w[v] - 1 : 0; // KRSC channels
        if (CP) n = n / (size_t)val->shape.dims[1] * (size_t)CP;
        if (CP && row[v]) n = (size_t)val->shape.dims[0] * (size_t)row[v];
        if (val->dtype == SI_DT_FLOAT && !(is_w[v] && val->shape.ndim == 4)) {
            to_type((const float *)val->data, n, cs->t, h + p->const_off[v]); // as it lies
            continue;
        }
        float *tmp = (float *)malloc(sizeof(float) * (n ? n : 1));
        if (!tmp) {
            lost = true;
            continue;
        }
        if (val->dtype == SI_DT_INT64) {
            for (size_t i = 0; i < n; i++) tmp[i] = (float)((const int64_t *)val->data)[i];
        } else if (is_w[v] && val->shape.ndim == 4) {
            const float *w = (const float *)val->data;
            int64_t M = val->shape.dims[0], C = val->shape.dims[1], R = val->shape.dims[2],
                    S = val->shape.dims[3];
            int64_t rl = row[v] ? row[v] : R * S * CP;
            memset(tmp, 0, sizeof(float) * n); // padded channels and rows weigh nothing
            for (int64_t m = 0; m < M; m++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t s = 0; s < S; s++)
                            tmp[m * rl + (r * S + s) * CP + c] = w[((m * C + c) * R + r) * S + s];
        }
        to_type(tmp, n, cs->t, h + p->const_off[v]);
        free(tmp);
    }
    free(order);
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *n = &g->nodes[j];
        if (p->aux_off[j] == SIZE_MAX) continue;
        { // the indexing ops' indices (parameter slot 0) as int64
            const si_value *iv = &g->values[n->in[n->pslot[0]]];
            int64_t ni = si_shape_numel(&iv->shape);
            int64_t *dst = (int64_t *)(h + p->aux_off[j]);
            for (int64_t i = 0; i < ni; i++)
                dst[i] = iv->dtype == SI_DT_INT64 ? ((const int64_t *)iv->data)[i]
                                                  : (int64_t)((const float *)iv->data)[i];
        }
    }
    free(is_w);
    free(row);
    if (lost) {
        free(h);
        return si_error(SI_ERR_NOMEM, "cannot stage the weights: out of host memory");
    }
    cudaError_t ce = cudaMemcpy(cs->consts, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    cudaCheck(ce);
    return SI_OK;
}

// Our depthwise kernel's weights: (C, 1, kh, kw) as float (kh, kw, C) at the plan's dw_off, so a
// thread reads its channels' taps as vectors and converts nothing.
si_status si_cuda_dw_upload(cuda_state *cs, const si_graph *g, int j) {
    const si_gnode *n = &g->nodes[j];
    const si_value *wv = &g->values[n->in[1]];
    int64_t C = wv->shape.dims[0], R = wv->shape.dims[2], S = wv->shape.dims[3];
    size_t count = (size_t)(C * R * S);
    float *tmp = (float *)malloc(sizeof(float) * (count ? count : 1));
    if (!tmp) return si_error(SI_ERR_NOMEM, "cannot stage the weights of '%s'", n->name);
    const float *w = (const float *)wv->data;
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t s = 0; s < S; s++) tmp[(r * S + s) * C + c] = w[(c * R + r) * S + s];
    cudaError_t ce = cudaMemcpy(cs->consts + cs->plan.dw_off[j], tmp, sizeof(float) * count,
                                cudaMemcpyHostToDevice);
    free(tmp);
    cudaCheck(ce);
    return SI_OK;
}
