/* The GPU preprocessing kernel against its CPU twin (si_normalize_chw) on seeded random
 * images of awkward sizes; the output is poisoned first so unwritten elements show. */
#include <string.h>

#include "cuda/cuda.h"
#include "io/jpeg.h"
#include "tests/test_util.h"

int main(void) {
    int dev = si_cuda_device_count();
    if (dev == 0) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
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
    return test_finish();
}
