/* The command line: `shardinfer pack`, `shardinfer run`, `shardinfer show`. Each returns the
 * process exit code (docs/user-guide.md lists them). */
#ifndef SI_CLI_H
#define SI_CLI_H

#include "base/exit.h"
#include "base/parse.h"

#include <stdbool.h>

/* Option values: an integer lo..hi (the whole of s); "R,G,B"; "N" or "HxW" (1..16384). */
/* "shardinfer ARGV..." as typed (argv starts at the subcommand); caller frees. */
char *si_cli_join_args(int argc, char **argv);

int si_cli_pack(int argc, char **argv);
int si_cli_run(int argc, char **argv); /* src/cli/run.c */
int si_cli_show(int argc, char **argv);
int si_cli_merge(int argc, char **argv);
int si_cli_exec(int argc, char **argv);         /* src/cli/exec.c */
int si_cli_inspect(int argc, char **argv);      /* src/cli/inspect.c */
int si_cli_bench(int argc, char **argv);        /* src/cli/inspect.c */
int si_cli_plan(int argc, char **argv);         /* src/cli/plan.c */
int si_cli_bench_decode(int argc, char **argv); /* src/cli/bench_decode.c */

#endif
