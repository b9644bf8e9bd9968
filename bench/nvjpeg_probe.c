/* What nvJPEG's hardware decoder gives against libjpeg-turbo, and how fast each of its output
 * formats runs (docs/performance.md, issue 16): for every 4:2:0 or 4:4:4 JPEG named, its Y, Cb
 * and Cr planes against tjDecompressToYUVPlanes', its RGB against tjDecompress2's (default
 * "fancy" chroma upsampling, and TJFLAG_FASTUPSAMPLE), and its planes converted by io/yuv.h
 * against tjDecompress2's; then batches of 256 of the files decoded in each output format, best
 * of 5 after a warm-up; then RGB batches on three streams (the legacy default one, a stream
 * of the lowest priority and one of the highest), with the time the call takes to return beside
 * the time to the batch's end, and the calls made as `shardinfer run` makes them (page-locked
 * bitstreams, a state per slot, packed outputs): run it beside a GPU that computes something else
 * to see what the decoder's call waits for. With --load, the stream timings run again while a
 * thread of this process keeps the SMs busy with FP16 GEMMs (cuBLAS, 8192^3, a stream of the lowest
 * priority), as a model does beside the decoder in `shardinfer run --decode gpu`; each --green
 * SMS runs them once more with the GEMMs confined to a green context of SMS SMs (the decoder
 * keeps the rest), each --sm-target SMS with cuBLAS asked to take SMS SMs in the same context
 * (the rest left free, but to any kernel). Needs a GPU with hardware JPEG decoders and
 * libnvjpeg.so.13.
 *
 * With --backends, instead: nvJPEG's other backends from several host threads at once, each thread
 * with its own decode state, stream, page-locked bitstreams and packed RGB outputs, as a run would
 * hold them per decoding thread: GPU_HYBRID (Huffman on the calling thread's CPU, the rest on the
 * GPU) and GPU_HYBRID_DEVICE (Huffman on the GPU too, for batches of more than 50) at 1-15
 * threads, then the hardware backend from one thread beside GPU_HYBRID ones (what the CPU's share
 * of a batch could use instead of libjpeg-turbo); with --load all of it again beside the GEMMs.
 * GPU_HYBRID's planes and RGB are compared with libjpeg-turbo's first, as the hardware's are.
 * NVJPEG_PROBE_YUV=1: every thread decodes to planes instead of RGB; NVJPEG_PROBE_QUICK=1: only
 * GPU_HYBRID at 4 threads (to trace what its calls wait for, e.g. under nsys).
 *
 *   nvjpeg_probe [--load [--green SMS]... [--sm-target SMS]...] FILE.jpg...
 *   nvjpeg_probe --backends [--load] FILE.jpg...
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "io/yuv.h"
#include "nvjpeg_calls.h"

#define AREA ((size_t)4 << 20) /* device bytes per image in the timing runs */

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
    bool ok =
        !tjDecompressToYUVPlanes(tj, im->jpg, im->len, tplanes, w, strides, hh, 0) &&
        !tjDecompress2(tj, im->jpg, im->len, rgb_fancy, w, 0, hh, TJPF_RGB, 0) &&
        !tjDecompress2(tj, im->jpg, im->len, rgb_fast, w, 0, hh, TJPF_RGB, TJFLAG_FASTUPSAMPLE);
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

/* One batched call's arguments (nvjpeg_calls.h): BATCH of the images (cycled), each with its
 * output at dev + AREA * i, or (packed) back to back with 256-byte alignment; the bitstreams where
 * they are, or copied back to back into the page-locked `pin`. */

static void batch_fill(batch *b, const image *ims, int n, nvjpegOutputFormat_t fmt, uint8_t *dev,
                       uint8_t *pin, bool packed) {
    size_t at = 0, out = 0;
    for (int i = 0; i < BATCH; i++) {
        const image *im = &ims[i % n];
        b->data[i] = im->jpg, b->lens[i] = im->len;
        if (pin) memcpy(pin + at, im->jpg, im->len), b->data[i] = pin + at;
        at += im->len;
        place(im, fmt, dev + (packed ? out : AREA * (size_t)i), &b->imgs[i]);
        out += ((size_t)im->w * (size_t)im->h * 3 + 255) / 256 * 256;
    }
}

/* The batch decoded on stream s with state st; nvJPEG's status. */
static int batch_decode(nvjpegHandle_t h, nvjpegJpegState_t st, batch *b, nvjpegOutputFormat_t fmt,
                        cudaStream_t s) {
    int r = (int)nv.init(h, st, BATCH, 1, fmt);
    return r ? r : (int)nv.decode(h, st, b->data, b->lens, b->imgs, s);
}

/* Batches of BATCH of the images (cycled) through each output format, best of 5 after a
 * warm-up. */
static void time_formats(nvjpegHandle_t h, nvjpegJpegState_t st, uint8_t *dev, const image *ims,
                         int n) {
    static const struct {
        const char *name;
        nvjpegOutputFormat_t fmt;
    } formats[] = {{"RGBI", NVJPEG_OUTPUT_RGBI},
                   {"RGB (planar)", NVJPEG_OUTPUT_RGB},
                   {"YUV", NVJPEG_OUTPUT_YUV},
                   {"UNCHANGED", NVJPEG_OUTPUT_UNCHANGED},
                   {"Y", NVJPEG_OUTPUT_Y}};
    batch *b = malloc(sizeof *b);
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        batch_fill(b, ims, n, formats[k].fmt, dev, NULL, false);
        double best = 1e30;
        int r = 0;
        for (int rep = 0; rep < 6 && r == 0; rep++) {
            double t = now();
            r = batch_decode(h, st, b, formats[k].fmt, 0);
            cudaDeviceSynchronize();
            if (rep > 0 && now() - t < best) best = now() - t;
        }
        if (r)
            printf("%-14s nvJPEG status %d\n", formats[k].name, r);
        else
            printf("%-14s %6.1f ms a batch of %d, %6.0f images/s\n", formats[k].name, best * 1e3,
                   BATCH, BATCH / best);
    }
    free(b);
}

/* The median of x[0..n) (sorts x). */
static double median(double *x, int n) {
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && x[b] < x[b - 1]; b--) {
            double t = x[b];
            x[b] = x[b - 1], x[b - 1] = t;
        }
    return x[n / 2];
}

/* RGB batches on the legacy default stream and on created streams of the lowest and highest
 * priority: the call's own time (host) and the time to the batch's end, medians of 9 after a
 * warm-up. */
static void time_streams(nvjpegHandle_t h, nvjpegJpegState_t st, uint8_t *dev, const image *ims,
                         int n) {
    int least = 0, greatest = 0;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    cudaStream_t lo, hi;
    cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, least);
    cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest);
    const struct {
        const char *name;
        cudaStream_t s;
    } streams[] = {{"default stream", 0}, {"lowest priority", lo}, {"highest priority", hi}};
    batch *b = malloc(sizeof *b);
    batch_fill(b, ims, n, NVJPEG_OUTPUT_RGBI, dev, NULL, false);
    enum { REPS = 9 };
    for (size_t k = 0; k < sizeof streams / sizeof streams[0]; k++) {
        double call[REPS], all[REPS];
        int r = 0;
        for (int rep = -1; rep < REPS && r == 0; rep++) {
            double t = now();
            r = batch_decode(h, st, b, NVJPEG_OUTPUT_RGBI, streams[k].s);
            double t1 = now();
            cudaStreamSynchronize(streams[k].s);
            if (rep >= 0) call[rep] = t1 - t, all[rep] = now() - t;
        }
        if (r) {
            printf("RGBI, %-16s nvJPEG status %d\n", streams[k].name, r);
            continue;
        }
        const double c = median(call, REPS), a = median(all, REPS);
        printf("RGBI, %-16s call %6.1f ms, batch done %6.1f ms (median of %d), %6.0f images/s\n",
               streams[k].name, c * 1e3, a * 1e3, REPS, BATCH / a);
    }
    cudaStreamDestroy(lo), cudaStreamDestroy(hi);
    free(b);
}

typedef struct {
    atomic_bool on;
    int sms;    /* > 0: the GEMMs in a green context of (about) this many SMs */
    int target; /* > 0: cuBLAS asked to use this many SMs (cublasSetSmCountTarget), no context */
} load_arg;

/* A green context of at least `sms` of the device's SMs made current to this thread, and a
 * stream in it at *s; false if the driver cannot. */
static bool green_current(int sms, cudaStream_t *s) {
    CUdevice dev;
    CUdevResource all, part, rest;
    CUdevResourceDesc desc;
    CUgreenCtx g;
    CUcontext c;
    unsigned groups = 1;
    if (cuDeviceGet(&dev, 0) || cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM) ||
        cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0, (unsigned)sms) ||
        cuDevResourceGenerateDesc(&desc, &part, 1) ||
        cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) || cuCtxFromGreenCtx(&c, g) ||
        cuCtxSetCurrent(c) || cuGreenCtxStreamCreate((CUstream *)s, g, CU_STREAM_NON_BLOCKING, 0))
        return false;
    printf("load: a green context of %u of the %u SMs\n", part.sm.smCount, all.sm.smCount);
    return true;
}

/* RGB batches the way `shardinfer run --decode gpu` makes them, one difference from the timings
 * above at a time, then all: the bitstreams back to back in page-locked memory, three decode
 * states in turn (one per slot), the outputs back to back (256-byte aligned). Medians of 9. */
static void time_like_run(nvjpegHandle_t h, nvjpegJpegState_t st0, uint8_t *dev, const image *ims,
                          int n) {
    nvjpegJpegState_t st[3] = {st0, NULL, NULL};
    for (int k = 1; k < 3; k++)
        if (nv.state_create(h, &st[k]) != 0) return;
    size_t bytes = 0;
    for (int i = 0; i < BATCH; i++) bytes += ims[i % n].len;
    uint8_t *pin;
    if (cudaHostAlloc((void **)&pin, bytes, cudaHostAllocDefault) != cudaSuccess) return;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    batch *b = malloc(sizeof *b);
    static const char *names[] = {"as above", "page-locked bitstreams", "3 states in turn",
                                  "packed outputs", "all three (as a run)"};
    for (int c = 0; c < 5; c++) {
        const bool pinned = c == 1 || c == 4, states = c == 2 || c == 4, packed = c == 3 || c == 4;
        batch_fill(b, ims, n, NVJPEG_OUTPUT_RGBI, dev, pinned ? pin : NULL, packed);
        enum { REPS = 9 };
        double all[REPS];
        int r = 0;
        for (int rep = -3; rep < REPS && r == 0; rep++) {
            nvjpegJpegState_t cur = st[states ? (rep + 3) % 3 : 0];
            double t = now();
            r = batch_decode(h, cur, b, NVJPEG_OUTPUT_RGBI, s);
            cudaStreamSynchronize(s);
            if (rep >= 0) all[rep] = now() - t;
        }
        if (r) {
            printf("RGBI, %-24s nvJPEG status %d\n", names[c], r);
            continue;
        }
        const double a = median(all, REPS);
        printf("RGBI, %-24s batch done %6.1f ms (median of %d), %6.0f images/s\n", names[c],
               a * 1e3, REPS, BATCH / a);
    }
    cudaStreamDestroy(s), cudaFreeHost(pin);
    free(b);
}

/* The --load thread: FP16 GEMMs of 8192^3 back to back until arg->on turns false, on a stream of
 * the lowest priority (or in a green context: --green); prints how many it ran and their rate. */
static void *gemm_load(void *arg) {
    load_arg *la = arg;
    atomic_bool *on = &la->on;
    const int n = 8192;
    int least = 0, greatest = 0;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    cudaStream_t s;
    if (la->sms > 0) {
        if (!green_current(la->sms, &s)) {
            fprintf(stderr, "nvjpeg_probe: --green: no green context of %d SMs\n", la->sms);
            return NULL;
        }
    } else {
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, least);
    }
    cublasHandle_t cb;
    void *a, *c;
    if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&a, (size_t)n * n * 2) != cudaSuccess ||
        cudaMalloc(&c, (size_t)n * n * 2) != cudaSuccess) {
        fprintf(stderr, "nvjpeg_probe: --load: no cuBLAS or no memory\n");
        return NULL;
    }
    cudaMemset(a, 0, (size_t)n * n * 2);
    cublasSetStream(cb, s);
    if (la->target > 0 && cublasSetSmCountTarget(cb, la->target) == CUBLAS_STATUS_SUCCESS)
        printf("load: cuBLAS's SM count target %d\n", la->target);
    const float one = 1, zero = 0;
    long runs = 0;
    double t = now();
    while (atomic_load(on)) {
        for (int k = 0; k < 4; k++)
            cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, a,
                         CUDA_R_16F, n, &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
        cudaStreamSynchronize(s);
        runs += 4;
    }
    t = now() - t;
    printf("load: %ld GEMMs of 8192^3 in %.1f s, %.0f TFLOP/s\n", runs, t,
           2.0 * n * n * (double)n * (double)runs / t / 1e12);
    cudaFree(a), cudaFree(c), cublasDestroy(cb);
    return NULL;
}

/* --backends: one decoding thread's batches for `seconds` once every thread is ready. */
typedef struct {
    nvjpegHandle_t h;
    const image *ims;
    int n, first; /* the images, cycled from `first` */
    double seconds;
    atomic_int *ready;
    long images;
    double elapsed;
    int status;
} worker;

static void *decode_worker(void *arg) {
    worker *w = arg;
    nvjpegJpegState_t st;
    cudaStream_t s;
    uint8_t *dev = NULL, *pin = NULL;
    image *mine = malloc(sizeof(image) * (size_t)w->n);
    for (int i = 0; i < w->n; i++) mine[i] = w->ims[(w->first + i) % w->n];
    size_t bytes = 0, out = 0;
    for (int i = 0; i < BATCH; i++) {
        const image *im = &mine[i % w->n];
        bytes += im->len, out += ((size_t)im->w * (size_t)im->h * 3 + 255) / 256 * 256;
    }
    batch *b = malloc(sizeof *b);
    w->status = nv.state_create(w->h, &st) != 0 ? -1 : 0;
    if (!w->status && (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
                       cudaMalloc((void **)&dev, out) != cudaSuccess ||
                       cudaHostAlloc((void **)&pin, bytes, cudaHostAllocDefault) != cudaSuccess))
        w->status = -2;
    /* NVJPEG_PROBE_YUV set: the planes, as --decode gpu-exact takes them, instead of RGB */
    const nvjpegOutputFormat_t fmt =
        getenv("NVJPEG_PROBE_YUV") ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_RGBI;
    if (!w->status) {
        batch_fill(b, mine, w->n, fmt, dev, pin, true);
        w->status = batch_decode(w->h, st, b, fmt, s); /* warm-up */
        cudaStreamSynchronize(s);
    }
    atomic_fetch_sub(w->ready, 1);
    while (atomic_load(w->ready) > 0) {
    }
    double t0 = now();
    while (!w->status && now() - t0 < w->seconds) {
        w->status = batch_decode(w->h, st, b, fmt, s);
        cudaStreamSynchronize(s);
        if (!w->status) w->images += BATCH;
    }
    w->elapsed = now() - t0;
    cudaFree(dev), cudaFreeHost(pin), free(b), free(mine);
    return NULL;
}

/* nh threads on handle hw and nt on handle h at once for 2 s; prints their rates. */
static void run_workers(const char *what, nvjpegHandle_t hw, int nh, nvjpegHandle_t h, int nt,
                        const image *ims, int n) {
    enum { MAXT = 32 };
    worker w[MAXT];
    pthread_t th[MAXT];
    int all = nh + nt;
    atomic_int ready = all;
    for (int i = 0; i < all; i++) {
        w[i] = (worker){i < nh ? hw : h, ims, n, (i * 37) % n, 2.0, &ready, 0, 0.0, 0};
        pthread_create(&th[i], NULL, decode_worker, &w[i]);
    }
    double rate[2] = {0, 0};
    int bad = 0;
    for (int i = 0; i < all; i++) {
        pthread_join(th[i], NULL);
        if (w[i].status) bad = w[i].status;
        rate[i >= nh] += w[i].elapsed > 0 ? (double)w[i].images / w[i].elapsed : 0;
    }
    if (bad) {
        printf("%-44s status %d\n", what, bad);
        return;
    }
    if (nh)
        printf("%-44s hardware %6.0f + %2d threads %6.0f (%5.0f each) = %6.0f images/s\n", what,
               rate[0], nt, rate[1], nt ? rate[1] / nt : 0, rate[0] + rate[1]);
    else
        printf("%-44s %2d threads %6.0f images/s (%5.0f each)\n", what, nt, rate[1], rate[1] / nt);
}

static void time_backends(nvjpegHandle_t hw, const image *ims, int n) {
    static const struct {
        const char *name;
        nvjpegBackend_t b;
    } backends[] = {{"GPU_HYBRID", NVJPEG_BACKEND_GPU_HYBRID},
                    {"GPU_HYBRID_DEVICE", NVJPEG_BACKEND_GPU_HYBRID_DEVICE}};
    static const int threads[] = {1, 2, 4, 8, 15};
    /* NVJPEG_PROBE_QUICK set: GPU_HYBRID at 4 threads only (to trace its calls) */
    const bool quick = getenv("NVJPEG_PROBE_QUICK") != NULL;
    nvjpegHandle_t hy = NULL;
    if (quick) {
        if (nv.create(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, 0, &hy) == 0)
            run_workers("GPU_HYBRID", NULL, 0, hy, 4, ims, n);
        return;
    }
    for (size_t k = 0; k < sizeof backends / sizeof backends[0]; k++) {
        nvjpegHandle_t h;
        if (nv.create(backends[k].b, NULL, NULL, 0, &h) != 0) {
            printf("%s: no handle\n", backends[k].name);
            continue;
        }
        if (k == 0) hy = h;
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++)
            run_workers(backends[k].name, NULL, 0, h, threads[t], ims, n);
    }
    run_workers("HARDWARE alone", hw, 1, NULL, 0, ims, n);
    for (size_t t = 0; hy && t < sizeof threads / sizeof threads[0]; t++)
        run_workers("HARDWARE + GPU_HYBRID", hw, 1, hy, threads[t], ims, n);
}

/* A handle and a state on the hardware backend, from libnvjpeg.so.13 loaded here. */
static bool open_nvjpeg(nvjpegHandle_t *h, nvjpegJpegState_t *st) {
    const char *why = nvjpeg_calls_load();
    if (why) {
        fprintf(stderr, "nvjpeg_probe: %s\n", why);
        return false;
    }
    if (nv.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, h) != 0 || nv.state_create(*h, st) != 0) {
        fprintf(stderr, "nvjpeg_probe: no hardware JPEG decoder here\n");
        return false;
    }
    return true;
}

int main(int argc, char **argv) {
    const bool backends = argc > 1 && strcmp(argv[1], "--backends") == 0;
    if (backends) argv++, argc--;
    const bool load = argc > 1 && strcmp(argv[1], "--load") == 0;
    if (load) argv++, argc--;
    /* --green SMS (repeatable): the load again in a green context; --sm-target SMS: again in
     * this context, cuBLAS asked to take that many SMs (the rest free, but to any kernel) */
    load_arg loads[16];
    int n_load = 0;
    while (argc > 2 && (!strcmp(argv[1], "--green") || !strcmp(argv[1], "--sm-target")) &&
           n_load < 16) {
        const bool g = !strcmp(argv[1], "--green");
        loads[n_load++] = (load_arg){true, g ? atoi(argv[2]) : 0, g ? 0 : atoi(argv[2])};
        argv += 2, argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: nvjpeg_probe [--load [--green SMS]... [--sm-target SMS]...] "
                        "FILE.jpg...\n");
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
    for (int a = 1; backends && a < argc; a++) n += read_image(tj, argv[a], &ims[n]);
    nvjpegHandle_t hy;
    nvjpegJpegState_t sy;
    if (backends && n && nv.create(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, 0, &hy) == 0 &&
        nv.state_create(hy, &sy) == 0) { /* the hybrid backend's pixels, as the hardware's below */
        for (int i = 0; i < n; i++)
            if (!compare(hy, sy, tj, dev, &ims[i], "(hybrid)", &cmp)) return 1;
        report("GPU_HYBRID Y/Cb/Cr planes vs libjpeg-turbo's", &cmp.planes);
        report("GPU_HYBRID RGB vs libjpeg-turbo RGB (fancy upsampling)", &cmp.fancy);
        report("GPU_HYBRID RGB vs libjpeg-turbo RGB (fast upsampling)", &cmp.fast);
        report("GPU_HYBRID planes + io/yuv.h vs libjpeg-turbo RGB", &cmp.converted);
    }
    for (int k = -1; backends && n && k < (int)load; k++) {
        load_arg la = {true, 0, 0};
        pthread_t th;
        if (k == 0) {
            pthread_create(&th, NULL, gemm_load, &la);
            struct timespec wait = {1, 0};
            nanosleep(&wait, NULL);
            printf("with GEMMs running beside the decoders in this process:\n");
        }
        time_backends(h, ims, n);
        if (k == 0) atomic_store(&la.on, false), pthread_join(th, NULL);
    }
    if (backends) return n ? 0 : 1;
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
    time_streams(h, st, dev, ims, n);
    time_like_run(h, st, dev, ims, n);
    for (int k = -1; load && k < n_load; k++) {
        load_arg la = k < 0 ? (load_arg){true, 0, 0} : loads[k];
        pthread_t th;
        pthread_create(&th, NULL, gemm_load, &la);
        struct timespec wait = {1, 0};
        nanosleep(&wait, NULL);
        printf("with GEMMs running beside the decoder in this process:\n");
        time_streams(h, st, dev, ims, n);
        atomic_store(&la.on, false);
        pthread_join(th, NULL);
    }
    return 0;
}
