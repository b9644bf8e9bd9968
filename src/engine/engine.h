/* The inference engine: a graph, a backend that executes it, and buffers planned once for the
 * largest batch. A backend is a struct of function pointers filled once (ggml's pattern,
 * engine/backend.h); the CPU backend is the reference that every other backend is checked
 * against. The engine runs models: it takes pixels (or decoded images to resize) through its
 * slots and never sees an encoded image; decoders are the pipeline's (src/decode). */
#ifndef SI_ENGINE_H
#define SI_ENGINE_H

#include "graph.h"
#include "io/resample.h"

typedef struct si_engine si_engine;
typedef struct si_backend si_backend;

/* Where a CUDA run resizes the decoded images when --resize-on is not given (docs/performance.md
 * has the measurement behind the choice). */
#define SI_GPU_RESIZE_DEFAULT true

typedef enum { SI_PREC_FP32 = 0, SI_PREC_FP16, SI_PREC_BF16 } si_precision;
const char *si_precision_name(int p);
/* "fp32", "fp16", "bf16" -> si_precision; -1 if none */
int si_precision_parse(const char *s);

/* GPU: batches in flight when opts.slots is 0 */
#define SI_ENGINE_SLOTS_DEFAULT 3
/* GPU: cuDNN/cuBLASLt workspace per slot when opts.workspace_bytes is 0 */
#define SI_ENGINE_WORKSPACE_DEFAULT ((size_t)256 << 20)

/* GPU A/B switches: which implementation runs a kind of node, for measurements and the tests of
 * each side. All zero is the default (docs/user-guide.md); the CLI and the test tools fill them
 * from the environment variables named here (si_cli_engine_switches). */
enum { SI_CHOICE_TIMED = 0, SI_CHOICE_OFF, SI_CHOICE_ON }; /* unset, "0", anything else */
typedef struct {
    bool cudnn_depthwise; /* SI_CUDNN_DEPTHWISE=1: cuDNN's depthwise convs, no prologue fusion */
    int nconv;        /* SI_NCONV: the narrow-channel conv kernel timed, never, wherever it runs */
    bool no_linear90; /* SI_LINEAR90=0: cuBLASLt and an activation pass, no CUTLASS Linear */
    bool lt_first;    /* SI_LT_TIME=0: cuBLASLt's first heuristic answer, untimed */
    int cudnn_sdpa;   /* SI_CUDNN_SDPA: cuDNN's fused attention timed, never, wherever it runs */
} si_engine_switches;

typedef struct {
    int precision; /* si_precision; the CPU backend runs FP32 only */
    int slots;     /* GPU: batches in flight, each with its stream and buffers (0: the default) */
    size_t workspace_bytes;       /* GPU: cuDNN/cuBLASLt workspace per slot (0: the default) */
    bool pixels;                  /* input 0 arrives as (B, H, W, 3) uint8 through the slots */
    float mean[3], std[3];        /* with pixels: normalisation, (x/255 - mean) / std */
    bool no_graphs;               /* GPU: launch op by op instead of replaying a CUDA Graph */
    size_t pack_per_image;        /* GPU with pixels: > 0 gives each slot a packed buffer of decoded
                                     images (max_batch * this many bytes) that the GPU resizes */
    size_t device_area_per_image; /* GPU with pack_per_image: > 0 gives each slot a device-only
                                     area of max_batch * this many bytes beside its packed
                                     buffer's device copy, for images that work queued on the
                                     slot's stream writes there before the resize (a hardware
                                     JPEG decoder's, src/decode/hwjpeg.h) */
    bool verbose;                 /* GPU: print each conv's algorithm choice */
    const char *autotune_dir;     /* GPU: the autotune cache's folder (cuda/autotune.cuh); NULL: the
                                     default under $XDG_CACHE_HOME or ~/.cache; "off": none */
    si_engine_switches sw;        /* GPU: the A/B switches */
} si_engine_opts;

/* What a GPU backend allocated, in bytes (zeros on the CPU). */
typedef struct {
    size_t weights, activations, scratch, workspace, input, output; /* device, all slots */
    size_t pinned;                                                  /* host, all slots */
    size_t device_total;
    size_t device_used_after_init; /* cudaMemGetInfo: the whole process on the device */
    double init_seconds;           /* planning, uploads, algorithm search, capture, warm-up */
    int convs_tuned, convs_cached; /* cuDNN convs set up, and those the autotune cache answered */
    int matmuls_tuned, matmuls_cached; /* cuBLASLt matmuls timed, and those it answered */
    int attn_tuned, attn_cached;       /* attention nodes choosing cuDNN's SDPA or ours, the same */
    /* GPU: init_seconds by step: plan, allocate, slots (streams, cuDNN handles), algorithms,
     * warm-up, graph capture */
    double init_step[6];
} si_engine_memory;

/* A slot's packed buffer for the GPU's resize (si_engine_pack): decoded images go into host
 * (page-locked) or, written on the device by work queued on the slot's stream before the
 * submit, into the device's copy of it; items[k] says where image k is and how it is resized
 * and cropped (io/resample.h; offsets from the buffer's start, the same on either side). */
typedef struct {
    uint8_t *host; /* cap bytes */
    size_t cap;
    si_rs_item *items;         /* [max_batch] */
    uint8_t *device;           /* the device's copy (a device address) */
    size_t area_off, area_cap; /* with opts.device_area_per_image: the device-only area, bytes
                                  [area_off, area_off + area_cap) of device (0, 0 without) */
    void *stream;              /* the slot's stream (a cudaStream_t) */
} si_slot_pack;

/* Creates an engine over g (ownership of g passes to the engine) on the named backend ("cpu").
 * On failure g is freed too. */
si_status si_engine_create(si_graph *g, const char *backend, int max_batch, si_engine **out);
/* The same with options (NULL: defaults). */
si_status si_engine_create_opts(si_graph *g, const char *backend, int max_batch,
                                const si_engine_opts *opts, si_engine **out);
/* The backend named `name` ("cpu", "cuda"), or NULL when this build has none of that name. */
const si_backend *si_engine_backend(const char *name);
/* The load-time check that si_engine_create_opts makes before it allocates: asks the backend
 * about every RUNTIME node of g (shapes inferred for batch 1 first if g has none yet). SI_OK when
 * it runs them all, else SI_ERR_UNSUPPORTED with one message listing the refused nodes grouped by
 * op type and reason, with the count and the first node's name. A backend without supports_op
 * runs every node. opts may be NULL (defaults). */
si_status si_engine_check(si_graph *g, const char *backend, const si_engine_opts *opts);
/* The same for a backend given by its table (tests pass their own). */
si_status si_engine_check_backend(si_graph *g, const si_backend *be, const si_engine_opts *opts);
/* The backends this build has, comma separated ("cpu" or "cpu, cuda"). */
const char *si_engine_backends(void);
void si_engine_free(si_engine *e); /* accepts NULL */

/* Host buffer for input i, (max_batch, ...) floats; borrowed. */
float *si_engine_input(si_engine *e, int i);
si_status si_engine_run(si_engine *e, int batch);
/* Output i of the last run and its shape; borrowed until the next run. Outputs computed from
 * shapes alone (a model ending in Shape, say) are int64: see si_engine_output_dtype. */
const float *si_engine_output(si_engine *e, int i, si_shape *shape);
int si_engine_output_dtype(const si_engine *e, int i); /* SI_DT_FLOAT or SI_DT_INT64 */

/* The slot ring (slot in [0, si_engine_slots(e))); see si_backend. Borrowed buffers. A batch
 * goes in as crops in the slot's pixels (si_engine_submit) or, on a GPU with
 * opts.pack_per_image, as decoded images in its packed buffer that the GPU resizes
 * (si_engine_submit_packed: the first `upload` bytes of the host side are copied to the device
 * first; images written on the device need none). */
uint8_t *si_engine_pixels(si_engine *e, int slot);
/* false (and *p zeroed) where the backend has no resize of its own (the CPU) */
bool si_engine_pack(si_engine *e, int slot, si_slot_pack *p);
si_status si_engine_submit(si_engine *e, int slot, int rows);
si_status si_engine_submit_packed(si_engine *e, int slot, int rows, size_t upload);
si_status si_engine_collect(si_engine *e, int slot, const float **outs);
si_status si_engine_slot_times(si_engine *e, int slot, double *t0, double *t1);
/* Whether the engine runs on a GPU (its memory summary is filled), for reports. */
bool si_engine_on_gpu(const si_engine *e);

/* What the engine is, for reports and tests; borrowed. */
const si_graph *si_engine_graph(const si_engine *e);
int si_engine_max_batch(const si_engine *e);
int si_engine_slots(const si_engine *e); /* set by the backend's init (1 on the CPU) */
/* submit returns with the batch finished (the CPU): nothing stays in flight */
bool si_engine_synchronous(const si_engine *e);
const si_engine_opts *si_engine_options(const si_engine *e);
const si_engine_memory *si_engine_mem(const si_engine *e);
/* planned activation memory for max_batch (arena + scratch) */
size_t si_engine_activation_bytes(const si_engine *e);
/* Per-node timing from now on: each node's seconds summed over the runs since, n_nodes entries
 * (NULL until si_engine_profile). */
void si_engine_profile(si_engine *e);
const double *si_engine_node_seconds(const si_engine *e);

#endif
