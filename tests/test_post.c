/* The --post postprocessors (src/post/post.c): the plan of each kind (columns, offsets, row size),
 * the messages of rejected shapes, and known answers per kind on seeded inputs, with every output
 * buffer poisoned before the call. The kinds' building blocks (softmax + top-K, YOLOv8 decoding,
 * the congestion score) have their own reference tests; here they are compared through. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "post/post.h"
#include "tests/test_util.h"

#define POISON 0xA5

static si_shape shp(int ndim, ...) {
    si_shape s = {.ndim = ndim};
    va_list ap;
    va_start(ap, ndim);
    for (int d = 0; d < ndim; d++) s.dims[d] = va_arg(ap, int64_t);
    va_end(ap);
    return s;
}
#define SHAPE(...) shp(__VA_ARGS__)
#define I(v)       ((int64_t)(v))

static si_post_config cfg(si_post_kind k) {
    si_post_config c = si_post_config_default();
    c.kind = k;
    return c;
}

static si_status plan1(si_post_kind k, const char *name, si_shape s, si_post_plan *p) {
    si_post_config c = cfg(k);
    const char *names[1] = {name};
    memset(p, POISON, sizeof *p);
    return si_post_plan_make(&c, 1, names, &s, p);
}

static void check_col(const si_post_plan *p, int i, const char *name, si_col_type t, int ndim,
                      int64_t d0, size_t offset, size_t bytes) {
    CHECK_MSG(i < p->n_cols, "column %d of %d", i, p->n_cols);
    if (i >= p->n_cols) return;
    const si_post_col *c = &p->cols[i];
    CHECK_MSG(strcmp(c->name, name) == 0, "column %d: '%s' vs '%s'", i, c->name, name);
    CHECK_MSG(c->type == t && c->ndim == ndim, "%s: type %d ndim %d", name, c->type, c->ndim);
    if (ndim > 0) CHECK_MSG(c->dims[0] == d0, "%s: dims[0] %lld", name, (long long)c->dims[0]);
    CHECK_MSG(c->offset == offset && c->bytes == bytes, "%s: offset %zu bytes %zu", name, c->offset,
              c->bytes);
}

static void test_names(void) {
    si_post_config c = si_post_config_default();
    CHECK(c.kind == SI_POST_CLASSIFY && c.topk == 5);
    CHECK(c.detect.max_detections == 300 && c.detect.score_threshold == 0.25f);
    CHECK(c.congestion.k == 4 && c.congestion.blur_size == 71);
    const char *names[] = {"classify", "detect", "embed", "congestion", "raw"};
    const si_post_kind kinds[] = {SI_POST_CLASSIFY, SI_POST_DETECT, SI_POST_EMBED,
                                  SI_POST_CONGESTION, SI_POST_RAW};
    for (int i = 0; i < 5; i++) {
        si_post_kind k = (si_post_kind)99;
        CHECK(si_post_kind_parse(names[i], &k) && k == kinds[i]);
        CHECK(strcmp(si_post_kind_name(kinds[i]), names[i]) == 0);
    }
    si_post_kind k = SI_POST_RAW;
    CHECK(!si_post_kind_parse("Classify", &k) && !si_post_kind_parse("", &k) && k == SI_POST_RAW);
    CHECK(!si_post_kind_parse(NULL, &k));
    CHECK(strcmp(si_post_kind_name((si_post_kind)42), "unknown") == 0);
}

static void test_plans(void) {
    si_post_plan p;
    /* classify: (C) and (C, 1, 1) the same; K clamped to C. */
    CHECK(plan1(SI_POST_CLASSIFY, "logits", SHAPE(1, I(1000)), &p) == SI_OK);
    CHECK(p.kind == SI_POST_CLASSIFY && p.n_cols == 2 && p.topk == 5 && p.n_outputs == 1);
    check_col(&p, 0, "topk_class", SI_COL_I32, 1, 5, 0, 20);
    check_col(&p, 1, "topk_prob", SI_COL_F32, 1, 5, 24, 20);
    CHECK(p.row_bytes == 48 && p.out_numel[0] == 1000 && p.max_dets == 0);
    CHECK(p.scratch_bytes >= 1000 * sizeof(float));
    CHECK(plan1(SI_POST_CLASSIFY, "logits", SHAPE(3, I(1000), I(1), I(1)), &p) == SI_OK);
    CHECK(p.row_bytes == 48 && p.out_numel[0] == 1000 && p.topk == 5);
    CHECK(plan1(SI_POST_CLASSIFY, "logits", SHAPE(2, I(3), I(1)), &p) == SI_OK);
    CHECK(p.topk == 3 && p.row_bytes == 32);
    check_col(&p, 1, "topk_prob", SI_COL_F32, 1, 3, 16, 12);

    /* embed */
    CHECK(plan1(SI_POST_EMBED, "emb", SHAPE(1, I(512)), &p) == SI_OK);
    CHECK(p.n_cols == 1 && p.row_bytes == 2048 && p.out_numel[0] == 512 && p.n_outputs == 1);
    check_col(&p, 0, "embedding", SI_COL_F32, 1, 512, 0, 2048);
    CHECK(plan1(SI_POST_EMBED, "emb", SHAPE(3, I(3), I(1), I(1)), &p) == SI_OK);
    CHECK(p.row_bytes == 16 && p.cols[0].bytes == 12);

    /* congestion: (H, W) and (1, H, W) */
    for (int v = 0; v < 2; v++) {
        si_shape s = v ? SHAPE(3, I(1), I(64), I(48)) : SHAPE(2, I(64), I(48));
        CHECK(plan1(SI_POST_CONGESTION, "map", s, &p) == SI_OK);
        CHECK(p.map_h == 64 && p.map_w == 48 && p.n_cols == 2 && p.row_bytes == 16);
        check_col(&p, 0, "congestion/score", SI_COL_F64, 0, 0, 0, 8);
        check_col(&p, 1, "congestion/map_mean", SI_COL_F64, 0, 0, 8, 8);
        CHECK(p.scratch_bytes == si_congestion_scratch_size(64, 48));
        CHECK(p.out_numel[0] == 64 * 48 && p.n_outputs == 1);
    }

    /* detect: no columns; max_dets cannot exceed the anchors. */
    CHECK(plan1(SI_POST_DETECT, "output0", SHAPE(2, I(84), I(8400)), &p) == SI_OK);
    CHECK(p.n_cols == 0 && p.row_bytes == 0 && p.classes == 80 && p.anchors == 8400);
    CHECK(p.max_dets == 300 && p.scratch_bytes == si_detect_scratch_size(8400));
    CHECK(p.out_numel[0] == 84 * 8400 && p.n_outputs == 1);
    CHECK(plan1(SI_POST_DETECT, "output0", SHAPE(2, I(6), I(10)), &p) == SI_OK);
    CHECK(p.classes == 2 && p.anchors == 10 && p.max_dets == 10);

    /* raw: two outputs whose names clash once sanitised, one a scalar per image. */
    {
        si_post_config c = cfg(SI_POST_RAW);
        const char *names[] = {"boxes:0", "boxes/0"};
        si_shape s[] = {SHAPE(2, I(3), I(5)), SHAPE(0)};
        memset(&p, POISON, sizeof p);
        CHECK(si_post_plan_make(&c, 2, names, s, &p) == SI_OK);
        CHECK(p.n_cols == 2 && p.n_outputs == 2 && p.row_bytes == 72);
        check_col(&p, 0, "raw/boxes_0", SI_COL_F32, 2, 3, 0, 60);
        check_col(&p, 1, "raw/boxes_0_1", SI_COL_F32, 0, 0, 64, 4);
        CHECK(p.cols[0].dims[1] == 5 && p.out_numel[0] == 15 && p.out_numel[1] == 1);
    }
    {
        si_post_config c = cfg(SI_POST_RAW);
        const char *names[] = {"", ".", "..", "output0", "a", "a", "a_1", NULL, "x..y-Z.9"};
        si_shape s[9];
        for (int i = 0; i < 9; i++) s[i] = SHAPE(1, I(i + 1));
        CHECK(si_post_plan_make(&c, 9, names, s, &p) == SI_OK);
        const char *want[] = {"raw/output0", "raw/output1", "raw/output2", "raw/output0_1", "raw/a",
                              "raw/a_1",     "raw/a_1_1",   "raw/output7", "raw/x..y-Z.9"};
        size_t off = 0;
        for (int i = 0; i < 9; i++) {
            check_col(&p, i, want[i], SI_COL_F32, 1, i + 1, off, (size_t)(i + 1) * 4);
            off += ((size_t)(i + 1) * 4 + 7) / 8 * 8;
        }
        CHECK(p.row_bytes == off);
    }
    {
        /* A long name is cut so "raw/" and a suffix still fit. */
        char longname[400];
        memset(longname, 'q', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        si_post_config c = cfg(SI_POST_RAW);
        const char *names[] = {longname, longname};
        si_shape s[] = {SHAPE(1, I(2)), SHAPE(1, I(2))};
        CHECK(si_post_plan_make(&c, 2, names, s, &p) == SI_OK);
        CHECK(strncmp(p.cols[0].name, "raw/qqq", 7) == 0 && strcmp(p.cols[0].name, p.cols[1].name));
        size_t n0 = strlen(p.cols[0].name), n1 = strlen(p.cols[1].name);
        CHECK(n0 < sizeof p.cols[0].name - 1 && strcmp(p.cols[1].name + n1 - 2, "_1") == 0);
    }
}

static void expect_reject(si_post_kind k, const char *name, si_shape s, const char *msg) {
    si_post_plan p;
    si_error_clear();
    si_status st = plan1(k, name, s, &p);
    CHECK_MSG(st == SI_ERR_UNSUPPORTED, "%s: status %d", si_post_kind_name(k), st);
    CHECK_MSG(strcmp(si_error_msg(), msg) == 0, "message '%s', expected '%s'", si_error_msg(), msg);
    CHECK(p.n_cols == 0 && p.row_bytes == 0);
}

static void test_rejections(void) {
    expect_reject(SI_POST_CLASSIFY, "logits", SHAPE(3, I(3), I(7), I(7)),
                  "output 'logits' has per-image shape (3, 7, 7); --post classify expects "
                  "(classes) or (classes, 1, 1)");
    expect_reject(SI_POST_CLASSIFY, "logits", SHAPE(0),
                  "output 'logits' has per-image shape (); --post classify expects (classes) or "
                  "(classes, 1, 1)");
    expect_reject(SI_POST_CLASSIFY, "", SHAPE(1, I(0)),
                  "output 0 has per-image shape (0); --post classify expects (classes) or "
                  "(classes, 1, 1)");
    expect_reject(SI_POST_CLASSIFY, "big", SHAPE(1, (int64_t)1 << 31),
                  "output 'big' has per-image shape (2147483648); --post classify expects "
                  "(classes) or (classes, 1, 1)");
    expect_reject(SI_POST_EMBED, "feat", SHAPE(2, I(4), I(4)),
                  "output 'feat' has per-image shape (4, 4); --post embed expects (dim) or (dim, "
                  "1, 1)");
    expect_reject(SI_POST_CONGESTION, "map", SHAPE(3, I(2), I(64), I(64)),
                  "output 'map' has per-image shape (2, 64, 64); --post congestion expects "
                  "(height, width) or (1, height, width)");
    expect_reject(SI_POST_CONGESTION, "map", SHAPE(1, I(4096)),
                  "output 'map' has per-image shape (4096); --post congestion expects (height, "
                  "width) or (1, height, width)");
    expect_reject(SI_POST_DETECT, "output0", SHAPE(2, I(4), I(8400)),
                  "output 'output0' has per-image shape (4, 8400); --post detect expects (4 + "
                  "classes, anchors) with classes >= 1");
    expect_reject(SI_POST_DETECT, "output0", SHAPE(3, I(1), I(84), I(8400)),
                  "output 'output0' has per-image shape (1, 84, 8400); --post detect expects (4 "
                  "+ classes, anchors) with classes >= 1");
    expect_reject(SI_POST_RAW, "x", SHAPE(2, I(3), I(0)),
                  "output 'x' has per-image shape (3, 0); --post raw expects every dimension at "
                  "least 1 and at most 2^30 values per image");

    si_post_plan p;
    si_post_config c = cfg(SI_POST_CLASSIFY);
    si_shape s = SHAPE(1, I(10));
    CHECK(si_post_plan_make(&c, 0, NULL, &s, &p) == SI_ERR_UNSUPPORTED);
    CHECK(strstr(si_error_msg(), "no outputs") != NULL);
    c.topk = 0;
    CHECK(si_post_plan_make(&c, 1, NULL, &s, &p) == SI_ERR_ARG);
    CHECK(strstr(si_error_msg(), "top-K 0") != NULL);
    c = cfg(SI_POST_DETECT);
    c.detect.max_detections = -1;
    s = SHAPE(2, I(6), I(10));
    CHECK(si_post_plan_make(&c, 1, NULL, &s, &p) == SI_ERR_ARG);
    c = cfg(SI_POST_RAW);
    si_shape many[SI_MAX_OUTPUTS + 1];
    for (int i = 0; i <= SI_MAX_OUTPUTS; i++) many[i] = SHAPE(1, I(2));
    CHECK(si_post_plan_make(&c, SI_MAX_OUTPUTS + 1, NULL, many, &p) == SI_ERR_UNSUPPORTED);
    CHECK(strstr(si_error_msg(), "17 outputs") != NULL);
    CHECK(si_post_plan_make(&c, SI_MAX_OUTPUTS, NULL, many, &p) == SI_OK);
    /* raw failing at its second output leaves no half-made plan */
    many[1] = SHAPE(2, I(4), I(-1));
    const char *two[] = {"a", "b"};
    memset(&p, POISON, sizeof p);
    CHECK(si_post_plan_make(&c, 2, two, many, &p) == SI_ERR_UNSUPPORTED);
    CHECK(p.n_cols == 0 && p.row_bytes == 0 && p.n_outputs == 0 && p.kind == SI_POST_RAW);
    CHECK(strcmp(si_error_msg(),
                 "output 'b' has per-image shape (4, -1); --post raw expects "
                 "every dimension at least 1 and at most 2^30 values per image") == 0);
}

/* Plan + scratch + a poisoned row; the caller frees with done(). */
typedef struct {
    si_post_config c;
    si_post_plan p;
    void *scratch;
    uint8_t *row;
} fixture;

static void setup_cfg(fixture *f, const si_post_config *c, int n, const si_shape *s) {
    f->c = *c;
    SI_ASSERT(si_post_plan_make(&f->c, n, NULL, s, &f->p) == SI_OK);
    f->scratch = malloc(f->p.scratch_bytes ? f->p.scratch_bytes : 1);
    memset(f->scratch, POISON, f->p.scratch_bytes);
    f->row = malloc(f->p.row_bytes + 8);
    memset(f->row, POISON, f->p.row_bytes + 8);
}
static void setup(fixture *f, si_post_kind k, int n, const si_shape *s) {
    si_post_config c = cfg(k);
    setup_cfg(f, &c, n, s);
}
static void done(fixture *f) {
    free(f->scratch), free(f->row);
}
static float f32_at(const uint8_t *row, size_t off, int i) {
    float v;
    memcpy(&v, row + off + (size_t)i * sizeof v, sizeof v);
    return v;
}
static int32_t i32_at(const uint8_t *row, size_t off, int i) {
    int32_t v;
    memcpy(&v, row + off + (size_t)i * sizeof v, sizeof v);
    return v;
}
static uint16_t f16_at(const uint8_t *row, size_t off, int i) {
    uint16_t v;
    memcpy(&v, row + off + (size_t)i * sizeof v, sizeof v);
    return v;
}
static double f64_at(const uint8_t *row, size_t off) {
    double v;
    memcpy(&v, row + off, sizeof v);
    return v;
}

static void check_empty_classify(const fixture *f) {
    for (int i = 0; i < f->p.topk; i++) {
        CHECK(i32_at(f->row, f->p.cols[0].offset, i) == -1);
        CHECK(f32_at(f->row, f->p.cols[1].offset, i) == 0.0f);
    }
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const double *p = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (p[i] != p[j]) return p[i] > p[j] ? -1 : 1;
    return i - j;
}

static void test_classify(unsigned *seed) {
    fixture f;
    /* softmax of log(1..4) is (0.1, 0.2, 0.3, 0.4) */
    si_shape s = SHAPE(1, I(4));
    setup(&f, SI_POST_CLASSIFY, 1, &s);
    f.c.topk = 3;
    SI_ASSERT(si_post_plan_make(&f.c, 1, NULL, &s, &f.p) == SI_OK);
    float x[4] = {logf(1), logf(2), logf(3), logf(4)};
    const float *outs[1] = {x};
    int nd = -5;
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, &nd) == SI_OK && nd == 0);
    const int32_t want_c[] = {3, 2, 1};
    const float want_p[] = {0.4f, 0.3f, 0.2f};
    for (int i = 0; i < 3; i++) {
        CHECK(i32_at(f.row, f.p.cols[0].offset, i) == want_c[i]);
        CHECK(fabsf(f32_at(f.row, f.p.cols[1].offset, i) - want_p[i]) < 1e-6f);
    }
    done(&f);

    /* ties: the lower index first; K == C; n_dets may be NULL */
    s = SHAPE(3, I(5), I(1), I(1));
    setup(&f, SI_POST_CLASSIFY, 1, &s);
    float t[5] = {0, 1, 1, 0, 1};
    outs[0] = t;
    CHECK(f.p.topk == 5);
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_OK);
    const int32_t tie_c[] = {1, 2, 4, 0, 3};
    double e = exp(1.0), z = 3 * e + 2;
    const double tie_p[] = {e / z, e / z, e / z, 1 / z, 1 / z};
    for (int i = 0; i < 5; i++) {
        CHECK(i32_at(f.row, f.p.cols[0].offset, i) == tie_c[i]);
        CHECK(fabs(f32_at(f.row, f.p.cols[1].offset, i) - tie_p[i]) < 1e-6);
    }
    done(&f);

    /* seeded random logits against a double softmax and a full sort; an unaligned row */
    const int C = 1000;
    s = SHAPE(1, I(C));
    setup(&f, SI_POST_CLASSIFY, 1, &s);
    float *l = malloc(sizeof(float) * C);
    double *pr = malloc(sizeof(double) * C);
    int *order = malloc(sizeof(int) * C);
    for (int r = 0; r < 5; r++) {
        for (int j = 0; j < C; j++) l[j] = 8.f * test_randf(seed);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < C; j++) mx = fmax(mx, l[j]);
        for (int j = 0; j < C; j++) sum += pr[j] = exp((double)l[j] - mx);
        for (int j = 0; j < C; j++) pr[j] /= sum, order[j] = j;
        qsort_r(order, C, sizeof(int), cmp_desc, pr);
        memset(f.row, POISON, f.p.row_bytes + 8);
        uint8_t *row = f.row + (r & 1) * 4;
        outs[0] = l;
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, row, NULL, NULL) == SI_OK);
        for (int i = 0; i < 5; i++) {
            CHECK(i32_at(row, f.p.cols[0].offset, i) == order[i]);
            CHECK(fabs(f32_at(row, f.p.cols[1].offset, i) - pr[order[i]]) < 1e-6);
        }
    }
    /* NaN or +inf logits: an error, and the row holds the fill values */
    const float bad[] = {NAN, INFINITY};
    for (int b = 0; b < 2; b++) {
        l[17] = bad[b];
        memset(f.row, POISON, f.p.row_bytes);
        nd = -5;
        si_error_clear();
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, &nd) == SI_ERR_ARG);
        CHECK(strstr(si_error_msg(), "non-finite value in the logits") != NULL && nd == 0);
        check_empty_classify(&f);
    }
    free(l), free(pr), free(order);
    done(&f);
}

static void test_embed(unsigned *seed) {
    fixture f;
    si_shape s = SHAPE(1, I(2));
    setup(&f, SI_POST_EMBED, 1, &s);
    float x[2] = {3, 4};
    const float *outs[1] = {x};
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_OK);
    CHECK(fabsf(f32_at(f.row, 0, 0) - 0.6f) < 1e-7f && fabsf(f32_at(f.row, 0, 1) - 0.8f) < 1e-7f);
    /* below the 1e-12 floor the vector is divided by 1e-12, as torch's normalize does */
    x[0] = 3e-13f, x[1] = 4e-13f;
    memset(f.row, POISON, f.p.row_bytes);
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_OK);
    CHECK(fabsf(f32_at(f.row, 0, 0) - 0.3f) < 1e-6f && fabsf(f32_at(f.row, 0, 1) - 0.4f) < 1e-6f);
    done(&f);

    const int D = 512;
    s = SHAPE(3, I(D), I(1), I(1));
    setup(&f, SI_POST_EMBED, 1, &s);
    float *v = malloc(sizeof(float) * D);
    outs[0] = v;
    for (int r = 0; r < 4; r++) {
        float scale = r == 3 ? 1e30f : 10.f * (float)(r + 1);
        double ss = 0;
        for (int i = 0; i < D; i++) v[i] = scale * test_randf(seed), ss += (double)v[i] * v[i];
        memset(f.row, POISON, f.p.row_bytes);
        int nd = -5;
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, &nd) == SI_OK && nd == 0);
        double n2 = 0, err = 0;
        for (int i = 0; i < D; i++) {
            double y = f32_at(f.row, 0, i);
            n2 += y * y;
            err = fmax(err, fabs(y - v[i] / sqrt(ss)));
        }
        CHECK_MSG(fabs(sqrt(n2) - 1) < 1e-6, "norm %.9f", sqrt(n2));
        CHECK_MSG(err < 1e-7, "max error %g", err);
    }
    v[100] = NAN;
    memset(f.row, POISON, f.p.row_bytes);
    si_error_clear();
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_ERR_ARG);
    CHECK(strstr(si_error_msg(), "non-finite value in the embedding") != NULL);
    for (int i = 0; i < D; i++) CHECK(isnan(f32_at(f.row, 0, i)));
    v[100] = -INFINITY;
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_ERR_ARG);
    free(v);
    done(&f);
}

/* --embed-dtype: the option's spellings, the float16 column's plan and parameters, and kinds that
 * refuse it. */
static void test_embed_dtype(void) {
    si_embed_dtype t = SI_EMBED_F16;
    CHECK(si_post_embed_dtype_parse("float32", &t) && t == SI_EMBED_F32);
    CHECK(si_post_embed_dtype_parse("float16", &t) && t == SI_EMBED_F16);
    CHECK(!si_post_embed_dtype_parse("half", &t) && !si_post_embed_dtype_parse("Float32", &t));
    CHECK(!si_post_embed_dtype_parse("", &t) && !si_post_embed_dtype_parse(NULL, &t));
    CHECK(t == SI_EMBED_F16 && si_post_config_default().embed_dtype == SI_EMBED_F32);

    si_post_config c = cfg(SI_POST_EMBED);
    c.embed_dtype = SI_EMBED_F16;
    si_post_plan p;
    const char *names[1] = {"emb"};
    si_shape s = SHAPE(1, I(512));
    memset(&p, POISON, sizeof p);
    CHECK(si_post_plan_make(&c, 1, names, &s, &p) == SI_OK);
    CHECK(p.n_cols == 1 && p.row_bytes == 1024 && p.out_numel[0] == 512);
    check_col(&p, 0, "embedding", SI_COL_F16, 1, 512, 0, 1024);
    s = SHAPE(3, I(3), I(1), I(1));
    CHECK(si_post_plan_make(&c, 1, names, &s, &p) == SI_OK);
    CHECK(p.row_bytes == 8 && p.cols[0].bytes == 6);
    si_result_schema rs;
    si_post_schema(&p, &rs);
    CHECK(rs.n_cols == 1 && rs.cols[0].type == SI_RESULT_F16 && rs.cols[0].bytes == 6);
    char buf[128];
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "embed dtype=float16"), "%s", buf);
    c.embed_dtype = SI_EMBED_F32; /* the default keeps the spelling of results made before */
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "embed"), "%s", buf);

    const si_post_kind others[] = {SI_POST_CLASSIFY, SI_POST_RAW, SI_POST_CONGESTION};
    for (int k = 0; k < 3; k++) {
        c = cfg(others[k]);
        c.embed_dtype = SI_EMBED_F16;
        s = others[k] == SI_POST_CONGESTION ? SHAPE(2, I(8), I(8)) : SHAPE(1, I(10));
        si_error_clear();
        CHECK(si_post_plan_make(&c, 1, names, &s, &p) == SI_ERR_ARG);
        CHECK_MSG(strstr(si_error_msg(), "--embed-dtype float16 is for --post embed") != NULL, "%s",
                  si_error_msg());
    }
}

/* float16 embeddings: each value is the float32 run's value rounded by si_half_from_float (itself
 * checked against numpy in test_half), the norm 1 within a half's rounding, a zero vector zero,
 * and a failed image's row NaN. */
static void test_embed_f16(unsigned *seed) {
    const int D = 768;
    si_shape s = SHAPE(1, I(D));
    si_post_config c16 = cfg(SI_POST_EMBED);
    c16.embed_dtype = SI_EMBED_F16;
    fixture f32, f16;
    setup(&f32, SI_POST_EMBED, 1, &s);
    setup_cfg(&f16, &c16, 1, &s);
    float *v = malloc(sizeof(float) * D);
    const float *outs[1] = {v};
    for (int r = 0; r < 4; r++) {
        /* r == 3: a few large components and many tiny ones, which become subnormal halves */
        for (int i = 0; i < D; i++)
            v[i] = r == 3 && i % 50 ? 1e-6f * test_randf(seed)
                                    : 3.f * (float)(r + 1) * test_randf(seed);
        memset(f16.row, POISON, f16.p.row_bytes);
        CHECK(si_post_image(&f32.c, &f32.p, outs, f32.scratch, f32.row, NULL, NULL) == SI_OK);
        CHECK(si_post_image(&f16.c, &f16.p, outs, f16.scratch, f16.row, NULL, NULL) == SI_OK);
        int differ = 0;
        double n2 = 0;
        for (int i = 0; i < D; i++) {
            uint16_t h = f16_at(f16.row, 0, i);
            differ += h != si_half_from_float(f32_at(f32.row, 0, i));
            double y = si_half_to_float(h);
            n2 += y * y;
        }
        CHECK_MSG(differ == 0, "round %d: %d halves are not the float32 values rounded", r, differ);
        /* each normal half is within 2^-11 of its value relatively, a subnormal within 2^-25 */
        double tol = 0x1p-11 + sqrt((double)D) * 0x1p-25;
        CHECK_MSG(fabs(sqrt(n2) - 1) <= tol, "round %d: norm %.9f", r, sqrt(n2));
    }
    /* a zero vector: zeros in either type, not NaN */
    memset(v, 0, sizeof(float) * D);
    memset(f32.row, POISON, f32.p.row_bytes);
    memset(f16.row, POISON, f16.p.row_bytes);
    CHECK(si_post_image(&f32.c, &f32.p, outs, f32.scratch, f32.row, NULL, NULL) == SI_OK);
    CHECK(si_post_image(&f16.c, &f16.p, outs, f16.scratch, f16.row, NULL, NULL) == SI_OK);
    int nonzero = 0;
    for (int i = 0; i < D; i++)
        nonzero += f32_at(f32.row, 0, i) != 0.0f || isnan(f32_at(f32.row, 0, i)) ||
                   f16_at(f16.row, 0, i) != 0;
    CHECK_MSG(nonzero == 0, "%d values of a zero vector's embedding are not 0", nonzero);
    /* non-finite: the image fails and its row holds float16 NaN */
    v[7] = INFINITY;
    si_error_clear();
    CHECK(si_post_image(&f16.c, &f16.p, outs, f16.scratch, f16.row, NULL, NULL) == SI_ERR_ARG);
    CHECK(strstr(si_error_msg(), "non-finite value in the embedding") != NULL);
    int not_nan = 0;
    for (int i = 0; i < D; i++) not_nan += f16_at(f16.row, 0, i) != 0x7e00;
    CHECK_MSG(not_nan == 0, "%d values of a failed row are not float16 NaN", not_nan);
    free(v);
    done(&f32);
    done(&f16);
}

/* A smooth map: a few random sinusoids plus a little noise, like a density head's output. */
static void smooth_map(float *m, int h, int w, unsigned *seed) {
    float fx[3], fy[3], ph[3], a[3];
    for (int k = 0; k < 3; k++) {
        fx[k] = 0.02f + 0.1f * fabsf(test_randf(seed));
        fy[k] = 0.02f + 0.1f * fabsf(test_randf(seed));
        ph[k] = 3.f * test_randf(seed);
        a[k] = 1.f + test_randf(seed);
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float v = 0.05f * test_randf(seed);
            for (int k = 0; k < 3; k++) v += a[k] * sinf(fx[k] * x + fy[k] * y + ph[k]);
            m[y * w + x] = v;
        }
}

static void test_congestion(unsigned *seed) {
    const int h = 61, w = 83;
    float *m = malloc(sizeof(float) * h * w);
    for (int v = 0; v < 2; v++) {
        fixture f;
        si_shape s = v ? SHAPE(3, I(1), I(h), I(w)) : SHAPE(2, I(h), I(w));
        setup(&f, SI_POST_CONGESTION, 1, &s);
        const float *outs[1] = {m};
        for (int r = 0; r < 3; r++) {
            smooth_map(m, h, w, seed);
            void *sc = malloc(f.p.scratch_bytes);
            double score = NAN, mean = NAN;
            CHECK(si_congestion_score(m, h, w, &f.c.congestion, sc, &score, &mean) == SI_OK);
            free(sc);
            memset(f.row, POISON, f.p.row_bytes);
            int nd = -5;
            CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, &nd) == SI_OK);
            CHECK(nd == 0 && score > 0);
            CHECK_MSG(f64_at(f.row, f.p.cols[0].offset) == score, "score %.17g vs %.17g",
                      f64_at(f.row, f.p.cols[0].offset), score);
            CHECK(f64_at(f.row, f.p.cols[1].offset) == mean);
        }
        /* a constant map has no edges: score 0, mean the constant */
        for (int i = 0; i < h * w; i++) m[i] = 3.5f;
        memset(f.row, POISON, f.p.row_bytes);
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_OK);
        CHECK(f64_at(f.row, f.p.cols[0].offset) == 0.0);
        CHECK(fabs(f64_at(f.row, f.p.cols[1].offset) - 3.5) < 1e-12);
        /* the score's errors come through, and the row holds NaN */
        m[7] = NAN;
        memset(f.row, POISON, f.p.row_bytes);
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, NULL) == SI_ERR_ARG);
        CHECK(isnan(f64_at(f.row, 0)) && isnan(f64_at(f.row, 8)));
        done(&f);
    }
    free(m);
}

/* One anchor of a (4 + C, A) head. */
static void put(float *head, int C, int A, int a, float cx, float cy, float bw, float bh, int cls,
                float score) {
    head[0 * A + a] = cx, head[1 * A + a] = cy, head[2 * A + a] = bw, head[3 * A + a] = bh;
    for (int c = 0; c < C; c++) head[(4 + c) * A + a] = c == cls ? score : 0.05f;
}

static bool det_is(const si_detection *d, float x1, float y1, float x2, float y2, int cls,
                   float score) {
    return d->x1 == x1 && d->y1 == y1 && d->x2 == x2 && d->y2 == y2 && d->cls == cls &&
           d->score == score;
}

static void test_detect(unsigned *seed) {
    enum { C = 2, A = 5 };
    float head[(4 + C) * A];
    /* anchors 0 and 1 overlap (IoU 360/440) in class 0; 2 overlaps 0 but is class 1; 3 is under
     * the threshold; 4 stands alone */
    put(head, C, A, 0, 50, 50, 20, 20, 0, 0.9f);
    put(head, C, A, 1, 52, 50, 20, 20, 0, 0.8f);
    put(head, C, A, 2, 51, 50, 20, 20, 1, 0.7f);
    put(head, C, A, 3, 200, 200, 10, 10, 0, 0.1f);
    put(head, C, A, 4, 150, 100, 30, 40, 1, 0.6f);
    si_shape s = SHAPE(2, I(4 + C), I(A));
    fixture f;
    setup(&f, SI_POST_DETECT, 1, &s);
    CHECK(f.p.max_dets == A);
    si_detection dets[A];
    const float *outs[1] = {head};
    for (int mode = 0; mode < 3; mode++) {
        f.c.detect.class_agnostic = mode == 1;
        f.c.detect.max_detections = mode == 2 ? 2 : 300;
        SI_ASSERT(si_post_plan_make(&f.c, 1, NULL, &s, &f.p) == SI_OK);
        memset(dets, POISON, sizeof dets);
        int nd = -5;
        CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, dets, &nd) == SI_OK);
        if (mode == 0) {
            CHECK(nd == 3);
            CHECK(det_is(&dets[0], 40, 40, 60, 60, 0, 0.9f));
            CHECK(det_is(&dets[1], 41, 40, 61, 60, 1, 0.7f));
            CHECK(det_is(&dets[2], 135, 80, 165, 120, 1, 0.6f));
        } else if (mode == 1) {
            CHECK(nd == 2);
            CHECK(det_is(&dets[0], 40, 40, 60, 60, 0, 0.9f));
            CHECK(det_is(&dets[1], 135, 80, 165, 120, 1, 0.6f));
        } else {
            CHECK(nd == 2 && f.p.max_dets == 2);
            CHECK(det_is(&dets[0], 40, 40, 60, 60, 0, 0.9f));
            CHECK(det_is(&dets[1], 41, 40, 61, 60, 1, 0.7f));
        }
    }
    done(&f);

    /* a seeded random head gives what the decoder gives */
    enum { C2 = 3, A2 = 300 };
    float *h2 = malloc(sizeof(float) * (4 + C2) * A2);
    for (int a = 0; a < A2; a++) {
        h2[0 * A2 + a] = 320 + 300 * test_randf(seed),
                    h2[1 * A2 + a] = 320 + 300 * test_randf(seed);
        h2[2 * A2 + a] = 20 + 60 * fabsf(test_randf(seed));
        h2[3 * A2 + a] = 20 + 60 * fabsf(test_randf(seed));
        for (int c = 0; c < C2; c++) h2[(4 + c) * A2 + a] = 0.5f + 0.5f * test_randf(seed);
    }
    s = SHAPE(2, I(4 + C2), I(A2));
    setup(&f, SI_POST_DETECT, 1, &s);
    si_detection *d1 = malloc(sizeof *d1 * A2), *d2 = malloc(sizeof *d2 * A2);
    memset(d1, POISON, sizeof *d1 * A2);
    void *sc = malloc(si_detect_scratch_size(A2));
    int n_ref = si_detect_decode(h2, C2, A2, &f.c.detect, sc, d2, A2);
    outs[0] = h2;
    int nd = -5;
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, NULL, d1, &nd) == SI_OK);
    CHECK(n_ref > 10 && nd == n_ref && memcmp(d1, d2, sizeof *d1 * (size_t)nd) == 0);
    free(h2), free(d1), free(d2), free(sc);
    done(&f);
}

static void test_raw(unsigned *seed) {
    si_shape s[] = {SHAPE(3, I(2), I(3), I(5)), SHAPE(0), SHAPE(1, I(7))};
    fixture f;
    setup(&f, SI_POST_RAW, 3, s);
    CHECK(f.p.row_bytes == 120 + 8 + 32);
    float a[30], b[1], c[7];
    for (int i = 0; i < 30; i++) a[i] = test_randf(seed);
    b[0] = test_randf(seed);
    for (int i = 0; i < 7; i++) c[i] = test_randf(seed);
    const float *outs[] = {a, b, c};
    int nd = -5;
    CHECK(si_post_image(&f.c, &f.p, outs, f.scratch, f.row, NULL, &nd) == SI_OK && nd == 0);
    CHECK(memcmp(f.row + f.p.cols[0].offset, a, sizeof a) == 0);
    CHECK(memcmp(f.row + f.p.cols[1].offset, b, sizeof b) == 0);
    CHECK(memcmp(f.row + f.p.cols[2].offset, c, sizeof c) == 0);
    done(&f);
}

static void test_fill_empty(void) {
    fixture f;
    si_shape s = SHAPE(1, I(10));
    setup(&f, SI_POST_CLASSIFY, 1, &s);
    f.c.topk = 3; /* K = 3: two columns of 12 bytes, 4 bytes of padding after the first */
    SI_ASSERT(si_post_plan_make(&f.c, 1, NULL, &s, &f.p) == SI_OK);
    memset(f.row, POISON, f.p.row_bytes);
    si_post_fill_empty(&f.p, f.row);
    check_empty_classify(&f);
    CHECK(f.row[12] == 0 && f.row[15] == 0 && f.row[28] == 0);
    done(&f);

    s = SHAPE(1, I(5));
    setup(&f, SI_POST_EMBED, 1, &s);
    si_post_fill_empty(&f.p, f.row);
    for (int i = 0; i < 5; i++) CHECK(isnan(f32_at(f.row, 0, i)));
    done(&f);

    s = SHAPE(2, I(16), I(16));
    setup(&f, SI_POST_CONGESTION, 1, &s);
    si_post_fill_empty(&f.p, f.row);
    CHECK(isnan(f64_at(f.row, 0)) && isnan(f64_at(f.row, 8)));
    done(&f);

    si_shape rs[] = {SHAPE(1, I(3)), SHAPE(0)};
    setup(&f, SI_POST_RAW, 2, rs);
    si_post_fill_empty(&f.p, f.row);
    for (int i = 0; i < 3; i++) CHECK(isnan(f32_at(f.row, f.p.cols[0].offset, i)));
    CHECK(isnan(f32_at(f.row, f.p.cols[1].offset, 0)));
    done(&f);

    s = SHAPE(2, I(6), I(10));
    setup(&f, SI_POST_DETECT, 1, &s);
    si_post_fill_empty(&f.p, NULL); /* nothing to fill */
    done(&f);
}

int main(void) {
    unsigned seed = 20240611;
    test_names();
    test_plans();
    test_rejections();
    test_classify(&seed);
    test_embed(&seed);
    test_embed_dtype();
    test_embed_f16(&seed);
    test_congestion(&seed);
    test_detect(&seed);
    test_raw(&seed);
    test_fill_empty();
    return test_finish();
}
