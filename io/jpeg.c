/* JPEG decode (TurboJPEG) and the CPU preprocessing that has to match the Python reference:
 * Pillow's BILINEAR or BICUBIC resample (ImagingResample, triangle or cubic filter widened by the
 * downscale factor, 22-bit fixed point), ImageOps.exif_transpose, and torchvision's Resize(int) +
 * CenterCrop arithmetic. The resize only computes the pixels the crop keeps; every output pixel
 * depends only on its own coefficients, so skipping the others changes nothing in the ones kept.
 * Outside exact mode the decode itself is scaled by libjpeg (1/2, 1/4 or 1/8 in the DCT domain),
 * which is what Pillow's Image.draft does: not bit-exact with a full decode.
 * On x86-64 the two resize passes have AVX2 versions chosen at run time; integer sums do not
 * depend on their order, so they are bit-identical to the plain C ones, which build alone with
 * -DSI_JPEG_NO_SIMD (to test them on x86 too). */
#include "io/jpeg.h"
#include "io/jpeg_scan.h"
#include "io/yuv.h"
#include "io/resample.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SI_JPEG_NO_SIMD)
#include <immintrin.h>
#define HAVE_X86_SIMD 1
#endif

/* TurboJPEG takes sizes as unsigned long */
_Static_assert(sizeof(unsigned long) >= sizeof(size_t), "unsigned long narrower than size_t");

/* Scratch of the resize, carved out of one allocation: coefficients and bounds of the kept
 * columns and rows, eight transposed input rows and the horizontal pass. */
typedef struct {
    uint8_t *mem;
    size_t cap;
} scratch;

struct si_decoder {
    tjhandle tj;
    uint8_t *pix; /* decoded image, RGB (3 bytes/pixel) or CMYK (4) */
    size_t pix_cap;
    uint8_t *rot; /* the image after the EXIF orientation, when it is not 1 */
    size_t rot_cap;
    scratch rs;
};

/* Creates a decoder for one thread; caller destroys it with si_decoder_destroy. NULL if
 * TurboJPEG cannot be initialised (message set). */
si_decoder *si_decoder_create(void) {
    si_decoder *d = si_xcalloc(1, sizeof *d);
    d->tj = tjInitDecompress();
    if (!d->tj) {
        si_error(SI_ERR_INTERNAL, "TurboJPEG: cannot create a decompressor: %s",
                 tjGetErrorStr2(NULL));
        free(d);
        return NULL;
    }
    return d;
}

/* Frees the decoder and its scratch; accepts NULL. */
void si_decoder_destroy(si_decoder *d) {
    if (!d) return;
    if (d->tj) tjDestroy(d->tj);
    free(d->pix);
    free(d->rot);
    free(d->rs.mem);
    free(d);
}

/* Grows *buf to at least n bytes; the old contents are not kept (scratch only). */
static bool grow(uint8_t **buf, size_t *cap, size_t n) {
    if (n <= *cap) return true;
    /* some headroom so a stream of slightly growing images does not realloc every time */
    size_t want = n + n / 4;
    uint8_t *p = malloc(want);
    if (!p) return false;
    free(*buf);
    *buf = p;
    *cap = want;
    return true;
}

/* Pillow's precompute_coeffs followed by normalize_coeffs_8bpc (io/resample.h, shared with the
 * GPU), for output positions [o0, o0+n) of out_size only, each row ksize weights long with zeros
 * after the window. */
static void coeffs(int in_size, int out_size, int interp, int o0, int n, int ksize, int *bounds,
                   int32_t *kk) {
    for (int i = 0; i < n; i++) {
        int32_t *kf = kk + (size_t)i * ksize;
        int xmin, len = si_rs_weights(in_size, out_size, interp, o0 + i, kf, &xmin);
        for (int x = len; x < ksize; x++) kf[x] = 0;
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = len;
    }
}

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Makes the window of each kept output exactly ksize taps long and inside [0, in_size): a
 * window that would run past the end starts earlier, with zero weights in front. Zero weights
 * add nothing to the integer sums, so the pixels are the same; the fixed length lets the
 * compiler unroll the tap loop. Needs in_size >= ksize. */
static void pad_windows(int in_size, int n, int ksize, int *bounds, int32_t *kk) {
    for (int i = 0; i < n; i++) {
        int32_t *k = kk + (size_t)i * ksize;
        int shift = bounds[2 * i] + ksize - in_size;
        if (shift > 0) {
            memmove(k + shift, k, sizeof *k * (size_t)(ksize - shift));
            for (int j = 0; j < shift; j++) k[j] = 0;
            bounds[2 * i] -= shift;
        }
        bounds[2 * i + 1] = ksize;
    }
}

/* One input row through the horizontal filter: cw output pixels of K taps each. Inlined with a
 * constant K, so the tap loop is unrolled. */
static inline __attribute__((always_inline)) void
hrow(const uint8_t *row, uint8_t *out, int cw, const int *bounds, const int32_t *kk, int K) {
    for (int xx = 0; xx < cw; xx++) {
        const int32_t *k = kk + (size_t)xx * K;
        const uint8_t *s = row + (size_t)bounds[2 * xx] * 3;
        int32_t s0 = SI_RS_HALF, s1 = SI_RS_HALF, s2 = SI_RS_HALF;
        for (int x = 0; x < K; x++) {
            s0 += s[3 * x + 0] * k[x];
            s1 += s[3 * x + 1] * k[x];
            s2 += s[3 * x + 2] * k[x];
        }
        out[3 * xx + 0] = si_rs_clip8(s0);
        out[3 * xx + 1] = si_rs_clip8(s1);
        out[3 * xx + 2] = si_rs_clip8(s2);
    }
}

/* One input row with windows of their own lengths: the reference the SIMD paths must match,
 * and the path for images narrower than the filter. */
static void hrow_any(const uint8_t *row, uint8_t *out, int cw, const int *bounds, const int32_t *kk,
                     int K) {
    for (int xx = 0; xx < cw; xx++) {
        const int32_t *k = kk + (size_t)xx * K;
        const uint8_t *s = row + (size_t)bounds[2 * xx] * 3;
        int n = bounds[2 * xx + 1];
        int32_t s0 = SI_RS_HALF, s1 = SI_RS_HALF, s2 = SI_RS_HALF;
        for (int x = 0; x < n; x++) {
            s0 += s[3 * x + 0] * k[x];
            s1 += s[3 * x + 1] * k[x];
            s2 += s[3 * x + 2] * k[x];
        }
        out[3 * xx + 0] = si_rs_clip8(s0);
        out[3 * xx + 1] = si_rs_clip8(s1);
        out[3 * xx + 2] = si_rs_clip8(s2);
    }
}

#ifdef HAVE_X86_SIMD
/* Eight rows at once, one row per SIMD lane: every output pixel of the eight rows shares its
 * window and weights, so the multiply-adds are exact int32 vector ops on bytes that sit next to
 * each other once the rows are transposed. t holds bytes [x0*3, x1*3) of the rows, transposed:
 * t[(i - x0*3)*8 + r] = row r's byte i. Each output takes K padded taps. The sums are the
 * scalar ones, term for term, so the result is bit-identical. */
__attribute__((target("avx2"))) static void hblock8_avx2(const uint8_t *t, int x0, uint8_t *tmp,
                                                         size_t stride, int cw, const int *bounds,
                                                         const int32_t *kk, int K) {
    for (int xx = 0; xx < cw; xx++) {
        const int32_t *k = kk + (size_t)xx * K;
        const uint8_t *s = t + (size_t)(bounds[2 * xx] - x0) * 24;
        __m256i a0 = _mm256_set1_epi32(SI_RS_HALF), a1 = a0, a2 = a0;
        for (int j = 0; j < K; j++, s += 24) {
            __m256i kj = _mm256_set1_epi32(k[j]);
            __m256i p0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + 0)));
            __m256i p1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + 8)));
            __m256i p2 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + 16)));
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(p0, kj));
            a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(p1, kj));
            a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(p2, kj));
        }
        /* si_rs_clip8: v >> 22, then the two saturating packs clamp to [0, 255] */
        __m256i acc[3] = {a0, a1, a2};
        uint8_t o[3][16];
        for (int c = 0; c < 3; c++) {
            __m256i v = _mm256_srai_epi32(acc[c], SI_RS_PREC);
            __m128i w16 =
                _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            _mm_storeu_si128((__m128i *)o[c], _mm_packus_epi16(w16, w16));
        }
        uint8_t *out = tmp + (size_t)xx * 3;
        for (int r = 0; r < 8; r++, out += stride) {
            out[0] = o[0][r];
            out[1] = o[1][r];
            out[2] = o[2][r];
        }
    }
}

/* Transposes bytes [b0, b1) of 8 rows (row r at rows + r*stride) into t[(i - b0)*8 + r]. */
static void transpose8(const uint8_t *rows, size_t stride, size_t b0, size_t b1, uint8_t *t) {
    size_t i = b0;
    for (; i + 16 <= b1; i += 16, t += 128) {
        __m128i a[8], u[8], v[8];
        for (int r = 0; r < 8; r++)
            a[r] = _mm_loadu_si128((const __m128i *)(rows + r * stride + i));
        for (int r = 0; r < 4; r++) { /* bytes of rows 2r, 2r+1 interleaved */
            u[2 * r] = _mm_unpacklo_epi8(a[2 * r], a[2 * r + 1]);
            u[2 * r + 1] = _mm_unpackhi_epi8(a[2 * r], a[2 * r + 1]);
        }
        for (int q = 0; q < 2; q++) /* rows 4q..4q+3: 4 bytes per position */
            for (int h = 0; h < 2; h++) {
                v[4 * q + 2 * h] = _mm_unpacklo_epi16(u[4 * q + h], u[4 * q + 2 + h]);
                v[4 * q + 2 * h + 1] = _mm_unpackhi_epi16(u[4 * q + h], u[4 * q + 2 + h]);
            }
        for (int g = 0; g < 4; g++) { /* positions 4g..4g+3, all 8 rows */
            _mm_storeu_si128((__m128i *)(t + 32 * g), _mm_unpacklo_epi32(v[g], v[4 + g]));
            _mm_storeu_si128((__m128i *)(t + 32 * g + 16), _mm_unpackhi_epi32(v[g], v[4 + g]));
        }
    }
    for (; i < b1; i++, t += 8)
        for (int r = 0; r < 8; r++) t[r] = rows[r * stride + i];
}

static bool have_avx2(void) {
    return __builtin_cpu_supports("avx2"); /* a load and a test of libgcc's CPU model */
}
#endif

/* Horizontal pass over input rows [y0, y1) into tmp (rows, cw, 3). Windows are padded to K taps
 * (pad_windows), or `padded` is false and each window has its own length (tiny images). tb is
 * scratch for 8 transposed rows (24 * w bytes), used only by the SIMD path. */
static void hpass(const uint8_t *src, int w, int y0, int y1, uint8_t *tmp, int cw,
                  const int *bounds, const int32_t *kk, int K, bool padded, uint8_t *tb) {
    size_t in_stride = (size_t)w * 3, out_stride = (size_t)cw * 3;
    int y = y0;
#ifdef HAVE_X86_SIMD
    if (padded && have_avx2()) {
        int x0 = bounds[0], x1 = bounds[2 * (cw - 1)] + K; /* windows are in increasing order */
        for (; y + 8 <= y1; y += 8) {
            transpose8(src + (size_t)y * in_stride, in_stride, (size_t)x0 * 3, (size_t)x1 * 3, tb);
            hblock8_avx2(tb, x0, tmp + (size_t)(y - y0) * out_stride, out_stride, cw, bounds, kk,
                         K);
        }
    }
#else
    (void)tb;
#endif
    for (; y < y1; y++) {
        const uint8_t *row = src + (size_t)y * in_stride;
        uint8_t *out = tmp + (size_t)(y - y0) * out_stride;
        if (padded && K == 3)
            hrow(row, out, cw, bounds, kk, 3);
        else if (padded && K == 5) /* downscale by up to 2: ImageNet-sized photos to 256 */
            hrow(row, out, cw, bounds, kk, 5);
        else if (padded && K == 7)
            hrow(row, out, cw, bounds, kk, 7);
        else if (padded && K == 9) /* BICUBIC's downscale by up to 2 */
            hrow(row, out, cw, bounds, kk, 9);
        else
            hrow_any(row, out, cw, bounds, kk, K);
    }
}

/* Vertical pass from tmp (rows from y0, cw, 3) into the crop: for each output row, the taps
 * outside and a 32-byte stretch of the row inside (224 * 3 = 21 * 32), so the multiply-adds
 * vectorise and the sums stay in registers; integer sums do not depend on their order. */
static inline __attribute__((always_inline)) void vpass_body(const uint8_t *tmp, int y0,
                                                             uint8_t *dst, int cw, int ch,
                                                             const int *bounds, const int32_t *kk,
                                                             int K) {
    enum { CHUNK = 32 };
    size_t row = (size_t)cw * 3;
    for (int yy = 0; yy < ch; yy++) {
        const int32_t *k = kk + (size_t)yy * K;
        const uint8_t *s = tmp + (size_t)(bounds[2 * yy] - y0) * row;
        int n = bounds[2 * yy + 1];
        uint8_t *out = dst + (size_t)yy * row;
        size_t i = 0;
        for (; i + CHUNK <= row; i += CHUNK) {
            int32_t a[CHUNK];
            for (int m = 0; m < CHUNK; m++) a[m] = SI_RS_HALF;
            for (int t = 0; t < n; t++) {
                const uint8_t *r = s + (size_t)t * row + i;
                int32_t kt = k[t];
                for (int m = 0; m < CHUNK; m++) a[m] += r[m] * kt;
            }
            for (int m = 0; m < CHUNK; m++) out[i + m] = si_rs_clip8(a[m]);
        }
        for (; i < row; i++) {
            int32_t a = SI_RS_HALF;
            for (int t = 0; t < n; t++) a += s[(size_t)t * row + i] * k[t];
            out[i] = si_rs_clip8(a);
        }
    }
}

static void vpass(const uint8_t *tmp, int y0, uint8_t *dst, int cw, int ch, const int *bounds,
                  const int32_t *kk, int K) {
    vpass_body(tmp, y0, dst, cw, ch, bounds, kk, K);
}

#ifdef HAVE_X86_SIMD
/* The same code compiled for AVX2 (vpmulld instead of SSE2's emulated 32-bit multiply). */
__attribute__((target("avx2"))) static void vpass_avx2(const uint8_t *tmp, int y0, uint8_t *dst,
                                                       int cw, int ch, const int *bounds,
                                                       const int32_t *kk, int K) {
    vpass_body(tmp, y0, dst, cw, ch, bounds, kk, K);
}
#endif

/* The resize and crop, with scratch borrowed from the caller. SI_ERR_ARG for sizes the caller
 * should have refused, SI_ERR_NOMEM if the scratch cannot grow (message set). */
static si_status resize_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *dst,
                             scratch *sc) {
    int rw, rh;
    si_rs_target_size(w, h, p->resize, &rw, &rh);
    if (w <= 0 || h <= 0 || p->crop_h <= 0 || p->crop_w <= 0 || p->crop_h > rh || p->crop_w > rw)
        return si_error(SI_ERR_ARG, "resize/crop: bad sizes (image %dx%d, resize %d, crop %dx%d)",
                        w, h, p->resize, p->crop_h, p->crop_w);
    int top = si_rs_half_round_even(rh - p->crop_h), left = si_rs_half_round_even(rw - p->crop_w);
    int cw = p->crop_w, ch = p->crop_h;
    SI_ASSERT(p->interp == SI_INTERP_BILINEAR || p->interp == SI_INTERP_BICUBIC);
    int kx = si_rs_ksize(w, rw, p->interp), ky = si_rs_ksize(h, rh, p->interp);

    size_t need_coef = align16((size_t)cw * kx * 4) + align16((size_t)ch * ky * 4) +
                       align16((size_t)(cw + ch) * 2 * sizeof(int)) + align16((size_t)w * 24);
    /* the horizontal pass holds the input rows [y0, y1) the kept output rows read; h bounds it
     * and is known before the coefficients are */
    size_t need = need_coef + (size_t)cw * 3 * (size_t)h;
    if (need > sc->cap) {
        uint8_t *m = malloc(need);
        if (!m) return si_error(SI_ERR_NOMEM, "resize: cannot allocate %zu bytes", need);
        free(sc->mem);
        sc->mem = m;
        sc->cap = need;
    }
    uint8_t *q = sc->mem;
    int32_t *kkx = (int32_t *)q;
    q += align16((size_t)cw * kx * 4);
    int32_t *kky = (int32_t *)q;
    q += align16((size_t)ch * ky * 4);
    int *bx = (int *)q, *by = bx + 2 * cw;
    q += align16((size_t)(cw + ch) * 2 * sizeof(int));
    uint8_t *tb = q; /* 8 rows of the horizontal pass, transposed */
    q += align16((size_t)w * 24);
    uint8_t *tmp = q; /* (rows, cw, 3) */

    coeffs(w, rw, p->interp, left, cw, kx, bx, kkx);
    coeffs(h, rh, p->interp, top, ch, ky, by, kky);
    int y0 = by[0], y1 = by[2 * (ch - 1)] + by[2 * (ch - 1) + 1];
    bool padded = w >= kx;
    if (padded) pad_windows(w, cw, kx, bx, kkx);

    hpass(src, w, y0, y1, tmp, cw, bx, kkx, kx, padded, tb);
#ifdef HAVE_X86_SIMD
    if (have_avx2()) {
        vpass_avx2(tmp, y0, dst, cw, ch, by, kky, ky);
        return SI_OK;
    }
#endif
    vpass(tmp, y0, dst, cw, ch, by, kky, ky);
    return SI_OK;
}

static const char *const interp_names[] = {
    [SI_INTERP_BILINEAR] = "bilinear", [SI_INTERP_BICUBIC] = "bicubic"};

bool si_interp_parse(const char *s, si_interp *out) {
    for (int i = 0; i < (int)(sizeof interp_names / sizeof interp_names[0]); i++)
        if (s && !strcmp(s, interp_names[i])) {
            *out = (si_interp)i;
            return true;
        }
    return false;
}

const char *si_interp_name(si_interp i) {
    SI_ASSERT(i >= 0 && i < (int)(sizeof interp_names / sizeof interp_names[0]));
    return interp_names[i];
}

/* Borrows src and p, writes crop_h*crop_w*3 bytes to dst; allocates and frees its own scratch. */
si_status si_resize_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *dst) {
    scratch sc = {0};
    si_status st = resize_crop(src, w, h, p, dst, &sc);
    free(sc.mem);
    return st;
}

/* The same with the decoder's scratch, which grows to the largest image and is reused: the
 * per-batch path of pre-decoded (dense) sets allocates nothing in the steady state. */
si_status si_decoder_resize_crop(si_decoder *d, const uint8_t *src, int w, int h,
                                 const si_preproc *p, uint8_t *dst) {
    return resize_crop(src, w, h, p, dst, &d->rs);
}

/* Borrows src, writes 3*h*w floats to dst. A table per channel, built with the formula itself,
 * gives the same floats as computing it per pixel at a fraction of the cost. */
void si_normalize_chw(const uint8_t *src, int h, int w, const float mean[3], const float std[3],
                      float *dst) {
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v / 255.0f - mean[c]) / std[c];
    size_t plane = (size_t)h * w;
    for (size_t i = 0; i < plane; i++) {
        dst[i] = lut[0][src[3 * i + 0]];
        dst[plane + i] = lut[1][src[3 * i + 1]];
        dst[2 * plane + i] = lut[2][src[3 * i + 2]];
    }
}

static si_image_status fail(si_image_status st, char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static si_image_status fail(si_image_status st, char *msg, size_t cap, const char *fmt, ...) {
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Adobe CMYK as libjpeg returns it (inverted) to RGB the way Pillow does: Pillow un-inverts
 * ("CMYK;I"), then cmyk2rgb computes nk - MULDIV255(c, nk) with nk = 255 - k. In place: pixel i
 * is read from 4i and written to 3i <= 4i, so going forward never overwrites unread input. */
static void cmyk_to_rgb(uint8_t *p, size_t npix) {
    for (size_t i = 0; i < npix; i++) {
        const uint8_t *in = p + 4 * i;
        int nk = in[3]; /* = 255 - (255 - k_inverted) */
        uint8_t rgb[3];
        for (int c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            rgb[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        memcpy(p + 3 * i, rgb, 3);
    }
}

/* TurboJPEG 2.1 leaves its libjpeg object mid-header after an error longjmp, and the next
 * header read on the same handle then fails too ("Bogus marker length" for every later image);
 * a fresh handle after each failure is cheap next to decoding and bad images are rare. */
static si_image_status tj_failed(si_decoder *d, si_image_status st, char *msg, size_t cap,
                                 const char *what, const char *suffix) {
    fail(st, msg, cap, "%s%s%s", what, tjGetErrorStr2(d->tj), suffix);
    tjDestroy(d->tj);
    d->tj = tjInitDecompress();
    /* without a handle the decoder cannot go on; that is a broken process, not a bad image */
    if (!d->tj) si_fatal(__FILE__, __LINE__, "tjInitDecompress", "%s", tjGetErrorStr2(NULL));
    return st;
}

/* ---- EXIF orientation ------------------------------------------------------------------------
 * What Pillow's getexif() finds and exif_transpose() applies: tag 0x0112 of IFD0 in the first
 * APP1 "Exif\0\0" segment (a TIFF structure, either byte order); if IFD0 has no such entry, the
 * first tiff:Orientation="N" or <tiff:Orientation>N in the last XMP APP1 segment. The input is
 * hostile: every offset is checked against the segment before it is read. (Pillow also glues
 * further Exif segments onto the first; an IFD0 that only makes sense across that seam is ignored
 * here.) */

static uint32_t rd16(const uint8_t *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}

static uint32_t rd32(const uint8_t *p, bool le) {
    return le ? rd16(p, true) | rd16(p + 2, true) << 16 : rd16(p, false) << 16 | rd16(p + 2, false);
}

/* Orientation in the TIFF structure t[0..n): 1..8, or 0 if none usable; *present tells whether
 * IFD0 has an entry 0x0112 at all (then Pillow does not look at XMP, whatever its value). */
static int tiff_orientation(const uint8_t *t, size_t n, bool *present) {
    *present = false;
    if (n < 8) return 0;
    bool le;
    if (!memcmp(t, "II\x2a\x00", 4))
        le = true;
    else if (!memcmp(t, "MM\x00\x2a", 4))
        le = false;
    else
        return 0;
    uint32_t ifd = rd32(t + 4, le);
    if (ifd > n || n - ifd < 2) return 0;
    uint32_t count = rd16(t + ifd, le);
    int orient = 0;
    /* entries are 12 bytes: tag, type, count, value (a lone SHORT sits in the first 2 bytes);
     * a truncated directory keeps the entries before the cut, as Pillow's does; the last
     * duplicate wins, as in Pillow's dict */
    size_t e = (size_t)ifd + 2;
    for (uint32_t i = 0; i < count && n - e >= 12; i++, e += 12) {
        if (rd16(t + e, le) != 0x0112) continue;
        uint32_t type = rd16(t + e + 2, le), cnt = rd32(t + e + 4, le), v = 0;
        *present = true;
        if (cnt == 1) {
            if (type == 1) v = t[e + 8];            /* BYTE */
            if (type == 3) v = rd16(t + e + 8, le); /* SHORT, the type the standard says */
            if (type == 4) v = rd32(t + e + 8, le); /* LONG */
        }
        orient = v >= 1 && v <= 8 ? (int)v : 0;
    }
    return orient;
}

/* Python's re.search(rb'tiff:Orientation(="|>)([0-9])', x) on x[0..n). */
static int xmp_orientation(const uint8_t *x, size_t n) {
    static const char key[] = "tiff:Orientation";
    const size_t k = sizeof key - 1;
    for (size_t i = 0; i + k < n; i++) {
        if (x[i] != 't' || memcmp(x + i, key, k) != 0) continue;
        size_t j = i + k;
        if (x[j] == '>')
            j += 1;
        else if (x[j] == '=' && j + 1 < n && x[j + 1] == '"')
            j += 2;
        else
            continue;
        if (j < n && x[j] >= '0' && x[j] <= '9') return x[j] - '0';
    }
    return 0;
}

/* The EXIF orientation of a JPEG (1..8; 1 when absent or unreadable). Walks the marker
 * segments up to the first SOS the way Pillow's header parser does. */
static int jpeg_orientation(const uint8_t *d, size_t n) {
    static const char exif_id[6] = "Exif\0", xmp_id[29] = "http://ns.adobe.com/xap/1.0/";
    const uint8_t *exif = NULL, *xmp = NULL;
    size_t exif_n = 0, xmp_n = 0, i = 2;
    while (n - i >= 4) {
        if (d[i] != 0xFF) break; /* not at a marker: libjpeg would complain, we stop looking */
        uint8_t m = d[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* no length field */
            i += 2;
            continue;
        }
        if (m == 0xDA || m == 0xD9) break;
        size_t seg = (size_t)d[i + 2] << 8 | d[i + 3]; /* counts itself, not the marker */
        if (seg < 2 || seg > n - i - 2) break;
        const uint8_t *s = d + i + 4;
        size_t sn = seg - 2;
        if (m == 0xE1 && sn >= sizeof exif_id && !memcmp(s, exif_id, sizeof exif_id)) {
            if (!exif) {
                exif = s + sizeof exif_id;
                exif_n = sn - sizeof exif_id;
            }
        } else if (m == 0xE1 && sn >= sizeof xmp_id && !memcmp(s, xmp_id, sizeof xmp_id)) {
            xmp = s + sizeof xmp_id;
            xmp_n = sn - sizeof xmp_id;
        }
        i += 2 + seg;
    }
    bool present = false;
    int o = exif ? tiff_orientation(exif, exif_n, &present) : 0;
    if (!present && xmp) o = xmp_orientation(xmp, xmp_n);
    return o >= 1 && o <= 8 ? o : 1;
}

/* Pillow's Image.transpose for orientations 2..8 (the method exif_transpose picks), RGB: output
 * pixel (x, y) of the (ow, oh) image is input pixel base + x*dx + y*dy of the (w, h) one. In
 * 32x32 tiles, so that the quarter turns (a phone's usual orientation 6) read the input a few
 * cache lines at a time instead of one pixel per line. */
static void apply_orientation(const uint8_t *src, int w, int h, int o, uint8_t *dst) {
    enum { TILE = 32 };
    ptrdiff_t W = w, H = h, base, dx, dy;
    int ow = o >= 5 ? h : w, oh = o >= 5 ? w : h;
    switch (o) {
    case 2: base = W - 1, dx = -1, dy = W; break;                /* FLIP_LEFT_RIGHT */
    case 3: base = (H - 1) * W + W - 1, dx = -1, dy = -W; break; /* ROTATE_180 */
    case 4: base = (H - 1) * W, dx = 1, dy = -W; break;          /* FLIP_TOP_BOTTOM */
    case 5: base = 0, dx = W, dy = 1; break;                     /* TRANSPOSE */
    case 6: base = (H - 1) * W, dx = -W, dy = 1; break;          /* ROTATE_270 */
    case 7: base = (H - 1) * W + W - 1, dx = -W, dy = -1; break; /* TRANSVERSE */
    case 8: base = W - 1, dx = W, dy = -1; break;                /* ROTATE_90 */
    default: SI_ASSERT(!"orientation 2..8"); return;
    }
    for (int ty = 0; ty < oh; ty += TILE)
        for (int tx = 0; tx < ow; tx += TILE) {
            int ye = ty + TILE < oh ? ty + TILE : oh, xe = tx + TILE < ow ? tx + TILE : ow;
            for (int y = ty; y < ye; y++) {
                const uint8_t *s = src + 3 * (base + y * dy + tx * dx);
                uint8_t *out = dst + ((size_t)y * ow + tx) * 3;
                /* memcpy, not three byte copies: those GCC 12 vectorises into a gather through
                 * the stack that stalls on store forwarding (4x slower) */
                for (int x = tx; x < xe; x++, s += 3 * dx, out += 3) memcpy(out, s, 3);
            }
        }
}

/* ---- decode ------------------------------------------------------------------------------ */

/* Whether the crop fits an image of w x h (after orientation) resized to p->resize. */
static bool crop_fits(int w, int h, const si_preproc *p) {
    int rw, rh;
    si_rs_target_size(w, h, p->resize, &rw, &rh);
    return p->crop_h > 0 && p->crop_w > 0 && p->crop_h <= rh && p->crop_w <= rw;
}

/* The libjpeg scale to decode at: the smallest of 1/2, 1/4, 1/8 whose shorter side is still
 * >= resize (and whose resized size still holds the crop: the long side is truncated from the
 * scaled aspect ratio, so it can come out a pixel shorter); 1/1 if none, and in exact mode.
 * Only those three of TurboJPEG's sixteen factors: libjpeg-turbo has SIMD IDCTs for 1/2 and 1/4
 * (and 1/8 is one coefficient per block), while 3/8, 5/8, 3/4 and 7/8 use plain C IDCTs that make
 * the whole decode slower than an unscaled one: on 500x375 photos 1.17 ms at 1/1, 1.5-1.7 ms at
 * 3/4, 2.0 ms at 7/8 (libjpeg-turbo 2.1.5, x86-64; 1/2 takes 1.02 ms, Huffman decoding being
 * the bulk). Their sharper DCT-domain low-pass also takes the crops further from the exact ones
 * (mean |diff| 4.4 at 3/4 against 0.6 at 1/2 on clean photos). These three are also the only
 * ones Pillow's Image.draft() uses. */
static tjscalingfactor pick_scale(int w, int h, bool swap, const si_preproc *p) {
    tjscalingfactor best = {1, 1};
    if (p->exact) return best;
    int n = 0;
    const tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        if (sf[i].num != 1 || (sf[i].denom != 2 && sf[i].denom != 4 && sf[i].denom != 8)) continue;
        if ((int64_t)sf[i].num * best.denom >= (int64_t)best.num * sf[i].denom) continue;
        int sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
        if ((sw < sh ? sw : sh) < p->resize) continue;
        if (!crop_fits(swap ? sh : sw, swap ? sw : sh, p)) continue;
        best = sf[i];
    }
    return best;
}

/* SI_IMG_TOO_LARGE (msg says why) for a declared size of w x h that libjpeg-turbo cannot decode
 * (over 65500 a side: JPEG_MAX_DIMENSION in its jmorecfg.h) or that is over p->max_pixels;
 * SI_IMG_OK otherwise. */
static si_image_status size_over(int w, int h, const si_preproc *p, char *msg, size_t cap) {
    if (w > SI_JPEG_MAX_SIDE || h > SI_JPEG_MAX_SIDE)
        return fail(SI_IMG_TOO_LARGE, msg, cap,
                    "declared size %dx%d is over the JPEG decoder's limit of %d pixels a side", w,
                    h, SI_JPEG_MAX_SIDE);
    uint64_t npix = (uint64_t)w * (uint64_t)h;
    if (p->max_pixels && npix > p->max_pixels)
        return fail(SI_IMG_TOO_LARGE, msg, cap,
                    "declared size %dx%d = %llu pixels is over the cap of %llu", w, h,
                    (unsigned long long)npix, (unsigned long long)p->max_pixels);
    return SI_IMG_OK;
}

/* What the header says, once it passed check_header. */
typedef struct {
    int w, h, cs, orient; /* the stored size, TurboJPEG's colorspace, the EXIF orientation */
    bool swap;            /* the orientation exchanges width and height */
    tjscalingfactor sf;   /* the DCT scale pick_scale chose */
} header_info;

/* The checks before a decode: an empty record, no SOI, an unreadable header, an unknown
 * colorspace, a declared size over the cap, a crop that does not fit. Fills *hi on SI_IMG_OK. */
static si_image_status check_header(si_decoder *d, const uint8_t *data, size_t len,
                                    const si_preproc *p, header_info *hi, char *msg, size_t cap) {
    if (msg && cap) msg[0] = 0;
    if (len == 0) return fail(SI_IMG_EMPTY, msg, cap, "empty record (0 bytes)");
    if (len < 2 || data[0] != 0xFF || data[1] != 0xD8)
        return fail(SI_IMG_NOT_JPEG, msg, cap, "no JPEG SOI marker (starts with %02x %02x)",
                    data[0], len > 1 ? data[1] : 0);

    /* A fresh handle for every image (0.2 us): libjpeg keeps the Huffman and quantization tables
     * it read across the images of one handle (for abbreviated streams), so an image missing a
     * table would decode with those of whatever image this thread decoded before, and its
     * status and pixels would depend on the thread's order (found by the GPU decode fuzz run) */
    tjDestroy(d->tj);
    if (!(d->tj = tjInitDecompress()))
        si_fatal(__FILE__, __LINE__, "tjInitDecompress", "%s", tjGetErrorStr2(NULL));
    int w = 0, h = 0, subsamp = -1, cs = -2;
    int r = tjDecompressHeader3(d->tj, data, (unsigned long)len, &w, &h, &subsamp, &cs);
    /* TurboJPEG fills the sizes and colorspace before it complains about an unknown colorspace,
     * an unusual subsampling (which tjDecompress2 does not need) or a warning in the header.
     * A header cut short can return 0 with nothing filled in, so the sizes decide. libjpeg
     * refuses a side over 65500 without telling the size: the frame header's own says it. The
     * declared size decides before anything else the header says (the next image gets a fresh
     * handle, so this one's failed header read leaves nothing behind). */
    int dw = w, dh = h;
    if ((w <= 0 || h <= 0) && !si_jpeg_declared_size(data, len, &dw, &dh)) dw = dh = 0;
    si_image_status big = size_over(dw, dh, p, msg, cap);
    if (big != SI_IMG_OK) return big;
    if (w <= 0 || h <= 0)
        return tj_failed(d, SI_IMG_NOT_JPEG, msg, cap, "unreadable JPEG header: ", "");
    if (r != 0 && cs == -1)
        return tj_failed(d, SI_IMG_UNSUPPORTED, msg, cap, "unsupported JPEG colorspace: ", "");

    int orient = p->no_exif ? 1 : jpeg_orientation(data, len);
    bool swap = orient >= 5; /* transposes and quarter turns exchange width and height */
    if (!crop_fits(swap ? h : w, swap ? w : h, p)) {
        int rw, rh;
        si_rs_target_size(swap ? h : w, swap ? w : h, p->resize, &rw, &rh);
        return fail(SI_IMG_UNSUPPORTED, msg, cap,
                    "crop %dx%d does not fit the %dx%d image resized to %dx%d (resize %d)",
                    p->crop_h, p->crop_w, swap ? h : w, swap ? w : h, rw, rh, p->resize);
    }
    *hi = (header_info){w, h, cs, orient, swap, pick_scale(w, h, swap, p)};
    return SI_IMG_OK;
}

si_image_status si_decode_plan_gpu(si_decoder *d, const uint8_t *data, size_t len,
                                   const si_preproc *p, si_gpu_plan *plan, char *msg, size_t cap) {
    SI_ASSERT(d && p && plan);
    memset(plan, 0, sizeof *plan);
    header_info hi;
    si_image_status st = check_header(d, data, len, p, &hi, msg, cap);
    if (st != SI_IMG_OK) return st;
    si_jpeg_layout L;
    si_jpeg_scan(data, len, &L);
    plan->cpu_reason = L.cpu_reason;
    if (!plan->cpu_reason && hi.orient != 1) plan->cpu_reason = "EXIF orientation";
    if (!plan->cpu_reason && (L.width != hi.w || L.height != hi.h))
        plan->cpu_reason = "frame size differs from libjpeg's";
    /* --decode gpu-exact: the planes' shape for libjpeg's upsampling (io/yuv.h), and whether
     * the conversion gives libjpeg-turbo's pixels */
    static const int sub[][2] = {
        [SI_JS_444] = {1, 1}, [SI_JS_422] = {2, 1}, [SI_JS_420] = {2, 2}, [SI_JS_440] = {1, 2}};
    if (plan->cpu_reason) {
        plan->exact_reason = plan->cpu_reason;
    } else if (L.sampling == SI_JS_GRAY) {
        plan->exact_reason = "gray"; /* one plane: libjpeg-turbo's decode is cheap */
    } else {
        SI_ASSERT(L.sampling >= SI_JS_444 && L.sampling <= SI_JS_440);
        si_yuv_shape s = {hi.w, hi.h, sub[L.sampling][0], sub[L.sampling][1]};
        plan->hs = s.hs;
        plan->vs = s.vs;
        if (!si_yuv_fancy(&s)) plan->exact_reason = "chroma plane 2 samples wide or less";
        /* 4:4:0 (a losslessly rotated 4:2:2) upsamples right in io/yuv.h (tests/test_jpeg.c),
         * but the hardware's planes for it were not checked against libjpeg-turbo's */
        if (L.sampling == SI_JS_440) plan->exact_reason = "4:4:0";
        /* the CPU decodes it at a DCT scale, which the hardware does not do exactly */
        if (hi.sf.num != hi.sf.denom) plan->exact_reason = "decoded at a DCT scale";
    }
    plan->full_w = hi.w;
    plan->full_h = hi.h;
    return SI_IMG_OK;
}

/* Decodes at the DCT scale pick_scale chooses and applies the orientation; *img points into
 * the decoder's scratch (valid until its next call), *w x *h its size after orientation.
 * Borrows data and p; msg gets the reason on failure. */
si_image_status si_decode_scaled(si_decoder *d, const uint8_t *data, size_t len,
                                 const si_preproc *p, const uint8_t **img_out, int *w_out,
                                 int *h_out, char *msg, size_t cap) {
    SI_ASSERT(d && p && img_out && w_out && h_out);
    header_info hi;
    si_image_status st0 = check_header(d, data, len, p, &hi, msg, cap);
    if (st0 != SI_IMG_OK) return st0;
    int w = hi.w, h = hi.h, cs = hi.cs, orient = hi.orient;
    bool swap = hi.swap;
    tjscalingfactor sf = hi.sf;
    int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    size_t spix = (size_t)sw * (size_t)sh;
    bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    size_t need = spix * (cmyk ? 4 : 3);
    if (!grow(&d->pix, &d->pix_cap, need))
        return fail(SI_IMG_TOO_LARGE, msg, cap, "cannot allocate %zu bytes for a %dx%d image", need,
                    sw, sh);
    /* STOPONWARNING: libjpeg only warns on corrupt entropy data or a premature end and fills
     * the rest with gray; such an image must fail, not be classified. */
    if (tjDecompress2(d->tj, data, (unsigned long)len, d->pix, sw, 0, sh,
                      cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_STOPONWARNING) != 0) {
        bool eoi = len >= 4 && data[len - 2] == 0xFF && data[len - 1] == 0xD9;
        return tj_failed(d, eoi ? SI_IMG_CORRUPT : SI_IMG_TRUNCATED, msg, cap, "",
                         eoi ? "" : " (no EOI marker at the end)");
    }
    if (cmyk) cmyk_to_rgb(d->pix, spix);

    const uint8_t *img = d->pix;
    if (orient != 1) {
        if (!grow(&d->rot, &d->rot_cap, spix * 3))
            return fail(SI_IMG_TOO_LARGE, msg, cap, "cannot allocate %zu bytes for a %dx%d image",
                        spix * 3, sw, sh);
        apply_orientation(d->pix, sw, sh, orient, d->rot);
        img = d->rot;
    }
    *img_out = img;
    *w_out = swap ? sh : sw;
    *h_out = swap ? sw : sh;
    return SI_IMG_OK;
}

/* Borrows data and p; writes the crop to dst only on success; msg gets the reason on failure. */
si_image_status si_decode_crop(si_decoder *d, const uint8_t *data, size_t len, const si_preproc *p,
                               uint8_t *dst, char *msg, size_t cap) {
    SI_ASSERT(dst);
    const uint8_t *img;
    int w, h;
    si_image_status st = si_decode_scaled(d, data, len, p, &img, &w, &h, msg, cap);
    if (st != SI_IMG_OK) return st;
    if (resize_crop(img, w, h, p, dst, &d->rs) != SI_OK)
        return fail(SI_IMG_TOO_LARGE, msg, cap, "%s", si_error_msg());
    return SI_IMG_OK;
}
