/* `shardinfer run`: the MPI job. Every rank parses the same arguments and opens the same files;
 * failures while setting up go through si_mpi_agree, so they are printed once and all ranks
 * leave together. Then chunks stream: each rank claims chunks (mpi/sched), computes them
 * (src/pipeline) and sends each finished one to rank 0 (mpi/gather), which writes it into the
 * partial result and its journal (io/result) while computing its own share. A signal makes
 * every rank stop claiming, finish what it holds and flush; --resume continues from the journal.
 * A failure of the run itself in the streaming phase ends the job with MPI_Abort and a message:
 * the partial result keeps everything flushed so far. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "io/result.h"
#include "mpi/gather.h"
#include "mpi/pwrite.h"
#include "mpi/ranks.h"
#include "mpi/sched.h"
#include "pipeline/pipeline.h"
#include "job/progress.h"
#include "job/signals.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static const char run_usage[] =
    "usage: [mpirun -np R] shardinfer run --model M.onnx --input SET --output RESULT.h5\n"
    "                                     [options]\n"
    "  SET: an HDF5 file, a list file of them, a glob pattern or a directory (one index space)\n"
    "input and preprocessing:\n"
    "  --batch N          images per batch (default 32)\n"
    "  --resize N         shorter side after resize (default: the model's metadata 'resize',\n"
    "                     else crop/0.875, 256 for 224)\n"
    "  --crop N|HxW       center crop; must equal the model's input size (default: the model's)\n"
    "  --mean R,G,B       normalisation in [0,1] units (default: the model's metadata 'mean',\n"
    "  --std R,G,B        else ImageNet's 0.485,0.456,0.406 / 0.229,0.224,0.225)\n"
    "  --max-pixels N     images declaring more pixels fail with status too_large (default 1e8)\n"
    "  --layout L         auto (default), packed, vlen, dense-nhwc, dense-nchw\n"
    "  --data-dataset P   the images' dataset (default: detected), --ids-dataset P,\n"
    "                     --offsets-dataset P (packed) likewise\n"
    "  --exact-preprocess decode at full size (no DCT-domain scaling): bit-exact with\n"
    "                     torchvision's Resize + CenterCrop on Pillow images, slower\n"
    "  --no-exif          ignore the EXIF orientation of JPEGs\n"
    "postprocessing (--post, default classify):\n"
    "  --post classify    softmax + top-K: --topk K (default 5)\n"
    "  --post detect      YOLOv8 head: --score-threshold F (0.25), --iou-threshold F (0.45),\n"
    "                     --max-detections N (300), --class-agnostic\n"
    "  --post embed       L2-normalized vectors\n"
    "  --post congestion  score of a dense output map (k-means levels, Canny, Gaussian blur)\n"
    "  --post raw         every model output as it is\n"
    "  --post-threads N   threads of the postprocessing pool (default: half the rank's threads)\n"
    "running:\n"
    "  --threads N        threads per rank (default: OMP_NUM_THREADS, else the rank's cores)\n"
    "  --schedule S       dynamic (default: ranks claim chunks as they go, faster ranks take\n"
    "                     more) or static (contiguous shares); the results are identical\n"
    "  --chunk N          images per work unit, a multiple of --batch (default 8 batches)\n"
    "  --resume           continue the interrupted run whose partial result is RESULT.h5.partial\n"
    "  --flush-interval S seconds between flushes of the partial result (default 10)\n"
    "  --drain-timeout S  after a stop signal, exit within S seconds whatever happens (60)\n"
    "  --writer W         gather (default: ranks send their rows to rank 0, which writes them)\n"
    "                     or parallel (every rank writes its own rows with MPI-IO)\n"
    "  --progress MODE    auto (default: a bar on a terminal, else lines), bar, lines, none\n"
    "  --progress-interval S  seconds between progress lines (default 5)\n"
    "  --max-errors N|F%  fail the run (exit 5) when more than N images, or F percent of them,\n"
    "                     fail; the result is still written (default: no limit)\n"
    "  --backend NAME     cpu (default) or cuda: one GPU per rank, chosen by the node-local\n"
    "                     rank (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, or MPI's shared-memory\n"
    "                     communicator) among the devices CUDA_VISIBLE_DEVICES leaves visible\n"
    "  --precision P      fp16 (cuda default), bf16 or fp32 (the cpu runs fp32)\n"
    "  --slots S          cuda: batches in flight, each with its stream and buffers (default 3)\n"
    "  --workspace MB     cuda: cuDNN/cuBLASLt workspace per slot (default 256)\n"
    "  --no-graphs        cuda: launch op by op instead of replaying the captured CUDA Graph\n"
    "  --resize-on W      cuda: gpu (default) uploads the decoded images and resizes them on the\n"
    "                     GPU, cpu resizes in the decode threads; identical crops either way\n"
    "  --pack-kb K        cuda, --resize-on gpu: KiB per image of the slots' buffers of decoded\n"
    "                     images (default 9 * resize^2 bytes); larger ones are resized on the CPU\n"
    "  --timeline FILE    write when each stage worked on each batch, as CSV rows\n"
    "                     rank,stage,batch,t0,t1 (seconds from the pipeline's start; with\n"
    "                     several ranks, rank R writes FILE.rankR); bench/plot_perf.py draws it\n"
    "  --overwrite        replace an existing RESULT.h5 (or an interrupted run's partial one)\n"
    "  --quiet | --verbose\n"
    "Exit codes: 0 done, 1 failed, 2 usage, 4 verification, 5 --max-errors, 6 interrupted by a\n"
    "signal (SIGTERM, SIGUSR1, SIGINT): rerun with --resume.\n";

typedef struct {
    const char *model, *input, *output, *backend;
    si_pipeline_config pc;
    bool mean_set, std_set, resize_set, overwrite, resume;
    si_source_opts src; /* layout and dataset names of the input */
    double max_errors;  /* < 0: no limit; a count, or a fraction when max_errors_fraction */
    bool max_errors_fraction;
    int threads, post_threads;
    long chunk_batches, chunk; /* --chunk in images (0: 8 batches) */
    si_sched_kind schedule;
    bool parallel_writer;
    double flush_interval, progress_interval, drain_timeout;
    si_progress_mode progress;
    int slow_rank, slow_ms; /* --test-slow-rank R:MS */
    si_engine_opts eo;      /* --precision, --slots, --workspace, --no-graphs */
    const char *precision;
    int resize_on; /* -1: the default, 0: cpu, 1: gpu */
    const char *timeline;
    long pack_kb;
} run_args;

static const char *usage_error(char *buf, size_t cap, const char *fmt, const char *arg) {
    snprintf(buf, cap, fmt, arg);
    return buf;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Parses run's options; returns NULL, "help" or the one-line problem. */
static const char *parse_run(int argc, char **argv, run_args *a, char *buf, size_t cap) {
    enum {
        O_POST = 256,
        O_SCORE,
        O_IOU,
        O_MAXDET,
        O_AGNOSTIC,
        O_SCHED,
        O_CHUNK,
        O_RESUME,
        O_FLUSH,
        O_POSTTHR,
        O_PROGRESS,
        O_PROGINT,
        O_SLOW,
        O_WRITER,
        O_DRAIN,
        O_PRECISION,
        O_SLOTS,
        O_WORKSPACE,
        O_NOGRAPHS,
        O_RESIZEON,
        O_PACKKB,
        O_TIMELINE
    };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"input", required_argument, 0, 'i'},
                                         {"output", required_argument, 0, 'o'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"resize", required_argument, 0, 'r'},
                                         {"crop", required_argument, 0, 'c'},
                                         {"mean", required_argument, 0, 'M'},
                                         {"std", required_argument, 0, 'S'},
                                         {"topk", required_argument, 0, 'k'},
                                         {"threads", required_argument, 0, 't'},
                                         {"max-pixels", required_argument, 0, 'P'},
                                         {"max-errors", required_argument, 0, 'E'},
                                         {"layout", required_argument, 0, 'L'},
                                         {"data-dataset", required_argument, 0, 'D'},
                                         {"ids-dataset", required_argument, 0, 'I'},
                                         {"offsets-dataset", required_argument, 0, 'O'},
                                         {"exact-preprocess", no_argument, 0, 'X'},
                                         {"no-exif", no_argument, 0, 'Z'},
                                         {"backend", required_argument, 0, 'B'},
                                         {"overwrite", no_argument, 0, 'f'},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {"post", required_argument, 0, O_POST},
                                         {"score-threshold", required_argument, 0, O_SCORE},
                                         {"iou-threshold", required_argument, 0, O_IOU},
                                         {"max-detections", required_argument, 0, O_MAXDET},
                                         {"class-agnostic", no_argument, 0, O_AGNOSTIC},
                                         {"schedule", required_argument, 0, O_SCHED},
                                         {"chunk", required_argument, 0, O_CHUNK},
                                         {"resume", no_argument, 0, O_RESUME},
                                         {"flush-interval", required_argument, 0, O_FLUSH},
                                         {"post-threads", required_argument, 0, O_POSTTHR},
                                         {"progress", required_argument, 0, O_PROGRESS},
                                         {"progress-interval", required_argument, 0, O_PROGINT},
                                         {"test-slow-rank", required_argument, 0, O_SLOW},
                                         {"writer", required_argument, 0, O_WRITER},
                                         {"drain-timeout", required_argument, 0, O_DRAIN},
                                         {"precision", required_argument, 0, O_PRECISION},
                                         {"slots", required_argument, 0, O_SLOTS},
                                         {"workspace", required_argument, 0, O_WORKSPACE},
                                         {"no-graphs", no_argument, 0, O_NOGRAPHS},
                                         {"resize-on", required_argument, 0, O_RESIZEON},
                                         {"pack-kb", required_argument, 0, O_PACKKB},
                                         {"timeline", required_argument, 0, O_TIMELINE},
                                         {0, 0, 0, 0}};
    long v;
    double d;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:i:o:b:k:fqvh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'i': a->input = optarg; break;
        case 'o': a->output = optarg; break;
        case 'B': a->backend = optarg; break;
        case 'f': a->overwrite = true; break;
        case 'q': si_log_set_level(SI_LOG_WARN); break;
        case 'v': si_log_set_level(SI_LOG_DEBUG); break;
        case 'h': return "help";
        case 'b':
            if (!si_cli_parse_int(optarg, 1, 65536, &v))
                return usage_error(buf, cap, "--batch '%s': expected an integer 1..65536", optarg);
            a->pc.batch = (int)v;
            break;
        case 'r':
            if (!si_cli_parse_int(optarg, 1, 16384, &v))
                return usage_error(buf, cap, "--resize '%s': expected an integer 1..16384", optarg);
            a->pc.pre.resize = (int)v;
            a->resize_set = true;
            break;
        case 'c':
            if (!si_cli_parse_hw(optarg, &a->pc.pre.crop_h, &a->pc.pre.crop_w))
                return usage_error(buf, cap, "--crop '%s': expected N or HxW", optarg);
            break;
        case 'M':
            if (!si_cli_parse_floats3(optarg, a->pc.mean))
                return usage_error(buf, cap, "--mean '%s': expected three numbers R,G,B", optarg);
            a->mean_set = true;
            break;
        case 'S':
            if (!si_cli_parse_floats3(optarg, a->pc.std) || a->pc.std[0] == 0 ||
                a->pc.std[1] == 0 || a->pc.std[2] == 0)
                return usage_error(buf, cap, "--std '%s': expected three nonzero numbers R,G,B",
                                   optarg);
            a->std_set = true;
            break;
        case 'k':
            if (!si_cli_parse_int(optarg, 1, 1000000, &v))
                return usage_error(buf, cap, "--topk '%s': expected a positive integer", optarg);
            a->pc.post.topk = (int)v;
            break;
        case 't':
            if (!si_cli_parse_int(optarg, 1, 4096, &v))
                return usage_error(buf, cap, "--threads '%s': expected 1..4096", optarg);
            a->threads = (int)v;
            break;
        case 'P':
            if (!si_cli_parse_int(optarg, 1, 1L << 40, &v))
                return usage_error(buf, cap, "--max-pixels '%s': expected a positive integer",
                                   optarg);
            a->pc.pre.max_pixels = (uint64_t)v;
            break;
        case 'L': {
            static const char *names[] = {"auto", "packed", "vlen", "dense-nhwc", "dense-nchw"};
            a->src.layout = -1;
            for (int i = 0; i < 5; i++)
                if (!strcmp(optarg, names[i])) a->src.layout = i;
            if (a->src.layout < 0)
                return usage_error(buf, cap,
                                   "--layout '%s': expected auto, packed, vlen, dense-nhwc or "
                                   "dense-nchw",
                                   optarg);
            break;
        }
        case 'D': a->src.data_dataset = optarg; break;
        case 'I': a->src.ids_dataset = optarg; break;
        case 'O': a->src.offsets_dataset = optarg; break;
        case 'X': a->pc.pre.exact = true; break;
        case 'Z': a->pc.pre.no_exif = true; break;
        case 'E': {
            char *end;
            errno = 0;
            double lim = strtod(optarg, &end);
            bool pct = *end == '%';
            if (errno || end == optarg || (*end && !(pct && !end[1])) || lim < 0 ||
                (pct && lim > 100))
                return usage_error(buf, cap,
                                   "--max-errors '%s': expected a count or a percentage like 0.5%%",
                                   optarg);
            a->max_errors_fraction = pct;
            a->max_errors = pct ? lim / 100.0 : lim;
            break;
        }
        case O_POST:
            if (!si_post_kind_parse(optarg, &a->pc.post.kind))
                return usage_error(buf, cap,
                                   "--post '%s': expected classify, detect, embed, congestion or "
                                   "raw",
                                   optarg);
            break;
        case O_SCORE:
            if (!parse_double(optarg, 0, 1, &d))
                return usage_error(buf, cap, "--score-threshold '%s': expected 0..1", optarg);
            a->pc.post.detect.score_threshold = (float)d;
            break;
        case O_IOU:
            if (!parse_double(optarg, 0, 1, &d))
                return usage_error(buf, cap, "--iou-threshold '%s': expected 0..1", optarg);
            a->pc.post.detect.iou_threshold = (float)d;
            break;
        case O_MAXDET:
            if (!si_cli_parse_int(optarg, 0, 100000, &v))
                return usage_error(buf, cap, "--max-detections '%s': expected 0..100000", optarg);
            a->pc.post.detect.max_detections = (int)v;
            break;
        case O_AGNOSTIC: a->pc.post.detect.class_agnostic = true; break;
        case O_SCHED:
            if (!strcmp(optarg, "static"))
                a->schedule = SI_SCHED_STATIC;
            else if (!strcmp(optarg, "dynamic"))
                a->schedule = SI_SCHED_DYNAMIC;
            else
                return usage_error(buf, cap, "--schedule '%s': expected static or dynamic", optarg);
            break;
        case O_CHUNK:
            if (!si_cli_parse_int(optarg, 1, 1L << 24, &v))
                return usage_error(buf, cap, "--chunk '%s': expected images 1..16777216", optarg);
            a->chunk = v;
            break;
        case O_RESUME: a->resume = true; break;
        case O_PRECISION:
            if (si_precision_parse(optarg) < 0)
                return usage_error(buf, cap, "--precision '%s': fp16, bf16 or fp32", optarg);
            a->precision = optarg;
            break;
        case O_SLOTS:
            if (!si_cli_parse_int(optarg, 1, 16, &v))
                return usage_error(buf, cap, "--slots '%s': expected an integer 1..16", optarg);
            a->eo.slots = (int)v;
            break;
        case O_WORKSPACE:
            if (!si_cli_parse_int(optarg, 1, 1 << 20, &v))
                return usage_error(buf, cap, "--workspace '%s': expected MiB, 1..1048576", optarg);
            a->eo.workspace_bytes = (size_t)v << 20;
            break;
        case O_NOGRAPHS: a->eo.no_graphs = true; break;
        case O_TIMELINE: a->timeline = optarg; break;
        case O_RESIZEON:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "gpu"))
                return usage_error(buf, cap, "--resize-on '%s': expected cpu or gpu", optarg);
            a->resize_on = !strcmp(optarg, "gpu");
            break;
        case O_PACKKB:
            if (!si_cli_parse_int(optarg, 1, 1 << 20, &v))
                return usage_error(buf, cap, "--pack-kb '%s': expected KiB, 1..1048576", optarg);
            a->pack_kb = v;
            break;
        case O_DRAIN:
            if (!parse_double(optarg, 0.1, 86400, &a->drain_timeout))
                return usage_error(buf, cap, "--drain-timeout '%s': expected seconds > 0", optarg);
            break;
        case O_WRITER:
            if (!strcmp(optarg, "gather") || !strcmp(optarg, "parallel"))
                a->parallel_writer = !strcmp(optarg, "parallel");
            else
                return usage_error(buf, cap, "--writer '%s': expected gather or parallel", optarg);
            break;
        case O_FLUSH:
            if (!parse_double(optarg, 0.001, 86400, &a->flush_interval))
                return usage_error(buf, cap, "--flush-interval '%s': expected seconds > 0", optarg);
            break;
        case O_POSTTHR:
            if (!si_cli_parse_int(optarg, 1, 4096, &v))
                return usage_error(buf, cap, "--post-threads '%s': expected 1..4096", optarg);
            a->post_threads = (int)v;
            break;
        case O_PROGRESS: {
            static const char *names[] = {"auto", "bar", "lines", "none"};
            int k = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(optarg, names[i])) k = i;
            if (k < 0)
                return usage_error(buf, cap, "--progress '%s': expected auto, bar, lines or none",
                                   optarg);
            a->progress = (si_progress_mode)k;
            break;
        }
        case O_PROGINT:
            if (!parse_double(optarg, 0.001, 86400, &a->progress_interval))
                return usage_error(buf, cap, "--progress-interval '%s': expected seconds > 0",
                                   optarg);
            break;
        case O_SLOW: {
            int r, ms, nc = 0;
            if (sscanf(optarg, "%d:%d%n", &r, &ms, &nc) != 2 || optarg[nc] || r < 0 || ms < 0)
                return usage_error(buf, cap, "--test-slow-rank '%s': expected RANK:MS", optarg);
            a->slow_rank = r;
            a->slow_ms = ms;
            break;
        }
        case ':': return usage_error(buf, cap, "option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error(buf, cap, "unknown option '%s' (see shardinfer run --help)",
                               argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error(buf, cap, "unexpected argument '%s'", argv[optind]);
    if (!a->model) return "missing --model";
    if (!a->input) return "missing --input";
    if (!a->output) return "missing --output";
    if (a->resume && a->overwrite) return "--resume and --overwrite exclude each other";
    if (a->chunk && a->chunk % a->pc.batch) {
        snprintf(buf, cap, "--chunk %ld: must be a multiple of --batch (%d)", a->chunk,
                 a->pc.batch);
        return buf;
    }
    bool cuda = !strcmp(a->backend, "cuda");
#ifdef SI_HAVE_CUDA
    if (strcmp(a->backend, "cpu") && !cuda)
        return usage_error(buf, cap, "--backend '%s': available backends: cpu, cuda", a->backend);
#else
    if (strcmp(a->backend, "cpu"))
        return usage_error(buf, cap,
                           "--backend '%s': this build has the cpu backend only (CUDA was not "
                           "found when it was built)",
                           a->backend);
#endif
    a->eo.precision = a->precision ? si_precision_parse(a->precision)
                      : cuda       ? SI_PREC_FP16
                                   : SI_PREC_FP32;
    if (!cuda && a->eo.precision != SI_PREC_FP32)
        return usage_error(buf, cap, "--precision %s: the cpu backend runs fp32 only",
                           a->precision);
    if (!cuda && (a->eo.slots || a->eo.workspace_bytes || a->eo.no_graphs))
        return "--slots, --workspace and --no-graphs are for --backend cuda";
    if (!cuda && (a->resize_on == 1 || a->pack_kb))
        return "--resize-on gpu and --pack-kb are for --backend cuda";
    if (a->resize_on == 0 && a->pack_kb) return "--pack-kb is for --resize-on gpu";
    a->pc.gpu_resize = cuda && (a->resize_on < 0 ? SI_GPU_RESIZE_DEFAULT : a->resize_on == 1);
    return NULL;
}

/* Mean/std (and resize) from the model's metadata ("mean" = "0.485,0.456,0.406") unless given
 * on the command line: a model that carries its preprocessing cannot be fed wrongly by default. */
static si_status model_norm(const si_graph *g, run_args *a) {
    const char *rs = si_graph_meta(g, "resize");
    long size;
    if (rs && !a->resize_set) {
        if (!si_cli_parse_int(rs, 1, 16384, &size))
            return si_error(SI_ERR_FORMAT, "%s: metadata 'resize' = '%s' is not a size", g->path,
                            rs);
        a->pc.pre.resize = (int)size;
    }
    const char *keys[2] = {"mean", "std"};
    float *dst[2] = {a->pc.mean, a->pc.std};
    bool set[2] = {a->mean_set, a->std_set};
    for (int i = 0; i < 2; i++) {
        const char *v = si_graph_meta(g, keys[i]);
        if (set[i] || !v) continue;
        if (!si_cli_parse_floats3(v, dst[i]) ||
            (i == 1 && (!dst[i][0] || !dst[i][1] || !dst[i][2])))
            return si_error(SI_ERR_FORMAT, "%s: metadata '%s' = '%s' is not three numbers", g->path,
                            keys[i], v);
    }
    return SI_OK;
}

/* Rank 0 checks the output can be written before any work is done. */
static si_status check_output(const run_args *a) {
    struct stat sb;
    char *partial = si_result_partial_path(a->output);
    bool have_partial = stat(partial, &sb) == 0;
    free(partial);
    if (!a->resume && !a->overwrite && have_partial)
        return si_error(SI_ERR_ARG,
                        "%s.partial exists: an earlier run was interrupted; pass --resume to "
                        "finish it or --overwrite to start again",
                        a->output);
    if (!a->resume && stat(a->output, &sb) == 0 && !a->overwrite)
        return si_error(SI_ERR_ARG, "%s: exists; pass --overwrite to replace it", a->output);
    if (a->resume && stat(a->output, &sb) == 0 && !have_partial)
        return si_error(SI_ERR_ARG, "--resume: %s is complete already; nothing to resume",
                        a->output);
    char *copy = si_xstrdup(a->output);
    const char *dir = dirname(copy);
    si_status st = SI_OK;
    if (access(dir, W_OK) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot write in directory '%s': %s", a->output, dir,
                      strerror(errno));
    free(copy);
    return st;
}

/* --- the streaming job --------------------------------------------------------------------- */

typedef struct {
    const si_mpi *m;
    const si_pipeline_config *pc;
    si_sched *sched;
    si_gather *gather;
    si_result *res;     /* rank 0 */
    si_pwriter *pwrite; /* --writer parallel */
    si_progress *prog;
    uint64_t n;
    si_bytes msg;
    double (*busy)[SI_STAGES]; /* rank 0: every rank's latest busy seconds, and elapsed */
    double *elapsed;
    si_rank_stats *final; /* rank 0: every rank's final statistics */
    bool stop_seen, flushed_on_signal;
    int gpu; /* --backend cuda: this rank's device */
} job;

static uint64_t peak_rss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss : 0;
}

/* Ends the job: a failure of the run itself while chunks stream (a write error on rank 0, an
 * engine failure on a rank). The partial result keeps everything flushed. */
static void job_fail(const job *J, si_status st, const char *what) {
    si_log_error("%s: %s; the job stops here. The partial result keeps the finished chunks: fix "
                 "the cause and run again with --resume",
                 what, si_error_msg());
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, st == SI_ERR_VERIFY ? SI_EXIT_VERIFY : SI_EXIT_FAIL);
}

static void note_busy(job *J, int rank, const double *busy, double elapsed) {
    memcpy(J->busy[rank], busy, sizeof(double) * SI_STAGES);
    J->elapsed[rank] = elapsed;
}

static void show_progress(job *J, bool force) {
    if (!J->prog) return;
    double avg[SI_STAGES] = {0};
    int k = 0;
    for (int r = 0; r < J->m->size; r++) {
        if (J->elapsed[r] <= 0) continue;
        for (int s = 0; s < SI_STAGES; s++) avg[s] += J->busy[r][s] / J->elapsed[r];
        k++;
    }
    for (int s = 0; s < SI_STAGES && k; s++) avg[s] /= k;
    si_progress_update(J->prog, si_result_images_done(J->res), avg, force);
}

static si_status on_message(void *ctx, int src, int kind, const uint8_t *msg, size_t len) {
    job *J = ctx;
    if (kind == 1) {
        SI_ASSERT(len == sizeof(si_rank_stats));
        memcpy(&J->final[src], msg, sizeof(si_rank_stats));
        note_busy(J, src, J->final[src].busy, J->final[src].t_total);
        return SI_OK;
    }
    si_chunk_msg_header h;
    SI_ASSERT(len >= sizeof h);
    memcpy(&h, msg, sizeof h);
    size_t rows_at = sizeof h, tail_at = rows_at + ((h.rows_bytes + 7) & ~7ull);
    SI_ASSERT(h.magic == SI_CHUNK_MSG_MAGIC && tail_at + h.tail_bytes == len);
    note_busy(J, src, h.busy, h.elapsed);
    si_status st =
        si_result_put(J->res, J->pwrite ? NULL : msg + rows_at, msg + tail_at, h.tail_bytes);
    if (st != SI_OK) job_fail(J, st, "rank 0: cannot take a chunk in");
    return SI_OK;
}

static bool hook_next(void *ctx, uint64_t *id) {
    job *J = ctx;
    if (si_signals_stop() && !J->stop_seen) {
        J->stop_seen = true;
        si_log_warn("%s: no new work is taken; the chunks in flight are finished and flushed, then "
                    "the run exits with code %d (resume with --resume)",
                    si_signals_name(si_signals_stop()), SI_EXIT_INTERRUPTED);
        si_sched_stop(J->sched);
    }
    return si_sched_next(J->sched, id);
}

static si_status hook_chunk(void *ctx, const si_chunk *c, const si_rank_stats *s) {
    job *J = ctx;
    if (J->pwrite) {
        si_status st = si_pwriter_put(J->pwrite, c);
        if (st != SI_OK) job_fail(J, st, "cannot write a chunk's rows with MPI-IO");
    }
    size_t tail = si_chunk_tail_size(c);
    if (J->m->rank == 0) { /* its own chunk: only the tail needs packing, the rows are written */
        if (si_bytes_reserve(&J->msg, tail) != SI_OK) job_fail(J, SI_ERR_NOMEM, "chunk tail");
        si_chunk_tail_pack(c, J->msg.data);
        note_busy(J, 0, s->busy, s->t_total);
        si_status st = si_result_put(J->res, J->pwrite ? NULL : c->rows, J->msg.data, tail);
        if (st != SI_OK) job_fail(J, st, "rank 0: cannot write a chunk");
        show_progress(J, false);
        return SI_OK;
    }
    /* with the parallel writer the rows are in the file already: only the tail travels */
    size_t rows = J->pwrite ? 0 : c->row_bytes * c->n;
    size_t rows_pad = (rows + 7) & ~(size_t)7,
           total = sizeof(si_chunk_msg_header) + rows_pad + tail;
    if (si_bytes_reserve(&J->msg, total) != SI_OK) job_fail(J, SI_ERR_NOMEM, "chunk message");
    uint8_t *b = J->msg.data;
    si_chunk_msg_header h = {.magic = SI_CHUNK_MSG_MAGIC,
                             .rank = (uint32_t)J->m->rank,
                             .id = c->id,
                             .rows_bytes = rows,
                             .tail_bytes = tail,
                             .elapsed = s->t_total};
    memcpy(h.busy, s->busy, sizeof h.busy);
    memcpy(b, &h, sizeof h);
    memcpy(b + sizeof h, c->rows, rows);
    memset(b + sizeof h + rows, 0, rows_pad - rows);
    si_chunk_tail_pack(c, b + sizeof h + rows_pad);
    si_gather_send(J->gather, b, total);
    return SI_OK;
}

static si_status hook_pump(void *ctx, const si_rank_stats *s) {
    job *J = ctx;
    if (J->m->rank != 0) {
        si_gather_progress(J->gather);
        return SI_OK;
    }
    note_busy(J, 0, s->busy, s->t_total);
    si_status st = si_gather_poll(J->gather, on_message, J);
    /* a signal may be followed by SIGKILL: what is finished goes to disk at once */
    bool force = si_signals_stop() != 0 && !J->flushed_on_signal;
    J->flushed_on_signal |= force;
    if (st == SI_OK) st = si_result_flush(J->res, force);
    if (st != SI_OK) job_fail(J, st, "rank 0: cannot write the results");
    show_progress(J, false);
    return SI_OK;
}

static void print_summary(const si_mpi *m, const si_rank_stats *ranks, uint64_t n, uint64_t failed,
                          uint64_t done_before, uint64_t done_now, double elapsed,
                          const char *output, int threads, int post_threads, bool complete) {
    uint64_t here = 0;
    for (int r = 0; r < m->size; r++) here += ranks[r].images + ranks[r].failed;
    if (complete)
        printf("shardinfer: %llu images (%llu ok, %llu failed)%s on %d rank%s x %d thread%s (+%d "
               "post) in %.2f s: %.1f images/s\n",
               (unsigned long long)n, (unsigned long long)(n - failed), (unsigned long long)failed,
               done_before ? " [resumed]" : "", m->size, m->size > 1 ? "s" : "", threads,
               threads > 1 ? "s" : "", post_threads, elapsed,
               elapsed > 0 ? (double)here / elapsed : 0.0);
    else
        printf(
            "shardinfer: interrupted: %llu of %llu images done%s on %d rank%s x %d thread%s (+%d "
            "post) in %.2f s: %.1f images/s\n",
            (unsigned long long)done_now, (unsigned long long)n, done_before ? " [resumed]" : "",
            m->size, m->size > 1 ? "s" : "", threads, threads > 1 ? "s" : "", post_threads, elapsed,
            elapsed > 0 ? (double)here / elapsed : 0.0);
    if (done_before)
        printf("  %llu images were done before this run; %llu in it\n",
               (unsigned long long)done_before, (unsigned long long)here);
    /* busy: the share of the rank's wall time each stage was working; read and post run in
     * threads of their own, so the shares add up to more than 100% when stages overlap */
    printf("  rank   images  failed  first-result  busy%%: read decode compute  post write  "
           "starved     total  peak-MB\n");
    int slowest = 0;
    for (int r = 0; r < m->size; r++) {
        const si_rank_stats *s = &ranks[r];
        double T = s->t_total > 0 ? s->t_total : 1;
        if (s->t_total > ranks[slowest].t_total) slowest = r;
        printf("  %4d %8llu %7llu %11.3f s %10.0f %6.0f %7.0f %5.0f %5.0f %8.0f %8.2f s %8.1f\n", r,
               (unsigned long long)(s->images + s->failed), (unsigned long long)s->failed,
               s->t_first, 100 * s->busy[SI_STAGE_READ] / T, 100 * s->busy[SI_STAGE_DECODE] / T,
               100 * s->busy[SI_STAGE_COMPUTE] / T, 100 * s->busy[SI_STAGE_POST] / T,
               100 * s->busy[SI_STAGE_WRITE] / T, 100 * s->busy[SI_STAGE_STARVED] / T, s->t_total,
               (double)s->peak_rss_kb / 1024.0);
    }
    printf("  slowest rank: %d (%.2f s)\n", slowest, ranks[slowest].t_total);
    /* steady state: each rank's images after its first chunk, over the time after it */
    double steady = 0, first = 0, init = 0;
    for (int r = 0; r < m->size; r++) {
        const si_rank_stats *s = &ranks[r];
        double dt = s->t_total - s->t_first;
        uint64_t after = s->chunks > 1 ? (s->images + s->failed) * (s->chunks - 1) / s->chunks : 0;
        if (dt > 0 && after > 0) steady += (double)after / dt;
        if (s->t_first > first) first = s->t_first;
        if (s->t_init > init) init = s->t_init;
    }
    printf("  time to first result %.3f s after %.2f s of engine set-up; steady state %.1f "
           "images/s (every rank after its first chunk)\n",
           first, init, steady);
    uint64_t spilled = 0;
    for (int r = 0; r < m->size; r++) spilled += ranks[r].cpu_resized;
    if (spilled)
        printf("  --resize-on gpu: %llu images resized on the CPU instead (larger than the "
               "slot's buffer had room for, or a filter wider than the GPU's)\n",
               (unsigned long long)spilled);
    for (int r = 0; r < m->size; r++)
        if (ranks[r].gpu >= 0)
            printf("  rank %d: GPU %d, %.1f MiB of device memory in use at the end\n", r,
                   ranks[r].gpu, (double)ranks[r].gpu_mem_kb / 1024.0);
    printf("  %s: %s\n", complete ? "results" : "partial results", output);
    fflush(stdout);
}

int si_cli_run(int argc, char **argv) {
    si_mpi m;
    double t_start = si_now();
    si_mpi_init(&argc, &argv, &m);
    run_args a = {.backend = "cpu",
                  .resize_on = -1,
                  .max_errors = -1,
                  .schedule = SI_SCHED_DYNAMIC,
                  .drain_timeout = 60,
                  .slow_rank = -1,
                  .pc = {.batch = 32,
                         .pre = {.max_pixels = 100000000},
                         .mean = {0.485f, 0.456f, 0.406f},
                         .std = {0.229f, 0.224f, 0.225f}}};
    a.pc.post = si_post_config_default();
    char buf[512];
    const char *problem = parse_run(argc, argv, &a, buf, sizeof buf);
    if (problem) {
        bool help = !strcmp(problem, "help");
        if (m.rank == 0) {
            if (help)
                fputs(run_usage, stdout);
            else
                fprintf(stderr, "shardinfer run: %s\n", problem);
        }
        si_mpi_finalize();
        return help ? SI_EXIT_OK : SI_EXIT_USAGE;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    si_log_debug("rank %d of %d on host %s: node-local rank %d of %d", m.rank, m.size, host,
                 m.local_rank, m.local_size);
    int threads = a.threads ? a.threads : si_mpi_threads(&m);
    omp_set_num_threads(threads);
    a.pc.post_threads = a.post_threads ? a.post_threads : (threads > 1 ? threads / 2 : 1);
    if (m.rank == a.slow_rank) a.pc.slow_ms = a.slow_ms;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (m.rank == 0 && !a.threads && !getenv("OMP_NUM_THREADS") &&
        (long)threads * m.local_size * 2 <= online)
        /* mpirun binds each rank to one core when ranks <= 2: say how to give them more */
        si_log_warn("each rank uses %d of the node's %ld cores (the rank is bound to them); to "
                    "use more, run mpirun with --map-by slot:PE=%ld or --bind-to none, or pass "
                    "--threads",
                    threads, online, online / m.local_size);

    si_graph *g = NULL;
    si_engine *e = NULL;
    si_source *set = NULL;
    si_result *res = NULL;
    si_sched *sched = NULL;
    si_gather *gather = NULL;
    uint8_t *done = NULL;
    job J = {.m = &m, .pc = &a.pc};
    int code = SI_EXIT_FAIL;
    char sha[65] = "";
    char *cmdline = si_cli_join_args(argc, argv), *key = NULL;
    char pre[512], post_params[256];

    si_status st = si_graph_load(a.model, NULL, &g);
    if (st == SI_OK) st = model_norm(g, &a);
    if (st == SI_OK) st = si_pipeline_check_model(g, &a.pc);
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    if ((st = si_mpi_agree(&m, si_source_open(a.input, &a.src, &set))) != SI_OK) goto out;
    st = SI_OK;
    if (m.rank == 0) {
        st = check_output(&a);
        if (st == SI_OK) st = si_sha256_file(a.model, sha);
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    /* every backend takes the pipeline's batches as pixels through its slots */
    memcpy(a.eo.mean, a.pc.mean, sizeof a.eo.mean);
    memcpy(a.eo.std, a.pc.std, sizeof a.eo.std);
    a.eo.pixels = true;
#ifdef SI_HAVE_CUDA
    if (!strcmp(a.backend, "cuda")) { /* one GPU per rank, by node-local rank */
        const char *lr = getenv("SLURM_LOCALID");
        if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        int local = lr ? atoi(lr) : m.local_rank;
        char info[256] = "";
        st = si_cuda_select_device(local, &J.gpu, info, sizeof info);
        if (st == SI_OK)
            si_log_info("rank %d (host %s, node-local rank %d): GPU %d, %s", m.rank, host, local,
                        J.gpu, info);
        if (st == SI_OK && local >= si_cuda_device_count() && m.rank == 0)
            si_log_warn("more ranks on a node than visible GPUs (%d): ranks share GPUs",
                        si_cuda_device_count());
        if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
        if (a.pc.gpu_resize) {
            size_t ppi = a.pack_kb ? (size_t)a.pack_kb << 10 : SI_RS_PACK_DEFAULT(a.pc.pre.resize);
            size_t crop = (size_t)a.pc.pre.crop_h * (size_t)a.pc.pre.crop_w * 3;
            if (ppi < crop) /* every image must be able to fall back to a crop */
                st = si_error(SI_ERR_ARG, "--pack-kb %ld: less than one %dx%d crop (%zu bytes)",
                              a.pack_kb, a.pc.pre.crop_h, a.pc.pre.crop_w, crop);
            if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
            a.eo.pack_per_image = ppi;
        }
    }
#endif
    st = si_engine_create_opts(g, a.backend, a.pc.batch, &a.eo, &e);
    g = NULL; /* owned by the engine now, or freed */
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    if (si_engine_on_gpu(e) && m.rank == 0)
        si_log_info("cuda: %s, batch %d, %d slots: planned %.1f MiB of GPU memory per rank "
                    "(weights %.1f, activations %.1f, workspace %.1f, staging %.1f); engine ready "
                    "in %.2f s (algorithm search, graph capture, warm-up)",
                    si_precision_name(a.eo.precision), a.pc.batch, e->n_slots,
                    (double)e->mem.device_total / 1048576.0, (double)e->mem.weights / 1048576.0,
                    (double)e->mem.activations / 1048576.0, (double)e->mem.workspace / 1048576.0,
                    (double)(e->mem.input + e->mem.output + e->mem.scratch) / 1048576.0,
                    e->mem.init_seconds);

    const si_post_plan *plan = &a.pc.plan;
    uint64_t n = si_source_count(set);
    /* chunks of 8 batches; fewer when a small set would leave a rank fewer than 4 chunks, or when
     * a chunk's rows would pass 256 MB in one message. Every batch is [kB, kB + B) whatever the
     * chunk size, so the results do not depend on it. */
    uint64_t B = (uint64_t)a.pc.batch,
             per = (n + B * 4 * (uint64_t)m.size - 1) / (B * 4 * (uint64_t)m.size);
    uint64_t chunk = a.chunk ? (uint64_t)a.chunk : B * (per < 1 ? 1 : per > 8 ? 8 : per);
    while (!a.chunk && chunk > (uint64_t)a.pc.batch && chunk * plan->row_bytes > (256u << 20))
        chunk -= (uint64_t)a.pc.batch;
    snprintf(pre, sizeof pre,
             "resize=%d crop=%dx%d mean=%g,%g,%g std=%g,%g,%g exact=%d exif=%d max_pixels=%llu",
             a.pc.pre.resize, a.pc.pre.crop_h, a.pc.pre.crop_w, a.pc.mean[0], a.pc.mean[1],
             a.pc.mean[2], a.pc.std[0], a.pc.std[1], a.pc.std[2], a.pc.pre.exact, !a.pc.pre.no_exif,
             (unsigned long long)a.pc.pre.max_pixels);
    const si_post_config *pcfg = &a.pc.post;
    switch (pcfg->kind) {
    case SI_POST_CLASSIFY:
        snprintf(post_params, sizeof post_params, "classify topk=%d", plan->topk);
        break;
    case SI_POST_DETECT:
        snprintf(post_params, sizeof post_params,
                 "detect score_threshold=%g iou_threshold=%g max_detections=%d class_agnostic=%d",
                 pcfg->detect.score_threshold, pcfg->detect.iou_threshold,
                 pcfg->detect.max_detections, pcfg->detect.class_agnostic);
        break;
    case SI_POST_CONGESTION:
        snprintf(post_params, sizeof post_params,
                 "congestion k=%d sample=%g seed=%llu canny=%g,%g blur=%d sigma=%g",
                 pcfg->congestion.k, pcfg->congestion.sample_fraction,
                 (unsigned long long)pcfg->congestion.seed, pcfg->congestion.canny_lo,
                 pcfg->congestion.canny_hi, pcfg->congestion.blur_size,
                 pcfg->congestion.blur_sigma);
        break;
    default: snprintf(post_params, sizeof post_params, "%s", si_post_kind_name(pcfg->kind)); break;
    }
    if (asprintf(&key, "model_sha256=%s;input=%s;images=%llu;preprocess=%s;post=%s;batch=%d", sha,
                 si_source_spec(set), (unsigned long long)n, pre, post_params, a.pc.batch) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    si_result_meta meta = {.model_path = a.model,
                           .model_sha256 = sha,
                           .input_path = a.input,
                           .command_line = cmdline,
                           .preprocess = pre,
                           .post_params = post_params,
                           .resume_key = key,
                           .ranks = m.size,
                           .batch_size = a.pc.batch,
                           .flush_interval = a.flush_interval};
    /* rank 0 opens or creates the partial result; everyone learns the chunk size and what is
     * done already (the key needs rank 0's model hash: it is compared there alone) */
    uint32_t chunk32 = (uint32_t)chunk;
    st = SI_OK;
    if (m.rank == 0) {
        if (a.resume)
            st = si_result_resume(a.output, plan, n, &meta, &chunk32, &done, &res);
        else
            st = si_result_create(a.output, plan, n, chunk32, &meta, &res);
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    mpiCheck(MPI_Bcast(&chunk32, 1, MPI_UINT32_T, 0, m.comm));
    if (chunk32 % (uint32_t)a.pc.batch) {
        st = si_error(SI_ERR_ARG,
                      "--resume: the run used chunks of %u images, not a multiple of "
                      "--batch %d",
                      chunk32, a.pc.batch);
        goto out;
    }
    a.pc.chunk = chunk32;
    uint64_t n_chunks = (n + chunk32 - 1) / chunk32, done_before = 0;
    if (m.rank != 0) done = si_xcalloc(n_chunks / 8 + 1, 1);
    if (!done) done = si_xcalloc(n_chunks / 8 + 1, 1);
    for (uint64_t o = 0; o < n_chunks / 8 + 1; o += 1u << 30) {
        uint64_t c = n_chunks / 8 + 1 - o;
        mpiCheck(MPI_Bcast(done + o, (int)(c < (1u << 30) ? c : 1u << 30), MPI_BYTE, 0, m.comm));
    }
    if (m.rank == 0) done_before = si_result_images_done(res);
    if ((st = si_sched_create(&m, a.schedule, n_chunks, done, &sched)) != SI_OK) goto out;
    if (a.parallel_writer) {
        uint64_t offsets[SI_POST_MAX_COLS + 1] = {0};
        if (m.rank == 0) si_result_column_offsets(res, offsets);
        char *partial = si_result_partial_path(a.output);
        st = si_mpi_agree(&m, si_pwriter_open(&m, partial, plan, offsets, &J.pwrite));
        free(partial);
        if (st != SI_OK) goto out;
    }
    free(done);
    done = NULL;
    if (m.rank == 0)
        si_log_info("%llu images from %s on %d rank%s, batch %d, chunks of %u (%s), input %dx%d "
                    "(resize %d), post %s, %d thread%s + %d post per rank%s",
                    (unsigned long long)n, a.input, m.size, m.size > 1 ? "s" : "", a.pc.batch,
                    chunk32, a.schedule == SI_SCHED_STATIC ? "static" : "dynamic", a.pc.pre.crop_h,
                    a.pc.pre.crop_w, a.pc.pre.resize, post_params, threads, threads > 1 ? "s" : "",
                    a.pc.post_threads, done_before ? " (resuming)" : "");

    si_signals_install(a.drain_timeout, SI_EXIT_INTERRUPTED);
    gather = si_gather_create(&m);
    J.sched = sched;
    J.gather = gather;
    J.res = res;
    J.n = n;
    if (m.rank == 0) {
        J.busy = si_xcalloc((size_t)m.size, sizeof *J.busy);
        J.elapsed = si_xcalloc((size_t)m.size, sizeof *J.elapsed);
        J.final = si_xcalloc((size_t)m.size, sizeof *J.final);
        if (si_log_get_level() >= SI_LOG_INFO)
            J.prog = si_progress_create(a.progress, stderr, n, done_before, a.progress_interval);
    }
    si_pipeline_hooks hooks = {
        .ctx = &J, .next_chunk = hook_next, .chunk_done = hook_chunk, .pump = hook_pump};
    si_rank_stats mine;
    si_timeline tl = {0};
    if (a.timeline) { /* a rank sees at most every batch; chunks add a short batch each */
        uint64_t batches = n / (uint64_t)a.pc.batch + n / a.pc.chunk + 16;
        si_timeline_init(&tl, batches * SI_TL_STAGES);
        a.pc.timeline = &tl;
    }
    st = si_pipeline_run(&a.pc, e, set, &hooks, &mine);
    if (st != SI_OK) job_fail(&J, st, "the pipeline failed");
    if (a.timeline) {
        char path[4096];
        if (m.size > 1)
            snprintf(path, sizeof path, "%s.rank%d", a.timeline, m.rank);
        else
            snprintf(path, sizeof path, "%s", a.timeline);
        FILE *f = fopen(path, "w");
        si_status ts = f ? si_timeline_write(&tl, m.rank, f, true)
                         : si_error(SI_ERR_IO, "--timeline %s: cannot create", path);
        if (f && fclose(f) != 0) ts = si_error(SI_ERR_IO, "--timeline %s: write error", path);
        if (ts != SI_OK) si_log_warn("%s", si_error_msg()); /* the results are still written */
        si_timeline_free(&tl);
        a.pc.timeline = NULL;
    }
    si_log_debug("decode buffer: %s", mine.pinned ? "pinned (CUDA host memory)" : "pageable");
    mine.peak_rss_kb = peak_rss_kb();
    mine.t_init = e->mem.init_seconds;
    mine.gpu = si_engine_on_gpu(e) ? J.gpu : -1;
#ifdef SI_HAVE_CUDA
    if (si_engine_on_gpu(e)) {
        size_t used = 0, total = 0;
        if (si_cuda_mem_info(&used, &total) == SI_OK) mine.gpu_mem_kb = used / 1024;
    }
#endif
    if (m.rank != 0) {
        si_gather_finish(gather, &mine, sizeof mine);
    } else {
        J.final[0] = mine;
        while (si_gather_finished(gather) < m.size - 1) {
            hook_pump(&J, &mine);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    si_sched_free(sched);
    sched = NULL;
    uint64_t pbytes = si_pwriter_bytes(J.pwrite), pbytes_all = 0;
    si_pwriter_close(J.pwrite); /* collective: every rank's rows are written */
    J.pwrite = NULL;
    mpiCheck(MPI_Reduce(&pbytes, &pbytes_all, 1, MPI_UINT64_T, MPI_SUM, 0, m.comm));
    if (m.rank == 0 && a.parallel_writer)
        si_log_info("parallel writer: the ranks wrote %.1f MB of rows with MPI-IO",
                    (double)pbytes_all / 1e6);
    bool interrupted = false;
    if (m.rank == 0) {
        show_progress(&J, true);
        si_progress_free(J.prog);
        J.prog = NULL;
        bool complete = si_result_chunks_done(res) == si_result_chunks(res);
        uint64_t images_done = si_result_images_done(res);
        uint64_t failed = 0;
        double elapsed = si_now() - t_start;
        meta.elapsed_seconds = elapsed;
        if (complete) {
            st = si_result_finish(res, set, &meta, &failed);
        } else {
            st = si_result_close(res);
            interrupted = true;
        }
        res = NULL;
        if (st == SI_OK)
            print_summary(&m, J.final, n, failed, done_before, images_done, si_now() - t_start,
                          a.output, threads, a.pc.post_threads, complete);
        if (st == SI_OK && interrupted)
            st = si_error(SI_ERR_INTERRUPTED,
                          "interrupted: %llu of %llu images are done and flushed to %s.partial; "
                          "run the same command with --resume to finish",
                          (unsigned long long)images_done, (unsigned long long)n, a.output);
        if (st == SI_OK && a.max_errors >= 0) {
            double limit = a.max_errors_fraction ? a.max_errors * (double)n : a.max_errors;
            if ((double)failed > limit)
                st = si_error(SI_ERR_LIMIT,
                              "%llu of %llu images failed (%.2f%%), more than --max-errors allows "
                              "(%g%s); the result was written to %s for inspection",
                              (unsigned long long)failed, (unsigned long long)n,
                              n ? 100.0 * (double)failed / (double)n : 0.0,
                              a.max_errors_fraction ? 100 * a.max_errors : a.max_errors,
                              a.max_errors_fraction ? "%" : "", a.output);
        }
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    code = SI_EXIT_OK;
out:
    if (st == SI_ERR_VERIFY) code = SI_EXIT_VERIFY;
    if (st == SI_ERR_LIMIT) code = SI_EXIT_MAX_ERRORS;
    if (st == SI_ERR_INTERRUPTED) code = SI_EXIT_INTERRUPTED;
    si_progress_free(J.prog);
    si_pwriter_close(J.pwrite);
    si_result_close(res);
    si_sched_free(sched);
    si_gather_free(gather);
    free(done);
    free(J.busy);
    free(J.elapsed);
    free(J.final);
    si_bytes_free(&J.msg);
    free(key);
    free(cmdline);
    si_engine_free(e);
    si_graph_free(g);
    si_source_close(set);
    si_mpi_finalize();
    return code;
}
