/* A JPEG's structure from its bytes alone, without decoding: the frame (coding process, size,
 * components and their sampling), the scans, and whether the markers are well formed from SOI
 * through the entropy-coded data to EOI. The GPU decode path asks it, per image, whether the
 * hardware JPEG decoder can take the image (baseline Huffman, one interleaved scan, YCbCr or
 * gray with a sampling the engines support); anything else, and anything malformed, goes to
 * libjpeg-turbo, whose verdict on a bad file is the reference. Costs one pass over the bytes
 * (memchr over the entropy-coded data). */
#ifndef SI_JPEG_SCAN_H
#define SI_JPEG_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The chroma sampling of a 3-component frame (luma's factors over chroma's), or gray. */
typedef enum {
    SI_JS_GRAY = 0,
    SI_JS_444,
    SI_JS_422,
    SI_JS_420,
    SI_JS_440,
    SI_JS_411,
    SI_JS_410,
    SI_JS_OTHER /* unequal chroma factors, 4 components, ... */
} si_jpeg_sampling;

typedef struct {
    int sof; /* the frame's marker, 0xC0..0xCF (0: none found) */
    int width, height, ncomp;
    si_jpeg_sampling sampling;
    int scans;            /* SOS markers seen */
    int restarts;         /* RSTn markers in the entropy-coded data */
    int restart_interval; /* DRI, in MCUs (0: none) */
    bool adobe_transform; /* an Adobe APP14 marker with transform != 1 (not YCbCr) */
    bool complete;        /* the markers are well formed from SOI to EOI */
    /* Why the hardware decoder must not take it (a short phrase), or NULL when it can. */
    const char *cpu_reason;
} si_jpeg_layout;

/* Parses data[0, len) into *out; never reads past len. Always fills out (complete = false and a
 * cpu_reason on anything malformed). */
void si_jpeg_scan(const uint8_t *data, size_t len, si_jpeg_layout *out);

/* The size the frame header declares: the first SOFn's width and height, looking only at the
 * marker segments from SOI up to the first SOS, where libjpeg reads its header (bytes between
 * markers skipped to the next 0xFF, as libjpeg does). false when no frame header comes before
 * SOS, EOI or the end of the data. Never reads past len. For the size libjpeg refuses to tell
 * (over 65500 a side) before the image can be called too large. */
bool si_jpeg_declared_size(const uint8_t *data, size_t len, int *width, int *height);

#endif
