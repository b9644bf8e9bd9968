/* The CUDA backend's slot ring against the CPU backend, on a real model: seeded random pixels,
 * full and short batches, two batches in flight; FP32 within 1e-4 of the CPU (max|diff| over
 * max|cpu|), FP16 within 1e-2 relative L2 and the same top-1 on at least 99% of rows. Then the
 * steady state: 30 more batches through the ring may make no cudaMalloc, cudaFree or
 * cudaHostAlloc (the backend counts its own) and may not change the device's free memory
 * (which would show any library allocating behind our back). The same for --decode gpu's path
 * where the GPU has hardware JPEG decoders: batches of JPEGs through nvJPEG (src/decode/hwjpeg.h,
 * into the slots' device areas, on their streams) and the resize, whose outputs repeat bit for
 * bit. Usage: test_gpu_engine MODEL.onnx */
#include <string.h>
#include <turbojpeg.h>

#include "cuda/cuda.h"
#include "io/jpeg.h"
#include "decode/hwjpeg.h"
#include "engine/engine.h"
#include "tests/test_util.h"

#define B 8

static void fill(uint8_t *px, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++) px[i] = (uint8_t)(test_rand(seed) >> 9);
}

static void check_precision(const char *model, int prec) {
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    si_graph *g1, *g2;
    si_engine *gpu = NULL, *cpu = NULL;
    CHECK_MSG(si_graph_load(model, NULL, &g1) == SI_OK, "%s", si_error_msg());
    CHECK_MSG(si_graph_load(model, NULL, &g2) == SI_OK, "%s", si_error_msg());
    si_engine_opts o = {.precision = prec, .slots = 2, .pixels = true};
    memcpy(o.mean, mean, sizeof mean);
    memcpy(o.std, std, sizeof std);
    if (si_engine_create_opts(g1, "cuda", B, &o, &gpu) != SI_OK ||
        si_engine_create(g2, "cpu", B, &cpu) != SI_OK) {
        CHECK_MSG(0, "engine: %s", si_error_msg());
        si_engine_free(gpu);
        si_engine_free(cpu);
        return;
    }
    si_shape in = si_engine_graph(gpu)->values[si_engine_graph(gpu)->inputs[0]].shape;
    int h = (int)in.dims[2], w = (int)in.dims[3];
    size_t img = (size_t)h * w * 3;
    si_shape os;
    si_engine_output(gpu, 0, &os);
    int64_t per = si_shape_numel(&os) / os.dims[0];
    uint8_t *px = malloc(img * B * 4);
    unsigned seed = 20261122u + (unsigned)prec;
    const int rows[4] = {B, B, 5, B}; /* a short batch among full ones */
    fill(px, img * B * 4, &seed);
    /* two in flight: submit k, then collect k - 1 */
    const float *outs[SI_MAX_OUTPUTS];
    double worst = 0, l2d = 0, l2r = 0;
    int top1_same = 0, top1_n = 0;
    for (int k = 0; k <= 4; k++) {
        if (k < 4) {
            memcpy(si_engine_pixels(gpu, k % 2), px + img * B * (size_t)k, img * (size_t)rows[k]);
            CHECK_MSG(si_engine_submit(gpu, k % 2, rows[k]) == SI_OK, "%s", si_error_msg());
        }
        if (k == 0) continue;
        int q = k - 1;
        CHECK_MSG(si_engine_collect(gpu, q % 2, outs) == SI_OK, "%s", si_error_msg());
        float *x = si_engine_input(cpu, 0);
        for (int r = 0; r < rows[q]; r++)
            si_normalize_chw(px + img * (B * (size_t)q + (size_t)r), h, w, mean, std,
                             x + img * (size_t)r);
        CHECK(si_engine_run(cpu, rows[q]) == SI_OK);
        const float *ref = si_engine_output(cpu, 0, NULL);
        double md = 0, mr = 0;
        for (int64_t i = 0; i < rows[q] * per; i++) {
            double d = fabs((double)outs[0][i] - ref[i]);
            if (!(d <= md)) md = d;
            if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
            l2d += d * d;
            l2r += (double)ref[i] * ref[i];
        }
        for (int r = 0; r < rows[q]; r++) {
            int a = 0, b = 0;
            for (int64_t i = 1; i < per; i++) {
                if (outs[0][r * per + i] > outs[0][r * per + a]) a = (int)i;
                if (ref[r * per + i] > ref[r * per + b]) b = (int)i;
            }
            top1_same += a == b;
            top1_n++;
        }
        if (md / mr > worst) worst = md / mr;
    }
    double rel_l2 = sqrt(l2d / (l2r > 0 ? l2r : 1));
    printf("%s: max|gpu - cpu| / max|cpu| = %.3g, relative L2 %.3g, top-1 %d of %d the same\n",
           si_precision_name(prec), worst, rel_l2, top1_same, top1_n);
    if (prec == SI_PREC_FP32)
        CHECK_MSG(worst <= 1e-4, "fp32: %g", worst);
    else if (prec == SI_PREC_FP16)
        CHECK_MSG(rel_l2 <= 1e-2 && top1_same * 100 >= top1_n * 99, "fp16: L2 %g, top-1 %d/%d",
                  rel_l2, top1_same, top1_n);
    else /* bf16 keeps 8 bits of mantissa to fp16's 11: a looser bound, and no top-1 rule (the
          * random-weight model's logits on random pixels are too close for 8 bits to order) */
        CHECK_MSG(rel_l2 <= 3e-2, "bf16: relative L2 %g", rel_l2);

    /* the steady state allocates nothing */
    long calls = si_cuda_backend_alloc_calls();
    size_t used0 = 0, used1 = 0, total = 0;
    CHECK(si_cuda_mem_info(&used0, &total) == SI_OK);
    for (int k = 0; k < 30; k++) {
        if (k >= 2) CHECK(si_engine_collect(gpu, k % 2, outs) == SI_OK);
        fill(si_engine_pixels(gpu, k % 2), img * B, &seed);
        CHECK(si_engine_submit(gpu, k % 2, k % 7 == 3 ? 3 : B) == SI_OK);
    }
    CHECK(si_engine_collect(gpu, 0, outs) == SI_OK && si_engine_collect(gpu, 1, outs) == SI_OK);
    CHECK(si_cuda_mem_info(&used1, &total) == SI_OK);
    CHECK_MSG(si_cuda_backend_alloc_calls() == calls, "%ld allocation calls in the steady state",
              si_cuda_backend_alloc_calls() - calls);
    /* compute-sanitizer allocates on the device as it tracks launches (4 MiB over these 30
     * batches on an H100): under it, only our own calls are counted */
    if (!getenv("SI_TEST_UNDER_SANITIZER"))
        CHECK_MSG(used1 == used0, "device memory in use went from %zu to %zu bytes", used0, used1);
    printf("%s: 30 batches in the steady state: %ld allocation calls, device memory in use %zu -> "
           "%zu bytes\n",
           si_precision_name(prec), si_cuda_backend_alloc_calls() - calls, used0, used1);
    free(px);
    si_engine_free(gpu);
    si_engine_free(cpu);
}

/* --decode gpu's path: B JPEGs of different sizes decoded by the hardware into the slots'
 * decode areas and resized there, 30 batches over 2 slots (the first decode of each waits for its
 * slot's decoder state). After each slot's first batch no allocation call of the backend's and no
 * change in the device memory in use (nvJPEG's own allocations, which no allocator hook of ours
 * sees, would show there); every batch's outputs equal the first's bit for bit. */
static void check_jpeg_steady(const char *model, bool exact) {
    char why[256];
    if (!si_cuda_hw_jpeg(why, sizeof why)) {
        printf("jpeg: no hardware JPEG decoder here (%s): skipped\n", why);
        return;
    }
    si_graph *g;
    si_engine *gpu = NULL;
    CHECK_MSG(si_graph_load(model, NULL, &g) == SI_OK, "%s", si_error_msg());
    si_engine_opts o = {.precision = SI_PREC_FP16,
                        .slots = 2,
                        .pixels = true,
                        .pack_per_image = (size_t)1 << 20,
                        .device_area_per_image = SI_GPU_DECODE_PER_IMAGE};
    for (int c = 0; c < 3; c++) o.mean[c] = 0.45f, o.std[c] = 0.225f;
    si_hwjpeg *hw = si_hwjpeg_create(2, B, exact, 2);
    CHECK_MSG(hw && si_hwjpeg_exact(hw) == exact && si_hwjpeg_parts(hw) == 2, "%s", si_error_msg());
    if (!hw || si_engine_create_opts(g, "cuda", B, &o, &gpu) != SI_OK) {
        CHECK_MSG(0, "engine: %s", si_error_msg());
        si_hwjpeg_free(hw);
        return;
    }
    si_shape in = si_engine_graph(gpu)->values[si_engine_graph(gpu)->inputs[0]].shape;
    int ch = (int)in.dims[2], cw = (int)in.dims[3];
    si_shape os;
    si_engine_output(gpu, 0, &os);
    size_t out_n = (size_t)si_shape_numel(&os) / (size_t)os.dims[0] * B;
    uint8_t *jpg[B];
    unsigned long len[B];
    int jw[B], jh[B];
    unsigned seed = 20261126u;
    tjhandle tj = tjInitCompress();
    for (int j = 0; j < B; j++) { /* gradients with noise, 4:2:0 and 4:4:4 */
        jw[j] = 160 + 37 * j, jh[j] = 120 + 23 * j;
        uint8_t *px = malloc((size_t)jw[j] * (size_t)jh[j] * 3);
        for (int y = 0; y < jh[j]; y++)
            for (int x = 0; x < jw[j] * 3; x++)
                px[(size_t)y * (size_t)jw[j] * 3 + (size_t)x] =
                    (uint8_t)((x / 3 + 2 * y + 40 * (x % 3)) + (test_rand(&seed) & 15));
        jpg[j] = NULL;
        len[j] = 0;
        CHECK(tjCompress2(tj, px, jw[j], 0, jh[j], TJPF_RGB, &jpg[j], &len[j],
                          j % 3 ? TJSAMP_420 : TJSAMP_444, 90, 0) == 0);
        free(px);
    }
    tjDestroy(tj);
    float *first = malloc(out_n * sizeof(float));
    const float *outs[SI_MAX_OUTPUTS];
    long calls = 0;
    size_t used0 = 0, used1 = 0, total = 0;
    int same = 0, collected = 0;
    for (int k = 0; k < 32; k++) {
        int slot = k % 2;
        if (k >= 2) {
            CHECK_MSG(si_engine_collect(gpu, slot, outs) == SI_OK, "%s", si_error_msg());
            if (k == 2) memcpy(first, outs[0], out_n * sizeof(float));
            same += !memcmp(first, outs[0], out_n * sizeof(float));
            collected++;
        }
        if (k == 2) { /* both slots have decoded once */
            calls = si_cuda_backend_alloc_calls();
            CHECK(si_cuda_mem_info(&used0, &total) == SI_OK);
        }
        if (k >= 30) continue;
        si_slot_pack pk;
        CHECK(si_engine_pack(gpu, slot, &pk) && pk.area_cap >= B * SI_GPU_DECODE_PER_IMAGE);
        si_jpeg_jobs *q = si_hwjpeg_jobs(hw, slot);
        CHECK(q && q->n == 0);
        uint8_t *pool = pk.host;
        si_rs_item *items = pk.items;
        size_t dec = 0, src = pk.cap;
        for (int j = 0; j < B; j++) { /* bitstreams at the pool's end, decodes in the area */
            src -= len[j];
            memcpy(pool + src, jpg[j], len[j]);
            size_t at = (dec + 255) & ~(size_t)255;
            int sub = j % 3 ? 2 : 1; /* 4:2:0 or 4:4:4, as compressed above */
            dec = at + si_jpeg_area_bytes(jw[j], jh[j], sub, sub, exact);
            CHECK(dec <= pk.area_cap);
            q->src[j] = src, q->len[j] = len[j], q->dst[j] = pk.area_off + at;
            q->w[j] = jw[j], q->h[j] = jh[j], q->sub[j] = sub | sub << 8;
            CHECK(si_rs_item_make(jw[j], jh[j], ch * 8 / 7, SI_INTERP_BILINEAR, ch, cw, &items[j]));
            items[j].off = q->dst[j];
            q->n++;
        }
        CHECK_MSG(si_hwjpeg_decode(hw, slot, &pk) == SI_OK, "%s", si_error_msg());
        /* every image on the hardware: nothing to upload, the resize still runs */
        CHECK_MSG(si_engine_submit_packed(gpu, slot, B, 0) == SI_OK, "%s", si_error_msg());
    }
    CHECK(si_cuda_mem_info(&used1, &total) == SI_OK);
    CHECK_MSG(si_cuda_backend_alloc_calls() == calls,
              "jpeg: %ld allocation calls in the steady "
              "state",
              si_cuda_backend_alloc_calls() - calls);
    if (!getenv("SI_TEST_UNDER_SANITIZER"))
        CHECK_MSG(used1 == used0, "jpeg: device memory in use went from %zu to %zu bytes", used0,
                  used1);
    CHECK_MSG(same == collected, "jpeg: %d of %d batches' outputs equal the first's", same,
              collected);
    /* and they are the photos' (not the unused pixel buffer's zeros): not all rows alike */
    size_t per = out_n / B;
    CHECK_MSG(memcmp(first, first + per, per * sizeof(float)) != 0, "jpeg: rows 0 and 1 equal");
    printf("jpeg%s: %d batches of %d JPEGs through the hardware decoder: %ld allocation calls "
           "after the first two, device memory in use %zu -> %zu bytes, outputs repeat bit for "
           "bit\n",
           exact ? " (exact)" : "", collected, B, si_cuda_backend_alloc_calls() - calls, used0,
           used1);
    for (int j = 0; j < B; j++) tjFree(jpg[j]);
    free(first);
    si_hwjpeg_free(hw);
    si_engine_free(gpu);
}

int main(int argc, char **argv) {
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    if (argc != 2) {
        fprintf(stderr, "usage: test_gpu_engine MODEL.onnx\n");
        return 2;
    }
    check_precision(argv[1], SI_PREC_FP32);
    check_precision(argv[1], SI_PREC_FP16);
    check_precision(argv[1], SI_PREC_BF16);
    check_jpeg_steady(argv[1], false);
    check_jpeg_steady(argv[1], true);
    return test_finish();
}
