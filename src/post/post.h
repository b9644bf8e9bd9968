/* The postprocessors: what one image's model outputs become in the result (--post). Each image is
 * processed on its own by si_post_image, which allocates nothing, so the pool (pipeline.c) runs
 * images in parallel. A plan, made once from the model's output shapes, says which fixed-size
 * columns a result row holds and where; detections, whose count varies, go to a separate list.
 *
 *   classify    softmax of output 0 (N, C) or (N, C, 1, 1), top-K: topk_class int32 [K] (-1 when
 *               none), topk_prob float32 [K] (0 when none)
 *   detect      YOLOv8 head output 0 (N, 4 + C, A): score threshold, class-wise NMS
 *               (src/post/detect.h); no fixed columns, detections in the list
 *   embed       output 0 (N, D) or (N, D, 1, 1), L2-normalized: embedding float32 [D], or
 *               float16 [D] with embed_dtype SI_EMBED_F16 (the float32 rounded to nearest even)
 *   congestion  output 0 (N, H, W) or (N, 1, H, W) (src/post/congestion.h):
 *               congestion/score float64, congestion/map_mean float64
 *   raw         every output as it is: raw/<name> float32 [per-image dims]
 * A failed image's row holds the fill values: int32 -1, float NaN (topk_prob 0), float16 NaN.
 * Adding a postprocessor: one file that fills a si_post_kind_ops (src/post/kinds.h; embed.c is the
 * smallest) and one row in post.c's table, under a new si_post_kind value. */
#ifndef SI_POST_H
#define SI_POST_H

#include "engine/graph.h"
#include "io/result.h"
#include "congestion.h"
#include "detect.h"

typedef enum {
    SI_POST_CLASSIFY,
    SI_POST_DETECT,
    SI_POST_EMBED,
    SI_POST_CONGESTION,
    SI_POST_RAW,
} si_post_kind;

/* How embed stores its vectors (--embed-dtype): float16 halves the file of a large collection
 * and keeps about 3 decimal digits, enough for cosine similarity. */
typedef enum { SI_EMBED_F32, SI_EMBED_F16 } si_embed_dtype;

typedef struct {
    si_post_kind kind;
    int topk;                   /* classify: classes kept (clamped to C by the plan) */
    si_embed_dtype embed_dtype; /* embed: the embedding column's type; F32 for the other kinds */
    si_detect_params detect;
    si_congestion_params congestion;
} si_post_config;

/* classify, topk 5, the detect and congestion defaults, float32 embeddings. */
si_post_config si_post_config_default(void);
const char *si_post_kind_name(si_post_kind k);
/* "classify" -> SI_POST_CLASSIFY ...; false for an unknown name. */
bool si_post_kind_parse(const char *s, si_post_kind *k);
/* "float32" -> SI_EMBED_F32, "float16" -> SI_EMBED_F16; false for anything else (*t untouched). */
bool si_post_embed_dtype_parse(const char *s, si_embed_dtype *t);

/* F16: IEEE half bits in the row (src/base/half.h), 2 bytes a value. */
typedef enum { SI_COL_I32, SI_COL_F32, SI_COL_F64, SI_COL_F16 } si_col_type;

#define SI_POST_MAX_COLS 16

typedef struct {
    char name[160]; /* the dataset's path in the result, relative to the root: "topk_class" */
    si_col_type type;
    int ndim;                  /* per-image dims; 0 = one value per image */
    int64_t dims[SI_MAX_DIMS]; /* per-image shape */
    size_t offset, bytes;      /* the column's place in a row; bytes = numel * sizeof(type) */
} si_post_col;

typedef struct {
    si_post_kind kind;
    int n_cols;
    si_post_col cols[SI_POST_MAX_COLS];
    size_t row_bytes; /* sum of the columns' bytes, each column 8-byte aligned */
    int n_outputs;    /* model outputs the postprocessor reads: 1, or all of them for raw */
    int64_t out_numel[SI_MAX_OUTPUTS]; /* floats per image of each output read */
    int max_dets;             /* detect: at most this many detections per image (max_detections,
                               * clamped to the anchors); 0 otherwise */
    size_t scratch_bytes;     /* per thread, for si_post_image */
    int topk;                 /* classify: K after clamping */
    int64_t classes, anchors; /* detect */
    int map_h, map_w;         /* congestion */
} si_post_plan;

/* The postprocessor and its parameters as one string ("classify topk=5"): the result's
 * post_params, and part of the resume key, so each kind's spelling never changes (a run resumed
 * by a newer build compares it byte for byte). classify reports the plan's K (after clamping).
 * Writes at most cap bytes into buf, NUL-terminated; borrows c and p. */
void si_post_params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap);

/* Makes the plan for n_outputs model outputs with these names and per-image shapes (the batch
 * dimension removed). Returns SI_ERR_UNSUPPORTED with a message naming the output and the shape
 * expected when the model does not fit the postprocessor, SI_ERR_ARG for a bad config (topk < 1,
 * max_detections < 0, float16 embeddings asked of a kind other than embed). raw names its columns
 * raw/<name> with the name sanitised to [A-Za-z0-9._-] ("" "." ".." -> output<o>, clashes get
 * _<k>). Borrows everything. */
si_status si_post_plan_make(const si_post_config *c, int n_outputs, const char *const *names,
                            const si_shape *per_image, si_post_plan *p);

/* Copies column c of n consecutive rows (p->row_bytes each) back to back into dst
 * (n * cols[c].bytes): the layout of the column's dataset. Borrows everything. */
void si_post_column(const si_post_plan *p, int c, const uint8_t *rows, uint32_t n, void *dst);

/* Fills a row (p->row_bytes) with the fill values of a failed image. */
void si_post_fill_empty(const si_post_plan *p, uint8_t *row);

/* One image. outs[o] points at the image's per-image output o (p->out_numel[o] floats) for o <
 * p->n_outputs. Writes row (p->row_bytes), and for detect dets[0 .. *n_dets) (room for
 * p->max_dets). scratch: p->scratch_bytes, any content, aligned as malloc's (detect's layout needs
 * it); row needs no alignment. Allocates nothing; thread-safe for distinct scratch/row/dets.
 * Returns SI_OK, or an error with the message in si_error_msg() (non-finite values where the
 * postprocessor cannot take them): the image then fails, and row already holds the fill values
 * and *n_dets is 0. n_dets may be NULL except for detect. */
si_status si_post_image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                        void *scratch, uint8_t *row, si_detection *dets, int *n_dets);

/* Fills s with the result's columns under plan p (names, types, per-image shapes, places in a
 * row), what the result writer (io/result.h) needs of the plan. Borrows p. */
void si_post_schema(const si_post_plan *p, si_result_schema *s);

#endif
