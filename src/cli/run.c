/* `shardinfer run`: turns argv into an si_job_config (src/job/job.h) and runs the job. Every rank
 * parses the same arguments; a usage error or --help is printed by rank 0 alone. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job/job.h"
#include "mpi/ranks.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static const char run_usage[] =
    "usage: [mpirun -np R] shardinfer run --model M.onnx --input SET --output RESULT.h5\n"
    "                                     [options]\n"
    "  SET: an HDF5 file, a list file of them, a glob pattern or a directory (one index space)\n"
    "input and preprocessing:\n"
    "  --batch N          images per batch (default: the model's fixed batch, else 32 on the\n"
    "                     CPU; on cuda the largest of 256, 128, 64, 32 planned within half the\n"
    "                     GPU's memory; --resume: the interrupted run's)\n"
    "  --resize N         shorter side after resize (default: the model's metadata 'resize',\n"
    "                     else crop/0.875, 256 for 224)\n"
    "  --crop N|HxW       center crop; must equal the model's input size (default: the model's)\n"
    "  --mean R,G,B       normalisation in [0,1] units (default: the model's metadata 'mean',\n"
    "  --std R,G,B        else ImageNet's 0.485,0.456,0.406 / 0.229,0.224,0.225)\n"
    "  --max-pixels N     images declaring more pixels, or a side over 65500 (libjpeg-turbo's\n"
    "                     limit), fail with status too_large (default 100000000)\n"
    "  --max-record-bytes N  images whose record declares more bytes are not read: status\n"
    "                     too_large (default 268435456, 256 MiB)\n"
    "  --allow-external   follow HDF5 external links, external storage and virtual datasets to\n"
    "                     files inside the input file's own directory (default: refused)\n"
    "  --layout L         auto (default), packed, vlen, dense-nhwc, dense-nchw\n"
    "  --data-dataset P   the images' dataset (default: detected), --ids-dataset P,\n"
    "                     --offsets-dataset P (packed) likewise\n"
    "  --exact-preprocess decode at full size (no DCT-domain scaling): bit-exact with\n"
    "                     torchvision's Resize + CenterCrop on Pillow images, slower\n"
    "  --no-exif          ignore the EXIF orientation of JPEGs\n"
    "  --interpolation F  the resize's filter: bilinear or bicubic, Pillow's (default: the\n"
    "                     model's metadata 'interpolation', else bilinear)\n"
    "postprocessing (--post, default classify):\n"
    "  --post classify    softmax + top-K: --topk K (default 5)\n"
    "  --post detect      YOLOv8 head: --score-threshold F (0.25), --iou-threshold F (0.45),\n"
    "                     --max-detections N (300), --class-agnostic\n"
    "  --post embed       L2-normalized vectors: --embed-dtype float32 (default) or float16\n"
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
    "  --backend NAME     auto (default: cuda when every rank sees a CUDA device, else cpu; the\n"
    "                     first info line says which and why), cpu, or cuda: one GPU per rank,\n"
    "                     chosen by the node-local rank (SLURM_LOCALID, "
    "OMPI_COMM_WORLD_LOCAL_RANK,\n"
    "                     or MPI's shared-memory communicator) among the devices\n"
    "                     CUDA_VISIBLE_DEVICES leaves visible\n"
    "  --precision P      fp16 (cuda default), bf16 or fp32 (the cpu runs fp32)\n"
    "  --slots S          cuda: batches in flight, each with its stream and buffers (default 3)\n"
    "  --workspace MB     cuda: cuDNN/cuBLASLt workspace per slot (default 256)\n"
    "  --no-graphs        cuda: launch op by op instead of replaying the captured CUDA Graph\n"
    "  --resize-on W      cuda: gpu (default) uploads the decoded images and resizes them on the\n"
    "                     GPU, cpu resizes in the decode threads; identical crops either way\n"
    "  --pack-kb K        cuda, --resize-on gpu: KiB per image of the slots' buffers of decoded\n"
    "                     images (default 9 * resize^2 bytes); larger ones are resized on the CPU\n"
    "  --decode D         cuda, --resize-on gpu: auto (default: gpu where every rank's GPU has\n"
    "                     hardware JPEG decoders, as A100, H100 and H200 do), gpu (nvJPEG's\n"
    "                     hardware decoder, fastest; libjpeg-turbo's pixels but in blocks\n"
    "                     clamped whole, about 0.15% of a photo's values; progressive, CMYK,\n"
    "                     4:1:1, EXIF-rotated and malformed files still decode on the CPU),\n"
    "                     gpu-exact (the hardware's planes, upsampled as libjpeg-turbo does:\n"
    "                     cpu's results bit for bit, slower)\n"
    "                     or cpu (libjpeg-turbo); the summary counts images per decoder\n"
    "  --decode-parts N   --decode gpu: host threads making each batch's decoder calls (default\n"
    "                     2; for measurements, as the two below)\n"
    "  --decode-cpu-share F\n"
    "                     --decode gpu: the part of the images the hardware could take that\n"
    "                     libjpeg-turbo decodes instead, 0..1 (default 0), or auto (balanced)\n"
    "  --decode-wait      --decode gpu: make the decoder's states before the first batch (else\n"
    "                     a slot's first batches decode on the CPU while they are made)\n"
    "  --autotune-cache D cuda: keep the convolutions' and matmuls' timed algorithm choices and\n"
    "                     the attention nodes' kernels in folder D (one file per GPU model, cuDNN\n"
    "                     version and workspace; default\n"
    "                     $XDG_CACHE_HOME/shardinfer/autotune or ~/.cache/...), or off\n"
    "  --timeline FILE    write when each stage worked on each batch, as CSV rows\n"
    "                     rank,stage,batch,t0,t1 (seconds from the pipeline's start; with\n"
    "                     several ranks, rank R writes FILE.rankR); bench/plot_perf.py draws it\n"
    "  --overwrite        replace an existing RESULT.h5 (or an interrupted run's partial one)\n"
    "  --quiet | --verbose\n"
    "Exit codes: 0 done, 1 failed, 2 usage, 4 verification, 5 --max-errors, 6 interrupted by a\n"
    "signal to the ranks (SIGTERM, SIGUSR1, SIGINT): rerun with --resume. mpirun forwards\n"
    "SIGUSR1; SIGTERM to mpirun itself ends the job with exit 1 (docs/user-guide.md).\n";

/* What the command line says: the job's config, and the options whose meaning depends on others
 * (resolved once every option is read). */
typedef struct {
    si_job_config job;
    const si_mpi *m;
    const char *precision;
    int resize_on; /* -1: the default, 0: cpu, 1: gpu */
} run_args;

/* An option's handler returns NULL when it took the value, the one-line problem when it did
 * not, or not_mine when the option belongs to another group. */
static const char not_mine[] = "";

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
    O_INTERP,
    O_WRITER,
    O_DRAIN,
    O_PRECISION,
    O_SLOTS,
    O_WORKSPACE,
    O_NOGRAPHS,
    O_RESIZEON,
    O_DECODE,
    O_PACKKB,
    O_AUTOTUNE,
    O_TIMELINE,
    O_EMBEDDTYPE,
    O_MAXRECORD,
    O_ALLOWEXT,
    O_DECPARTS,
    O_DECSHARE,
    O_DECWAIT
};

static const struct option run_opts[] = {{"model", required_argument, 0, 'm'},
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
                                         {"interpolation", required_argument, 0, O_INTERP},
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
                                         {"decode", required_argument, 0, O_DECODE},
                                         {"pack-kb", required_argument, 0, O_PACKKB},
                                         {"autotune-cache", required_argument, 0, O_AUTOTUNE},
                                         {"timeline", required_argument, 0, O_TIMELINE},
                                         {"embed-dtype", required_argument, 0, O_EMBEDDTYPE},
                                         {"max-record-bytes", required_argument, 0, O_MAXRECORD},
                                         {"allow-external", no_argument, 0, O_ALLOWEXT},
                                         {"decode-parts", required_argument, 0, O_DECPARTS},
                                         {"decode-cpu-share", required_argument, 0, O_DECSHARE},
                                         {"decode-wait", no_argument, 0, O_DECWAIT},
                                         {0, 0, 0, 0}};

/* Options that take their value as it is: paths, names and switches. */
static const char *opt_plain(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    si_job_config *j = &a->job;
    switch (c) {
    case 'm': j->model = arg; break;
    case 'i': j->input = arg; break;
    case 'o': j->output = arg; break;
    case 'B': j->backend = arg; break;
    case 'f': j->overwrite = true; break;
    case 'q': si_log_set_level(SI_LOG_WARN); break;
    case 'v': si_log_set_level(SI_LOG_DEBUG); break;
    case 'h': return "help";
    case 'D': j->src.data_dataset = arg; break;
    case 'I': j->src.ids_dataset = arg; break;
    case 'O': j->src.offsets_dataset = arg; break;
    case 'X': j->pc.pre.exact = true; break;
    case 'Z': j->pc.pre.no_exif = true; break;
    case O_AGNOSTIC: j->pc.post.detect.class_agnostic = true; break;
    case O_RESUME: j->resume = true; break;
    case O_NOGRAPHS: j->eo.no_graphs = true; break;
    case O_DECWAIT: j->decode_wait = true; break;
    case O_TIMELINE: j->timeline = arg; break;
    default: return not_mine;
    }
    return NULL;
}

/* --layout: auto, packed, vlen, dense-nhwc, dense-nchw. */
static const char *opt_layout(const char *arg, run_args *a, char *buf, size_t cap) {
    static const char *names[] = {"auto", "packed", "vlen", "dense-nhwc", "dense-nchw"};
    a->job.src.layout = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(arg, names[i])) a->job.src.layout = i;
    if (a->job.src.layout < 0)
        return usage_error(buf, cap,
                           "--layout '%s': expected auto, packed, vlen, dense-nhwc or "
                           "dense-nchw",
                           arg);
    return NULL;
}

/* Input and preprocessing. */
static const char *opt_input(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    si_pipeline_config *pc = &a->job.pc;
    long v;
    switch (c) {
    case 'b':
        if (!si_parse_int(arg, 1, 65536, &v))
            return usage_error(buf, cap, "--batch '%s': expected an integer 1..65536", arg);
        pc->batch = (int)v;
        a->job.batch_set = true;
        return NULL;
    case 'r':
        if (!si_parse_int(arg, 1, 16384, &v))
            return usage_error(buf, cap, "--resize '%s': expected an integer 1..16384", arg);
        pc->pre.resize = (int)v;
        a->job.resize_set = true;
        return NULL;
    case 'c':
        if (!si_parse_hw(arg, &pc->pre.crop_h, &pc->pre.crop_w))
            return usage_error(buf, cap, "--crop '%s': expected N or HxW", arg);
        return NULL;
    case 'M':
        if (!si_parse_floats3(arg, -SI_NORM_MEAN_MAX, SI_NORM_MEAN_MAX, pc->mean))
            return usage_error(buf, cap, "--mean '%s': expected " SI_NORM_MEAN_EXPECTED, arg);
        a->job.mean_set = true;
        return NULL;
    case 'S':
        if (!si_parse_floats3(arg, SI_NORM_STD_MIN, SI_NORM_STD_MAX, pc->std))
            return usage_error(buf, cap, "--std '%s': expected " SI_NORM_STD_EXPECTED, arg);
        a->job.std_set = true;
        return NULL;
    case 'P':
        if (!si_parse_int(arg, 1, 1L << 40, &v))
            return usage_error(buf, cap, "--max-pixels '%s': expected a positive integer", arg);
        pc->pre.max_pixels = (uint64_t)v;
        return NULL;
    case O_MAXRECORD:
        if (!si_parse_int(arg, 1, 1L << 40, &v))
            return usage_error(buf, cap, "--max-record-bytes '%s': expected a positive integer",
                               arg);
        a->job.src.max_record = (uint64_t)v;
        return NULL;
    case O_ALLOWEXT: a->job.src.allow_external = true; return NULL;
    case 'L': return opt_layout(arg, a, buf, cap);
    case O_INTERP:
        if (!si_interp_parse(arg, &pc->pre.interp))
            return usage_error(buf, cap, "--interpolation '%s': expected " SI_INTERP_CHOICES, arg);
        a->job.interp_set = true;
        return NULL;
    default: return not_mine;
    }
}

/* Postprocessing: --post and its parameters. */
static const char *opt_post(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    si_post_config *post = &a->job.pc.post;
    long v;
    double d;
    switch (c) {
    case 'k':
        if (!si_parse_int(arg, 1, 1000000, &v))
            return usage_error(buf, cap, "--topk '%s': expected a positive integer", arg);
        post->topk = (int)v;
        return NULL;
    case O_POST:
        if (!si_post_kind_parse(arg, &post->kind))
            return usage_error(buf, cap,
                               "--post '%s': expected classify, detect, embed, congestion or "
                               "raw",
                               arg);
        return NULL;
    case O_SCORE:
        if (!parse_double(arg, 0, 1, &d))
            return usage_error(buf, cap, "--score-threshold '%s': expected 0..1", arg);
        post->detect.score_threshold = (float)d;
        return NULL;
    case O_IOU:
        if (!parse_double(arg, 0, 1, &d))
            return usage_error(buf, cap, "--iou-threshold '%s': expected 0..1", arg);
        post->detect.iou_threshold = (float)d;
        return NULL;
    case O_MAXDET:
        if (!si_parse_int(arg, 0, 100000, &v))
            return usage_error(buf, cap, "--max-detections '%s': expected 0..100000", arg);
        post->detect.max_detections = (int)v;
        return NULL;
    case O_EMBEDDTYPE:
        if (!si_post_embed_dtype_parse(arg, &post->embed_dtype))
            return usage_error(buf, cap, "--embed-dtype '%s': expected float32 or float16", arg);
        return NULL;
    default: return not_mine;
    }
}

/* --max-errors N or F%. */
static const char *opt_max_errors(const char *arg, run_args *a, char *buf, size_t cap) {
    char *end;
    errno = 0;
    double lim = strtod(arg, &end);
    bool pct = *end == '%';
    /* !(lim >= 0) refuses NaN too, which no count of failures would ever be "within" */
    if (errno || end == arg || (*end && !(pct && !end[1])) || !(lim >= 0) || !isfinite(lim) ||
        (pct && lim > 100))
        return usage_error(buf, cap,
                           "--max-errors '%s': expected a count or a percentage like 0.5%%", arg);
    a->job.max_errors_fraction = pct;
    a->job.max_errors = pct ? lim / 100.0 : lim;
    return NULL;
}

/* --progress auto|bar|lines|none and --test-slow-rank R:MS. */
static const char *opt_progress(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    if (c == O_SLOW) {
        int r, ms, nc = 0;
        if (sscanf(arg, "%d:%d%n", &r, &ms, &nc) != 2 || arg[nc] || r < 0 || ms < 0)
            return usage_error(buf, cap, "--test-slow-rank '%s': expected RANK:MS", arg);
        a->job.slow_rank = r;
        a->job.slow_ms = ms;
        return NULL;
    }
    static const char *names[] = {"auto", "bar", "lines", "none"};
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(arg, names[i])) k = i;
    if (k < 0)
        return usage_error(buf, cap, "--progress '%s': expected auto, bar, lines or none", arg);
    a->job.progress = (si_progress_mode)k;
    return NULL;
}

/* Running: threads, schedule, chunks, writer, intervals, error limit. */
static const char *opt_running(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    si_job_config *j = &a->job;
    long v;
    switch (c) {
    case 't':
        if (!si_parse_int(arg, 1, 4096, &v))
            return usage_error(buf, cap, "--threads '%s': expected 1..4096", arg);
        j->threads = (int)v;
        return NULL;
    case O_POSTTHR:
        if (!si_parse_int(arg, 1, 4096, &v))
            return usage_error(buf, cap, "--post-threads '%s': expected 1..4096", arg);
        j->post_threads = (int)v;
        return NULL;
    case O_SCHED:
        if (strcmp(arg, "static") && strcmp(arg, "dynamic"))
            return usage_error(buf, cap, "--schedule '%s': expected static or dynamic", arg);
        j->schedule = !strcmp(arg, "static") ? SI_SCHED_STATIC : SI_SCHED_DYNAMIC;
        return NULL;
    case O_CHUNK:
        if (!si_parse_int(arg, 1, 1L << 24, &v))
            return usage_error(buf, cap, "--chunk '%s': expected images 1..16777216", arg);
        j->chunk = v;
        return NULL;
    case O_WRITER:
        if (strcmp(arg, "gather") && strcmp(arg, "parallel"))
            return usage_error(buf, cap, "--writer '%s': expected gather or parallel", arg);
        j->parallel_writer = !strcmp(arg, "parallel");
        return NULL;
    case O_DRAIN:
        if (!parse_double(arg, 0.1, 86400, &j->drain_timeout))
            return usage_error(buf, cap, "--drain-timeout '%s': expected seconds > 0", arg);
        return NULL;
    case O_FLUSH:
        if (!parse_double(arg, 0.001, 86400, &j->flush_interval))
            return usage_error(buf, cap, "--flush-interval '%s': expected seconds > 0", arg);
        return NULL;
    case O_PROGINT:
        if (!parse_double(arg, 0.001, 86400, &j->progress_interval))
            return usage_error(buf, cap, "--progress-interval '%s': expected seconds > 0", arg);
        return NULL;
    case 'E': return opt_max_errors(arg, a, buf, cap);
    case O_PROGRESS:
    case O_SLOW: return opt_progress(c, arg, a, buf, cap);
    default: return not_mine;
    }
}

/* The CUDA backend's options (checked against --backend once every option is read). */
static const char *opt_cuda(int c, const char *arg, run_args *a, char *buf, size_t cap) {
    si_engine_opts *eo = &a->job.eo;
    long v;
    switch (c) {
    case O_PRECISION:
        if (si_precision_parse(arg) < 0)
            return usage_error(buf, cap, "--precision '%s': fp16, bf16 or fp32", arg);
        a->precision = arg;
        return NULL;
    case O_SLOTS:
        if (!si_parse_int(arg, 1, 16, &v))
            return usage_error(buf, cap, "--slots '%s': expected an integer 1..16", arg);
        eo->slots = (int)v;
        return NULL;
    case O_WORKSPACE:
        if (!si_parse_int(arg, 1, 1 << 20, &v))
            return usage_error(buf, cap, "--workspace '%s': expected MiB, 1..1048576", arg);
        eo->workspace_bytes = (size_t)v << 20;
        return NULL;
    case O_RESIZEON:
        if (strcmp(arg, "cpu") && strcmp(arg, "gpu"))
            return usage_error(buf, cap, "--resize-on '%s': expected cpu or gpu", arg);
        a->resize_on = !strcmp(arg, "gpu");
        return NULL;
    case O_DECODE:
        if (!strcmp(arg, "cpu"))
            a->job.decode = SI_DECODE_CPU;
        else if (!strcmp(arg, "gpu"))
            a->job.decode = SI_DECODE_GPU;
        else if (!strcmp(arg, "gpu-exact"))
            a->job.decode = SI_DECODE_GPU_EXACT;
        else if (!strcmp(arg, "auto"))
            a->job.decode = SI_DECODE_AUTO;
        else
            return usage_error(buf, cap, "--decode '%s': expected auto, cpu, gpu or gpu-exact",
                               arg);
        return NULL;
    case O_DECPARTS:
        if (!si_parse_int(arg, 1, 64, &v))
            return usage_error(buf, cap, "--decode-parts '%s': expected an integer 1..64", arg);
        a->job.decode_parts = (int)v;
        return NULL;
    case O_DECSHARE: {
        char *end;
        double f = strtod(arg, &end);
        if (!strcmp(arg, "auto"))
            a->job.decode_cpu_share = -1;
        else if (*arg && !*end && f >= 0 && f <= 1)
            a->job.decode_cpu_share = f;
        else
            return usage_error(buf, cap, "--decode-cpu-share '%s': expected 0..1 or auto", arg);
        return NULL;
    }
    case O_AUTOTUNE:
        if (!*arg) return "--autotune-cache: expected a folder, or off";
        eo->autotune_dir = arg;
        return NULL;
    case O_PACKKB:
        if (!si_parse_int(arg, 1, 1 << 20, &v))
            return usage_error(buf, cap, "--pack-kb '%s': expected KiB, 1..1048576", arg);
        a->job.pack_kb = v;
        return NULL;
    default: return not_mine;
    }
}

typedef const char *(*opt_fn)(int c, const char *arg, run_args *a, char *buf, size_t cap);
static const opt_fn opt_groups[] = {opt_plain, opt_input, opt_post, opt_running, opt_cuda};

/* --backend auto: cuda when every rank sees a CUDA device, the CPU otherwise (one choice for
 * the whole job: collective), with why in j->backend_why. */
static void resolve_auto(run_args *a) {
    si_job_config *j = &a->job;
#ifndef SI_HAVE_CUDA
    j->backend = "cpu";
    snprintf(j->backend_why, sizeof j->backend_why, "auto: this build has no CUDA");
#else
    char why[200] = "";
    struct {
        int seen, rank;
    } mine = {si_cuda_device_probe(why, sizeof why) > 0, a->m->rank}, least;
    mpiCheck(MPI_Allreduce(&mine, &least, 1, MPI_2INT, MPI_MINLOC, a->m->comm));
    j->backend = least.seen ? "cuda" : "cpu";
    if (least.seen)
        snprintf(j->backend_why, sizeof j->backend_why, "auto: every rank sees a CUDA device");
    else if (a->m->size > 1)
        snprintf(j->backend_why, sizeof j->backend_why, "auto: rank %d sees no CUDA device%s%s",
                 least.rank, least.rank == a->m->rank && why[0] ? ": " : "",
                 least.rank == a->m->rank ? why : "");
    else
        snprintf(j->backend_why, sizeof j->backend_why, "auto: no CUDA device: %s", why);
#endif
}

/* The backend and what depends on it: the precision's default, the CUDA-only options, where
 * the resize runs. */
static const char *check_backend(run_args *a, char *buf, size_t cap) {
    si_job_config *j = &a->job;
    bool automatic = !strcmp(j->backend, "auto");
    if (automatic) resolve_auto(a);
    bool cuda = !strcmp(j->backend, "cuda");
#ifdef SI_HAVE_CUDA
    if (strcmp(j->backend, "cpu") && !cuda)
        return usage_error(buf, cap, "--backend '%s': available backends: auto, cpu, cuda",
                           j->backend);
#else
    if (strcmp(j->backend, "cpu"))
        return usage_error(buf, cap,
                           "--backend '%s': this build has the cpu backend only (CUDA was not "
                           "found when it was built); auto or cpu run here",
                           j->backend);
#endif
    if (automatic && !cuda &&
        (a->precision || j->eo.slots || j->eo.workspace_bytes || j->eo.no_graphs ||
         a->resize_on == 1 || j->pack_kb || j->decode >= SI_DECODE_GPU)) {
        /* the CUDA-only options say the user meant a GPU: say why there is none */
        if (!(a->precision && !strcmp(a->precision, "fp32"))) {
            snprintf(buf, cap,
                     "options for the cuda backend were given, but --backend auto chose cpu "
                     "(%s); pass --backend cuda to insist or drop them",
                     j->backend_why);
            return buf;
        }
    }
    j->eo.precision = a->precision ? si_precision_parse(a->precision)
                      : cuda       ? SI_PREC_FP16
                                   : SI_PREC_FP32;
    if (!cuda && j->eo.precision != SI_PREC_FP32)
        return usage_error(buf, cap, "--precision %s: the cpu backend runs fp32 only",
                           a->precision);
    if (!cuda && (j->eo.slots || j->eo.workspace_bytes || j->eo.no_graphs))
        return "--slots, --workspace and --no-graphs are for --backend cuda";
    if (!cuda && (a->resize_on == 1 || j->pack_kb))
        return "--resize-on gpu and --pack-kb are for --backend cuda";
    if (a->resize_on == 0 && j->pack_kb) return "--pack-kb is for --resize-on gpu";
    if (!cuda && j->decode >= SI_DECODE_GPU)
        return "--decode gpu and gpu-exact are for --backend cuda (the GPU's JPEG decoder)";
    if (a->resize_on == 0 && j->decode >= SI_DECODE_GPU)
        return "--decode gpu and gpu-exact need --resize-on gpu (the GPU resizes what it "
               "decodes)";
    if ((j->decode_parts || j->decode_cpu_share || j->decode_wait) &&
        (!cuda || a->resize_on == 0 || j->decode == SI_DECODE_CPU))
        return "--decode-parts, --decode-cpu-share and --decode-wait are for the GPU's JPEG "
               "decoder (--backend cuda, --resize-on gpu, --decode auto, gpu or gpu-exact)";
    j->pc.gpu_resize = cuda && (a->resize_on < 0 ? SI_GPU_RESIZE_DEFAULT : a->resize_on == 1);
    return NULL;
}

/* What must hold once every option is read. */
static const char *check_run(run_args *a, char *buf, size_t cap) {
    const si_job_config *j = &a->job;
    if (!j->model) return "missing --model";
    if (!j->input) return "missing --input";
    if (!j->output) return "missing --output";
    if (j->resume && j->overwrite) return "--resume and --overwrite exclude each other";
    if (j->chunk && j->batch_set && j->chunk % j->pc.batch) {
        snprintf(buf, cap, "--chunk %ld: must be a multiple of --batch (%d)", j->chunk,
                 j->pc.batch);
        return buf;
    }
    return check_backend(a, buf, cap);
}

/* Parses run's options; returns NULL, "help" or the one-line problem. */
static const char *parse_run(int argc, char **argv, run_args *a, char *buf, size_t cap) {
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:i:o:b:k:fqvh", run_opts, NULL)) != -1) {
        if (c == ':') return usage_error(buf, cap, "option '%s' needs a value", argv[optind - 1]);
        const char *r = not_mine;
        for (size_t g = 0; g < sizeof opt_groups / sizeof opt_groups[0] && r == not_mine; g++)
            r = opt_groups[g](c, optarg, a, buf, cap);
        if (r == not_mine)
            return usage_error(buf, cap, "unknown option '%s' (see shardinfer run --help)",
                               argv[optind - 1]);
        if (r) return r;
    }
    if (optind < argc) return usage_error(buf, cap, "unexpected argument '%s'", argv[optind]);
    return check_run(a, buf, cap);
}

int si_cli_run(int argc, char **argv) {
    si_mpi m;
    double t_start = si_now();
    si_mpi_init(&argc, &argv, &m);
    run_args a = {.job = si_job_config_default(), .m = &m, .resize_on = -1};
    a.job.launcher_local_rank = si_cli_launcher_local_rank();
    si_cli_engine_switches(&a.job.eo.sw);
    a.job.backend = "auto"; /* the library's default is the CPU; the command's is the GPU if any */
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
    char *cmdline = si_cli_join_args(argc, argv);
    a.job.command_line = cmdline;
    a.job.t_start = t_start;
    bool gpu_left = false;
    a.job.gpu_left = &gpu_left;
    int code = si_job_run(&a.job, &m);
    free(cmdline);
    si_mpi_finalize();
    if (gpu_left) { /* the result is closed, MPI done: the exit returns the GPU's resources */
        fflush(NULL);
        _exit(code);
    }
    return code;
}
