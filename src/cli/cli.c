/* What every subcommand shares: the command line as typed. Each subcommand has a file of its own
 * (pack.c, run.c, show.c, ...), main.c dispatches to them. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/parse.h"

int si_cli_launcher_local_rank(void) {
    const char *lr = getenv("SLURM_LOCALID");
    if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr) lr = getenv("MPI_LOCALRANKID");
    long v;
    return lr && si_parse_int(lr, 0, 1 << 20, &v) ? (int)v : -1;
}

/* unset or empty: timed; "0": off; anything else: on */
static int env_choice(const char *name) {
    const char *v = getenv(name);
    return !v || !*v ? SI_CHOICE_TIMED : strcmp(v, "0") == 0 ? SI_CHOICE_OFF : SI_CHOICE_ON;
}

void si_cli_engine_switches(si_engine_switches *sw) {
    sw->cudnn_depthwise = env_choice("SI_CUDNN_DEPTHWISE") == SI_CHOICE_ON;
    sw->nconv = env_choice("SI_NCONV");
    sw->no_linear90 = env_choice("SI_LINEAR90") == SI_CHOICE_OFF;
    sw->lt_first = env_choice("SI_LT_TIME") == SI_CHOICE_OFF;
    sw->cudnn_sdpa = env_choice("SI_CUDNN_SDPA");
}

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
