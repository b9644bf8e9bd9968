/* `shardinfer show RESULT.h5`: prints a result file as a table (io/resultview.c does the work). */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "base/common.h"
#include "io/resultview.h"

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
