/* Image sources (io/source.h) over the sets source_ref.py wrote with h5py, Pillow and
 * `shardinfer pack` from the same 20 JPEGs: every encoded layout gives the JPEG files' bytes and
 * the same crops, every dense layout gives Pillow's pixels, reads across file boundaries equal
 * single-file reads, and hostile sets fail with a status and a message naming the file.
 * Usage: test_source DIR   (DIR as written by source_ref.py gen) */
#include "io/jpeg.h"
#include "io/source.h"
#include "tests/test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *dir;
static int n_img, dense_h, dense_w, crop_resize, crop_h, crop_w, n_many;

/* reference, from the packed set and the files source_ref.py wrote */
static uint8_t **ref_rec;
static size_t *ref_len;
static char **ref_ids;
static uint8_t *ref_crop;  /* si_decode_crop of each record: n_img * crop_h * crop_w * 3 */
static uint8_t *ref_pix;   /* pixels.rgb: Pillow's decode, (N, H, W, 3) */
static uint8_t *ref_dcrop; /* dense_crop.rgb: Pillow's resize + crop of the pixels */

/* A path under dir; four rotating buffers so that a call can take several. */
static const char *P(const char *name) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static uint8_t *slurp(const char *path, size_t *len) {
    return test_slurp(path, len, "run source_ref.py gen first");
}

static si_source *open_ok(const char *spec, const si_source_opts *o) {
    si_source *s = (si_source *)(uintptr_t)1;
    si_status st = si_source_open(spec, o, &s);
    CHECK_MSG(st == SI_OK, "%s: %s", spec, si_error_msg());
    return st == SI_OK ? s : NULL;
}

/* Opening must fail with `want` and a message holding a and b (b may be NULL). */
static void expect_fail(const char *spec, const si_source_opts *o, si_status want, const char *a,
                        const char *b) {
    si_source *s = (si_source *)(uintptr_t)1;
    si_status st = si_source_open(spec, o, &s);
    const char *msg = si_error_msg();
    CHECK_MSG(st == want, "%s: %s, expected %s (%s)", spec, si_status_name(st),
              si_status_name(want), msg);
    CHECK_MSG(s == NULL, "%s: *out not NULL on failure", spec);
    CHECK_MSG(strstr(msg, a) != NULL, "%s: message '%s' does not name '%s'", spec, msg, a);
    if (b) CHECK_MSG(strstr(msg, b) != NULL, "%s: message '%s' lacks '%s'", spec, msg, b);
    printf("  refused %-40s %s: %s\n", strrchr(spec, '/') ? strrchr(spec, '/') + 1 : spec,
           si_status_name(st), msg);
    if (st == SI_OK) si_source_close(s);
}

/* describe's text, for checks on what it says. Caller frees. */
static char *describe(si_source *s) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    si_status st = si_source_describe(s, m);
    fclose(m);
    CHECK_MSG(st == SI_OK, "describe: %s", si_error_msg());
    return text;
}

static void expect_describe(si_source *s, const char *const *want) {
    char *text = describe(s);
    for (; *want; want++)
        CHECK_MSG(strstr(text, *want) != NULL, "describe of %s lacks '%s':\n%s", si_source_spec(s),
                  *want, text);
    free(text);
}

/* --- reference -------------------------------------------------------------------------------- */

static bool load_reference(void) {
    size_t len;
    char *man = (char *)slurp(P("manifest.txt"), &len);
    if (!man) return false;
    int got = sscanf(man, "%d %d %d %d %d %d %d", &n_img, &dense_h, &dense_w, &crop_resize, &crop_h,
                     &crop_w, &n_many);
    free(man);
    CHECK(got == 7 && n_img > 0);
    if (got != 7 || n_img <= 0) return false;

    char *ids = (char *)slurp(P("ids.txt"), &len);
    if (!ids) return false;
    ref_ids = calloc((size_t)n_img, sizeof *ref_ids);
    char *save = NULL, *line = strtok_r(ids, "\n", &save);
    for (int i = 0; i < n_img && line; i++, line = strtok_r(NULL, "\n", &save))
        ref_ids[i] = strdup(line);
    free(ids);

    /* the JPEG files themselves: every encoded layout must give exactly these bytes */
    ref_rec = calloc((size_t)n_img, sizeof *ref_rec);
    ref_len = calloc((size_t)n_img, sizeof *ref_len);
    for (int i = 0; i < n_img; i++) {
        char name[64];
        snprintf(name, sizeof name, "jpeg/img%02d.jpg", i);
        ref_rec[i] = slurp(P(name), &ref_len[i]);
        if (!ref_rec[i] || !ref_ids[i]) return false;
    }

    /* crops of the records, exact mode: the same for every layout since the bytes are */
    size_t cb = (size_t)crop_h * crop_w * 3;
    ref_crop = malloc((size_t)n_img * cb);
    si_decoder *d = si_decoder_create();
    si_preproc p = {.resize = crop_resize,
                    .crop_h = crop_h,
                    .crop_w = crop_w,
                    .max_pixels = 100000000,
                    .exact = true};
    for (int i = 0; i < n_img; i++) {
        char msg[256] = "";
        int st = si_decode_crop(d, ref_rec[i], ref_len[i], &p, ref_crop + i * cb, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "jpeg %d: %s", i, msg);
    }
    si_decoder_destroy(d);

    ref_pix = slurp(P("pixels.rgb"), &len);
    CHECK(ref_pix && len == (size_t)n_img * dense_h * dense_w * 3);
    ref_dcrop = slurp(P("dense_crop.rgb"), &len);
    CHECK(ref_dcrop && len == (size_t)n_img * cb);
    return ref_pix && ref_dcrop;
}

/* --- checks shared by the layouts ------------------------------------------------------------- */

/* ids [0, n) in blocks of `step`: the stored ones, or the index when stored is false. */
static void check_ids(si_source *s, bool stored, int step) {
    char **ids = malloc((size_t)n_img * sizeof *ids);
    int bad = 0;
    for (int first = 0; first < n_img; first += step) {
        uint32_t m = (uint32_t)(first + step <= n_img ? step : n_img - first);
        for (uint32_t j = 0; j < m; j++) ids[j] = (char *)(uintptr_t)1; /* poison */
        si_status st = si_source_read_ids(s, (uint64_t)first, m, ids);
        CHECK_MSG(st == SI_OK, "%s ids: %s", si_source_spec(s), si_error_msg());
        if (st != SI_OK) break;
        for (uint32_t j = 0; j < m; j++) {
            char want[32];
            snprintf(want, sizeof want, "%d", first + (int)j);
            const char *w = stored ? ref_ids[first + j] : want;
            if (strcmp(ids[j], w) != 0 && bad++ < 3)
                fprintf(stderr, "%s: id %d is '%s', expected '%s'\n", si_source_spec(s),
                        first + (int)j, ids[j], w);
        }
        si_source_free_ids(ids, m);
        CHECK(ids[0] == NULL);
    }
    CHECK_MSG(bad == 0, "%s: %d ids differ", si_source_spec(s), bad);
    free(ids);
}

/* Reads [first, first+n) and compares image by image with the reference records (encoded) or
 * pixels (dense). */
static int compare_range(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off) {
    bool dense = si_source_kind(s) == SI_SRC_PIXELS;
    size_t img = (size_t)dense_h * dense_w * 3;
    memset(off, 0xA5, (n + 1) * sizeof *off);
    si_status st = si_source_read(s, first, n, buf, off, NULL);
    if (st != SI_OK) {
        fprintf(stderr, "%s [%llu, +%u): %s\n", si_source_spec(s), (unsigned long long)first, n,
                si_error_msg());
        return 1;
    }
    int bad = off[0] != 0 || off[n] != buf->len;
    for (uint32_t j = 0; j < n; j++) {
        size_t len = off[j + 1] - off[j];
        const uint8_t *want = dense ? ref_pix + (first + j) * img : ref_rec[first + j];
        size_t wlen = dense ? img : ref_len[first + j];
        if (len != wlen || memcmp(buf->data + off[j], want, len) != 0) {
            if (bad < 3)
                fprintf(stderr,
                        "%s: image %llu (read in [%llu, +%u)) differs: %zu bytes, want %zu\n",
                        si_source_spec(s), (unsigned long long)(first + j),
                        (unsigned long long)first, n, len, wlen);
            bad++;
        }
    }
    return bad;
}

/* Everything at once, one by one, in blocks of 3 and 7 (crossing the file boundaries of split
 * sets at different places), and every range when `all_ranges`. */
static void check_reads(si_source *s, bool all_ranges) {
    si_bytes buf = {0};
    uint64_t *off = malloc((size_t)(n_img + 1) * sizeof *off);
    int bad = compare_range(s, 0, (uint32_t)n_img, &buf, off);
    CHECK_MSG(bad == 0, "%s: whole read, %d images differ", si_source_spec(s), bad);
    int steps[] = {1, 3, 7};
    for (int k = 0; k < 3; k++) {
        bad = 0;
        for (int first = 0; first < n_img; first += steps[k]) {
            int m = first + steps[k] <= n_img ? steps[k] : n_img - first;
            bad += compare_range(s, (uint64_t)first, (uint32_t)m, &buf, off);
        }
        CHECK_MSG(bad == 0, "%s: blocks of %d, %d images differ", si_source_spec(s), steps[k], bad);
    }
    if (all_ranges) {
        bad = 0;
        for (int first = 0; first <= n_img; first++)
            for (int m = 0; first + m <= n_img; m++)
                bad += compare_range(s, (uint64_t)first, (uint32_t)m, &buf, off);
        CHECK_MSG(bad == 0, "%s: all ranges, %d mismatches", si_source_spec(s), bad);
    }
    /* past the end: refused, with the source named */
    CHECK(si_source_read(s, (uint64_t)n_img - 1, 2, &buf, off, NULL) == SI_ERR_ARG);
    CHECK(si_source_read(s, (uint64_t)n_img, 0, &buf, off, NULL) == SI_OK && buf.len == 0);
    char *ids[2];
    CHECK(si_source_read_ids(s, (uint64_t)n_img, 1, ids) == SI_ERR_ARG && ids[0] == NULL);
    si_bytes_free(&buf);
    free(off);
}

/* Decodes every record with si_decode_crop: the crops must be those of the JPEG files. */
static void check_crops(si_source *s, si_decoder *d) {
    size_t cb = (size_t)crop_h * crop_w * 3;
    uint8_t *out = malloc(cb);
    si_bytes buf = {0};
    uint64_t *off = malloc((size_t)(n_img + 1) * sizeof *off);
    si_preproc p = {.resize = crop_resize,
                    .crop_h = crop_h,
                    .crop_w = crop_w,
                    .max_pixels = 100000000,
                    .exact = true};
    int bad = 0;
    if (si_source_read(s, 0, (uint32_t)n_img, &buf, off, NULL) == SI_OK) {
        for (int i = 0; i < n_img; i++) {
            memset(out, 0x5A, cb);
            char msg[256] = "";
            int st =
                si_decode_crop(d, buf.data + off[i], off[i + 1] - off[i], &p, out, msg, sizeof msg);
            if (st != SI_IMG_OK || memcmp(out, ref_crop + i * cb, cb) != 0) bad++;
        }
    } else {
        bad = n_img;
    }
    CHECK_MSG(bad == 0, "%s: %d crops differ from the JPEG files'", si_source_spec(s), bad);
    free(out);
    free(off);
    si_bytes_free(&buf);
}

/* si_resize_crop of each pixel image: Pillow's resize + crop of the same pixels. */
static void check_dense_crops(si_source *s) {
    size_t cb = (size_t)crop_h * crop_w * 3;
    uint8_t *out = malloc(cb);
    si_bytes buf = {0};
    uint64_t *off = malloc((size_t)(n_img + 1) * sizeof *off);
    si_preproc p = {.resize = crop_resize, .crop_h = crop_h, .crop_w = crop_w};
    int bad = 0;
    if (si_source_read(s, 0, (uint32_t)n_img, &buf, off, NULL) == SI_OK) {
        for (int i = 0; i < n_img; i++) {
            memset(out, 0x5A, cb);
            si_status st = si_resize_crop(buf.data + off[i], dense_w, dense_h, &p, out);
            if (st != SI_OK || memcmp(out, ref_dcrop + i * cb, cb) != 0) bad++;
        }
    } else {
        bad = n_img;
    }
    CHECK_MSG(bad == 0, "%s: %d resize+crops differ from Pillow's", si_source_spec(s), bad);
    free(out);
    free(off);
    si_bytes_free(&buf);
}

/* --- the layouts ------------------------------------------------------------------------------ */

static void check_encoded(const char *spec, const si_source_opts *o, int layout, int files,
                          bool stored_ids, bool all_ranges, si_decoder *d) {
    si_source *s = open_ok(spec, o);
    if (!s) return;
    CHECK_MSG(si_source_layout(s) == layout, "%s: layout %s, expected %s", spec,
              si_source_layout_name(si_source_layout(s)), si_source_layout_name(layout));
    CHECK(si_source_kind(s) == SI_SRC_ENCODED);
    CHECK_MSG(si_source_count(s) == (uint64_t)n_img, "%s: %llu images", spec,
              (unsigned long long)si_source_count(s));
    CHECK_MSG(si_source_files(s) == files, "%s: %d files, expected %d", spec, si_source_files(s),
              files);
    CHECK(strcmp(si_source_spec(s), spec) == 0);
    int h = -1;
    CHECK(!si_source_pixel_shape(s, &h, NULL, NULL) && h == -1);
    check_reads(s, all_ranges);
    check_ids(s, stored_ids, 3);
    check_crops(s, d);
    if (files > 1) { /* with one file open at a time: every boundary reopens a file */
        si_source_set_max_open(s, 1);
        check_reads(s, all_ranges);
        check_ids(s, stored_ids, 6);
    }
    const char *want[] = {"layout: ",           si_source_layout_name(layout), "images: 20",
                          "encoded size: min ", "JPEG SOI marker: 20 of 20",   NULL};
    expect_describe(s, want);
    printf("  %-44s %-10s %d files: records, ids, crops ok\n",
           strstr(spec, dir) ? spec + strlen(dir) + 1 : spec, si_source_layout_name(layout), files);
    si_source_close(s);
}

static void check_dense(const char *spec, const si_source_opts *o, int layout, int files,
                        bool stored_ids, bool all_ranges) {
    si_source *s = open_ok(spec, o);
    if (!s) return;
    CHECK_MSG(si_source_layout(s) == layout, "%s: layout %s, expected %s", spec,
              si_source_layout_name(si_source_layout(s)), si_source_layout_name(layout));
    CHECK(si_source_kind(s) == SI_SRC_PIXELS);
    CHECK(si_source_count(s) == (uint64_t)n_img);
    CHECK(si_source_files(s) == files);
    int h = 0, w = 0, c = 0;
    CHECK(si_source_pixel_shape(s, &h, &w, &c) && h == dense_h && w == dense_w && c == 3);
    check_reads(s, all_ranges);
    check_ids(s, stored_ids, 3);
    check_dense_crops(s);
    if (files > 1) {
        si_source_set_max_open(s, 1);
        check_reads(s, all_ranges);
    }
    const char *want[] = {"pixels: H 260, W 300, C 3", si_source_layout_name(layout), NULL};
    expect_describe(s, want);
    printf("  %-44s %-10s %d files: pixels, ids, resize+crop ok\n", spec + strlen(dir) + 1,
           si_source_layout_name(layout), files);
    si_source_close(s);
}

static void test_encoded(void) {
    puts("encoded layouts:");
    si_decoder *d = si_decoder_create();
    check_encoded(P("packed.h5"), NULL, SI_LAYOUT_PACKED, 1, true, false, d);
    si_source_opts forced = {.layout = SI_LAYOUT_PACKED, .ids_dataset = "/images/ids"};
    check_encoded(P("packed.h5"), &forced, SI_LAYOUT_PACKED, 1, true, false, d);
    si_source_opts extra = {.ids_dataset = "extra/names"};
    check_encoded(P("packed_extra.h5"), &extra, SI_LAYOUT_PACKED, 1, true, false, d);
    si_source_opts custom = {
        .offsets_dataset = "/x/off", .data_dataset = "x/bytes", .ids_dataset = "/x/names"};
    check_encoded(P("packed_custom.h5"), &custom, SI_LAYOUT_PACKED, 1, true, false, d);
    si_source_opts custom_noids = {.offsets_dataset = "/x/off", .data_dataset = "/x/bytes"};
    check_encoded(P("packed_custom.h5"), &custom_noids, SI_LAYOUT_PACKED, 1, false, false, d);
    check_encoded(P("vlen.h5"), NULL, SI_LAYOUT_VLEN, 1, true, true, d);
    si_source_opts vl = {.layout = SI_LAYOUT_VLEN};
    check_encoded(P("vlen.h5"), &vl, SI_LAYOUT_VLEN, 1, true, false, d);
    check_encoded(P("vlen_gzip.h5"), NULL, SI_LAYOUT_VLEN, 1, true, false, d);
    check_encoded(P("vlen_split.txt"), NULL, SI_LAYOUT_VLEN, 4, true, true, d);
    check_encoded(P("vlen_split/part*"), NULL, SI_LAYOUT_VLEN, 4, true, false, d);
    check_encoded(P("vlen_split"), NULL, SI_LAYOUT_VLEN, 4, true, true, d);
    si_source_opts pick = {.data_dataset = "/b/jpeg"};
    check_encoded(P("two_candidates.h5"), &pick, SI_LAYOUT_VLEN, 1, true, false, d);
    si_source_opts pick_a = {.data_dataset = "a/jpeg"}; /* no /a/ids: the index */
    check_encoded(P("two_candidates.h5"), &pick_a, SI_LAYOUT_VLEN, 1, false, false, d);
    si_decoder_destroy(d);

    /* what describe says of filters, chunks and multi-file ids */
    si_source *s = open_ok(P("vlen_gzip.h5"), NULL);
    if (s) {
        const char *want[] = {"/data/jpeg: variable-length uint8, shape [20], chunks [4]",
                              "shuffle",
                              "gzip level 6",
                              "(detected)",
                              "ids: dataset /data/ids",
                              NULL};
        expect_describe(s, want);
        si_source_close(s);
    }
    s = open_ok(P("vlen_split.txt"), NULL);
    if (s) {
        const char *want[] = {"files: 4", "part1b_empty.h5: 0 images", "(list file)",
                              "duplicates across files are possible", NULL};
        expect_describe(s, want);
        si_source_close(s);
    }
    s = open_ok(P("packed.h5"), NULL);
    if (s) {
        const char *want[] = {"/images/offsets: uint64", "/images/data: uint8", NULL};
        expect_describe(s, want);
        si_source_close(s);
    }
}

static void test_dense(void) {
    puts("dense layouts:");
    check_dense(P("dense_nhwc.h5"), NULL, SI_LAYOUT_DENSE_NHWC, 1, true, true);
    check_dense(P("dense_nchw.h5"), NULL, SI_LAYOUT_DENSE_NCHW, 1, false, true);
    si_source_opts nchw = {.layout = SI_LAYOUT_DENSE_NCHW, .data_dataset = "/images/pixels"};
    check_dense(P("dense_nchw.h5"), &nchw, SI_LAYOUT_DENSE_NCHW, 1, false, false);
    check_dense(P("dense_gzip.h5"), NULL, SI_LAYOUT_DENSE_NHWC, 1, true, false);
    check_dense(P("dense_split"), NULL, SI_LAYOUT_DENSE_NHWC, 2, false, true);

    si_source *s = open_ok(P("dense_gzip.h5"), NULL);
    if (s) {
        const char *want[] = {"chunks [4, 260, 300, 3]", "gzip level 4", "fixed-length string of",
                              NULL};
        expect_describe(s, want);
        si_source_close(s);
    }

    /* (2, 3, 5, 3): both dim 1 and dim 3 could be channels */
    size_t len;
    uint8_t *raw = slurp(P("bad/ambiguous.raw"), &len);
    CHECK(raw && len == 90);
    s = open_ok(P("bad/ambiguous.h5"), NULL);
    if (s && raw) {
        int h, w, c;
        CHECK(si_source_layout(s) == SI_LAYOUT_DENSE_NHWC);
        CHECK(si_source_pixel_shape(s, &h, &w, &c) && h == 3 && w == 5 && c == 3);
        const char *want[] = {"ambiguous: ", "(detected)", NULL};
        expect_describe(s, want);
        si_bytes buf = {0};
        uint64_t off[3];
        CHECK(si_source_read(s, 0, 2, &buf, off, NULL) == SI_OK && buf.len == 90 &&
              memcmp(buf.data, raw, 90) == 0);
        si_bytes_free(&buf);
    }
    si_source_close(s);
    si_source_opts force = {.layout = SI_LAYOUT_DENSE_NCHW};
    s = open_ok(P("bad/ambiguous.h5"), &force);
    if (s && raw) {
        int h, w, c;
        CHECK(si_source_pixel_shape(s, &h, &w, &c) && h == 5 && w == 3 && c == 3);
        char *text = describe(s);
        CHECK_MSG(strstr(text, "(forced)") && !strstr(text, "ambiguous:"), "%s", text);
        free(text);
        si_bytes buf = {0};
        uint64_t off[3];
        CHECK(si_source_read(s, 1, 1, &buf, off, NULL) == SI_OK && buf.len == 45);
        int bad = 0; /* stored (C, H, W) = (3, 5, 3); read as (H, W, C) */
        for (int y = 0; y < 5; y++)
            for (int x = 0; x < 3; x++)
                for (int k = 0; k < 3; k++)
                    bad += buf.data[(y * 3 + x) * 3 + k] != raw[45 + (k * 5 + y) * 3 + x];
        CHECK(bad == 0);
        si_bytes_free(&buf);
    }
    si_source_close(s);
    free(raw);

    /* one channel, (N, C, H, W) = (3, 1, 4, 5): NCHW since dim 3 cannot be channels */
    raw = slurp(P("bad/gray_nchw.raw"), &len);
    s = open_ok(P("bad/gray_nchw.h5"), NULL);
    if (s && raw && len == 60) {
        int h, w, c;
        CHECK(si_source_layout(s) == SI_LAYOUT_DENSE_NCHW);
        CHECK(si_source_pixel_shape(s, &h, &w, &c) && h == 4 && w == 5 && c == 1);
        si_bytes buf = {0};
        uint64_t off[4];
        CHECK(si_source_read(s, 0, 3, &buf, off, NULL) == SI_OK && buf.len == 60 && off[1] == 20 &&
              memcmp(buf.data, raw, 60) == 0);
        si_bytes_free(&buf);
    }
    si_source_close(s);
    free(raw);
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* 100 files of one image: every read crosses files, and no more than max_open stay open. */
static void test_many(void) {
    puts("many files:");
    int before = open_fds();
    si_source *s = open_ok(P("vlen_many"), NULL);
    if (!s) return;
    int after_open = open_fds();
    CHECK(si_source_files(s) == n_many && si_source_count(s) == (uint64_t)n_many);
    si_source_set_max_open(s, 8);
    si_bytes buf = {0};
    uint64_t *off = malloc((size_t)(n_many + 1) * sizeof *off);
    char **ids = malloc((size_t)n_many * sizeof *ids);
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        CHECK(si_source_read(s, 0, (uint32_t)n_many, &buf, off, NULL) == SI_OK);
        for (int i = 0; i < n_many; i++) {
            int r = i % n_img;
            bad += off[i + 1] - off[i] != ref_len[r] ||
                   memcmp(buf.data + off[i], ref_rec[r], ref_len[r]) != 0;
        }
        CHECK(si_source_read_ids(s, 0, (uint32_t)n_many, ids) == SI_OK);
        for (int i = 0; i < n_many; i++) bad += strcmp(ids[i], ref_ids[i % n_img]) != 0;
        si_source_free_ids(ids, (uint32_t)n_many);
    }
    CHECK_MSG(bad == 0, "vlen_many: %d records or ids differ", bad);
    int after_read = open_fds();
    /* HDF5 holds one descriptor per open file */
    CHECK_MSG(after_open - before <= 64 && after_read - before <= 8,
              "descriptors: %d before, %d after opening, %d after reading with max_open 8", before,
              after_open, after_read);
    printf("  vlen_many: %d files, descriptors +%d after open (max 64), +%d with max_open 8\n",
           n_many, after_open - before, after_read - before);
    free(ids);
    free(off);
    si_bytes_free(&buf);
    si_source_close(s);
    CHECK(open_fds() == before);
}

static bool copy_file(const char *from, const char *to) {
    size_t len;
    uint8_t *b = slurp(from, &len);
    FILE *f = b ? fopen(to, "wb") : NULL;
    bool ok = f && fwrite(b, 1, len, f) == len;
    if (f) ok = fclose(f) == 0 && ok;
    free(b);
    return ok;
}

/* A file rewritten between its eviction and its reopening: refused (the input changed under
 * the run), never read into a buffer sized for the old shape. */
static void test_reopen_changed(void) {
    puts("file changed while evicted:");
    mkdir(P("reopen"), 0755);
    bool ok = copy_file(P("dense_split/a.h5"), P("reopen/a.h5")) &&
              copy_file(P("dense_split/b.hdf5"), P("reopen/b.h5"));
    CHECK(ok);
    si_source *s = ok ? open_ok(P("reopen"), NULL) : NULL;
    if (!s) return;
    si_source_set_max_open(s, 1);
    si_bytes buf = {0};
    uint64_t *off = malloc((size_t)(n_img + 1) * sizeof *off);
    CHECK(si_source_read(s, 0, (uint32_t)n_img, &buf, off, NULL) == SI_OK); /* a.h5 evicted */
    CHECK(copy_file(P("bad/dense_wide.h5"), P("reopen/a.h5")));
    si_status st = si_source_read(s, 0, 2, &buf, off, NULL);
    /* a fault of the storage, which stops a run, not an image's read error */
    CHECK_MSG(st == SI_ERR_FAULT && strstr(si_error_msg(), "reopen/a.h5") &&
                  strstr(si_error_msg(), "changed under the run"),
              "%s: %s", si_status_name(st), si_error_msg());
    printf("  refused: %s\n", si_error_msg());
    CHECK(copy_file(P("vlen_split/part0.h5"), P("reopen/a.h5")));
    st = si_source_read(s, 0, 2, &buf, off, NULL);
    CHECK_MSG(st == SI_ERR_FAULT && strstr(si_error_msg(), "reopen/a.h5"), "%s: %s",
              si_status_name(st), si_error_msg());
    printf("  refused: %s\n", si_error_msg());
    CHECK(si_source_read(s, 12, 8, &buf, off, NULL) == SI_OK); /* b.h5 still reads */
    free(off);
    si_bytes_free(&buf);
    si_source_close(s);
}

static void test_hostile(void) {
    puts("hostile sets:");
    expect_fail(P("bad/list_missing.txt"), NULL, SI_ERR_IO, "nope.h5", "list_missing.txt line 3");
    expect_fail(P("bad/list_mixed.txt"), NULL, SI_ERR_FORMAT, "dense_nhwc.h5", "layout");
    expect_fail(P("bad/list_odd.txt"), NULL, SI_ERR_FORMAT, "dense_small.h5", "200x300x3");
    expect_fail(P("bad/list_mixed_ids.txt"), NULL, SI_ERR_FORMAT, "vlen_noids.h5", "ids");
    expect_fail(P("bad/vlen_int32.h5"), NULL, SI_ERR_FORMAT, "vlen_int32.h5",
                "variable-length int32");
    si_source_opts named = {.data_dataset = "/images"};
    expect_fail(P("bad/vlen_int32.h5"), &named, SI_ERR_FORMAT, "vlen_int32.h5",
                "variable-length int32");
    si_source_opts forced_vlen = {.layout = SI_LAYOUT_VLEN, .data_dataset = "/images"};
    expect_fail(P("bad/vlen_int32.h5"), &forced_vlen, SI_ERR_FORMAT, "vlen_int32.h5", "int32");
    expect_fail(P("two_candidates.h5"), NULL, SI_ERR_ARG, "two_candidates.h5",
                "2 candidate image datasets: /a/jpeg, /b/jpeg");
    expect_fail(P("two_candidates.h5"), NULL, SI_ERR_ARG, "--data-dataset", NULL);
    expect_fail(P("empty_dir"), NULL, SI_ERR_IO, "empty_dir", "no *.h5");
    expect_fail(P("no_such.h5"), NULL, SI_ERR_IO, "no_such.h5", "no such file");
    expect_fail(P("vlen_split/zz*.h5"), NULL, SI_ERR_IO, "zz*.h5", "matches no file");
    expect_fail(P("bad/not_a_list.bin"), NULL, SI_ERR_FORMAT, "not_a_list.bin", "list file");
    si_source_opts dense_of_vlen = {.layout = SI_LAYOUT_DENSE_NHWC};
    expect_fail(P("vlen.h5"), &dense_of_vlen, SI_ERR_FORMAT, "vlen.h5", "4-D uint8");
    si_source_opts vlen_of_packed = {.layout = SI_LAYOUT_VLEN};
    expect_fail(P("packed.h5"), &vlen_of_packed, SI_ERR_FORMAT, "packed.h5", "variable-length");
    si_source_opts nhwc_of_nchw = {.layout = SI_LAYOUT_DENSE_NHWC};
    expect_fail(P("dense_nchw.h5"), &nhwc_of_nchw, SI_ERR_FORMAT, "dense_nchw.h5", "dim 3");
    si_source_opts no_ids = {.ids_dataset = "/nope/ids"};
    expect_fail(P("vlen.h5"), &no_ids, SI_ERR_FORMAT, "vlen.h5", "/nope/ids");
    si_source_opts ids_wrong = {.ids_dataset = "/data/jpeg"};
    expect_fail(P("vlen.h5"), &ids_wrong, SI_ERR_FORMAT, "vlen.h5", "expected strings");
    si_source_opts no_data = {.data_dataset = "/nope"};
    expect_fail(P("vlen.h5"), &no_data, SI_ERR_FORMAT, "vlen.h5", "/nope");
    si_source_opts bad_layout = {.layout = 99};
    expect_fail(P("vlen.h5"), &bad_layout, SI_ERR_ARG, "vlen.h5", "layout");
    /* a packed set named by the wrong offsets dataset: the ids are one short */
    si_source_opts off_ids = {.offsets_dataset = "/images/ids", .data_dataset = "/images/data"};
    expect_fail(P("packed.h5"), &off_ids, SI_ERR_FORMAT, "packed.h5", "/images/ids");

    /* integer ids, as a user's dataset of numbers next to the images */
    si_source *s = open_ok(P("bad/int_ids.h5"), NULL);
    if (s) {
        char *ids[3];
        CHECK(si_source_read_ids(s, 0, 3, ids) == SI_OK && strcmp(ids[0], "-5") == 0 &&
              strcmp(ids[1], "7") == 0 && strcmp(ids[2], "12345678901") == 0);
        si_source_free_ids(ids, 3);
        si_source_close(s);
    }

    int l = -1;
    CHECK(si_source_layout_parse("dense-nchw", &l) == SI_OK && l == SI_LAYOUT_DENSE_NCHW);
    CHECK(si_source_layout_parse("nchw", &l) == SI_ERR_ARG && strstr(si_error_msg(), "nchw"));
    si_source_close(NULL);
    si_source_free_ids(NULL, 3);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_source DIR (written by source_ref.py gen)\n");
        return 2;
    }
    dir = argv[1];
    if (!load_reference()) {
        test_finish();
        return 1;
    }
    test_encoded();
    test_dense();
    test_many();
    test_reopen_changed();
    test_hostile();
    for (int i = 0; i < n_img; i++) {
        free(ref_rec[i]);
        free(ref_ids[i]);
    }
    free(ref_rec);
    free(ref_len);
    free(ref_ids);
    free(ref_crop);
    free(ref_pix);
    free(ref_dcrop);
    return test_finish();
}
