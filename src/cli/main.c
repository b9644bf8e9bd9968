/* shardinfer: batch image inference over HDF5 image sets. Dispatches the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "base/common.h"

static const char usage[] =
    "shardinfer " SI_VERSION " - batch image inference over HDF5 image sets\n"
    "usage: shardinfer COMMAND [options]   (shardinfer COMMAND --help for its options)\n"
    "  pack   build an HDF5 image set from a directory or list of JPEG files\n"
    "  run    classify every image of a set with an ONNX model (under mpirun: one rank per\n"
    "         GPU or CPU share); writes one consolidated HDF5 result\n"
    "  show   print a result file as a table (id, status, top-K classes)\n"
    "  merge  join the results of a job array's parts into one result\n"
    "  inspect  describe a model: ops, shapes, parameters, FLOPs, planned memory\n"
    "  exec   run a model on .npy tensors and write its outputs as .npy\n"
    "  bench  time the engine alone on random input (images/s per batch size)\n"
    "  plan   the GPU memory a run allocates, by component, and the largest batch that fits\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? SI_EXIT_USAGE : SI_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("shardinfer %s\n", SI_VERSION);
        return SI_EXIT_OK;
    }
    if (!strcmp(argv[1], "pack")) return si_cli_pack(argc - 1, argv + 1);
    if (!strcmp(argv[1], "run")) return si_cli_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "show")) return si_cli_show(argc - 1, argv + 1);
    if (!strcmp(argv[1], "merge")) return si_cli_merge(argc - 1, argv + 1);
    if (!strcmp(argv[1], "exec")) return si_cli_exec(argc - 1, argv + 1);
    if (!strcmp(argv[1], "inspect")) return si_cli_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "decode"))
        return si_cli_bench_decode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return si_cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan")) return si_cli_plan(argc - 1, argv + 1);
    fprintf(stderr,
            "shardinfer: unknown command '%s' (commands: pack, run, show, merge, inspect, exec, "
            "bench, plan; see "
            "shardinfer --help)\n",
            argv[1]);
    return SI_EXIT_USAGE;
}
