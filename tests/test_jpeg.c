/* JPEG decode + resize + crop against Pillow (references made by io_ref.py gen DIR), in exact
 * mode, with each EXIF orientation (against ImageOps.exif_transpose), and DCT-scaled (against
 * Pillow's Image.draft); hostile files against their expected statuses, and the normalisation
 * against its formula. The resizes with both filters, BILINEAR and BICUBIC (except the oriented
 * crops: the orientation happens before the resize, whichever it is), and the rule that sends
 * images too wide for the GPU's filter to the CPU.
 * Usage: test_jpeg DIR
 *
 * Bound: 0. TurboJPEG 2.1.5 (system) and the libjpeg-turbo 3.1.1 bundled with Pillow decode
 * every test file to identical pixels, unscaled and at 1/2, 1/4, 1/8 (default ISLOW IDCT and
 * fancy upsampling in both), and the resize replicates Pillow's fixed-point arithmetic, so any
 * difference is a bug; the measured maximum difference is printed for each file. */
#include "io/jpeg.h"
#include "io/jpeg_scan.h"
#include "io/yuv.h"
#include "io/resample.h"
#include "tests/test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

/* A manifest of io_ref.py gen's in dir, open for reading; NULL (and a failed check) if not. */
static FILE *open_manifest(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *m = fopen(path, "r");
    CHECK_MSG(m != NULL, "%s", path);
    return m;
}

static const int max_diff_allowed = 0;

static uint8_t *slurp(const char *dir, const char *name, const char *suffix, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
    return test_slurp(path, len, "run io_ref.py gen first");
}

/* The reference file name's suffix for a filter: stem + ".bicubic" + ".rgb"; BILINEAR's files
 * have none (they were there first). */
static const char *ref_suffix(char *buf, size_t cap, const char *stem, si_interp interp) {
    snprintf(buf, cap, "%s%s%s.rgb", stem, interp == SI_INTERP_BILINEAR ? "" : ".",
             interp == SI_INTERP_BILINEAR ? "" : si_interp_name(interp));
    return buf;
}

static int max_abs_diff(const uint8_t *a, const uint8_t *b, size_t n, size_t *where) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) {
            m = d;
            *where = i;
        }
    }
    return m;
}

/* The crop through si_rs_pixel, the per-pixel formula the GPU kernel runs (cuda/resize.cu):
 * false if the item's filters are wider than the GPU takes. */
static bool gpu_formula_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *out) {
    si_rs_item it;
    if (!si_rs_item_make(w, h, p->resize, p->interp, p->crop_h, p->crop_w, &it) ||
        !si_rs_gpu_fits(&it))
        return false;
    for (int y = 0; y < p->crop_h; y++)
        for (int x = 0; x < p->crop_w; x++)
            si_rs_pixel(src, &it, x, y, out + ((size_t)y * p->crop_w + x) * 3);
    return true;
}

/* Every good JPEG: the plain decode (identity resize, full-size crop) against Pillow's
 * convert('RGB'), then the preprocessing against Pillow's resize + crop with filter interp. */
static void test_good(const char *dir, si_decoder *d, si_interp interp) {
    char name[256], sfx[64];
    FILE *m = open_manifest(dir, "jpeg_manifest.tsv");
    if (!m) return;
    int w, h, resize, ch, cw, files = 0, worst_dec = 0, worst_crop = 0;
    while (fscanf(m, "%255s %d %d %d %d %d", name, &w, &h, &resize, &ch, &cw) == 6) {
        size_t len, dlen, clen, where = 0;
        uint8_t *jpg = slurp(dir, name, "", &len);
        uint8_t *dec = slurp(dir, name, ".dec.rgb", &dlen);
        uint8_t *crop = slurp(dir, name, ref_suffix(sfx, sizeof sfx, ".crop", interp), &clen);
        CHECK(jpg && dec && crop);
        if (!jpg || !dec || !crop) break;
        CHECK(dlen == (size_t)w * h * 3 && clen == (size_t)ch * cw * 3);
        char msg[256];

        si_preproc full = {.resize = w < h ? w : h,
                           .interp = interp,
                           .crop_h = h,
                           .crop_w = w,
                           .max_pixels = 100000000,
                           .exact = true};
        uint8_t *out = malloc(dlen);
        memset(out, 0xA5, dlen); /* poison */
        int st = si_decode_crop(d, jpg, len, &full, out, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "%s: %s", name, msg);
        int md = st == SI_IMG_OK ? max_abs_diff(out, dec, dlen, &where) : 255;
        CHECK_MSG(md <= max_diff_allowed, "%s: decode differs from Pillow by %d at byte %zu", name,
                  md, where);
        free(out);

        si_preproc p = {.resize = resize,
                        .interp = interp,
                        .crop_h = ch,
                        .crop_w = cw,
                        .max_pixels = 100000000,
                        .exact = true};
        out = malloc(clen);
        memset(out, 0xA5, clen);
        st = si_decode_crop(d, jpg, len, &p, out, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "%s: %s", name, msg);
        int mc = st == SI_IMG_OK ? max_abs_diff(out, crop, clen, &where) : 255;
        CHECK_MSG(mc <= max_diff_allowed, "%s: crop differs from Pillow by %d at byte %zu", name,
                  mc, where);
        printf("%-30s %5dx%-5d resize %3d %s crop %3dx%-3d  max|diff| decode %d, crop %d\n", name,
               w, h, resize, si_interp_name(interp), ch, cw, md, mc);
        if (md > worst_dec) worst_dec = md;
        if (mc > worst_crop) worst_crop = mc;
        files++;
        free(out);
        free(jpg);
        free(dec);
        free(crop);
    }
    fclose(m);
    CHECK_MSG(files >= 10, "only %d JPEGs in the manifest", files);
    printf("JPEG files: %d, max|diff| vs Pillow: decode %d, %s resize+crop %d\n", files, worst_dec,
           si_interp_name(interp), worst_crop);
}

/* Random RGB images through si_resize_crop against Pillow's resize + crop with filter interp. */
static void test_resize_noise(const char *dir, si_interp interp) {
    char name[256], sfx[64];
    FILE *m = open_manifest(dir, "resize_manifest.tsv");
    if (!m) return;
    int w, h, resize, ch, cw, n = 0, worst = 0, gpu_checked = 0;
    while (fscanf(m, "%255s %d %d %d %d %d", name, &w, &h, &resize, &ch, &cw) == 6) {
        size_t slen, clen, where = 0;
        uint8_t *src = slurp(dir, name, ".src.rgb", &slen);
        uint8_t *ref = slurp(dir, name, ref_suffix(sfx, sizeof sfx, ".crop", interp), &clen);
        CHECK(src && ref && slen == (size_t)w * h * 3 && clen == (size_t)ch * cw * 3);
        if (!src || !ref) break;
        si_preproc p = {.resize = resize, .interp = interp, .crop_h = ch, .crop_w = cw};
        uint8_t *out = malloc(clen);
        memset(out, 0x5A, clen);
        si_status st = si_resize_crop(src, w, h, &p, out);
        CHECK_MSG(st == SI_OK, "%s: %s", name, si_error_msg());
        int md = max_abs_diff(out, ref, clen, &where);
        CHECK_MSG(md <= max_diff_allowed, "%s: differs from Pillow by %d at byte %zu", name, md,
                  where);
        memset(out, 0x5A, clen);
        int mg = -1;
        if (gpu_formula_crop(src, w, h, &p, out)) {
            mg = max_abs_diff(out, ref, clen, &where);
            CHECK_MSG(mg <= max_diff_allowed,
                      "%s: the GPU's per-pixel formula differs from Pillow by %d at byte %zu", name,
                      mg, where);
            gpu_checked++;
        }
        printf("%-30s %5dx%-5d resize %3d %s crop %3dx%-3d  max|diff| %d, GPU formula %d\n", name,
               w, h, resize, si_interp_name(interp), ch, cw, md, mg);
        if (md > worst) worst = md;
        n++;
        free(out);
        free(src);
        free(ref);
    }
    fclose(m);
    CHECK(n >= 5);
    CHECK(gpu_checked >= 3);
    printf("noise images: %d, %s max|diff| vs Pillow %d; %d through the GPU formula\n", n,
           si_interp_name(interp), worst, gpu_checked);

    /* a crop larger than the resized image is refused, not read out of bounds */
    uint8_t px[4 * 4 * 3] = {1, 2, 3}, out[8 * 8 * 3];
    si_preproc bad = {.resize = 4, .crop_h = 5, .crop_w = 4};
    CHECK(si_resize_crop(px, 4, 4, &bad, out) == SI_ERR_ARG);
}

/* Every EXIF orientation: the full decode and the crop (exact mode) against Pillow's
 * exif_transpose, and with no_exif the plain decode. */
static void test_orient(const char *dir, si_decoder *d) {
    char name[256];
    FILE *m = open_manifest(dir, "orient_manifest.tsv");
    if (!m) return;
    int ow, oh, w, h, resize, ch, cw, n = 0, worst = 0;
    while (fscanf(m, "%255s %d %d %d %d %d %d %d", name, &ow, &oh, &w, &h, &resize, &ch, &cw) ==
           8) {
        size_t len, dlen, plen, clen, where = 0;
        uint8_t *jpg = slurp(dir, name, "", &len);
        uint8_t *dec = slurp(dir, name, ".dec.rgb", &dlen);
        uint8_t *plain = slurp(dir, name, ".plain.rgb", &plen);
        uint8_t *crop = slurp(dir, name, ".crop.rgb", &clen);
        CHECK(jpg && dec && plain && crop);
        if (!jpg || !dec || !plain || !crop) break;
        CHECK(dlen == (size_t)ow * oh * 3 && plen == dlen && clen == (size_t)ch * cw * 3);
        char msg[256];
        int md[3] = {255, 255, 255};
        const char *what[3] = {"oriented decode", "--no-exif decode", "oriented crop"};
        si_preproc ps[3] = {
            {.resize = ow < oh ? ow : oh, .crop_h = oh, .crop_w = ow, .exact = true},
            {.resize = w < h ? w : h, .crop_h = h, .crop_w = w, .exact = true, .no_exif = true},
            {.resize = resize, .crop_h = ch, .crop_w = cw, .exact = true}};
        const uint8_t *ref[3] = {dec, plain, crop};
        for (int k = 0; k < 3; k++) {
            size_t nb = (size_t)ps[k].crop_h * ps[k].crop_w * 3;
            uint8_t *out = malloc(nb);
            memset(out, 0xA5, nb);
            int st = si_decode_crop(d, jpg, len, &ps[k], out, msg, sizeof msg);
            CHECK_MSG(st == SI_IMG_OK, "%s: %s: %s", name, what[k], msg);
            if (st == SI_IMG_OK) md[k] = max_abs_diff(out, ref[k], nb, &where);
            CHECK_MSG(md[k] <= max_diff_allowed, "%s: %s differs from Pillow by %d at byte %zu",
                      name, what[k], md[k], where);
            if (md[k] > worst) worst = md[k];
            free(out);
        }
        printf("%-30s %4dx%-4d -> %4dx%-4d crop %3dx%-3d  max|diff| decode %d, no-exif %d, "
               "crop %d\n",
               name, w, h, ow, oh, ch, cw, md[0], md[1], md[2]);
        n++;
        free(jpg);
        free(dec);
        free(plain);
        free(crop);
    }
    fclose(m);
    CHECK_MSG(n >= 16, "only %d JPEGs in the orientation manifest", n);
    printf("oriented JPEGs: %d, max|diff| vs Pillow's exif_transpose: %d\n", n, worst);
}

/* Outside exact mode: against Pillow's draft() + exif_transpose + resize + crop, which asks the
 * same libjpeg for the same DCT scaling (or for none: then it is the exact path). Also prints
 * how far each scaled crop is from the exact one. */
static void test_scaled(const char *dir, si_decoder *d, si_interp interp) {
    char name[256], suffix[64];
    FILE *m = open_manifest(dir, "scaled_manifest.tsv");
    if (!m) return;
    int resize, ch, cw, s, n = 0, nscaled = 0, worst = 0, worst_exact = 0, ngpu = 0;
    while (fscanf(m, "%255s %d %d %d %d", name, &resize, &ch, &cw, &s) == 5) {
        size_t len, rlen, where = 0;
        char stem[48];
        snprintf(stem, sizeof stem, ".r%d_%dx%d.draft", resize, ch, cw);
        ref_suffix(suffix, sizeof suffix, stem, interp);
        uint8_t *jpg = slurp(dir, name, "", &len);
        uint8_t *ref = slurp(dir, name, suffix, &rlen);
        CHECK(jpg && ref && rlen == (size_t)ch * cw * 3);
        if (!jpg || !ref) break;
        char msg[256];
        si_preproc p = {.resize = resize,
                        .interp = interp,
                        .crop_h = ch,
                        .crop_w = cw,
                        .max_pixels = 100000000};
        uint8_t *out = malloc(rlen), *ex = malloc(rlen);
        memset(out, 0xA5, rlen);
        int st = si_decode_crop(d, jpg, len, &p, out, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "%s: %s", name, msg);
        int md = st == SI_IMG_OK ? max_abs_diff(out, ref, rlen, &where) : 255;
        CHECK_MSG(md <= max_diff_allowed,
                  "%s: scaled 1/%d crop differs from Pillow's draft by %d "
                  "at byte %zu",
                  name, s, md, where);
        /* --resize-on gpu: the DCT-scaled decode alone, then the GPU's formula */
        const uint8_t *img;
        int iw, ih;
        memset(ex, 0x5A, rlen);
        st = si_decode_scaled(d, jpg, len, &p, &img, &iw, &ih, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "%s: %s", name, msg);
        if (st == SI_IMG_OK && gpu_formula_crop(img, iw, ih, &p, ex)) {
            int mg = max_abs_diff(ex, out, rlen, &where);
            CHECK_MSG(mg == 0, "%s: decode_scaled + the GPU formula differ from the CPU by %d",
                      name, mg);
            ngpu++;
        }
        p.exact = true;
        st = si_decode_crop(d, jpg, len, &p, ex, msg, sizeof msg);
        CHECK_MSG(st == SI_IMG_OK, "%s: %s", name, msg);
        double sum = 0;
        for (size_t i = 0; i < rlen; i++) sum += abs((int)out[i] - (int)ex[i]);
        int me = max_abs_diff(out, ex, rlen, &where);
        CHECK_MSG(s > 1 || me == 0, "%s: unscaled but differs from exact mode by %d", name, me);
        printf("%-30s resize %3d %s crop %3dx%-3d scale 1/%d  max|diff| vs draft %d; vs exact: "
               "mean %.3f max %d\n",
               name, resize, si_interp_name(interp), ch, cw, s, md, sum / (double)rlen, me);
        if (md > worst) worst = md;
        if (me > worst_exact) worst_exact = me;
        n++;
        nscaled += s > 1;
        free(out);
        free(ex);
        free(jpg);
        free(ref);
    }
    fclose(m);
    CHECK_MSG(nscaled >= 15, "only %d of %d files DCT-scaled", nscaled, n);
    CHECK_MSG(ngpu == n, "only %d of %d files fit the GPU's filter", ngpu, n);
    printf("scaled mode, %s: %d files (%d DCT-scaled), max|diff| vs Pillow's draft %d, vs exact "
           "%d; %d identical through decode_scaled + the GPU formula\n",
           si_interp_name(interp), n, nscaled, worst, worst_exact, ngpu);
}

/* The rule that keeps images too wide for the GPU's filter on the CPU (si_rs_gpu_fits): the
 * taps per axis are Pillow's ksize, 2 * ceil(support * scale) + 1, and BICUBIC's support is
 * twice BILINEAR's, so the same image can fit with one filter and not with the other. */
static void test_gpu_fit_rule(void) {
    static const struct {
        int w, h, resize;
        si_interp interp;
        int kx, ky, fits;
    } cases[] = {
        {100, 100, 256, SI_INTERP_BILINEAR, 3, 3, 1},  /* upscale */
        {100, 100, 256, SI_INTERP_BICUBIC, 5, 5, 1},   /* upscale: 2 taps either side */
        {256, 256, 256, SI_INTERP_BICUBIC, 5, 5, 1},   /* the identity */
        {512, 512, 256, SI_INTERP_BILINEAR, 5, 5, 1},  /* downscale by 2 */
        {512, 512, 256, SI_INTERP_BICUBIC, 9, 9, 1},   /* twice the taps */
        {896, 896, 256, SI_INTERP_BICUBIC, 15, 15, 1}, /* 3.5x: BICUBIC's widest on the GPU */
        {897, 897, 256, SI_INTERP_BICUBIC, 17, 17, 0}, /* a hair more: the CPU's */
        {897, 897, 256, SI_INTERP_BILINEAR, 9, 9, 1},  /* the same image fits with BILINEAR */
        {1792, 1792, 256, SI_INTERP_BILINEAR, 15, 15, 1},
        {1793, 1793, 256, SI_INTERP_BILINEAR, 17, 17, 0},
        {899, 640, 182, SI_INTERP_BICUBIC, 17, 17, 0}, /* io_ref.py's edge_899x640 */
        {899, 640, 182, SI_INTERP_BILINEAR, 9, 9, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        si_rs_item it;
        int ok = si_rs_item_make(cases[i].w, cases[i].h, cases[i].resize, cases[i].interp, 128, 128,
                                 &it);
        int kx = si_rs_ksize(it.w, it.rw, it.interp), ky = si_rs_ksize(it.h, it.rh, it.interp);
        CHECK_MSG(ok && it.interp == (int32_t)cases[i].interp && kx == cases[i].kx &&
                      ky == cases[i].ky && si_rs_gpu_fits(&it) == cases[i].fits,
                  "%dx%d -> %d %s: taps %d x %d (expected %d x %d), fits %d", cases[i].w,
                  cases[i].h, cases[i].resize, si_interp_name(cases[i].interp), kx, ky, cases[i].kx,
                  cases[i].ky, si_rs_gpu_fits(&it));
    }
}

/* The names the CLI and the model metadata take, and nothing else. */
static void test_interp_names(void) {
    si_interp f = SI_INTERP_BICUBIC;
    CHECK(si_interp_parse("bilinear", &f) && f == SI_INTERP_BILINEAR);
    CHECK(si_interp_parse("bicubic", &f) && f == SI_INTERP_BICUBIC);
    const char *bad[] = {"", "BICUBIC", "bicubic ", "nearest", "lanczos", "bi", NULL};
    for (int i = 0; i < 7; i++)
        CHECK_MSG(!si_interp_parse(bad[i], &f) && f == SI_INTERP_BICUBIC, "'%s' accepted",
                  bad[i] ? bad[i] : "(null)");
    CHECK(!strcmp(si_interp_name(SI_INTERP_BILINEAR), "bilinear"));
    CHECK(!strcmp(si_interp_name(SI_INTERP_BICUBIC), "bicubic"));
}

static int status_of(const char *name) {
    for (int s = 0; s <= 255; s++)
        if (strcmp(si_image_status_name(s), name) == 0) return s;
    return -1;
}

static void test_hostile(const char *dir, si_decoder *d) {
    char name[256], want[64];
    FILE *m = open_manifest(dir, "hostile_manifest.tsv");
    if (!m) return;
    int n = 0;
    while (fscanf(m, "%255s %63s", name, want) == 2) {
        size_t len;
        uint8_t *data = slurp(dir, name, "", &len);
        CHECK(data != NULL);
        if (!data) break;
        si_preproc p = {.resize = 256, .crop_h = 224, .crop_w = 224, .max_pixels = 50000000};
        uint8_t out[224 * 224 * 3], poison[224 * 224 * 3];
        memset(out, 0x77, sizeof out);
        memset(poison, 0x77, sizeof poison);
        char msg[256];
        memset(msg, 0, sizeof msg);
        int st = si_decode_crop(d, data, len, &p, out, msg, sizeof msg);
        int ws = status_of(want);
        CHECK_MSG(ws >= 0, "unknown status %s", want);
        CHECK_MSG(st == ws, "%s: status %s, expected %s (%s)", name, si_image_status_name(st), want,
                  msg);
        CHECK_MSG(msg[0] != 0, "%s: no message", name);
        CHECK_MSG(memcmp(out, poison, sizeof out) == 0, "%s: dst written on failure", name);
        printf("%-30s -> %-10s %s\n", name, si_image_status_name(st), msg);
        free(data);
        n++;
    }
    fclose(m);
    CHECK(n >= 7);
    /* a message that does not fit is cut, not overflowed; NULL msg is allowed */
    char tiny[4] = "xyz";
    uint8_t dummy[1];
    si_preproc p = {.resize = 256, .crop_h = 224, .crop_w = 224};
    CHECK(si_decode_crop(d, (const uint8_t *)"\x12\x34", 2, &p, dummy, tiny, 3) == SI_IMG_NOT_JPEG);
    CHECK(strlen(tiny) == 2);
    CHECK(si_decode_crop(d, (const uint8_t *)"\xff", 1, &p, dummy, NULL, 0) == SI_IMG_NOT_JPEG);
}

/* --decode gpu's plan: a hostile file that libjpeg-turbo fails is never handed to the hardware
 * decoder (it fails the plan with the same status, or the structure walk sends it to the CPU),
 * with one known exception: entropy-coded data damaged inside an intact structure, which libjpeg
 * notices only by Huffman-decoding every block ("N extraneous bytes before marker", a warning
 * that --decode cpu turns into `corrupt`). Finding those takes about 80% of a CPU decode, which
 * would undo the GPU's; the hardware decodes them (as garbled pixels) and they get scores. */
static void test_gpu_plan_hostile(const char *dir, si_decoder *d) {
    char name[256], want[64];
    FILE *m = open_manifest(dir, "hostile_manifest.tsv");
    if (!m) return;
    si_preproc p = {.resize = 256, .crop_h = 224, .crop_w = 224, .max_pixels = 50000000};
    while (fscanf(m, "%255s %63s", name, want) == 2) {
        size_t len;
        uint8_t *data = slurp(dir, name, "", &len);
        if (!data) break;
        char msg[256] = "", msg2[256] = "";
        si_gpu_plan plan;
        int st = si_decode_plan_gpu(d, data, len, &p, &plan, msg, sizeof msg);
        const uint8_t *img;
        int w, h;
        int cpu = si_decode_scaled(d, data, len, &p, &img, &w, &h, msg2, sizeof msg2);
        if (st != SI_IMG_OK) {
            CHECK_MSG(st == cpu && !strcmp(msg, msg2), "%s: plan says %s (%s), decode %s (%s)",
                      name, si_image_status_name(st), msg, si_image_status_name(cpu), msg2);
        } else {
            CHECK_MSG(cpu == SI_IMG_OK || plan.cpu_reason != NULL ||
                          (cpu == SI_IMG_CORRUPT && strstr(msg2, "extraneous bytes")),
                      "%s: planned for the GPU, but libjpeg-turbo says %s (%s)", name,
                      si_image_status_name(cpu), msg2);
        }
        printf("gpu plan: %-30s -> %s%s%s\n", name, si_image_status_name(st),
               st == SI_IMG_OK ? ", " : "",
               st == SI_IMG_OK ? (plan.cpu_reason ? plan.cpu_reason : "hardware") : "");
        free(data);
    }
    fclose(m);
}

/* px (w x h, gray for TJSAMP_GRAY, else RGB) compressed by TurboJPEG with sampling ss, quality
 * q and flags; *len its size (tjFree it). */
static uint8_t *compress(const uint8_t *px, int w, int h, int ss, int q, int flags,
                         unsigned long *len) {
    tjhandle tj = tjInitCompress();
    uint8_t *out = NULL;
    *len = 0;
    int r = tjCompress2(tj, px, w, 0, h, ss == TJSAMP_GRAY ? TJPF_GRAY : TJPF_RGB, &out, len, ss, q,
                        flags);
    tjDestroy(tj);
    CHECK_MSG(r == 0, "tjCompress2: %s", tjGetErrorStr2(NULL));
    return r == 0 ? out : NULL;
}

/* A w x h noise image compressed by TurboJPEG with sampling ss and flags; *len its size. */
static uint8_t *make_jpeg(int w, int h, int ss, int flags, unsigned *seed, unsigned long *len) {
    int ch = ss == TJSAMP_GRAY ? 1 : 3;
    uint8_t *px = malloc((size_t)w * h * ch);
    for (int i = 0; i < w * h * ch; i++) px[i] = (uint8_t)(test_rand(seed) & 255);
    uint8_t *out = compress(px, w, h, ss, 85, flags, len);
    free(px);
    return out;
}

/* The frame header's size decides too_large: libjpeg-turbo refuses a side over 65500 without
 * saying the size, which must not make such a file not_jpeg, with or without a pixel cap; the
 * size comes from the first SOF before SOS, past fill bytes and stray bytes as libjpeg goes. */
static void test_declared_size(si_decoder *d) {
    unsigned seed = 5;
    unsigned long len = 0;
    uint8_t *jpg = make_jpeg(40, 24, TJSAMP_420, 0, &seed, &len);
    if (!jpg) return;
    int w = 0, h = 0;
    CHECK(si_jpeg_declared_size(jpg, len, &w, &h) && w == 40 && h == 24);
    size_t sof = 2;
    while (sof + 4 < len && !(jpg[sof + 1] >= 0xC0 && jpg[sof + 1] <= 0xC2))
        sof += 2 + ((size_t)jpg[sof + 2] << 8 | jpg[sof + 3]);
    CHECK(sof + 9 < len);
    static const int sizes[][2] = {{65535, 65535}, {65501, 16}, {16, 65501}, {65500, 65500}};
    for (int k = 0; k < 4; k++) {
        int sw = sizes[k][0], sh = sizes[k][1];
        uint8_t *big = malloc(len);
        memcpy(big, jpg, len);
        big[sof + 5] = (uint8_t)(sh >> 8);
        big[sof + 6] = (uint8_t)sh;
        big[sof + 7] = (uint8_t)(sw >> 8);
        big[sof + 8] = (uint8_t)sw;
        CHECK(si_jpeg_declared_size(big, len, &w, &h) && w == sw && h == sh);
        uint8_t out[8 * 8 * 3], poison[sizeof out];
        memset(out, 0x55, sizeof out);
        memset(poison, 0x55, sizeof out);
        /* no pixel cap: only the decoder's limit can make 65500x65500 too large, and it is not */
        for (int cap = 0; cap < 2; cap++) {
            si_preproc p = {.resize = 8,
                            .crop_h = 8,
                            .crop_w = 8,
                            .exact = true,
                            .max_pixels = cap ? 50000000 : 0};
            char msg[256] = "";
            bool over_side = sw > SI_JPEG_MAX_SIDE || sh > SI_JPEG_MAX_SIDE;
            if (!over_side && !cap) continue; /* a 16 GB decode of a 1 KB file: not here */
            int st = si_decode_crop(d, big, len, &p, out, msg, sizeof msg);
            CHECK_MSG(st == SI_IMG_TOO_LARGE && strstr(msg, "declared size"),
                      "%dx%d (cap %d): %s (%s)", sw, sh, cap, si_image_status_name(st), msg);
            CHECK(memcmp(out, poison, sizeof out) == 0);
            si_gpu_plan plan;
            char msg2[256] = "";
            CHECK((int)si_decode_plan_gpu(d, big, len, &p, &plan, msg2, sizeof msg2) == st &&
                  !strcmp(msg, msg2));
        }
        free(big);
    }
    /* fill bytes and stray bytes before the frame header, as libjpeg skips them */
    uint8_t *odd = malloc(len + 8);
    memcpy(odd, jpg, 2);
    memcpy(odd + 2, "\x12\x34\xff\xff", 4);
    memcpy(odd + 6, jpg + 2, len - 2);
    CHECK(si_jpeg_declared_size(odd, len + 4, &w, &h) && w == 40 && h == 24);
    /* no frame header before SOS, a cut segment, no SOI */
    CHECK(!si_jpeg_declared_size(jpg, sof + 6, &w, &h));
    CHECK(!si_jpeg_declared_size((const uint8_t *)"\xff\xd8\xff\xda\x00\x02", 6, &w, &h));
    CHECK(!si_jpeg_declared_size(jpg + 2, len - 2, &w, &h));
    free(odd);
    tjFree(jpg);
}

/* The structure walk on files made here: samplings, progressive, a cut and a stray marker. */
static void test_jpeg_scan(void) {
    static const struct {
        int ss;
        si_jpeg_sampling want;
        bool hw;
    } cases[] = {{TJSAMP_444, SI_JS_444, true},  {TJSAMP_422, SI_JS_422, true},
                 {TJSAMP_420, SI_JS_420, true},  {TJSAMP_440, SI_JS_440, true},
                 {TJSAMP_411, SI_JS_411, false}, {TJSAMP_GRAY, SI_JS_GRAY, true}};
    unsigned seed = 99;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int prog = 0; prog < 2; prog++) {
            unsigned long len;
            uint8_t *j = make_jpeg(67, 45, cases[k].ss, prog ? TJFLAG_PROGRESSIVE : 0, &seed, &len);
            if (!j) continue;
            si_jpeg_layout L;
            si_jpeg_scan(j, len, &L);
            CHECK_MSG(L.complete && L.width == 67 && L.height == 45 &&
                          L.ncomp == (cases[k].ss == TJSAMP_GRAY ? 1 : 3) &&
                          L.sampling == cases[k].want,
                      "scan of sampling %d: complete %d %dx%d ncomp %d sampling %d", cases[k].ss,
                      L.complete, L.width, L.height, L.ncomp, (int)L.sampling);
            bool hw = cases[k].hw && !prog;
            CHECK_MSG((L.cpu_reason == NULL) == hw, "sampling %d progressive %d: reason %s",
                      cases[k].ss, prog, L.cpu_reason ? L.cpu_reason : "(none)");
            CHECK(prog ? L.sof == 0xC2 && L.scans > 1 : L.sof == 0xC0 && L.scans == 1);
            if (!prog && cases[k].ss == TJSAMP_420) {
                /* every cut short of EOI goes to the CPU, and never reads past the end */
                for (unsigned long cut = 0; cut < len - 1; cut += 7) {
                    uint8_t *c = malloc(cut ? cut : 1);
                    memcpy(c, j, cut);
                    si_jpeg_scan(c, cut, &L);
                    CHECK_MSG(L.cpu_reason != NULL, "cut at %lu of %lu: planned for the GPU", cut,
                              len);
                    free(c);
                }
                /* a marker inside the entropy-coded data */
                uint8_t *c = malloc(len);
                memcpy(c, j, len);
                c[len - 40] = 0xFF;
                c[len - 39] = 0xC4;
                si_jpeg_scan(c, len, &L);
                CHECK_MSG(L.cpu_reason != NULL, "a stray DHT in the scan: planned for the GPU");
                free(c);
            }
            tjFree(j);
        }
    }
    si_jpeg_layout L;
    si_jpeg_scan((const uint8_t *)"\xff\xd8\xff", 3, &L);
    CHECK(L.cpu_reason != NULL && !L.complete);
    si_jpeg_scan(NULL, 0, &L);
    CHECK(L.cpu_reason != NULL);
}

/* An image without its own quantization tables fails the same way whatever this decoder decoded
 * before (libjpeg would otherwise reuse the previous image's tables). */
static void test_tables_per_image(void) {
    unsigned seed = 7;
    unsigned long len;
    uint8_t *a = make_jpeg(64, 48, TJSAMP_420, 0, &seed, &len);
    if (!a) return;
    /* b: a without its DQT segments */
    uint8_t *b = malloc(len);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (i + 3 < len && a[i] == 0xFF && a[i + 1] == 0xDB) {
            i += 2 + ((size_t)a[i + 2] << 8 | a[i + 3]);
            continue;
        }
        if (i + 1 < len && a[i] == 0xFF && a[i + 1] == 0xDA) { /* the rest as it is */
            memcpy(b + n, a + i, len - i);
            n += len - i;
            break;
        }
        b[n++] = a[i++];
    }
    CHECK(n < len);
    si_preproc p = {.resize = 32,
                    .interp = SI_INTERP_BILINEAR,
                    .crop_h = 32,
                    .crop_w = 32,
                    .max_pixels = 1u << 24};
    static uint8_t out[32 * 32 * 3];
    char m1[160], m2[160];
    si_decoder *fresh = si_decoder_create(), *used = si_decoder_create();
    int s1 = si_decode_crop(fresh, b, n, &p, out, m1, sizeof m1);
    CHECK(si_decode_crop(used, a, len, &p, out, m2, sizeof m2) == SI_IMG_OK);
    int s2 = si_decode_crop(used, b, n, &p, out, m2, sizeof m2);
    CHECK_MSG(s1 != SI_IMG_OK && s1 == s2 && strcmp(m1, m2) == 0,
              "no DQT: %d (%s) on a fresh decoder, %d (%s) after another image", s1, m1, s2, m2);
    si_decoder_destroy(fresh);
    si_decoder_destroy(used);
    free(b);
    tjFree(a);
}

/* io/yuv.h against libjpeg-turbo: the planes of tjDecompressToYUVPlanes upsampled and converted
 * pixel by pixel give tjDecompress2's RGB exactly, for 4:4:4, 4:2:2, 4:2:0 and 4:4:0, odd and
 * even sizes, smooth images and noise (the GPU decode's path to libjpeg-turbo's pixels). */
static void test_yuv_matches_libjpeg(void) {
    static const struct {
        int ss, hs, vs;
    } samp[] = {{TJSAMP_444, 1, 1}, {TJSAMP_422, 2, 1}, {TJSAMP_420, 2, 2}, {TJSAMP_440, 1, 2}};
    static const int sizes[][2] = {{67, 45}, {64, 48}, {5, 7}, {6, 1}, {1, 6}, {33, 2}, {250, 131}};
    unsigned seed = 20261126u;
    tjhandle tj = tjInitDecompress();
    long checked = 0;
    for (size_t k = 0; k < sizeof samp / sizeof samp[0]; k++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            si_yuv_shape sh = {sizes[z][0], sizes[z][1], samp[k].hs, samp[k].vs};
            if (!si_yuv_fancy(&sh)) continue; /* libjpeg replicates there: the CPU's case */
            for (int smooth = 0; smooth < 2; smooth++) {
                unsigned long len;
                uint8_t *jpg;
                if (smooth) { /* gradients: the fancy filters' interpolation shows */
                    uint8_t *px = malloc((size_t)sh.w * (size_t)sh.h * 3);
                    for (int i = 0; i < sh.w * sh.h * 3; i++)
                        px[i] = (uint8_t)((i % 3) * 70 + (i / 3 % sh.w) * 5 + (i / 3 / sh.w) * 3);
                    jpg = compress(px, sh.w, sh.h, samp[k].ss, 90, 0, &len);
                    free(px);
                } else {
                    jpg = make_jpeg(sh.w, sh.h, samp[k].ss, 0, &seed, &len);
                }
                if (!jpg) continue;
                int cw = si_yuv_cw(&sh), ch = si_yuv_ch(&sh);
                int pw = tjPlaneWidth(0, sh.w, samp[k].ss), ph = tjPlaneHeight(0, sh.h, samp[k].ss);
                CHECK(tjPlaneWidth(1, sh.w, samp[k].ss) == cw &&
                      tjPlaneHeight(1, sh.h, samp[k].ss) == ch);
                uint8_t *y = malloc((size_t)pw * (size_t)ph), *yuv = malloc(si_yuv_bytes(&sh));
                uint8_t *cb = yuv + (size_t)sh.w * (size_t)sh.h, *cr = cb + (size_t)cw * (size_t)ch;
                uint8_t *planes[3] = {y, cb, cr};
                int strides[3] = {pw, cw, cw};
                CHECK_MSG(tjDecompressToYUVPlanes(tj, jpg, len, planes, sh.w, strides, sh.h, 0) ==
                              0,
                          "%s", tjGetErrorStr2(tj));
                for (int r = 0; r < sh.h; r++) /* the luma plane packed to pitch w */
                    memcpy(yuv + (size_t)r * (size_t)sh.w, y + (size_t)r * (size_t)pw,
                           (size_t)sh.w);
                uint8_t *want = malloc((size_t)sh.w * (size_t)sh.h * 3);
                CHECK(tjDecompress2(tj, jpg, len, want, sh.w, 0, sh.h, TJPF_RGB, 0) == 0);
                int bad = 0;
                for (int r = 0; r < sh.h; r++)
                    for (int x = 0; x < sh.w; x++) {
                        uint8_t got[3];
                        si_yuv_rgb(yuv, &sh, x, r, got);
                        bad +=
                            memcmp(got, want + ((size_t)r * (size_t)sh.w + (size_t)x) * 3, 3) != 0;
                        checked++;
                    }
                CHECK_MSG(bad == 0,
                          "sampling %dx%d, %dx%d %s: %d pixels differ from libjpeg-turbo's",
                          samp[k].hs, samp[k].vs, sh.w, sh.h, smooth ? "smooth" : "noise", bad);
                free(y);
                free(yuv);
                free(want);
                tjFree(jpg);
            }
        }
    tjDestroy(tj);
    CHECK(checked > 100000);
}

/* --decode gpu's recovery of libjpeg-turbo's pixels from the hardware's RGB (io/yuv.h), on the
 * host: the hardware's RGB is libjpeg-turbo's with TJFLAG_FASTUPSAMPLE, value for value (measured
 * on an H100, docs/performance.md), so that decode stands in for it here. */
typedef struct {
    long values, equal, replicated_equal; /* values equal libjpeg-turbo's: after, before */
    long blocks, clamped;                 /* chroma samples, and those clamped whole */
    long broken; /* pixels away from clamped blocks that still differ: must be none */
} unrep_stats;

/* One JPEG through si_yuv_unreplicate_image against libjpeg-turbo's own RGB: every pixel whose
 * block and neighbouring blocks had their chroma recovered exactly must be libjpeg-turbo's (the
 * others may differ). Adds to *st. */
static void check_unreplicate(tjhandle tj, const uint8_t *jpg, unsigned long len, int hs, int vs,
                              unrep_stats *st) {
    int w, h, ss, cs;
    CHECK(tjDecompressHeader3(tj, jpg, len, &w, &h, &ss, &cs) == 0);
    const si_yuv_shape s = {w, h, hs, vs};
    const int cw = si_yuv_cw(&s), ch = si_yuv_ch(&s);
    uint8_t *got = malloc((size_t)w * h * 3), *want = malloc((size_t)w * h * 3);
    uint8_t *known = malloc((size_t)cw * ch), *planes = malloc(si_yuv_chroma_bytes(&s));
    CHECK(tjDecompress2(tj, jpg, len, got, w, 0, h, TJPF_RGB, TJFLAG_FASTUPSAMPLE) == 0);
    CHECK(tjDecompress2(tj, jpg, len, want, w, 0, h, TJPF_RGB, 0) == 0);
    for (size_t v = 0; v < (size_t)w * h * 3; v++) st->replicated_equal += got[v] == want[v];
    st->clamped += si_yuv_unreplicate_image(got, &s, planes, planes + (size_t)cw * ch, known);
    st->blocks += (long)cw * ch;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const size_t at = ((size_t)y * w + x) * 3;
            int same = 0;
            for (int c = 0; c < 3; c++) same += got[at + c] == want[at + c];
            st->values += 3;
            st->equal += same;
            bool all_known = true;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    int X = x / hs + dx, Y = y / vs + dy;
                    if (X >= 0 && Y >= 0 && X < cw && Y < ch) all_known &= known[Y * cw + X] != 0;
                }
            st->broken += all_known && same != 3;
        }
    free(got);
    free(want);
    free(known);
    free(planes);
}

/* The recovery's parts: the search's candidates (each offset of the window once, rings
 * outwards); the block-wise upsampling against si_yuv_chroma's at every pixel; the inversion
 * from offset differences to chroma over all 65,536 pairs. */
static void test_unreplicate_parts(void) {
    int wrong = 0;
    static int seen[2 * SI_YUV_SEARCH + 1][2 * SI_YUV_SEARCH + 1];
    for (int i = 0, last = 0; i < SI_YUV_CANDIDATES; i++) {
        int db, dr;
        si_yuv_candidate(i, &db, &dr);
        int ring = abs(db) > abs(dr) ? abs(db) : abs(dr);
        CHECK_MSG(ring <= SI_YUV_SEARCH && ring >= last, "candidate %d: (%d, %d) after ring %d", i,
                  db, dr, last);
        if (ring > SI_YUV_SEARCH) break;
        last = ring;
        seen[db + SI_YUV_SEARCH][dr + SI_YUV_SEARCH]++;
    }
    for (int a = 0; a <= 2 * SI_YUV_SEARCH; a++)
        for (int b = 0; b <= 2 * SI_YUV_SEARCH; b++) wrong += seen[a][b] != 1;
    CHECK_MSG(wrong == 0, "si_yuv_candidate: %d offsets of the window not named exactly once",
              wrong);
    wrong = 0;
    unsigned pseed = 7;
    static const int shapes[][4] = {{67, 45, 2, 2}, {66, 44, 2, 2}, {7, 5, 2, 2}, {67, 45, 2, 1},
                                    {6, 9, 2, 1},   {67, 45, 1, 2}, {5, 8, 1, 2}, {3, 3, 2, 2}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        si_yuv_shape sh = {shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3]};
        int cw = si_yuv_cw(&sh), ch = si_yuv_ch(&sh);
        uint8_t *pl = malloc((size_t)cw * ch);
        for (int i = 0; i < cw * ch; i++) pl[i] = (uint8_t)(test_rand(&pseed) & 255);
        for (int cy = 0; cy < ch; cy++)
            for (int cx = 0; cx < cw; cx++) {
                int out[4];
                si_yuv_chroma_block(pl, cw, ch, sh.hs, sh.vs, cx, cy, out);
                for (int dy = 0; dy < sh.vs; dy++)
                    for (int dx = 0; dx < sh.hs; dx++) {
                        int x = cx * sh.hs + dx, y = cy * sh.vs + dy;
                        if (x < sh.w && y < sh.h)
                            wrong +=
                                out[dy * 2 + dx] != si_yuv_chroma(pl, cw, ch, sh.hs, sh.vs, x, y);
                    }
            }
        free(pl);
    }
    CHECK_MSG(wrong == 0, "si_yuv_chroma_block: %d values differ from si_yuv_chroma's", wrong);
    wrong = 0;
    for (int b = 0; b < 256; b++)
        for (int r = 0; r < 256; r++) {
            int o[3], cb = -1, cr = -1;
            si_yuv_offsets(b, r, o);
            wrong += !si_yuv_chroma_of(o[0] - o[2], o[1] - o[2], &cb, &cr) || cb != b || cr != r;
        }
    CHECK_MSG(wrong == 0, "si_yuv_chroma_of: %d of 65536 chroma pairs not recovered", wrong);
}

/* The recovery on made images of each subsampling: smooth ones, never clamped (every pixel
 * exact), and noise, often clamped (exact away from the clamped blocks). */
static void test_unreplicate_made(void) {
    static const struct {
        int ss, hs, vs;
    } samp[] = {{TJSAMP_422, 2, 1}, {TJSAMP_420, 2, 2}, {TJSAMP_440, 1, 2}};
    static const int sizes[][2] = {{67, 45}, {64, 48}, {5, 7}, {33, 2}, {250, 131}};
    unsigned seed = 20261126u;
    tjhandle tj = tjInitDecompress();
    for (size_t k = 0; k < sizeof samp / sizeof samp[0]; k++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            si_yuv_shape sh = {sizes[z][0], sizes[z][1], samp[k].hs, samp[k].vs};
            if (!si_yuv_replicated(&sh)) continue;
            for (int smooth = 0; smooth < 2; smooth++) {
                unsigned long len = 0;
                uint8_t *jpg = NULL;
                if (smooth) { /* mid-range gradients: nothing clamps */
                    uint8_t *px = malloc((size_t)sh.w * (size_t)sh.h * 3);
                    for (int i = 0; i < sh.w * sh.h * 3; i++)
                        px[i] = (uint8_t)(60 + (i % 3) * 30 + (i / 3 % sh.w) * 7 % 50 +
                                          (i / 3 / sh.w) * 3 % 40);
                    jpg = compress(px, sh.w, sh.h, samp[k].ss, 90, 0, &len);
                    free(px);
                } else {
                    jpg = make_jpeg(sh.w, sh.h, samp[k].ss, 0, &seed, &len);
                }
                if (!jpg) continue;
                unrep_stats st = {0};
                check_unreplicate(tj, jpg, len, sh.hs, sh.vs, &st);
                CHECK_MSG(st.broken == 0,
                          "unreplicate %dx%d, %dx%d %s: %ld pixels differ from "
                          "libjpeg-turbo's where every block was recovered",
                          sh.hs, sh.vs, sh.w, sh.h, smooth ? "smooth" : "noise", st.broken);
                if (smooth)
                    CHECK_MSG(st.equal == st.values && st.clamped == 0,
                              "unreplicate %dx%d, %dx%d smooth: %ld of %ld values equal, %ld of "
                              "%ld blocks clamped",
                              sh.hs, sh.vs, sh.w, sh.h, st.equal, st.values, st.clamped, st.blocks);
                tjFree(jpg);
            }
        }
    tjDestroy(tj);
}

/* The recovery on the subsampled YCbCr photos of DIR: exact away from clamped blocks, and at
 * least 99% of all values libjpeg-turbo's. */
static void test_unreplicate_photos(const char *dir) {
    static const char *photos[] = {
        "chelsea_420.jpg",    "astronaut_422.jpg",       "motorcycle_progressive.jpg",
        "retina_restart.jpg", "odd_301x227.jpg",         "odd_1000x50.jpg",
        "odd_50x1000.jpg",    "hubble_1000x872_q95.jpg", "orig_rocket.jpg",
        "orig_retina.jpg"};
    tjhandle tj = tjInitDecompress();
    unrep_stats st = {0};
    int used = 0;
    for (size_t i = 0; i < sizeof photos / sizeof photos[0]; i++) {
        size_t len;
        uint8_t *jpg = slurp(dir, photos[i], "", &len);
        if (!jpg) continue;
        int w, h, ss, cs;
        CHECK(tjDecompressHeader3(tj, jpg, (unsigned long)len, &w, &h, &ss, &cs) == 0);
        si_yuv_shape sh = {w, h, tjMCUWidth[ss] / 8, tjMCUHeight[ss] / 8};
        if (cs == TJCS_YCbCr && si_yuv_replicated(&sh)) {
            check_unreplicate(tj, jpg, (unsigned long)len, sh.hs, sh.vs, &st);
            used++;
        }
        free(jpg);
    }
    CHECK_MSG(used >= 6, "only %d subsampled photos", used);
    CHECK_MSG(st.broken == 0,
              "unreplicate, photos: %ld pixels differ where every block was recovered", st.broken);
    /* the replicated RGB itself is far off; the recovery gets nearly all of it back */
    CHECK_MSG(st.equal >= 0.99 * (double)st.values,
              "unreplicate, photos: only %ld of %ld values equal", st.equal, st.values);
    printf("unreplicate: %d photos, values equal %.3f%% (replicated chroma %.3f%%), blocks clamped "
           "whole %.3f%%\n",
           used, 100.0 * (double)st.equal / (double)st.values,
           100.0 * (double)st.replicated_equal / (double)st.values,
           100.0 * (double)st.clamped / (double)st.blocks);
    tjDestroy(tj);
}

static void test_normalize(void) {
    unsigned seed = 12345;
    int h = 37, w = 53;
    uint8_t *src = malloc((size_t)h * w * 3);
    float *dst = malloc(sizeof(float) * 3 * h * w);
    for (int i = 0; i < h * w * 3; i++) src[i] = (uint8_t)(test_rand(&seed) & 255);
    for (int i = 0; i < h * w * 3; i++) dst[i] = NAN; /* poison */
    float mean[3], std[3];
    for (int c = 0; c < 3; c++) {
        mean[c] = 0.5f + 0.2f * test_randf(&seed);
        std[c] = 0.25f + 0.05f * test_randf(&seed);
    }
    si_normalize_chw(src, h, w, mean, std, dst);
    double worst = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double want = ((double)src[(y * w + x) * 3 + c] / 255.0 - mean[c]) / std[c];
                double got = dst[(size_t)c * h * w + (size_t)y * w + x];
                double e = fabs(got - want);
                if (!(e <= worst)) worst = e; /* catches NaN too */
            }
    CHECK_MSG(worst < 1e-5, "normalize: max error %g", worst);
    printf("normalize: max abs error vs double formula %.3g\n", worst);
    free(src);
    free(dst);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (made by io_ref.py gen DIR)\n", argv[0]);
        return 2;
    }
    si_decoder *d = si_decoder_create();
    CHECK(d != NULL);
    if (!d) return test_finish();
    const si_interp filters[] = {SI_INTERP_BILINEAR, SI_INTERP_BICUBIC};
    for (int f = 0; f < 2; f++) {
        test_good(argv[1], d, filters[f]);
        test_resize_noise(argv[1], filters[f]);
    }
    test_orient(argv[1], d);
    for (int f = 0; f < 2; f++) test_scaled(argv[1], d, filters[f]);
    test_hostile(argv[1], d);
    /* the decoder's scratch must still be right after failures, and after the other filter */
    for (int f = 0; f < 2; f++) {
        test_good(argv[1], d, filters[1 - f]);
        test_scaled(argv[1], d, filters[1 - f]);
    }
    test_gpu_plan_hostile(argv[1], d);
    test_jpeg_scan();
    test_declared_size(d);
    test_yuv_matches_libjpeg();
    test_unreplicate_parts();
    test_unreplicate_made();
    test_unreplicate_photos(argv[1]);
    test_tables_per_image();
    test_gpu_fit_rule();
    test_interp_names();
    test_normalize();
    si_decoder_destroy(d);
    si_decoder_destroy(NULL);
    return test_finish();
}
