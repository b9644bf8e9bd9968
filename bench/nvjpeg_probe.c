/* What nvJPEG's hardware decoder gives against libjpeg-turbo, and how fast each of its output
 * formats runs (docs/performance.md, issue 16): for every 4:2:0 or 4:4:4 JPEG named, its Y, Cb
 * and Cr planes against tjDecompressToYUVPlanes', its RGB against tjDecompress2's (default
 * "fancy" chroma upsampling, and TJFLAG_FASTUPSAMPLE), and its planes converted by io/yuv.h
 * against tjDecompress2's; then batches of 256 of the files decoded in each output format, best
 * of 5 after a warm-up. Needs a GPU with hardware JPEG decoders and libnvjpeg.so.13.
 *
 *   nvjpeg_probe FILE.jpg...
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvjpeg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "io/yuv.h"

#define BATCH 256
#define AREA ((size_t)4 << 20) /* device bytes per image in the timing runs */

static struct {
    nvjpegStatus_t (*create)(nvjpegBackend_t, nvjpegDevAllocator_t *, nvjpegPinnedAllocator_t *,
                             unsigned int, nvjpegHandle_t *);
    nvjpegStatus_t (*state_create)(nvjpegHandle_t, nvjpegJpegState_t *);
    nvjpegStatus_t (*init)(nvjpegHandle_t, nvjpegJpegState_t, int, int, nvjpegOutputFormat_t);
    nvjpegStatus_t (*decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *,
                             const size_t *, nvjpegImage_t *, cudaStream_t);
} nv;

typedef struct {
    long n, equal;
    int max;
} tally;

static void count(tally *t, const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        t->n++;
        t->equal += d == 0;
        if (d > t->max) t->max = d;
    }
}

static void report(const char *what, const tally *t) {
    printf("%-52s %11ld values, %8.4f%% equal, max |diff| %d\n", what, t->n,
           100.0 * (double)t->equal / (double)(t->n ? t->n : 1), t->max);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

/* One image through the hardware in format fmt into device planes/pixels at dev. */
static int decode_one(nvjpegHandle_t h, nvjpegJpegState_t st, const uint8_t *jpg, size_t len,
                      nvjpegOutputFormat_t fmt, nvjpegImage_t *img) {
    const unsigned char *data[1] = {jpg};
    int r = (int)nv.init(h, st, 1, 1, fmt);
    if (r == 0) r = (int)nv.decode(h, st, data, &len, img, 0);
    cudaDeviceSynchronize();
    return r;
}

/* One named file: its bytes and header; false (with a message) unless a 4:2:0 or 4:4:4 JPEG
 * whose planes and RGB fit AREA. */
typedef struct {
    uint8_t *jpg;
    size_t len;
    int w, h, ss;
} image;

static bool read_image(tjhandle tj, const char *path, image *im) {
    int cs;
    im->jpg = slurp(path, &im->len);
    if (im->jpg && !tjDecompressHeader3(tj, im->jpg, im->len, &im->w, &im->h, &im->ss, &cs) &&
        (im->ss == TJSAMP_420 || im->ss == TJSAMP_444) && (size_t)im->w * im->h * 6 <= AREA)
        return true;
    fprintf(stderr, "nvjpeg_probe: %s: skipped (not a 4:2:0 or 4:4:4 JPEG that fits)\n", path);
    free(im->jpg);
    im->jpg = NULL;
    return false;
}

static si_yuv_shape shape_of(const image *im) {
    const int sub = im->ss == TJSAMP_420 ? 2 : 1;
    return (si_yuv_shape){im->w, im->h, sub, sub};
}

/* Where an image's output goes in format fmt at base: RGB interleaved or planar, or its Y, Cb,
 * Cr planes packed as io/yuv.h has them. */
static void place(const image *im, nvjpegOutputFormat_t fmt, uint8_t *base, nvjpegImage_t *img) {
    const si_yuv_shape sh = shape_of(im);
    const size_t px = (size_t)im->w * (size_t)im->h, cw = (size_t)si_yuv_cw(&sh);
    memset(img, 0, sizeof *img);
    if (fmt == NVJPEG_OUTPUT_RGBI) {
        img->channel[0] = base, img->pitch[0] = (size_t)im->w * 3;
    } else if (fmt == NVJPEG_OUTPUT_RGB) {
        for (int c = 0; c < 3; c++)
            img->channel[c] = base + px * (size_t)c, img->pitch[c] = (size_t)im->w;
    } else {
        img->channel[0] = base, img->pitch[0] = (size_t)im->w;
        img->channel[1] = base + px, img->pitch[1] = cw;
        img->channel[2] = base + px + cw * (size_t)si_yuv_ch(&sh), img->pitch[2] = cw;
    }
}

typedef struct {
    tally planes, fancy, fast, converted;
} comparison;

/* One image both ways: libjpeg-turbo's planes and RGB (default and fast upsampling) against the
 * hardware's planes, its RGB, and its planes converted by io/yuv.h. */
static bool compare(nvjpegHandle_t h, nvjpegJpegState_t st, tjhandle tj, uint8_t *dev,
                    const image *im, const char *path, comparison *cmp) {
    const si_yuv_shape sh = shape_of(im);
    const int w = im->w, hh = im->h, cw = si_yuv_cw(&sh);
    const size_t px = (size_t)w * (size_t)hh, planes = si_yuv_bytes(&sh);
    const size_t chroma = (size_t)cw * (size_t)si_yuv_ch(&sh);
    /* libjpeg-turbo's luma plane is padded to the sampling: packed to pitch w below */
    const int pw = tjPlaneWidth(0, w, im->ss), ph = tjPlaneHeight(0, hh, im->ss);
    uint8_t *ty = malloc((size_t)pw * (size_t)ph), *tyuv = malloc(planes), *nyuv = malloc(planes);
    uint8_t *tplanes[3] = {ty, tyuv + px, tyuv + px + chroma};
    int strides[3] = {pw, cw, cw};
    uint8_t *rgb_fancy = malloc(px * 3), *rgb_fast = malloc(px * 3), *got = malloc(px * 3);
    bool ok = !tjDecompressToYUVPlanes(tj, im->jpg, im->len, tplanes, w, strides, hh, 0) &&
              !tjDecompress2(tj, im->jpg, im->len, rgb_fancy, w, 0, hh, TJPF_RGB, 0) &&
              !tjDecompress2(tj, im->jpg, im->len, rgb_fast, w, 0, hh, TJPF_RGB,
                             TJFLAG_FASTUPSAMPLE);
    if (!ok) fprintf(stderr, "nvjpeg_probe: %s: libjpeg-turbo: %s\n", path, tjGetErrorStr2(tj));
    nvjpegImage_t img;
    int r1 = 0, r2 = 0;
    if (ok) {
        for (int r = 0; r < hh; r++)
            memcpy(tyuv + (size_t)r * (size_t)w, ty + (size_t)r * (size_t)pw, (size_t)w);
        place(im, NVJPEG_OUTPUT_YUV, dev, &img);
        r1 = decode_one(h, st, im->jpg, im->len, NVJPEG_OUTPUT_YUV, &img);
        cudaMemcpy(nyuv, dev, planes, cudaMemcpyDeviceToHost);
        place(im, NVJPEG_OUTPUT_RGBI, dev, &img);
        r2 = decode_one(h, st, im->jpg, im->len, NVJPEG_OUTPUT_RGBI, &img);
        cudaMemcpy(got, dev, px * 3, cudaMemcpyDeviceToHost);
        if (r1 || r2) fprintf(stderr, "nvjpeg_probe: %s: nvJPEG status %d/%d\n", path, r1, r2);
        ok = !r1 && !r2;
    }
    if (ok) {
        count(&cmp->planes, nyuv, tyuv, planes);
        count(&cmp->fancy, got, rgb_fancy, px * 3);
        count(&cmp->fast, got, rgb_fast, px * 3);
        for (int y = 0; y < hh; y++)
            for (int x = 0; x < w; x++)
                si_yuv_rgb(nyuv, &sh, x, y, got + ((size_t)y * (size_t)w + (size_t)x) * 3);
        count(&cmp->converted, got, rgb_fancy, px * 3);
    }
    free(ty), free(tyuv), free(nyuv), free(rgb_fancy), free(rgb_fast), free(got);
    return ok;
}

/* Batches of BATCH of the images (cycled) through each output format, best of 5 after a
 * warm-up. */
static void time_formats(nvjpegHandle_t h, nvjpegJpegState_t st, uint8_t *dev, const image *ims,
                         int n) {
    static const struct {
        const char *name;
        nvjpegOutputFormat_t fmt;
    } formats[] = {{"RGBI", NVJPEG_OUTPUT_RGBI}, {"RGB (planar)", NVJPEG_OUTPUT_RGB},
                   {"YUV", NVJPEG_OUTPUT_YUV}, {"UNCHANGED", NVJPEG_OUTPUT_UNCHANGED},
                   {"Y", NVJPEG_OUTPUT_Y}};
    const unsigned char **data = calloc(BATCH, sizeof *data);
    size_t *lens = calloc(BATCH, sizeof *lens);
    nvjpegImage_t *imgs = calloc(BATCH, sizeof *imgs);
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        for (int i = 0; i < BATCH; i++) {
            const image *im = &ims[i % n];
            data[i] = im->jpg, lens[i] = im->len;
            place(im, formats[k].fmt, dev + AREA * (size_t)i, &imgs[i]);
        }
        double best = 1e30;
        int r = 0;
        for (int rep = 0; rep < 6 && r == 0; rep++) {
            double t = now();
            r = (int)nv.init(h, st, BATCH, 1, formats[k].fmt);
            if (r == 0) r = (int)nv.decode(h, st, data, lens, imgs, 0);
            cudaDeviceSynchronize();
            if (rep > 0 && now() - t < best) best = now() - t;
        }
        if (r)
            printf("%-14s nvJPEG status %d\n", formats[k].name, r);
        else
            printf("%-14s %6.1f ms a batch of %d, %6.0f images/s\n", formats[k].name, best * 1e3,
                   BATCH, BATCH / best);
    }
    free(data), free(lens), free(imgs);
}

/* A handle and a state on the hardware backend, from libnvjpeg.so.13 loaded here. */
static bool open_nvjpeg(nvjpegHandle_t *h, nvjpegJpegState_t *st) {
    void *lib = dlopen("libnvjpeg.so.13", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "nvjpeg_probe: %s\n", dlerror());
        return false;
    }
    *(void **)&nv.create = dlsym(lib, "nvjpegCreateEx");
    *(void **)&nv.state_create = dlsym(lib, "nvjpegJpegStateCreate");
    *(void **)&nv.init = dlsym(lib, "nvjpegDecodeBatchedInitialize");
    *(void **)&nv.decode = dlsym(lib, "nvjpegDecodeBatched");
    if (!nv.create || nv.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, h) != 0 ||
        nv.state_create(*h, st) != 0) {
        fprintf(stderr, "nvjpeg_probe: no hardware JPEG decoder here\n");
        return false;
    }
    return true;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: nvjpeg_probe FILE.jpg...\n");
        return 2;
    }
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    uint8_t *dev;
    if (!open_nvjpeg(&h, &st) || cudaMalloc((void **)&dev, AREA * BATCH) != cudaSuccess) return 1;
    tjhandle tj = tjInitDecompress();
    image *ims = calloc((size_t)argc, sizeof *ims);
    comparison cmp;
    memset(&cmp, 0, sizeof cmp);
    int n = 0;
    for (int a = 1; a < argc; a++) {
        if (!read_image(tj, argv[a], &ims[n])) continue;
        if (!compare(h, st, tj, dev, &ims[n], argv[a], &cmp)) return 1;
        n++;
    }
    printf("%d images compared\n", n);
    report("hardware Y/Cb/Cr planes vs libjpeg-turbo's", &cmp.planes);
    report("hardware RGB vs libjpeg-turbo RGB (fancy upsampling)", &cmp.fancy);
    report("hardware RGB vs libjpeg-turbo RGB (fast upsampling)", &cmp.fast);
    report("hardware planes + io/yuv.h vs libjpeg-turbo RGB", &cmp.converted);
    if (n == 0) return 1;
    time_formats(h, st, dev, ims, n);
    return 0;
}
