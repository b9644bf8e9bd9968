/* The last two steps of libjpeg-turbo's full-size decode, from the image's component planes:
 * "fancy" (triangle-filter) upsampling of the chroma planes and the YCbCr -> RGB conversion, one
 * output pixel at a time, on the host and on the device (SI_HD). The planes are what
 * tjDecompressToYUVPlanes gives and, bit for bit, what nvJPEG's hardware decoder gives (measured
 * on an H100: its IDCT matches libjpeg-turbo's, but its own RGB output upsamples chroma by
 * replication), so --decode gpu gets libjpeg-turbo's pixels by decoding to planes and converting
 * with these. The formulas are libjpeg's (jdsample.c: h2v1, h1v2 and h2v2 fancy upsampling,
 * the context rows at the image's edges replicated; jdcolor.c: ycc_rgb_convert's tables), for
 * 4:4:4, 4:2:2, 4:2:0 and 4:4:0. libjpeg replicates instead when a horizontally subsampled
 * plane is 2 samples wide or less (si_yuv_fancy says no: those images stay with the CPU).
 * tests/test_jpeg.c checks every pixel against libjpeg-turbo's own RGB. */
#ifndef SI_YUV_H
#define SI_YUV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hd.h"

typedef struct {
    int w, h;   /* the image, and the luma plane (pitch w) */
    int hs, vs; /* chroma subsampling, 1 or 2 each way; the chroma planes are cw x ch */
} si_yuv_shape;

SI_HD static inline int si_yuv_cw(const si_yuv_shape *s) {
    return (s->w + s->hs - 1) / s->hs;
}
SI_HD static inline int si_yuv_ch(const si_yuv_shape *s) {
    return (s->h + s->vs - 1) / s->vs;
}

/* Whether libjpeg upsamples this shape with the fancy filters (the case these formulas cover). */
SI_HD static inline bool si_yuv_fancy(const si_yuv_shape *s) {
    return (s->hs == 1 || s->hs == 2) && (s->vs == 1 || s->vs == 2) &&
           (s->hs == 1 || si_yuv_cw(s) > 2);
}

/* Bytes of the three planes, packed: Y (w x h) then Cb and Cr (cw x ch each). */
static inline size_t si_yuv_bytes(const si_yuv_shape *s) {
    size_t c = (size_t)si_yuv_cw(s) * (size_t)si_yuv_ch(s);
    return (size_t)s->w * (size_t)s->h + 2 * c;
}

/* One chroma plane p (cw x ch) upsampled at output pixel (x, y). */
SI_HD static inline int si_yuv_chroma(const uint8_t *p, int cw, int ch, int hs, int vs, int x,
                                      int y) {
    if (vs == 1) {
        const uint8_t *row = p + (size_t)y * (size_t)cw;
        if (hs == 1) return row[x];
        int c = x >> 1; /* h2v1: 3/4 nearer + 1/4 further, the edges as they are */
        if (!(x & 1)) return c == 0 ? row[0] : (row[c] * 3 + row[c - 1] + 1) >> 2;
        return c == cw - 1 ? row[c] : (row[c] * 3 + row[c + 1] + 2) >> 2;
    }
    int r = y >> 1, below = y & 1; /* the nearer row, and the next nearer: above or below */
    int r1 = below ? (r + 1 < ch ? r + 1 : ch - 1) : (r > 0 ? r - 1 : 0);
    const uint8_t *p0 = p + (size_t)r * (size_t)cw, *p1 = p + (size_t)r1 * (size_t)cw;
    if (hs == 1) return (p0[x] * 3 + p1[x] + (below ? 2 : 1)) >> 2; /* h1v2 */
    int c = x >> 1; /* h2v2: column sums of 3 x nearer row + further row, then 3:1 across */
    int here = p0[c] * 3 + p1[c];
    if (!(x & 1)) {
        if (c == 0) return (here * 4 + 8) >> 4;
        return (here * 3 + p0[c - 1] * 3 + p1[c - 1] + 8) >> 4;
    }
    if (c == cw - 1) return (here * 4 + 7) >> 4;
    return (here * 3 + p0[c + 1] * 3 + p1[c + 1] + 7) >> 4;
}

SI_HD static inline uint8_t si_yuv_clamp(int v) {
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* RGB of output pixel (x, y) from the packed planes at yuv (si_yuv_bytes). jdcolor.c's
 * arithmetic: 16 fractional bits, FIX(x) = x * 65536 rounded, arithmetic right shifts. */
SI_HD static inline void si_yuv_rgb(const uint8_t *yuv, const si_yuv_shape *s, int x, int y,
                                    uint8_t *rgb) {
    const int cw = si_yuv_cw(s), ch = si_yuv_ch(s);
    const uint8_t *cb_p = yuv + (size_t)s->w * (size_t)s->h;
    const uint8_t *cr_p = cb_p + (size_t)cw * (size_t)ch;
    int luma = yuv[(size_t)y * (size_t)s->w + (size_t)x];
    int cb = si_yuv_chroma(cb_p, cw, ch, s->hs, s->vs, x, y) - 128;
    int cr = si_yuv_chroma(cr_p, cw, ch, s->hs, s->vs, x, y) - 128;
    const int32_t half = 1 << 15;
    rgb[0] = si_yuv_clamp(luma + ((91881 * cr + half) >> 16));            /* FIX(1.40200) */
    rgb[1] = si_yuv_clamp(luma + ((-22554 * cb + half - 46802 * cr) >> 16)); /* 0.34414, 0.71414 */
    rgb[2] = si_yuv_clamp(luma + ((116130 * cb + half) >> 16));           /* FIX(1.77200) */
}

#endif
