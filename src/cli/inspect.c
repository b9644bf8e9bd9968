/* `shardinfer inspect MODEL`: what the engine makes of a model (ops, shapes, parameters, FLOPs,
 * planned memory per batch size, or every unsupported node at once), and `shardinfer bench`:
 * the engine alone on random input, for comparing backends and runtimes. */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/engine.h"
#include "io/source.h"
#include "engine/memplan.h"

static void print_shape(const si_value *v, bool symbolic_batch) {
    printf("(");
    for (int d = 0; d < v->shape.ndim; d++) {
        if (d == 0 && symbolic_batch)
            printf("N");
        else
            printf("%lld", (long long)v->shape.dims[d]);
        printf("%s", d + 1 < v->shape.ndim ? ", " : "");
    }
    printf(")");
}

/* Multiply-adds x 2 of the node at the current shapes (elementwise ops count one per output). */
static double node_flops(const si_graph *g, const si_gnode *n) {
    const si_shape *y = &g->values[n->out].shape;
    double out = (double)si_shape_numel(y);
    switch (n->op) {
    case SI_OP_CONV:
        return 2.0 * out * (double)(n->conv.c / n->conv.group) * n->conv.kh * n->conv.kw;
    case SI_OP_GEMM: {
        const si_shape *b = &g->values[n->in[1]].shape;
        return 2.0 * out * (double)(n->trans_b ? b->dims[1] : b->dims[0]);
    }
    case SI_OP_MATMUL: {
        const si_shape *a = &g->values[n->in[0]].shape;
        return 2.0 * out * (double)a->dims[a->ndim - 1];
    }
    case SI_OP_MAXPOOL:
    case SI_OP_AVGPOOL: return out * n->pool.kh * n->pool.kw;
    case SI_OP_VIEW:
    case SI_OP_HOST: return 0;
    default: return out;
    }
}

static bool parse_batches(const char *s, int *b, int *n) {
    *n = 0;
    while (*s && *n < 16) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536) return false;
        b[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return *n > 0;
}

int si_cli_inspect(int argc, char **argv) {
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int batches[16] = {1, 8, 32, 256}, nb = 4, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:h", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: shardinfer inspect MODEL.onnx [--batch 1,8,32,256]\n"
                   "       shardinfer inspect SET   (an HDF5 image set, list file, glob or "
                   "directory)\n");
            return SI_EXIT_OK;
        }
        if (c == 'b' && parse_batches(optarg, batches, &nb)) continue;
        fprintf(stderr, "shardinfer inspect: %s '%s' (see shardinfer inspect --help)\n",
                c == 'b' ? "--batch expects sizes like 1,8,32:" : "unknown option",
                c == 'b' ? optarg : argv[optind - 1]);
        return SI_EXIT_USAGE;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "shardinfer inspect: expected one MODEL.onnx\n");
        return SI_EXIT_USAGE;
    }
    const char *path = argv[optind];
    size_t len = strlen(path);
    if (len < 5 || strcmp(path + len - 5, ".onnx")) { /* an image set: describe it */
        si_source *src;
        if (si_source_open(path, NULL, &src) != SI_OK || si_source_describe(src, stdout) != SI_OK) {
            si_log_error("%s", si_error_msg());
            return SI_EXIT_FAIL;
        }
        si_source_close(src);
        return SI_EXIT_OK;
    }
    si_model_proto *m;
    si_graph *g = NULL;
    if (si_model_proto_load(path, &m) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    printf("model: %s\n  ir_version %lld, opset %lld, producer '%s', %d ONNX nodes, %d "
           "initializers\n",
           path, (long long)m->ir_version, (long long)m->opset, m->producer ? m->producer : "",
           m->n_nodes, m->n_inits);
    /* ONNX op types with counts, before any pass */
    printf("  ONNX ops:");
    for (int i = 0; i < m->n_nodes; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(m->nodes[j].op_type, m->nodes[i].op_type);
        if (seen) continue;
        int cnt = 0;
        for (int j = i; j < m->n_nodes; j++)
            cnt += !strcmp(m->nodes[j].op_type, m->nodes[i].op_type);
        printf(" %s x%d", m->nodes[i].op_type, cnt);
    }
    printf("\n");
    si_status st = si_graph_build(m, NULL, &g);
    si_model_proto_free(m);
    if (st != SI_OK) { /* lists every unsupported node at once */
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    /* the numbers below are the CPU backend's (its arena plan), so it is the one asked */
    if ((st = si_graph_infer(g, 1)) != SI_OK || (st = si_engine_check(g, "cpu", NULL)) != SI_OK) {
        si_log_error("%s", si_error_msg());
        si_graph_free(g);
        return SI_EXIT_FAIL;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const si_value *v = &g->values[g->inputs[i]];
        printf("  input  %-24s float32 ", v->name);
        print_shape(v, v->batch_dim);
        printf("\n");
    }
    bool sym = g->n_inputs > 0 && g->values[g->inputs[0]].batch_dim;
    for (int i = 0; i < g->n_outputs; i++) {
        const si_value *v = &g->values[g->outputs[i]];
        printf("  output %-24s %s ", v->name, si_dtype_name(v->dtype));
        print_shape(v, sym && v->shape.ndim > 0);
        printf("\n");
    }
    printf("passes: %d constants folded, %d dead nodes removed, %d BatchNorms folded into Conv, "
           "%d activations fused, %d residual Adds fused\n",
           g->folded_consts, g->removed_nodes, g->folded_bn, g->fused_act, g->fused_residual);
    /* engine nodes by (fused) type */
    printf("engine nodes (%d):\n", g->n_nodes);
    bool *done = si_xcalloc((size_t)g->n_nodes + 1, 1);
    for (int i = 0; i < g->n_nodes; i++) {
        if (done[i]) continue;
        int cnt = 0;
        for (int j = i; j < g->n_nodes; j++)
            if (!done[j] && !strcmp(g->nodes[j].op_type, g->nodes[i].op_type)) done[j] = 1, cnt++;
        printf("  %5d  %s%s\n", cnt, g->nodes[i].op_type,
               g->nodes[i].op == SI_OP_HOST ? "  (shape arithmetic, on the host)" : "");
    }
    free(done);
    double params = 0, flops = 0;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].kind == SI_VAL_CONST && g->values[i].uses > 0)
            params += (double)si_shape_numel(&g->values[i].shape);
    for (int j = 0; j < g->n_nodes; j++) flops += node_flops(g, &g->nodes[j]);
    printf("parameters: %.0f (%.1f MB as float32)\n", params, params * 4 / 1e6);
    printf("compute: %.3f GFLOP per image (batch 1; a multiply-add counts 2)\n", flops / 1e9);
    printf("planned activation memory (liveness-planned arena vs one buffer per value):\n");
    printf("  batch   arena MB   naive MB   saved\n");
    for (int i = 0; i < nb; i++) {
        if ((st = si_graph_infer(g, batches[i])) != SI_OK) {
            si_log_error("%s", si_error_msg());
            si_graph_free(g);
            return SI_EXIT_FAIL;
        }
        si_memplan p;
        si_memplan_build(g, 64, &p);
        printf("  %5d  %9.1f  %9.1f  %5.1f%%\n", batches[i], (double)p.arena_bytes / 1e6,
               (double)p.naive_bytes / 1e6,
               p.naive_bytes ? 100.0 * (1.0 - (double)p.arena_bytes / (double)p.naive_bytes) : 0.0);
        si_memplan_free(&p);
    }
    si_graph_free(g);
    return SI_EXIT_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int si_cli_bench(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"threads", required_argument, 0, 't'},
                                         {"iters", required_argument, 0, 'n'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"backend", required_argument, 0, 'B'},
                                         {"profile", no_argument, 0, 'p'},
                                         {"precision", required_argument, 0, 'P'},
                                         {"compute-only", no_argument, 0, 'C'},
                                         {"slots", required_argument, 0, 'S'},
                                         {"workspace", required_argument, 0, 'W'},
                                         {"no-graphs", no_argument, 0, 'G'},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *backend = "cpu", *prec = NULL;
    int batch = 32, threads = 0, iters = 10, warmup = 2, c;
    bool profile = false, compute_only = false;
    si_engine_opts eo = {.slots = 1};
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:b:t:n:w:h", opts, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        bool num_ok = optarg && end && !*end && v >= 0 && v <= 1000000;
        switch (c) {
        case 'm': model = optarg; continue;
        case 'B': backend = optarg; continue;
        case 'p': profile = true; continue;
        case 'P': prec = optarg; continue;
        case 'C': compute_only = true; continue;
        case 'G': eo.no_graphs = true; continue;
        case 'v': eo.verbose = true; continue;
        case 'S':
            if (num_ok && v >= 1 && v <= 16) {
                eo.slots = (int)v;
                continue;
            }
            break;
        case 'W':
            if (num_ok && v >= 1) {
                eo.workspace_bytes = (size_t)v << 20;
                continue;
            }
            break;
        case 'h':
            printf("usage: shardinfer bench --model M.onnx [--batch 32] [--threads N] "
                   "[--iters 10] [--warmup 2] [--backend cpu|cuda] [--precision fp32|fp16|bf16]\n"
                   "                       [--compute-only] [--workspace MB] [--no-graphs] "
                   "[--profile] [--verbose]\n"
                   "  times the engine alone on seeded random input and prints the median;\n"
                   "  with cuda each run uploads the inputs and downloads the outputs, unless\n"
                   "  --compute-only (the model's CUDA Graph alone); --profile adds the time per\n"
                   "  op type (on the GPU it launches op by op and waits after each)\n");
            return SI_EXIT_OK;
        case 'b':
            if (num_ok && v >= 1) {
                batch = (int)v;
                continue;
            }
            break;
        case 't':
            if (num_ok && v >= 1) {
                threads = (int)v;
                continue;
            }
            break;
        case 'n':
            if (num_ok && v >= 1) {
                iters = (int)v;
                continue;
            }
            break;
        case 'w':
            if (num_ok) {
                warmup = (int)v;
                continue;
            }
            break;
        default: break;
        }
        fprintf(stderr, "shardinfer bench: bad option '%s' (see shardinfer bench --help)\n",
                argv[optind - 1]);
        return SI_EXIT_USAGE;
    }
    if (!model || optind != argc) {
        fprintf(stderr, "shardinfer bench: --model is required\n");
        return SI_EXIT_USAGE;
    }
    if (threads) omp_set_num_threads(threads);
    threads = omp_get_max_threads();
    if (prec && (eo.precision = si_precision_parse(prec)) < 0) {
        fprintf(stderr, "shardinfer bench: --precision '%s': fp32, fp16 or bf16\n", prec);
        return SI_EXIT_USAGE;
    }
    if (!prec && !strcmp(backend, "cuda")) eo.precision = SI_PREC_FP16;
    if (compute_only && strcmp(backend, "cuda")) {
        fprintf(stderr, "shardinfer bench: --compute-only is for --backend cuda\n");
        return SI_EXIT_USAGE;
    }
    double t0 = si_now();
    si_graph *g;
    si_engine *e = NULL;
    si_status st = si_graph_load(model, NULL, &g);
    if (st == SI_OK) st = si_engine_create_opts(g, backend, batch, &eo, &e);
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    unsigned seed = 12345;
    for (int i = 0; i < e->g->n_inputs; i++) {
        int64_t n = si_shape_numel(&e->g->values[e->g->inputs[i]].shape);
        float *x = si_engine_input(e, i);
        for (int64_t k = 0; k < n; k++) { /* roughly normal, like a normalised image */
            seed = seed * 1664525u + 1013904223u;
            float u = (float)(seed >> 8) / (float)(1 << 24);
            seed = seed * 1664525u + 1013904223u;
            float v = (float)(seed >> 8) / (float)(1 << 24);
            x[k] = 2.f * (u + v - 1.f);
        }
    }
    double *ms = si_xmalloc(sizeof(double) * (size_t)iters);
    if (profile) e->node_seconds = si_xcalloc((size_t)e->g->n_nodes + 1, sizeof(double));
    double first = 0;
    for (int i = 0; i < warmup + iters && st == SI_OK; i++) {
        double t = si_now();
        st = compute_only && i > 0 ? e->be->run_compute(e) : si_engine_run(e, batch);
        double dt = (si_now() - t) * 1e3;
        if (i == 0) first = (si_now() - t0) * 1e3;
        if (i >= warmup) ms[i - warmup] = dt;
        if (i + 1 == warmup && e->node_seconds) /* profile the timed runs only */
            memset(e->node_seconds, 0, sizeof(double) * (size_t)e->g->n_nodes);
    }
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        si_engine_free(e);
        free(ms);
        return SI_EXIT_FAIL;
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
    double med = ms[iters / 2];
    printf("bench: model=%s batch=%d threads=%d backend=%s precision=%s%s median_ms=%.3f "
           "min_ms=%.3f max_ms=%.3f images_per_s=%.1f first_result_ms=%.1f arena_mb=%.1f\n",
           model, batch, threads, backend, si_precision_name(eo.precision),
           compute_only ? " compute_only=1" : "", med, ms[0], ms[iters - 1], batch * 1e3 / med,
           first, (double)e->activation_bytes / 1e6);
    if (si_engine_on_gpu(e))
        printf("bench: init_s=%.2f (plan, weights, algorithm search, graph capture, warm-up) "
               "device_planned_mb=%.1f device_in_use_mb=%.1f\n",
               e->mem.init_seconds, (double)e->mem.device_total / 1048576.0,
               (double)e->mem.device_used_after_init / 1048576.0);
    if (e->node_seconds) { /* time per (fused) op type and conv kind, largest first */
        const si_graph *pg = e->g;
        int nn = pg->n_nodes;
        char(*label)[160] = si_xmalloc(sizeof(*label) * (size_t)(nn + 1));
        for (int j = 0; j < nn; j++) {
            const si_gnode *n = &pg->nodes[j];
            const char *kind = "";
            if (n->op == SI_OP_CONV)
                kind = n->conv.c / n->conv.group == 1 && n->conv.m == n->conv.group ? " [depthwise]"
                       : n->conv.kh == 1 && n->conv.kw == 1                         ? " [1x1]"
                                                                                    : " [kxk]";
            snprintf(label[j], sizeof label[j], "%s%s", n->op_type, kind);
        }
        double total = 0;
        for (int j = 0; j < nn; j++) total += e->node_seconds[j];
        bool *done = si_xcalloc((size_t)nn + 1, 1);
        printf("profile: %% of engine time per op type (%d timed runs)\n", iters);
        for (;;) {
            int best = -1;
            double best_t = -1;
            for (int j = 0; j < nn; j++) {
                if (done[j]) continue;
                double t = 0;
                for (int k = j; k < nn; k++)
                    if (!done[k] && !strcmp(label[k], label[j])) t += e->node_seconds[k];
                if (t > best_t) best_t = t, best = j;
            }
            if (best < 0) break;
            int cnt = 0;
            for (int k = best; k < nn; k++)
                if (!done[k] && !strcmp(label[k], label[best])) done[k] = 1, cnt++;
            printf("  %5.1f%%  %8.2f ms/run  x%-3d %s\n", total > 0 ? 100 * best_t / total : 0,
                   best_t * 1e3 / iters, cnt, label[best]);
        }
        free(done);
        free(label);
    }
    free(ms);
    si_engine_free(e);
    return SI_EXIT_OK;
}
