/* shardinfer: batch image inference over HDF5 image sets. Dispatches the subcommands by the table
 * below, which also gives the usage text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "base/common.h"
#include "io/h5util.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

/* `bench decode` times the decoder, `bench` alone the engine */
static int bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "decode")) return si_cli_bench_decode(argc - 1, argv + 1);
    return si_cli_bench(argc, argv);
}

typedef struct {
    const char *name;
    int (*entry)(int argc, char **argv); /* argv starts at the subcommand */
    const char *summary;                 /* a line break continues it under the summary column */
} command;

/* in the order the usage lists them */
static const command commands[] = {
    {.name = "pack",
     .entry = si_cli_pack,
     .summary = "build an HDF5 image set from a directory or list of JPEG files"},
    {.name = "run",
     .entry = si_cli_run,
     .summary = "classify every image of a set with an ONNX model (under mpirun: one rank per\n"
                "GPU or CPU share); writes one consolidated HDF5 result"},
    {.name = "show",
     .entry = si_cli_show,
     .summary = "print a result file as a table (id, status, top-K classes)"},
    {.name = "merge",
     .entry = si_cli_merge,
     .summary = "join the results of a job array's parts into one result"},
    {.name = "inspect",
     .entry = si_cli_inspect,
     .summary = "describe a model: ops, shapes, parameters, FLOPs, planned memory"},
    {.name = "exec",
     .entry = si_cli_exec,
     .summary = "run a model on .npy tensors and write its outputs as .npy"},
    {.name = "bench",
     .entry = bench,
     .summary = "time the engine alone on random input (images/s per batch size)"},
    {.name = "plan",
     .entry = si_cli_plan,
     .summary = "the GPU memory a run allocates, by component, and the largest batch that fits"},
};
enum { n_commands = sizeof commands / sizeof commands[0], name_column = 7 };

static void usage(FILE *f) {
    fputs("shardinfer " SI_VERSION " - batch image inference over HDF5 image sets\n"
          "usage: shardinfer COMMAND [options]   (shardinfer COMMAND --help for its options)\n",
          f);
    for (int i = 0; i < n_commands; i++) {
        int pad = name_column - (int)strlen(commands[i].name);
        fprintf(f, "  %s%*s", commands[i].name, pad < 2 ? 2 : pad, "");
        for (const char *s = commands[i].summary; *s; s++) {
            fputc(*s, f);
            if (*s == '\n') fprintf(f, "  %*s", name_column, "");
        }
        fputc('\n', f);
    }
}

int main(int argc, char **argv) {
#ifdef SI_HAVE_CUDA
    si_cuda_set_work_queues(); /* before anything can start CUDA */
    si_cuda_pin_local_gpu(si_cli_launcher_local_rank(), getenv("CUDA_VISIBLE_DEVICES"));
#endif
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SI_EXIT_USAGE : SI_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("shardinfer %s\n", SI_VERSION);
        return SI_EXIT_OK;
    }
    si_h5_init();
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].entry(argc - 1, argv + 1);
    fprintf(stderr, "shardinfer: unknown command '%s' (commands: ", argv[1]);
    for (int i = 0; i < n_commands; i++) fprintf(stderr, "%s%s", i ? ", " : "", commands[i].name);
    fprintf(stderr, "; see shardinfer --help)\n");
    return SI_EXIT_USAGE;
}
