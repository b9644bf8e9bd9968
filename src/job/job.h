/* The distributed run behind `shardinfer run`, as a library call: every rank calls si_job_run
 * with the same config. Setting up (model, input, output, GPU, engine, the result and what a
 * resumed run has done already) goes through si_mpi_agree, so a failure is printed once and all
 * ranks leave together. Then chunks stream: each rank claims chunks (mpi/sched), computes them
 * (src/pipeline) and sends each finished one to rank 0 (mpi/gather, framed by src/pipeline/chunk),
 * which writes it into the partial result and its journal (io/result) while computing its own
 * share. A signal makes every rank stop claiming, finish what it holds and flush; resume
 * continues from the journal. A failure of the run itself while chunks stream ends the job with
 * MPI_Abort and a message: the partial result keeps everything flushed so far.
 * The CLI (src/cli/run.c) only turns argv into an si_job_config. */
#ifndef SI_JOB_H
#define SI_JOB_H

#include "base/exit.h"
#include "engine/engine.h"
#include "io/source.h"
#include "job/progress.h"
#include "mpi/ranks.h"
#include "mpi/sched.h"
#include "pipeline/pipeline.h"

/* --decode: where the JPEGs are decoded on a CUDA run (the CPU backend always decodes on the CPU).
 */
typedef enum {
    SI_DECODE_AUTO = 0, /* the GPU's hardware decoder where every rank's GPU has one */
    SI_DECODE_CPU,
    SI_DECODE_GPU,
    SI_DECODE_GPU_EXACT /* the hardware's planes, upsampled and converted as libjpeg-turbo does */
} si_decode_mode;

typedef struct {
    const char *model, *input, *output; /* paths; output is RESULT.h5 */
    const char *backend;                /* "cpu" or "cuda" */
    char backend_why[256];              /* how --backend auto chose it; "" when named */
    /* batch, preprocessing, post, gpu_resize (the caller's choice: the CLI resolves --resize-on);
     * the job fills the plan, chunk, threads and timeline */
    si_pipeline_config pc;
    /* given by the user: the model's metadata ("mean", "std", "resize", "interpolation") does
     * not override them */
    bool mean_set, std_set, resize_set, interp_set;
    /* --batch given; else pc.batch is the CPU's default and the job chooses: the model's fixed
     * batch, a resumed run's, or on cuda the largest of 256, 128, 64, 32 that fits the GPU */
    bool batch_set;
    bool overwrite, resume;
    si_source_opts src; /* layout and dataset names of the input */
    double max_errors;  /* < 0: no limit; a count, or a fraction when max_errors_fraction */
    bool max_errors_fraction;
    int threads, post_threads; /* 0: the defaults (si_mpi_threads, half of threads) */
    long chunk;                /* images per chunk, a multiple of pc.batch; 0: si_job_chunk_size */
    si_sched_kind schedule;
    bool parallel_writer; /* every rank writes its rows with MPI-IO (mpi/pwrite) */
    double flush_interval, progress_interval, drain_timeout; /* seconds; 0: the defaults */
    si_progress_mode progress;
    int slow_rank, slow_ms;   /* tests: rank slow_rank (-1: none) sleeps slow_ms per batch */
    int slow_write_ms;        /* tests: rank 0's writer thread waits for its queue to fill, then
                                 sleeps this long per chunk (si_writer_start) */
    si_engine_opts eo;        /* precision (resolved for the backend), slots, workspace, graphs */
    long pack_kb;             /* cuda, pc.gpu_resize: KiB per image of decoded images; 0: default */
    si_decode_mode decode;    /* cuda, pc.gpu_resize: where JPEGs decode (--decode) */
    int decode_parts;         /* cuda, --decode gpu: host threads making each batch's decoder
                                 calls (0: SI_DECODE_PARTS_DEFAULT, src/decode/hwjpeg.h) */
    double decode_cpu_share;  /* --decode gpu: of the images the hardware could take, the part
                                 the CPU decodes (0: none; < 0: balanced batch by batch) */
    bool decode_wait;         /* --decode gpu: the decoder's states made before the first batch
                                 (every batch then splits alike), not beside the first batches */
    int launcher_local_rank;  /* the launcher's node-local rank of this process (Slurm's, Open
                                 MPI's, MPICH's: si_cli_launcher_local_rank); -1: unknown, MPI's
                                 shared-memory rank then */
    const char *timeline;     /* CSV of the stages' intervals, NULL: none */
    const char *command_line; /* recorded in the result; NULL: "" */
    double t_start;           /* si_now() when the run started (elapsed times); 0: at the call */
    /* non-NULL: the process ends with the job. A GPU engine (device memory, streams, the JPEG
     * decoder) is then left to the process's exit and *gpu_left set: the caller finalizes MPI
     * and ends with _exit (releasing them first made the end of a run 0.2-0.6 s longer, H100) */
    bool *gpu_left;
} si_job_config;

/* The defaults of `shardinfer run` with no options but the three paths (still NULL here). */
si_job_config si_job_config_default(void);

/* Runs the job on the ranks of m (si_mpi_init; the caller finalizes MPI, so a process may run
 * several jobs). Collective. Borrows cfg. Returns the process exit code, the same on every
 * rank: SI_EXIT_OK, _FAIL, _VERIFY, _MAX_ERRORS or _INTERRUPTED (base/exit.h). */
int si_job_run(const si_job_config *cfg, const si_mpi *m);

/* Images per chunk for n images of `batch` on `ranks` ranks when the user gave none: 8 batches;
 * fewer when a small set would leave a rank fewer than 4 chunks, or when a chunk's rows
 * (row_bytes each) would pass 256 MB in one message; always a multiple of batch. Every batch is
 * [kB, kB + B) whatever the chunk size, so the results do not depend on it. */
uint64_t si_job_chunk_size(uint64_t n, int batch, int ranks, size_t row_bytes);

/* The --max-errors rule: SI_OK, or SI_ERR_LIMIT with the message when more than the limit of
 * the n images failed (a count, or a fraction of n). output names the result in the message. */
si_status si_job_check_errors(const si_job_config *cfg, uint64_t failed, uint64_t n);

#endif
