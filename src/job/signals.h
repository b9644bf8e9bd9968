/* Stop requests by signal. The first SIGTERM, SIGUSR1 (Slurm's warning before the time limit)
 * or SIGINT asks the run to stop taking work, finish what it holds and flush; a second SIGINT
 * ends the process the default way, so an impatient Ctrl-C still works, while a repeated
 * SIGTERM or SIGUSR1 (Slurm sends each task SIGTERM twice at the time limit) lets the drain
 * finish. A watchdog
 * bounds the drain: if the process is still there drain_timeout seconds after the first signal
 * (a peer died and will never answer, say), it says so and exits with `code`; rank 0 flushes as
 * soon as the signal arrives, so what was finished is on disk by then. Kept apart from the rest
 * because <signal.h> defines a macro named si_status. */
#ifndef SI_SIGNALS_H
#define SI_SIGNALS_H

/* For `run`, `pack` and `merge` alike (SIGHUP counts as SIGTERM). `late` ends the watchdog's
 * line: what is left behind and what to do (borrowed for the process's life). */
void si_signals_install(double drain_timeout, int code, const char *late);
/* The signal that asked for a stop, or 0. */
int si_signals_stop(void);
/* "Terminated", "User defined signal 1", ... */
const char *si_signals_name(int sig);

#endif
