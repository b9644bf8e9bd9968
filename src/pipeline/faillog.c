/* The per-image failure lines of a rank (stages.h): the first SI_FAILLOG_FULL of each status in
 * full, then one line saying the rest of that status go unlogged, and their count at the end, so
 * that a set of a million empty records costs a few lines, not a million. Every failed image is
 * in the result's /errors whatever is logged. */
#include <stdatomic.h>

#include "stages.h"

/* Failures per status on this process (one rank): the reader thread, the main thread and the
 * post thread count into it, and read_batch, which logs a read error, has no pipeline state to
 * hang a counter on. */
static _Atomic uint64_t fails[256];

void si_faillog_reset(void) {
    for (int s = 0; s < 256; s++) atomic_store(&fails[s], 0);
}

void si_faillog(si_source *set, uint64_t image, int status, const char *msg) {
    uint64_t k = atomic_fetch_add(&fails[status & 255], 1) + 1;
    if (k > SI_FAILLOG_FULL + 1) return;
    /* a record that cannot be read is the storage's trouble, an error; a bad image a warning */
    si_log_level level = status == SI_IMG_READ_ERROR ? SI_LOG_ERROR : SI_LOG_WARN;
    const char *name = si_image_status_name(status);
    if (k == SI_FAILLOG_FULL + 1) {
        si_log(level,
               "more than %d images failed with status %s on this rank: the others are not "
               "logged (every one is in the result's /errors; the count comes at the end)",
               SI_FAILLOG_FULL, name);
        return;
    }
    char *id = NULL;
    if (!set || si_source_read_ids(set, image, 1, &id) != SI_OK) id = NULL;
    si_log(level, "image %llu '%s': %s: %s", (unsigned long long)image, id ? id : "?", name,
           msg && msg[0] ? msg : "-");
    si_source_free_ids(&id, 1);
}

void si_faillog_report(void) {
    for (int s = 0; s < 256; s++) {
        uint64_t n = atomic_load(&fails[s]);
        if (n > SI_FAILLOG_FULL)
            si_log_warn("%llu images failed with status %s on this rank, %llu of them not logged",
                        (unsigned long long)n, si_image_status_name(s),
                        (unsigned long long)(n - SI_FAILLOG_FULL));
    }
}
