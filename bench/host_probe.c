/* What a node's CPUs share, measured rather than read from lscpu (a virtual machine may report
 * one thread per core where its vCPUs are a host's hyper-thread pairs): issue 37's question of
 * why a rank's CPU work slows when the other ranks run.
 *   host_probe smt      per CPU k: a compute loop's rate on CPU 0 while CPU k runs one too,
 *                       against CPU 0 alone (a pair sharing a core shows ~0.5-0.7)
 *   host_probe bw       memory bandwidth (a triad over 64 MiB per thread) at 1, 2, 4, ... all
 *                       CPUs, each thread pinned to its own CPU
 *   host_probe spin N   N threads, one per CPU from 0, each a compute loop: its rate per thread
 *                       (all-core frequency against one core's)
 * Build: cc -O2 -fopenmp -pthread bench/host_probe.c -o host_probe */
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* A dependent integer and FP chain (what a JPEG decoder's core is busy with), for `secs`:
 * iterations per second. */
static double spin(double secs) {
    uint64_t x = 88172645463325252ull, n = 0;
    double f = 1.0, t0 = now(), t;
    do {
        for (int i = 0; i < 4096; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            f = f * 1.0000001 + (double)(x & 255) * 1e-9;
        }
        n += 4096;
    } while ((t = now()) - t0 < secs);
    if (f == 0.5) printf("%f\n", f); /* keep f */
    return (double)n / (t - t0);
}

typedef struct {
    int cpu;
    double secs, rate;
    volatile int *go;
} spin_arg;

static void *spin_main(void *p) {
    spin_arg *a = p;
    pin(a->cpu);
    while (!*a->go) {
    }
    a->rate = spin(a->secs);
    return NULL;
}

/* n threads on cpus[0..n), started together: their rates. */
static void spin_group(const int *cpus, int n, double secs, double *rates) {
    pthread_t th[1024];
    spin_arg a[1024];
    volatile int go = 0;
    for (int i = 0; i < n; i++) {
        a[i] = (spin_arg){cpus[i], secs, 0, &go};
        pthread_create(&th[i], NULL, spin_main, &a[i]);
    }
    go = 1;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        rates[i] = a[i].rate;
    }
}

int main(int argc, char **argv) {
    const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *what = argc > 1 ? argv[1] : "smt";
    if (!strcmp(what, "smt")) {
        int c0 = 0;
        double alone;
        spin_group(&c0, 1, 0.2, &alone);
        spin_group(&c0, 1, 0.2, &alone);
        printf("smt: CPU 0 alone %.3g loops/s; with CPU k busy too (ratio to alone):\n", alone);
        int shared = 0;
        for (int k = 1; k < ncpu; k++) {
            int cpus[2] = {0, k};
            double r[2];
            spin_group(cpus, 2, 0.1, r);
            printf("  %d:%.2f%s", k, r[0] / alone, k % 8 == 0 ? "\n" : "");
            if (r[0] / alone < 0.8) shared++;
        }
        printf("\nsmt: %d of %d other CPUs slow CPU 0 below 0.8x\n", shared, ncpu - 1);
    } else if (!strcmp(what, "spin")) {
        int n = argc > 2 ? atoi(argv[2]) : ncpu;
        if (n > ncpu) n = ncpu;
        if (n < 1) n = 1;
        int cpus[1024];
        double r[1024], one, sum = 0, lo = 1e30;
        for (int i = 0; i < n; i++) cpus[i] = i;
        spin_group(cpus, 1, 0.3, &one);
        spin_group(cpus, n, 1.0, r);
        for (int i = 0; i < n; i++) sum += r[i], lo = r[i] < lo ? r[i] : lo;
        printf("spin: %d threads: %.3f of one alone per thread (slowest %.3f)\n", n, sum / n / one,
               lo / one);
    } else if (!strcmp(what, "bw")) {
        const size_t per = (size_t)64 << 20, m = per / sizeof(double);
        for (int n = 1; n <= ncpu; n = n * 2 > ncpu && n < ncpu ? ncpu : n * 2) {
            double best = 0;
            omp_set_num_threads(n);
#pragma omp parallel
            { pin(omp_get_thread_num()); }
            double **a = calloc((size_t)n, sizeof *a), **b = calloc((size_t)n, sizeof *b),
                   **c = calloc((size_t)n, sizeof *c);
#pragma omp parallel
            {
                int t = omp_get_thread_num();
                a[t] = malloc(per), b[t] = malloc(per), c[t] = malloc(per);
                for (size_t i = 0; i < m; i++) a[t][i] = 1, b[t][i] = 2, c[t][i] = 0;
            }
            for (int rep = 0; rep < 4; rep++) {
                double t0 = now();
#pragma omp parallel
                {
                    int t = omp_get_thread_num();
                    double *x = a[t], *y = b[t], *z = c[t];
                    for (size_t i = 0; i < m; i++) z[i] = x[i] + 1.5 * y[i];
                }
                double gbs = 3.0 * (double)per * n / (now() - t0) / 1e9;
                best = gbs > best ? gbs : best;
            }
            printf("bw: %3d threads %7.1f GB/s (%.1f per thread)\n", n, best, best / n);
            for (int t = 0; t < n; t++) free(a[t]), free(b[t]), free(c[t]);
            free(a), free(b), free(c);
            if (n == ncpu) break;
        }
    } else {
        fprintf(stderr, "usage: host_probe smt|bw|spin [N]\n");
        return 2;
    }
    return 0;
}
