/* Command-line front ends. `run` is the MPI job: every rank parses the same arguments and
 * opens the same files, and every failure goes through si_mpi_agree so that it is printed once
 * and all ranks leave together. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "io/pack.h"
#include "io/result.h"
#include "io/resultview.h"
#include "mpi/ranks.h"
#include "pipeline.h"

/* --- option value parsing ------------------------------------------------------------------- */
static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_floats3(const char *s, float out[3]) {
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        out[i] = strtof(s, &end);
        if (errno || end == s) return false;
        if (i < 2) {
            if (*end != ',') return false;
            s = end + 1;
        }
    }
    return *end == 0;
}

static bool parse_hw(const char *s, int *h, int *w) {
    long a, b;
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s", s);
    char *x = strchr(tmp, 'x');
    if (!x) {
        if (!parse_int(tmp, 1, 16384, &a)) return false;
        *h = *w = (int)a;
        return true;
    }
    *x = 0;
    if (!parse_int(tmp, 1, 16384, &a) || !parse_int(x + 1, 1, 16384, &b)) return false;
    *h = (int)a;
    *w = (int)b;
    return true;
}

/* "shardinfer run --model ..." as typed (argv here starts at the subcommand). */
static char *join_args(int argc, char **argv) {
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

/* --- pack --------------------------------------------------------------------------------------
 */
static const char pack_usage[] =
    "usage: shardinfer pack SOURCE --output SET.h5 [--overwrite] [--chunk-bytes N]\n"
    "  SOURCE is a directory (JPEG files found recursively, ids = relative paths) or a list\n"
    "  file (lines: PATH, PATH<TAB>ID or PATH<TAB>ID<TAB>LABEL).\n";

int si_cli_pack(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"overwrite", no_argument, 0, 'f'},
                                         {"chunk-bytes", required_argument, 0, 'c'},
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
            if (!parse_int(optarg, 4096, 1L << 30, &v)) {
                fprintf(stderr, "shardinfer pack: --chunk-bytes '%s': expected 4096..2^30\n",
                        optarg);
                return SI_EXIT_USAGE;
            }
            o.chunk_bytes = (size_t)v;
            break;
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
    si_pack_stats st;
    if (si_pack(&o, &st) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    printf("packed %llu images (%.1f MB) into %s in %.2f s", (unsigned long long)st.count,
           (double)st.bytes / 1e6, o.output, st.seconds);
    if (st.not_jpeg) printf("; %llu records are not JPEG files", (unsigned long long)st.not_jpeg);
    printf("\n");
    return SI_EXIT_OK;
}

/* --- run ---------------------------------------------------------------------------------------
 */
static const char run_usage[] =
    "usage: [mpirun -np R] shardinfer run --model M.onnx --input SET --output RESULT.h5\n"
    "  SET: an HDF5 file, a list file of them, a glob pattern or a directory (one index space)\n"
    "                                  [options]\n"
    "  --batch N          images per batch (default 32)\n"
    "  --resize N         shorter side after resize (default: the model's metadata 'resize',\n"
    "                     else crop/0.875, 256 for 224)\n"
    "  --crop N|HxW       center crop; must equal the model's input size (default: taken from\n"
    "                     the model)\n"
    "  --mean R,G,B       normalisation in [0,1] units (default: the model's metadata 'mean',\n"
    "  --std R,G,B        else ImageNet's 0.485,0.456,0.406 / 0.229,0.224,0.225)\n"
    "  --topk K           classes kept per image (default 5)\n"
    "  --threads N        threads per rank (default: OMP_NUM_THREADS, else the rank's cores)\n"
    "  --max-errors N|F%  fail the run (exit 5) when more than N images, or F percent of them,\n"
    "                     fail to decode; the result is still written (default: no limit)\n"
    "  --max-pixels N     images declaring more pixels fail with status too_large\n"
    "                     (default 100000000)\n"
    "  --layout L         input layout: auto (default), packed, vlen, dense-nhwc, dense-nchw\n"
    "  --data-dataset P   the images' dataset (default: detected), --ids-dataset P,\n"
    "                     --offsets-dataset P (packed) likewise\n"
    "  --exact-preprocess decode at full size (no DCT-domain scaling): bit-exact with\n"
    "                     torchvision's Resize + CenterCrop on Pillow images, slower\n"
    "  --no-exif          ignore the EXIF orientation of JPEGs\n"
    "  --backend NAME     cpu (default)\n"
    "  --overwrite        replace an existing RESULT.h5\n"
    "  --quiet | --verbose\n";

typedef struct {
    const char *model, *input, *output, *backend;
    si_pipeline_config pc;
    bool mean_set, std_set, resize_set, overwrite;
    si_source_opts src; /* layout and dataset names of the input */
    double max_errors;  /* < 0: no limit; a count, or a fraction when max_errors_fraction */
    bool max_errors_fraction;
    int threads;
} run_args;

static const char *usage_error(char *buf, size_t cap, const char *fmt, const char *arg) {
    snprintf(buf, cap, fmt, arg);
    return buf;
}

/* Parses run's options; returns NULL or the one-line problem. */
static const char *parse_run(int argc, char **argv, run_args *a, char *buf, size_t cap) {
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
                                         {0, 0, 0, 0}};
    long v;
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
            if (!parse_int(optarg, 1, 65536, &v))
                return usage_error(buf, cap, "--batch '%s': expected an integer 1..65536", optarg);
            a->pc.batch = (int)v;
            break;
        case 'r':
            if (!parse_int(optarg, 1, 16384, &v))
                return usage_error(buf, cap, "--resize '%s': expected an integer 1..16384", optarg);
            a->pc.pre.resize = (int)v;
            a->resize_set = true;
            break;
        case 'c':
            if (!parse_hw(optarg, &a->pc.pre.crop_h, &a->pc.pre.crop_w))
                return usage_error(buf, cap, "--crop '%s': expected N or HxW", optarg);
            break;
        case 'M':
            if (!parse_floats3(optarg, a->pc.mean))
                return usage_error(buf, cap, "--mean '%s': expected three numbers R,G,B", optarg);
            a->mean_set = true;
            break;
        case 'S':
            if (!parse_floats3(optarg, a->pc.std) || a->pc.std[0] == 0 || a->pc.std[1] == 0 ||
                a->pc.std[2] == 0)
                return usage_error(buf, cap, "--std '%s': expected three nonzero numbers R,G,B",
                                   optarg);
            a->std_set = true;
            break;
        case 'k':
            if (!parse_int(optarg, 1, 1000000, &v))
                return usage_error(buf, cap, "--topk '%s': expected a positive integer", optarg);
            a->pc.topk = (int)v;
            break;
        case 't':
            if (!parse_int(optarg, 1, 4096, &v))
                return usage_error(buf, cap, "--threads '%s': expected 1..4096", optarg);
            a->threads = (int)v;
            break;
        case 'P':
            if (!parse_int(optarg, 1, 1L << 40, &v))
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
                                   "--layout '%s': expected auto, packed, vlen, "
                                   "dense-nhwc or dense-nchw",
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
                                   "--max-errors '%s': expected a count or a percentage "
                                   "like 0.5%%",
                                   optarg);
            a->max_errors_fraction = pct;
            a->max_errors = pct ? lim / 100.0 : lim;
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
    if (strcmp(a->backend, "cpu"))
        return usage_error(buf, cap, "--backend '%s': available backends: cpu", a->backend);
    return NULL;
}

/* Mean/std (and resize) from the model's metadata ("mean" = "0.485,0.456,0.406") unless given
 * on the command line: a model that carries its preprocessing cannot be fed wrongly by default. */
static si_status model_norm(const si_graph *g, run_args *a) {
    const char *rs = si_graph_meta(g, "resize");
    long size;
    if (rs && !a->resize_set) {
        if (!parse_int(rs, 1, 16384, &size))
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
        if (!parse_floats3(v, dst[i]) || (i == 1 && (!dst[i][0] || !dst[i][1] || !dst[i][2])))
            return si_error(SI_ERR_FORMAT, "%s: metadata '%s' = '%s' is not three numbers", g->path,
                            keys[i], v);
    }
    return SI_OK;
}

/* Rank 0 checks the output can be written before any work is done. */
static si_status check_output(const char *path, bool overwrite) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !overwrite)
        return si_error(SI_ERR_ARG, "%s: exists; pass --overwrite to replace it", path);
    char *copy = si_xstrdup(path);
    const char *dir = dirname(copy);
    si_status st = SI_OK;
    if (access(dir, W_OK) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot write in directory '%s': %s", path, dir,
                      strerror(errno));
    free(copy);
    return st;
}

static void print_summary(const si_mpi *m, const si_share_result *all, const si_share_result *ranks,
                          double elapsed, const char *output, int threads) {
    printf("shardinfer: %llu images (%llu ok, %llu failed) on %d rank%s x %d thread%s in %.2f s: "
           "%.1f images/s\n",
           (unsigned long long)all->count, (unsigned long long)all->ok,
           (unsigned long long)all->failed, m->size, m->size > 1 ? "s" : "", threads,
           threads > 1 ? "s" : "", elapsed, elapsed > 0 ? (double)all->count / elapsed : 0.0);
    /* read runs in its own thread, overlapped with the rest: its MB/s is the reader's busy
     * rate, and "starved" is how long decoding waited for it (the input is the bottleneck) */
    printf("  rank  images   failed  first-result   read (MB/s)       starved   decode   infer "
           "   post     total\n");
    for (int r = 0; r < m->size; r++) {
        const si_share_result *s = &ranks[r];
        printf("  %4d  %7llu  %6llu  %10.3f s  %6.2f s (%6.0f)  %6.2f s %6.2f s %6.2f s %6.2f s "
               "%6.2f s\n",
               r, (unsigned long long)s->count, (unsigned long long)s->failed, s->t_first,
               s->t_read, s->t_read > 0 ? (double)s->bytes_read / 1e6 / s->t_read : 0.0, s->t_wait,
               s->t_decode, s->t_infer, s->t_post, s->t_total);
    }
    printf("  results: %s\n", output);
    fflush(stdout);
}

int si_cli_run(int argc, char **argv) {
    si_mpi m;
    double t_start = si_now();
    si_mpi_init(&argc, &argv, &m);
    run_args a = {.backend = "cpu",
                  .max_errors = -1,
                  .pc = {.batch = 32,
                         .topk = 5,
                         .pre = {.max_pixels = 100000000},
                         .mean = {0.485f, 0.456f, 0.406f},
                         .std = {0.229f, 0.224f, 0.225f}}};
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
    int threads = a.threads ? a.threads : si_mpi_threads(&m);
    omp_set_num_threads(threads);
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
    si_share_result mine = {0}, all = {0};
    si_share_result *ranks = m.rank == 0 ? si_xcalloc((size_t)m.size, sizeof *ranks) : NULL;
    int64_t classes = 0;
    int code = SI_EXIT_FAIL;
    char sha[65] = "";
    char *cmdline = join_args(argc, argv);

    si_status st = si_graph_load(a.model, NULL, &g);
    if (st == SI_OK) st = model_norm(g, &a);
    if (st == SI_OK) st = si_pipeline_check_model(g, &a.pc, &classes);
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    if ((st = si_mpi_agree(&m, si_source_open(a.input, &a.src, &set))) != SI_OK) goto out;
    st = SI_OK;
    if (m.rank == 0) {
        st = check_output(a.output, a.overwrite);
        if (st == SI_OK) st = si_sha256_file(a.model, sha);
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    st = si_engine_create(g, a.backend, a.pc.batch, &e);
    g = NULL; /* owned by the engine now, or freed */
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;

    uint64_t n = si_source_count(set), first, count;
    si_mpi_share(n, m.size, m.rank, &first, &count);
    if (m.rank == 0)
        si_log_info("%llu images from %s on %d rank%s, batch %d, input %dx%d (resize %d), "
                    "mean %.3f,%.3f,%.3f std %.3f,%.3f,%.3f, %d thread%s per rank",
                    (unsigned long long)n, a.input, m.size, m.size > 1 ? "s" : "", a.pc.batch,
                    a.pc.pre.crop_h, a.pc.pre.crop_w, a.pc.pre.resize, a.pc.mean[0], a.pc.mean[1],
                    a.pc.mean[2], a.pc.std[0], a.pc.std[1], a.pc.std[2], threads,
                    threads > 1 ? "s" : "");
    st = si_pipeline_run(&a.pc, e, set, first, count, &mine);
    if (st == SI_OK)
        si_log_debug("decode buffer: %s", mine.pinned ? "pinned (CUDA host memory)" : "pageable");
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;

    st = si_mpi_gather(&m, n, a.pc.topk, &mine, &all, ranks);
    if (st == SI_ERR_VERIFY) code = SI_EXIT_VERIFY;
    double elapsed = si_now() - t_start;
    if (st == SI_OK && m.rank == 0) {
        char pre[256];
        snprintf(pre, sizeof pre, "resize=%d crop=%dx%d mean=%g,%g,%g std=%g,%g,%g topk=%d",
                 a.pc.pre.resize, a.pc.pre.crop_h, a.pc.pre.crop_w, a.pc.mean[0], a.pc.mean[1],
                 a.pc.mean[2], a.pc.std[0], a.pc.std[1], a.pc.std[2], a.pc.topk);
        si_result_meta meta = {.model_path = a.model,
                               .preprocess = pre,
                               .model_sha256 = sha,
                               .input_path = a.input,
                               .command_line = cmdline,
                               .ranks = m.size,
                               .batch_size = a.pc.batch,
                               .elapsed_seconds = elapsed};
        si_result_cols cols = {.n = n,
                               .k = a.pc.topk,
                               .index = all.index,
                               .status = all.status,
                               .topk_class = all.topk_class,
                               .topk_prob = all.topk_prob,
                               .n_errors = all.n_errors,
                               .err_index = all.err_index,
                               .err_msg = all.err_msg};
        st = si_result_write(a.output, a.overwrite, &meta, &cols, set);
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    if (m.rank == 0) print_summary(&m, &all, ranks, si_now() - t_start, a.output, threads);
    if (m.rank == 0 && a.max_errors >= 0) {
        double limit = a.max_errors_fraction ? a.max_errors * (double)n : a.max_errors;
        if ((double)all.failed > limit)
            st = si_error(SI_ERR_LIMIT,
                          "%llu of %llu images failed (%.2f%%), more than --max-errors allows "
                          "(%s%g%s); the result was written to %s for inspection",
                          (unsigned long long)all.failed, (unsigned long long)n,
                          n ? 100.0 * (double)all.failed / (double)n : 0.0, "",
                          a.max_errors_fraction ? 100 * a.max_errors : a.max_errors,
                          a.max_errors_fraction ? "%" : "", a.output);
    }
    if ((st = si_mpi_agree(&m, st)) != SI_OK) goto out;
    code = SI_EXIT_OK;
out:
    if (st == SI_ERR_VERIFY) code = SI_EXIT_VERIFY;
    if (st == SI_ERR_LIMIT) code = SI_EXIT_MAX_ERRORS;
    si_share_result_free(&mine);
    si_share_result_free(&all);
    free(ranks);
    free(cmdline);
    si_engine_free(e);
    si_graph_free(g);
    si_source_close(set);
    si_mpi_finalize();
    return code;
}

/* --- show --------------------------------------------------------------------------------------
 */
static const char show_usage[] =
    "usage: shardinfer show RESULT.h5 [--labels CLASSES.txt] [--limit N]\n"
    "  prints one line per image: id, status and the top-K classes with probabilities;\n"
    "  CLASSES.txt has one class name per line, in class-index order.\n";

int si_cli_show(int argc, char **argv) {
    static const struct option opts[] = {{"labels", required_argument, 0, 'l'},
                                         {"limit", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *labels = NULL;
    long limit = -1;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":l:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': labels = optarg; break;
        case 'n':
            if (!parse_int(optarg, 0, 1L << 40, &limit)) {
                fprintf(stderr, "shardinfer show: --limit '%s': expected a count\n", optarg);
                return SI_EXIT_USAGE;
            }
            break;
        case 'h': fputs(show_usage, stdout); return SI_EXIT_OK;
        case ':':
            fprintf(stderr, "shardinfer show: option '%s' needs a value\n", argv[optind - 1]);
            return SI_EXIT_USAGE;
        default:
            fprintf(stderr, "shardinfer show: unknown option '%s' (see shardinfer show --help)\n",
                    argv[optind - 1]);
            return SI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "shardinfer show: expected one RESULT.h5\n%s", show_usage);
        return SI_EXIT_USAGE;
    }
    if (si_result_print(argv[optind], labels, limit, stdout) != SI_OK) {
        si_log_error("%s", si_error_msg());
        return SI_EXIT_FAIL;
    }
    return SI_EXIT_OK;
}
