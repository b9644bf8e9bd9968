/* The inference engine: a graph, a backend that executes it, and buffers planned once for the
 * largest batch. A backend is a struct of function pointers filled once (ggml's pattern); the
 * CPU backend is the reference that every other backend is checked against. */
#ifndef SI_ENGINE_H
#define SI_ENGINE_H

#include "graph.h"
#include "io/resample.h"
#include "io/yuv.h"

typedef struct si_engine si_engine;

/* Where a CUDA run resizes the decoded images when --resize-on is not given (docs/performance.md
 * has the measurement behind the choice). */
#define SI_GPU_RESIZE_DEFAULT true

/* --decode gpu: the device bytes per image of a slot's decode area (images decode there at full
 * size, as RGB and chroma planes, or with gpu-exact all three planes and RGB: 3 MiB holds a
 * 1024x682 4:2:0 photo's; a batch of larger ones spills to the CPU decoder). */
#define SI_GPU_DECODE_PER_IMAGE ((size_t)3 << 20)

/* --decode gpu: the images of one batch for the GPU's hardware JPEG decoder. Image k's
 * bitstream is bytes [src[k], src[k] + len[k]) of the slot's packed buffer (page-locked). It
 * decodes to RGB (h[k], w[k], 3) at byte dst[k] of the device's copy of that buffer, where the
 * resize reads it (its si_rs_item's off is dst[k]). Its chroma is subsampled hs x vs with
 * sub[k] = hs | vs << 8 (0 for gray). The hardware's RGB replicates chroma where libjpeg-turbo
 * interpolates: where si_yuv_replicated, the chroma planes are recovered from it at
 * dst[k] + si_jpeg_rgb_bytes(w, h) and the RGB converted again as libjpeg-turbo does (io/yuv.h).
 * With opts.gpu_decode_exact it decodes to its component planes there instead, converted from
 * there to libjpeg-turbo's RGB at dst[k]. si_jpeg_area_bytes in all. */
typedef struct {
    int n;
    uint64_t *src, *len, *dst; /* [max_batch] each */
    int32_t *w, *h, *sub;
    uint64_t dst_base, dst_cap; /* the decode area: bytes [dst_base, dst_base + dst_cap) of the
                                   device's packed buffer (set by the backend) */
    bool ready; /* the slot's decoder is set up (set by the backend when handed out): until then
                   (the first batches of a run) the caller decodes on the CPU */
} si_jpeg_jobs;

/* An image's RGB in the decode area, rounded up so that its planes after it start aligned. */
static inline size_t si_jpeg_rgb_bytes(int w, int h) {
    return ((size_t)w * (size_t)h * 3 + 255) & ~(size_t)255;
}
/* All an image takes of the decode area: its RGB, then its planes (exact) or chroma planes. */
static inline size_t si_jpeg_area_bytes(int w, int h, int hs, int vs, bool exact) {
    si_yuv_shape s = {w, h, hs, vs};
    if (exact) return si_jpeg_rgb_bytes(w, h) + si_yuv_bytes(&s);
    return si_jpeg_rgb_bytes(w, h) + (si_yuv_replicated(&s) ? si_yuv_chroma_bytes(&s) : 0);
}

typedef enum { SI_PREC_FP32 = 0, SI_PREC_FP16, SI_PREC_BF16 } si_precision;
const char *si_precision_name(int p);
/* "fp32", "fp16", "bf16" -> si_precision; -1 if none */
int si_precision_parse(const char *s);

typedef struct {
    int precision;            /* si_precision; the CPU backend runs FP32 only */
    int slots;                /* GPU: batches in flight, each with its stream and buffers (0: 3) */
    size_t workspace_bytes;   /* GPU: cuDNN/cuBLASLt workspace per slot (0: 256 MiB) */
    bool pixels;              /* input 0 arrives as (B, H, W, 3) uint8 through the slots */
    float mean[3], std[3];    /* with pixels: normalisation, (x/255 - mean) / std */
    bool no_graphs;           /* GPU: launch op by op instead of replaying a CUDA Graph */
    size_t pack_per_image;    /* GPU with pixels: > 0 gives each slot a packed buffer of decoded
                                 images (max_batch * this many bytes) that the GPU resizes */
    size_t gpu_decode_per_image; /* GPU with pack_per_image: > 0 decodes JPEGs on the device's
                                    hardware decoder (nvJPEG) into an area of this many bytes per
                                    image after each slot's packed buffer (--decode gpu) */
    bool gpu_decode_exact;       /* with gpu_decode_per_image: decode to planes and convert them
                                    as libjpeg-turbo does (si_jpeg_jobs), not to the hardware's
                                    RGB with its chroma recovered (faster; libjpeg-turbo's pixels
                                    but where a whole block was clamped) */
    int gpu_decode_parts;        /* with gpu_decode_per_image: host threads making each
                                    batch's decoder calls, a part of its images each (0: 1) */
    bool verbose;             /* GPU: print each conv's algorithm choice */
    const char *autotune_dir; /* GPU: the autotune cache's folder (cuda/autotune.cuh); NULL: the
                                 default under $XDG_CACHE_HOME or ~/.cache; "off": none */
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

typedef struct {
    const char *name;
    /* Shapes are inferred for max_batch when init runs: allocate everything here. */
    si_status (*init)(si_engine *e);
    /* Runs the graph on `batch` rows of the inputs (batch <= max_batch). */
    si_status (*run)(si_engine *e, int batch);
    void (*release)(si_engine *e);
    /* --- the slot ring, one interface for every backend: a batch goes in through a slot's
     * pixels (or packed buffer), submit, then collect. A GPU has opts.slots slots in flight at
     * once; the CPU is one synchronous slot (submit runs the batch before it returns). The
     * pixel path needs opts.pixels (input 0 is (N, 3, H, W) float, fed normalised from uint8
     * pixels with opts.mean and opts.std). --- */
    /* the slot's (max_batch, H, W, 3) uint8 input to decode into (page-locked on a GPU); NULL
     * without opts.pixels */
    uint8_t *(*pixels)(si_engine *e, int slot);
    /* with opts.pack_per_image: the slot's page-locked packed buffer (*cap bytes) and its
     * max_batch items (io/resample.h), to decode into for the GPU's resize. NULL (and *cap 0)
     * where the backend has no resize of its own (the CPU) */
    uint8_t *(*pack)(si_engine *e, int slot, si_rs_item **items, size_t *cap);
    /* starts the slot's batch: preprocessing (normalisation; with packed > 0, or after a
     * jpeg_decode of the slot's batch, the resize of items[0, rows) from the packed buffer, whose
     * first `packed` bytes are uploaded first; else the rows are crops in pixels), the model,
     * the outputs' way back. Asynchronous on a GPU (upload and download
     * included), synchronous on the CPU */
    si_status (*submit)(si_engine *e, int slot, int rows, size_t packed);
    /* with opts.gpu_decode_per_image: the slot's job list to fill (n = 0 when handed out), and
     * the decode of those jobs, queued on the slot's stream ahead of submit's resize. The
     * decode's failure (a stream the hardware rejects) leaves nothing queued: the caller decodes
     * those images on the CPU instead. NULL where the backend has no JPEG decoder */
    si_jpeg_jobs *(*jpeg_jobs)(si_engine *e, int slot);
    si_status (*jpeg_decode)(si_engine *e, int slot);
    /* waits for the slot; outs[o] = its host outputs (max_batch rows), valid until resubmitted */
    si_status (*collect)(si_engine *e, int slot, const float **outs);
    /* after collect: when the backend began and finished running the slot's batch (si_now()
     * clock; on a GPU the device's own times, upload to download) */
    si_status (*times)(si_engine *e, int slot, double *t0, double *t1);
    /* replays the model alone on inputs already on the device (compute-only benchmarks) */
    si_status (*run_compute)(si_engine *e);
    /* Load-time check, before init and before anything is allocated: whether this backend runs
     * node n of g (shapes inferred) with these options. false: a short reason in why[cap].
     * NULL: every op the graph can hold. */
    bool (*supports_op)(const si_graph *g, const si_gnode *n, const si_engine_opts *opts, char *why,
                        size_t cap);
} si_backend;

struct si_engine {
    si_graph *g;
    const si_backend *be;
    void *state; /* backend's own */
    int max_batch;
    float **host_in;         /* [n_inputs] host input buffers, sized for max_batch */
    const float **host_out;  /* [n_outputs] valid after run */
    size_t activation_bytes; /* planned activation memory for max_batch (arena + scratch) */
    size_t naive_bytes;      /* what one buffer per value would cost instead */
    double *node_seconds;    /* if set (n_nodes entries), backends add each node's time */
    si_engine_opts opts;
    int n_slots;          /* slots of the ring, set by init (1 on the CPU) */
    bool synchronous;     /* submit returns with the batch finished (the CPU): nothing stays in
                             flight, collect never waits */
    si_engine_memory mem; /* filled by GPU backends */
};

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

/* The slot ring (slot in [0, e->n_slots)); see si_backend. Borrowed buffers. */
uint8_t *si_engine_pixels(si_engine *e, int slot);
uint8_t *si_engine_pack(si_engine *e, int slot, si_rs_item **items, size_t *cap);
si_status si_engine_submit(si_engine *e, int slot, int rows, size_t packed);
si_jpeg_jobs *si_engine_jpeg_jobs(si_engine *e, int slot); /* NULL: no GPU decode */
si_status si_engine_jpeg_decode(si_engine *e, int slot);
/* Whether the engine decodes JPEGs on the GPU (its hardware decoder came up), and from now on
 * not (the CPU then decodes; the ranks of a job decide together). */
bool si_engine_gpu_decodes(si_engine *e);
void si_engine_gpu_decode_off(si_engine *e);
si_status si_engine_collect(si_engine *e, int slot, const float **outs);
si_status si_engine_slot_times(si_engine *e, int slot, double *t0, double *t1);
/* Whether the engine runs on a GPU (its memory summary in e->mem is filled), for reports. */
bool si_engine_on_gpu(const si_engine *e);

extern const si_backend si_cpu_backend;
#ifdef SI_HAVE_CUDA
extern const si_backend si_cuda_backend;
#endif

#endif
