/* `shardinfer bench --model M.onnx`: the engine alone on random input, for comparing backends and
 * runtimes. Turns the options into an si_engine_bench_cfg and engine options, times the engine with
 * src/engine/bench.c and prints the `bench:` lines (bench/ scripts parse them) and, with
 * --profile, the time per op type. */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/bench.h"
#include "engine/engine.h"

typedef struct {
    const char *model, *backend, *prec;
    int threads;
    si_engine_bench_cfg run;
    si_engine_opts eo;
} bench_args;

static const char bench_usage[] =
    "usage: shardinfer bench --model M.onnx [--batch 32] [--threads N] "
    "[--iters 10] [--warmup 2] [--backend cpu|cuda] [--precision fp32|fp16|bf16]\n"
    "                       [--compute-only] [--workspace MB] [--no-graphs] "
    "[--profile] [--verbose] [--autotune-cache DIR|off]\n"
    "  times the engine alone on seeded random input and prints the median;\n"
    "  with cuda each run uploads the inputs and downloads the outputs, unless\n"
    "  --compute-only (the model's CUDA Graph alone); --profile adds the time per\n"
    "  op type (on the GPU it launches op by op and waits after each), and with\n"
    "  --verbose the 25 slowest nodes by name\n";

/* One option into a; false if its value is out of range. */
static bool set_option(bench_args *a, int c, const char *arg) {
    char *end = NULL;
    long v = arg ? strtol(arg, &end, 10) : 0;
    bool num_ok = arg && end && !*end && v >= 0 && v <= 1000000;
    switch (c) {
    case 'm': a->model = arg; return true;
    case 'B': a->backend = arg; return true;
    case 'p': a->run.profile = true; return true;
    case 'P': a->prec = arg; return true;
    case 'C': a->run.compute_only = true; return true;
    case 'G': a->eo.no_graphs = true; return true;
    case 'v': a->eo.verbose = true; return true;
    case 'A': return arg && *arg && (a->eo.autotune_dir = arg, true);
    case 'S': return num_ok && v >= 1 && v <= 16 && (a->eo.slots = (int)v, true);
    case 'W': return num_ok && v >= 1 && (a->eo.workspace_bytes = (size_t)v << 20, true);
    case 'b': return num_ok && v >= 1 && (a->run.batch = (int)v, true);
    case 't': return num_ok && v >= 1 && (a->threads = (int)v, true);
    case 'n': return num_ok && v >= 1 && (a->run.iters = (int)v, true);
    case 'w': return num_ok && (a->run.warmup = (int)v, true);
    default: return false;
    }
}

/* Parses argv into a; returns -1 to go on, else the exit code (after --help or a bad option). */
static int parse_bench(int argc, char **argv, bench_args *a) {
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
                                         {"autotune-cache", required_argument, 0, 'A'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:b:t:n:w:h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(bench_usage, stdout);
            return SI_EXIT_OK;
        }
        if (set_option(a, c, optarg)) continue;
        fprintf(stderr, "shardinfer bench: bad option '%s' (see shardinfer bench --help)\n",
                argv[optind - 1]);
        return SI_EXIT_USAGE;
    }
    if (!a->model || optind != argc) {
        fprintf(stderr, "shardinfer bench: --model is required\n");
        return SI_EXIT_USAGE;
    }
    if (a->threads) omp_set_num_threads(a->threads);
    a->threads = omp_get_max_threads();
    if (a->prec && (a->eo.precision = si_precision_parse(a->prec)) < 0) {
        fprintf(stderr, "shardinfer bench: --precision '%s': fp32, fp16 or bf16\n", a->prec);
        return SI_EXIT_USAGE;
    }
    if (!a->prec && !strcmp(a->backend, "cuda")) a->eo.precision = SI_PREC_FP16;
    if (a->run.compute_only && strcmp(a->backend, "cuda")) {
        fprintf(stderr, "shardinfer bench: --compute-only is for --backend cuda\n");
        return SI_EXIT_USAGE;
    }
    return -1;
}

/* "Conv [depthwise]" etc. into label: the op type, and for a Conv its kind. */
static void op_label(const si_gnode *n, char *label, size_t cap) {
    const char *kind = "";
    if (n->op == SI_OP_CONV)
        kind = n->conv.c / n->conv.group == 1 && n->conv.m == n->conv.group ? " [depthwise]"
               : n->conv.kh == 1 && n->conv.kw == 1                         ? " [1x1]"
                                                                            : " [kxk]";
    snprintf(label, cap, "%s%s", n->op_type, kind);
}

/* The time per (fused) op type and conv kind, largest first, from si_engine_node_seconds(e). */
static void print_profile(const si_engine *e, int iters) {
    const si_graph *pg = si_engine_graph(e);
    int nn = pg->n_nodes;
    char(*label)[160] = si_xmalloc(sizeof(*label) * (size_t)(nn + 1));
    for (int j = 0; j < nn; j++) op_label(&pg->nodes[j], label[j], sizeof label[j]);
    double total = 0;
    for (int j = 0; j < nn; j++) total += si_engine_node_seconds(e)[j];
    bool *done = si_xcalloc((size_t)nn + 1, 1);
    printf("profile: %% of engine time per op type (%d timed runs)\n", iters);
    for (;;) {
        int best = -1;
        double best_t = -1;
        for (int j = 0; j < nn; j++) {
            if (done[j]) continue;
            double t = 0;
            for (int k = j; k < nn; k++)
                if (!done[k] && !strcmp(label[k], label[j])) t += si_engine_node_seconds(e)[k];
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

/* With --verbose: the `top` slowest nodes one by one, with their names and output shapes. */
static void print_slowest(const si_engine *e, int iters, int top) {
    const si_graph *pg = si_engine_graph(e);
    int nn = pg->n_nodes;
    bool *shown = si_xcalloc((size_t)nn + 1, 1);
    printf("profile: the %d slowest nodes\n", top);
    for (int r = 0; r < top; r++) {
        int best = -1;
        for (int j = 0; j < nn; j++)
            if (!shown[j] &&
                (best < 0 || si_engine_node_seconds(e)[j] > si_engine_node_seconds(e)[best]))
                best = j;
        if (best < 0 || si_engine_node_seconds(e)[best] <= 0) break;
        shown[best] = true;
        const si_gnode *n = &pg->nodes[best];
        char label[160], shape[96] = "";
        op_label(n, label, sizeof label);
        const si_shape *s = &pg->values[n->out].shape;
        for (int k = 0, o = 0; k < s->ndim && o < (int)sizeof shape - 24; k++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%lld", k ? "x" : "",
                          (long long)s->dims[k]);
        printf("  %8.3f ms/run  %-28s %-44s %s\n", si_engine_node_seconds(e)[best] * 1e3 / iters,
               shape, label, n->name);
    }
    free(shown);
}

/* The `bench:` lines; ms sorted, first_ms from the start of loading to the first result. */
static void print_result(const bench_args *a, const si_engine *e, const double *ms,
                         double first_ms) {
    int iters = a->run.iters, batch = a->run.batch;
    double med = ms[iters / 2];
    printf("bench: model=%s batch=%d threads=%d backend=%s precision=%s%s median_ms=%.3f "
           "min_ms=%.3f max_ms=%.3f images_per_s=%.1f first_result_ms=%.1f arena_mb=%.1f\n",
           a->model, batch, a->threads, a->backend, si_precision_name(a->eo.precision),
           a->run.compute_only ? " compute_only=1" : "", med, ms[0], ms[iters - 1],
           batch * 1e3 / med, first_ms, (double)si_engine_activation_bytes(e) / 1e6);
    const si_engine_memory *m = si_engine_mem(e);
    if (si_engine_on_gpu(e))
        printf("bench: init_s=%.2f (plan, weights, algorithm search, graph capture, warm-up) "
               "device_planned_mb=%.1f device_in_use_mb=%.1f autotune_cached=%d/%d convs "
               "%d/%d matmuls %d/%d attention\n",
               m->init_seconds, (double)m->device_total / 1048576.0,
               (double)m->device_used_after_init / 1048576.0, m->convs_cached, m->convs_tuned,
               m->matmuls_cached, m->matmuls_tuned, m->attn_cached, m->attn_tuned);
}

int si_cli_bench(int argc, char **argv) {
    bench_args a = {
        .backend = "cpu", .run = {.batch = 32, .iters = 10, .warmup = 2}, .eo = {.slots = 1}};
    si_cli_engine_switches(&a.eo.sw);
    int code = parse_bench(argc, argv, &a);
    if (code >= 0) return code;
    double t0 = si_now(), first_done = 0;
    si_graph *g;
    si_engine *e = NULL;
    si_status st = si_graph_load(a.model, NULL, &g);
    if (st == SI_OK) st = si_engine_create_opts(g, a.backend, a.run.batch, &a.eo, &e);
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    si_engine_bench_fill(e);
    double *ms = si_xmalloc(sizeof(double) * (size_t)a.run.iters);
    if ((st = si_engine_bench_time(e, &a.run, ms, &first_done)) != SI_OK) {
        si_log_error("%s", si_error_msg());
        code = SI_EXIT_FAIL;
    } else {
        print_result(&a, e, ms, (first_done - t0) * 1e3);
        if (si_engine_node_seconds(e)) print_profile(e, a.run.iters);
        if (si_engine_node_seconds(e) && a.eo.verbose) print_slowest(e, a.run.iters, 25);
        code = SI_EXIT_OK;
    }
    free(ms);
    si_engine_free(e);
    return code;
}
