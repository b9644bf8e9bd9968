/* `shardinfer plan`: the GPU memory budget of a run, before the run. The numbers come from the
 * same planner the CUDA backend allocates from (src/engine/devplan.c), so they hold on the GPU;
 * this command itself needs no GPU. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/devplan.h"
#include "decode/hwjpeg.h"
#include "engine/engine.h"
#include "pipeline/pipeline.h"

static double mib(size_t b) {
    return (double)b / 1048576.0;
}

static const char plan_usage[] =
    "usage: shardinfer plan --model M.onnx [--batch 256] [--precision fp16|bf16|fp32] [--slots 3]\n"
    "                       [--workspace MB] [--memory-limit GiB] [--resize-on cpu|gpu]\n"
    "                       [--pack-kb KiB] [--decode cpu|gpu]\n"
    "  prints the GPU memory a `run --backend cuda` with these settings allocates, by component\n"
    "  (weights once; per slot: input buffers, decode and resize buffers, activations,\n"
    "  workspace, staging), and the\n"
    "  largest batch that fits --memory-limit (default: 80 GiB, one H100)\n";

/* What the backend carves out of the two allocations, byte offsets as the plan gives them. */
static void print_carve(const si_devplan *p) {
    const si_devplan_carve *d = &p->dev, *h = &p->pin;
    printf("  carved: the device block holds the weights at 0, then slot k at %zu + k * %zu:\n",
           si_devplan_slot_dev(p, 0), p->slot_bytes);
    printf("    arena %zu, scratch %zu, workspace %zu, input %zu, output %zu", d->arena, d->scratch,
           d->workspace, d->input, d->output);
    if (p->pack) printf(", packed images %zu, items %zu", d->pack, d->items);
    if (p->area_cap) printf(" (the JPEG decoder's area at %zu)", d->area);
    printf("\n  carved: the pinned block holds slot k at k * %zu:\n", p->pinned);
    printf("    input %zu, output %zu", h->input, h->output);
    if (p->pack) printf(", packed images %zu, items %zu", h->pack, h->items);
    printf("\n");
}

typedef struct {
    const char *model;
    long batch, slots, ws_mb, pack_kb; /* pack_kb 0: the default for the model's input size */
    bool gpu_resize, gpu_decode;
    double limit_gib;
    int prec;
} plan_args;

/* Parses argv into a; returns -1 to go on, else the exit code (after --help or a bad option). */
static int parse_plan(int argc, char **argv, plan_args *a) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"precision", required_argument, 0, 'P'},
                                         {"slots", required_argument, 0, 'S'},
                                         {"workspace", required_argument, 0, 'W'},
                                         {"memory-limit", required_argument, 0, 'L'},
                                         {"resize-on", required_argument, 0, 'R'},
                                         {"pack-kb", required_argument, 0, 'K'},
                                         {"decode", required_argument, 0, 'D'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:b:h", opts, NULL)) != -1) {
        bool ok = true;
        char *end = NULL;
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'b': ok = si_parse_int(optarg, 1, 1 << 20, &a->batch); break;
        case 'S': ok = si_parse_int(optarg, 1, 16, &a->slots); break;
        case 'W': ok = si_parse_int(optarg, 0, 1 << 20, &a->ws_mb); break;
        case 'P': ok = (a->prec = si_precision_parse(optarg)) >= 0; break;
        case 'R':
            ok = !strcmp(optarg, "cpu") || !strcmp(optarg, "gpu");
            a->gpu_resize = !strcmp(optarg, "gpu");
            break;
        case 'K': ok = si_parse_int(optarg, 1, 1 << 20, &a->pack_kb); break;
        case 'D':
            ok = !strcmp(optarg, "cpu") || !strcmp(optarg, "gpu");
            a->gpu_decode = !strcmp(optarg, "gpu");
            break;
        case 'L':
            a->limit_gib = strtod(optarg, &end);
            ok = end && !*end && a->limit_gib > 0;
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
    if (!a->model || optind != argc) {
        fprintf(stderr, "shardinfer plan: --model is required\n%s", plan_usage);
        return SI_EXIT_USAGE;
    }
    if (a->gpu_decode && !a->gpu_resize) {
        fprintf(stderr, "shardinfer plan: --decode gpu needs --resize-on gpu\n");
        return SI_EXIT_USAGE;
    }
    return -1;
}

/* nvJPEG's hardware decoder beside the plan, ResNet-50 on an H100: `run --decode gpu` less
 * `--decode cpu` in the summary's memory beside the plan, with 1-4 decode states (one a slot
 * then) x batch 64, 128, 256 (44.6, 81-85, 126-130, 165-171 MiB): per state, whatever the
 * batch; a run makes one a calling thread (SI_DECODE_PARTS_DEFAULT) */
#define NVJPEG_MIB_PER_STATE 41.5
#define NVJPEG_MIB_FIXED     3.0

/* The table of components, per slot and in total. */
static void print_plan(const plan_args *a, const si_devplan *p, bool pixels) {
    size_t slots = (size_t)a->slots;
    printf("plan: %s, batch %ld, %s, %ld slots, workspace %ld MiB per slot\n", a->model, a->batch,
           si_precision_name(a->prec), a->slots, a->ws_mb);
    printf("  %-34s %12s %12s\n", "component", "per slot MiB", "total MiB");
    printf("  %-34s %12s %12.1f\n", "weights (once)", "-", mib(p->weights));
    printf("  %-34s %12.1f %12.1f\n", pixels ? "input buffers (uint8 pixels)" : "input buffers",
           mib(p->input), mib(p->input * slots));
    if (p->pack)
        printf("  %-34s %12.1f %12.1f\n", "decoded images for the GPU resize", mib(p->pack),
               mib(p->pack * slots));
    if (p->area_cap)
        printf("  %-34s %12.1f %12.1f\n", "GPU JPEG decoder's output", mib(p->area_cap),
               mib(p->area_cap * slots));
    printf("  %-34s %12.1f %12.1f\n", "activations (liveness-planned arena)", mib(p->activations),
           mib(p->activations * slots));
    printf("  %-34s %12.1f %12.1f\n", "workspace (cuDNN, cuBLASLt)", mib(p->workspace),
           mib(p->workspace * slots));
    printf("  %-34s %12.1f %12.1f\n", "staging (float outputs, layout scratch)",
           mib(p->output + p->scratch), mib((p->output + p->scratch) * slots));
    printf("  %-34s %12s %12.1f\n", "total on the GPU", "", mib(p->device_total));
    printf("  %-34s %12.1f %12.1f\n", "pinned host memory", mib(p->pinned), mib(p->pinned_total));
    printf("  activations: %.1f MiB per slot where one buffer per tensor would take %.1f MiB\n",
           mib(p->activations), mib(p->acts.naive_bytes));
    print_carve(p);
    printf("  plus the CUDA context and the libraries' own memory (about 500-600 MiB on an H100, "
           "measured)\n");
    if (p->area_cap) // the hardware backend takes no allocator of ours: measured, not planned
        printf("  and nvJPEG's own buffers beside them: about %.0f MiB for its %d decode states "
               "(42 MiB a state and 3 MiB more, measured on an H100 at batches 64-256; `run`'s "
               "summary shows the whole)\n",
               NVJPEG_MIB_PER_STATE * SI_DECODE_PARTS_DEFAULT + NVJPEG_MIB_FIXED,
               SI_DECODE_PARTS_DEFAULT);
}

/* Plans g as `run --backend cuda` would, after the refusal that run would give (a build without
 * CUDA has no cuda backend to ask), and prints the plan and the largest batch that fits. */
static si_status plan_model(const plan_args *a, si_graph *g) {
    const si_value *in = &g->values[g->inputs[0]];
    bool pixels = g->n_inputs == 1 && in->shape.ndim == 4 && in->shape.dims[1] == 3;
    size_t elem = a->prec == SI_PREC_FP32 ? 4 : 2, ws = (size_t)a->ws_mb << 20;
    size_t ppi = 0; /* --resize-on gpu: the packed buffer per image */
    if (a->gpu_resize && pixels) {
        int h = (int)in->shape.dims[2], w = (int)in->shape.dims[3];
        ppi = a->pack_kb > 0 ? (size_t)a->pack_kb << 10
                             : SI_RS_PACK_DEFAULT(si_pipeline_default_resize(h, w));
    }
    size_t dpi = a->gpu_decode && ppi ? SI_GPU_DECODE_PER_IMAGE : 0;
    const si_backend *cuda = si_engine_backend("cuda");
    si_engine_opts eo = {.precision = a->prec,
                         .slots = (int)a->slots,
                         .workspace_bytes = ws,
                         .pixels = pixels,
                         .pack_per_image = ppi,
                         .device_area_per_image = dpi};
    si_status st = SI_OK;
    si_devplan p;
    if (cuda && (st = si_graph_infer(g, (int)a->batch)) == SI_OK)
        st = si_engine_check_backend(g, cuda, &eo);
    if (st == SI_OK)
        st = si_devplan_build(g, (int)a->batch, elem, (int)a->slots, ws, pixels, ppi, dpi, &p);
    if (st != SI_OK) return st;
    print_plan(a, &p, pixels);
    si_devplan_free(&p);
    size_t limit = (size_t)(a->limit_gib * 1073741824.0);
    int best = si_devplan_max_batch(g, elem, (int)a->slots, ws, pixels, ppi, dpi, limit);
    printf("  largest batch within %.1f GiB: %d\n", a->limit_gib, best);
    return SI_OK;
}

int si_cli_plan(int argc, char **argv) {
    plan_args a = {.batch = 256,
                   .slots = 3,
                   .ws_mb = 256,
                   .gpu_resize = SI_GPU_RESIZE_DEFAULT,
                   .limit_gib = 80,
                   .prec = SI_PREC_FP16};
    int code = parse_plan(argc, argv, &a);
    if (code >= 0) return code;
    si_graph *g;
    if (si_graph_load(a.model, NULL, &g) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    si_status st = plan_model(&a, g);
    if (st != SI_OK) si_log_error("%s", si_error_msg());
    si_graph_free(g);
    return st == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}
