/* `shardinfer merge --output RESULT.h5 PART.h5...`: joins the results of a job array's parts into
 * one result (io/merge.c does the work). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
/* glibc's <signal.h> defines si_status (a siginfo_t field), which would rename our type */
#undef si_status

#include "cli.h"
#include "base/common.h"
#include "io/merge.h"

static const char merge_usage[] =
    "usage: shardinfer merge --output RESULT.h5 [--overwrite] PART.h5 [PART.h5 ...]\n"
    "  Concatenates the results of runs over consecutive parts of one set (a Slurm job\n"
    "  array, slurm/submit_array.sh) into the result one run over the whole set writes: rows\n"
    "  in the order of the parts, /index renumbered. The parts must share model,\n"
    "  preprocessing, --post and --batch. Bit for bit the file of one run when every part but\n"
    "  the last holds a multiple of the batch size (docs/user-guide.md, Merge).\n";

/* The signal that stops the merge: it finishes the block it copies, removes its temporary and
 * exits with SI_EXIT_INTERRUPTED, instead of dying with the temporary left beside the output. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    stop_signal = sig;
}

static int stop_requested(void) {
    return stop_signal;
}

static void catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int si_cli_merge(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"overwrite", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *output = NULL;
    bool overwrite = false;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case 'f': overwrite = true; break;
        case 'h': fputs(merge_usage, stdout); return SI_EXIT_OK;
        case ':':
            fprintf(stderr, "shardinfer merge: option '%s' needs a value\n", argv[optind - 1]);
            return SI_EXIT_USAGE;
        default:
            fprintf(stderr, "shardinfer merge: unknown option '%s' (see shardinfer merge --help)\n",
                    argv[optind - 1]);
            return SI_EXIT_USAGE;
        }
    }
    if (!output || optind >= argc) {
        fprintf(stderr, "shardinfer merge: %s\n%s", !output ? "missing --output" : "no parts given",
                merge_usage);
        return SI_EXIT_USAGE;
    }
    double t = si_now();
    catch_signals();
    si_merge_config cfg = {.output = output,
                           .parts = argv + optind,
                           .n_parts = argc - optind,
                           .overwrite = overwrite,
                           .stop = stop_requested};
    si_status st = si_result_merge(&cfg);
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        return st == SI_ERR_INTERRUPTED ? SI_EXIT_INTERRUPTED : SI_EXIT_FAIL;
    }
    printf("merged %d parts into %s in %.2f s\n", argc - optind, output, si_now() - t);
    return SI_EXIT_OK;
}
