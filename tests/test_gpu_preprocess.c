/* The GPU preprocessing kernel against its CPU twin (si_normalize_chw) on seeded random
 * images of awkward sizes; the output is poisoned first so unwritten elements show. And --decode
 * gpu's recovery of libjpeg-turbo's chroma (cuda/jpeg.cu's kernels) against io/yuv.h on the
 * host, bit for bit. */
#include <string.h>

#include "cuda/cuda.h"
#include "io/jpeg.h"
#include "io/yuv.h"
#include "tests/test_util.h"

/* Replicated-chroma RGB as the hardware decoder gives it, from random planes with many values
 * near the ends (so that whole blocks clamp and the search runs), recovered on the GPU and on the
 * host: the same pixels. */
static void test_unreplicate(unsigned *seed) {
    static const int shapes[][4] = {{500, 375, 2, 2}, {67, 45, 2, 2}, {333, 201, 2, 1},
                                    {97, 130, 1, 2},  {7, 5, 2, 2},   {640, 1, 2, 1}};
    long searched = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const si_yuv_shape s = {shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3]};
        const int cw = si_yuv_cw(&s), ch = si_yuv_ch(&s);
        const size_t px = (size_t)s.w * (size_t)s.h;
        uint8_t *rgb = malloc(px * 3), *ref = malloc(px * 3);
        uint8_t *cb = malloc((size_t)cw * ch * 2), *cr = cb + (size_t)cw * ch;
        for (int i = 0; i < cw * ch; i++) { /* chroma smooth-ish, luma often at the ends */
            cb[i] = (uint8_t)(100 + (test_rand(seed) % 56) + (i % cw) % 40);
            cr[i] = (uint8_t)(90 + (test_rand(seed) % 80));
        }
        for (int y = 0; y < s.h; y++)
            for (int x = 0; x < s.w; x++) {
                unsigned r = test_rand(seed);
                int luma = r % 4 == 0   ? 250 + (int)(r >> 8) % 6
                           : r % 4 == 1 ? (int)(r >> 8) % 6
                                        : (int)(r >> 8) % 256;
                int o[3];
                size_t at = (size_t)(y / s.vs) * (size_t)cw + (size_t)(x / s.hs);
                si_yuv_offsets(cb[at], cr[at], o);
                for (int c = 0; c < 3; c++)
                    rgb[((size_t)y * s.w + x) * 3 + c] = si_yuv_clamp(luma + o[c]);
            }
        memcpy(ref, rgb, px * 3);
        searched += si_yuv_unreplicate_image(ref, &s, cb, cr, NULL);
        si_status st = si_cuda_unreplicate(rgb, s.w, s.h, s.hs, s.vs);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        size_t differ = 0;
        for (size_t i = 0; i < px * 3; i++) differ += rgb[i] != ref[i];
        CHECK_MSG(differ == 0, "unreplicate %dx%d, %dx%d: %zu values differ from the host's", s.hs,
                  s.vs, s.w, s.h, differ);
        free(rgb);
        free(ref);
        free(cb);
    }
    CHECK_MSG(searched > 1000, "only %ld blocks clamped whole: the search was hardly run",
              searched);
    printf("unreplicate: GPU = host on 6 images, %ld blocks searched\n", searched);
}

int main(void) {
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    char info[256];
    if (si_cuda_device_info(0, info, sizeof info) == SI_OK) printf("device 0: %s\n", info);
    unsigned seed = 20261122;
    const int sizes[][3] = {{1, 224, 224}, {3, 17, 31}, {8, 64, 48}};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    for (unsigned t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int n = sizes[t][0], h = sizes[t][1], w = sizes[t][2];
        size_t px = (size_t)n * h * w;
        uint8_t *src = malloc(px * 3);
        float *ref = malloc(px * 3 * sizeof(float)), *got = malloc(px * 3 * sizeof(float));
        for (size_t i = 0; i < px * 3; i++) src[i] = (uint8_t)(test_rand(&seed) >> 11);
        for (size_t i = 0; i < px * 3; i++) got[i] = NAN; /* poison */
        for (int i = 0; i < n; i++)
            si_normalize_chw(src + (size_t)i * h * w * 3, h, w, mean, std,
                             ref + (size_t)i * 3 * h * w);
        si_status st = si_cuda_normalize(src, n, h, w, mean, std, got);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        double maxerr = 0;
        for (size_t i = 0; i < px * 3; i++) {
            double e = fabs((double)got[i] - ref[i]);
            if (!(e <= maxerr)) maxerr = isnan(e) ? INFINITY : e;
        }
        CHECK_MSG(maxerr <= 2e-6, "%dx%dx%d: max error %g", n, h, w, maxerr);
        printf("normalize %dx%dx%d: max |gpu - cpu| = %.3g\n", n, h, w, maxerr);
        free(src);
        free(ref);
        free(got);
    }
    test_unreplicate(&seed);
    return test_finish();
}
