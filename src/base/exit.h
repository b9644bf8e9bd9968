/* The process exit codes of every subcommand (docs/user-guide.md lists them): the CLI returns
 * them, and the job (src/job) returns its own so a test sees what a user would. */
#ifndef SI_EXIT_H
#define SI_EXIT_H

enum {
    SI_EXIT_OK = 0,
    SI_EXIT_FAIL = 1,       /* the run could not be done: bad input file, model, I/O */
    SI_EXIT_USAGE = 2,      /* bad command line */
    SI_EXIT_FATAL = 3,      /* internal error (abort) */
    SI_EXIT_VERIFY = 4,     /* results failed verification (an input index missing or duplicated) */
    SI_EXIT_MAX_ERRORS = 5, /* more images failed than --max-errors allows (result still written) */
    SI_EXIT_INTERRUPTED = 6 /* stopped by SIGTERM/SIGUSR1/SIGINT: the partial result is flushed;
                               run again with --resume to finish it */
};

#endif
