/* A real run, made through io/result.h as the program makes one, for the fuzz targets that read
 * what runs write (fuzz_journal.c: the journal and partial file --resume reads; fuzz_result.c:
 * the results show and merge read): a schema as a postprocessor tells one, a small packed input
 * (ids that are not UTF-8 included) with what a run read of it (hashes, identity), and chunk
 * tails (io/tail.h) with failed images, messages and detections, as the pipeline packs them.
 * Header-only, after fuzz_common.h; the target links io/result.c and what it needs. */
#ifndef SI_FUZZ_RUN_H
#define SI_FUZZ_RUN_H

#include "io/result.h"
#include "io/tail.h"

#define FZ_RUN_MAX_IMAGES 4200
#define FZ_RUN_MAX_CHUNK  10
#define FZ_TAIL_MAX       8192
#define FZ_ALIGN8(x)      (((x) + 7u) & ~(size_t)7u)

typedef struct {
    si_result_schema schema;
    uint64_t n;
    uint32_t chunk;
    uint64_t chunks;
    int32_t status[FZ_RUN_MAX_IMAGES];
    uint32_t hash[FZ_RUN_MAX_IMAGES]; /* each image's si_source_hash as the run read it */
    uint8_t put[FZ_RUN_MAX_IMAGES];   /* per chunk: 1 put by the harness, 2 a fuzz tail's */
    uint64_t failed;                  /* images whose status is a failure */
    si_result_meta meta;
    unsigned batch; /* in the resume key */
    char key[8192];
    si_source *in; /* the input, open */
} fz_run;

static size_t fz_run_type_size(si_result_type t) {
    return t == SI_RESULT_I32 || t == SI_RESULT_F32 ? 4 : t == SI_RESULT_F64 ? 8 : 2;
}

/* A schema as a postprocessor tells one: classify's top-k columns (topk_class int32 [k] and
 * topk_prob float32 [k], which show reads together), or up to four others of any type and of
 * rank 0 to 2, with or without detections. */
static void fz_run_schema(fz_recipe *r, si_result_schema *s) {
    static const char *const names[] = {"embedding", "score", "g/deep/col", "logits"};
    memset(s, 0, sizeof *s);
    bool classify = fz_pick(r, 3) == 0;
    snprintf(s->post, sizeof s->post, "%s", classify ? "classify" : "other");
    s->detect = fz_pick(r, 4) == 3;
    s->n_cols = classify ? 2 : fz_pick(r, 5);
    int64_t k = (int64_t)fz_range(r, 1, 6);
    size_t at = 0;
    for (int c = 0; c < s->n_cols; c++) {
        si_result_col *col = &s->cols[c];
        snprintf(col->name, sizeof col->name, "%s",
                 classify ? (c ? "topk_prob" : "topk_class") : names[(c + fz_pick(r, 4)) % 4]);
        for (int q = 0; q < c; q++) /* names are unique */
            if (!strcmp(s->cols[q].name, col->name))
                snprintf(col->name, sizeof col->name, "col%d", c);
        col->type = classify ? (c ? SI_RESULT_F32 : SI_RESULT_I32) : (si_result_type)fz_pick(r, 4);
        col->ndim = classify ? 1 : fz_pick(r, 3);
        size_t numel = 1;
        for (int d = 0; d < col->ndim; d++) {
            col->dims[d] = classify ? k : (int64_t)fz_range(r, 1, 6);
            numel *= (size_t)col->dims[d];
        }
        col->offset = at;
        col->bytes = numel * fz_run_type_size(col->type);
        at += col->bytes;
    }
    s->row_bytes = at;
}

/* A packed set of n images at path (two bytes each, a JPEG's SOI) whose ids are "<tag>-<i>" or,
 * from the recipe, any bytes. */
static void fz_run_source(fz_recipe *r, const char *path, uint64_t n, const char *tag) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) abort();
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    static uint8_t data[2 * FZ_RUN_MAX_IMAGES + 1];
    static uint64_t off[FZ_RUN_MAX_IMAGES + 1];
    static char ids[FZ_RUN_MAX_IMAGES][24];
    static const char *idp[FZ_RUN_MAX_IMAGES];
    bool raw = fz_pick(r, 4) == 3;
    for (uint64_t i = 0; i <= n; i++) off[i] = 2 * i;
    for (uint64_t i = 0; i < n; i++) {
        data[2 * i] = 0xFF, data[2 * i + 1] = 0xD8;
        if (raw && i < 64) {
            const uint8_t *b;
            size_t len = fz_blob(r, 12, &b);
            memcpy(ids[i], b, len);
            ids[i][len] = 0;
        } else {
            snprintf(ids[i], sizeof ids[i], "%s-%llu", tag, (unsigned long long)i);
        }
        idp[i] = ids[i];
    }
    hsize_t dn = 2 * n, on = n + 1, in = n;
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, H5T_VARIABLE);
    H5Tset_cset(st, H5T_CSET_UTF8);
    struct {
        const char *name;
        hid_t ft, mt;
        hsize_t *dims;
        const void *buf;
    } ds[3] = {{"/images/data", H5T_STD_U8LE, H5T_NATIVE_UINT8, &dn, data},
               {"/images/offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, &on, off},
               {"/images/ids", st, st, &in, idp}};
    for (int k = 0; k < 3; k++) {
        hid_t sp = H5Screate_simple(1, ds[k].dims, NULL);
        hid_t d = H5Dcreate2(f, ds[k].name, ds[k].ft, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (d < 0) abort();
        if (*ds[k].dims) H5Dwrite(d, ds[k].mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds[k].buf);
        H5Dclose(d);
        H5Sclose(sp);
    }
    H5Tclose(st);
    H5Pclose(lcpl);
    H5Fclose(f);
}

/* Sets u up from the recipe: schema and batch size (those of `like` when not NULL: another part
 * of the same run), image count (max_n at most), chunk size, statuses; the input made at src
 * and opened (u->in; the caller closes it), what a run read of it (hashes, identity) and the
 * meta, whose resume key names the input as the program's does. */
static void fz_run_begin(fz_recipe *r, fz_run *u, const char *src, uint64_t max_n,
                         const fz_run *like) {
    memset(u, 0, offsetof(fz_run, status));
    u->failed = 0;
    if (like) {
        u->schema = like->schema;
        u->batch = like->batch;
    } else {
        fz_run_schema(r, &u->schema);
        u->batch = (unsigned)fz_range(r, 1, 4);
    }
    u->n = (fz_range(r, 0, max_n) + 10) % (max_n + 1);
    u->chunk = (uint32_t)((fz_range(r, 0, FZ_RUN_MAX_CHUNK - 1) + 3) % FZ_RUN_MAX_CHUNK + 1);
    u->chunks = (u->n + u->chunk - 1) / u->chunk;
    memset(u->put, 0, u->chunks);
    for (uint64_t i = 0; i < u->n; i++) {
        int s = i < 64 ? fz_pick(r, 8) : (int)(i % 8);
        u->status[i] = s < 5    ? SI_IMG_OK
                       : s == 5 ? SI_IMG_CORRUPT
                       : s == 6 ? SI_IMG_NOT_JPEG
                                : SI_IMG_POST_ERROR;
        u->failed += u->status[i] != SI_IMG_OK;
    }
    fz_run_source(r, src, u->n, like ? "other" : "id");
    if (si_source_open(src, NULL, &u->in) != SI_OK) {
        fprintf(stderr, "==fuzz== the input made here does not open: %s\n", si_error_msg());
        abort();
    }
    static si_bytes b;
    static uint64_t off[FZ_RUN_MAX_IMAGES + 1];
    static int32_t st[FZ_RUN_MAX_IMAGES];
    static char msg[FZ_RUN_MAX_IMAGES * 64];
    if (u->n &&
        si_source_read_batch(u->in, 0, (uint32_t)u->n, &b, off, st, msg, 64, u->hash, true) != SI_OK) {
        fprintf(stderr, "==fuzz== the input made here does not read: %s\n", si_error_msg());
        abort();
    }
    uint64_t fp = 0;
    if (si_source_fingerprint(u->in, &fp) != SI_OK) {
        fprintf(stderr, "==fuzz== the input made here has no fingerprint: %s\n", si_error_msg());
        abort();
    }
    snprintf(u->key, sizeof u->key,
             "model_sha256=ab12;input=%s;input_fp=%016llx;images=%llu;post=%s;batch=%u", src,
             (unsigned long long)fp, (unsigned long long)u->n, u->schema.post, u->batch);
    u->meta = (si_result_meta){.model_path = "m.onnx",
                               .model_sha256 = "ab12",
                               .input_path = src,
                               .command_line = "shardinfer run",
                               .preprocess = "resize=8 crop=8x8",
                               .post_params = u->schema.post,
                               .resume_key = u->key,
                               .ranks = 1,
                               .batch_size = (int)u->batch,
                               .flush_interval = 1e9,
                               .input_identity = si_source_identity(u->in)};
}

/* A valid tail of chunk c into b (FZ_TAIL_MAX bytes); returns its length. */
static size_t fz_run_tail(fz_recipe *r, const fz_run *u, uint64_t c, uint8_t *b) {
    uint64_t first = c * u->chunk;
    uint32_t n = (uint32_t)(u->n - first < u->chunk ? u->n - first : u->chunk);
    uint32_t n_err = 0, dpi[FZ_RUN_MAX_CHUNK] = {0};
    uint64_t n_dets = 0;
    for (uint32_t j = 0; j < n; j++) {
        n_err += u->status[first + j] != SI_IMG_OK;
        if (u->schema.detect && u->status[first + j] == SI_IMG_OK) dpi[j] = (uint32_t)fz_pick(r, 4);
        n_dets += dpi[j];
    }
    memset(b, 0, FZ_TAIL_MAX);
    memcpy(b, &c, 8);
    memcpy(b + 8, &first, 8);
    memcpy(b + 16, &n, 4);
    memcpy(b + 20, &n_err, 4);
    memcpy(b + 24, &n_dets, 8);
    size_t o = SI_TAIL_HEAD;
    memcpy(b + o, u->status + first, 4 * n);
    o += FZ_ALIGN8(4 * n);
    memcpy(b + o, u->hash + first, 4 * n);
    o += FZ_ALIGN8(4 * n);
    if (u->schema.detect) {
        memcpy(b + o, dpi, 4 * n);
        o += FZ_ALIGN8(4 * n);
        for (uint64_t k = 0; k < n_dets; k++, o += sizeof(si_tail_det)) {
            si_tail_det d = {(float)k, 1.5f,  10.0f + (float)k,
                             20.0f,    0.25f, (int32_t)fz_range(r, 0, 1000) - 1};
            memcpy(b + o, &d, sizeof d);
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        if (u->status[first + j] == SI_IMG_OK) continue;
        uint64_t idx = first + j;
        const uint8_t *msg;
        size_t len = fz_blob(r, 120, &msg);
        uint16_t l = (uint16_t)(len ? len : 9);
        memcpy(b + o, &idx, 8);
        memcpy(b + o + 8, &l, 2);
        memcpy(b + o + 10, len ? msg : (const uint8_t *)"bad image", l);
        o += 10 + l;
    }
    return FZ_ALIGN8(o);
}

/* Puts chunk c (its rows a pattern). Returns si_result_put's status. */
static si_status fz_run_put(fz_recipe *r, si_result *res, const fz_run *u, uint64_t c) {
    static uint8_t tail[FZ_TAIL_MAX], rows[FZ_RUN_MAX_CHUNK * 4 * 36 * 8];
    size_t tl = fz_run_tail(r, u, c, tail);
    for (size_t i = 0; i < u->chunk * u->schema.row_bytes && i < sizeof rows; i++)
        rows[i] = (uint8_t)(i * 7 + c);
    return si_result_put(res, rows, tail, tl);
}

#endif
