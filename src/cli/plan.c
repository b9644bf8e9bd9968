/* `shardinfer plan`: the GPU memory budget of a run, before the run. The numbers come from the
 * same planner the CUDA backend allocates from (src/engine/devplan.c), so they hold on the GPU;
 * this command itself needs no GPU. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/devplan.h"
#include "engine/engine.h"
#include "pipeline/pipeline.h"

static double mib(size_t b) {
    return (double)b / 1048576.0;
}

static const char plan_usage[] =
    "usage: shardinfer plan --model M.onnx [--batch 256] [--precision fp16|bf16|fp32] [--slots 3]\n"
    "                       [--workspace MB] [--memory-limit GiB] [--resize-on cpu|gpu]\n"
    "                       [--pack-kb KiB]\n"
    "  prints the GPU memory a `run --backend cuda` with these settings allocates, by component\n"
    "  (weights once; per slot: input buffers, activations, workspace, staging), and the\n"
    "  largest batch that fits --memory-limit (default: 80 GiB, one H100)\n";

/* What the backend carves out of the two allocations, byte offsets as the plan gives them. */
static void print_carve(const si_devplan *p) {
    const si_devplan_carve *d = &p->dev, *h = &p->pin;
    printf("  carved: the device block holds the weights at 0, then slot k at %zu + k * %zu:\n",
           si_devplan_slot_dev(p, 0), p->slot_bytes);
    printf("    arena %zu, scratch %zu, workspace %zu, input %zu, output %zu", d->arena, d->scratch,
           d->workspace, d->input, d->output);
    if (p->pack) printf(", packed images %zu, items %zu", d->pack, d->items);
    printf("\n  carved: the pinned block holds slot k at k * %zu:\n", p->pinned);
    printf("    input %zu, output %zu", h->input, h->output);
    if (p->pack) printf(", packed images %zu, items %zu", h->pack, h->items);
    printf("\n");
}

int si_cli_plan(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"precision", required_argument, 0, 'P'},
                                         {"slots", required_argument, 0, 'S'},
                                         {"workspace", required_argument, 0, 'W'},
                                         {"memory-limit", required_argument, 0, 'L'},
                                         {"resize-on", required_argument, 0, 'R'},
                                         {"pack-kb", required_argument, 0, 'K'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    long batch = 256, slots = 3, ws_mb = 256, pack_kb = 0;
    bool gpu_resize = SI_GPU_RESIZE_DEFAULT;
    double limit_gib = 80;
    int prec = SI_PREC_FP16, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:b:h", opts, NULL)) != -1) {
        bool ok = true;
        char *end = NULL;
        switch (c) {
        case 'm': model = optarg; break;
        case 'b': ok = si_parse_int(optarg, 1, 1 << 20, &batch); break;
        case 'S': ok = si_parse_int(optarg, 1, 16, &slots); break;
        case 'W': ok = si_parse_int(optarg, 0, 1 << 20, &ws_mb); break;
        case 'P': ok = (prec = si_precision_parse(optarg)) >= 0; break;
        case 'R':
            ok = !strcmp(optarg, "cpu") || !strcmp(optarg, "gpu");
            gpu_resize = !strcmp(optarg, "gpu");
            break;
        case 'K': ok = si_parse_int(optarg, 1, 1 << 20, &pack_kb); break;
        case 'L':
            limit_gib = strtod(optarg, &end);
            ok = end && !*end && limit_gib > 0;
            break;
        case 'h': fputs(plan_usage, stdout); return SI_EXIT_OK;
        default: ok = false;
        }
        if (!ok) {
            fprintf(stderr,
                    "shardinfer plan: bad option or value '%s' (see shardinfer plan --help)\n",
                    argv[optind - 1]);
            return SI_EXIT_USAGE;
        }
    }
    if (!model || optind != argc) {
        fprintf(stderr, "shardinfer plan: --model is required\n%s", plan_usage);
        return SI_EXIT_USAGE;
    }
    si_graph *g;
    si_status st = si_graph_load(model, NULL, &g);
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    const si_value *in = &g->values[g->inputs[0]];
    bool pixels = g->n_inputs == 1 && in->shape.ndim == 4 && in->shape.dims[1] == 3;
    size_t elem = prec == SI_PREC_FP32 ? 4 : 2, ws = (size_t)ws_mb << 20;
    si_devplan p;
    size_t ppi = 0; /* --resize-on gpu: the packed buffer per image */
    if (gpu_resize && pixels) {
        int h = (int)in->shape.dims[2], w = (int)in->shape.dims[3];
        ppi = pack_kb > 0 ? (size_t)pack_kb << 10
                          : SI_RS_PACK_DEFAULT(si_pipeline_default_resize(h, w));
    }
    /* the refusal `run --backend cuda` would give, before any number (a build without CUDA has
     * no cuda backend to ask) */
    const si_backend *cuda = si_engine_backend("cuda");
    si_engine_opts eo = {.precision = prec,
                         .slots = (int)slots,
                         .workspace_bytes = ws,
                         .pixels = pixels,
                         .pack_per_image = ppi};
    if (cuda && (st = si_graph_infer(g, (int)batch)) == SI_OK)
        st = si_engine_check_backend(g, cuda, &eo);
    if (st != SI_OK ||
        (st = si_devplan_build(g, (int)batch, elem, (int)slots, ws, pixels, ppi, &p)) != SI_OK) {
        si_log_error("%s", si_error_msg());
        si_graph_free(g);
        return SI_EXIT_FAIL;
    }
    size_t limit = (size_t)(limit_gib * 1073741824.0);
    printf("plan: %s, batch %ld, %s, %ld slots, workspace %ld MiB per slot\n", model, batch,
           si_precision_name(prec), slots, ws_mb);
    printf("  %-34s %12s %12s\n", "component", "per slot MiB", "total MiB");
    printf("  %-34s %12s %12.1f\n", "weights (once)", "-", mib(p.weights));
    printf("  %-34s %12.1f %12.1f\n", pixels ? "input buffers (uint8 pixels)" : "input buffers",
           mib(p.input), mib(p.input * (size_t)slots));
    if (p.pack)
        printf("  %-34s %12.1f %12.1f\n", "decoded images for the GPU resize", mib(p.pack),
               mib(p.pack * (size_t)slots));
    printf("  %-34s %12.1f %12.1f\n", "activations (liveness-planned arena)", mib(p.activations),
           mib(p.activations * (size_t)slots));
    printf("  %-34s %12.1f %12.1f\n", "workspace (cuDNN, cuBLASLt)", mib(p.workspace),
           mib(p.workspace * (size_t)slots));
    printf("  %-34s %12.1f %12.1f\n", "staging (float outputs, layout scratch)",
           mib(p.output + p.scratch), mib((p.output + p.scratch) * (size_t)slots));
    printf("  %-34s %12s %12.1f\n", "total on the GPU", "", mib(p.device_total));
    printf("  %-34s %12.1f %12.1f\n", "pinned host memory", mib(p.pinned), mib(p.pinned_total));
    printf("  activations: %.1f MiB per slot where one buffer per tensor would take %.1f MiB\n",
           mib(p.activations), mib(p.acts.naive_bytes));
    print_carve(&p);
    printf("  plus the CUDA context and the libraries' own memory (about 500-600 MiB on an H100, "
           "measured)\n");
    si_devplan_free(&p);
    int best = si_devplan_max_batch(g, elem, (int)slots, ws, pixels, ppi, limit);
    printf("  largest batch within %.1f GiB: %d\n", limit_gib, best);
    si_graph_free(g);
    return SI_EXIT_OK;
}
