/* --post congestion, the congestion score of one dense map: see congestion.h for the exact
 * definitions. Integer Canny, 1-D k-means on a 256-bin histogram of the sample, and the blurred
 * map's mean from separable per-pixel weights, so one 224x224 map costs well under a
 * millisecond. */
#include "congestion.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"

#define ALIGN     64
#define MAX_ITERS 100
#define TG22      13573 /* tan(22.5 deg) * 2^15, as OpenCV's Canny */

si_congestion_params si_congestion_defaults(void) {
    si_congestion_params p = {4, 0.05, 12345, 100.0, 200.0, 71, 7.0};
    return p;
}

static size_t round_up(size_t n) {
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* Scratch carved as: dx, dy (int16, N), mag (int32, padded), cmap (u8, padded), stack (int32, N),
 * labels (u8, N), edges (u8, N), cx (double, W), cy (double, H). */
typedef struct {
    int16_t *dx, *dy;
    int32_t *mag;
    uint8_t *cmap;
    int32_t *stack;
    uint8_t *labels, *edges;
    double *cx, *cy;
} layout;

static size_t carve(void *scratch, int h, int w, layout *l) {
    size_t n = (size_t)h * (size_t)w, np = (size_t)(h + 2) * (size_t)(w + 2);
    uintptr_t base = (uintptr_t)scratch, at = 0;
    if (scratch) at = (base + ALIGN - 1) / ALIGN * ALIGN - base;
    size_t sizes[9] = {n * 2, n * 2, np * 4, np, n * 4, n, n, (size_t)w * 8, (size_t)h * 8};
    void *ptrs[9];
    for (int i = 0; i < 9; i++) {
        ptrs[i] = scratch ? (char *)scratch + at : NULL;
        at += round_up(sizes[i]);
    }
    if (l) {
        l->dx = ptrs[0], l->dy = ptrs[1], l->mag = ptrs[2], l->cmap = ptrs[3], l->stack = ptrs[4];
        l->labels = ptrs[5], l->edges = ptrs[6], l->cx = ptrs[7], l->cy = ptrs[8];
    }
    return at + ALIGN;
}

size_t si_congestion_scratch_size(int h, int w) {
    /* 40 bytes a pixel at most; keep the total far from overflow on any size_t. */
    if (h <= 0 || w <= 0 || (uint64_t)(h + 2) * (uint64_t)(w + 2) > (SIZE_MAX >> 8)) return 0;
    return carve(NULL, h, w, NULL);
}

static si_status check_size(int h, int w) {
    if (h <= 0 || w <= 0 || !si_congestion_scratch_size(h, w))
        return si_error(SI_ERR_ARG, "congestion: bad map size %dx%d", h, w);
    return SI_OK;
}

static si_status check_params(const si_congestion_params *p) {
    if (p->k < 2 || p->k > 256) return si_error(SI_ERR_ARG, "congestion: k=%d not in 2..256", p->k);
    if (!(p->sample_fraction > 0.0 && p->sample_fraction <= 1.0))
        return si_error(SI_ERR_ARG, "congestion: sample_fraction %g not in (0, 1]",
                        p->sample_fraction);
    if (!(p->canny_lo >= 0.0 && p->canny_hi >= 0.0 && p->canny_hi < 1e9 && p->canny_lo < 1e9))
        return si_error(SI_ERR_ARG, "congestion: bad Canny thresholds %g, %g", p->canny_lo,
                        p->canny_hi);
    if (p->blur_size < 1 || p->blur_size > SI_CONGESTION_MAX_BLUR || p->blur_size % 2 == 0)
        return si_error(SI_ERR_ARG, "congestion: blur size %d not odd in 1..%d", p->blur_size,
                        SI_CONGESTION_MAX_BLUR);
    if (!(p->blur_sigma > 0.0) || !isfinite(p->blur_sigma))
        return si_error(SI_ERR_ARG, "congestion: blur sigma %g not positive", p->blur_sigma);
    return SI_OK;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { /* [0, 1) with 53 bits */
    return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Picks the bin holding the r-th unit of weight (r in [0, total)); the last non-empty bin if
 * rounding carries r past the end. */
static int pick_bin(const double *wgt, double r) {
    int last = -1;
    for (int v = 0; v < 256; v++) {
        if (wgt[v] <= 0.0) continue;
        last = v;
        if (r < wgt[v]) return v;
        r -= wgt[v];
    }
    return last;
}

/* 1-D k-means on a histogram: k-means++ init, Lloyd until stable. Writes k centers. */
static void kmeans_hist(const uint32_t *hist, int k, uint64_t *rng, double *centers) {
    double wgt[256];
    double total = 0.0;
    for (int v = 0; v < 256; v++) total += (wgt[v] = hist[v]);
    centers[0] = pick_bin(wgt, uniform01(rng) * total);
    for (int c = 1; c < k; c++) {
        double sum = 0.0;
        for (int v = 0; v < 256; v++) {
            double best = INFINITY;
            for (int j = 0; j < c; j++) best = fmin(best, (v - centers[j]) * (v - centers[j]));
            sum += (wgt[v] = hist[v] ? hist[v] * best : 0.0);
        }
        /* Fewer distinct values than k: the extra centers duplicate the last one and stay empty. */
        centers[c] = sum > 0.0 ? pick_bin(wgt, uniform01(rng) * sum) : centers[c - 1];
    }
    int assign[256];
    for (int v = 0; v < 256; v++) assign[v] = -1;
    for (int it = 0; it < MAX_ITERS; it++) {
        int changed = 0;
        double s[256] = {0}, cnt[256] = {0};
        for (int v = 0; v < 256; v++) {
            if (!hist[v]) continue;
            int best = 0;
            for (int j = 1; j < k; j++)
                if (fabs(v - centers[j]) < fabs(v - centers[best])) best = j;
            changed |= best != assign[v];
            assign[v] = best;
            s[best] += (double)hist[v] * v;
            cnt[best] += hist[v];
        }
        if (!changed) break;
        for (int j = 0; j < k; j++)
            if (cnt[j] > 0.0) centers[j] = s[j] / cnt[j];
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

si_status si_congestion_labels(const float *map, int h, int w, const si_congestion_params *p,
                               void *scratch, uint8_t *labels) {
    (void)scratch; /* the histogram fits on the stack */
    si_congestion_params def = si_congestion_defaults();
    if (!p) p = &def;
    si_status st = check_size(h, w);
    if (st == SI_OK) st = check_params(p);
    if (st != SI_OK) return st;
    if (!map || !labels) return si_error(SI_ERR_ARG, "congestion: NULL map or output");
    size_t n = (size_t)h * (size_t)w;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(map[i]))
            return si_error(SI_ERR_ARG, "congestion: non-finite value at (%zu, %zu)", i / w, i % w);
        lo = map[i] < lo ? map[i] : lo;
        hi = map[i] > hi ? map[i] : hi;
    }
    double scale = (double)hi - lo > 0.0 ? 255.0 / ((double)hi - lo) : 0.0;
    for (size_t i = 0; i < n; i++) {
        double u = ((double)map[i] - lo) * scale;
        labels[i] = (uint8_t)(u >= 255.0 ? 255 : u <= 0.0 ? 0 : (int)u);
    }

    /* Selection sampling: exactly ns of n pixels, each subset equally likely. */
    size_t ns = (size_t)llround(p->sample_fraction * (double)n);
    size_t kmin = (size_t)p->k < n ? (size_t)p->k : n;
    if (ns < kmin) ns = kmin;
    if (ns > n) ns = n;
    uint64_t rng = p->seed;
    uint32_t hist[256] = {0};
    size_t taken = 0;
    for (size_t i = 0; i < n && taken < ns; i++)
        if ((double)(n - i) * uniform01(&rng) < (double)(ns - taken)) hist[labels[i]]++, taken++;
    SI_ASSERT(taken == ns);

    double centers[256];
    kmeans_hist(hist, p->k, &rng, centers);
    qsort(centers, (size_t)p->k, sizeof centers[0], cmp_double);
    int rank[256], r = 0;
    for (int j = 0; j < p->k; j++) rank[j] = (j > 0 && centers[j] > centers[j - 1]) ? ++r : r;
    uint8_t lut[256];
    for (int v = 0; v < 256; v++) {
        int best = 0;
        for (int j = 1; j < p->k; j++)
            if (fabs(v - centers[j]) < fabs(v - centers[best])) best = j;
        lut[v] = (uint8_t)(rank[best] * 255 / (p->k - 1));
    }
    for (size_t i = 0; i < n; i++) labels[i] = lut[labels[i]];
    return SI_OK;
}

static si_status canny(const uint8_t *src, int h, int w, double lo_t, double hi_t, const layout *l,
                       uint8_t *edges) {
    int lo = (int)floor(lo_t), hi = (int)floor(hi_t);
    if (lo > hi) {
        int t = lo;
        lo = hi, hi = t;
    }
    int ws = w + 2; /* padded row stride of mag and cmap: a zero / "not edge" frame */
    int32_t *mag = l->mag;
    uint8_t *cm = l->cmap;
    memset(mag, 0, (size_t)(h + 2) * ws * sizeof *mag);
    for (int y = 0; y < h; y++) {
        const uint8_t *ra = src + (size_t)(y > 0 ? y - 1 : 0) * w, *rb = src + (size_t)y * w,
                      *rc = src + (size_t)(y < h - 1 ? y + 1 : h - 1) * w;
        int16_t *dx = l->dx + (size_t)y * w, *dy = l->dy + (size_t)y * w;
        int32_t *m = mag + (size_t)(y + 1) * ws + 1;
        for (int x = 0; x < w; x++) {
            int xl = x > 0 ? x - 1 : 0, xr = x < w - 1 ? x + 1 : w - 1;
            int gx = (ra[xr] - ra[xl]) + 2 * (rb[xr] - rb[xl]) + (rc[xr] - rc[xl]);
            int gy = (rc[xl] + 2 * rc[x] + rc[xr]) - (ra[xl] + 2 * ra[x] + ra[xr]);
            dx[x] = (int16_t)gx, dy[x] = (int16_t)gy;
            m[x] = abs(gx) + abs(gy);
        }
    }
    /* cmap: 0 candidate, 1 not an edge, 2 edge; the frame stays 1 so hysteresis stops there. */
    memset(cm, 1, (size_t)(h + 2) * ws);
    int32_t *stack = l->stack;
    size_t top = 0;
    for (int y = 0; y < h; y++) {
        const int32_t *mp = mag + (size_t)y * ws + 1, *ma = mp + ws, *mn = ma + ws;
        const int16_t *dx = l->dx + (size_t)y * w, *dy = l->dy + (size_t)y * w;
        uint8_t *c = cm + (size_t)(y + 1) * ws + 1;
        for (int x = 0; x < w; x++) {
            int m = ma[x];
            if (m <= lo) continue;
            int xs = abs(dx[x]), ys = abs(dy[x]) << 15, tg22x = xs * TG22, keep;
            if (ys < tg22x) {
                keep = m > ma[x - 1] && m >= ma[x + 1];
            } else if (ys > tg22x + (xs << 16)) {
                keep = m > mp[x] && m >= mn[x];
            } else {
                int s = (dx[x] ^ dy[x]) < 0 ? -1 : 1;
                keep = m > mp[x - s] && m > mn[x + s];
            }
            if (!keep) continue;
            if (m > hi) {
                c[x] = 2;
                stack[top++] = (int32_t)((y + 1) * ws + x + 1);
            } else {
                c[x] = 0;
            }
        }
    }
    static const int dr[8] = {-1, -1, -1, 0, 0, 1, 1, 1}, dc[8] = {-1, 0, 1, -1, 1, -1, 0, 1};
    while (top) {
        int32_t at = stack[--top];
        for (int d = 0; d < 8; d++) {
            int32_t nb = at + dr[d] * ws + dc[d];
            if (cm[nb] == 0) {
                cm[nb] = 2;
                stack[top++] = nb;
            }
        }
    }
    for (int y = 0; y < h; y++) {
        const uint8_t *c = cm + (size_t)(y + 1) * ws + 1;
        for (int x = 0; x < w; x++) edges[(size_t)y * w + x] = c[x] == 2 ? 255 : 0;
    }
    return SI_OK;
}

si_status si_congestion_canny(const uint8_t *src, int h, int w, double lo, double hi, void *scratch,
                              uint8_t *edges) {
    si_status st = check_size(h, w);
    if (st != SI_OK) return st;
    if (!src || !scratch || !edges) return si_error(SI_ERR_ARG, "congestion: NULL argument");
    if (!(lo >= 0.0 && hi >= 0.0 && lo < 1e9 && hi < 1e9))
        return si_error(SI_ERR_ARG, "congestion: bad Canny thresholds %g, %g", lo, hi);
    layout l;
    carve(scratch, h, w, &l);
    return canny(src, h, w, lo, hi, &l, edges);
}

/* cv2.getGaussianKernel(size, sigma) for sigma > 0, in double. */
static void gauss_kernel(int size, double sigma, double *k) {
    double r = (size - 1) * 0.5, sum = 0.0;
    for (int i = 0; i < size; i++) sum += (k[i] = exp(-(i - r) * (i - r) / (2.0 * sigma * sigma)));
    for (int i = 0; i < size; i++) k[i] /= sum;
}

static int clampi(int v, int n) {
    return v < 0 ? 0 : v >= n ? n - 1 : v;
}

/* wt[x] = total weight input index x gets over all n outputs of a 1-D blur with replicated
 * borders, so that mean(blur) = sum(e[y][x] * wy[y] * wx[x]) / (H * W). */
static void border_weights(const double *k, int size, int n, double *wt) {
    int r = size / 2;
    for (int x = 0; x < n; x++) wt[x] = 0.0;
    for (int o = 0; o < n; o++)
        for (int i = 0; i < size; i++) wt[clampi(o + i - r, n)] += k[i];
}

si_status si_congestion_blur(const uint8_t *src, int h, int w, int size, double sigma, double *tmp,
                             double *out) {
    si_status st = check_size(h, w);
    if (st != SI_OK) return st;
    if (!src || !tmp || !out) return si_error(SI_ERR_ARG, "congestion: NULL argument");
    if (size < 1 || size > SI_CONGESTION_MAX_BLUR || size % 2 == 0 || !(sigma > 0.0))
        return si_error(SI_ERR_ARG, "congestion: bad blur %d, %g", size, sigma);
    double k[SI_CONGESTION_MAX_BLUR];
    gauss_kernel(size, sigma, k);
    int r = size / 2;
    for (int y = 0; y < h; y++) /* rows */
        for (int x = 0; x < w; x++) {
            double s = 0.0;
            for (int i = 0; i < size; i++) s += k[i] * src[(size_t)y * w + clampi(x + i - r, w)];
            tmp[(size_t)y * w + x] = s;
        }
    for (int y = 0; y < h; y++) /* columns */
        for (int x = 0; x < w; x++) {
            double s = 0.0;
            for (int i = 0; i < size; i++) s += k[i] * tmp[(size_t)clampi(y + i - r, h) * w + x];
            out[(size_t)y * w + x] = s;
        }
    return SI_OK;
}

si_status si_congestion_score(const float *map, int h, int w, const si_congestion_params *p,
                              void *scratch, double *score, double *map_mean) {
    si_congestion_params def = si_congestion_defaults();
    if (!p) p = &def;
    if (!scratch || !score || !map_mean)
        return si_error(SI_ERR_ARG, "congestion: NULL scratch or output");
    layout l;
    si_status st = check_size(h, w);
    if (st != SI_OK) return st;
    carve(scratch, h, w, &l);
    st = si_congestion_labels(map, h, w, p, scratch, l.labels);
    if (st != SI_OK) return st;
    canny(l.labels, h, w, p->canny_lo, p->canny_hi, &l, l.edges);

    double k[SI_CONGESTION_MAX_BLUR];
    gauss_kernel(p->blur_size, p->blur_sigma, k);
    border_weights(k, p->blur_size, w, l.cx);
    border_weights(k, p->blur_size, h, l.cy);
    double total = 0.0, msum = 0.0;
    for (int y = 0; y < h; y++) {
        double row = 0.0;
        const uint8_t *e = l.edges + (size_t)y * w;
        for (int x = 0; x < w; x++)
            if (e[x]) row += l.cx[x];
        total += row * l.cy[y];
    }
    size_t n = (size_t)h * (size_t)w;
    for (size_t i = 0; i < n; i++) msum += map[i];
    *score = 255.0 * total / (double)n;
    *map_mean = msum / (double)n;
    return SI_OK;
}

void si_congestion_params_format(const si_congestion_params *p, char *buf, size_t cap) {
    snprintf(buf, cap, "congestion k=%d sample=%g seed=%llu canny=%g,%g blur=%d sigma=%g", p->k,
             p->sample_fraction, (unsigned long long)p->seed, p->canny_lo, p->canny_hi,
             p->blur_size, p->blur_sigma);
}

/* --- the --post congestion row -------------------------------------------------------------- */

/* Output 0 (H, W) or (1, H, W): columns congestion/score and congestion/map_mean, float64. */
static si_status plan(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    const si_shape *s = &per_image[0];
    bool ok = si_post_numel(s) > 0 && (s->ndim == 2 || (s->ndim == 3 && s->dims[0] == 1));
    if (!ok) return si_post_mismatch(c, 0, names, s, "(height, width) or (1, height, width)");
    /* numel <= SI_POST_MAX_NUMEL, so both fit an int. */
    p->map_h = (int)s->dims[s->ndim - 2];
    p->map_w = (int)s->dims[s->ndim - 1];
    p->scratch_bytes = si_congestion_scratch_size(p->map_h, p->map_w);
    if (!p->scratch_bytes)
        return si_post_mismatch(c, 0, names, s, "a map small enough for the congestion scratch");
    si_post_add_col(p, "congestion/score", SI_COL_F64, 0, NULL);
    si_post_add_col(p, "congestion/map_mean", SI_COL_F64, 0, NULL);
    p->out_numel[0] = (int64_t)p->map_h * p->map_w;
    return SI_OK;
}

static si_status image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    double score, mean;
    si_status st =
        si_congestion_score(outs[0], p->map_h, p->map_w, &c->congestion, scratch, &score, &mean);
    if (st != SI_OK) return st;
    memcpy(row + p->cols[0].offset, &score, sizeof score);
    memcpy(row + p->cols[1].offset, &mean, sizeof mean);
    return SI_OK;
}

static void params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    si_congestion_params_format(&c->congestion, buf, cap);
}

const si_post_kind_ops si_post_congestion_ops = {
    .name = "congestion",
    .plan = plan,
    .image = image,
    .params = params,
};
