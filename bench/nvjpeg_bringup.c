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

/* The GPU's context, the hardware handle and `states` decode states into st, made from
 * `threads` threads at once; each step timed and printed. */
static nvjpegHandle_t bring_up(int dev, unsigned flags, int states, int threads,
                               nvjpegJpegState_t *st) {
    const double c0 = wall();
    if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess) die("GPU context", 0);
    const double c1 = wall();
    nvjpegHandle_t hw;
    int r = (int)nv.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, flags, &hw);
    if (r) die("nvjpegCreateEx (hardware)", r);
    const double c2 = wall();
    double *took = calloc((size_t)states, sizeof *took), *at = calloc((size_t)states, sizeof *at);
    maker *mk = calloc((size_t)threads, sizeof *mk);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    for (int t = 0; t < threads; t++) {
        const int first = states * t / threads;
        mk[t] = (maker){hw, st, first, states * (t + 1) / threads - first, took, at};
        pthread_create(&th[t], NULL, make, &mk[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    const double c3 = wall();
    printf("device %d: started %.3f; context %.3f s (up at %.3f); handle %.3f s (at %.3f); "
           "%d states from %d threads %.3f s (done at %.3f)\n",
           dev, c0, c1 - c0, c1, c2 - c1, c2, states, threads, c3 - c2, c3);
    for (int i = 0; i < states; i++)
        printf("  state %d: %.3f s, made at %.3f\n", i, took[i], at[i]);
    free(took), free(at), free(mk), free(th);
    return hw;
}

/* The named files, their bytes page-locked as a run holds them; rgb: each one's RGB bytes, per
 * the largest of them (an output's place in a batch). */
typedef struct {
    int n;
    uint8_t **jpg;
    size_t *len, *rgb, per;
    int *w;
} files;

static files load(nvjpegHandle_t hw, char **paths, int n) {
    files fs = {n,
                calloc((size_t)n, sizeof *fs.jpg),
                calloc((size_t)n, sizeof *fs.len),
                calloc((size_t)n, sizeof *fs.rgb),
                0,
                calloc((size_t)n, sizeof *fs.w)};
    for (int f = 0; f < n; f++) {
        FILE *fp = fopen(paths[f], "rb");
        if (!fp) die(paths[f], 0);
        fseek(fp, 0, SEEK_END);
        fs.len[f] = (size_t)ftell(fp);
        fseek(fp, 0, SEEK_SET);
        if (cudaHostAlloc((void **)&fs.jpg[f], fs.len[f], 0) != cudaSuccess)
            die("cudaHostAlloc", 0);
        if (fread(fs.jpg[f], 1, fs.len[f], fp) != fs.len[f]) die(paths[f], 0);
        fclose(fp);
        int nc, ww[NVJPEG_MAX_COMPONENT], hh[NVJPEG_MAX_COMPONENT], r;
        nvjpegChromaSubsampling_t ss;
        if ((r = (int)nv.info(hw, fs.jpg[f], fs.len[f], &nc, &ss, ww, hh)))
            die("nvjpegGetImageInfo", r);
        fs.w[f] = ww[0];
        fs.rgb[f] = (size_t)ww[0] * (size_t)hh[0] * 3;
        if (fs.rgb[f] > fs.per) fs.per = fs.rgb[f];
    }
    return fs;
}

/* What the decode runs share: the handle and states, the files, four batches' arguments and
 * outputs, the stream, and the reference pixels of batches 0-2. */
typedef struct {
    nvjpegHandle_t hw;
    nvjpegJpegState_t *st;
    const files *fs;
    batch bt[4];
    uint8_t *out[4], *ref;
    cudaStream_t s;
} bench;

/* Batch b into bt: the files in a rotation of b, each image's RGB at its place in out[k]. */
static void fill(bench *B, int k, int b) {
    const files *fs = B->fs;
    batch *bt = &B->bt[k];
    for (int i = 0; i < BATCH; i++) {
        int f = (i + 7 * b) % fs->n;
        bt->data[i] = fs->jpg[f];
        bt->lens[i] = fs->len[f];
        memset(&bt->imgs[i], 0, sizeof bt->imgs[i]);
        bt->imgs[i].channel[0] = B->out[k] + (size_t)i * fs->per;
        bt->imgs[i].pitch[0] = (size_t)fs->w[f] * 3;
    }
}

/* Batch arguments k queued on state st. */
static void run(bench *B, nvjpegJpegState_t st, int k) {
    batch *bt = &B->bt[k];
    int r = (int)nv.init(B->hw, st, BATCH, 1, NVJPEG_OUTPUT_RGBI);
    if (!r) r = (int)nv.decode(B->hw, st, bt->data, bt->lens, bt->imgs, B->s);
    if (r) die("nvjpegDecodeBatched", r);
}

/* The reference: batches 0-2, each decoded with the call synchronized after it. */
static void make_reference(bench *B) {
    const size_t size = B->fs->per * BATCH;
    B->ref = malloc(size * 3);
    for (int b = 0; b < 3; b++) {
        fill(B, 0, b);
        run(B, B->st[0], 0);
        cudaStreamSynchronize(B->s);
        cudaMemcpy(B->ref + size * b, B->out[0], size, cudaMemcpyDeviceToHost);
    }
}

/* Batches 0-2 queued back to back on ns states in turn, then one synchronize, 10 times: how
 * many images' pixels differ from the reference. */
static long differ_reused(bench *B, int ns) {
    const files *fs = B->fs;
    const size_t size = fs->per * BATCH;
    uint8_t *got = malloc(size);
    long differ = 0;
    for (int round = 0; round < 10; round++) {
        for (int k = 0; k < 3; k++) cudaMemset(B->out[k], 0, size);
        cudaDeviceSynchronize();
        for (int b = 0; b < 3; b++) {
            fill(B, b, b);
            run(B, B->st[b % ns], b);
        }
        cudaStreamSynchronize(B->s);
        for (int b = 0; b < 3; b++) {
            cudaMemcpy(got, B->out[b], size, cudaMemcpyDeviceToHost);
            for (int i = 0; i < BATCH; i++) {
                const size_t o = (size_t)i * fs->per;
                differ += memcmp(got + o, B->ref + size * b + o, fs->rgb[(i + 7 * b) % fs->n]) != 0;
            }
        }
    }
    free(got);
    return differ;
}

/* ROUNDS batches queued back to back on ns states in turn, best of 3: images/s, and the calls'
 * host time an image (us) in *call_us. */
static double rate(bench *B, int ns, double *call_us) {
    for (int b = 0; b < 4; b++) fill(B, b, b);
    cudaStreamSynchronize(B->s);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double q0 = wall(), call = 0;
        for (int b = 0; b < ROUNDS; b++) {
            double x = wall();
            run(B, B->st[b % ns], b % 4);
            call += wall() - x;
        }
        cudaStreamSynchronize(B->s);
        double r = BATCH * ROUNDS / (wall() - q0);
        if (r > best) best = r;
        *call_us = 1e6 * call / (BATCH * ROUNDS); /* the last repetition's */
    }
    return best;
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
    const char *why = nvjpeg_calls_load();
    if (why) {
        fprintf(stderr, "nvjpeg_bringup: %s\n", why);
        return 1;
    }
    nvjpegJpegState_t *st = calloc((size_t)states, sizeof *st);
    nvjpegHandle_t hw = bring_up(dev, flags, states, threads, st);
    if (argc - a < 1) return 0;
    const files fs = load(hw, argv + a, argc - a);
    bench *B = calloc(1, sizeof *B);
    *B = (bench){.hw = hw, .st = st, .fs = &fs};
    for (int k = 0; k < 4; k++)
        if (cudaMalloc((void **)&B->out[k], fs.per * BATCH) != cudaSuccess) die("cudaMalloc", 0);
    cudaStreamCreateWithFlags(&B->s, cudaStreamNonBlocking);
    make_reference(B);
    for (int ns = 1; ns <= 3; ns++) {
        const long differ = differ_reused(B, ns);
        double call_us;
        const double best = rate(B, ns, &call_us);
        printf("device %d: %d state%s in turn: %.0f images/s (best of 3), the calls %.1f us an "
               "image; reused in flight: %ld of %d images differ\n",
               dev, ns, ns > 1 ? "s" : "", best, call_us, differ, 10 * 3 * BATCH);
    }
    return 0;
}
