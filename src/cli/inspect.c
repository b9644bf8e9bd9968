/* `shardinfer inspect MODEL`: what the engine makes of a model (ops, shapes, parameters, FLOPs,
 * planned memory per batch size, or every unsupported node at once); `shardinfer inspect SET`:
 * what an image set holds (io/source_describe.c). The report is this command's own, printed in
 * steps from what the engine's graph and memory planner give. */
#include <getopt.h>
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
    case SI_OP_ATTENTION: { /* Q K^T and P V: (T x S) x (D + Dv) multiply-adds per matrix */
        si_attn_view op[4];
        si_attention_operands(g, n, op);
        const si_shape *q = &op[0].shape, *v = &op[2].shape;
        double s = (double)v->dims[v->ndim - 2], dq = (double)q->dims[q->ndim - 1];
        return 2.0 * out / (double)v->dims[v->ndim - 1] * s * (dq + (double)v->dims[v->ndim - 1]);
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

/* Parses argv into batches/nb and *path; returns -1 to go on, else the exit code. */
static int parse_inspect(int argc, char **argv, int *batches, int *nb, const char **path) {
    static const struct option opts[] = {
        {"batch", required_argument, 0, 'b'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:h", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: shardinfer inspect MODEL.onnx [--batch 1,8,32,256]\n"
                   "       shardinfer inspect SET   (an HDF5 image set, list file, glob or "
                   "directory)\n");
            return SI_EXIT_OK;
        }
        if (c == 'b' && parse_batches(optarg, batches, nb)) continue;
        fprintf(stderr, "shardinfer inspect: %s '%s' (see shardinfer inspect --help)\n",
                c == 'b' ? "--batch expects sizes like 1,8,32:" : "unknown option",
                c == 'b' ? optarg : argv[optind - 1]);
        return SI_EXIT_USAGE;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "shardinfer inspect: expected one MODEL.onnx\n");
        return SI_EXIT_USAGE;
    }
    *path = argv[optind];
    return -1;
}

/* An image set (anything not ending in .onnx): what io/source.h makes of it. */
static int inspect_set(const char *path) {
    si_source *src;
    if (si_source_open(path, NULL, &src) != SI_OK || si_source_describe(src, stdout) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    si_source_close(src);
    return SI_EXIT_OK;
}

/* The model file as ONNX gives it, before any pass: header and op types with counts. */
static void print_proto(const char *path, const si_model_proto *m) {
    printf("model: %s\n  ir_version %lld, opset %lld, producer '%s', %d ONNX nodes, %d "
           "initializers\n",
           path, (long long)m->ir_version, (long long)m->opset, m->producer ? m->producer : "",
           m->n_nodes, m->n_inits);
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
}

/* Inputs and outputs with their shapes (N for a symbolic batch), and what the passes did. */
static void print_io(const si_graph *g) {
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
           "%d activations fused, %d residual Adds fused, %d bias Adds fused into MatMul, "
           "%d attention patterns fused, %d attention operands in place, %d scales folded into "
           "MatMul, %d Pads/Slices that move nothing made views, %d Concat inputs read through "
           "their Slice, %d one-token Gathers moved up (the nodes before them run one row an "
           "image), %d Gemms made Linear and Transposes moved across Linear layers, %d "
           "Softmaxes shaped like attention left unfused, %d attention masks of zeros dropped, "
           "%d rotary embeddings made one node, %d Muls and Adds fused into LayerNorm\n",
           g->folded_consts, g->removed_nodes, g->folded_bn, g->fused_act, g->fused_residual,
           g->fused_bias, g->fused_attention, g->attention_views, g->folded_scale,
           g->dropped_copies, g->concat_slices, g->token_early, g->linear_moves,
           g->attention_missed, g->zero_masks, g->fused_rotary, g->fused_norm);
}

/* Engine nodes by (fused) type, then parameters and FLOPs at batch 1. */
static void print_nodes(const si_graph *g) {
    printf("engine nodes (%d):\n", g->n_nodes);
    bool *done = si_xcalloc((size_t)g->n_nodes + 1, 1);
    for (int i = 0; i < g->n_nodes; i++) {
        if (done[i]) continue;
        int cnt = 0;
        for (int j = i; j < g->n_nodes; j++)
            if (!done[j] && !strcmp(g->nodes[j].op_type, g->nodes[i].op_type) &&
                (g->nodes[j].op == SI_OP_HOST) == (g->nodes[i].op == SI_OP_HOST))
                done[j] = 1, cnt++;
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
}

/* The fused attention nodes at batch 1: their shapes, and the T x S scores per image that the
 * unfused pattern would hold in memory and the fused kernel keeps on chip. */
static void print_attention(const si_graph *g) {
    int n = 0;
    double scores = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *a = &g->nodes[j];
        if (a->op != SI_OP_ATTENTION) continue;
        si_attn_view op[4];
        si_attention_operands(g, a, op);
        const si_shape *q = &op[0].shape, *v = &op[2].shape;
        int nd = q->ndim;
        double mats = (double)(si_shape_numel(q) / (q->dims[nd - 1] * q->dims[nd - 2]));
        double s = mats * (double)q->dims[nd - 2] * (double)v->dims[nd - 2];
        if (n++ == 0)
            printf("fused attention (softmax(scale Q K^T [+ bias]) V, scores kept on chip):\n");
        if (n <= 4)
            printf("  %-40s %.0f x (%lld x %lld keys, head %lld)%s%s\n", a->name, mats,
                   (long long)q->dims[nd - 2], (long long)v->dims[nd - 2],
                   (long long)q->dims[nd - 1], si_attention_bias(a) >= 0 ? " + bias" : "",
                   a->qk_norm ? ", q and k normalised" : "");
        scores += s;
    }
    if (!n) return;
    if (n > 4) printf("  ... %d nodes in all\n", n);
    if (g->attention_views)
        printf("  %d of %d operands read or written in place (the head split and merge copy "
               "nothing)\n",
               g->attention_views, 4 * n);
    printf(
        "  attention scratch: 0 bytes (unfused, the pattern writes %.1f MB of scores per image in "
        "float32)\n",
        scores * 4 / 1e6);
}

/* The memory planner's arena per batch size against one buffer per value (re-infers g). */
static si_status print_memplan(si_graph *g, const int *batches, int nb) {
    printf("planned activation memory (liveness-planned arena vs one buffer per value):\n");
    printf("  batch   arena MB   naive MB   saved\n");
    for (int i = 0; i < nb; i++) {
        si_status st = si_graph_infer(g, batches[i]);
        if (st != SI_OK) return st;
        si_memplan p;
        si_memplan_build(g, 64, &p);
        printf("  %5d  %9.1f  %9.1f  %5.1f%%\n", batches[i], (double)p.arena_bytes / 1e6,
               (double)p.naive_bytes / 1e6,
               p.naive_bytes ? 100.0 * (1.0 - (double)p.arena_bytes / (double)p.naive_bytes) : 0.0);
        si_memplan_free(&p);
    }
    return SI_OK;
}

/* A model: prints each part of the report as soon as the step it needs has succeeded. */
static int inspect_model(const char *path, const int *batches, int nb) {
    si_model_proto *m;
    si_graph *g = NULL;
    if (si_model_proto_load(path, &m) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    print_proto(path, m);
    si_status st = si_graph_build(m, NULL, &g);
    si_model_proto_free(m);
    if (st != SI_OK) { /* lists every unsupported node at once */
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    /* the numbers below are the CPU backend's (its arena plan), so it is the one asked */
    if ((st = si_graph_infer(g, 1)) == SI_OK && (st = si_engine_check(g, "cpu", NULL)) == SI_OK) {
        print_io(g);
        print_nodes(g);
        print_attention(g);
        st = print_memplan(g, batches, nb);
    }
    if (st != SI_OK) si_log_error("%s", si_error_msg());
    si_graph_free(g);
    return st == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}

int si_cli_inspect(int argc, char **argv) {
    int batches[16] = {1, 8, 32, 256}, nb = 4;
    const char *path = NULL;
    int code = parse_inspect(argc, argv, batches, &nb, &path);
    if (code >= 0) return code;
    size_t len = strlen(path);
    if (len < 5 || strcmp(path + len - 5, ".onnx")) return inspect_set(path);
    return inspect_model(path, batches, nb);
}
