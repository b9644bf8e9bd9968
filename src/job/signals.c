/* Stop requests by signal, and the drain watchdog (see signals.h). */
#include "signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;
static double timeout_s;
static int exit_code;
static const char *late_hint;

/* A second Ctrl-C is a user who wants out now: the default action. A repeated SIGTERM or SIGUSR1
 * is a launcher's second notice, not impatience (at a Slurm time limit the tasks get SIGTERM
 * twice within milliseconds, which used to end them before they could drain): the drain goes on,
 * bounded by the watchdog and by the launcher's own SIGKILL. The first signal is the one named. */
static void on_signal(int sig) {
    if (sig == SIGINT && stop_signal == SIGINT) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    if (!stop_signal) stop_signal = sig;
}

static void *watchdog(void *arg) {
    (void)arg;
    struct timespec tick = {0, 100000000};
    while (!stop_signal) nanosleep(&tick, NULL);
    for (double waited = 0; waited < timeout_s; waited += 0.1) nanosleep(&tick, NULL);
    char msg[256];
    int n = snprintf(msg, sizeof msg, "shardinfer: still draining %.0f s after %s: exiting; %s\n",
                     timeout_s, strsignal(stop_signal), late_hint);
    if (write(2, msg, (size_t)n) < 0) {
    }
    _exit(exit_code);
    return NULL;
}

void si_signals_install(double drain_timeout, int code, const char *late) {
    timeout_s = drain_timeout;
    exit_code = code;
    late_hint = late;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* the terminal closed: as SIGTERM */
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, watchdog, NULL) != 0)
        fputs("shardinfer: no drain watchdog\n", stderr);
    pthread_attr_destroy(&at);
}

int si_signals_stop(void) {
    return stop_signal;
}

const char *si_signals_name(int sig) {
    return strsignal(sig);
}
