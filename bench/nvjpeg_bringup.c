/* What nvJPEG's hardware decoder costs to bring up, and how many decode states a rank needs
 * (issue 37: with 4 ranks a rank's last state came about 7 s into the run). Prints, with times
 * since BRINGUP_T0 (seconds since the epoch, the same for every process started together, so
 * that processes on several GPUs can be laid side by side): the GPU context, the hardware handle,
 * each of --states decode states (made from --threads threads at once), then the throughput of
 * batches of 256 of the named files queued back to back on one stream with 1, 2 and 3 states in
 * turn, and whether a state reused while its previous batch may still be in flight gives the
 * same pixels as a state per batch (3 batches queued before one synchronize, against each
 * image decoded alone).
 *
 *   BRINGUP_T0=$(date +%s.%N) nvjpeg_bringup [--device D] [--states N] [--threads T]
 *       [--flags F] FILE.jpg...
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvjpeg_calls.h"

#define BATCH  256
#define ROUNDS 30

static double t0;

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec - t0;
}

static void die(const char *what, int r) {
    fprintf(stderr, "nvjpeg_bringup: %s failed (%d)\n", what, r);
    exit(1);
}

typedef struct {
    nvjpegHandle_t h;
    nvjpegJpegState_t *st;
    int first, n;
    double *took, *at;
} maker;

static void *make(void *arg) {
    maker *m = arg;
    for (int i = m->first; i < m->first + m->n; i++) {
        double a = wall();
        int r = (int)nv.state_create(m->h, &m->st[i]);
        if (r) die("nvjpegJpegStateCreate", r);
        m->at[i] = wall();
        m->took[i] = m->at[i] - a;
    }
    return NULL;
}

/* Batch b: the files in a rotation of b, each image's RGB at its place in dev. */
static void fill(batch *bt, int b, uint8_t **jpg, size_t *len, int *w, int *h, int nf, uint8_t *dev,
                 size_t per) {
    for (int i = 0; i < BATCH; i++) {
        int f = (i + 7 * b) % nf;
        bt->data[i] = jpg[f];
        bt->lens[i] = len[f];
        memset(&bt->imgs[i], 0, sizeof bt->imgs[i]);
        bt->imgs[i].channel[0] = dev + (size_t)i * per;
        bt->imgs[i].pitch[0] = (size_t)w[f] * 3;
        (void)h;
    }
}

static int run(nvjpegHandle_t hw, nvjpegJpegState_t st, batch *bt, cudaStream_t s) {
    int r = (int)nv.init(hw, st, BATCH, 1, NVJPEG_OUTPUT_RGBI);
    return r ? r : (int)nv.decode(hw, st, bt->data, bt->lens, bt->imgs, s);
}

int main(int argc, char **argv) {
    int dev = 0, states = 6, threads = 1, a = 1;
    unsigned flags = NVJPEG_FLAGS_DEFAULT;
    for (; a + 1 < argc && argv[a][0] == '-' && argv[a][1] == '-'; a += 2) {
        if (!strcmp(argv[a], "--device"))
            dev = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--states"))
            states = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--threads"))
            threads = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--flags"))
            flags = (unsigned)atoi(argv[a + 1]);
        else
            break;
    }
    const char *e = getenv("BRINGUP_T0");
    t0 = e ? atof(e) : 0;
    if (!e) t0 = wall();
    if (states < 3) states = 3;
    if (threads < 1) threads = 1;
    const double start = wall();
    const char *why = nvjpeg_calls_load();
    if (why) {
        fprintf(stderr, "nvjpeg_bringup: %s\n", why);
        return 1;
    }
    const double c0 = wall();
    if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess) die("GPU context", 0);
    const double c1 = wall();
    nvjpegHandle_t hw;
    int r = (int)nv.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, flags, &hw);
    if (r) die("nvjpegCreateEx (hardware)", r);
    const double c2 = wall();
    nvjpegJpegState_t *st = calloc((size_t)states, sizeof *st);
    double *took = calloc((size_t)states, sizeof *took), *at = calloc((size_t)states, sizeof *at);
    maker *mk = calloc((size_t)threads, sizeof *mk);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    for (int t = 0; t < threads; t++) {
        mk[t] = (maker){
            hw,   st, states * t / threads, states * (t + 1) / threads - states * t / threads,
            took, at};
        pthread_create(&th[t], NULL, make, &mk[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    const double c3 = wall();
    printf("device %d: started %.3f; context %.3f s (up at %.3f); handle %.3f s (at %.3f); "
           "%d states from %d threads %.3f s (done at %.3f)\n",
           dev, start, c1 - c0, c1, c2 - c1, c2, states, threads, c3 - c2, c3);
    for (int i = 0; i < states; i++)
        printf("  state %d: %.3f s, made at %.3f\n", i, took[i], at[i]);

    /* the files: their bytes page-locked, as a run holds them */
    const int nf = argc - a;
    if (nf < 1) return 0;
    uint8_t **jpg = calloc((size_t)nf, sizeof *jpg);
    size_t *len = calloc((size_t)nf, sizeof *len), per = 0;
    int *w = calloc((size_t)nf, sizeof *w), *h = calloc((size_t)nf, sizeof *h);
    for (int f = 0; f < nf; f++) {
        FILE *fp = fopen(argv[a + f], "rb");
        if (!fp) die(argv[a + f], 0);
        fseek(fp, 0, SEEK_END);
        len[f] = (size_t)ftell(fp);
        fseek(fp, 0, SEEK_SET);
        if (cudaHostAlloc((void **)&jpg[f], len[f], 0) != cudaSuccess) die("cudaHostAlloc", 0);
        if (fread(jpg[f], 1, len[f], fp) != len[f]) die(argv[a + f], 0);
        fclose(fp);
        int nc, ww[NVJPEG_MAX_COMPONENT], hh[NVJPEG_MAX_COMPONENT];
        nvjpegChromaSubsampling_t ss;
        if ((r = (int)nv.info(hw, jpg[f], len[f], &nc, &ss, ww, hh))) die("nvjpegGetImageInfo", r);
        w[f] = ww[0], h[f] = hh[0];
        if ((size_t)w[f] * h[f] * 3 > per) per = (size_t)w[f] * h[f] * 3;
    }
    uint8_t *out[4];
    for (int k = 0; k < 4; k++)
        if (cudaMalloc((void **)&out[k], per * BATCH) != cudaSuccess) die("cudaMalloc", 0);
    batch *bt = calloc(4, sizeof *bt);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

    /* reference: batch b's images each decoded with the call synchronized after it */
    uint8_t *ref = malloc(per * BATCH * 3), *got = malloc(per * BATCH);
    for (int b = 0; b < 3; b++) {
        fill(&bt[0], b, jpg, len, w, h, nf, out[0], per);
        if ((r = run(hw, st[0], &bt[0], s))) die("reference decode", r);
        cudaStreamSynchronize(s);
        cudaMemcpy(ref + per * BATCH * b, out[0], per * BATCH, cudaMemcpyDeviceToHost);
    }
    /* 1, 2, 3 states: three batches queued back to back, then one synchronize, 10 times */
    for (int ns = 1; ns <= 3; ns++) {
        long differ = 0;
        for (int round = 0; round < 10; round++) {
            for (int k = 0; k < 3; k++) cudaMemset(out[k], 0, per * BATCH);
            cudaDeviceSynchronize();
            for (int b = 0; b < 3; b++) {
                fill(&bt[b], b, jpg, len, w, h, nf, out[b], per);
                if ((r = run(hw, st[b % ns], &bt[b], s))) die("decode", r);
            }
            cudaStreamSynchronize(s);
            for (int b = 0; b < 3; b++) {
                cudaMemcpy(got, out[b], per * BATCH, cudaMemcpyDeviceToHost);
                for (int i = 0; i < BATCH; i++) {
                    int f = (i + 7 * b) % nf;
                    size_t n = (size_t)w[f] * h[f] * 3, o = (size_t)i * per;
                    differ += memcmp(got + o, ref + per * BATCH * b + o, n) != 0;
                }
            }
        }
        /* throughput: ROUNDS batches queued back to back on ns states in turn */
        for (int b = 0; b < 4; b++) fill(&bt[b], b, jpg, len, w, h, nf, out[b], per);
        cudaStreamSynchronize(s);
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            double q0 = wall(), call = 0;
            for (int b = 0; b < ROUNDS; b++) {
                double x = wall();
                if ((r = run(hw, st[b % ns], &bt[b % 4], s))) die("decode", r);
                call += wall() - x;
            }
            cudaStreamSynchronize(s);
            double rate = BATCH * ROUNDS / (wall() - q0);
            if (rate > best) best = rate;
            if (rep == 2)
                printf("device %d: %d state%s in turn: %.0f images/s (best of 3), the calls %.1f "
                       "us an image; reused in flight: %ld of %d images differ\n",
                       dev, ns, ns > 1 ? "s" : "", best, 1e6 * call / (BATCH * ROUNDS), differ,
                       10 * 3 * BATCH);
        }
    }
    return 0;
}
