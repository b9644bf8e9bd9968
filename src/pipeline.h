/* One rank's share of a run: read each batch's encoded bytes with one hyperslab read, decode and
 * resize in an OpenMP-parallel step, normalise, run the model, softmax and top-K. It knows
 * nothing of ranks: mpi/ hands it a range [first, first+count) and gathers what it returns. */
#ifndef SI_PIPELINE_H
#define SI_PIPELINE_H

#include "engine.h"
#include "io/source.h"
#include "io/jpeg.h"

typedef struct {
    int batch; /* images per batch (engine planned for it) */
    int topk;
    si_preproc pre; /* resize, crop (= model input size), pixel cap */
    float mean[3], std[3];
} si_pipeline_config;

typedef struct {
    uint64_t first, count; /* the share */
    uint64_t *index;       /* [count] input positions */
    int32_t *status;       /* [count] si_image_status */
    int32_t *topk_class;   /* [count * topk] */
    float *topk_prob;      /* [count * topk] */
    uint64_t ok, failed;
    /* seconds spent in each stage, and from start to the first batch's scores */
    double t_read, t_decode, t_infer, t_post, t_first, t_total;
    double t_wait; /* decoders waiting for the reader: > 0 means reading is the bottleneck */
    uint64_t bytes_read;
    bool pinned; /* the decode buffer is page-locked (a CUDA device is present) */
    /* failed images' messages, sparse: err_index[i] is the input index of err_msg[i] (owned).
     * Memory grows with the failures, not with the images. */
    uint64_t n_errors, err_cap;
    uint64_t *err_index;
    char **err_msg;
} si_share_result;

/* Checks that the graph is an image classifier the pipeline can feed: first input
 * (N, 3, H, W) float, first output (N, classes) or (N, classes, 1, 1). Fills crop size from it
 * when cfg->pre.crop_h is 0, and *classes. Infers shapes for batch 1 to do so. */
si_status si_pipeline_check_model(si_graph *g, si_pipeline_config *cfg, int64_t *classes);

/* Processes [first, first+count) of `set` through engine `e`. Per-image failures are recorded
 * in out->status and logged with index and id; they never stop the run. Returns an error only
 * for failures of the run itself. out's arrays are allocated here; free with
 * si_share_result_free. */
si_status si_pipeline_run(const si_pipeline_config *cfg, si_engine *e, si_source *set,
                          uint64_t first, uint64_t count, si_share_result *out);
void si_share_result_free(si_share_result *r);
/* Appends a failed image's message (copied). */
void si_share_result_add_error(si_share_result *r, uint64_t index, const char *msg);

#endif
