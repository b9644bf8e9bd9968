/* `shardinfer pack SOURCE --output SET.h5`: turns the options into si_pack_opts and packs JPEG
 * files into an HDF5 image set (io/pack.c does the work). */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "base/common.h"
#include "io/pack.h"

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
