/* CPU backend: one host buffer per live value, planned for the largest batch at init (views
 * share their source's buffer), then each run walks the nodes and calls the CPU kernels. Nothing
 * is allocated per run. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef struct {
    float **buf; /* per value; constants point at the graph's data */
    bool *owned; /* buf[i] allocated here */
    float *scratch;
} cpu_state;

static si_status cpu_init(si_engine *e) {
    si_graph *g = e->g;
    cpu_state *s = si_xcalloc(1, sizeof *s);
    e->state = s;
    s->buf = si_xcalloc((size_t)g->n_values, sizeof *s->buf);
    s->owned = si_xcalloc((size_t)g->n_values, sizeof *s->owned);
    size_t scratch = 0;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].is_const && g->values[i].dtype == SI_DT_FLOAT)
            s->buf[i] = g->values[i].data;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        size_t n = (size_t)si_shape_numel(&g->values[v].shape);
        s->buf[v] = si_xcalloc(n ? n : 1, sizeof(float));
        s->owned[v] = true;
        e->host_in[i] = s->buf[v];
        e->activation_bytes += n * sizeof(float);
    }
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_VIEW) {
            s->buf[n->out] = s->buf[n->in[0]];
            continue;
        }
        size_t cnt = (size_t)si_shape_numel(&g->values[n->out].shape);
        s->buf[n->out] = si_xmalloc(sizeof(float) * (cnt ? cnt : 1));
        s->owned[n->out] = true;
        e->activation_bytes += cnt * sizeof(float);
        if (n->op == SI_OP_CONV) {
            size_t c = si_cpu_conv2d_scratch(&n->conv);
            if (c > scratch) scratch = c;
        }
    }
    s->scratch =
        si_xmalloc(sizeof(float) * (scratch ? scratch : 1) * (size_t)omp_get_max_threads());
    e->activation_bytes += sizeof(float) * scratch * (size_t)omp_get_max_threads();
    return SI_OK;
}

static si_status cpu_run(si_engine *e, int batch) {
    si_graph *g = e->g;
    cpu_state *s = e->state;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        float *y = s->buf[n->out];
        const float *x = s->buf[n->in[0]];
        const si_shape *xs = &g->values[n->in[0]].shape, *ys = &g->values[n->out].shape;
        switch (n->op) {
        case SI_OP_CONV:
            si_cpu_conv2d(&n->conv, x, s->buf[n->in[1]], n->n_in > 2 ? s->buf[n->in[2]] : NULL,
                          n->act, y, s->scratch);
            break;
        case SI_OP_MAXPOOL: si_cpu_maxpool2d(&n->pool, x, y); break;
        case SI_OP_GLOBAL_AVGPOOL: {
            int64_t hw = 1;
            for (int d = 2; d < xs->ndim; d++) hw *= xs->dims[d];
            si_cpu_global_avgpool(x, xs->dims[0] * xs->dims[1], hw, y);
            break;
        }
        case SI_OP_GEMM: {
            const si_shape *bs = &g->values[n->in[1]].shape;
            int m = (int)ys->dims[0], nn = (int)ys->dims[1];
            int k = (int)(n->trans_b ? bs->dims[1] : bs->dims[0]);
            const float *c = NULL;
            int cm = 1, cn = 1;
            if (n->n_in > 2) {
                const si_shape *cs = &g->values[n->in[2]].shape;
                c = s->buf[n->in[2]];
                cm = cs->ndim == 2 ? (int)cs->dims[0] : 1;
                cn = cs->ndim >= 1 ? (int)cs->dims[cs->ndim - 1] : 1;
            }
            si_cpu_gemm(n->trans_a, n->trans_b, m, nn, k, n->alpha, x, s->buf[n->in[1]], n->beta, c,
                        cm, cn, y);
            break;
        }
        case SI_OP_BINARY: {
            const si_shape *bs = &g->values[n->in[1]].shape;
            int nd = ys->ndim;
            int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS];
            for (int d = 0; d < nd; d++) {
                int ia = d - (nd - xs->ndim), ib = d - (nd - bs->ndim);
                ad[d] = ia >= 0 ? xs->dims[ia] : 1;
                bd[d] = ib >= 0 ? bs->dims[ib] : 1;
            }
            if (nd == 0) { /* scalars */
                ad[0] = bd[0] = 1;
                int64_t one = 1;
                si_cpu_binary(n->binop, 1, ad, x, bd, s->buf[n->in[1]], &one, y, n->act);
            } else {
                si_cpu_binary(n->binop, nd, ad, x, bd, s->buf[n->in[1]], ys->dims, y, n->act);
            }
            break;
        }
        case SI_OP_ACTIVATION: si_cpu_activation(x, si_shape_numel(xs), n->act, y); break;
        case SI_OP_AFFINE: {
            int64_t inner = 1;
            for (int d = 2; d < xs->ndim; d++) inner *= xs->dims[d];
            si_cpu_channel_affine(x, xs->dims[0], xs->dims[1], inner, s->buf[n->in[1]],
                                  s->buf[n->in[2]], y);
            break;
        }
        case SI_OP_VIEW: break; /* shares the input's buffer */
        default: SI_ASSERT(!"unknown op");
        }
    }
    (void)batch;
    for (int i = 0; i < g->n_outputs; i++) e->host_out[i] = s->buf[g->outputs[i]];
    return SI_OK;
}

static void cpu_release(si_engine *e) {
    cpu_state *s = e->state;
    if (!s) return;
    for (int i = 0; i < e->g->n_values; i++)
        if (s->owned[i]) free(s->buf[i]);
    free(s->buf);
    free(s->owned);
    free(s->scratch);
    free(s);
    e->state = NULL;
}

const si_backend si_cpu_backend = {
    .name = "cpu", .init = cpu_init, .run = cpu_run, .release = cpu_release};
