/* The float <-> half conversions of --embed-dtype float16 (src/base/half.h) against numpy: the
 * float32 values half_ref.py chose (ties, near-ties, overflow and underflow edges, every
 * exponent) must convert to numpy's astype(float16) bit for bit, and every half must read back
 * as numpy's float32 of it and convert back to itself. Usage: test_half DATA_DIR */
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "io/npy.h"
#include "tests/test_util.h"

static uint32_t bits32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Sign and NaN-ness only for NaN: numpy's payload handling differs between its hardware and
 * software paths, and an embedding never holds a NaN that is converted. */
static bool same_half(uint16_t got, uint16_t want) {
    bool nan_g = (got & 0x7c00) == 0x7c00 && (got & 0x3ff),
         nan_w = (want & 0x7c00) == 0x7c00 && (want & 0x3ff);
    if (nan_w) return nan_g && (got & 0x8000) == (want & 0x8000);
    return got == want;
}

static void against_numpy(const char *dir) {
    char p_in[4096], p_want[4096];
    snprintf(p_in, sizeof p_in, "%s/half_in.npy", dir);
    snprintf(p_want, sizeof p_want, "%s/half_want.npy", dir);
    si_npy_array in, want;
    if (si_npy_read(p_in, &in) != SI_OK || si_npy_read(p_want, &want) != SI_OK) {
        fprintf(stderr, "%s (run tests/half_ref.py gen %s)\n", si_error_msg(), dir);
        test_fail++;
        return;
    }
    CHECK(in.dtype == SI_NPY_FLOAT32 && want.dtype == SI_NPY_FLOAT16 && in.numel == want.numel);
    CHECK(in.numel > 65536 * 4);
    const float *x = in.data;
    const uint16_t *w = want.data;
    int64_t bad = 0;
    for (int64_t i = 0; i < in.numel && in.numel == want.numel; i++) {
        uint16_t h = si_half_from_float(x[i]);
        if (!same_half(h, w[i]) && bad++ < 10)
            fprintf(stderr, "value %lld: %.9g (0x%08x) -> 0x%04x, numpy 0x%04x\n", (long long)i,
                    (double)x[i], bits32(x[i]), h, w[i]);
    }
    CHECK_MSG(bad == 0, "%lld of %lld values differ from numpy's", (long long)bad,
              (long long)in.numel);
    /* the first 65536 inputs are every half, as numpy widens it */
    int64_t bad_back = 0;
    for (uint32_t h = 0; h < 65536 && in.numel >= 65536; h++) {
        float f = si_half_to_float((uint16_t)h);
        bool ok = f != f ? x[h] != x[h] : bits32(f) == bits32(x[h]);
        ok = ok && same_half(si_half_from_float(f), (uint16_t)h);
        if (!ok && bad_back++ < 10)
            fprintf(stderr, "half 0x%04x: reads as %.9g, numpy %.9g\n", h, (double)f, (double)x[h]);
    }
    CHECK_MSG(bad_back == 0, "%lld halves do not read back as numpy's", (long long)bad_back);
    printf("%lld values as numpy's astype(float16); every half round-trips\n", (long long)in.numel);
    si_npy_free(&in);
    si_npy_free(&want);
}

/* Known answers that do not depend on the data files. */
static void known(void) {
    CHECK(si_half_from_float(1.0f) == 0x3c00 && si_half_from_float(-2.0f) == 0xc000);
    CHECK(si_half_from_float(0.0f) == 0 && si_half_from_float(-0.0f) == 0x8000);
    CHECK(si_half_from_float(65504.0f) == 0x7bff && si_half_from_float(65520.0f) == 0x7c00);
    CHECK(si_half_from_float(65519.0f) == 0x7bff);
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even 1 */
    CHECK(si_half_from_float(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(si_half_from_float(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(si_half_from_float(0x1p-24f) == 0x0001 && si_half_from_float(0x1p-25f) == 0);
    CHECK(si_half_from_float(0x1.000002p-25f) == 0x0001);
    CHECK(si_half_from_float(0x1p-14f) == 0x0400 && si_half_to_float(0x03ff) == 0x1.ff8p-15f);
    CHECK(si_half_to_float(0x7c00) == INFINITY && isnan(si_half_to_float(0x7e00)));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_half DATA_DIR\n");
        return 2;
    }
    known();
    against_numpy(argv[1]);
    return test_finish();
}
