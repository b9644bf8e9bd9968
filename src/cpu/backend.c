/* CPU backend: one arena for every runtime value, planned by liveness for the largest batch at
 * init (views share their source's bytes), then each run walks the nodes and calls the CPU
 * kernels. Constants and host values are read from the graph. Nothing is allocated per run.
 * Its slot ring is one synchronous slot: a staging buffer of pixels that submit normalises into
 * the input and runs at once, so the pipeline feeds it exactly as it feeds a GPU. */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/trace.h"
#include "engine/backend.h"
#include "engine/memplan.h"
#include "io/jpeg.h"
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
    /* the slot, with opts.pixels */
    uint8_t *pixels;     /* (max_batch, H, W, 3) uint8: the batch to normalise into input 0 */
    int in_h, in_w;      /* input 0's H and W */
    double t_run, t_end; /* when the slot's last run began and ended (si_now()) */
} cpu_state;

static float *ptr(const si_engine *e, int v) {
    const cpu_state *s = e->state;
    const si_value *val = &e->g->values[v];
    if (val->kind != SI_VAL_RUNTIME) return val->data;
    return (float *)(void *)(s->arena + s->plan.offset[v]);
}

/* The slot's staging buffer for the pixel path; plain memory, nothing uploads it. */
static si_status slot_init(si_engine *e, cpu_state *s) {
    const si_graph *g = e->g;
    const si_value *in = &g->values[g->inputs[0]];
    if (g->n_inputs != 1 || in->shape.ndim != 4 || in->shape.dims[1] != 3)
        return si_error(SI_ERR_UNSUPPORTED, "cpu: the pixel path needs one (N, 3, H, W) input");
    s->in_h = (int)in->shape.dims[2];
    s->in_w = (int)in->shape.dims[3];
    s->pixels = si_xmalloc((size_t)e->max_batch * (size_t)s->in_h * (size_t)s->in_w * 3);
    return SI_OK;
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
    e->n_slots = 1;
    e->synchronous = true;
    return e->opts.pixels ? slot_init(e, s) : SI_OK;
}

/* dims of s right-aligned to nd, padded with 1 */
static void align_dims(const si_shape *s, int nd, int64_t *out) {
    for (int d = 0; d < nd; d++) {
        int i = d - (nd - s->ndim);
        out[d] = i >= 0 ? s->dims[i] : 1;
    }
}

/* What each op's run reads: the node, its first input and output and their shapes. */
typedef struct {
    si_engine *e;
    cpu_state *s;
    const si_graph *g;
    const si_gnode *n;
    const float *x; /* input 0 */
    float *y;       /* output 0 */
    const si_shape *xs, *ys;
} op_args;

/* The product of dims [d0, d1) of s. */
static int64_t dims_prod(const si_shape *s, int d0, int d1) {
    int64_t p = 1;
    for (int d = d0; d < d1; d++) p *= s->dims[d];
    return p;
}

static void run_conv(const op_args *a) {
    const si_gnode *n = a->n;
    bool res = n->residual >= 0;
    int nb = n->n_in - (res ? 1 : 0);
    si_act none = {0};
    si_cpu_conv2d(&n->conv, a->x, ptr(a->e, n->in[1]), nb > 2 ? ptr(a->e, n->in[2]) : NULL,
                  res ? none : n->act, a->y, a->s->scratch);
    if (res) { /* y = act(y + residual): one more pass on the CPU, fused on the GPU */
        int64_t d[1] = {si_shape_numel(a->ys)};
        si_cpu_binary(SI_BIN_ADD, 1, d, a->y, d, ptr(a->e, n->residual), d, a->y, n->act);
    }
}

static void run_maxpool(const op_args *a) {
    si_cpu_maxpool2d(&a->n->pool, a->x, a->y);
}

static void run_avgpool(const op_args *a) {
    si_cpu_avgpool2d(&a->n->pool, a->n->win.count_include_pad, a->x, a->y);
}

static void run_global_avgpool(const op_args *a) {
    int64_t hw = dims_prod(a->xs, 2, a->xs->ndim);
    si_cpu_global_avgpool(a->x, a->xs->dims[0] * a->xs->dims[1], hw, a->y);
}

static void run_gemm(const op_args *a) {
    const si_gnode *n = a->n;
    const si_shape *bs = &a->g->values[n->in[1]].shape;
    int m = (int)a->ys->dims[0], nn = (int)a->ys->dims[1];
    int k = (int)(n->trans_b ? bs->dims[1] : bs->dims[0]);
    const float *c = NULL;
    int cm = 1, cn = 1;
    if (n->n_in > 2) {
        const si_shape *cs = &a->g->values[n->in[2]].shape;
        c = ptr(a->e, n->in[2]);
        cm = cs->ndim == 2 ? (int)cs->dims[0] : 1;
        cn = cs->ndim >= 1 ? (int)cs->dims[cs->ndim - 1] : 1;
    }
    si_cpu_gemm(n->trans_a, n->trans_b, m, nn, k, n->alpha, a->x, ptr(a->e, n->in[1]), n->beta, c,
                cm, cn, a->y);
    if (n->act.kind) si_cpu_activation(a->y, si_shape_numel(a->ys), n->act, a->y);
}

static void run_matmul(const op_args *a) {
    si_shape sa = *a->xs, sb = a->g->values[a->n->in[1]].shape;
    if (sa.ndim == 1) sa = (si_shape){2, {1, sa.dims[0]}};
    if (sb.ndim == 1) sb = (si_shape){2, {sb.dims[0], 1}};
    int nd = sa.ndim > sb.ndim ? sa.ndim : sb.ndim;
    int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
    align_dims(&sa, nd, ad);
    align_dims(&sb, nd, bd);
    for (int d = 0; d < nd - 2; d++) yd[d] = ad[d] > bd[d] ? ad[d] : bd[d];
    yd[nd - 2] = ad[nd - 2];
    yd[nd - 1] = bd[nd - 1];
    si_cpu_matmul(nd, ad, a->x, bd, ptr(a->e, a->n->in[1]), yd, a->y);
    const si_gnode *n = a->n;
    if (n->bias < 0 && n->residual < 0 && !n->act.kind) return;
    /* a Linear layer's fused bias, residual and activation, in ONNX's order, by the same
     * broadcasting kernel the unfused Adds would run */
    int64_t cols = yd[nd - 1], total = si_shape_numel(a->ys);
    if (total == 0) return;
    int64_t rows_cols[2] = {total / cols, cols}, one_row[2] = {1, cols};
    si_act none = {0};
    bool res = n->residual >= 0;
    if (n->bias >= 0)
        si_cpu_binary(SI_BIN_ADD, 2, rows_cols, a->y, one_row, ptr(a->e, n->bias), rows_cols, a->y,
                      res ? none : n->act);
    if (res)
        si_cpu_binary(SI_BIN_ADD, 2, rows_cols, a->y, rows_cols, ptr(a->e, n->residual), rows_cols,
                      a->y, n->act);
    else if (n->bias < 0)
        si_cpu_activation(a->y, total, n->act, a->y);
}

/* Matrix b's offsets (q, k, v, y, bias: nb each) from the views' batch strides. The bias's
 * batch index on a dim is the matrix's modulo the bias's extent: 0 where it broadcasts, the
 * window where a Swin mask tiles the windows of every image. */
static int64_t *attention_offsets(const si_graph *g, const si_gnode *n, const si_attn_view *op,
                                  int64_t nb, int64_t *bst) {
    int nd = op[0].shape.ndim;
    int64_t bd[SI_MAX_DIMS];
    const int bias = si_attention_bias(n);
    if (bias >= 0) {
        int64_t acc = 1;
        align_dims(&g->values[bias].shape, nd, bd);
        for (int d = nd - 1; d >= 0; d--) {
            bst[d] = bd[d] == 1 ? 0 : acc;
            acc *= bd[d];
        }
    }
    int64_t *off = si_xcalloc((size_t)(5 * (nb > 0 ? nb : 1)), sizeof *off);
    for (int64_t b = 0; b < nb; b++) {
        int64_t rem = b;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t r = rem % op[0].shape.dims[d];
            rem /= op[0].shape.dims[d];
            for (int i = 0; i < 4; i++) off[i * nb + b] += r * op[i].st[d];
            if (bias >= 0) off[4 * nb + b] += r % bd[d] * bst[d];
        }
    }
    return off;
}

static void run_attention(const op_args *a) {
    const si_gnode *n = a->n;
    si_attn_view op[4];
    si_attention_operands(a->g, n, op);
    const si_shape *q = &op[0].shape, *v = &op[2].shape;
    int nd = q->ndim;
    int64_t nb = dims_prod(q, 0, nd - 2), bst[SI_MAX_DIMS];
    int64_t *off = attention_offsets(a->g, n, op, nb, bst);
    si_cpu_attn p = {.nb = nb,
                     .t = q->dims[nd - 2],
                     .s = v->dims[nd - 2],
                     .d = q->dims[nd - 1],
                     .dv = v->dims[nd - 1],
                     .scale = n->alpha,
                     .trans_b = n->trans_b,
                     .act = n->act};
    for (int i = 0; i < 4; i++) {
        p.off[i] = off + i * nb;
        p.ld[i] = op[i].st[nd - 2];
    }
    if (n->qk_norm) {
        p.qk_eps = n->epsilon;
        if (n->qk_norm == 2) {
            p.qk_scale = ptr(a->e, si_attention_qk_scale(n));
            p.qs_div = n->rn_div;
            p.qs_mod = n->rn_mod;
        }
    }
    if (si_attention_bias(n) >= 0) {
        p.bias = ptr(a->e, si_attention_bias(n));
        p.bias_off = off + 4 * nb;
        p.bst_t = bst[nd - 2];
        p.bst_s = bst[nd - 1];
    }
    si_cpu_attention(&p, a->x + op[0].off, ptr(a->e, n->in[1]) + op[1].off,
                     ptr(a->e, n->in[2]) + op[2].off, a->y + op[3].off);
    free(off);
}

static void run_binary(const op_args *a) {
    const si_shape *bs = &a->g->values[a->n->in[1]].shape;
    int nd = a->ys->ndim ? a->ys->ndim : 1;
    int64_t ad[SI_MAX_DIMS], bd[SI_MAX_DIMS], yd[SI_MAX_DIMS];
    align_dims(a->xs, nd, ad);
    align_dims(bs, nd, bd);
    align_dims(a->ys, nd, yd);
    si_cpu_binary(a->n->binop, nd, ad, a->x, bd, ptr(a->e, a->n->in[1]), yd, a->y, a->n->act);
}

static void run_activation(const op_args *a) {
    si_cpu_activation(a->x, si_shape_numel(a->xs), a->n->act, a->y);
}

static void run_affine(const op_args *a) {
    int64_t inner = dims_prod(a->xs, 2, a->xs->ndim);
    si_cpu_channel_affine(a->x, a->xs->dims[0], a->xs->dims[1], inner, ptr(a->e, a->n->in[1]),
                          ptr(a->e, a->n->in[2]), a->y);
}

/* shares the input's bytes, unless the input is a constant or host value */
static void run_view(const op_args *a) {
    if (a->g->values[a->n->in[0]].kind != SI_VAL_RUNTIME)
        memcpy(a->y, a->x, sizeof(float) * (size_t)si_shape_numel(a->ys));
}

/* Inputs read through their Slice go straight into their place in y. */
static void run_concat_slices(const op_args *a, int ax) {
    const si_gnode *n = a->n;
    int64_t at = 0, zero[SI_MAX_DIMS] = {0}, one[SI_MAX_DIMS];
    for (int d = 0; d < SI_MAX_DIMS; d++) one[d] = 1;
    for (int i = 0; i < n->n_in; i++) {
        const si_slice_view *v = &n->sview[i];
        const si_shape *x = &a->g->values[n->in[i]].shape;
        si_shape part;
        si_concat_input_shape(a->g, n, i, &part);
        si_cpu_slice_into(x->ndim, x->dims, ptr(a->e, n->in[i]), v->on ? v->starts : zero,
                          v->on ? v->steps : one, part.dims, ax, at, a->ys->dims, a->y);
        at += part.dims[ax];
    }
}

static void run_concat(const op_args *a) {
    const si_gnode *n = a->n;
    int ax = (int)(n->axis < 0 ? n->axis + a->ys->ndim : n->axis);
    if (n->sview) {
        run_concat_slices(a, ax);
        return;
    }
    int64_t outer = dims_prod(a->ys, 0, ax), inner = dims_prod(a->ys, ax + 1, a->ys->ndim);
    for (int i = 0; i < n->n_in; i++) {
        a->s->cat_in[i] = ptr(a->e, n->in[i]);
        a->s->cat_sizes[i] = a->g->values[n->in[i]].shape.dims[ax];
    }
    si_cpu_concat(n->n_in, a->s->cat_in, a->s->cat_sizes, outer, inner, a->y);
}

static void run_split(const op_args *a) {
    const si_gnode *n = a->n;
    int64_t outer = dims_prod(a->xs, 0, n->axis),
            inner = dims_prod(a->xs, n->axis + 1, a->xs->ndim);
    float *ys[SI_MAX_OUTPUTS];
    for (int o = 0; o < n->n_out; o++) ys[o] = ptr(a->e, n->outs[o]);
    si_cpu_split(a->x, outer, inner, n->n_out, n->split_sizes, ys);
}

static void run_slice(const op_args *a) {
    si_cpu_slice(a->xs->ndim, a->xs->dims, a->x, a->n->starts, a->n->steps, a->ys->dims, a->y);
}

static void run_transpose(const op_args *a) {
    si_cpu_transpose(a->xs->ndim, a->xs->dims, a->n->perm, a->x, a->y);
}

static void run_expand(const op_args *a) {
    int64_t xd[SI_MAX_DIMS];
    align_dims(a->xs, a->ys->ndim, xd);
    si_cpu_broadcast(a->ys->ndim, xd, a->x, a->ys->dims, a->y);
}

static void run_tile(const op_args *a) {
    si_cpu_tile(a->xs->ndim, a->xs->dims, a->x, a->ys->dims, a->y);
}

static void run_gather(const op_args *a) {
    const si_gnode *n = a->n;
    const si_value *iv = &a->g->values[n->in[n->pslot[0]]];
    int64_t outer = dims_prod(a->xs, 0, n->axis),
            inner = dims_prod(a->xs, n->axis + 1, a->xs->ndim);
    int64_t ni = si_shape_numel(&iv->shape);
    if (iv->dtype == SI_DT_INT64) {
        si_cpu_gather(a->x, outer, a->xs->dims[n->axis], inner, iv->data, ni, a->y);
    } else { /* float indices (legal but rare): convert into scratch */
        for (int64_t i = 0; i < ni; i++)
            a->s->gather_idx[i] = (int64_t)((const float *)iv->data)[i];
        si_cpu_gather(a->x, outer, a->xs->dims[n->axis], inner, a->s->gather_idx, ni, a->y);
    }
}

/* The indexing ops' indices: int64 (shape inference refused any other type), their geometry in
 * the node, filled for this batch. */
static const int64_t *indices(const op_args *a) {
    return a->g->values[a->n->in[a->n->pslot[0]]].data;
}

static void run_gather_nd(const op_args *a) {
    si_cpu_gather_nd(&a->n->gnd, a->x, indices(a), a->y);
}

static void run_gather_elements(const op_args *a) {
    si_cpu_gather_elements(&a->n->elems, a->x, indices(a), a->y);
}

static void run_scatter_elements(const op_args *a) {
    si_cpu_scatter_elements(&a->n->elems, a->n->reduction, a->x, si_shape_numel(a->xs), indices(a),
                            ptr(a->e, a->n->in[2]), a->y);
}

static void run_rotary(const op_args *a) {
    si_row_geom rg;
    int64_t rows, d;
    if (si_node_rows(a->g, a->n, &rg, &rows, &d) != SI_OK) return; /* infer checked it */
    int64_t t = a->ys->dims[a->ys->ndim - 2];
    si_cpu_rotary(a->x, &rg, rows / t, t, d, a->n->rot_skip, a->n->rot_half, ptr(a->e, a->n->in[1]),
                  ptr(a->e, a->n->in[2]), a->y);
}

static void run_rownorm(const op_args *a) {
    const si_gnode *n = a->n;
    si_row_geom rg;
    int64_t rows, d;
    if (si_node_rows(a->g, n, &rg, &rows, &d) != SI_OK) return; /* infer checked it */
    si_cpu_rownorm(a->x, &rg, rows, d, n->epsilon, n->n_in > 1 ? ptr(a->e, n->in[1]) : NULL,
                   n->rn_div, n->rn_mod, a->y);
}

static void run_resize(const op_args *a) {
    const si_shape *xs = a->xs, *ys = a->ys;
    si_cpu_resize2d(&a->n->resize, xs->dims[0] * xs->dims[1], (int)xs->dims[2], (int)xs->dims[3],
                    (int)ys->dims[2], (int)ys->dims[3], a->n->scales[0], a->n->scales[1], a->x,
                    a->y);
}

static void run_softmax(const op_args *a) {
    const si_shape *xs = a->xs;
    int ax = (int)(a->n->axis < 0 ? a->n->axis + xs->ndim : a->n->axis);
    int64_t outer = dims_prod(xs, 0, ax), len = xs->dims[ax],
            inner = dims_prod(xs, ax + 1, xs->ndim);
    if (a->n->legacy_axis)
        si_cpu_softmax(a->x, outer, len * inner, a->y); /* coerced to 2-D */
    else
        si_cpu_softmax_axis(a->x, outer, len, inner, a->y);
}

static void run_pad(const op_args *a) {
    si_cpu_pad(a->n->pad_mode, a->xs->ndim, a->xs->dims, a->x, a->n->pads, a->n->pad_value,
               a->ys->dims, a->y);
}

static void run_reduce(const op_args *a) {
    if (si_shape_numel(a->xs) == si_shape_numel(a->ys) && a->n->noop_with_empty_axes)
        memcpy(a->y, a->x, sizeof(float) * (size_t)si_shape_numel(a->ys));
    else
        si_cpu_reduce(a->n->reduce_op, a->xs->ndim, a->xs->dims, a->x, a->n->reduce_mask, a->y);
}

static void run_lnorm(const op_args *a) {
    const si_gnode *n = a->n;
    int64_t rows = dims_prod(a->xs, 0, n->axis), len = dims_prod(a->xs, n->axis, a->xs->ndim);
    bool has_b = si_layernorm_has_bias(n);
    const float *bias = has_b ? ptr(a->e, n->in[2]) : NULL;
    int64_t nb = has_b ? si_shape_numel(&a->g->values[n->in[2]].shape) : 1;
    si_cpu_layernorm(a->x, n->premul >= 0 ? ptr(a->e, n->premul) : NULL, rows, len,
                     ptr(a->e, n->in[1]), si_shape_numel(&a->g->values[n->in[1]].shape), bias, nb,
                     n->residual >= 0 ? ptr(a->e, n->residual) : NULL, n->epsilon, a->y);
}

static void run_inorm(const op_args *a) {
    int64_t inner = dims_prod(a->xs, 2, a->xs->ndim);
    si_cpu_instancenorm(a->x, a->xs->dims[0], a->xs->dims[1], inner, ptr(a->e, a->n->in[1]),
                        ptr(a->e, a->n->in[2]), a->n->epsilon, a->y);
}

/* The CPU's run of each op; SI_OP_HOST has none (the graph evaluates it). An op without an
 * entry is refused at load by cpu_supports_op, so run_node never meets one. */
static void (*const op_runs[SI_OP_COUNT])(const op_args *a) = {
    [SI_OP_CONV] = run_conv,
    [SI_OP_MAXPOOL] = run_maxpool,
    [SI_OP_AVGPOOL] = run_avgpool,
    [SI_OP_GLOBAL_AVGPOOL] = run_global_avgpool,
    [SI_OP_GEMM] = run_gemm,
    [SI_OP_MATMUL] = run_matmul,
    [SI_OP_BINARY] = run_binary,
    [SI_OP_ACTIVATION] = run_activation,
    [SI_OP_AFFINE] = run_affine,
    [SI_OP_VIEW] = run_view,
    [SI_OP_CONCAT] = run_concat,
    [SI_OP_SPLIT] = run_split,
    [SI_OP_SLICE] = run_slice,
    [SI_OP_TRANSPOSE] = run_transpose,
    [SI_OP_EXPAND] = run_expand,
    [SI_OP_GATHER] = run_gather,
    [SI_OP_RESIZE] = run_resize,
    [SI_OP_SOFTMAX] = run_softmax,
    [SI_OP_PAD] = run_pad,
    [SI_OP_REDUCE] = run_reduce,
    [SI_OP_LAYERNORM] = run_lnorm,
    [SI_OP_INSTANCENORM] = run_inorm,
    [SI_OP_ATTENTION] = run_attention,
    [SI_OP_GATHER_ND] = run_gather_nd,
    [SI_OP_GATHER_ELEMENTS] = run_gather_elements,
    [SI_OP_SCATTER_ELEMENTS] = run_scatter_elements,
    [SI_OP_ROTARY] = run_rotary,
    [SI_OP_TILE] = run_tile,
    [SI_OP_ROWNORM] = run_rownorm,
};

/* The CPU is the reference: it runs every op the graph can hold, at any shape the graph's
 * inference accepts, for FP32 (the precision is refused once, by the engine, not per node). */
static bool cpu_supports_op(const si_graph *g, const si_gnode *n, const si_engine_opts *opts,
                            char *why, size_t cap) {
    (void)g;
    (void)opts;
    if (n->op >= 0 && n->op < SI_OP_COUNT && op_runs[n->op]) return true;
    snprintf(why, cap, "no CPU kernel for op %s", si_op_name(n->op));
    return false;
}

static void run_node(si_engine *e, const si_gnode *n, cpu_state *s) {
    SI_ASSERT(n->op >= 0 && n->op < SI_OP_COUNT && op_runs[n->op]);
    const si_graph *g = e->g;
    op_args a = {.e = e,
                 .s = s,
                 .g = g,
                 .n = n,
                 .x = ptr(e, n->in[0]),
                 .y = ptr(e, n->out),
                 .xs = &g->values[n->in[0]].shape,
                 .ys = &g->values[n->out].shape};
    op_runs[n->op](&a);
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

static uint8_t *cpu_pixels(si_engine *e, int slot) {
    (void)slot;
    return ((cpu_state *)e->state)->pixels;
}

/* Normalises the slot's rows into input 0 (the caller's thread pool) and runs the model: the
 * batch is finished when this returns. */
static si_status cpu_submit(si_engine *e, int slot, int rows, bool packed, size_t upload) {
    cpu_state *s = e->state;
    (void)slot;
    (void)upload;
    if (!s->pixels) return si_error(SI_ERR_INTERNAL, "cpu: submit without the pixel path");
    if (packed) return si_error(SI_ERR_INTERNAL, "cpu: packed input, but no resize here");
    const size_t img = (size_t)s->in_h * (size_t)s->in_w * 3;
    float *x = e->host_in[0];
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        si_normalize_chw(s->pixels + img * (size_t)r, s->in_h, s->in_w, e->opts.mean, e->opts.std,
                         x + img * (size_t)r);
    si_trace_push("compute");
    s->t_run = si_now();
    si_status st = si_graph_infer(e->g, rows); /* as si_engine_run: shapes follow the batch */
    if (st == SI_OK) st = cpu_run(e, rows);
    s->t_end = si_now();
    si_trace_pop();
    return st;
}

static si_status cpu_collect(si_engine *e, int slot, const float **outs) {
    (void)slot;
    for (int o = 0; o < e->g->n_outputs; o++) outs[o] = e->host_out[o];
    return SI_OK;
}

static si_status cpu_times(si_engine *e, int slot, double *t0, double *t1) {
    const cpu_state *s = e->state;
    (void)slot;
    *t0 = s->t_run;
    *t1 = s->t_end;
    return SI_OK;
}

static void cpu_release(si_engine *e) {
    cpu_state *s = e->state;
    if (!s) return;
    free(s->pixels);
    si_memplan_free(&s->plan);
    free(s->arena);
    free(s->scratch);
    free(s->cat_in);
    free(s->cat_sizes);
    free(s->gather_idx);
    free(s);
    e->state = NULL;
}

/* pack stays NULL: the CPU has no resize of its own (the pipeline makes the crops) */
const si_backend si_cpu_backend = {.name = "cpu",
                                   .init = cpu_init,
                                   .run = cpu_run,
                                   .release = cpu_release,
                                   .pixels = cpu_pixels,
                                   .submit = cpu_submit,
                                   .collect = cpu_collect,
                                   .times = cpu_times,
                                   .supports_op = cpu_supports_op};
