/* Parsers of the values that options and model metadata share: an integer in a range, "R,G,B",
 * "N" or "HxW". Strict: the whole string must be the value. */
#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool si_parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool si_parse_floats3(const char *s, float lo, float hi, float out[3]) {
    float v[3];
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        v[i] = strtof(s, &end);
        if (errno || end == s || !isfinite(v[i]) || !(v[i] >= lo && v[i] <= hi)) return false;
        if (i < 2) {
            if (*end != ',') return false;
            s = end + 1;
        }
    }
    if (*end) return false;
    for (int i = 0; i < 3; i++) out[i] = v[i];
    return true;
}

bool si_parse_hw(const char *s, int *h, int *w) {
    long a, b;
    char tmp[64];
    if (strlen(s) >= sizeof tmp) return false; /* cut short, "000...0224junk" would pass */
    snprintf(tmp, sizeof tmp, "%s", s);
    char *x = strchr(tmp, 'x');
    if (!x) {
        if (!si_parse_int(tmp, 1, 16384, &a)) return false;
        *h = *w = (int)a;
        return true;
    }
    *x = 0;
    if (!si_parse_int(tmp, 1, 16384, &a) || !si_parse_int(x + 1, 1, 16384, &b)) return false;
    *h = (int)a;
    *w = (int)b;
    return true;
}
