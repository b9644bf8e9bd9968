/* Engine: backend selection, the load-time check of every node against the backend, planning
 * for the largest batch, and the run entry point. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *si_precision_name(int p) {
    return p == SI_PREC_FP16 ? "fp16" : p == SI_PREC_BF16 ? "bf16" : "fp32";
}

int si_precision_parse(const char *s) {
    if (!strcmp(s, "fp32")) return SI_PREC_FP32;
    if (!strcmp(s, "fp16")) return SI_PREC_FP16;
    if (!strcmp(s, "bf16")) return SI_PREC_BF16;
    return -1;
}

const char *si_engine_backends(void) {
#ifdef SI_HAVE_CUDA
    return "cpu, cuda";
#else
    return "cpu";
#endif
}

si_status si_engine_create(si_graph *g, const char *backend, int max_batch, si_engine **out) {
    return si_engine_create_opts(g, backend, max_batch, NULL, out);
}

const si_backend *si_engine_backend(const char *name) {
    if (!strcmp(name, "cpu")) return &si_cpu_backend;
#ifdef SI_HAVE_CUDA
    if (!strcmp(name, "cuda")) return &si_cuda_backend;
#endif
    return NULL;
}

/* One line of the refusal: every refused node of one op type with one reason. */
typedef struct {
    const si_gnode *first;
    char why[256];
    int count;
} refusal;

/* Appends to *msg (grown, caller frees) the line of each group. */
static void append_groups(char **msg, size_t *len, const si_graph *g, const refusal *r, int n) {
    for (int i = 0; i < n; i++) {
        const si_gnode *f = r[i].first;
        const char *name = f->name && *f->name ? f->name : g->values[f->out].name;
        char line[1024];
        int k = snprintf(line, sizeof line, "\n  %s ×%d (first: %s): %s", f->op_type, r[i].count,
                         name, r[i].why);
        if (k < 0) continue;
        if ((size_t)k >= sizeof line) k = (int)sizeof line - 1;
        *msg = si_xrealloc(*msg, *len + (size_t)k + 1);
        memcpy(*msg + *len, line, (size_t)k + 1);
        *len += (size_t)k;
    }
}

si_status si_engine_check_backend(si_graph *g, const si_backend *be, const si_engine_opts *opts) {
    if (!be->supports_op) return SI_OK;
    if (g->inferred_batch < 0) {
        si_status st = si_graph_infer(g, 1);
        if (st != SI_OK) return st;
    }
    si_engine_opts o = {0};
    if (opts) o = *opts;
    refusal *r = si_xcalloc((size_t)g->n_nodes + 1, sizeof *r);
    int n = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *nd = &g->nodes[j];
        char why[sizeof r->why] = "";
        if (nd->op == SI_OP_HOST || be->supports_op(g, nd, &o, why, sizeof why)) continue;
        int i = 0;
        while (i < n && (strcmp(r[i].first->op_type, nd->op_type) || strcmp(r[i].why, why))) i++;
        if (i == n) {
            r[n].first = nd;
            memcpy(r[n].why, why, sizeof why);
            n++;
        }
        r[i].count++;
    }
    if (n == 0) {
        free(r);
        return SI_OK;
    }
    int types = 0; /* groups of a type already counted share its name */
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < i && strcmp(r[k].first->op_type, r[i].first->op_type)) k++;
        types += k == i;
    }
    char *msg = NULL;
    size_t len = 0;
    append_groups(&msg, &len, g, r, n);
    si_status st =
        si_error(SI_ERR_UNSUPPORTED, "the %s backend cannot run %d operator type%s of %s:%s",
                 be->name, types, types > 1 ? "s" : "", g->path, msg);
    free(msg);
    free(r);
    return st;
}

si_status si_engine_check(si_graph *g, const char *backend, const si_engine_opts *opts) {
    const si_backend *be = si_engine_backend(backend);
    if (!be)
        return si_error(SI_ERR_ARG, "unknown backend '%s' (this build has: %s)", backend,
                        si_engine_backends());
    return si_engine_check_backend(g, be, opts);
}

si_status si_engine_create_opts(si_graph *g, const char *backend, int max_batch,
                                const si_engine_opts *opts, si_engine **out) {
    *out = NULL;
    const si_backend *be = si_engine_backend(backend);
    if (!be) {
        si_graph_free(g);
        return si_error(SI_ERR_ARG, "unknown backend '%s' (this build has: %s)", backend,
                        si_engine_backends());
    }
    si_engine_opts o = {0};
    if (opts) o = *opts;
    if (be == &si_cpu_backend && o.precision != SI_PREC_FP32) {
        si_graph_free(g);
        return si_error(SI_ERR_ARG, "the cpu backend runs fp32 only (--precision %s asked)",
                        si_precision_name(o.precision));
    }
    if (o.slots <= 0) o.slots = SI_ENGINE_SLOTS_DEFAULT;
    if (o.workspace_bytes == 0) o.workspace_bytes = SI_ENGINE_WORKSPACE_DEFAULT;
    if (max_batch < 1) {
        si_graph_free(g);
        return si_error(SI_ERR_ARG, "batch size must be at least 1");
    }
    /* shapes for the largest batch, then the backend's word on every node before it allocates */
    si_status st = si_graph_infer(g, max_batch);
    if (st == SI_OK) st = si_engine_check_backend(g, be, &o);
    if (st != SI_OK) {
        si_graph_free(g);
        return st;
    }
    si_engine *e = si_xcalloc(1, sizeof *e);
    e->g = g;
    e->be = be;
    e->max_batch = max_batch;
    e->opts = o;
    e->host_in = si_xcalloc((size_t)g->n_inputs, sizeof *e->host_in);
    e->host_out = si_xcalloc((size_t)g->n_outputs, sizeof *e->host_out);
    if ((st = be->init(e)) != SI_OK) {
        si_engine_free(e);
        return st;
    }
    *out = e;
    return SI_OK;
}

void si_engine_free(si_engine *e) {
    if (!e) return;
    if (e->be && e->be->release) e->be->release(e);
    free(e->host_in);
    free(e->host_out);
    free(e->node_seconds);
    si_graph_free(e->g);
    free(e);
}

float *si_engine_input(si_engine *e, int i) {
    SI_ASSERT(i >= 0 && i < e->g->n_inputs);
    return e->host_in[i];
}

si_status si_engine_run(si_engine *e, int batch) {
    if (batch < 1 || batch > e->max_batch)
        return si_error(SI_ERR_ARG, "batch of %d rows, engine planned for 1..%d", batch,
                        e->max_batch);
    /* shapes (and host values) follow the batch; only a change of batch size re-infers */
    si_status st = si_graph_infer(e->g, batch);
    if (st != SI_OK) return st;
    return e->be->run(e, batch);
}

const float *si_engine_output(si_engine *e, int i, si_shape *shape) {
    SI_ASSERT(i >= 0 && i < e->g->n_outputs);
    if (shape) *shape = e->g->values[e->g->outputs[i]].shape;
    return e->host_out[i];
}

uint8_t *si_engine_pixels(si_engine *e, int slot) {
    SI_ASSERT(slot >= 0 && slot < e->n_slots);
    return e->be->pixels(e, slot);
}

bool si_engine_pack(si_engine *e, int slot, si_slot_pack *p) {
    SI_ASSERT(slot >= 0 && slot < e->n_slots);
    memset(p, 0, sizeof *p);
    if (e->opts.pack_per_image == 0 || !e->be->pack) return false;
    return e->be->pack(e, slot, p);
}

static si_status check_rows(const si_engine *e, int slot, int rows) {
    SI_ASSERT(slot >= 0 && slot < e->n_slots);
    if (rows < 1 || rows > e->max_batch)
        return si_error(SI_ERR_ARG, "batch of %d rows, engine planned for 1..%d", rows,
                        e->max_batch);
    return SI_OK;
}

si_status si_engine_submit(si_engine *e, int slot, int rows) {
    si_status st = check_rows(e, slot, rows);
    return st == SI_OK ? e->be->submit(e, slot, rows, false, 0) : st;
}

si_status si_engine_submit_packed(si_engine *e, int slot, int rows, size_t upload) {
    SI_ASSERT(e->opts.pack_per_image > 0 && e->be->pack);
    si_status st = check_rows(e, slot, rows);
    return st == SI_OK ? e->be->submit(e, slot, rows, true, upload) : st;
}

si_status si_engine_slot_times(si_engine *e, int slot, double *t0, double *t1) {
    SI_ASSERT(slot >= 0 && slot < e->n_slots);
    return e->be->times(e, slot, t0, t1);
}

si_status si_engine_collect(si_engine *e, int slot, const float **outs) {
    SI_ASSERT(slot >= 0 && slot < e->n_slots);
    return e->be->collect(e, slot, outs);
}

bool si_engine_on_gpu(const si_engine *e) {
    return e->be != &si_cpu_backend;
}

int si_engine_output_dtype(const si_engine *e, int i) {
    SI_ASSERT(i >= 0 && i < e->g->n_outputs);
    return e->g->values[e->g->outputs[i]].dtype;
}

const si_graph *si_engine_graph(const si_engine *e) {
    return e->g;
}

int si_engine_max_batch(const si_engine *e) {
    return e->max_batch;
}

int si_engine_slots(const si_engine *e) {
    return e->n_slots;
}

bool si_engine_synchronous(const si_engine *e) {
    return e->synchronous;
}

const si_engine_opts *si_engine_options(const si_engine *e) {
    return &e->opts;
}

const si_engine_memory *si_engine_mem(const si_engine *e) {
    return &e->mem;
}

size_t si_engine_activation_bytes(const si_engine *e) {
    return e->activation_bytes;
}

void si_engine_profile(si_engine *e) {
    if (!e->node_seconds) e->node_seconds = si_xcalloc((size_t)e->g->n_nodes + 1, sizeof(double));
    memset(e->node_seconds, 0, sizeof(double) * (size_t)e->g->n_nodes);
}

const double *si_engine_node_seconds(const si_engine *e) {
    return e->node_seconds;
}
