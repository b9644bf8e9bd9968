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
 * tests/test_jpeg.c checks every pixel against libjpeg-turbo's own RGB. The planar outputs are
 * slow on the hardware, its RGB is not, so --decode gpu instead recovers the planes from that RGB
 * (si_yuv_unreplicate, si_yuv_refancy at the end). */
#ifndef SI_YUV_H
#define SI_YUV_H

#include <math.h>
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

/* Whether nvJPEG's hardware RGB of this shape has chroma replicated that si_yuv_unreplicate and
 * si_yuv_refancy (below) turn into libjpeg-turbo's: subsampled chroma that libjpeg upsamples with
 * its fancy filters. */
SI_HD static inline bool si_yuv_replicated(const si_yuv_shape *s) {
    return si_yuv_fancy(s) && s->hs * s->vs > 1;
}

/* Bytes of the two chroma planes (cw x ch each). */
static inline size_t si_yuv_chroma_bytes(const si_yuv_shape *s) {
    return 2 * (size_t)si_yuv_cw(s) * (size_t)si_yuv_ch(s);
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

/* What jdcolor.c adds to luma for chroma (cb, cr) (0..255 each): R, G and B before the clamp
 * are luma + o[0], o[1], o[2]. Its arithmetic: 16 fractional bits, FIX(x) = x * 65536 rounded,
 * arithmetic right shifts. */
SI_HD static inline void si_yuv_offsets(int cb, int cr, int o[3]) {
    const int32_t half = 1 << 15;
    cb -= 128;
    cr -= 128;
    o[0] = (91881 * cr + half) >> 16;               /* FIX(1.40200) */
    o[1] = (-22554 * cb + half - 46802 * cr) >> 16; /* FIX(0.34414), FIX(0.71414) */
    o[2] = (116130 * cb + half) >> 16;              /* FIX(1.77200) */
}

/* RGB of output pixel (x, y) from the packed planes at yuv (si_yuv_bytes). */
SI_HD static inline void si_yuv_rgb(const uint8_t *yuv, const si_yuv_shape *s, int x, int y,
                                    uint8_t *rgb) {
    const int cw = si_yuv_cw(s), ch = si_yuv_ch(s);
    const uint8_t *cb_p = yuv + (size_t)s->w * (size_t)s->h;
    const uint8_t *cr_p = cb_p + (size_t)cw * (size_t)ch;
    int luma = yuv[(size_t)y * (size_t)s->w + (size_t)x], o[3];
    si_yuv_offsets(si_yuv_chroma(cb_p, cw, ch, s->hs, s->vs, x, y),
                   si_yuv_chroma(cr_p, cw, ch, s->hs, s->vs, x, y), o);
    for (int c = 0; c < 3; c++) rgb[c] = si_yuv_clamp(luma + o[c]);
}

/* --decode gpu: nvJPEG's hardware RGB is libjpeg-turbo's with each chroma sample replicated over
 * its hs x vs block (TJFLAG_FASTUPSAMPLE's pixels, measured on an H100), where libjpeg-turbo
 * interpolates. What follows undoes the replication from the RGB alone. A pixel whose three
 * values are all 1..254 was not clamped, so R - B and G - B are its chroma's offset differences,
 * and those name one chroma pair (checked over all 65,536 in tests/test_jpeg.c); its luma is then
 * R - o[0]. With each block's chroma from its first such pixel, the planes upsampled as libjpeg
 * does and every pixel converted again, the result is libjpeg-turbo's own pixels wherever the
 * blocks around a pixel had an unclamped pixel. A block clamped whole (highlights, shadows: about
 * 0.6% of the blocks of datasets/make_bench_set.py's photos) gets the chroma pair its pixels
 * allow that comes first in a search outwards from an estimate, and its pixels stay within a few
 * levels. */

/* The chroma pair (0..255 each) whose offsets differ as o[0] - o[2] == rb and o[1] - o[2] == gb;
 * false if none. The linear inverse of the offsets, rounded, then the integer offsets around
 * it (the rounded pair first: nearly always the one). */
SI_HD static inline bool si_yuv_chroma_of(int rb, int gb, int *cb, int *cr) {
    /* rb = 1.402 cr' - 1.772 cb', gb = -2.11614 cb' - 0.71414 cr' (cb' = cb - 128) */
    const float inv_det = 1.0f / (1.772f * 0.71414f + 1.402f * 2.11614f);
    const float fb = (-0.71414f * (float)rb - 1.402f * (float)gb) * inv_det;
    const float fr = (2.11614f * (float)rb - 1.772f * (float)gb) * inv_det;
    const int b0 = (int)floorf(fb + 0.5f) + 128, r0 = (int)floorf(fr + 0.5f) + 128;
    for (int k = 0; k < 9; k++) {
        const int at = k == 0 ? 4 : k - 1 + (k > 4); /* the 3 x 3 around (b0, r0), centre first */
        const int b = b0 + at % 3 - 1, r = r0 + at / 3 - 1;
        int o[3];
        if (b < 0 || b > 255 || r < 0 || r > 255) continue;
        si_yuv_offsets(b, r, o);
        if (o[0] - o[2] == rb && o[1] - o[2] == gb) {
            *cb = b;
            *cr = r;
            return true;
        }
    }
    return false;
}

/* The pixels of chroma sample (cx, cy): [x0, x1) x [y0, y1), cut at the image's edges. */
SI_HD static inline void si_yuv_block(const si_yuv_shape *s, int cx, int cy, int *x0, int *x1,
                                      int *y0, int *y1) {
    *x0 = cx * s->hs;
    *y0 = cy * s->vs;
    *x1 = *x0 + s->hs < s->w ? *x0 + s->hs : s->w;
    *y1 = *y0 + s->vs < s->h ? *y0 + s->vs : s->h;
}

/* Chroma sample (cx, cy) of an image decoded with replicated chroma, rgb packed (pitch w * 3):
 * true with its cb and cr where a pixel of its block was not clamped; false where all were,
 * with JFIF's forward transform of the block's mean as the estimate in *cb, *cr. */
SI_HD static inline bool si_yuv_block_chroma(const uint8_t *rgb, const si_yuv_shape *s, int cx,
                                             int cy, int *cb, int *cr) {
    int x0, x1, y0, y1, sum[3] = {0, 0, 0}, n = 0;
    si_yuv_block(s, cx, cy, &x0, &x1, &y0, &y1);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++, n++) {
            const uint8_t *p = rgb + ((size_t)y * (size_t)s->w + (size_t)x) * 3;
            if (p[0] - 1u < 254u && p[1] - 1u < 254u && p[2] - 1u < 254u &&
                si_yuv_chroma_of(p[0] - p[2], p[1] - p[2], cb, cr))
                return true;
            for (int c = 0; c < 3; c++) sum[c] += p[c];
        }
    const float R = (float)sum[0] / (float)n, G = (float)sum[1] / (float)n;
    const float B = (float)sum[2] / (float)n;
    *cb = si_yuv_clamp((int)floorf(128.5f - 0.168736f * R - 0.331264f * G + 0.5f * B));
    *cr = si_yuv_clamp((int)floorf(128.5f + 0.5f * R - 0.418688f * G - 0.081312f * B));
    return false;
}

/* How far (in each of cb and cr) the search for a block clamped whole goes from its estimate,
 * and its candidates: the estimate, then square rings outwards, each ring's nearest first. */
#define SI_YUV_SEARCH     12
#define SI_YUV_CANDIDATES ((2 * SI_YUV_SEARCH + 1) * (2 * SI_YUV_SEARCH + 1))

/* Candidate i's offset (db, dr) from the estimate. Ring k >= 1 holds candidates (2k - 1)^2 to
 * (2k + 1)^2 - 1: the four on the axes, then (k, t) for t = 1 .. k - 1 in all eight places, then
 * the four corners. */
SI_HD static inline void si_yuv_candidate(int i, int *db, int *dr) {
    if (i == 0) {
        *db = *dr = 0;
        return;
    }
    int k = (int)((sqrtf((float)i) + 1.0f) * 0.5f);
    while ((2 * k + 1) * (2 * k + 1) <= i) k++;
    while ((2 * k - 1) * (2 * k - 1) > i) k--;
    int j = i - (2 * k - 1) * (2 * k - 1), a, b;
    if (j < 4) { /* on the axes */
        a = j & 1 ? -k : k;
        b = 0;
        if (j & 2) {
            b = a;
            a = 0;
        }
    } else if (j < 8 * k - 4) {
        const int t = 1 + (j - 4) / 8, q = (j - 4) & 7;
        a = q & 1 ? -k : k;
        b = q & 2 ? -t : t;
        if (q & 4) {
            const int x = a;
            a = b;
            b = x;
        }
    } else { /* the corners */
        a = (j - (8 * k - 4)) & 1 ? -k : k;
        b = (j - (8 * k - 4)) & 2 ? -k : k;
    }
    *db = a;
    *dr = b;
}

/* Whether candidate i from the estimate (eb, er) can have given the clamped block of chroma
 * sample (cx, cy): then each of its pixels has a luma 0..255 that its three clamped values agree
 * on. Its pair in *cb, *cr. */
SI_HD static inline bool si_yuv_try(const uint8_t *rgb, const si_yuv_shape *s, int cx, int cy,
                                    int eb, int er, int i, int *cb, int *cr) {
    int db, dr, o[3], x0, x1, y0, y1;
    si_yuv_candidate(i, &db, &dr);
    *cb = eb + db;
    *cr = er + dr;
    if (*cb < 0 || *cb > 255 || *cr < 0 || *cr > 255) return false;
    si_yuv_offsets(*cb, *cr, o);
    si_yuv_block(s, cx, cy, &x0, &x1, &y0, &y1);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *p = rgb + ((size_t)y * (size_t)s->w + (size_t)x) * 3;
            int lo = 0, hi = 255;
            for (int c = 0; c < 3; c++) {
                const int v = p[c] - o[c];
                if (p[c] != 0 && v > lo) lo = v;   /* luma >= v: exact, or clamped at 255 */
                if (p[c] != 255 && v < hi) hi = v; /* luma <= v: exact, or clamped at 0 */
            }
            if (lo > hi) return false;
        }
    return true;
}

/* Chroma sample (cx, cy)'s cb and cr (the host's reference; the GPU searches a warp at a time
 * in the same order), and whether they are exact. */
SI_HD static inline bool si_yuv_unreplicate(const uint8_t *rgb, const si_yuv_shape *s, int cx,
                                            int cy, uint8_t *cb, uint8_t *cr) {
    int b, r;
    const bool exact = si_yuv_block_chroma(rgb, s, cx, cy, &b, &r);
    for (int i = 0, tb, tr; !exact && i < SI_YUV_CANDIDATES; i++)
        if (si_yuv_try(rgb, s, cx, cy, b, r, i, &tb, &tr)) {
            b = tb;
            r = tr;
            break;
        }
    *cb = (uint8_t)b;
    *cr = (uint8_t)r;
    return exact;
}

/* Plane p (cw x ch) upsampled over the hs x vs pixels of sample (cx, cy): out[dy * 2 + dx], as
 * si_yuv_chroma gives each (libjpeg's formulas; its edge cases are the neighbours replicated). */
SI_HD static inline void si_yuv_chroma_block(const uint8_t *p, int cw, int ch, int hs, int vs,
                                             int cx, int cy, int out[4]) {
    const int xl = cx > 0 ? cx - 1 : 0, xr = cx + 1 < cw ? cx + 1 : cw - 1;
    const int ya = cy > 0 ? cy - 1 : 0, yb = cy + 1 < ch ? cy + 1 : ch - 1;
    const uint8_t *rm = p + (size_t)cy * (size_t)cw;
    const uint8_t *ra = p + (size_t)ya * (size_t)cw, *rb = p + (size_t)yb * (size_t)cw;
    if (vs == 1) { /* h2v1 (hs 1 has nothing to upsample) */
        out[0] = (rm[cx] * 3 + rm[xl] + 1) >> 2;
        out[1] = (rm[cx] * 3 + rm[xr] + 2) >> 2;
        return;
    }
    if (hs == 1) { /* h1v2 */
        out[0] = (rm[cx] * 3 + ra[cx] + 1) >> 2;
        out[2] = (rm[cx] * 3 + rb[cx] + 2) >> 2;
        return;
    }
    for (int t = 0; t < 2; t++) { /* h2v2: the row above, then below */
        const uint8_t *ro = t ? rb : ra;
        const int l = rm[xl] * 3 + ro[xl], m = rm[cx] * 3 + ro[cx], r = rm[xr] * 3 + ro[xr];
        out[2 * t] = (m * 3 + l + 8) >> 4;
        out[2 * t + 1] = (m * 3 + r + 7) >> 4;
    }
}

/* The pixels of chroma sample (cx, cy), in place: each one's luma from its own values and the
 * block's chroma, then converted with the planes (cb_p, cr_p: cw x ch, from si_yuv_unreplicate)
 * upsampled as libjpeg-turbo does. */
SI_HD static inline void si_yuv_refancy(uint8_t *rgb, const uint8_t *cb_p, const uint8_t *cr_p,
                                        const si_yuv_shape *s, int cx, int cy) {
    const int cw = si_yuv_cw(s), ch = si_yuv_ch(s);
    int x0, x1, y0, y1, o[3], fb[4], fr[4];
    si_yuv_block(s, cx, cy, &x0, &x1, &y0, &y1);
    si_yuv_offsets(cb_p[(size_t)cy * (size_t)cw + (size_t)cx],
                   cr_p[(size_t)cy * (size_t)cw + (size_t)cx], o);
    si_yuv_chroma_block(cb_p, cw, ch, s->hs, s->vs, cx, cy, fb);
    si_yuv_chroma_block(cr_p, cw, ch, s->hs, s->vs, cx, cy, fr);
    for (int k = 0; k < 4; k++) { /* constant bounds: the arrays stay in registers on the GPU */
        const int x = x0 + (k & 1), y = y0 + (k >> 1);
        if (x >= x1 || y >= y1) continue;
        uint8_t *px = rgb + ((size_t)y * (size_t)s->w + (size_t)x) * 3;
        const int v[3] = {px[0], px[1], px[2]};
        int luma = -1, lo = 0, hi = 255, f[3];
        for (int c = 2; c >= 0; c--) { /* the first unclamped value gives the luma */
            if (v[c] - 1u < 254u) luma = v[c] - o[c];
            if (v[c] == 255 && 255 - o[c] > lo) lo = 255 - o[c]; /* luma + o[c] >= 255 */
            if (v[c] == 0 && -o[c] < hi) hi = -o[c];             /* luma + o[c] <= 0 */
        }
        if (luma < 0) luma = lo > 0 || lo > hi ? lo : hi; /* all clamped: nearest the edge */
        if (luma > 255) luma = 255;
        si_yuv_offsets(fb[k], fr[k], f);
        for (int c = 0; c < 3; c++) px[c] = si_yuv_clamp(luma + f[c]);
    }
}

/* The whole image on the host, what k_unreplicate and k_refancy (cuda/jpeg.cu) do on the GPU:
 * the chroma planes cb_p, cr_p (cw x ch each) recovered from the replicated rgb, then every pixel
 * converted in place. known[i] (where not NULL): whether chroma sample i was exact. Returns how
 * many samples were clamped whole. */
static inline long si_yuv_unreplicate_image(uint8_t *rgb, const si_yuv_shape *s, uint8_t *cb_p,
                                            uint8_t *cr_p, uint8_t *known) {
    const int cw = si_yuv_cw(s), ch = si_yuv_ch(s);
    long clamped = 0;
    for (int y = 0; y < ch; y++)
        for (int x = 0; x < cw; x++) {
            const int i = y * cw + x;
            const bool exact = si_yuv_unreplicate(rgb, s, x, y, cb_p + i, cr_p + i);
            clamped += !exact;
            if (known) known[i] = exact;
        }
    for (int y = 0; y < ch; y++)
        for (int x = 0; x < cw; x++) si_yuv_refancy(rgb, cb_p, cr_p, s, x, y);
    return clamped;
}

#endif
