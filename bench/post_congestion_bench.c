/* Throughput of the congestion postprocessor (--post congestion, src/post/post.c) on seeded smooth
 * maps: images/s on one thread and on all of them, images in parallel as the pipeline's pool runs
 * them, with one scratch per thread. The parallel run's scores are checked against the serial
 * run's, so a fast wrong answer does not pass as a result.
 *
 *   bench_post_congestion [images [size ...]]      defaults: 512 images, sizes 256 and 512
 * Each figure is the median of 5 runs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "post/post.h"

#define N_MAPS  16 /* distinct maps, cycled: enough that caches do not hold one image's input */
#define REPEATS 5

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float uniform(uint64_t *s) { /* [-1, 1) */
    return (float)(next(s) >> 40) / (float)(1u << 23) - 1.0f;
}

/* A density-like map: a few random sinusoids and blobs plus a little noise. */
static void smooth_map(float *m, int h, int w, uint64_t *seed) {
    float fx[4], fy[4], ph[4], a[4], bx[6], by[6], br[6];
    for (int k = 0; k < 4; k++) {
        fx[k] = (0.5f + 4.f * fabsf(uniform(seed))) * 6.2832f / (float)w;
        fy[k] = (0.5f + 4.f * fabsf(uniform(seed))) * 6.2832f / (float)h;
        ph[k] = 3.f * uniform(seed), a[k] = 1.f + uniform(seed);
    }
    for (int k = 0; k < 6; k++) {
        bx[k] = (float)w * (0.5f + 0.5f * uniform(seed));
        by[k] = (float)h * (0.5f + 0.5f * uniform(seed));
        br[k] = (float)w * (0.03f + 0.1f * fabsf(uniform(seed)));
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float v = 0.05f * uniform(seed);
            for (int k = 0; k < 4; k++) v += a[k] * sinf(fx[k] * x + fy[k] * y + ph[k]);
            for (int k = 0; k < 6; k++) {
                float dx = (x - bx[k]) / br[k], dy = (y - by[k]) / br[k];
                v += 3.f * expf(-(dx * dx + dy * dy));
            }
            m[(size_t)y * w + x] = v;
        }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *t) {
    qsort(t, REPEATS, sizeof *t, cmp_double);
    return t[REPEATS / 2];
}

/* Runs n images on `threads` threads; writes each image's score into scores[n]. Seconds taken,
 * or -1 if an image failed. */
static double run(const si_post_config *c, const si_post_plan *p, float *const *maps, int n,
                  int threads, uint8_t *scratch, uint8_t *rows, double *scores) {
    int failed = 0;
    double t0 = omp_get_wtime();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) reduction(+ : failed)
    for (int i = 0; i < n; i++) {
        const float *outs[1] = {maps[i % N_MAPS]};
        uint8_t *row = rows + (size_t)i * p->row_bytes;
        void *sc = scratch + (size_t)omp_get_thread_num() * p->scratch_bytes;
        if (si_post_image(c, p, outs, sc, row, NULL, NULL) != SI_OK) {
            fprintf(stderr, "image %d: %s\n", i, si_error_msg());
            failed++;
            continue;
        }
        memcpy(&scores[i], row + p->cols[0].offset, sizeof(double));
    }
    double t = omp_get_wtime() - t0;
    return failed ? -1.0 : t;
}

static int bench_size(int size, int n) {
    si_post_config c = si_post_config_default();
    c.kind = SI_POST_CONGESTION;
    si_shape s = {.ndim = 3, .dims = {1, size, size}};
    const char *names[1] = {"density"};
    si_post_plan p;
    if (si_post_plan_make(&c, 1, names, &s, &p) != SI_OK) {
        fprintf(stderr, "plan: %s\n", si_error_msg());
        return 1;
    }
    const int T = omp_get_max_threads();
    float *maps[N_MAPS];
    uint64_t seed = 12345 + (uint64_t)size;
    for (int k = 0; k < N_MAPS; k++) {
        maps[k] = malloc(sizeof(float) * (size_t)size * size);
        smooth_map(maps[k], size, size, &seed);
    }
    uint8_t *scratch = malloc(p.scratch_bytes * (size_t)T);
    uint8_t *rows = malloc(p.row_bytes * (size_t)n);
    double *s1 = malloc(sizeof(double) * n), *sT = malloc(sizeof(double) * n);
    int rc = 0;

    run(&c, &p, maps, N_MAPS < n ? N_MAPS : n, T, scratch, rows, s1); /* warm up pages, caches */
    /* The median of REPEATS runs: a shared machine's noise moves single runs by 20%. */
    double r1[REPEATS], rT[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        r1[r] = run(&c, &p, maps, n, 1, scratch, rows, s1);
        rT[r] = run(&c, &p, maps, n, T, scratch, rows, sT);
        if (r1[r] < 0 || rT[r] < 0) rc = 1;
    }
    double t1 = median(r1), tT = median(rT);
    int mismatches = 0;
    for (int i = 0; i < n && !rc; i++) mismatches += s1[i] != sT[i];
    double mean_score = 0;
    for (int i = 0; i < n; i++) mean_score += s1[i] / n;
    if (mismatches) {
        fprintf(stderr, "%dx%d: %d scores differ between 1 and %d threads\n", size, size,
                mismatches, T);
        rc = 1;
    }
    if (!rc) {
        printf("%4dx%-4d %5d images  1 thread: %8.1f img/s (%6.2f ms/img)   %2d threads: %8.1f "
               "img/s, %7.1f img/s per core   mean score %.3f\n",
               size, size, n, n / t1, 1e3 * t1 / n, T, n / tT, n / tT / T, mean_score);
    }
    for (int k = 0; k < N_MAPS; k++) free(maps[k]);
    free(scratch), free(rows), free(s1), free(sT);
    return rc;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 512;
    if (n < 1) {
        fprintf(stderr, "usage: %s [images [size ...]]\n", argv[0]);
        return 2;
    }
    printf("congestion postprocessor, defaults (k 4, sample 0.05, Canny 100/200, blur 71/7), "
           "%d threads on %d processors\n",
           omp_get_max_threads(), omp_get_num_procs());
    int rc = 0;
    if (argc > 2) {
        for (int i = 2; i < argc; i++) rc |= bench_size(atoi(argv[i]), n);
    } else {
        rc |= bench_size(256, n);
        rc |= bench_size(512, n);
    }
    return rc;
}
