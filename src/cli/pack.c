/* `shardinfer pack SOURCE --output SET.h5`: turns the options into si_pack_opts and packs JPEG
 * files into an HDF5 image set (io/pack.c does the work). */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "base/common.h"
#include "io/pack.h"
#include "job/signals.h"

static const char pack_usage[] =
    "usage: shardinfer pack SOURCE --output SET.h5 [--overwrite] [--chunk-bytes N]\n"
    "                       [--max-file-bytes N] [--follow-links]\n"
    "  SOURCE is a directory (JPEG files found recursively, ids = relative paths) or a list\n"
    "  file (lines: PATH, PATH<TAB>ID or PATH<TAB>ID<TAB>LABEL).\n"
    "  --max-file-bytes N  refuse a file larger than N bytes (default 268435456, 256 MiB)\n"
    "  --follow-links      in a directory, follow symbolic links that leave it too\n";

int si_cli_pack(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"overwrite", no_argument, 0, 'f'},
                                         {"chunk-bytes", required_argument, 0, 'c'},
                                         {"max-file-bytes", required_argument, 0, 'm'},
                                         {"follow-links", no_argument, 0, 'L'},
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
        case 'm':
            if (!si_parse_int(optarg, 1, 1L << 40, &v)) {
                fprintf(stderr, "shardinfer pack: --max-file-bytes '%s': expected 1..2^40\n",
                        optarg);
                return SI_EXIT_USAGE;
            }
            o.max_file_bytes = (uint64_t)v;
            break;
        case 'L': o.follow_links = true; break;
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
    /* SIGINT/SIGTERM: pack stops at the next file or block, removes its temporary and exits 6;
     * a second signal ends it at once. The watchdog's bound is generous: a stop is seen within
     * one 16 MiB block, so it fires only if a read hangs (a dead network file system). */
    si_signals_install(
        300, SI_EXIT_INTERRUPTED,
        "(a read hangs?) its temporary OUTPUT.PID-RANDOM.tmp may be left: remove it");
    o.stop = si_signals_stop;
    si_pack_stats st;
    si_status s = si_pack(&o, &st);
    if (s != SI_OK) {
        si_log_error("%s", si_error_msg());
        return s == SI_ERR_INTERRUPTED ? SI_EXIT_INTERRUPTED : SI_EXIT_FAIL;
    }
    printf("packed %llu images (%.1f MB) into %s in %.2f s", (unsigned long long)st.count,
           (double)st.bytes / 1e6, o.output, st.seconds);
    if (st.not_jpeg) printf("; %llu records are not JPEG files", (unsigned long long)st.not_jpeg);
    printf("\n");
    return SI_EXIT_OK;
}
