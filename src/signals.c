/* Stop requests by signal (see signals.h). */
#include "signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    if (stop_signal == sig) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    stop_signal = sig;
}

void si_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int si_signals_stop(void) {
    return stop_signal;
}

const char *si_signals_name(int sig) {
    return strsignal(sig);
}
