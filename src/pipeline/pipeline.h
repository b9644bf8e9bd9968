/* One rank's batch loop. Four stages run at once, joined by bounded queues:
 *   reader thread   reads a batch's encoded bytes (one hyperslab read) into a ring of 3 slots
 *   main thread     decodes and resizes (OpenMP) into an engine slot and submits it (the
 *                   engine normalizes and runs the model; on a GPU several batches in flight)
 *   post thread     an OpenMP pool of post_threads running the postprocessor over the batch
 *   main thread     hands each finished chunk to the caller (rank 0 writes it, others send it)
 * Work arrives as chunks (src/pipeline/chunk.h) from the caller's next_chunk, claimed a little
 * ahead of the reader. The pipeline knows nothing of ranks: the hooks are where MPI happens, always
 * on the main thread, and `pump` is called whenever the main thread would otherwise wait, so that
 * rank 0 keeps receiving and writing while it computes its own share. */
#ifndef SI_PIPELINE_H
#define SI_PIPELINE_H

#include "chunk.h"
#include "engine/engine.h"
#include "io/jpeg.h"
#include "io/source.h"
#include "timeline.h"

typedef struct {
    int batch;      /* images per batch (engine planned for it) */
    si_preproc pre; /* resize, crop (= model input size), pixel cap */
    float mean[3], std[3];
    si_post_config post;
    si_post_plan plan; /* filled by si_pipeline_check_model */
    uint32_t chunk;    /* images per chunk: a multiple of batch */
    int post_threads;
    int slow_ms; /* test only: sleep this long after each batch */
    /* GPU engines with opts.pack_per_image: decode into the slot's packed buffer and resize on
     * the GPU (--resize-on gpu); else the crops are made here */
    bool gpu_resize;
    /* with gpu_resize: the GPU's hardware JPEG decoder (src/decode/hwjpeg.h; borrowed, made for
     * the engine's slots and batch), which takes the images it can (--decode gpu); NULL: the CPU
     * decodes every image */
    struct si_hwjpeg *hw_jpeg;
    /* with hw_jpeg: of the images the hardware could take, the part the CPU decodes instead
     * (--decode-cpu-share; < 0: balanced batch by batch; 0: none, the default) */
    double decode_cpu_share;
    si_timeline *timeline; /* --timeline: each stage's time on each batch (NULL: off) */
} si_pipeline_config;

enum {
    SI_STAGE_READ,
    SI_STAGE_DECODE,
    SI_STAGE_COMPUTE,
    SI_STAGE_POST,
    SI_STAGE_WRITE,   /* in the hooks: sending (ranks) or writing (rank 0) results */
    SI_STAGE_STARVED, /* the main thread waiting for the reader: the input is the bottleneck */
    SI_STAGES
};
extern const char *const si_stage_names[SI_STAGES];

typedef struct {
    double busy[SI_STAGES]; /* seconds; read and post run in their own threads */
    double t_first;         /* start to the first chunk's results */
    double t_total;
    uint64_t images, failed, chunks, bytes_read;
    uint64_t peak_rss_kb; /* filled by the caller */
    bool pinned;          /* the decode buffer is page-locked (a CUDA device is present) */
    double t_init;        /* the engine's set-up before the pipeline started (GPU: warm-up) */
    int gpu;              /* the rank's GPU, -1 on the CPU */
    uint64_t gpu_mem_kb;  /* device memory in use at the end (cudaMemGetInfo) */
    uint64_t gpu_plan_kb; /* of it, the engine's planned block (shardinfer plan) */
    uint64_t cpu_resized; /* --resize-on gpu: images resized here instead (buffer full, or a
                             filter wider than the GPU's) */
    uint64_t gpu_decoded; /* --decode gpu: images the GPU's hardware decoder decoded */
    uint64_t gpu_retried; /* --decode gpu: images of batches it rejected, decoded here instead */
    double gpu_call_s;    /* --decode gpu: seconds of the decode stage in the decoder's host call */
    double gpu_call_cpu_s; /* --decode gpu: of them, the calling thread's CPU time */
    double gpu_plan_s;     /* --decode gpu: seconds of the decode stage before the call (the
                              headers, the split, the bitstreams' copy) */
    double read_cpu_s;     /* the reader thread's CPU time in its reads (busy[SI_STAGE_READ]
                              is their wall time: the difference is waiting) */
} si_rank_stats;

typedef struct {
    void *ctx;
    /* the next chunk to compute; false when there is none */
    bool (*next_chunk)(void *ctx, uint64_t *id);
    /* a finished chunk, borrowed for the call */
    si_status (*chunk_done)(void *ctx, const si_chunk *c, const si_rank_stats *s);
    /* called between batches and while waiting */
    si_status (*pump)(void *ctx, const si_rank_stats *s);
} si_pipeline_hooks;

/* The resize a crop of h x w gets by default: the longer side over 0.875, the usual ImageNet
 * center crop (256 for 224). */
int si_pipeline_default_resize(int h, int w);

/* Checks that the graph is a model the pipeline can feed: one input (N, 3, H, W) float; makes
 * cfg->plan for cfg->post from the outputs' shapes. Fills the crop size from the model when
 * cfg->pre.crop_h is 0, and the resize from the crop when cfg->pre.resize is 0. */
si_status si_pipeline_check_model(si_graph *g, si_pipeline_config *cfg);

/* Runs chunks from h->next_chunk over `set` (n images) until there are none. Per-image failures
 * are recorded in the chunks with their messages and never stop the run; an error return is a
 * failure of the run itself (or of a hook). *stats gets this rank's totals. */
si_status si_pipeline_run(const si_pipeline_config *cfg, si_engine *e, si_source *set,
                          const si_pipeline_hooks *h, si_rank_stats *stats);

#endif
