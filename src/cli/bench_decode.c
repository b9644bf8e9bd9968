/* `shardinfer bench decode SET.h5`: the CPU preprocessing alone (JPEG decode, EXIF orientation,
 * resize, center crop), timed over every record of a packed set held in memory, with an OpenMP
 * loop over images for each thread count asked for. Prints one line per thread count:
 *   bench-decode: threads=T images_per_s=X per_core=Y exact=0|1 ...
 * The run also checks itself: every thread count must produce the same crops (a digest per
 * image; the line's digest= lets a caller compare all crops with its own), and outside exact mode
 * it reports how far the DCT-scaled crops are from the exact ones. */
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "base/common.h"
#include "io/source.h"
#include "io/jpeg.h"
#include "io/resample.h"

#define MAX_THREAD_COUNTS 64

/* "1,2,4" -> counts[]; false on anything else. */
static bool parse_threads(const char *s, int *counts, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || *n == MAX_THREAD_COUNTS) return false;
        counts[(*n)++] = (int)v;
        if (*end == ',' && end[1])
            s = end + 1;
        else if (*end == 0)
            s = end;
        else
            return false;
    }
    return *n > 0;
}

/* sum of crop[k] * (k + 1) mod 2^64: position-sensitive, and numpy computes the same in one
 * line, so bench/decode_vs_pillow.py can check the crops against Pillow's */
static uint64_t crop_digest(const uint8_t *p, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h += (uint64_t)p[i] * (uint64_t)(i + 1);
    return h;
}

typedef struct {
    const uint8_t *data; /* all records back to back; borrowed */
    const uint64_t *off; /* n + 1 offsets */
    uint32_t n;
    si_preproc pp;
    size_t crop_bytes;
    bool gpu_resize; /* the decode threads' share of --resize-on gpu: decode and pack only */
    size_t dst_bytes;
} bench_set;

/* One image as the pipeline's decode threads handle it: the crop, or with gpu_resize the
 * DCT-scaled decode copied into dst as into a slot's packed buffer (the GPU resizes it later).
 * *hash gets the digest of what was written. */
static int decode_one(si_decoder *d, const bench_set *b, uint32_t i, uint8_t *dst, char *msg,
                      size_t cap, uint64_t *hash) {
    const uint8_t *data = b->data + b->off[i];
    size_t len = (size_t)(b->off[i + 1] - b->off[i]);
    if (!b->gpu_resize) {
        int st = si_decode_crop(d, data, len, &b->pp, dst, msg, cap);
        if (hash) *hash = st == SI_IMG_OK ? crop_digest(dst, b->crop_bytes) : 0;
        return st;
    }
    const uint8_t *img;
    int w, h;
    int st = si_decode_scaled(d, data, len, &b->pp, &img, &w, &h, msg, cap);
    size_t n = st == SI_IMG_OK ? (size_t)w * (size_t)h * 3 : 0;
    if (n > b->dst_bytes) n = 0; /* the pipeline resizes such an image on the CPU */
    memcpy(dst, img, n);
    if (hash) *hash = st == SI_IMG_OK ? crop_digest(dst, n) + (uint64_t)w * 65536 + (uint64_t)h : 0;
    return st;
}

/* One untimed pass with `threads` threads that records each image's status and crop hash, then
 * decodes images round-robin until `seconds` have passed. Returns images per second; *done_out
 * gets the number of images decoded in the timed part. */
static double run_threads(const bench_set *b, int threads, double seconds, int *status,
                          uint64_t *hash, long *done_out) {
    long next = 0, done = 0;
    double t0 = 0, t_end = 0, last = 0;
#pragma omp parallel num_threads(threads)
    {
        si_decoder *d = si_decoder_create();
        uint8_t *dst = si_xmalloc(b->dst_bytes);
        if (!d) si_fatal(__FILE__, __LINE__, "si_decoder_create", "%s", si_error_msg());
        char msg[256];
#pragma omp for schedule(dynamic, 1)
        for (uint32_t i = 0; i < b->n; i++) {
            status[i] = decode_one(d, b, i, dst, msg, sizeof msg, &hash[i]);
        }
#pragma omp single
        {
            t0 = si_now();
            t_end = t0 + seconds;
        }
        /* every thread takes the next image of an endless round over the set, so no thread
         * waits at the end of a pass */
        long mine = 0;
        double now = t0;
        while (now < t_end) {
            long k;
#pragma omp atomic capture
            k = next++;
            uint32_t i = (uint32_t)(k % b->n);
            decode_one(d, b, i, dst, msg, sizeof msg, NULL);
            mine++;
            now = si_now();
        }
#pragma omp critical
        {
            done += mine;
            if (now > last) last = now;
        }
        si_decoder_destroy(d);
        free(dst);
    }
    *done_out = done;
    return (double)done / (last - t0);
}

static void usage(FILE *f) {
    fprintf(f, "usage: shardinfer bench decode SET.h5 [--threads 1,2,...] [--resize 256] "
               "[--crop 224] [--exact] [--no-exif] [--seconds 3] [--max-pixels N]\n"
               "       [--resize-on cpu|gpu] [--interpolation bilinear|bicubic]\n"
               "  decodes, resizes and center-crops every image of the set (held in memory)\n"
               "  over and over for --seconds, once per thread count; default threads: 1 and\n"
               "  all cores. --exact: full-size decode, bit-exact with Pillow; otherwise the\n"
               "  decode is scaled in the DCT domain and the difference to --exact is reported.\n"
               "  --resize-on gpu: the decode threads' share of a GPU-resized run, decode and\n"
               "  copy into a packed buffer only (the resize is the GPU's). --interpolation:\n"
               "  the resize's filter, Pillow's BILINEAR (default) or BICUBIC\n");
}

typedef struct {
    int counts[MAX_THREAD_COUNTS], ncounts; /* thread counts, in the order given */
    si_preproc pp;
    double seconds; /* per thread count */
    bool gpu_resize;
    const char *path;
} decode_args;

/* One option into a; false if its value is out of range. */
static bool set_option(decode_args *a, int c, const char *arg) {
    char *end = NULL;
    long v = arg ? strtol(arg, &end, 10) : 0;
    bool int_ok = arg && end && !*end && v >= 1 && v <= 100000;
    switch (c) {
    case 't': return parse_threads(arg, a->counts, &a->ncounts);
    case 'r': return int_ok && (a->pp.resize = (int)v, true);
    case 'c': return int_ok && (a->pp.crop_h = a->pp.crop_w = (int)v, true);
    case 's': {
        double s = strtod(arg, &end);
        return end != arg && !*end && s > 0 && s <= 3600 && (a->seconds = s, true);
    }
    case 'm': {
        unsigned long long m = strtoull(arg, &end, 10);
        return end != arg && !*end && m >= 1 && (a->pp.max_pixels = m, true);
    }
    case 'e': a->pp.exact = true; return true;
    case 'x': a->pp.no_exif = true; return true;
    case 'i': return si_interp_parse(arg, &a->pp.interp);
    case 'R':
        if (strcmp(arg, "cpu") && strcmp(arg, "gpu")) return false;
        a->gpu_resize = !strcmp(arg, "gpu");
        return true;
    default: return false;
    }
}

/* Parses argv into a; returns -1 to go on, else the exit code (after --help or a bad option). */
static int parse_bench_decode(int argc, char **argv, decode_args *a) {
    static const struct option opts[] = {{"threads", required_argument, 0, 't'},
                                         {"resize", required_argument, 0, 'r'},
                                         {"crop", required_argument, 0, 'c'},
                                         {"seconds", required_argument, 0, 's'},
                                         {"max-pixels", required_argument, 0, 'm'},
                                         {"exact", no_argument, 0, 'e'},
                                         {"no-exif", no_argument, 0, 'x'},
                                         {"resize-on", required_argument, 0, 'R'},
                                         {"interpolation", required_argument, 0, 'i'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":t:r:c:s:m:exh", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return SI_EXIT_OK;
        }
        if (set_option(a, c, optarg)) continue;
        if (c == 'i')
            fprintf(stderr,
                    "shardinfer bench decode: --interpolation '%s': expected " SI_INTERP_CHOICES
                    "\n",
                    optarg);
        else
            fprintf(stderr, "shardinfer bench decode: bad option '%s'\n", argv[optind - 1]);
        usage(stderr);
        return SI_EXIT_USAGE;
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return SI_EXIT_USAGE;
    }
    if (a->pp.crop_h > a->pp.resize) {
        fprintf(stderr, "shardinfer bench decode: --crop %d is larger than --resize %d\n",
                a->pp.crop_h, a->pp.resize);
        return SI_EXIT_USAGE;
    }
    if (a->ncounts == 0) {
        a->counts[a->ncounts++] = 1;
        if (omp_get_num_procs() > 1) a->counts[a->ncounts++] = omp_get_num_procs();
    }
    a->path = argv[optind];
    return -1;
}

/* Every record of the set at path into buf (the caller frees it with si_bytes_free) and *off
 * (n + 1 offsets; the caller frees it). */
static si_status load_set(const char *path, si_bytes *buf, uint64_t **off, uint32_t *n) {
    si_source *set = NULL;
    si_status st = si_source_open(path, NULL, &set);
    uint64_t n64 = st == SI_OK ? si_source_count(set) : 0;
    if (st == SI_OK && (n64 == 0 || n64 > UINT32_MAX || si_source_kind(set) != SI_SRC_ENCODED))
        st = si_error(SI_ERR_FORMAT,
                      "%s: %llu images; the benchmark needs 1 to 2^32-1 encoded (JPEG) images",
                      path, (unsigned long long)n64);
    if (st == SI_OK) {
        *off = si_xmalloc(sizeof **off * (size_t)(n64 + 1));
        st = si_source_read(set, 0, (uint32_t)n64, buf, *off, NULL);
    }
    si_source_close(set);
    *n = (uint32_t)n64;
    return st;
}

/* One line per thread count; every count's crops are compared with the first count's. Returns
 * SI_EXIT_VERIFY if any differ, else SI_EXIT_OK. */
static int time_thread_counts(const bench_set *b, const decode_args *a) {
    uint32_t n = b->n;
    int *status = si_xmalloc(sizeof *status * n);
    uint64_t *hash = si_xmalloc(sizeof *hash * n), *hash0 = si_xmalloc(sizeof *hash0 * n);
    int rc = SI_EXIT_OK;
    for (int t = 0; t < a->ncounts; t++) {
        long done = 0;
        double ips = run_threads(b, a->counts[t], a->seconds, status, hash, &done);
        uint32_t bad = 0, mismatched = 0;
        uint64_t digest = 0; /* sum over images of (index + 1) * crop_digest, mod 2^64 */
        for (uint32_t i = 0; i < n; i++) {
            bad += status[i] != SI_IMG_OK;
            digest += (uint64_t)(i + 1) * hash[i];
        }
        if (t == 0)
            memcpy(hash0, hash, sizeof *hash * n);
        else
            for (uint32_t i = 0; i < n; i++) mismatched += hash[i] != hash0[i];
        printf("bench-decode: threads=%d images_per_s=%.1f per_core=%.1f exact=%d images=%ld "
               "seconds=%.2f failed=%u digest=%016llx\n",
               a->counts[t], ips, ips / a->counts[t], b->pp.exact, done, (double)done / ips, bad,
               (unsigned long long)digest);
        fflush(stdout);
        if (mismatched) {
            si_log_error("bench decode: %u crops differ between %d and %d threads", mismatched,
                         a->counts[0], a->counts[t]);
            rc = SI_EXIT_VERIFY;
        }
    }
    free(status);
    free(hash);
    free(hash0);
    return rc;
}

/* How far the DCT-scaled crops are from the exact ones, over the whole set. */
static void print_scaled_vs_exact(const bench_set *b) {
    si_preproc ex = b->pp;
    ex.exact = true;
    uint64_t sum = 0, npx = 0;
    int worst = 0;
    double worst_mean = 0;
#pragma omp parallel
    {
        si_decoder *d = si_decoder_create();
        if (!d) si_fatal(__FILE__, __LINE__, "si_decoder_create", "%s", si_error_msg());
        uint8_t *sc = si_xmalloc(b->crop_bytes), *e = si_xmalloc(b->crop_bytes);
#pragma omp for schedule(dynamic, 1) reduction(+ : sum, npx) reduction(max : worst, worst_mean)
        for (uint32_t i = 0; i < b->n; i++) {
            const uint8_t *data = b->data + b->off[i];
            size_t len = (size_t)(b->off[i + 1] - b->off[i]);
            if (si_decode_crop(d, data, len, &b->pp, sc, NULL, 0) != SI_IMG_OK ||
                si_decode_crop(d, data, len, &ex, e, NULL, 0) != SI_IMG_OK)
                continue;
            uint64_t s = 0;
            for (size_t k = 0; k < b->crop_bytes; k++) {
                int dd = abs((int)sc[k] - (int)e[k]);
                s += (uint64_t)dd;
                if (dd > worst) worst = dd;
            }
            sum += s;
            npx += b->crop_bytes;
            double m = (double)s / (double)b->crop_bytes;
            if (m > worst_mean) worst_mean = m;
        }
        si_decoder_destroy(d);
        free(sc);
        free(e);
    }
    printf("bench-decode: scaled-vs-exact mean_abs=%.3f max_abs=%d worst_image_mean_abs=%.3f "
           "values=%llu\n",
           npx ? (double)sum / (double)npx : 0.0, worst, worst_mean, (unsigned long long)npx);
}

int si_cli_bench_decode(int argc, char **argv) {
    decode_args a = {.pp = {.resize = 256, .crop_h = 224, .crop_w = 224, .max_pixels = 100000000},
                     .seconds = 3.0};
    int rc = parse_bench_decode(argc, argv, &a);
    if (rc >= 0) return rc;
    si_bytes buf = {0};
    uint64_t *off = NULL;
    uint32_t n;
    if (load_set(a.path, &buf, &off, &n) != SI_OK) {
        si_log_error("%s", si_error_msg());
        free(off);
        si_bytes_free(&buf);
        return SI_EXIT_FAIL;
    }
    const si_preproc *pp = &a.pp;
    bench_set b = {.data = buf.data,
                   .off = off,
                   .n = n,
                   .pp = *pp,
                   .crop_bytes = (size_t)pp->crop_h * pp->crop_w * 3,
                   .gpu_resize = a.gpu_resize};
    b.dst_bytes = a.gpu_resize ? SI_RS_PACK_DEFAULT(pp->resize) : b.crop_bytes;
    printf("bench-decode: set=%s images=%u bytes=%zu mean_kib=%.1f resize=%d crop=%d exact=%d "
           "exif=%d resize_on=%s interpolation=%s\n",
           a.path, n, buf.len, (double)buf.len / n / 1024, pp->resize, pp->crop_h, pp->exact,
           !pp->no_exif, a.gpu_resize ? "gpu" : "cpu", si_interp_name(pp->interp));
    fflush(stdout);
    rc = time_thread_counts(&b, &a);
    if (!pp->exact) print_scaled_vs_exact(&b);
    free(off);
    si_bytes_free(&buf);
    return rc;
}
