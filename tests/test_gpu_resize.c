/* The GPU resize (cuda/resize.cu) against the CPU's (si_resize_crop) on seeded random images of
 * awkward sizes packed back to back as the pipeline packs them: up- and downscales with 3 to 15
 * taps, panoramas both ways, an image the size of its crop, an empty row. Bound: 0, the kernel
 * runs the CPU's integer arithmetic (io/resample.h); the output is poisoned first. */
#include <string.h>

#include "cuda/cuda.h"
#include "io/jpeg.h"
#include "io/resample.h"
#include "tests/test_util.h"

int main(void) {
    if (si_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    unsigned seed = 20261123;
    const int resize = 256, ch = 224, cw = 224;
    /* w, h of the decoded images; 0x0 is a failed row */
    const int sizes[][2] = {{500, 375},  {375, 500},   {256, 256},  {224, 224},
                            {1999, 257}, {300, 1700},  {0, 0},      {640, 480},
                            {1024, 768}, {1800, 1200}, {257, 1001}, {333, 256}};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    si_rs_item items[sizeof sizes / sizeof sizes[0]];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        si_rs_item it = {0};
        if (sizes[i][0] > 0) {
            int fits =
                si_rs_item_make(sizes[i][0], sizes[i][1], resize, SI_INTERP_BILINEAR, ch, cw, &it);
            CHECK_MSG(fits && si_rs_gpu_fits(&it), "image %d: %dx%d", i, sizes[i][0], sizes[i][1]);
            if (sizes[i][0] == 224) { /* the identity: a CPU-resized crop packed as it is */
                it.rw = it.w, it.rh = it.h, it.top = it.left = 0;
            }
            it.off = used;
            used += (size_t)it.w * it.h * 3;
        }
        items[i] = it;
    }
    uint8_t *pool = malloc(used);
    for (size_t i = 0; i < used; i++) pool[i] = (uint8_t)(test_rand(&seed) >> 9);
    size_t crop = (size_t)ch * cw * 3;
    uint8_t *got = malloc(crop * (size_t)n), *ref = malloc(crop);
    memset(got, 0xA5, crop * (size_t)n);
    si_status st = si_cuda_resize_crop(pool, used, items, n, ch, cw, got);
    CHECK_MSG(st == SI_OK, "%s", si_error_msg());
    for (int i = 0; i < n && st == SI_OK; i++) {
        const uint8_t *g = got + crop * (size_t)i;
        if (items[i].w == 0) {
            size_t nz = 0;
            for (size_t b = 0; b < crop; b++) nz += g[b] != 0;
            CHECK_MSG(nz == 0, "empty row %d: %zu bytes not zero", i, nz);
            continue;
        }
        si_preproc p = {.resize = items[i].rw == items[i].w && items[i].w == cw ? cw : resize,
                        .crop_h = ch,
                        .crop_w = cw};
        CHECK(si_resize_crop(pool + items[i].off, items[i].w, items[i].h, &p, ref) == SI_OK);
        size_t bad = 0, first = 0;
        for (size_t b = 0; b < crop; b++)
            if (g[b] != ref[b] && bad++ == 0) first = b;
        CHECK_MSG(bad == 0,
                  "image %d (%dx%d): %zu bytes differ from the CPU, first at %zu (%d vs %d)", i,
                  items[i].w, items[i].h, bad, first, g[first], ref[first]);
        printf("%4dx%-4d -> %4dx%-4d crop at (%d, %d), taps %d x %d: %s\n", items[i].w, items[i].h,
               items[i].rw, items[i].rh, items[i].top, items[i].left,
               si_rs_ksize(items[i].w, items[i].rw, items[i].interp),
               si_rs_ksize(items[i].h, items[i].rh, items[i].interp),
               bad ? "DIFFERS" : "identical to the CPU");
    }
    free(pool);
    free(got);
    free(ref);
    return test_finish();
}
