/* The fused Linear + bias + activation kernels (cuda/linear_sm90.cu, CUTLASS on sm_90) against a
 * plain C reference in double: Y = act(X W + b) on seeded random FP16 and BF16 operands, every
 * activation (erf and tanh GELU, Swish with CLIP's alpha and SiLU's, none with and without a
 * residual C: Y = X W + b + C), shapes whose rows fill no tile and shapes of ViT-B's and
 * ConvNeXt's MLPs cut to fewer rows. Every tile variant must give
 * the same bits as the first, since init picks one by timing and a run must not depend on which
 * won. Outputs are poisoned before each run. Skipped without an sm_90 GPU or without CUTLASS. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "cuda/cuda.h"
#include "cuda/linear90.cuh"
#include "tests/test_util.h"

#ifdef SI_HAVE_LINEAR90

static uint16_t bf16_from_float(float f) { /* round to nearest even (no NaNs here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t to16(int type, float f) {
    return type == SI_LINEAR90_BF16 ? bf16_from_float(f) : si_half_from_float(f);
}
static float from16(int type, uint16_t h) {
    return type == SI_LINEAR90_BF16 ? bf16_to_float(h) : si_half_to_float(h);
}

static double act_ref(int act, double alpha, double v) {
    switch (act) {
    case SI_LINEAR90_GELU: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case SI_LINEAR90_GELU_TANH:
        return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case SI_LINEAR90_NONE: return v;
    default: return v / (1.0 + exp(-alpha * v));
    }
}

/* One shape, type and activation (with a residual C or without) through every variant; returns
 * how many ran. */
static int check_one(int type, int act, float alpha, bool res, int m, int k, int n, unsigned seed) {
    size_t nx = (size_t)m * k, nw = (size_t)k * n, ny = (size_t)m * n;
    uint16_t *hx = malloc(nx * 2), *hw = malloc(nw * 2), *hb = malloc((size_t)n * 2);
    uint16_t *hy = malloc(ny * 2), *first = malloc(ny * 2), *hc = malloc(ny * 2);
    double *ref = malloc(ny * sizeof(double));
    /* values near 1 over sqrt(k): pre-activations of O(1), where the activations bend */
    float ws = 1.f / sqrtf((float)k);
    for (size_t i = 0; i < nx; i++) hx[i] = to16(type, 2.f * test_randf(&seed));
    for (size_t i = 0; i < nw; i++) hw[i] = to16(type, ws * test_randf(&seed));
    for (int i = 0; i < n; i++) hb[i] = to16(type, 0.5f * test_randf(&seed));
    for (size_t i = 0; i < ny; i++) hc[i] = to16(type, res ? 2.f * test_randf(&seed) : 0.f);
    double big = 0.0;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
            double s = from16(type, hb[c]) + from16(type, hc[(size_t)r * n + c]);
            for (int i = 0; i < k; i++)
                s += (double)from16(type, hx[(size_t)r * k + i]) *
                     from16(type, hw[(size_t)i * n + c]);
            ref[(size_t)r * n + c] = act_ref(act, alpha, s);
            if (fabs(ref[(size_t)r * n + c]) > big) big = fabs(ref[(size_t)r * n + c]);
        }
    void *dx = NULL, *dw = NULL, *db = NULL, *dc = NULL, *dy = NULL, *ws_d = NULL;
    size_t ws_bytes = 64u << 20;
    CHECK(cudaMalloc(&dx, nx * 2) == cudaSuccess && cudaMalloc(&dw, nw * 2) == cudaSuccess &&
          cudaMalloc(&db, (size_t)n * 2) == cudaSuccess && cudaMalloc(&dy, ny * 2) == cudaSuccess &&
          cudaMalloc(&dc, ny * 2) == cudaSuccess && cudaMalloc(&ws_d, ws_bytes) == cudaSuccess);
    cudaMemcpy(dx, hx, nx * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw, nw * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, (size_t)n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, hc, ny * 2, cudaMemcpyHostToDevice);
    si_linear90 p = {type, act, alpha, m, n, k, dx, dw, db, res ? dc : NULL, dy};
    int vs[16], nv = si_cuda_linear90_variants(&p, vs, 16), ran = 0;
    /* FP16 keeps 11 bits, BF16 8: a rounding of the output plus the accumulation's */
    double tol = type == SI_LINEAR90_BF16 ? 1e-2 : 2e-3;
    for (int v = 0; v < nv; v++) {
        size_t need = 0;
        if (!si_cuda_linear90_ok(&p, vs[v], &need)) continue;
        CHECK(need <= ws_bytes);
        cudaMemset(dy, 0xff, ny * 2); /* NaN in both types */
        CHECK(si_cuda_linear90_run(&p, vs[v], ws_d, NULL) == cudaSuccess);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaMemcpy(hy, dy, ny * 2, cudaMemcpyDeviceToHost);
        double worst = 0.0;
        for (size_t i = 0; i < ny; i++) {
            double d = fabs((double)from16(type, hy[i]) - ref[i]);
            if (!(d <= worst)) worst = d; /* NaN sticks */
        }
        CHECK_MSG(worst <= tol * big, "type %d act %d %dx%dx%d variant %d: max|diff| %g of %g",
                  type, act, m, k, n, vs[v], worst, big);
        if (ran == 0)
            memcpy(first, hy, ny * 2);
        else
            CHECK_MSG(!memcmp(first, hy, ny * 2),
                      "type %d act %d %dx%dx%d: variant %d's bits differ", type, act, m, k, n,
                      vs[v]);
        ran++;
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(db);
    cudaFree(dy);
    cudaFree(dc);
    cudaFree(ws_d);
    free(hc);
    free(hx);
    free(hw);
    free(hb);
    free(hy);
    free(first);
    free(ref);
    return ran;
}

int main(void) {
    int dev = 0, major = 0, minor = 0;
    TEST_SKIP_WITHOUT_GPU(si_cuda_device_count());
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9 || minor != 0) {
        printf("compute capability %d.%d, the fused kernels are sm_90's: skipped\n", major, minor);
        return TEST_SKIP_CODE;
    }
    /* (m, k, n): 74 tokens of a small MLP; ViT-B's, ConvNeXt-T's stage-1 and DeiT-S's fc1 on a
     * few hundred rows (none fills its last tile of 64, 128 or 256 rows) */
    static const int shapes[][3] = {
        {74, 64, 256}, {194, 768, 3072}, {300, 96, 384}, {500, 384, 1536}};
    static const struct {
        int act;
        float alpha;
        bool res;
    } acts[] = {{SI_LINEAR90_GELU, 1.f, false},     {SI_LINEAR90_GELU_TANH, 1.f, false},
                {SI_LINEAR90_SWISH, 1.702f, false}, {SI_LINEAR90_SWISH, 1.f, false},
                {SI_LINEAR90_NONE, 1.f, false},     {SI_LINEAR90_NONE, 1.f, true}};
    unsigned seed = 90;
    for (int t = 0; t < 2; t++)
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                int ran =
                    check_one(t ? SI_LINEAR90_BF16 : SI_LINEAR90_F16, acts[a].act, acts[a].alpha,
                              acts[a].res, shapes[s][0], shapes[s][1], shapes[s][2], seed++);
                CHECK_MSG(ran == 6, "type %d act %zu shape %zu: %d of the 6 tiles ran", t, a, s,
                          ran);
            }
    return test_finish();
}

#else

int main(void) {
    printf("built without CUTLASS (no fused Linear kernels): skipped\n");
    return TEST_SKIP_CODE;
}

#endif
