/* CPU backend: one arena for every runtime value, planned by liveness for the largest batch at
 * init (views share their source's bytes), then each run walks the nodes and calls the CPU
 * kernels. Constants and host values are read from the graph. Nothing is allocated per run. */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/memplan.h"
#include "kernels.h"

/* The kernels call sgemm from inside their OpenMP threads and expect OpenBLAS's OpenMP build,
 * which then runs single-threaded there. When the loader finds another libopenblas.so.0 (on the
 * GPU machine the system's pthreads build came first: 16 threads ran 2.3x slower than one), each
 * of our threads would start a full set of BLAS threads; BLAS is then kept to one thread. */
static void blas_threads_once(void) {
    if (openblas_get_parallel() != 1) return; /* 0 sequential, 2 OpenMP: nothing to do */
    openblas_set_num_threads(1);
    si_log_warn("libopenblas.so.0 is OpenBLAS's pthreads build (%s): running it single-threaded "
                "inside shardinfer's threads; put the OpenMP build (Debian: libopenblas0-openmp, "
                "its openblas-openmp directory) first on the library path for threaded BLAS at "
                "batch 1",
                openblas_get_config());
}

typedef struct {
    si_memplan plan;
    uint8_t *arena;
    float *scratch;       /* im2col, per thread */
    const float **cat_in; /* Concat's input pointers and sizes, sized for the widest one */
    int64_t *cat_sizes;
    int64_t *gather_idx; /* float Gather indices converted, sized for the largest */
} cpu_state;

static float *ptr(const si_engine *e, int v) {
    const cpu_state *s = e->state;
    const si_value *val = &e->g->values[v];
    if (val->kind != SI_VAL_RUNTIME) return val->data;
    return (float *)(void *)(s->arena + s->plan.offset[v]);
}

static si_status cpu_init(si_engine *e) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_threads_once);
    si_graph *g = e->g;
    cpu_state *s = si_xcalloc(1, sizeof *s);
    e->state = s;
    si_memplan_build(g, 64, &s->plan);
    s->arena = aligned_alloc(64, s->plan.arena_bytes ? s->plan.arena_bytes : 64);
    if (!s->arena)
        return si_error(SI_ERR_NOMEM, "cannot allocate the %zu-byte activation arena",
                        s->plan.arena_bytes);
    size_t scratch = 0, cat = 1, idx = 1;
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_CONV) {
            size_t c = si_cpu_conv2d_scratch(&n->conv);
            if (c > scratch) scratch = c;
        } else if (n->op == SI_OP_CONCAT && (size_t)n->n_in > cat) {
            cat = (size_t)n->n_in;
        } else if (n->op == SI_OP_GATHER) {
            size_t k = (size_t)si_shape_numel(&g->values[n->in[n->pslot[0]]].shape);
            if (k > idx) idx = k;
        }
    }
    s->cat_in = si_xmalloc(sizeof *s->cat_in * cat);
    s->cat_sizes = si_xmalloc(sizeof *s->cat_sizes * cat);
    s->gather_idx = si_xmalloc(sizeof *s->gather_idx * idx);
    size_t threads = (size_t)omp_get_max_threads();
    s->scratch = si_xmalloc(sizeof(float) * (scratch ? scratch : 1) * threads);
    e->activation_bytes = s->plan.arena_bytes + sizeof(float) * scratch * threads;
    e->naive_bytes = s->plan.naive_bytes;
    for (int i = 0; i < g->n_inputs; i++) e->host_in[i] = ptr(e, g->inputs[i]);
    return SI_OK;
}

/* dims of s right-aligned to nd, padded with 1 */
static void align_dims(const si_shape *s, int nd, int64_t *out) {
    for (int d = 0; d < nd; d++) {
        int i = d - (nd - s->ndim);
        out[d] = i >= 0 ? s->dims[i] : 1;
    }
}

static void run_node(si_engine *e, si_gnode *n, cpu_state *s) {
    si_graph *g = e->g;
    float *y = ptr(e, n->out);
    const float *x = ptr(e, n->in[0]);
    const si_shape *xs = &g->values[n->in[0]].shape, *ys = &g->values[n->out].shape;
    switch (n->op) {
    case SI_OP_CONV: {
        bool res = n->residual >= 0;
        int nb = n->n_in - (res ? 1 : 0);
        si_act none = {0};
        si_cpu_conv2d(&n->conv, x, ptr(e, n->in[1]), nb > 2 ? ptr(e, n->in[2]) : NULL,
                      res ? none : n->act, y, s->scratch);
        if (res) { /* y = act(y + residual): one more pass on the CPU, fused on the GPU */
            int64_t d[1] = {si_shape_numel(ys)};
            si_cpu_binary(SI_BIN_ADD, 1, d, y, d, ptr(e, n->residual), d, y, n->act);
        }
        break;
    }
    case SI_OP_MAXPOOL: si_cpu_maxpool2d(&n->pool, x, y); break;
    case SI_OP_AVGPOOL: si_cpu_avgpool2d(&n->pool, n->win.count_include_pad, x, y); break;
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
            c = ptr(e, n->in[2]);
            cm = cs->ndim == 2 ? (int)cs->dims[0] : 1;
            cn = cs->ndim >= 1 ? (int)cs->dims[cs->ndim - 1] : 1;
        }
        si_cpu_gemm(n->trans_a, n->trans_b, m, nn, k, n->alpha, x, ptr(e, n->in[1]), n->beta, c, cm,
                    cn, y);
        if (n->act.kind) si_cpu_activation(y, si_shape_numel(ys), n->act, y);
        break;
    }
    case SI_OP_MATMUL: {
        si_shape a = *xs, b = g->values[n->in[1]].shape;
        if (a.ndim == 1) a = (si_shape){2, {1, a.dims[0]}};
        if (b.ndim == 1) b = (si_shape){2, {b.dims[0], 1}};
        int nd = a.ndim > b.ndim ? a.ndim : b.ndim;
        int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
        align_dims(&a, nd, ad);
        align_dims(&b, nd, bd);
        for (int d = 0; d < nd - 2; d++) yd[d] = ad[d] > bd[d] ? ad[d] : bd[d];
        yd[nd - 2] = ad[nd - 2];
        yd[nd - 1] = bd[nd - 1];
        si_cpu_matmul(nd, ad, x, bd, ptr(e, n->in[1]), yd, y);
        break;
    }
    case SI_OP_BINARY: {
        const si_shape *bs = &g->values[n->in[1]].shape;
        int nd = ys->ndim ? ys->ndim : 1;
        int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
        align_dims(xs, nd, ad);
        align_dims(bs, nd, bd);
        align_dims(ys, nd, yd);
        si_cpu_binary(n->binop, nd, ad, x, bd, ptr(e, n->in[1]), yd, y, n->act);
        break;
    }
    case SI_OP_ACTIVATION: si_cpu_activation(x, si_shape_numel(xs), n->act, y); break;
    case SI_OP_AFFINE: {
        int64_t inner = 1;
        for (int d = 2; d < xs->ndim; d++) inner *= xs->dims[d];
        si_cpu_channel_affine(x, xs->dims[0], xs->dims[1], inner, ptr(e, n->in[1]),
                              ptr(e, n->in[2]), y);
        break;
    }
    case SI_OP_VIEW:
        /* shares the input's bytes, unless the input is a constant or host value */
        if (g->values[n->in[0]].kind != SI_VAL_RUNTIME)
            memcpy(y, x, sizeof(float) * (size_t)si_shape_numel(ys));
        break;
    case SI_OP_CONCAT:
    case SI_OP_SPLIT: {
        int a = n->op == SI_OP_CONCAT ? (int)(n->axis < 0 ? n->axis + ys->ndim : n->axis) : n->axis;
        const si_shape *full = n->op == SI_OP_CONCAT ? ys : xs;
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < a; d++) outer *= full->dims[d];
        for (int d = a + 1; d < full->ndim; d++) inner *= full->dims[d];
        if (n->op == SI_OP_SPLIT) {
            float *ys_[SI_MAX_OUTPUTS];
            for (int o = 0; o < n->n_out; o++) ys_[o] = ptr(e, n->outs[o]);
            si_cpu_split(x, outer, inner, n->n_out, n->split_sizes, ys_);
        } else {
            for (int i = 0; i < n->n_in; i++) {
                s->cat_in[i] = ptr(e, n->in[i]);
                s->cat_sizes[i] = g->values[n->in[i]].shape.dims[a];
            }
            si_cpu_concat(n->n_in, s->cat_in, s->cat_sizes, outer, inner, y);
        }
        break;
    }
    case SI_OP_SLICE: si_cpu_slice(xs->ndim, xs->dims, x, n->starts, n->steps, ys->dims, y); break;
    case SI_OP_TRANSPOSE: si_cpu_transpose(xs->ndim, xs->dims, n->perm, x, y); break;
    case SI_OP_EXPAND: {
        int64_t xd[SI_MAX_DIMS];
        align_dims(xs, ys->ndim, xd);
        si_cpu_broadcast(ys->ndim, xd, x, ys->dims, y);
        break;
    }
    case SI_OP_GATHER: {
        const si_value *iv = &g->values[n->in[n->pslot[0]]];
        int64_t outer = 1, inner = 1, ni = si_shape_numel(&iv->shape);
        for (int d = 0; d < n->axis; d++) outer *= xs->dims[d];
        for (int d = n->axis + 1; d < xs->ndim; d++) inner *= xs->dims[d];
        if (iv->dtype == SI_DT_INT64) {
            si_cpu_gather(x, outer, xs->dims[n->axis], inner, iv->data, ni, y);
        } else { /* float indices (legal but rare): convert into scratch */
            for (int64_t i = 0; i < ni; i++)
                s->gather_idx[i] = (int64_t)((const float *)iv->data)[i];
            si_cpu_gather(x, outer, xs->dims[n->axis], inner, s->gather_idx, ni, y);
        }
        break;
    }
    case SI_OP_RESIZE:
        si_cpu_resize2d(&n->resize, xs->dims[0] * xs->dims[1], (int)xs->dims[2], (int)xs->dims[3],
                        (int)ys->dims[2], (int)ys->dims[3], n->scales[0], n->scales[1], x, y);
        break;
    case SI_OP_SOFTMAX: {
        int a = (int)(n->axis < 0 ? n->axis + xs->ndim : n->axis);
        int64_t outer = 1, len = xs->dims[a], inner = 1;
        for (int d = 0; d < a; d++) outer *= xs->dims[d];
        for (int d = a + 1; d < xs->ndim; d++) inner *= xs->dims[d];
        if (n->legacy_axis)
            si_cpu_softmax(x, outer, len * inner, y); /* coerced to 2-D */
        else
            si_cpu_softmax_axis(x, outer, len, inner, y);
        break;
    }
    case SI_OP_PAD:
        si_cpu_pad(n->pad_mode, xs->ndim, xs->dims, x, n->pads, n->pad_value, ys->dims, y);
        break;
    case SI_OP_REDUCE:
        if (si_shape_numel(xs) == si_shape_numel(ys) && n->noop_with_empty_axes)
            memcpy(y, x, sizeof(float) * (size_t)si_shape_numel(ys));
        else
            si_cpu_reduce(n->reduce_op, xs->ndim, xs->dims, x, n->reduce_mask, y);
        break;
    default: SI_ASSERT(!"unknown op");
    }
}

static si_status cpu_run(si_engine *e, int batch) {
    si_graph *g = e->g;
    cpu_state *s = e->state;
    (void)batch; /* shapes are inferred for it already */
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op == SI_OP_HOST) continue;
        double t = e->node_seconds ? si_now() : 0;
        run_node(e, &g->nodes[j], s);
        if (e->node_seconds) e->node_seconds[j] += si_now() - t;
    }
    for (int i = 0; i < g->n_outputs; i++) e->host_out[i] = ptr(e, g->outputs[i]);
    return SI_OK;
}

static void cpu_release(si_engine *e) {
    cpu_state *s = e->state;
    if (!s) return;
    si_memplan_free(&s->plan);
    free(s->arena);
    free(s->scratch);
    free(s->cat_in);
    free(s->cat_sizes);
    free(s->gather_idx);
    free(s);
    e->state = NULL;
}

const si_backend si_cpu_backend = {
    .name = "cpu", .init = cpu_init, .run = cpu_run, .release = cpu_release};
