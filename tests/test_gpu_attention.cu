/* The fused attention kernels (cuda/attention.cu, cuda/attention_sm90.cu) on more matrices than
 * the GPU has blocks for at once, against a plain C reference in double: Y = softmax(scale Q K^T)
 * V on seeded random FP16 and BF16 operands. The op cases and the models' parity runs hold a few
 * dozen matrices, so k_flash_res's blocks there take one matrix each and never reload a slot;
 * here every block works through many (a ViT's 197 tokens, DINOv2's 257, K given transposed), so
 * the loads by the last warp out, the ready flags and the reuse of slots all run. On an H100 the
 * wgmma kernel takes the shapes it runs (up to 272 keys, K as rows); CTest runs the test again
 * with SI_ATTN90=0 for the mma.sync kernels on the same shapes. Outputs are poisoned before each
 * run, and a second run must give the same bits (which warp takes which rows must not matter).
 * Skipped without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "base/half.h"
#include "cuda/attention.cuh"
#include "cuda/cuda.h"
#include "tests/test_util.h"

static uint16_t to16(int t, float f) {
    if (t == SI_GT_F16) return si_half_from_float(f);
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* BF16, nearest even */
}
static float from16(int t, uint16_t h) {
    if (t == SI_GT_F16) return si_half_to_float(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* nb matrices Q (t, d), K (s, d) or K^T (d, s), V (s, d), each packed after the other; checks
 * every matrix of the last round of blocks (all of them reloaded slots) and every 7th before */
static void check_one(int type, int64_t nb, int t, int s, bool kt, unsigned seed) {
    const int d = 64;
    const size_t nq = (size_t)nb * t * d, nk = (size_t)nb * s * d;
    std::vector<uint16_t> hq(nq), hk(nk), hv(nk), hy(nq), hy2(nq);
    for (auto &x : hq) x = to16(type, 2.f * test_randf(&seed));
    for (auto &x : hk) x = to16(type, 2.f * test_randf(&seed));
    for (auto &x : hv) x = to16(type, test_randf(&seed));
    void *dq, *dk, *dv, *dy;
    cudaMalloc(&dq, nq * 2);
    cudaMalloc(&dk, nk * 2);
    cudaMalloc(&dv, nk * 2);
    cudaMalloc(&dy, nq * 2);
    cudaMemcpy(dq, hq.data(), nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk.data(), nk * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv.data(), nk * 2, cudaMemcpyHostToDevice);
    si_k_attn p;
    memset(&p, 0, sizeof p);
    p.nb = nb, p.t = t, p.s = s, p.d = p.dv = d;
    p.scale = 1.f / sqrtf((float)d);
    p.trans_b = !kt;
    p.nbd = 1;
    p.bdims[0] = nb;
    p.ost[0][0] = (int64_t)t * d, p.ost[1][0] = p.ost[2][0] = (int64_t)s * d;
    p.ost[3][0] = (int64_t)t * d;
    p.ld[0] = p.ld[2] = p.ld[3] = d;
    p.ld[1] = kt ? s : d; /* K^T's rows are its dims, s keys long */
    int sms = 0, dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    for (int run = 0; run < 2; run++) {
        cudaMemset(dy, 0xff, nq * 2); /* NaN in both types */
        cudaError_t e = si_k_attention(0, type, &p, dq, dk, dv, NULL, dy);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        CHECK_MSG(e == cudaSuccess, "%s", cudaGetErrorString(e));
        cudaMemcpy(run ? hy2.data() : hy.data(), dy, nq * 2, cudaMemcpyDeviceToHost);
    }
    CHECK_MSG(memcmp(hy.data(), hy2.data(), nq * 2) == 0,
              "type %d nb %lld t %d s %d: two runs differ", type, (long long)nb, t, s);
    double worst = 0, top = 0;
    std::vector<double> sc(s), q(t * d), k(s * d), v(s * d); /* one matrix, K as rows */
    for (int64_t b = 0; b < nb; b++) {
        if (b % 7 && b < nb - sms) continue;
        for (int i = 0; i < t * d; i++) q[i] = from16(type, hq[b * t * d + i]);
        for (int j = 0; j < s; j++)
            for (int c = 0; c < d; c++) {
                k[j * d + c] = from16(type, hk[b * s * d + (kt ? c * s + j : j * d + c)]);
                v[j * d + c] = from16(type, hv[b * s * d + j * d + c]);
            }
        for (int i = 0; i < t; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < s; j++) {
                double a = 0;
                for (int c = 0; c < d; c++) a += q[i * d + c] * k[j * d + c];
                sc[j] = a * p.scale;
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < s; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int c = 0; c < d; c++) {
                double r = 0;
                for (int j = 0; j < s; j++) r += sc[j] * v[j * d + c];
                r /= sum;
                double got = from16(type, hy[(b * t + i) * d + c]);
                worst = isnan(got) ? INFINITY : fmax(worst, fabs(got - r));
                top = fmax(top, fabs(r));
            }
        }
    }
    double rel = worst / top, bound = type == SI_GT_F16 ? 1e-2 : 3e-2;
    printf("  attention %s nb %lld t %d s %d%s: max|gpu - ref| / max|ref| = %.3g (bound %g)\n",
           type == SI_GT_F16 ? "fp16" : "bf16", (long long)nb, t, s, kt ? " K^T" : "", rel, bound);
    CHECK(rel <= bound);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dy);
}

int main(void) {
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    int sms = 0, dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    /* at least 5 slots' worth of matrices a block (4 slots at most stay resident) */
    const int64_t nb = 5 * (int64_t)sms + 37;
    unsigned seed = 1234;
    for (int type = SI_GT_F16; type <= SI_GT_BF16; type++) {
        check_one(type, nb, 197, 197, false, seed++); /* ViT-B/16, DeiT-S, CLIP */
        check_one(type, nb, 257, 257, false, seed++); /* DINOv2 ViT-S/14 at 224 */
        check_one(type, nb, 70, 90, true, seed++);    /* K^T from its own layout, t != s */
        /* the wgmma kernel's key widths (128, 208, 256, 256 + 16): keys filling the width,
         * masked ones, an odd number of 64-row tiles, a last tile of a row or two */
        check_one(type, nb, 64, 128, false, seed++);
        check_one(type, nb, 300, 250, false, seed++);
        check_one(type, nb, 130, 65, false, seed++);
        check_one(type, nb, 100, 272, false, seed++);
        check_one(type, nb, 200, 270, false, seed++);
    }
    return test_finish();
}
