/* MPI start-up, shares and error agreement. */
#include "mpi/ranks.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void abort_job(int code) {
    int up = 0;
    MPI_Initialized(&up);
    int down = 0;
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

/* Whether all of this job's processes are on this node: a process started without a launcher
 * (a singleton), mpirun's ranks all on one host, or an srun step on one node. False where it
 * cannot tell (another launcher). */
static bool one_node(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size) {
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        return local && !strcmp(size, local);
    }
    const char *nodes = getenv("SLURM_STEP_NUM_NODES");
    if (nodes) return !strcmp(nodes, "1");
    return !getenv("PMIX_RANK") && !getenv("PMI_RANK") && !getenv("PMI_SIZE");
}

si_status si_mpi_init(int *argc, char ***argv, si_mpi *m) {
    memset(m, 0, sizeof *m);
    /* Started without mpirun or srun, OpenMPI makes this process a singleton and by default
     * forks a daemon for it, in case it spawns processes (we never do): 0.1-0.2 s of the start
     * measured here. The user's own setting wins; launched runs are not singletons, so the
     * parameter does not touch them. */
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    /* To choose its point-to-point layer OpenMPI opens every network transport it was built
     * with (UCX, libfabric, PSM2) and probes for their hardware: 0.2 s of MPI_Init with
     * Debian's OpenMPI 4.1, where ob1 alone takes 0.02 s. A job on one node talks through
     * shared memory (ob1 with its vader and self transports) whatever was picked, so there it
     * is ob1 unless the user chose; a job across nodes keeps OpenMPI's choice. */
    if (one_node()) setenv("OMPI_MCA_pml", "ob1", 0);
    /* OpenMPI's hwloc loads its OpenCL and OpenGL plugins to list those devices too: on a GPU
     * node the OpenCL one starts NVIDIA's OpenCL driver, 0.06-0.07 s of `run --help` (0.13 s
     * against 0.20 s, H200). Binding needs neither (their devices are the PCI ones the pci
     * plugin lists); the user's own HWLOC_COMPONENTS wins. */
    setenv("HWLOC_COMPONENTS", "-opencl,-gl", 0);
    int provided;
    mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    m->comm = MPI_COMM_WORLD;
    /* errors on communicators come back as codes; mpiCheck turns them into an abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpiCheck(MPI_Comm_rank(m->comm, &m->rank));
    mpiCheck(MPI_Comm_size(m->comm, &m->size));
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &m->local_rank));
    mpiCheck(MPI_Comm_size(local, &m->local_size));
    MPI_Comm_free(&local);
    si_log_set_rank(m->rank, m->size);
    si_set_abort_hook(abort_job);
    return SI_OK;
}

void si_mpi_finalize(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Finalize();
}

void si_mpi_share(uint64_t n, int size, int rank, uint64_t *first, uint64_t *count) {
    uint64_t q = n / (uint64_t)size, r = n % (uint64_t)size, k = (uint64_t)rank;
    *first = k * q + (k < r ? k : r);
    *count = q + (k < r ? 1 : 0);
}

bool si_mpi_all(const si_mpi *m, bool mine) {
    int in = mine, out = 0;
    mpiCheck(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, m->comm));
    return out != 0;
}

si_status si_mpi_agree(const si_mpi *m, si_status st) {
    /* MINLOC over (failing rank or size) finds the lowest failing rank */
    int in[2] = {st == SI_OK ? m->size : m->rank, m->rank}, out[2];
    mpiCheck(MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MINLOC, m->comm));
    if (out[0] == m->size) return SI_OK;
    int failed_rank = out[0], code = (int)st;
    if (failed_rank == m->rank) si_log_error("%s", si_error_msg());
    mpiCheck(MPI_Bcast(&code, 1, MPI_INT, failed_rank, m->comm));
    return (si_status)code;
}

int si_mpi_threads(const si_mpi *m) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    cpu_set_t set;
    int mine = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) mine = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    /* not bound apart (the mask spans the node): share the node's cores with the local ranks */
    if (online > 0 && mine >= online && m->local_size > 1) mine /= m->local_size;
    return mine > 0 ? mine : 1;
}
