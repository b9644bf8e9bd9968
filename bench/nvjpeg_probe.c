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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: nvjpeg_probe FILE.jpg...\n");
        return 2;
    }
    void *lib = dlopen("libnvjpeg.so.13", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "nvjpeg_probe: %s\n", dlerror());
        return 1;
    }
    *(void **)&nv.create = dlsym(lib, "nvjpegCreateEx");
    *(void **)&nv.state_create = dlsym(lib, "nvjpegJpegStateCreate");
    *(void **)&nv.init = dlsym(lib, "nvjpegDecodeBatchedInitialize");
    *(void **)&nv.decode = dlsym(lib, "nvjpegDecodeBatched");
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    if (!nv.create || nv.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &h) != 0 ||
        nv.state_create(h, &st) != 0) {
        fprintf(stderr, "nvjpeg_probe: no hardware JPEG decoder here\n");
        return 1;
    }
    tjhandle tj = tjInitDecompress();
    uint8_t *dev;
    if (cudaMalloc((void **)&dev, AREA * BATCH) != cudaSuccess) return 1;
    tally planes = {0}, fancy = {0}, fast = {0}, converted = {0};
    int files = 0, nf = argc - 1;
    uint8_t **jpg = calloc((size_t)nf, sizeof *jpg);
    size_t *len = calloc((size_t)nf, sizeof *len);
    int *W = calloc((size_t)nf, sizeof *W), *H = calloc((size_t)nf, sizeof *H),
        *SS = calloc((size_t)nf, sizeof *SS);
    for (int f = 0; f < nf; f++) {
        int cs;
        jpg[f] = slurp(argv[1 + f], &len[f]);
        if (!jpg[f] || tjDecompressHeader3(tj, jpg[f], len[f], &W[f], &H[f], &SS[f], &cs) ||
            (SS[f] != TJSAMP_420 && SS[f] != TJSAMP_444) || (size_t)W[f] * H[f] * 6 > AREA) {
            fprintf(stderr, "nvjpeg_probe: %s: skipped (not a 4:2:0 or 4:4:4 JPEG that fits)\n",
                    argv[1 + f]);
            SS[f] = -1;
            continue;
        }
        const int w = W[f], hh = H[f], sub = SS[f] == TJSAMP_420 ? 2 : 1;
        const si_yuv_shape sh = {w, hh, sub, sub};
        const int cw = si_yuv_cw(&sh), ch = si_yuv_ch(&sh);
        const size_t px = (size_t)w * (size_t)hh, chroma = (size_t)cw * (size_t)ch;
        /* libjpeg-turbo: planes (its luma plane padded to the sampling), RGB both ways */
        const int pw = tjPlaneWidth(0, w, SS[f]), ph = tjPlaneHeight(0, hh, SS[f]);
        uint8_t *ty = malloc((size_t)pw * (size_t)ph), *tyuv = malloc(si_yuv_bytes(&sh));
        uint8_t *tplanes[3] = {ty, tyuv + px, tyuv + px + chroma};
        int strides[3] = {pw, cw, cw};
        uint8_t *rgb_fancy = malloc(px * 3), *rgb_fast = malloc(px * 3), *got = malloc(px * 3);
        uint8_t *nyuv = malloc(si_yuv_bytes(&sh));
        if (tjDecompressToYUVPlanes(tj, jpg[f], len[f], tplanes, w, strides, hh, 0) ||
            tjDecompress2(tj, jpg[f], len[f], rgb_fancy, w, 0, hh, TJPF_RGB, 0) ||
            tjDecompress2(tj, jpg[f], len[f], rgb_fast, w, 0, hh, TJPF_RGB, TJFLAG_FASTUPSAMPLE)) {
            fprintf(stderr, "nvjpeg_probe: %s: libjpeg-turbo: %s\n", argv[1 + f],
                    tjGetErrorStr2(tj));
            return 1;
        }
        for (int r = 0; r < hh; r++)
            memcpy(tyuv + (size_t)r * (size_t)w, ty + (size_t)r * (size_t)pw, (size_t)w);
        /* the hardware: planes, then RGB */
        nvjpegImage_t img;
        memset(&img, 0, sizeof img);
        img.channel[0] = dev, img.pitch[0] = (size_t)w;
        img.channel[1] = dev + px, img.pitch[1] = (size_t)cw;
        img.channel[2] = dev + px + chroma, img.pitch[2] = (size_t)cw;
        int r1 = decode_one(h, st, jpg[f], len[f], NVJPEG_OUTPUT_YUV, &img);
        cudaMemcpy(nyuv, dev, si_yuv_bytes(&sh), cudaMemcpyDeviceToHost);
        memset(&img, 0, sizeof img);
        img.channel[0] = dev, img.pitch[0] = (size_t)w * 3;
        int r2 = decode_one(h, st, jpg[f], len[f], NVJPEG_OUTPUT_RGBI, &img);
        cudaMemcpy(got, dev, px * 3, cudaMemcpyDeviceToHost);
        if (r1 || r2) {
            fprintf(stderr, "nvjpeg_probe: %s: nvJPEG status %d/%d\n", argv[1 + f], r1, r2);
            return 1;
        }
        count(&planes, nyuv, tyuv, si_yuv_bytes(&sh));
        count(&fancy, got, rgb_fancy, px * 3);
        count(&fast, got, rgb_fast, px * 3);
        for (int y = 0; y < hh; y++)
            for (int x = 0; x < w; x++) si_yuv_rgb(nyuv, &sh, x, y, got + ((size_t)y * w + x) * 3);
        count(&converted, got, rgb_fancy, px * 3);
        free(ty), free(tyuv), free(rgb_fancy), free(rgb_fast), free(got), free(nyuv);
        files++;
    }
    printf("%d images compared\n", files);
    report("hardware Y/Cb/Cr planes vs libjpeg-turbo's", &planes);
    report("hardware RGB vs libjpeg-turbo RGB (fancy upsampling)", &fancy);
    report("hardware RGB vs libjpeg-turbo RGB (fast upsampling)", &fast);
    report("hardware planes + io/yuv.h vs libjpeg-turbo RGB", &converted);
    if (!files) return 1;

    /* timing: batches of BATCH of the files, each output format */
    const unsigned char **data = calloc(BATCH, sizeof *data);
    size_t *lens = calloc(BATCH, sizeof *lens);
    int *pick = calloc(BATCH, sizeof *pick);
    for (int i = 0, f = 0; i < BATCH; f = (f + 1) % nf) {
        if (SS[f] < 0) continue;
        pick[i] = f, data[i] = jpg[f], lens[i] = len[f];
        i++;
    }
    static const struct {
        const char *name;
        nvjpegOutputFormat_t fmt;
    } formats[] = {{"RGBI", NVJPEG_OUTPUT_RGBI}, {"RGB (planar)", NVJPEG_OUTPUT_RGB},
                   {"YUV", NVJPEG_OUTPUT_YUV}, {"UNCHANGED", NVJPEG_OUTPUT_UNCHANGED},
                   {"Y", NVJPEG_OUTPUT_Y}};
    nvjpegImage_t *imgs = calloc(BATCH, sizeof *imgs);
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        for (int i = 0; i < BATCH; i++) {
            const int f = pick[i], w = W[f], hh = H[f], sub = SS[f] == TJSAMP_420 ? 2 : 1;
            const si_yuv_shape sh = {w, hh, sub, sub};
            const size_t px = (size_t)w * (size_t)hh, cw = (size_t)si_yuv_cw(&sh);
            uint8_t *base = dev + AREA * (size_t)i;
            memset(&imgs[i], 0, sizeof imgs[i]);
            if (formats[k].fmt == NVJPEG_OUTPUT_RGBI) {
                imgs[i].channel[0] = base, imgs[i].pitch[0] = (size_t)w * 3;
            } else if (formats[k].fmt == NVJPEG_OUTPUT_RGB) {
                for (int c = 0; c < 3; c++)
                    imgs[i].channel[c] = base + px * (size_t)c, imgs[i].pitch[c] = (size_t)w;
            } else {
                imgs[i].channel[0] = base, imgs[i].pitch[0] = (size_t)w;
                imgs[i].channel[1] = base + px, imgs[i].pitch[1] = cw;
                imgs[i].channel[2] = base + px + cw * (size_t)si_yuv_ch(&sh);
                imgs[i].pitch[2] = cw;
            }
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
    return 0;
}
