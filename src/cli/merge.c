/* `shardinfer merge --output RESULT.h5 PART.h5...`: joins the results of a job array's parts into
 * one result (io/merge.c does the work). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "base/common.h"
#include "io/merge.h"
#include "job/signals.h"

static const char merge_usage[] =
    "usage: shardinfer merge --output RESULT.h5 [--overwrite] PART.h5 [PART.h5 ...]\n"
    "  Concatenates the results of runs over consecutive parts of one set (a Slurm job\n"
    "  array, slurm/submit_array.sh) into the result one run over the whole set writes: rows\n"
    "  in the order of the parts, /index renumbered. The parts must share model,\n"
    "  preprocessing, --post and --batch. Bit for bit the file of one run when every part but\n"
    "  the last holds a multiple of the batch size (docs/user-guide.md, Merge).\n";

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
    /* SIGINT/SIGTERM/SIGHUP: the merge finishes the block it copies, removes its temporary and
     * exits 6, instead of dying with the temporary beside the output */
    si_signals_install(300, SI_EXIT_INTERRUPTED,
                       "(a read hangs?) its temporary RESULT.h5.tmp.XXXXXX may be left: remove it");
    si_merge_config cfg = {.output = output,
                           .parts = argv + optind,
                           .n_parts = argc - optind,
                           .overwrite = overwrite,
                           .stop = si_signals_stop};
    si_status st = si_result_merge(&cfg);
    if (st != SI_OK) {
        si_log_error("%s", si_error_msg());
        return st == SI_ERR_INTERRUPTED ? SI_EXIT_INTERRUPTED : SI_EXIT_FAIL;
    }
    printf("merged %d parts into %s in %.2f s\n", argc - optind, output, si_now() - t);
    return SI_EXIT_OK;
}
