/* libFuzzer target for the image path: any byte string goes through si_decode_crop (EXIF
 * orientation parser, TurboJPEG header and decode, CMYK conversion, orientation, resize, crop)
 * in exact and in DCT-scaled mode, with a pixel cap so that a forged header cannot make the
 * decoder allocate gigabytes. It must never crash, hang, read out of bounds or write dst on
 * failure; bad images are expected and only their status is checked.
 * Build and run: scripts/fuzz.sh decode [SECONDS]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jpeg.h"

#define MAX_PIXELS (16u << 20)

static si_decoder *dec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dec && !(dec = si_decoder_create())) abort();
    /* the last input byte picks the preprocessing (resize, crop, filter), so crops of every
     * shape get explored */
    uint8_t sel = size ? data[size - 1] : 0;
    static const int resizes[4] = {224, 33, 64, 1};
    int resize = resizes[sel & 3], crop = resize - (sel >> 2 & 7);
    if (crop < 1) crop = 1;
    static uint8_t out[224 * 224 * 3], poison[224 * 224 * 3];
    for (int mode = 0; mode < 4; mode++) {
        si_preproc p = {.resize = resize,
                        .interp = (sel & 0x20) ? SI_INTERP_BICUBIC : SI_INTERP_BILINEAR,
                        .crop_h = crop,
                        .crop_w = (sel & 0x80) ? resize : crop,
                        .max_pixels = MAX_PIXELS,
                        .exact = mode & 1,
                        .no_exif = mode & 2};
        size_t n = (size_t)p.crop_h * p.crop_w * 3;
        memset(out, 0x5C, n);
        memset(poison, 0x5C, n);
        char msg[160];
        int st = si_decode_crop(dec, data, size, &p, out, msg, sizeof msg);
        if (st < SI_IMG_OK || st > SI_IMG_UNSUPPORTED || (st != SI_IMG_OK && !msg[0])) abort();
        if (st != SI_IMG_OK && memcmp(out, poison, n) != 0) abort(); /* dst written on failure */
        /* a header the decoder refuses is refused in every mode */
        if (st == SI_IMG_EMPTY || st == SI_IMG_NOT_JPEG || st == SI_IMG_TOO_LARGE) break;
    }
    return 0;
}
