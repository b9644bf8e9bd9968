/* JPEG decoding and the CPU preprocessing of one image: TurboJPEG decode to RGB, antialiased
 * resize of the shorter side (Pillow's BILINEAR resampling, which torchvision's Resize uses by
 * default, or its BICUBIC), center crop (torchvision's rounding), then normalisation to float CHW.
 * A si_decoder belongs to one thread; its scratch grows to the largest image seen and is reused. */
#ifndef SI_JPEG_H
#define SI_JPEG_H

#include "base/common.h"
#include "io/resample.h"

/* The names si_interp_parse accepts, for usage messages. */
#define SI_INTERP_CHOICES "bilinear or bicubic"

/* The largest side libjpeg-turbo decodes (its JPEG_MAX_DIMENSION); a JPEG declaring more gets
 * SI_IMG_TOO_LARGE whatever max_pixels says. */
#define SI_JPEG_MAX_SIDE 65500

typedef struct {
    int resize;          /* shorter side after resize, in pixels; >= crop */
    si_interp interp;    /* the resize's filter; 0 = SI_INTERP_BILINEAR */
    int crop_h, crop_w;  /* center crop = model input size */
    uint64_t max_pixels; /* header width*height above this -> SI_IMG_TOO_LARGE (0: no cap) */
    bool exact;          /* no DCT-domain scaling: bit-exact with Pillow + torchvision */
    bool no_exif;        /* ignore the EXIF orientation (default: apply it) */
} si_preproc;

typedef struct si_decoder si_decoder;

si_decoder *si_decoder_create(void);
void si_decoder_destroy(si_decoder *d); /* accepts NULL */

/* Decodes len bytes and writes the crop as uint8 RGB, HWC, crop_h*crop_w*3 bytes, into dst.
 * Unless p->exact, the JPEG is decoded at the smallest of the scales 1/2, 1/4, 1/8 whose shorter
 * side is still >= p->resize (DCT-domain scaling: fewer pixels to decode and to resize; the
 * other M/8 scales have no SIMD IDCT in libjpeg-turbo and are slower than a full decode, see
 * pick_scale in jpeg.c). Images under twice the resize target are decoded at full size. Unless
 * p->no_exif, the EXIF orientation is applied before resizing.
 * Returns SI_IMG_OK or the image's failure status; on failure msg (cap bytes) says why and dst
 * is left untouched. Never aborts on bad input. */
si_image_status si_decode_crop(si_decoder *d, const uint8_t *data, size_t len, const si_preproc *p,
                               uint8_t *dst, char *msg, size_t cap);

/* The first half of si_decode_crop: the decode at the DCT scale it picks, with the orientation
 * applied, for a resize elsewhere (the GPU's, cuda/resize.cu). *img points into the decoder's
 * scratch and stays valid until the decoder's next call; *w x *h is its size. The same statuses
 * and messages as si_decode_crop, which resizes exactly this image. */
si_image_status si_decode_scaled(si_decoder *d, const uint8_t *data, size_t len,
                                 const si_preproc *p, const uint8_t **img, int *w, int *h,
                                 char *msg, size_t cap);

/* An image's way through --decode gpu, from its headers alone (io/jpeg_scan.h): its stored size,
 * cpu_reason == NULL when the GPU's hardware decoder can take it (baseline, one scan, YCbCr or
 * gray, a supported sampling, EXIF orientation 1, markers well formed through EOI), and
 * exact_reason == NULL when, moreover, its planes converted by io/yuv.h give si_decode_scaled's
 * pixels (YCbCr 4:4:4, 4:2:2 or 4:2:0 that libjpeg upsamples with its fancy filters, decoded at
 * full size). */
typedef struct {
    int full_w, full_h;       /* the stored size, the hardware decoder's output */
    int hs, vs;               /* chroma subsampling (io/yuv.h), where exact_reason is NULL */
    const char *exact_reason; /* why --decode gpu-exact leaves it to libjpeg-turbo (NULL: the
                                 hardware's planes converted by io/yuv.h give its pixels) */
    const char *cpu_reason;   /* why libjpeg-turbo decodes it instead (a static string) */
} si_gpu_plan;

/* The header checks of si_decode_scaled (the same statuses and messages for what fails them),
 * then the plan for the GPU decode. SI_IMG_OK leaves *plan filled; an image with a cpu_reason is
 * then decoded with si_decode_scaled, which gives a malformed one its status. */
si_image_status si_decode_plan_gpu(si_decoder *d, const uint8_t *data, size_t len,
                                   const si_preproc *p, si_gpu_plan *plan, char *msg, size_t cap);

/* "bilinear" or "bicubic" (Pillow's names, lower case) to *out; false for anything else. */
bool si_interp_parse(const char *s, si_interp *out);

/* The name si_interp_parse takes for i (a static string). */
const char *si_interp_name(si_interp i);

/* Resize (shorter side to `resize`, Pillow's p->interp with antialiasing) and center crop of an RGB
 * HWC uint8 image into dst (crop_h*crop_w*3); computes only the rows and columns the crop keeps.
 * Allocates its own scratch (the decoder path reuses the decoder's); exposed for tests. */
si_status si_resize_crop(const uint8_t *src, int w, int h, const si_preproc *p, uint8_t *dst);

/* si_resize_crop with the decoder's reusable scratch (no allocation once warm). */
si_status si_decoder_resize_crop(si_decoder *d, const uint8_t *src, int w, int h,
                                 const si_preproc *p, uint8_t *dst);

/* (H, W, 3) uint8 -> (3, H, W) float: (x/255 - mean[c]) / std[c]. */
void si_normalize_chw(const uint8_t *src, int h, int w, const float mean[3], const float std[3],
                      float *dst);

#endif
