/* Progress bar and lines (see progress.h). */
#include "progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct si_progress {
    si_progress_mode mode;
    FILE *out;
    uint64_t total, done0;
    double t0, last, interval;
    bool drawn;
};

si_progress *si_progress_create(si_progress_mode mode, FILE *out, uint64_t total, uint64_t done0,
                                double interval) {
    if (mode == SI_PROGRESS_AUTO) mode = isatty(fileno(out)) ? SI_PROGRESS_BAR : SI_PROGRESS_LINES;
    si_progress *p = si_xcalloc(1, sizeof *p);
    p->mode = mode;
    p->out = out;
    p->total = total;
    p->done0 = done0;
    p->t0 = p->last = si_now();
    p->interval = mode == SI_PROGRESS_BAR ? 0.25 : interval > 0 ? interval : 5.0;
    return p;
}

static void fmt_time(char *b, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(b, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(b, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(b, cap, "%ld:%02ld", t / 60, t % 60);
}

void si_progress_format(char *buf, size_t cap, uint64_t done, uint64_t total, double rate,
                        const double busy[SI_STAGES], bool bar) {
    double frac = total ? (double)done / (double)total : 1.0;
    char eta[32], bars[41];
    fmt_time(eta, sizeof eta, rate > 0 ? (double)(total - done) / rate : NAN);
    int bottleneck = -1;
    for (int s = 0; s < SI_STAGES; s++)
        if (s != SI_STAGE_STARVED && (bottleneck < 0 || busy[s] > busy[bottleneck])) bottleneck = s;
    size_t n = 0;
    if (bar) {
        int w = 30, fill = (int)(frac * w);
        for (int i = 0; i < w; i++) bars[i] = i < fill ? '#' : '.';
        bars[w] = 0;
        n += (size_t)snprintf(buf + n, cap - n, "[%s] ", bars);
    }
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%5.1f%% %llu/%llu images, %.1f images/s, ETA %s",
                              100.0 * frac, (unsigned long long)done, (unsigned long long)total,
                              rate, eta);
    if (n < cap && bottleneck >= 0 && busy[bottleneck] > 0)
        snprintf(buf + n, cap - n, ", bottleneck %s (%.0f%% busy)", si_stage_names[bottleneck],
                 100.0 * busy[bottleneck]);
}

void si_progress_update(si_progress *p, uint64_t done, const double busy[SI_STAGES], bool force) {
    if (!p || p->mode == SI_PROGRESS_NONE) return;
    double now = si_now();
    if (!force && now - p->last < p->interval) return;
    p->last = now;
    double el = now - p->t0;
    double rate = el > 0 ? (double)(done - p->done0) / el : 0.0;
    char line[256];
    si_progress_format(line, sizeof line, done, p->total, rate, busy, p->mode == SI_PROGRESS_BAR);
    if (p->mode == SI_PROGRESS_BAR) {
        fprintf(p->out, "\r%s\033[K", line);
        p->drawn = true;
    } else {
        fprintf(p->out, "progress: %s\n", line);
    }
    fflush(p->out);
}

void si_progress_free(si_progress *p) {
    if (!p) return;
    if (p->drawn) fputc('\n', p->out);
    fflush(p->out);
    free(p);
}
