// The CUDA backend: the engine's graph on one GPU. cuDNN runs the convolutions (NHWC, FP16 on
// tensor cores by default, bias + residual + ReLU fused where cuDNN fuses them), cuBLASLt the
// Gemm/MatMul (bias and ReLU as epilogues), cuda/kernels.cu the rest.
//
// This file is the si_backend: init (in named steps), the slot ring (submit/collect), CUDA Graph
// capture and release; consts.cu uploads the weights, conv.cu and gemm.cu set up and run the
// library calls, dispatch.cu launches each node (backend_internal.cuh: the state they share).
//
// Memory is planned by src/engine/devplan.c and allocated at init in one device block and one
// pinned block ("malloc and point"): weights once, then per slot an activation arena, scratch, a
// workspace, input staging and float outputs. A slot also has a stream, a cuDNN handle, an
// event and a CUDA Graph of the model captured at init; the steady state allocates nothing and
// only replays graphs, so S slots keep upload, compute and download of S batches in flight.
#include <nvtx3/nvToolsExt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/autotune.cuh"
#include "cuda/backend_internal.cuh"
#include "cuda/cuda.h"
#include "cuda/resize.cuh"

static long n_alloc_calls;

static si_status dev_alloc(void **p, size_t bytes) {
    __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
    cudaCheck(cudaMalloc(p, bytes ? bytes : 1));
    return SI_OK;
}

// The page-locked block: pages of our own mapping (huge where the kernel gives them, faulted in by
// the OpenMP team) registered with CUDA, else cudaHostAlloc's (*mapped says which).
static si_status host_alloc(void **p, size_t bytes, bool *mapped) {
    __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
    *mapped = false;
    void *q = si_pages_alloc(bytes);
    if (q && cudaHostRegister(q, bytes ? bytes : 1, cudaHostRegisterPortable) == cudaSuccess) {
        *p = q;
        *mapped = true;
        return SI_OK;
    }
    cudaGetLastError(); // a registration refused: CUDA's own allocation instead
    si_pages_free(q, bytes);
    cudaCheck(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable));
    return SI_OK;
}

extern "C" long si_cuda_backend_alloc_calls(void) {
    return __atomic_load_n(&n_alloc_calls, __ATOMIC_RELAXED);
}

// the model: every node, then the outputs as float row-major into the slot's out_d
static si_status enqueue_model(si_engine *e, cuda_state *cs, slot_x *sl) {
    si_graph *g = e->g;
    // --profile: what was queued before (the inputs' upload) is not the first node's time
    if (e->node_seconds) cudaCheck(cudaStreamSynchronize(sl->stream));
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op == SI_OP_HOST) continue;
        double t0 = e->node_seconds ? si_now() : 0;
        si_status st = si_cuda_run_node(e, cs, sl, j);
        if (st != SI_OK) return st;
        if (e->node_seconds) {
            cudaCheck(cudaStreamSynchronize(sl->stream));
            e->node_seconds[j] += si_now() - t0;
        }
    }
    for (int o = 0; o < g->n_outputs; o++) {
        const si_value *v = &g->values[g->outputs[o]];
        if (v->kind != SI_VAL_RUNTIME || si_shape_numel(&v->shape) == 0) continue;
        si_status st =
            map(sl->stream, SI_MAP_COPY, 0, no_act, SI_GT_F32, sl->out_d + cs->plan.out_off[o],
                tv_rowmajor(&v->shape), cs->t, vptr(cs, g, sl, g->outputs[o]), tv_of(v));
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status launch_model(si_engine *e, cuda_state *cs, slot_x *sl) {
    if (sl->exec && !e->node_seconds) {
        cudaCheck(cudaGraphLaunch(sl->exec, sl->stream));
        return SI_OK;
    }
    return enqueue_model(e, cs, sl);
}

// float inputs (the engine API: exec, bench, tests) into the input values
static si_status enqueue_float_inputs(si_engine *e, cuda_state *cs, slot_x *sl) {
    si_graph *g = e->g;
    for (int i = 0; i < g->n_inputs; i++) {
        const si_value *v = &g->values[g->inputs[i]];
        size_t bytes = sizeof(float) * (size_t)si_shape_numel(&v->shape);
        if (bytes == 0) continue;
        cudaCheck(cudaMemcpyAsync(sl->in_d + cs->plan.in_off[i], sl->in_h + cs->plan.in_off[i],
                                  bytes, cudaMemcpyHostToDevice, sl->stream));
        si_status st =
            map(sl->stream, SI_MAP_COPY, 0, no_act, cs->t, vptr(cs, g, sl, g->inputs[i]), tv_of(v),
                SI_GT_F32, sl->in_d + cs->plan.in_off[i], tv_rowmajor(&v->shape));
        if (st != SI_OK) return st;
    }
    return SI_OK;
}

static si_status enqueue_download(si_engine *e, cuda_state *cs, slot_x *sl, int rows) {
    si_graph *g = e->g;
    for (int o = 0; o < g->n_outputs; o++) {
        const si_value *v = &g->values[g->outputs[o]];
        if (v->kind != SI_VAL_RUNTIME) continue;
        size_t n = cs->batch_rows ? (size_t)rows * (size_t)cs->plan.out_row[o]
                                  : (size_t)si_shape_numel(&v->shape);
        if (n == 0) continue;
        cudaCheck(cudaMemcpyAsync(sl->out_h + cs->plan.out_off[o], sl->out_d + cs->plan.out_off[o],
                                  n * sizeof(float), cudaMemcpyDeviceToHost, sl->stream));
    }
    return SI_OK;
}

// --- init, in named steps -----------------------------------------------------------------------
// The activations' type for the precision asked, in our, cuDNN's and cuBLASLt's terms.
static void set_types(si_engine *e, cuda_state *cs) {
    int prec = e->opts.precision;
    cs->t = prec == SI_PREC_FP16 ? SI_GT_F16 : prec == SI_PREC_BF16 ? SI_GT_BF16 : SI_GT_F32;
    cs->dt = prec == SI_PREC_FP16   ? CUDNN_DATA_HALF
             : prec == SI_PREC_BF16 ? CUDNN_DATA_BFLOAT16
                                    : CUDNN_DATA_FLOAT;
    cs->ct = prec == SI_PREC_FP16 ? CUDA_R_16F : prec == SI_PREC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The pixel path: one (N, 3, H, W) input, normalised on the GPU as x * pscale + pshift.
static si_status set_pixels(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    if (!e->opts.pixels) return SI_OK;
    const si_value *in = &g->values[g->inputs[0]];
    if (g->n_inputs != 1 || in->shape.ndim != 4 || in->shape.dims[1] != 3)
        return si_error(SI_ERR_UNSUPPORTED, "cuda: the pixel path needs one (N, 3, H, W) input");
    cs->in_pixels = in->shape.dims[2] * in->shape.dims[3];
    for (int c = 0; c < 3; c++) {
        cs->pscale[c] = 1.0f / (255.0f * e->opts.std[c]);
        cs->pshift[c] = -e->opts.mean[c] / e->opts.std[c];
    }
    return SI_OK;
}

// Do the outputs scale with the batch? (then a short batch downloads only its rows). Infers the
// graph at batch 1; the plan infers it again at max_batch.
static void probe_batch_rows(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    int B = e->max_batch;
    si_shape *at_max = (si_shape *)si_xcalloc((size_t)g->n_outputs + 1, sizeof(si_shape));
    for (int o = 0; o < g->n_outputs; o++) at_max[o] = g->values[g->outputs[o]].shape;
    si_status st = si_graph_infer(g, 1);
    cs->batch_rows = st == SI_OK;
    for (int o = 0; st == SI_OK && o < g->n_outputs; o++) {
        const si_shape *s1 = &g->values[g->outputs[o]].shape;
        bool ok = s1->ndim >= 1 && s1->ndim == at_max[o].ndim && s1->dims[0] == 1 &&
                  at_max[o].dims[0] == B;
        for (int d = 1; ok && d < s1->ndim; d++) ok = s1->dims[d] == at_max[o].dims[d];
        cs->batch_rows = cs->batch_rows && ok;
    }
    free(at_max);
}

// Node support, before anything is allocated (the engine asked cuda_supports_op at load; this
// holds for callers that did not) and every constant input planned.
static si_status check_nodes(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_HOST) continue;
        for (int k = 0; k < n->n_in; k++)
            if (si_devplan_data_input(n, k) && g->values[n->in[k]].kind != SI_VAL_RUNTIME &&
                cs->plan.const_off[n->in[k]] == SIZE_MAX)
                return NODE_ERR(g, n, SI_ERR_INTERNAL, "cuda: constant input %d not planned", k);
        char why[256];
        if (!si_cuda_node_ok(g, n, why, sizeof why))
            return NODE_ERR(g, n, SI_ERR_UNSUPPORTED, "%s", why);
    }
    return SI_OK;
}

// The two allocations the plan sized, and cuBLASLt's handle.
static si_status alloc_blocks(si_engine *e, cuda_state *cs) {
    const si_devplan *p = &cs->plan;
    si_status st = dev_alloc((void **)&cs->dev, p->device_total);
    if (st != SI_OK)
        return si_error_prefix(st,
                               "cannot allocate the planned %.1f MiB on the GPU (shardinfer "
                               "plan shows the budget; lower --batch or --slots): ",
                               (double)p->device_total / 1048576.0);
    if ((st = host_alloc((void **)&cs->host, p->pinned_total, &cs->host_mapped)) != SI_OK)
        return st;
    cs->consts = cs->dev;
    ltCheck(cublasLtCreate(&cs->lt));
    return SI_OK;
}

// Slot k: its buffers at the plan's offsets, its stream, events and cuDNN handle, and defined
// contents everywhere (garbage rows of a short batch stay finite).
static si_status slot_create(cuda_state *cs, int k) {
    const si_devplan *p = &cs->plan;
    slot_x *sl = &cs->slots[k];
    uint8_t *b = cs->dev + si_devplan_slot_dev(p, k), *h = cs->host + si_devplan_slot_pin(p, k);
    sl->arena = b + p->dev.arena;
    sl->scratch = b + p->dev.scratch;
    sl->ws = b + p->dev.workspace;
    sl->in_d = b + p->dev.input;
    sl->out_d = b + p->dev.output;
    sl->in_h = h + p->pin.input;
    sl->out_h = h + p->pin.output;
    if (p->pack) { // the pool, then B items, after the outputs
        sl->pack_d = b + p->dev.pack;
        sl->items_d = (si_rs_item *)(b + p->dev.items);
        sl->pack_h = h + p->pin.pack;
        sl->items_h = (si_rs_item *)(h + p->pin.items);
    }
    cudaCheck(cudaStreamCreateWithFlags(&sl->stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming | cudaEventBlockingSync));
    cudaCheck(cudaEventCreate(&sl->t_begin));
    cudaCheck(cudaEventCreate(&sl->t_end));
    cudnnCheck(cudnnCreate(&sl->dnn));
    cudnnCheck(cudnnSetStream(sl->dnn, sl->stream));
    cudaCheck(cudaMemset(b, 0, p->slot_bytes));
    memset(sl->in_h, 0, p->pinned);
    return SI_OK;
}

// Weights, then each Conv, Gemm and MatMul set up (cuDNN's algorithms timed on slot 0).
static si_status init_nodes(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    const si_engine_switches *sw = &e->opts.sw;
    cs->dw_cudnn = sw->cudnn_depthwise;
    double t0 = si_now();
    si_status st = si_cuda_upload_consts(e, cs);
    if (st != SI_OK) return st;
    double t_weights = si_now() - t0, t_kind[3] = {0, 0, 0}; // convs, matmuls, attention
    cs->lt_heur_s = 0;
    cs->conv = (conv_x *)si_xcalloc((size_t)g->n_nodes + 1, sizeof(conv_x));
    cs->gemm = (gemm_x *)si_xcalloc((size_t)g->n_nodes + 1, sizeof(gemm_x));
    cs->attn = (attn_x *)si_xcalloc((size_t)g->n_nodes + 1, sizeof(attn_x));
    algo_memo *memo = si_cuda_memo_new();
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    si_cuda_autotune_load(memo, e->opts.autotune_dir, dev, cs->plan.workspace);
    // CUTLASS's fused Linear + activation is built for sm_90a (H100, H200) alone
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cs->linear90 = major == 9 && minor == 0 && !sw->no_linear90;
    cs->lt_timed = !sw->lt_first;
    int sdpa = sw->cudnn_sdpa == SI_CHOICE_OFF  ? SI_SDPA_NEVER
               : sw->cudnn_sdpa == SI_CHOICE_ON ? SI_SDPA_ALWAYS
                                                : SI_SDPA_TIMED;
    for (int j = 0; j < g->n_nodes && st == SI_OK; j++) {
        int op = g->nodes[j].op;
        double tj = si_now();
        if (op == SI_OP_CONV)
            st = si_cuda_conv_init(e, cs, j, memo);
        else if (op == SI_OP_GEMM)
            st = si_cuda_gemm_init(e, cs, j, memo);
        else if (op == SI_OP_MATMUL)
            st = si_cuda_matmul_init(e, cs, j, memo);
        else if (op == SI_OP_ATTENTION)
            st = si_cuda_attn_init(e, cs, j, sdpa, memo);
        else
            continue;
        t_kind[op == SI_OP_CONV ? 0 : op == SI_OP_ATTENTION ? 2 : 1] += si_now() - tj;
    }
    if (st == SI_OK) si_cuda_autotune_save(memo);
    if (e->opts.verbose) // where a start's "algorithms" go
        fprintf(stderr,
                "cuda: weights and algorithms %.3f s: weights %.3f, convolutions %.3f, matmuls "
                "%.3f (cuBLASLt's heuristics %.3f), attention %.3f\n",
                si_now() - t0, t_weights, t_kind[0], t_kind[1], cs->lt_heur_s, t_kind[2]);
    e->mem.convs_tuned = memo->asked;
    e->mem.convs_cached = memo->hits;
    e->mem.matmuls_tuned = memo->gasked;
    e->mem.matmuls_cached = memo->ghits;
    e->mem.attn_tuned = memo->aasked;
    e->mem.attn_cached = memo->ahits;
    si_cuda_memo_free(memo);
    return st;
}

// One plain run per slot (cuDNN and cuBLASLt set themselves up, and a fused call cuDNN refuses
// falls back to conv + epilogue).
static si_status warm_up(si_engine *e, cuda_state *cs) {
    si_graph *g = e->g;
    for (int k = 0; k < e->n_slots; k++) {
        slot_x *sl = &cs->slots[k];
        for (int j = 0; j < g->n_nodes; j++) {
            if (g->nodes[j].op != SI_OP_CONV || !cs->conv[j].fused) continue;
            si_status st = si_cuda_conv_run(e, cs, sl, j);
            if (st != SI_OK) { // cuDNN would not fuse this one
                si_error_clear();
                cs->conv[j].fused = false;
                if (e->opts.verbose)
                    fprintf(stderr, "cuda: %s: fused conv refused, conv + epilogue instead\n",
                            g->nodes[j].name);
            }
        }
        si_status st = enqueue_model(e, cs, sl);
        if (st != SI_OK) return st;
        cudaCheck(cudaStreamSynchronize(sl->stream));
    }
    return SI_OK;
}

// Each slot's model captured as a CUDA Graph, then replayed once.
static si_status capture_graphs(si_engine *e, cuda_state *cs) {
    for (int k = 0; k < e->n_slots; k++) {
        slot_x *sl = &cs->slots[k];
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(sl->stream, cudaStreamCaptureModeThreadLocal));
        si_status st = enqueue_model(e, cs, sl);
        cudaError_t ce = cudaStreamEndCapture(sl->stream, &graph);
        if (st != SI_OK) return st;
        cudaCheck(ce);
        ce = cudaGraphInstantiate(&sl->exec, graph, 0);
        cudaGraphDestroy(graph);
        cudaCheck(ce);
        cudaCheck(cudaGraphLaunch(sl->exec, sl->stream));
        cudaCheck(cudaStreamSynchronize(sl->stream));
    }
    return SI_OK;
}

// The engine's host buffers (slot 0's pinned staging), what was allocated, and the clock
// reference for the GPU's times.
static si_status publish(si_engine *e, cuda_state *cs, double t0) {
    si_graph *g = e->g;
    const si_devplan *p = &cs->plan;
    size_t slots = (size_t)e->n_slots;
    for (int i = 0; i < g->n_inputs; i++)
        e->host_in[i] = (float *)(cs->slots[0].in_h + p->in_off[i]);
    for (int o = 0; o < g->n_outputs; o++)
        e->host_out[o] = (const float *)(cs->slots[0].out_h + p->out_off[o]);
    si_engine_memory *m = &e->mem;
    m->weights = p->weights;
    m->activations = slots * p->activations;
    m->scratch = slots * p->scratch;
    m->workspace = slots * p->workspace;
    m->input = slots * (p->input + p->pack);
    m->output = slots * p->output;
    m->pinned = p->pinned_total;
    m->device_total = p->device_total;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        m->device_used_after_init = total_b - free_b;
    cudaCheck(cudaEventCreate(&cs->t_ref));
    cudaCheck(cudaEventRecord(cs->t_ref, cs->slots[0].stream));
    cudaCheck(cudaEventSynchronize(cs->t_ref));
    cs->t_ref_host = si_now();
    m->init_seconds = si_now() - t0;
    e->activation_bytes = p->activations;
    e->naive_bytes = p->acts.naive_bytes;
    return SI_OK;
}

// Plan, check, allocate, carve, set up, warm up, capture: everything a run needs, made here.
static si_status init_steps(si_engine *e, cuda_state *cs) {
    double t0 = si_now();
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    set_types(e, cs);
    si_status st = set_pixels(e, cs);
    if (st != SI_OK) return st;
    probe_batch_rows(e, cs);
    int slots = e->opts.slots;
    st = si_devplan_build(e->g, e->max_batch, si_gtype_size(cs->t), slots, e->opts.workspace_bytes,
                          e->opts.pixels, e->opts.pack_per_image, e->opts.device_area_per_image,
                          &cs->plan);
    if (st == SI_OK) st = check_nodes(e, cs);
    double *step = e->mem.init_step, t = si_now();
#define STEP(k) (step[k] = si_now() - t, t = si_now())
    STEP(0);
    if (st == SI_OK) st = alloc_blocks(e, cs);
    if (st != SI_OK) return st;
    STEP(1);
    cs->slots = (slot_x *)si_xcalloc((size_t)slots, sizeof(slot_x));
    e->n_slots = slots;
    for (int k = 0; k < slots && st == SI_OK; k++) st = slot_create(cs, k);
    STEP(2);
    if (st == SI_OK) st = init_nodes(e, cs);
    STEP(3);
    if (st == SI_OK) st = warm_up(e, cs);
    STEP(4);
    if (st == SI_OK && !e->opts.no_graphs) st = capture_graphs(e, cs);
    STEP(5);
#undef STEP
    if (st != SI_OK) return st;
    return publish(e, cs, t0);
}

// --- backend entry points ---------------------------------------------------------------------
static si_status cuda_init(si_engine *e) {
    if (si_cuda_device_count() == 0)
        return si_error(SI_ERR_UNSUPPORTED,
                        "--backend cuda: no CUDA device is visible "
                        "(CUDA_VISIBLE_DEVICES='%s')",
                        getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
    cuda_state *cs = (cuda_state *)si_xcalloc(1, sizeof *cs);
    e->state = cs;
    nvtxRangePushA("engine init");
    si_status st = init_steps(e, cs);
    nvtxRangePop();
    return st;
}

static si_status cuda_run(si_engine *e, int batch) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!cs->batch_rows && batch != e->max_batch)
        return si_error(SI_ERR_UNSUPPORTED,
                        "cuda: this model's outputs do not scale with the "
                        "batch; run it at the batch it was planned for (%d)",
                        e->max_batch);
    slot_x *sl = &cs->slots[0];
    si_status st = enqueue_float_inputs(e, cs, sl);
    if (st == SI_OK) st = launch_model(e, cs, sl);
    if (st == SI_OK) st = enqueue_download(e, cs, sl, batch);
    if (st != SI_OK) return st;
    cudaCheck(cudaStreamSynchronize(sl->stream));
    for (int o = 0; o < e->g->n_outputs; o++) {
        const si_value *v = &e->g->values[e->g->outputs[o]];
        e->host_out[o] = v->kind == SI_VAL_RUNTIME
                             ? (const float *)(sl->out_h + cs->plan.out_off[o])
                             : (const float *)v->data;
    }
    return SI_OK;
}

static uint8_t *cuda_pixels(si_engine *e, int slot) {
    cuda_state *cs = (cuda_state *)e->state;
    return cs->slots[slot].in_h;
}

static bool cuda_pack(si_engine *e, int slot, si_slot_pack *p) {
    cuda_state *cs = (cuda_state *)e->state;
    const slot_x *sl = &cs->slots[slot];
    if (!sl->pack_h) return false;
    p->host = sl->pack_h;
    p->cap = (size_t)e->max_batch * e->opts.pack_per_image;
    p->items = sl->items_h;
    p->device = sl->pack_d;
    p->area_off = cs->plan.area_cap ? cs->plan.dev.area - cs->plan.dev.pack : 0;
    p->area_cap = cs->plan.area_cap;
    p->stream = (void *)sl->stream;
    return true;
}

static si_status cuda_submit(si_engine *e, int slot, int rows, bool packed, size_t upload) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!e->opts.pixels) return si_error(SI_ERR_INTERNAL, "cuda: submit without the pixel path");
    if (!cs->batch_rows && rows != e->max_batch)
        return si_error(SI_ERR_UNSUPPORTED, "cuda: this model's outputs do not scale with the "
                                            "batch; a short batch cannot be run");
    slot_x *sl = &cs->slots[slot];
    sl->rows = rows;
    cudaCheck(cudaEventRecord(sl->t_begin, sl->stream));
    int64_t px = (int64_t)rows * cs->in_pixels;
    nvtxRangePushA("upload");
    cudaError_t ce = cudaSuccess;
    // the packed path: images decoded on the host (the first `upload` bytes) or written on the
    // device by work queued on the slot's stream (a hardware decoder's: a batch it decoded whole
    // uploads nothing)
    if (packed) { // the decoded images as they are, resized here into the crops in_d holds
        if (!sl->pack_h || upload > cs->plan.pack_cap)
            return si_error(SI_ERR_INTERNAL, "cuda: %zu packed bytes, planned for %zu", upload,
                            sl->pack_h ? cs->plan.pack_cap : 0);
        const si_value *in = &e->g->values[e->g->inputs[0]];
        if (upload)
            ce =
                cudaMemcpyAsync(sl->pack_d, sl->pack_h, upload, cudaMemcpyHostToDevice, sl->stream);
        if (ce == cudaSuccess)
            ce = cudaMemcpyAsync(sl->items_d, sl->items_h, sizeof(si_rs_item) * (size_t)rows,
                                 cudaMemcpyHostToDevice, sl->stream);
        if (ce == cudaSuccess)
            ce = si_k_resize_crop(sl->stream, sl->pack_d, sl->items_d, rows, (int)in->shape.dims[2],
                                  (int)in->shape.dims[3], sl->in_d);
    } else {
        ce =
            cudaMemcpyAsync(sl->in_d, sl->in_h, (size_t)px * 3, cudaMemcpyHostToDevice, sl->stream);
    }
    if (ce == cudaSuccess)
        ce = si_k_normalize_nhwc(sl->stream, cs->t, sl->in_d, px, cs->pscale, cs->pshift,
                                 vptr(cs, e->g, sl, e->g->inputs[0]));
    nvtxRangePop();
    cudaCheck(ce);
    nvtxRangePushA("compute");
    si_status st = launch_model(e, cs, sl);
    nvtxRangePop();
    if (st != SI_OK) return st;
    nvtxRangePushA("download");
    st = enqueue_download(e, cs, sl, rows);
    nvtxRangePop();
    if (st != SI_OK) return st;
    cudaCheck(cudaEventRecord(sl->t_end, sl->stream));
    cudaCheck(cudaEventRecord(sl->done, sl->stream));
    return SI_OK;
}

static si_status cuda_collect(si_engine *e, int slot, const float **outs) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[slot];
    cudaCheck(cudaEventSynchronize(sl->done));
    for (int o = 0; o < e->g->n_outputs; o++) {
        const si_value *v = &e->g->values[e->g->outputs[o]];
        outs[o] = v->kind == SI_VAL_RUNTIME ? (const float *)(sl->out_h + cs->plan.out_off[o])
                                            : (const float *)v->data;
    }
    return SI_OK;
}

// when the GPU began and ended the slot's last batch (collected), on the host's si_now() clock
static si_status cuda_times(si_engine *e, int slot, double *t0, double *t1) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[slot];
    float a = 0, b = 0;
    cudaCheck(cudaEventElapsedTime(&a, cs->t_ref, sl->t_begin));
    cudaCheck(cudaEventElapsedTime(&b, cs->t_ref, sl->t_end));
    *t0 = cs->t_ref_host + a / 1000.0;
    *t1 = cs->t_ref_host + b / 1000.0;
    return SI_OK;
}

static si_status cuda_run_compute(si_engine *e) {
    cuda_state *cs = (cuda_state *)e->state;
    slot_x *sl = &cs->slots[0];
    si_status st = launch_model(e, cs, sl);
    if (st != SI_OK) return st;
    cudaCheck(cudaStreamSynchronize(sl->stream));
    return SI_OK;
}

static void cuda_release(si_engine *e) {
    cuda_state *cs = (cuda_state *)e->state;
    if (!cs) return;
    si_graph *g = e->g;
    if (cs->slots) {
        for (int k = 0; k < e->n_slots; k++) {
            slot_x *sl = &cs->slots[k];
            if (sl->stream) cudaStreamSynchronize(sl->stream);
            if (sl->exec) cudaGraphExecDestroy(sl->exec);
            if (sl->dnn) cudnnDestroy(sl->dnn);
            if (sl->done) cudaEventDestroy(sl->done);
            if (sl->t_begin) cudaEventDestroy(sl->t_begin);
            if (sl->t_end) cudaEventDestroy(sl->t_end);
            if (sl->stream) cudaStreamDestroy(sl->stream);
        }
    }
    for (int j = 0; cs->conv && j < g->n_nodes; j++) si_cuda_conv_release(&cs->conv[j]);
    for (int j = 0; cs->gemm && j < g->n_nodes; j++) si_cuda_gemm_release(&cs->gemm[j]);
    for (int j = 0; cs->attn && j < g->n_nodes; j++) si_cuda_attn_release(&cs->attn[j]);
    if (cs->lt) cublasLtDestroy(cs->lt);
    if (cs->dev) {
        __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
        cudaFree(cs->dev);
    }
    if (cs->host) {
        __atomic_add_fetch(&n_alloc_calls, 1, __ATOMIC_RELAXED);
        if (cs->host_mapped) {
            cudaHostUnregister(cs->host);
            si_pages_free(cs->host, cs->plan.pinned_total);
        } else {
            cudaFreeHost(cs->host);
        }
    }
    si_devplan_free(&cs->plan);
    free(cs->slots);
    free(cs->conv);
    free(cs->gemm);
    free(cs->attn);
    free(cs);
    e->state = NULL;
    e->n_slots = 0;
}

// Load-time: whether node n runs here (the limits of cuda/dispatch.cu's launches).
static bool cuda_supports_op(const si_graph *g, const si_gnode *n, const si_engine_opts *opts,
                             char *why, size_t cap) {
    return si_cuda_node_ok(g, n, why, cap);
}

extern "C" const si_backend si_cuda_backend = {
    .name = "cuda",
    .init = cuda_init,
    .run = cuda_run,
    .release = cuda_release,
    .pixels = cuda_pixels,
    .pack = cuda_pack,
    .submit = cuda_submit,
    .collect = cuda_collect,
    .times = cuda_times,
    .run_compute = cuda_run_compute,
    .supports_op = cuda_supports_op,
};
