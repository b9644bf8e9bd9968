/* Writing the consolidated result file (rank 0 only). Layout (docs/output-format.md):
 *   /ids         variable-length UTF-8 string [N]  copied from the input set
 *   /index       uint64 [N]                        position in the input
 *   /status      int32 [N]                         si_image_status
 *   /topk_class  int32 [N, K]                      -1 where status != 0
 *   /topk_prob   float32 [N, K]                    0 where status != 0
 *   /errors/index    uint64 [F]   the input index of each failed image (F failures)
 *   /errors/message  string [F]   why it failed (the decoder's or reader's message)
 * Root attributes: format_version, shardinfer_version, model, model_sha256, input, ranks,
 * batch_size, elapsed_seconds, images, failed, command_line, preprocess.
 * The file is written to PATH.tmp and renamed to PATH only when complete. */
#ifndef SI_RESULT_H
#define SI_RESULT_H

#include "source.h"

typedef struct {
    const char *model_path;
    const char *model_sha256;
    const char *input_path;
    const char *command_line;
    const char *preprocess; /* e.g. "resize=256 crop=224x224 mean=... std=... topk=5" */
    int ranks;
    int batch_size;
    double elapsed_seconds;
} si_result_meta;

typedef struct {
    uint64_t n;
    int k;
    const uint64_t *index;     /* [n] */
    const int32_t *status;     /* [n] */
    const int32_t *topk_class; /* [n*k] */
    const float *topk_prob;    /* [n*k] */
    uint64_t n_errors;         /* failed images' messages, sorted by index (may be 0) */
    const uint64_t *err_index; /* [n_errors] */
    char *const *err_msg;      /* [n_errors] */
} si_result_cols;

/* Writes the result. ids are copied from `input` in blocks (bounded memory). Borrows all args. */
si_status si_result_write(const char *path, bool overwrite, const si_result_meta *meta,
                          const si_result_cols *cols, si_source *input);

#endif
