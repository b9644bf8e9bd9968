/* The command line: one entry point per subcommand, each in a file of its own (src/cli/NAME.c),
 * turning argv into a config and calling the library. Each returns the process exit code
 * (docs/user-guide.md lists them); argv starts at the subcommand. */
#ifndef SI_CLI_H
#define SI_CLI_H

#include "base/exit.h"
#include "base/parse.h"
#include "engine/engine.h"

#include <stdbool.h>

/* "shardinfer ARGV..." as typed (argv starts at the subcommand); caller frees. */
char *si_cli_join_args(int argc, char **argv);
/* This process's node-local rank as its launcher gives it (SLURM_LOCALID, Open MPI's
 * OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, in that order); -1 without one or where
 * it is not a plain non-negative integer. */
int si_cli_launcher_local_rank(void);
/* The engine's A/B switches from their environment variables (engine.h names them); read once by
 * each command that creates an engine, and by the test tools. */
void si_cli_engine_switches(si_engine_switches *sw);

int si_cli_pack(int argc, char **argv);
int si_cli_run(int argc, char **argv);
int si_cli_show(int argc, char **argv);
int si_cli_merge(int argc, char **argv);
int si_cli_exec(int argc, char **argv);
int si_cli_inspect(int argc, char **argv);
int si_cli_bench(int argc, char **argv);        /* the engine alone */
int si_cli_bench_decode(int argc, char **argv); /* `bench decode`: argv starts at "decode" */
int si_cli_plan(int argc, char **argv);

#endif
