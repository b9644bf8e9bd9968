/* IEEE 754 binary16 ("half", numpy's float16) on the host, as bit patterns: the storage type of
 * --embed-dtype float16. float -> half rounds to nearest, ties to even, as numpy's
 * astype(float16) and the F16C instruction do, so a stored half equals numpy's conversion of the
 * float32 it came from. Header-only: a few integer operations per value. */
#ifndef SI_HALF_H
#define SI_HALF_H

#include <stdint.h>
#include <string.h>

/* Finite values of magnitude 65520 (halfway between the largest half, 65504, and 2^16) and above
 * become infinity; those of at most 2^-25 (half the smallest subnormal) become a signed zero.
 * NaN stays NaN, quiet, with the sign and the payload's top bits (as F16C does). */
static inline uint16_t si_half_from_float(float x) {
    uint32_t f;
    memcpy(&f, &x, sizeof f);
    uint16_t sign = (uint16_t)(f >> 16 & 0x8000u);
    uint32_t a = f & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | (a & 0x7fffffu) >> 13); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up: infinity */
    if (a <= 0x33000000u) return sign;                       /* 2^-25 and below: zero */
    int e = (int)(a >> 23) - 127;                            /* unbiased exponent */
    uint32_t m = a & 0x7fffffu, q, rem, halfway;
    if (e >= -14) { /* a normal half: 13 mantissa bits dropped */
        q = (uint32_t)(e + 15) << 10 | m >> 13;
        rem = m & 0x1fffu;
        halfway = 0x1000u;
    } else { /* a subnormal half: the value in units of 2^-24, shifted right by 14..24 */
        int shift = -e - 1;
        m |= 0x800000u;
        q = m >> shift;
        rem = m & ((1u << shift) - 1);
        halfway = 1u << (shift - 1);
    }
    /* a carry out of the mantissa moves to the next binade, or to the smallest normal */
    if (rem > halfway || (rem == halfway && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* Exact: every half is a float. */
static inline float si_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1fu, m = h & 0x3ffu, f;
    if (e == 0x1f)
        f = sign | 0x7f800000u | m << 13; /* infinity, NaN */
    else if (e)
        f = sign | (e + 112) << 23 | m << 13;
    else if (!m)
        f = sign;
    else { /* subnormal: normalise */
        int k = 0;
        while (!(m & 0x400u)) m <<= 1, k++;
        f = sign | (uint32_t)(113 - k) << 23 | (m & 0x3ffu) << 13;
    }
    float x;
    memcpy(&x, &f, sizeof x);
    return x;
}

#endif
