/* The hardware JPEG decoder's calls in a build without one (hwjpeg.h): no CUDA, or CUDA without
 * nvjpeg.h when it was configured. si_hwjpeg_create says so; the others are never reached with a
 * decoder to act on. */
#include "hwjpeg.h"

#define NONE                                                                                       \
    "--decode gpu: this build has no hardware JPEG decoder (no CUDA, or no nvjpeg.h when it was "  \
    "configured: scripts/setup.sh installs it)"

si_hwjpeg *si_hwjpeg_create(int slots, int max_batch, bool exact, int parts) {
    (void)slots, (void)max_batch, (void)exact, (void)parts;
    si_error(SI_ERR_UNSUPPORTED, NONE);
    return NULL;
}

void si_hwjpeg_free(si_hwjpeg *j) {
    (void)j;
}

bool si_hwjpeg_exact(const si_hwjpeg *j) {
    (void)j;
    return false;
}

int si_hwjpeg_parts(const si_hwjpeg *j) {
    (void)j;
    return 0;
}

si_status si_hwjpeg_ready(si_hwjpeg *j) {
    (void)j;
    return si_error(SI_ERR_UNSUPPORTED, NONE);
}

int si_hwjpeg_usable(si_hwjpeg *j) {
    (void)j;
    return -1;
}

si_jpeg_jobs *si_hwjpeg_jobs(si_hwjpeg *j, int k) {
    (void)j, (void)k;
    return NULL;
}

si_status si_hwjpeg_decode(si_hwjpeg *j, int k, const si_slot_pack *p) {
    (void)j, (void)k, (void)p;
    return si_error(SI_ERR_UNSUPPORTED, NONE);
}
