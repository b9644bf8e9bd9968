/* The JPEG structure walk of jpeg_scan.h. Hostile input: every length is checked against what
 * is left before it is used, and the walk only moves forward. */
#include "io/jpeg_scan.h"

#include <string.h>

static int rd16(const uint8_t *p) {
    return p[0] << 8 | p[1];
}

static bool is_sof(int m) {
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* The frame header SOFn: size, components and their sampling. */
static void read_frame(const uint8_t *s, size_t n, si_jpeg_layout *L, int *precision, int *hmax,
                       int *vmax, bool *rgb_ids) {
    if (n < 6) {
        L->cpu_reason = "frame header too short";
        return;
    }
    *precision = s[0];
    L->height = rd16(s + 1);
    L->width = rd16(s + 3);
    L->ncomp = s[5];
    if (n < 6 + 3 * (size_t)L->ncomp || L->ncomp < 1) {
        L->cpu_reason = "frame header too short";
        L->ncomp = 0;
        return;
    }
    int h[4] = {0}, v[4] = {0};
    for (int c = 0; c < L->ncomp && c < 4; c++) {
        h[c] = s[7 + 3 * c] >> 4;
        v[c] = s[7 + 3 * c] & 15;
        if (h[c] > *hmax) *hmax = h[c];
        if (v[c] > *vmax) *vmax = v[c];
    }
    *rgb_ids = L->ncomp == 3 && s[6] == 'R' && s[9] == 'G' && s[12] == 'B';
    if (L->ncomp == 1) {
        L->sampling = SI_JS_GRAY;
    } else if (L->ncomp != 3 || h[1] != 1 || v[1] != 1 || h[2] != 1 || v[2] != 1) {
        L->sampling = SI_JS_OTHER;
    } else {
        static const struct {
            int h, v;
            si_jpeg_sampling s;
        } luma[] = {{1, 1, SI_JS_444}, {2, 1, SI_JS_422}, {2, 2, SI_JS_420},
                    {1, 2, SI_JS_440}, {4, 1, SI_JS_411}, {4, 2, SI_JS_410}};
        L->sampling = SI_JS_OTHER;
        for (size_t k = 0; k < sizeof luma / sizeof luma[0]; k++)
            if (h[0] == luma[k].h && v[0] == luma[k].v) L->sampling = luma[k].s;
    }
}

/* The entropy-coded data from d[i]: stuffed bytes, fill bytes and RSTn (which must come in
 * order) up to the next marker. Returns the marker's offset, or len when the data runs out. */
static size_t skip_entropy(const uint8_t *d, size_t len, size_t i, si_jpeg_layout *L) {
    for (;;) {
        const uint8_t *q = i < len ? memchr(d + i, 0xFF, len - i) : NULL;
        if (!q || (size_t)(q - d) + 1 >= len) return len;
        size_t k = (size_t)(q - d);
        uint8_t m = d[k + 1];
        if (m == 0x00) {
            i = k + 2;
        } else if (m == 0xFF) {
            i = k + 1;
        } else if (m >= 0xD0 && m <= 0xD7) {
            if (m - 0xD0 != (L->restarts & 7) && !L->cpu_reason)
                L->cpu_reason = "restart markers out of order";
            L->restarts++;
            i = k + 2;
        } else {
            return k;
        }
    }
}

/* Whether the restart markers seen match what the frame and DRI call for (one scan). */
static bool restarts_match(const si_jpeg_layout *L, int hmax, int vmax) {
    if (L->restart_interval == 0) return L->restarts == 0;
    if (hmax < 1 || vmax < 1) return false;
    int64_t bw = L->ncomp == 1 ? 8 : 8 * hmax, bh = L->ncomp == 1 ? 8 : 8 * vmax;
    int64_t mcus = ((L->width + bw - 1) / bw) * ((L->height + bh - 1) / bh);
    return mcus >= 1 && L->restarts == (mcus - 1) / L->restart_interval;
}

void si_jpeg_scan(const uint8_t *d, size_t len, si_jpeg_layout *L) {
    memset(L, 0, sizeof *L);
    if (len < 4 || d[0] != 0xFF || d[1] != 0xD8) {
        L->cpu_reason = "no SOI marker";
        return;
    }
    int precision = 0, hmax = 0, vmax = 0, scan_comps = 0;
    bool rgb_ids = false, dht = false, dqt = false;
    size_t i = 2;
    while (i + 1 < len) {
        if (d[i] != 0xFF) {
            if (!L->cpu_reason) L->cpu_reason = "bytes between markers";
            return;
        }
        int m = d[i + 1];
        if (m == 0xFF) { /* fill byte before a marker */
            i++;
            continue;
        }
        if (m == 0xD9) { /* EOI: what follows is ignored, as libjpeg does */
            L->complete = L->scans > 0;
            break;
        }
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
            if (!L->cpu_reason) L->cpu_reason = "marker out of place";
            i += 2;
            continue;
        }
        if (i + 4 > len) break;
        size_t seg = (size_t)rd16(d + i + 2); /* counts its own two bytes */
        if (seg < 2 || seg > len - i - 2) {
            if (!L->cpu_reason) L->cpu_reason = "marker segment runs past the end";
            return;
        }
        const uint8_t *s = d + i + 4;
        size_t n = seg - 2;
        if (is_sof(m)) {
            if (L->sof) {
                if (!L->cpu_reason) L->cpu_reason = "two frame headers";
            } else {
                L->sof = m;
                read_frame(s, n, L, &precision, &hmax, &vmax, &rgb_ids);
            }
        } else if (m == 0xC4) {
            dht = true;
        } else if (m == 0xDB) {
            dqt = true;
        } else if (m == 0xDD && n >= 2) {
            L->restart_interval = rd16(s);
        } else if (m == 0xEE && n >= 12 && !memcmp(s, "Adobe", 5)) {
            L->adobe_transform = s[11] != 1;
        } else if (m == 0xDA) {
            L->scans++;
            if (L->scans == 1 && n >= 1) scan_comps = s[0];
            i = skip_entropy(d, len, i + 2 + seg, L);
            continue;
        }
        i += 2 + seg;
    }
    if (!L->complete) {
        if (!L->cpu_reason) L->cpu_reason = "no EOI marker after the scan";
        return;
    }
    if (L->cpu_reason) return;
    if (L->sof != 0xC0 || precision != 8)
        L->cpu_reason = L->sof == 0xC2 || L->sof == 0xC6 || L->sof == 0xCA ? "progressive"
                        : L->sof >= 0xC9                                   ? "arithmetic coding"
                                                                           : "not baseline";
    else if (L->width < 1 || L->height < 1)
        L->cpu_reason = "no size in the frame header";
    else if (L->scans != 1 || scan_comps != L->ncomp)
        L->cpu_reason = "more than one scan";
    else if (L->sampling == SI_JS_OTHER || L->sampling == SI_JS_411 || L->sampling == SI_JS_410)
        L->cpu_reason = L->ncomp == 4 ? "CMYK or YCCK" : "chroma sampling";
    else if (L->adobe_transform || rgb_ids)
        L->cpu_reason = "RGB, not YCbCr";
    else if (!dht || !dqt)
        L->cpu_reason = "no Huffman or quantisation tables";
    else if (!restarts_match(L, hmax, vmax))
        L->cpu_reason = "restart markers do not match the frame";
}

bool si_jpeg_declared_size(const uint8_t *d, size_t len, int *width, int *height) {
    if (len < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
    size_t i = 2;
    while (i + 1 < len) {
        if (d[i] != 0xFF) { /* extraneous bytes: libjpeg warns and looks for the next marker */
            const uint8_t *q = memchr(d + i, 0xFF, len - i);
            if (!q) return false;
            i = (size_t)(q - d);
            continue;
        }
        int m = d[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0xD9 || m == 0xDA) return false; /* EOI, or SOS without a frame before it */
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* no segment follows */
            i += 2;
            continue;
        }
        if (i + 4 > len) return false;
        size_t seg = (size_t)rd16(d + i + 2);
        if (seg < 2 || seg > len - i - 2) return false;
        if (is_sof(m)) {
            if (seg < 2 + 5) return false;
            *height = rd16(d + i + 5);
            *width = rd16(d + i + 7);
            return true;
        }
        i += 2 + seg;
    }
    return false;
}
