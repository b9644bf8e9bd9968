/* Command-line front ends `pack` and `show`, and what every subcommand shares (the command line
 * as typed); `run` is in run.c, the job it starts in src/job/. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "io/merge.h"
#include "io/pack.h"
#include "io/result.h"
#include "io/resultview.h"
#include "mpi/ranks.h"
#include "pipeline/pipeline.h"

/* "shardinfer run --model ..." as typed (argv here starts at the subcommand). */
char *si_cli_join_args(int argc, char **argv) {
    size_t n = sizeof "shardinfer";
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 1;
    char *s = si_xmalloc(n);
    strcpy(s, "shardinfer");
    for (int i = 0; i < argc; i++) {
        strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

/* --- pack --------------------------------------------------------------------------------------
 */
static const char pack_usage[] =
    "usage: shardinfer pack SOURCE --output SET.h5 [--overwrite] [--chunk-bytes N]\n"
    "  SOURCE is a directory (JPEG files found recursively, ids = relative paths) or a list\n"
    "  file (lines: PATH, PATH<TAB>ID or PATH<TAB>ID<TAB>LABEL).\n";

int si_cli_pack(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"overwrite", no_argument, 0, 'f'},
                                         {"chunk-bytes", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    si_pack_opts o = {0};
    long v;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":o:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case 'f': o.overwrite = true; break;
        case 'c':
            if (!si_parse_int(optarg, 4096, 1L << 30, &v)) {
                fprintf(stderr, "shardinfer pack: --chunk-bytes '%s': expected 4096..2^30\n",
                        optarg);
                return SI_EXIT_USAGE;
            }
            o.chunk_bytes = (size_t)v;
            break;
        case 'h': fputs(pack_usage, stdout); return SI_EXIT_OK;
        case ':':
            fprintf(stderr, "shardinfer pack: option '%s' needs a value\n", argv[optind - 1]);
            return SI_EXIT_USAGE;
        default:
            fprintf(stderr, "shardinfer pack: unknown option '%s' (see shardinfer pack --help)\n",
                    argv[optind - 1]);
            return SI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || !o.output) {
        fprintf(stderr, "shardinfer pack: %s\n%s",
                optind >= argc ? "missing SOURCE"
                : !o.output    ? "missing --output"
                               : "more than one SOURCE",
                pack_usage);
        return SI_EXIT_USAGE;
    }
    o.source = argv[optind];
    si_pack_stats st;
    if (si_pack(&o, &st) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    printf("packed %llu images (%.1f MB) into %s in %.2f s", (unsigned long long)st.count,
           (double)st.bytes / 1e6, o.output, st.seconds);
    if (st.not_jpeg) printf("; %llu records are not JPEG files", (unsigned long long)st.not_jpeg);
    printf("\n");
    return SI_EXIT_OK;
}

/* --- show --------------------------------------------------------------------------------------
 */
static const char show_usage[] =
    "usage: shardinfer show RESULT.h5 [--labels CLASSES.txt] [--limit N]\n"
    "  prints one line per image: id, status and the top-K classes with probabilities;\n"
    "  CLASSES.txt has one class name per line, in class-index order.\n";

int si_cli_show(int argc, char **argv) {
    static const struct option opts[] = {{"labels", required_argument, 0, 'l'},
                                         {"limit", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *labels = NULL;
    long limit = -1;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":l:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': labels = optarg; break;
        case 'n':
            if (!si_parse_int(optarg, 0, 1L << 40, &limit)) {
                fprintf(stderr, "shardinfer show: --limit '%s': expected a count\n", optarg);
                return SI_EXIT_USAGE;
            }
            break;
        case 'h': fputs(show_usage, stdout); return SI_EXIT_OK;
        case ':':
            fprintf(stderr, "shardinfer show: option '%s' needs a value\n", argv[optind - 1]);
            return SI_EXIT_USAGE;
        default:
            fprintf(stderr, "shardinfer show: unknown option '%s' (see shardinfer show --help)\n",
                    argv[optind - 1]);
            return SI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "shardinfer show: expected one RESULT.h5\n%s", show_usage);
        return SI_EXIT_USAGE;
    }
    if (si_result_print(argv[optind], labels, limit, stdout) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    return SI_EXIT_OK;
}

/* --- merge ----------------------------------------------------------------------------------- */
static const char merge_usage[] =
    "usage: shardinfer merge --output RESULT.h5 [--overwrite] PART.h5 [PART.h5 ...]\n"
    "  Concatenates the results of runs over consecutive parts of one set (a Slurm job array,\n"
    "  slurm/array.sbatch) into the result one run over the whole set writes: rows in the order\n"
    "  of the parts, /index renumbered. The parts must share model, preprocessing and --post.\n";

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
    if (si_result_merge(output, argv + optind, argc - optind, overwrite) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    printf("merged %d parts into %s in %.2f s\n", argc - optind, output, si_now() - t);
    return SI_EXIT_OK;
}
