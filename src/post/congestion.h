/* Congestion score of one dense output map (H, W) float32: min-max to uint8, k-means levels fitted
 * on a seeded pixel sample, label map scaled to 0-255, Canny edges (as cv2.Canny, L1, 3x3 Sobel),
 * Gaussian blur of the edges (as cv2.GaussianBlur, BORDER_REPLICATE); the score is the blurred
 * map's mean. Nothing is allocated: the caller hands in scratch, so images can run in parallel.
 *
 * Exact definitions (the reference is tests/post_congestion_ref.py):
 *  - normalize: u = trunc((x - min) * (255 / (max - min))) computed in double, clamped to 0..255
 *    (cv2.normalize(NORM_MINMAX) to float then astype(uint8) truncates the same way, up to the
 *    float32 rounding OpenCV does); a constant map gives all zeros. Non-finite input: SI_ERR_ARG.
 *  - sample: n = clamp(round(sample_fraction * H * W), min(k, H*W), H*W) pixels drawn without
 *    replacement by selection sampling (Knuth's algorithm S) driven by splitmix64(seed).
 *  - k-means: 1-D on the sampled uint8 values, k-means++ init from the same generator, Lloyd
 *    iterations until no assignment changes (at most 100); an empty cluster keeps its center.
 *  - labels: every pixel gets its nearest center (ties to the smaller center); its label is the
 *    rank of that center among the distinct center values, scaled as rank * 255 / (k - 1) in
 *    integers (k = 4: 0, 85, 170, 255). Distinct ranks keep fewer-than-k-level maps deterministic.
 *  - Canny: thresholds floor(canny_lo), floor(canny_hi), |dx| + |dy| on 3x3 Sobel with replicated
 *    borders, OpenCV's integer non-maximum suppression and 8-connected hysteresis; edges are 255.
 *  - blur: kernel exp(-(i - r)^2 / (2 sigma^2)) normalized to sum 1 (cv2.getGaussianKernel with
 *    sigma > 0), replicated borders, computed in double with no uint8 rounding. The score is the
 *    exact mean of that blurred map, found from per-column and per-row weights of each input pixel
 *    (the mean of a separable blur factorizes), so the full blur is needed only for inspection. */
#ifndef SI_POST_CONGESTION_H
#define SI_POST_CONGESTION_H

#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int k;                  /* levels, 2..256 */
    double sample_fraction; /* (0, 1] */
    uint64_t seed;
    double canny_lo, canny_hi;
    int blur_size; /* odd, 1..SI_CONGESTION_MAX_BLUR */
    double blur_sigma;
} si_congestion_params;

#define SI_CONGESTION_MAX_BLUR 1025

/* Defaults 4, 0.05, 12345, 100, 200, 71, 7. */
si_congestion_params si_congestion_defaults(void);

/* The parameters as the result's post_params and the resume key spell them
 * ("congestion k=4 sample=0.05 ..."); a resumed run compares this string, so it never changes.
 * Writes at most cap bytes into buf, NUL-terminated. */
void si_congestion_params_format(const si_congestion_params *p, char *buf, size_t cap);

/* Bytes of scratch for one (h, w) map; 0 if h or w is not positive or the size overflows. */
size_t si_congestion_scratch_size(int h, int w);

/* Borrows map (H, W) and scratch (at least si_congestion_scratch_size(h, w) bytes, any alignment,
 * contents ignored); writes *score and *map_mean. p may be NULL for the defaults. Returns
 * SI_ERR_ARG (message set) for bad sizes, parameters or non-finite values. */
si_status si_congestion_score(const float *map, int h, int w, const si_congestion_params *p,
                              void *scratch, double *score, double *map_mean);

/* The stages, for tests and inspection. All borrow their inputs and write caller buffers. */

/* Normalize + k-means + label scaling: labels (H, W) uint8. scratch as for si_congestion_score. */
si_status si_congestion_labels(const float *map, int h, int w, const si_congestion_params *p,
                               void *scratch, uint8_t *labels);
/* Canny of a uint8 map into edges (H, W), 0 or 255. scratch as for si_congestion_score. */
si_status si_congestion_canny(const uint8_t *src, int h, int w, double lo, double hi, void *scratch,
                              uint8_t *edges);
/* Full separable Gaussian blur of a uint8 map into out (H, W) double; tmp holds H*W doubles. */
si_status si_congestion_blur(const uint8_t *src, int h, int w, int size, double sigma, double *tmp,
                             double *out);

#ifdef __cplusplus
}
#endif

#endif
