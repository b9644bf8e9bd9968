/* The narrow-channel convolution (cuda/narrowconv.cu) against a plain C reference in double:
 * y = act(conv(x, w) + b + z) on seeded random operands in FP32, FP16 and BF16. The shapes are
 * LeViT's stem (3 -> 16 -> 32 -> 64, 3x3 at stride 2) cut to small images, and the kernel's other
 * paths: x channel-last with 16-byte vectors and through NCHW strides one value at a time, 8 and
 * 16 output channels a thread, 1x1 kernels, asymmetric padding, a residual, no bias, and more
 * blocks than the GPU holds at once. The filters' padded channels (wc > c) are NaN, so a read of
 * them shows; outputs are poisoned before each run, and a second run must give the same bits.
 * Skipped without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include "cuda/cuda.h"
#include "cuda/kernels.cuh"
#include "cuda/narrowconv.cuh"
#include "tests/test_util.h"

static void put(float *p, float v) {
    *p = v;
}
static void put(__half *p, float v) {
    *p = __float2half_rn(v);
}
static void put(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
}
static double get(float v) {
    return v;
}
static double get(__half v) {
    return __half2float(v);
}
static double get(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

typedef struct {
    const char *name;
    int n, c, h, w, m, k, stride, pt, pl, pb, pr, wc;
    bool nchw, bias, res;
    int act; /* si_act_kind */
} ncase;

static double act_ref(int kind, double v) {
    if (kind == SI_ACT_RELU) return v > 0 ? v : 0;
    if (kind == SI_ACT_HARDSWISH) return v * fmin(fmax(v + 3, 0), 6) / 6;
    return v;
}

template <typename T> static void check_case(int type, const ncase &k, unsigned seed) {
    si_conv_shape s;
    memset(&s, 0, sizeof s);
    s.n = k.n, s.c = k.c, s.h = k.h, s.w = k.w, s.m = k.m, s.kh = s.kw = k.k, s.group = 1;
    s.sh = s.sw = k.stride, s.dh = s.dw = 1, s.pt = k.pt, s.pl = k.pl, s.pb = k.pb, s.pr = k.pr;
    s.oh = (k.h + k.pt + k.pb - k.k) / k.stride + 1;
    s.ow = (k.w + k.pl + k.pr - k.k) / k.stride + 1;
    const size_t nx = (size_t)k.n * k.c * k.h * k.w, nw = (size_t)k.m * k.k * k.k * k.wc,
                 ny = (size_t)k.n * s.oh * s.ow * k.m;
    std::vector<T> hx(nx), hw(nw), hb(k.m), hz(ny), hy(ny), hy2(ny);
    for (auto &v : hx) put(&v, 2.f * test_randf(&seed));
    for (size_t i = 0; i < nw; i++) put(&hw[i], i % k.wc < (size_t)k.c ? test_randf(&seed) : NAN);
    for (auto &v : hb) put(&v, 0.5f * test_randf(&seed));
    for (auto &v : hz) put(&v, test_randf(&seed));
    si_nconv_args a;
    memset(&a, 0, sizeof a);
    a.s = s;
    int64_t st[4] = {(int64_t)k.c * k.h * k.w, 1, (int64_t)k.w * k.c, k.c}; /* n, c, y, x */
    if (k.nchw) st[1] = (int64_t)k.h * k.w, st[2] = k.w, st[3] = 1;
    memcpy(a.xst, st, sizeof st);
    a.wc = k.wc;
    a.act.kind = (si_act_kind)k.act;
    void *dx, *dw, *db, *dz, *dy;
    cudaMalloc(&dx, nx * sizeof(T));
    cudaMalloc(&dw, nw * sizeof(T));
    cudaMalloc(&db, k.m * sizeof(T));
    cudaMalloc(&dz, ny * sizeof(T));
    cudaMalloc(&dy, ny * sizeof(T));
    cudaMemcpy(dx, hx.data(), nx * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw.data(), nw * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb.data(), k.m * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dz, hz.data(), ny * sizeof(T), cudaMemcpyHostToDevice);
    a.x = dx, a.w = dw, a.b = k.bias ? db : NULL, a.z = k.res ? dz : NULL, a.y = dy;
    CHECK_MSG(si_nconv_fits(&a), "%s: does not fit", k.name);
    for (int run = 0; run < 2; run++) {
        cudaMemset(dy, 0xff, ny * sizeof(T)); /* NaN in every type */
        cudaError_t e = si_k_nconv(0, type, &a);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        CHECK_MSG(e == cudaSuccess, "%s: %s", k.name, cudaGetErrorString(e));
        cudaMemcpy(run ? hy2.data() : hy.data(), dy, ny * sizeof(T), cudaMemcpyDeviceToHost);
    }
    CHECK_MSG(memcmp(hy.data(), hy2.data(), ny * sizeof(T)) == 0, "%s type %d: two runs differ",
              k.name, type);
    std::vector<double> ref(ny);
    double top = 0;
    for (int b = 0; b < k.n; b++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int m = 0; m < k.m; m++) {
                    double acc = k.bias ? get(hb[m]) : 0;
                    for (int r = 0; r < k.k; r++)
                        for (int q = 0; q < k.k; q++) {
                            int iy = oy * k.stride - k.pt + r, ix = ox * k.stride - k.pl + q;
                            if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                            for (int c = 0; c < k.c; c++)
                                acc += get(hx[b * st[0] + c * st[1] + iy * st[2] + ix * st[3]]) *
                                       get(hw[((size_t)(m * k.k + r) * k.k + q) * k.wc + c]);
                        }
                    size_t o = (((size_t)b * s.oh + oy) * s.ow + ox) * k.m + m;
                    if (k.res) acc += get(hz[o]);
                    ref[o] = act_ref(k.act, acc);
                    top = fmax(top, fabs(ref[o]));
                }
    /* the output's own rounding, relative to the largest value (accumulation is in float) */
    const double tol = (type == SI_GT_F32 ? 1e-5 : type == SI_GT_F16 ? 2e-3 : 1.6e-2) * top;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < ny; i++) {
        double d = fabs(get(hy[i]) - ref[i]);
        if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
    }
    CHECK_MSG(worst <= tol, "%s type %d: |y - ref| %g at %zu (y %g, ref %g), tolerance %g", k.name,
              type, worst, at, get(hy[at]), ref[at], tol);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(db);
    cudaFree(dz);
    cudaFree(dy);
}

/* what the launcher refuses: a shape outside the kernel's, a misaligned output */
static void check_refusals(void) {
    si_nconv_args a;
    memset(&a, 0, sizeof a);
    si_conv_shape s = {2, 3, 8, 8, 16, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, 4, 4};
    a.s = s;
    int64_t st[4] = {192, 1, 24, 3};
    memcpy(a.xst, st, sizeof st);
    a.wc = 3;
    void *buf;
    cudaMalloc(&buf, 4096);
    a.x = a.w = a.y = buf;
    CHECK(si_nconv_fits(&a));
    a.y = (char *)buf + 2;
    CHECK(!si_nconv_fits(&a) && si_k_nconv(0, SI_GT_F16, &a) == cudaErrorInvalidValue);
    a.y = buf;
    a.s.c = SI_NCONV_MAX_C + 1, a.wc = a.s.c;
    CHECK(!si_nconv_fits(&a));
    a.s.c = 3, a.wc = 2; /* filters narrower than the input */
    CHECK(!si_nconv_fits(&a));
    a.wc = 3, a.s.m = 12; /* not a multiple of 8 */
    CHECK(!si_nconv_fits(&a));
    a.s.m = 16, a.s.kh = a.s.kw = 5;
    CHECK(!si_nconv_fits(&a));
    cudaFree(buf);
}

int main(void) {
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    const ncase cases[] = {
        /* name            n  c   h   w   m  k  s pt pl pb pr wc nchw  bias   res    act */
        {"stem1 levit", 2, 3, 30, 30, 16, 3, 2, 1, 1, 1, 1, 8, false, true, false,
         SI_ACT_HARDSWISH},
        {"stem2 levit", 2, 16, 15, 15, 32, 3, 2, 1, 1, 1, 1, 16, false, true, false,
         SI_ACT_HARDSWISH},
        {"stem3 levit", 2, 32, 8, 8, 64, 3, 2, 1, 1, 1, 1, 32, false, true, false,
         SI_ACT_HARDSWISH},
        {"nchw residual", 3, 5, 9, 11, 24, 3, 1, 1, 1, 1, 1, 5, true, true, true, SI_ACT_RELU},
        {"1x1 raw", 2, 8, 7, 6, 8, 1, 1, 0, 0, 0, 0, 8, false, false, false, SI_ACT_NONE},
        {"asymmetric pads", 2, 3, 10, 9, 40, 3, 2, 0, 1, 1, 0, 8, false, true, false, SI_ACT_RELU},
        {"many blocks", 64, 3, 48, 48, 16, 3, 2, 1, 1, 1, 1, 8, false, true, true,
         SI_ACT_HARDSWISH},
    };
    unsigned seed = 7;
    for (const ncase &k : cases) {
        check_case<float>(SI_GT_F32, k, seed++);
        check_case<__half>(SI_GT_F16, k, seed++);
        check_case<__nv_bfloat16>(SI_GT_BF16, k, seed++);
    }
    check_refusals();
    return test_finish();
}
