/* JPEG decode (TurboJPEG) and the CPU preprocessing that has to match the Python reference:
 * Pillow's BILINEAR resample (ImagingResample, triangle filter widened by the downscale factor,
 * 22-bit fixed point) and torchvision's Resize(int) + CenterCrop arithmetic. The resize only
 * computes the pixels the crop keeps; every output pixel depends only on its own coefficients,
 * so skipping the others changes nothing in the ones kept. */
#include "jpeg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

/* TurboJPEG takes sizes as unsigned long */
_Static_assert(sizeof(unsigned long) >= sizeof(size_t), "unsigned long narrower than size_t");

/* Pillow's Resample.c: 32 bits minus 8 for the pixel value minus 2 of headroom. */
#define PRECISION_BITS (32 - 8 - 2)

/* Scratch of the resize, carved out of one allocation: coefficients and bounds of the kept
 * columns and rows, the double work row of one coefficient set, and the horizontal pass. */
typedef struct {
    uint8_t *mem;
    size_t cap;
} scratch;

struct si_decoder {
    tjhandle tj;
    uint8_t *pix; /* decoded image, RGB (3 bytes/pixel) or CMYK (4) */
    size_t pix_cap;
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

static double triangle(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* Pillow's precompute_coeffs (box = whole image) followed by normalize_coeffs_8bpc, for output
 * positions [o0, o0+n) of out_size only. The expressions are kept in Pillow's order and types
 * so that the doubles, and thus the rounded fixed-point weights, are the same bits. */
static void coeffs(int in_size, int out_size, int o0, int n, int ksize, int *bounds, int32_t *kk,
                   double *k) {
    const float in0 = 0.0f, in1 = (float)in_size;
    double scale = (double)(in1 - in0) / out_size, filterscale = scale;
    if (filterscale < 1.0) filterscale = 1.0;
    double support = 1.0 * filterscale; /* BILINEAR's support is 1 */
    for (int i = 0; i < n; i++) {
        int xx = o0 + i;
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double w = triangle((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        int32_t *kf = kk + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) {
            double v = 0.0;
            if (x < xmax) v = ww != 0.0 ? k[x] / ww : k[x];
            kf[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                          : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax;
    }
}

static uint8_t clip8(int v) {
    if (v >= (1 << PRECISION_BITS << 8)) return 255;
    if (v <= 0) return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

/* Python's round() of d/2 for an integer d: halves go to the even neighbour, as torchvision's
 * center_crop computes int(round((H - crop) / 2.0)). */
static int half_round_even(int d) {
    int q = d / 2; /* d >= 0 here */
    if (d % 2 == 0) return q;
    return q % 2 == 0 ? q : q + 1;
}

/* torchvision Resize(int): the shorter side becomes `resize`, the longer one
 * int(resize * long / short), truncated. The product is exact in a double and the division is
 * correctly rounded, as Python's int / int is, so the truncation sees the same value. */
static void target_size(int w, int h, int resize, int *rw, int *rh) {
    if (w <= 0 || h <= 0 || resize <= 0) {
        *rw = *rh = 0;
    } else if (w <= h) {
        *rw = resize;
        *rh = (int)((double)resize * h / w);
    } else {
        *rh = resize;
        *rw = (int)((double)resize * w / h);
    }
}

static int ksize_of(int in_size, int out_size) {
    double scale = (double)(float)in_size / out_size;
    if (scale < 1.0) scale = 1.0;
    return (int)ceil(scale) * 2 + 1;
}

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* The resize and crop, with scratch borrowed from the caller. SI_ERR_ARG for sizes the caller
 * should have refused, SI_ERR_NOMEM if the scratch cannot grow (message set). */
static si_status resize_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *dst,
                             scratch *sc) {
    int rw, rh;
    target_size(w, h, p->resize, &rw, &rh);
    if (w <= 0 || h <= 0 || p->crop_h <= 0 || p->crop_w <= 0 || p->crop_h > rh || p->crop_w > rw)
        return si_error(SI_ERR_ARG, "resize/crop: bad sizes (image %dx%d, resize %d, crop %dx%d)",
                        w, h, p->resize, p->crop_h, p->crop_w);
    int top = half_round_even(rh - p->crop_h), left = half_round_even(rw - p->crop_w);
    int cw = p->crop_w, ch = p->crop_h;
    int kx = ksize_of(w, rw), ky = ksize_of(h, rh);

    size_t need_coef = align16((size_t)cw * kx * 4) + align16((size_t)ch * ky * 4) +
                       align16((size_t)(cw + ch) * 2 * sizeof(int)) +
                       align16((size_t)(kx > ky ? kx : ky) * sizeof(double));
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
    double *work = (double *)q;
    q += align16((size_t)(kx > ky ? kx : ky) * sizeof(double));
    uint8_t *tmp = q; /* (rows, cw, 3) */

    coeffs(w, rw, left, cw, kx, bx, kkx, work);
    coeffs(h, rh, top, ch, ky, by, kky, work);
    int y0 = by[0], y1 = by[2 * (ch - 1)] + by[2 * (ch - 1) + 1];

    /* horizontal pass over input rows [y0, y1) only */
    for (int y = y0; y < y1; y++) {
        const uint8_t *row = src + (size_t)y * w * 3;
        uint8_t *out = tmp + (size_t)(y - y0) * cw * 3;
        for (int xx = 0; xx < cw; xx++) {
            const int32_t *k = kkx + (size_t)xx * kx;
            const uint8_t *s = row + (size_t)bx[2 * xx] * 3;
            int n = bx[2 * xx + 1];
            int s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0; x < n; x++) {
                s0 += s[3 * x + 0] * k[x];
                s1 += s[3 * x + 1] * k[x];
                s2 += s[3 * x + 2] * k[x];
            }
            out[3 * xx + 0] = clip8(s0);
            out[3 * xx + 1] = clip8(s1);
            out[3 * xx + 2] = clip8(s2);
        }
    }
    /* vertical pass, straight into the crop */
    for (int yy = 0; yy < ch; yy++) {
        const int32_t *k = kky + (size_t)yy * ky;
        const uint8_t *s = tmp + (size_t)(by[2 * yy] - y0) * cw * 3;
        int n = by[2 * yy + 1];
        uint8_t *out = dst + (size_t)yy * cw * 3;
        for (int xc = 0; xc < cw * 3; xc++) {
            int acc = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < n; y++) acc += s[(size_t)y * cw * 3 + xc] * k[y];
            out[xc] = clip8(acc);
        }
    }
    return SI_OK;
}

/* Borrows src and p, writes crop_h*crop_w*3 bytes to dst; allocates and frees its own scratch. */
si_status si_resize_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *dst) {
    scratch sc = {0};
    si_status st = resize_crop(src, w, h, p, dst, &sc);
    free(sc.mem);
    return st;
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

/* Borrows data and p; writes the crop to dst only on success; msg gets the reason on failure. */
si_image_status si_decode_crop(si_decoder *d, const uint8_t *data, size_t len, const si_preproc *p,
                               uint8_t *dst, char *msg, size_t cap) {
    SI_ASSERT(d && p && dst);
    if (msg && cap) msg[0] = 0;
    if (len == 0) return fail(SI_IMG_EMPTY, msg, cap, "empty record (0 bytes)");
    if (len < 2 || data[0] != 0xFF || data[1] != 0xD8)
        return fail(SI_IMG_NOT_JPEG, msg, cap, "no JPEG SOI marker (starts with %02x %02x)",
                    data[0], len > 1 ? data[1] : 0);

    int w = 0, h = 0, subsamp = -1, cs = -2;
    int r = tjDecompressHeader3(d->tj, data, (unsigned long)len, &w, &h, &subsamp, &cs);
    /* TurboJPEG fills the sizes and colorspace before it complains about an unknown colorspace,
     * an unusual subsampling (which tjDecompress2 does not need) or a warning in the header.
     * A header cut short can return 0 with nothing filled in, so the sizes decide. */
    if (w <= 0 || h <= 0)
        return tj_failed(d, SI_IMG_NOT_JPEG, msg, cap, "unreadable JPEG header: ", "");
    if (r != 0 && cs == -1)
        return tj_failed(d, SI_IMG_UNSUPPORTED, msg, cap, "unsupported JPEG colorspace: ", "");
    uint64_t npix = (uint64_t)w * (uint64_t)h;
    if (p->max_pixels && npix > p->max_pixels)
        return fail(SI_IMG_TOO_LARGE, msg, cap,
                    "declared size %dx%d = %llu pixels is over the cap of %llu", w, h,
                    (unsigned long long)npix, (unsigned long long)p->max_pixels);

    int rw, rh;
    target_size(w, h, p->resize, &rw, &rh);
    if (p->crop_h <= 0 || p->crop_w <= 0 || p->crop_h > rh || p->crop_w > rw)
        return fail(SI_IMG_UNSUPPORTED, msg, cap,
                    "crop %dx%d does not fit the %dx%d image resized to %dx%d (resize %d)",
                    p->crop_h, p->crop_w, w, h, rw, rh, p->resize);

    bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    size_t need = (size_t)npix * (cmyk ? 4 : 3);
    if (!grow(&d->pix, &d->pix_cap, need))
        return fail(SI_IMG_TOO_LARGE, msg, cap, "cannot allocate %zu bytes for a %dx%d image", need,
                    w, h);
    /* STOPONWARNING: libjpeg only warns on corrupt entropy data or a premature end and fills
     * the rest with gray; such an image must fail, not be classified. */
    if (tjDecompress2(d->tj, data, (unsigned long)len, d->pix, w, 0, h, cmyk ? TJPF_CMYK : TJPF_RGB,
                      TJFLAG_STOPONWARNING) != 0) {
        bool eoi = len >= 4 && data[len - 2] == 0xFF && data[len - 1] == 0xD9;
        return tj_failed(d, eoi ? SI_IMG_CORRUPT : SI_IMG_TRUNCATED, msg, cap, "",
                         eoi ? "" : " (no EOI marker at the end)");
    }
    if (cmyk) cmyk_to_rgb(d->pix, (size_t)npix);

    if (resize_crop(d->pix, w, h, p, dst, &d->rs) != SI_OK)
        return fail(SI_IMG_TOO_LARGE, msg, cap, "%s", si_error_msg());
    return SI_IMG_OK;
}
