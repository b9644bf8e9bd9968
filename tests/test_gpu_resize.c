/* The GPU resize (cuda/resize.cu) against the CPU's (si_resize_crop) on seeded random images of
 * awkward sizes packed back to back as the pipeline packs them: up- and downscales with 3 to 15
 * taps, panoramas both ways, an image the size of its crop, an empty row; with each filter,
 * BILINEAR and BICUBIC. An image whose filter is wider than the GPU takes (BICUBIC's 21 taps on
 * 1800x1200) goes as the pipeline sends it: resized on the CPU, packed as a crop that the GPU
 * resizes to itself. Bound: 0, the kernel runs the CPU's integer arithmetic (io/resample.h);
 * the output is poisoned first. */
#include <string.h>

#include "cuda/cuda.h"
#include "io/jpeg.h"
#include "io/resample.h"
#include "tests/test_util.h"

enum { RESIZE = 256, CH = 224, CW = 224 };

/* w, h of the decoded images; 0x0 is a failed row */
static const int sizes[][2] = {{500, 375},  {375, 500}, {256, 256}, {224, 224},  {1999, 257},
                               {300, 1700}, {0, 0},     {640, 480}, {1024, 768}, {1800, 1200},
                               {257, 1001}, {333, 256}, {896, 896}, {512, 384}};
enum { N = sizeof sizes / sizeof sizes[0] };

/* Image i's item with filter interp, its pixels at *used in pool (advanced). Random pixels, or
 * when the filter is too wide for the GPU the CPU's crop of them, as the pipeline's spill does
 * (counted in *spilled). */
static si_rs_item place(int i, si_interp interp, uint8_t *pool, size_t *used, unsigned *seed,
                        int *spilled) {
    si_rs_item it = {0};
    int w = sizes[i][0], h = sizes[i][1];
    if (w == 0) return it;
    int fits = si_rs_item_make(w, h, RESIZE, interp, CH, CW, &it);
    CHECK_MSG(fits, "image %d: %dx%d", i, w, h);
    /* BILINEAR takes every image here; BICUBIC all but 1800x1200 (4.7x down: 21 taps) */
    CHECK_MSG(si_rs_gpu_fits(&it) == (interp == SI_INTERP_BILINEAR || w != 1800),
              "image %d: %dx%d %s: taps %d x %d", i, w, h, si_interp_name(interp),
              si_rs_ksize(it.w, it.rw, interp), si_rs_ksize(it.h, it.rh, interp));
    size_t n = (size_t)w * h * 3;
    uint8_t *px = pool + *used;
    for (size_t b = 0; b < n; b++) px[b] = (uint8_t)(test_rand(seed) >> 9);
    bool identity = w == CW && h == CH; /* a CPU-resized crop packed as it is */
    if (!si_rs_gpu_fits(&it)) {
        uint8_t *crop = malloc((size_t)CH * CW * 3);
        si_preproc p = {.resize = RESIZE, .interp = interp, .crop_h = CH, .crop_w = CW};
        CHECK(si_resize_crop(px, w, h, &p, crop) == SI_OK);
        memcpy(px, crop, (size_t)CH * CW * 3);
        free(crop);
        it.w = CW, it.h = CH, identity = true;
        n = (size_t)CH * CW * 3;
        (*spilled)++;
    }
    if (identity) it.rw = it.w, it.rh = it.h, it.top = it.left = 0;
    it.off = *used;
    *used += n;
    return it;
}

static void check_filter(si_interp interp, unsigned seed) {
    size_t cap = 0;
    for (int i = 0; i < N; i++) cap += (size_t)sizes[i][0] * sizes[i][1] * 3;
    uint8_t *pool = malloc(cap);
    si_rs_item items[N];
    size_t used = 0;
    int spilled = 0;
    for (int i = 0; i < N; i++) items[i] = place(i, interp, pool, &used, &seed, &spilled);
    CHECK(spilled == (interp == SI_INTERP_BICUBIC));
    size_t crop = (size_t)CH * CW * 3;
    uint8_t *got = malloc(crop * N), *ref = malloc(crop);
    memset(got, 0xA5, crop * N);
    si_status st = si_cuda_resize_crop(pool, used, items, N, CH, CW, got);
    CHECK_MSG(st == SI_OK, "%s", si_error_msg());
    for (int i = 0; i < N && st == SI_OK; i++) {
        const uint8_t *g = got + crop * (size_t)i;
        const si_rs_item *it = &items[i];
        if (it->w == 0) {
            size_t nz = 0;
            for (size_t b = 0; b < crop; b++) nz += g[b] != 0;
            CHECK_MSG(nz == 0, "empty row %d: %zu bytes not zero", i, nz);
            continue;
        }
        si_preproc p = {.resize = it->rw == it->w && it->w == CW ? CW : RESIZE,
                        .interp = interp,
                        .crop_h = CH,
                        .crop_w = CW};
        CHECK(si_resize_crop(pool + it->off, it->w, it->h, &p, ref) == SI_OK);
        size_t bad = 0, first = 0;
        for (size_t b = 0; b < crop; b++)
            if (g[b] != ref[b] && bad++ == 0) first = b;
        CHECK_MSG(bad == 0,
                  "image %d (%dx%d, %s): %zu bytes differ from the CPU, first at %zu (%d vs %d)", i,
                  it->w, it->h, si_interp_name(interp), bad, first, g[first], ref[first]);
        printf("%-8s %4dx%-4d -> %4dx%-4d crop at (%d, %d), taps %d x %d: %s\n",
               si_interp_name(interp), it->w, it->h, it->rw, it->rh, it->top, it->left,
               si_rs_ksize(it->w, it->rw, interp), si_rs_ksize(it->h, it->rh, interp),
               bad ? "DIFFERS" : "identical to the CPU");
    }
    free(pool);
    free(got);
    free(ref);
}

int main(void) {
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    check_filter(SI_INTERP_BILINEAR, 20261123);
    check_filter(SI_INTERP_BICUBIC, 20261124);
    return test_finish();
}
