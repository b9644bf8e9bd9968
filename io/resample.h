/* Pillow's BILINEAR and BICUBIC resamples and torchvision's Resize(int) + CenterCrop geometry,
 * as inline functions that compile for the host (io/jpeg.c) and for the GPU (cuda/resize.cu), so
 * that both run one formula and give the same bytes. Pillow computes the weights in double
 * precision (precompute_coeffs), rounds them to 22-bit fixed point (normalize_coeffs_8bpc),
 * resizes horizontally into uint8 and then vertically; the expressions below keep its order and
 * types. The two filters differ only in the kernel and its support (1 and 2 input pixels, widened
 * by the downscale factor). cuda/resize.cu is compiled with -fmad=false so that nvcc does not
 * contract them into FMAs; the host build is ISO C, where GCC does not contract either. */
#ifndef SI_RESAMPLE_H
#define SI_RESAMPLE_H

#include <stdint.h>

#include "base/hd.h"

/* Pillow's Resample.c: 32 bits minus 8 for the pixel value minus 2 of headroom. */
#define SI_RS_PREC 22
#define SI_RS_HALF (1 << (SI_RS_PREC - 1)) /* Pillow's rounding term */
/* The widest filter the GPU resizes, in taps per axis: a downscale of up to 7x with BILINEAR,
 * 3.5x with BICUBIC (twice the support, twice the taps). DCT-scaled decodes need 5 or 7 (up to
 * 11 with BICUBIC); wider ones (exact mode on large photos) are resized on the CPU. */
#define SI_RS_GPU_TAPS 16

/* The resampling filter: Pillow's Image.BILINEAR (the default, torchvision's Resize default) or
 * Image.BICUBIC (what CLIP and DINOv2 were trained with). Zero is BILINEAR, so a zeroed
 * si_preproc or si_rs_item keeps the default. */
typedef enum { SI_INTERP_BILINEAR = 0, SI_INTERP_BICUBIC = 1 } si_interp;

/* The packed buffer's default bytes per image: an RGB image of 3 * resize^2 pixels (512x384 for
 * resize 256, above the usual ImageNet photo); a batch of larger ones spills to the CPU resize. */
#define SI_RS_PACK_DEFAULT(resize) ((size_t)9 * (size_t)(resize) * (size_t)(resize))

/* One image for the GPU resize: its decoded RGB (h, w, 3) bytes start at `off` in the slot's
 * packed buffer; it is resized to (rh, rw) and the (crop_h, crop_w) window at (top, left) kept.
 * w == 0: no image (a failed row), the crop is written as zeros. */
typedef struct {
    uint64_t off;
    int32_t w, h, rw, rh, top, left;
    int32_t interp; /* si_interp */
} si_rs_item;

/* torchvision Resize(int): the shorter side becomes `resize`, the longer one
 * int(resize * long / short), truncated. The product is exact in a double and the division is
 * correctly rounded, as Python's int / int is, so the truncation sees the same value. */
SI_HD static inline void si_rs_target_size(int w, int h, int resize, int *rw, int *rh) {
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

/* Python's round() of d/2 for an integer d >= 0: halves go to the even neighbour, as
 * torchvision's center_crop computes int(round((H - crop) / 2.0)). */
SI_HD static inline int si_rs_half_round_even(int d) {
    int q = d / 2;
    if (d % 2 == 0) return q;
    return q % 2 == 0 ? q : q + 1;
}

/* The filter's support in input pixels before the downscale widens it (Pillow's
 * filterp->support). */
SI_HD static inline double si_rs_support(int interp) {
    return interp == SI_INTERP_BICUBIC ? 2.0 : 1.0;
}

/* Taps per output pixel along an axis of in_size resized to out_size (Pillow's ksize). */
SI_HD static inline int si_rs_ksize(int in_size, int out_size, int interp) {
    double filterscale = (double)(float)in_size / out_size;
    if (filterscale < 1.0) filterscale = 1.0;
    double support = si_rs_support(interp) * filterscale;
    int c = (int)support;
    if ((double)c < support) c++; /* ceil, the same on host and device */
    return c * 2 + 1;
}

/* Pillow's bilinear_filter. */
static inline SI_HD double si_rs_triangle(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* Pillow's bicubic_filter: Keys' cubic convolution with a = -0.5, in Pillow's expressions (the
 * constants a + 2 and a + 3 are exact, so folding them changes nothing). */
static inline SI_HD double si_rs_cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static inline SI_HD double si_rs_filter(int interp, double x) {
    return interp == SI_INTERP_BICUBIC ? si_rs_cubic(x) : si_rs_triangle(x);
}

/* Output position xx of an axis of in_size resized to out_size (the box is the whole image)
 * with filter `interp`: its window [xmin, xmin + n) of input positions and the fixed-point
 * weights kk[0, n), n <= the axis's si_rs_ksize. Pillow's precompute_coeffs +
 * normalize_coeffs_8bpc, recomputing each weight instead of keeping the doubles: the same
 * expression gives the same bits. BICUBIC's weights can be negative; Pillow rounds those away
 * from zero too. */
SI_HD static inline int si_rs_weights(int in_size, int out_size, int interp, int xx, int32_t *kk,
                                      int *xmin_out) {
    const float in0 = 0.0f, in1 = (float)in_size;
    double scale = (double)(in1 - in0) / out_size, filterscale = scale;
    if (filterscale < 1.0) filterscale = 1.0;
    double support = si_rs_support(interp) * filterscale;
    double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0, ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) ww += si_rs_filter(interp, (x + xmin - center + 0.5) * ss);
    for (int x = 0; x < xmax; x++) {
        double k = si_rs_filter(interp, (x + xmin - center + 0.5) * ss);
        double v = ww != 0.0 ? k / ww : k;
        kk[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << SI_RS_PREC))
                      : (int32_t)(0.5 + v * (1 << SI_RS_PREC));
    }
    *xmin_out = xmin;
    return xmax;
}

/* Pillow's clip8 (a table lookup of v >> PRECISION_BITS) as a clamp. */
SI_HD static inline uint8_t si_rs_clip8(int32_t v) {
    int32_t t = v >> SI_RS_PREC; /* arithmetic shift, as in Pillow */
    return (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
}

/* One pixel (ox, oy) of the crop of image `it` (src = its first byte) into out[0..3): the
 * horizontal pass of the input rows it reads, each rounded to uint8 as Pillow's intermediate
 * image is, then the vertical pass. The GPU kernel is this function per thread; the host test
 * checks it against the CPU resize. Needs both axes' ksize <= SI_RS_GPU_TAPS. */
SI_HD static inline void si_rs_pixel(const uint8_t *src, const si_rs_item *it, int ox, int oy,
                                     uint8_t *out) {
    int32_t kx[SI_RS_GPU_TAPS], ky[SI_RS_GPU_TAPS];
    int x0, y0;
    int nx = si_rs_weights(it->w, it->rw, it->interp, it->left + ox, kx, &x0);
    int ny = si_rs_weights(it->h, it->rh, it->interp, it->top + oy, ky, &y0);
    int32_t a0 = SI_RS_HALF, a1 = SI_RS_HALF, a2 = SI_RS_HALF;
    for (int ty = 0; ty < ny; ty++) {
        const uint8_t *s = src + ((uint64_t)(y0 + ty) * (uint64_t)it->w + (uint64_t)x0) * 3;
        int32_t h0 = SI_RS_HALF, h1 = SI_RS_HALF, h2 = SI_RS_HALF;
        for (int tx = 0; tx < nx; tx++) {
            h0 += s[3 * tx + 0] * kx[tx];
            h1 += s[3 * tx + 1] * kx[tx];
            h2 += s[3 * tx + 2] * kx[tx];
        }
        a0 += si_rs_clip8(h0) * ky[ty];
        a1 += si_rs_clip8(h1) * ky[ty];
        a2 += si_rs_clip8(h2) * ky[ty];
    }
    out[0] = si_rs_clip8(a0);
    out[1] = si_rs_clip8(a1);
    out[2] = si_rs_clip8(a2);
}

/* The item for an image of w x h resized to `resize` with filter `interp` and center-cropped
 * to crop_h x crop_w (torchvision's arithmetic); off is left 0. False if the crop does not fit. */
SI_HD static inline int si_rs_item_make(int w, int h, int resize, int interp, int crop_h,
                                        int crop_w, si_rs_item *it) {
    int rw, rh;
    si_rs_target_size(w, h, resize, &rw, &rh);
    it->off = 0;
    it->w = w, it->h = h, it->rw = rw, it->rh = rh;
    it->interp = interp;
    if (w <= 0 || h <= 0 || crop_h <= 0 || crop_w <= 0 || crop_h > rh || crop_w > rw) return 0;
    it->top = si_rs_half_round_even(rh - crop_h);
    it->left = si_rs_half_round_even(rw - crop_w);
    return 1;
}

/* Whether the GPU can resize the item (its filters, of its interpolation, are at most
 * SI_RS_GPU_TAPS wide): the rule that sends the others to the CPU resize. */
SI_HD static inline int si_rs_gpu_fits(const si_rs_item *it) {
    return si_rs_ksize(it->w, it->rw, it->interp) <= SI_RS_GPU_TAPS &&
           si_rs_ksize(it->h, it->rh, it->interp) <= SI_RS_GPU_TAPS;
}

#endif
