/* si_job_run: the job's steps in order (job.h says what the job is), and the setting up: threads,
 * model and input, the output check, the GPU, the engine, the resume key, the partial result and
 * what is done already. Every step that can fail on some rank goes through si_mpi_agree. The
 * streaming phase is in stream.c, the end in summary.c. */
#include "job.h"

#include <errno.h>
#include <libgen.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/parse.h"
#include "io/beside.h"
#include "io/h5util.h"
#include "io/lock.h"
#include "job_internal.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#include "decode/hwjpeg.h"
#include "engine/devplan.h"
#endif

si_job_config si_job_config_default(void) {
    si_job_config c = {.backend = "cpu",
                       .max_errors = -1,
                       .schedule = SI_SCHED_DYNAMIC,
                       .drain_timeout = 60,
                       .slow_rank = -1,
                       .launcher_local_rank = -1,
                       .eo = {.precision = SI_PREC_FP32},
                       .pc = {.batch = 32,
                              .pre = {.max_pixels = 100000000},
                              .mean = {0.485f, 0.456f, 0.406f},
                              .std = {0.229f, 0.224f, 0.225f}}};
    c.pc.post = si_post_config_default();
    return c;
}

uint64_t si_job_chunk_size(uint64_t n, int batch, int ranks, size_t row_bytes) {
    uint64_t B = (uint64_t)batch,
             per = (n + B * 4 * (uint64_t)ranks - 1) / (B * 4 * (uint64_t)ranks);
    uint64_t chunk = B * (per < 1 ? 1 : per > 8 ? 8 : per);
    while (chunk > B && chunk * row_bytes > (256u << 20)) chunk -= B;
    return chunk;
}

/* Mean/std (and resize, interpolation) from the model's metadata ("mean" = "0.485,0.456,0.406",
 * "interpolation" = "bicubic") unless the config sets them: a model that carries its
 * preprocessing cannot be fed wrongly by default. */
static si_status model_norm(si_job_state *J) {
    const si_graph *g = J->g;
    const char *rs = si_graph_meta(g, "resize");
    long size;
    if (rs && !J->cfg->resize_set) {
        if (!si_parse_int(rs, 1, 16384, &size))
            return si_error(SI_ERR_FORMAT, "%s: metadata 'resize' = '%s' is not a size", g->path,
                            rs);
        J->pc.pre.resize = (int)size;
    }
    const char *ip = si_graph_meta(g, "interpolation");
    if (ip && !J->cfg->interp_set && !si_interp_parse(ip, &J->pc.pre.interp))
        return si_error(SI_ERR_FORMAT,
                        "%s: metadata 'interpolation' = '%s': expected " SI_INTERP_CHOICES
                        " (or pass --interpolation)",
                        g->path, ip);
    const char *keys[2] = {"mean", "std"};
    float *dst[2] = {J->pc.mean, J->pc.std};
    bool set[2] = {J->cfg->mean_set, J->cfg->std_set};
    const float lo[2] = {-SI_NORM_MEAN_MAX, SI_NORM_STD_MIN};
    const float hi[2] = {SI_NORM_MEAN_MAX, SI_NORM_STD_MAX};
    const char *expected[2] = {SI_NORM_MEAN_EXPECTED, SI_NORM_STD_EXPECTED};
    for (int i = 0; i < 2; i++) {
        const char *v = si_graph_meta(g, keys[i]);
        if (set[i] || !v) continue;
        if (!si_parse_floats3(v, lo[i], hi[i], dst[i]))
            return si_error(SI_ERR_FORMAT, "%s: metadata '%s' = '%s': expected %s (or pass --%s)",
                            g->path, keys[i], v, expected[i], keys[i]);
    }
    return SI_OK;
}

/* The files made beside the output: PATH.partial, .journal, .undo, .undo.tmp, .lock. */
#define SIDE_FILES 5
static void side_paths(const char *out, char *side[SIDE_FILES]) {
    side[0] = si_result_partial_path(out);
    side[1] = si_result_journal_path(out);
    side[2] = si_result_undo_path(out);
    if (asprintf(&side[3], "%s.undo.tmp", out) < 0 || asprintf(&side[4], "%s.lock", out) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
}

/* The output path itself: named, and a regular file or nothing (a directory or a device found
 * only at the final rename would cost the whole run). */
static si_status check_output_path(const char *out) {
    struct stat sb;
    size_t len = strlen(out);
    if (len == 0) return si_error(SI_ERR_ARG, "--output is empty: name the result file");
    if (out[len - 1] == '/')
        return si_error(SI_ERR_ARG, "%s: --output names a directory; give a file name", out);
    if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))
        return si_error(SI_ERR_ARG, "%s: is a directory; --output must name a file", out);
    if (stat(out, &sb) == 0 && !S_ISREG(sb.st_mode))
        return si_error(SI_ERR_ARG, "%s: exists and is not a regular file", out);
    /* the files made beside it: never through a planted link (io/beside.h) */
    char *side[SIDE_FILES];
    side_paths(out, side);
    si_status st = SI_OK;
    for (int i = 0; i < SIDE_FILES && st == SI_OK; i++) st = si_beside_check(side[i]);
    for (int i = 0; i < SIDE_FILES; i++) free(side[i]);
    return st;
}

/* The output and the files beside it must not be any file the job reads: --overwrite would
 * remove the input set (or the model), and the final rename put the result in its place. By
 * device and inode, so that another spelling, a symbolic link or a hard link is the same file. */
static si_status check_not_input(const si_job_state *J) {
    const char *out = J->cfg->output;
    char *side[SIDE_FILES + 1];
    side[0] = si_xstrdup(out);
    side_paths(out, side + 1);
    struct stat model, spec;
    bool have_model = stat(J->cfg->model, &model) == 0, have_spec = stat(J->cfg->input, &spec) == 0;
    si_status st = SI_OK;
    for (int i = 0; i <= SIDE_FILES && st == SI_OK; i++) {
        struct stat sb;
        if (stat(side[i], &sb) != 0) continue;
        const char *what = NULL, *which = NULL;
        if (have_model && sb.st_dev == model.st_dev && sb.st_ino == model.st_ino)
            what = "the model", which = J->cfg->model;
        else if (have_spec && sb.st_dev == spec.st_dev && sb.st_ino == spec.st_ino)
            what = "the input", which = J->cfg->input;
        for (int f = 0; !what && f < si_source_files(J->set); f++)
            if (si_source_file_is(J->set, f, (uint64_t)sb.st_dev, (uint64_t)sb.st_ino))
                what = "an input file", which = si_source_file_path(J->set, f);
        if (what)
            st = si_error(SI_ERR_ARG,
                          "%s: is %s (%s): refusing to write the result there, whatever the "
                          "flags; choose another --output",
                          side[i], what, which);
    }
    for (int i = 0; i <= SIDE_FILES; i++) free(side[i]);
    return st;
}

/* Rank 0 checks the output can be written before any work is done. *complete: --resume of a
 * run whose result is whole already (nothing to do). */
static si_status check_output(const si_job_config *a, bool *complete) {
    struct stat sb;
    si_status pst = check_output_path(a->output);
    if (pst != SI_OK) return pst;
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
    if (a->resume && stat(a->output, &sb) == 0 && !have_partial) {
        *complete = true; /* if it is this run's: check_complete */
        return SI_OK;
    }
    char *copy = si_xstrdup(a->output);
    const char *dir = dirname(copy);
    si_status st = SI_OK;
    if (access(dir, W_OK) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot write in directory '%s': %s", a->output, dir,
                      strerror(errno));
    free(copy);
    return st;
}

/* Threads of this rank and of its postprocessing pool, and the test hook's slow rank. */
static void set_threads(si_job_state *J) {
    const si_job_config *cfg = J->cfg;
    const si_mpi *m = J->m;
    gethostname(J->host, sizeof J->host - 1);
    si_log_debug("rank %d of %d on host %s: node-local rank %d of %d", m->rank, m->size, J->host,
                 m->local_rank, m->local_size);
    int threads = J->threads = cfg->threads ? cfg->threads : si_mpi_threads(m);
    omp_set_num_threads(threads);
    J->pc.post_threads = cfg->post_threads ? cfg->post_threads : (threads > 1 ? threads / 2 : 1);
    if (m->rank == cfg->slow_rank) J->pc.slow_ms = cfg->slow_ms;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (m->rank == 0 && !cfg->threads && !getenv("OMP_NUM_THREADS") &&
        (long)threads * m->local_size * 2 <= online)
        /* mpirun binds each rank to one core when ranks <= 2: say how to give them more */
        si_log_warn("each rank uses %d of the node's %ld cores (the rank is bound to them); to "
                    "use more, run mpirun with --map-by slot:PE=%ld or --bind-to none, or pass "
                    "--threads",
                    threads, online, online / m->local_size);
}

/* Rank 0's thread: the model's sha256 into J->sha, its status into J->sha_st. */
static void *hash_model(void *arg) {
    si_job_state *J = arg;
    J->sha_st = si_sha256_file(J->cfg->model, J->sha);
    if (J->sha_st != SI_OK) snprintf(J->sha_err, sizeof J->sha_err, "%s", si_error_msg());
    return NULL;
}

/* Waits for the model's hash; its failure, if any, with its message. */
static si_status model_hash(si_job_state *J) {
    if (J->sha_running) pthread_join(J->sha_thread, NULL);
    J->sha_running = false;
    return J->sha_st == SI_OK ? SI_OK : si_error(J->sha_st, "%s", J->sha_err);
}

/* The resume key into J->key (and the preprocessing and postprocessing strings it holds):
 * everything a resumed run must share with the interrupted one, compared as a string (so its
 * spelling never changes). The model's hash must be known (model_hash). */
static si_status build_key(si_job_state *J) {
    const si_pipeline_config *pc = &J->pc;
    snprintf(J->pre, sizeof J->pre,
             "resize=%d crop=%dx%d mean=%g,%g,%g std=%g,%g,%g exact=%d exif=%d max_pixels=%llu",
             pc->pre.resize, pc->pre.crop_h, pc->pre.crop_w, pc->mean[0], pc->mean[1], pc->mean[2],
             pc->std[0], pc->std[1], pc->std[2], pc->pre.exact, !pc->pre.no_exif,
             (unsigned long long)pc->pre.max_pixels);
    /* named only when not the default, so that the results (and resume keys) of bilinear runs
     * stay what they were before the option existed */
    if (pc->pre.interp != SI_INTERP_BILINEAR) {
        size_t used = strlen(J->pre);
        snprintf(J->pre + used, sizeof J->pre - used, " interpolation=%s",
                 si_interp_name(pc->pre.interp));
    }
    /* the record cap decides which images are too_large: the same, only named when not the
     * default */
    uint64_t cap = J->cfg->src.max_record;
    if (cap && cap != SI_SOURCE_MAX_RECORD) {
        size_t used = strlen(J->pre);
        snprintf(J->pre + used, sizeof J->pre - used, " max_record=%llu", (unsigned long long)cap);
    }
    si_post_params(&pc->post, &pc->plan, J->post_params, sizeof J->post_params);
    /* the input by its real path ("./set.h5" and "set.h5" are one input) and by its content
     * (a different set re-staged under the same name is not resumed into); rank 0's key is
     * the one the result keeps */
    uint64_t fp = 0;
    if (J->m->rank == 0) {
        si_status st = si_source_fingerprint(J->set, &fp);
        if (st != SI_OK) return st;
    }
    const char *spec = si_source_spec(J->set);
    char *real = realpath(spec, NULL);
    free(J->key);
    if (asprintf(&J->key,
                 "model_sha256=%s;input=%s;input_fp=%016llx;images=%llu;preprocess=%s;post=%s;"
                 "batch=%d",
                 J->sha, real ? real : spec, (unsigned long long)fp,
                 (unsigned long long)si_source_count(J->set), J->pre, J->post_params,
                 pc->batch) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    free(real);
    return SI_OK;
}

/* --resume of a whole result: only of this run's (its resume key), else the output is another
 * model's result, or not a result at all, and "complete already" would be a lie. Then the
 * files the final step's last instants leave behind are removed. Rank 0. */
static si_status check_complete(si_job_state *J) {
    si_status st = model_hash(J);
    if (st == SI_OK) st = build_key(J);
    if (st != SI_OK) return st;
    const char *out = J->cfg->output;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    htri_t is = H5Fis_hdf5(out);
    hid_t f = is > 0 ? H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID;
    char *key = f >= 0 ? si_h5_attr_read_str(f, "resume_key") : NULL;
    if (f >= 0) H5Fclose(f);
    if (!key)
        return si_error(SI_ERR_ARG,
                        "--resume: %s exists but is not a shardinfer result (%s); refusing to "
                        "call it complete: choose another --output, or pass --overwrite instead "
                        "of --resume",
                        out, is > 0 ? "no resume key" : "not an HDF5 file");
    if (strcmp(key, J->key) != 0) {
        char diff[600];
        si_result_key_difference(key, J->key, diff, sizeof diff);
        st = si_error(SI_ERR_ARG,
                      "--resume: %s is a complete result of another run (%s); it is left as it "
                      "is: choose another --output, or pass --overwrite instead of --resume",
                      out, diff);
    }
    free(key);
    if (st != SI_OK) return st;
    /* the final step's last instants (after the rename) leave these behind */
    char *left[2] = {si_result_journal_path(out), si_result_undo_path(out)};
    for (int i = 0; i < 2; i++) {
        if (unlink(left[i]) == 0) si_log_info("%s: removed, left by a finished run", left[i]);
        free(left[i]);
    }
    return SI_OK;
}

/* Without --batch, a model whose batch dimension is fixed runs at that batch. */
static void fixed_batch(si_job_state *J) {
    const si_value *in = &J->g->values[J->g->inputs[0]];
    if (J->cfg->batch_set || J->g->n_inputs != 1 || in->batch_dim || in->shape.ndim != 4 ||
        in->shape.dims[0] < 1 || in->shape.dims[0] > 65536)
        return;
    J->pc.batch = (int)in->shape.dims[0];
    snprintf(J->batch_why, sizeof J->batch_why, "the model's fixed batch");
}

/* Rank 0, --resume without --batch: the interrupted (or, complete, the finished) run's batch,
 * which its resume key holds, whatever this run's default would be. */
static void resumed_batch(si_job_state *J) {
    if (!J->cfg->resume || J->cfg->batch_set || J->batch_why[0]) return;
    int b = si_result_batch_of(J->cfg->output, !J->complete);
    if (b <= 0) return;
    J->pc.batch = b;
    snprintf(J->batch_why, sizeof J->batch_why, "the %s run's",
             J->complete ? "finished" : "interrupted");
}

/* The model (checked against the pipeline), the input, and on rank 0 the output and the
 * model's hash. */
static si_status open_inputs(si_job_state *J) {
    const si_mpi *m = J->m;
    si_status st = si_graph_load(J->cfg->model, NULL, &J->g);
    if (st == SI_OK) fixed_batch(J);
    if (st == SI_OK) st = model_norm(J);
    if (st == SI_OK) st = si_pipeline_check_model(J->g, &J->pc);
    if (st == SI_OK && m->rank == 0 && J->pc.post.kind == SI_POST_CLASSIFY &&
        J->pc.post.topk > J->pc.plan.topk) /* said once, not silently clamped */
        si_log_warn("--topk %d is more than the model's %d classes: keeping all %d",
                    J->pc.post.topk, J->pc.plan.topk, J->pc.plan.topk);
    /* every op the backend cannot run, listed at once, before anything is set up */
    if (st == SI_OK) st = si_engine_check(J->g, J->cfg->backend, &J->eo);
    if ((st = si_mpi_agree(m, st)) != SI_OK) return st;
    if ((st = si_mpi_agree(m, si_source_open(J->cfg->input, &J->cfg->src, &J->set))) != SI_OK)
        return st;
    st = SI_OK;
    if (m->rank == 0) { /* the output's lock first: nothing is read or removed without it */
        st = check_output_path(J->cfg->output);
        if (st == SI_OK) st = check_not_input(J);
        if (st == SI_OK) st = si_lock_take(J->cfg->output, &J->lock);
        if (st == SI_OK) st = check_output(J->cfg, &J->complete);
        if (st == SI_OK) resumed_batch(J);
        /* the model's hash (0.2 s for 100 MB) goes on beside the GPU's and the engine's set-up;
         * make_meta waits for it */
        if (st == SI_OK && pthread_create(&J->sha_thread, NULL, hash_model, J) == 0)
            J->sha_running = true;
        else if (st == SI_OK)
            hash_model(J);
        if (st == SI_OK && J->complete) st = check_complete(J);
    }
    J->n = si_source_count(J->set);
    if ((st = si_mpi_agree(m, st)) != SI_OK) return st;
    int shared[3] = {J->complete, J->pc.batch, J->batch_why[0] != 0};
    mpiCheck(MPI_Bcast(shared, 3, MPI_INT, 0, m->comm));
    J->complete = shared[0];
    J->pc.batch = shared[1];
    if (shared[2] && !J->batch_why[0]) snprintf(J->batch_why, sizeof J->batch_why, "rank 0's");
    if (J->complete && m->rank == 0)
        si_log_info("--resume: %s is complete already; nothing to do", J->cfg->output);
    return SI_OK;
}

#ifdef SI_HAVE_CUDA
/* --decode on a CUDA run with the GPU resize, the one place the decoder is chosen: the GPU's
 * hardware JPEG decoder where every rank's GPU has one (auto) or where the user insists (gpu,
 * gpu-exact: an error on a rank without), the CPU otherwise; the choice and why in decode_why.
 * The decoder is made here for the engine's slots: its handle and states come up on a thread of
 * their own while the engine sets up (the pipeline decodes every batch on the CPU until they are
 * made). Under auto a GPU of a kind that has the decoders (si_cuda_hw_jpeg_expected) is
 * taken at its word while the GPU's set-up thread still makes the handle (0.5-0.8 s on an H100):
 * where the library then fails after all, that rank's CPU decodes, said once (decode.c). The
 * engine only lends each slot a device area for it. Collective. */
static si_status choose_decoder(si_job_state *J) {
    const si_decode_mode mode = J->cfg->decode;
    if (mode == SI_DECODE_CPU) {
        snprintf(J->decode_why, sizeof J->decode_why, "cpu (--decode cpu)");
        return SI_OK;
    }
    char why[200] = "";
    bool ok = mode == SI_DECODE_AUTO && si_mpi_all(J->m, si_cuda_hw_jpeg_expected(J->gpu));
    if (!ok) {
        si_cuda_prewarm_join();
        ok = si_cuda_hw_jpeg(why, sizeof why);
    }
    si_status st = ok || mode == SI_DECODE_AUTO
                       ? SI_OK
                       : si_error(SI_ERR_UNSUPPORTED, "--decode gpu on rank %d (host %s): %s",
                                  J->m->rank, J->host, why);
    if ((st = si_mpi_agree(J->m, st)) != SI_OK) return st;
    const bool all = si_mpi_all(J->m, ok);
    if (!all || why[0]) /* else describe_decoder, once the handle is made */
        snprintf(J->decode_why, sizeof J->decode_why, "%s (%s%s)", all ? "gpu" : "cpu",
                 mode == SI_DECODE_AUTO ? "auto: " : "",
                 all || !ok ? why : "a rank's GPU has no hardware JPEG decoder");
    if (!all) return SI_OK;
    const int parts = J->cfg->decode_parts > 0 ? J->cfg->decode_parts : SI_DECODE_PARTS_DEFAULT;
    const int slots = J->eo.slots > 0 ? J->eo.slots : SI_ENGINE_SLOTS_DEFAULT;
    J->hw = si_hwjpeg_create(slots, J->pc.batch, mode == SI_DECODE_GPU_EXACT, parts);
    if ((st = si_mpi_agree(J->m, J->hw ? SI_OK : SI_ERR_NOMEM)) != SI_OK) return st;
    J->eo.slots = slots;
    J->eo.device_area_per_image = SI_GPU_DECODE_PER_IMAGE;
    J->pc.hw_jpeg = J->hw;
    J->pc.decode_cpu_share = J->cfg->decode_cpu_share;
    return SI_OK;
}

/* The first info line's word on the hardware decoder where auto took it before its handle was
 * made: what rank 0's is, now that it is (or why it is not). */
static void describe_decoder(si_job_state *J) {
    if (!J->hw || J->decode_why[0]) return;
    char why[200];
    si_cuda_prewarm_join();
    bool ok = si_cuda_hw_jpeg(why, sizeof why);
    snprintf(J->decode_why, sizeof J->decode_why, "%s (auto: %s)", ok ? "gpu" : "cpu", why);
}
#endif

#ifdef SI_HAVE_CUDA
/* The launcher's node-local rank of this process, else MPI's shared-memory rank. */
static int local_rank(const si_job_state *J) {
    return J->cfg->launcher_local_rank >= 0 ? J->cfg->launcher_local_rank : J->m->local_rank;
}
#endif

/* --backend cuda: the GPU select_gpu will pick gets its CUDA context and, where the run may
 * decode on it, its hardware JPEG decoder's handle (0.5-0.8 s on an H100) on a thread of their
 * own while the model and the input are opened; select_gpu waits for the context, the handle
 * is awaited where it is needed (the decoder's own set-up thread, choose_decoder or
 * describe_decoder; job_free in any case). MPI is up by now: its start calls setenv, which
 * getenv (CUDA's start) is not safe beside. */
static void prewarm_gpu(si_job_state *J) {
#ifdef SI_HAVE_CUDA
    if (strcmp(J->cfg->backend, "cuda")) return;
    si_cuda_prewarm_start(local_rank(J), J->pc.gpu_resize && J->cfg->decode != SI_DECODE_CPU);
#else
    (void)J;
#endif
}

#ifdef SI_HAVE_CUDA
/* --backend cuda without --batch: the largest of the usual sizes up to 256 whose device plan
 * (this run's precision, slots, workspace, decoded images and decode areas: devplan) takes at
 * most half the GPU's memory, the rest left to the libraries, nvJPEG's own buffers and other
 * processes; the smallest of the ranks' choices. Batch 32, the CPU's default, underused an
 * H100. A given --chunk keeps the sizes that divide it. Collective. */
static si_status choose_batch(si_job_state *J, size_t ppi, size_t area) {
    static const int sizes[] = {256, 128, 64, 32};
    if (J->cfg->batch_set || J->batch_why[0]) return SI_OK;
    size_t used = 0, total = 0;
    si_status st = si_cuda_mem_info(&used, &total);
    const si_engine_opts *o = &J->eo;
    const size_t elem = o->precision == SI_PREC_FP32 ? 4 : 2;
    const int slots = o->slots > 0 ? o->slots : SI_ENGINE_SLOTS_DEFAULT;
    const size_t ws = o->workspace_bytes ? o->workspace_bytes : SI_ENGINE_WORKSPACE_DEFAULT;
    int pick = 0, smallest = 0;
    for (size_t k = 0; st == SI_OK && !pick && k < sizeof sizes / sizeof *sizes; k++) {
        if (J->cfg->chunk && J->cfg->chunk % sizes[k]) continue;
        smallest = sizes[k];
        si_devplan p;
        if (si_devplan_build(J->g, sizes[k], elem, slots, ws, true, ppi, area, &p) != SI_OK) {
            si_error_clear();
            continue;
        }
        if (p.device_total <= total / 2) pick = sizes[k];
        si_devplan_free(&p);
    }
    if (st == SI_OK && !smallest)
        st = si_error(SI_ERR_ARG,
                      "--chunk %ld: a multiple of no default batch size (256, 128, "
                      "64, 32): give --batch too",
                      J->cfg->chunk);
    if ((st = si_mpi_agree(J->m, st)) != SI_OK) return st;
    if (!pick) pick = smallest; /* too large for any: the engine's plan says by how much */
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &pick, 1, MPI_INT, MPI_MIN, J->m->comm));
    J->pc.batch = pick;
    snprintf(J->batch_why, sizeof J->batch_why,
             "cuda's default: the largest of 256, 128, 64, 32 planned within half the GPU's "
             "%.0f GiB",
             (double)total / (1 << 30));
    return SI_OK;
}
#endif

/* --backend cuda: one GPU per rank, by node-local rank (the launcher's, else MPI's), the batch
 * where the user gave none, and the buffers of decoded images for the GPU resize. */
static si_status select_gpu(si_job_state *J) {
#ifdef SI_HAVE_CUDA
    const si_mpi *m = J->m;
    si_cuda_prewarm_context(); /* this rank's, made meanwhile; the decoder's handle may follow */
    if (strcmp(J->cfg->backend, "cuda")) return SI_OK;
    int local = local_rank(J);
    char info[256] = "";
    si_status st = si_cuda_select_device(local, &J->gpu, info, sizeof info);
    int node_gpus = 0;
    if (st == SI_OK)
        si_log_info("rank %d (host %s, node-local rank %d): GPU %d, %s", m->rank, J->host, local,
                    si_cuda_node_gpu(J->gpu, &node_gpus), info);
    if (st == SI_OK && local >= node_gpus && m->rank == 0)
        si_log_warn("more ranks on a node than visible GPUs (%d): ranks share GPUs", node_gpus);
    if ((st = si_mpi_agree(m, st)) != SI_OK) return st;
    const long pack_kb = J->cfg->pack_kb;
    const size_t ppi = !J->pc.gpu_resize ? 0
                       : pack_kb         ? (size_t)pack_kb << 10
                                         : SI_RS_PACK_DEFAULT(J->pc.pre.resize);
    const bool hw = J->pc.gpu_resize && J->cfg->decode != SI_DECODE_CPU;
    if ((st = choose_batch(J, ppi, hw ? SI_GPU_DECODE_PER_IMAGE : 0)) != SI_OK) return st;
    if (J->pc.gpu_resize) {
        size_t crop = (size_t)J->pc.pre.crop_h * (size_t)J->pc.pre.crop_w * 3;
        if (ppi < crop) /* every image must be able to fall back to a crop */
            st = si_error(SI_ERR_ARG, "--pack-kb %ld: less than one %dx%d crop (%zu bytes)",
                          pack_kb, J->pc.pre.crop_h, J->pc.pre.crop_w, crop);
        if ((st = si_mpi_agree(m, st)) != SI_OK) return st;
        J->eo.pack_per_image = ppi;
        if ((st = choose_decoder(J)) != SI_OK) return st;
    }
#endif
    return SI_OK;
}

/* The engine at the run's batch. Where the batch is cuda's default and the backend cannot run the
 * model at it (cuDNN with no algorithm for a convolution of that batch within the workspace, as
 * a 3-channel 32x32 one at 256), half of it is tried, down to 32: the graph is read again, the
 * engine having freed it. Collective. */
static si_status create_engine_at_batch(si_job_state *J) {
    for (;;) {
        si_status st = si_engine_create_opts(J->g, J->cfg->backend, J->pc.batch, &J->eo, &J->e);
        J->g = NULL; /* owned by the engine now, or freed */
        const bool chosen = !J->cfg->batch_set && !strncmp(J->batch_why, "cuda's", 6);
        if (!chosen || J->pc.batch <= 32 || si_mpi_all(J->m, st == SI_OK) ||
            !si_mpi_all(J->m, st == SI_OK || st == SI_ERR_UNSUPPORTED))
            return si_mpi_agree(J->m, st);
        if (J->m->rank == 0)
            si_log_warn("batch %d: %s; trying %d", J->pc.batch,
                        st != SI_OK ? si_error_msg() : "a rank's backend cannot run the model",
                        J->pc.batch / 2);
        si_error_clear();
        si_engine_free(J->e);
        J->e = NULL;
        J->pc.batch /= 2;
        snprintf(J->batch_why, sizeof J->batch_why,
                 "cuda's default, halved until the backend could run the model");
        st = si_graph_load(J->cfg->model, NULL, &J->g);
        if (st == SI_OK) st = si_pipeline_check_model(J->g, &J->pc);
        if ((st = si_mpi_agree(J->m, st)) != SI_OK) return st;
    }
}

static si_status create_engine(si_job_state *J) {
    /* every backend takes the pipeline's batches as pixels through its slots */
    memcpy(J->eo.mean, J->pc.mean, sizeof J->eo.mean);
    memcpy(J->eo.std, J->pc.std, sizeof J->eo.std);
    J->eo.pixels = true;
    si_status st = create_engine_at_batch(J);
    if (st != SI_OK) return st;
#ifdef SI_HAVE_CUDA
    SI_ASSERT(!J->hw || si_engine_slots(J->e) == J->eo.slots);
    /* --decode-wait: every slot's decoder state before the first batch, so that every batch
     * splits alike (tests, measurements); a failure is said at the first batch */
    if (J->hw && J->cfg->decode_wait && si_hwjpeg_ready(J->hw) != SI_OK) si_error_clear();
#endif
    const si_engine_memory *mem = si_engine_mem(J->e);
    if (si_engine_on_gpu(J->e) && J->m->rank == 0)
        si_log_info("cuda: %s, batch %d, %d slots: planned %.1f MiB of GPU memory per rank "
                    "(weights %.1f, activations %.1f, workspace %.1f, staging %.1f); engine ready "
                    "in %.2f s (algorithm search, graph capture, warm-up; %d of %d convolutions' "
                    "and %d of %d matmuls' algorithms and %d of %d attention choices from the "
                    "autotune cache)",
                    si_precision_name(J->eo.precision), J->pc.batch, si_engine_slots(J->e),
                    (double)mem->device_total / 1048576.0, (double)mem->weights / 1048576.0,
                    (double)mem->activations / 1048576.0, (double)mem->workspace / 1048576.0,
                    (double)(mem->input + mem->output + mem->scratch) / 1048576.0,
                    mem->init_seconds, mem->convs_cached, mem->convs_tuned, mem->matmuls_cached,
                    mem->matmuls_tuned, mem->attn_cached, mem->attn_tuned);
    return SI_OK;
}

/* The result's metadata, with the resume key: everything a resumed run must share with the
 * interrupted one, compared as a string (so its spelling never changes). */
static si_status make_meta(si_job_state *J) {
    si_status st = J->m->rank == 0 ? model_hash(J) : SI_OK;
    if (st == SI_OK && !J->key) st = build_key(J);
    if ((st = si_mpi_agree(J->m, st)) != SI_OK) return st;
    J->meta = (si_result_meta){.model_path = J->cfg->model,
                               .model_sha256 = J->sha,
                               .input_path = J->cfg->input,
                               .command_line = J->cfg->command_line ? J->cfg->command_line : "",
                               .preprocess = J->pre,
                               .post_params = J->post_params,
                               .resume_key = J->key,
                               .input_identity = si_source_identity(J->set),
                               .ranks = J->m->size,
                               .batch_size = J->pc.batch,
                               .flush_interval = J->cfg->flush_interval};
    return SI_OK;
}

/* Rank 0 opens (resume) or creates the partial result; everyone learns the chunk size (a
 * resumed run keeps the interrupted one's) and the number of chunks. */
static si_status open_result(si_job_state *J) {
    const si_job_config *cfg = J->cfg;
    const si_post_plan *plan = &J->pc.plan;
    if (cfg->chunk && cfg->chunk % J->pc.batch) /* --batch given: the command line checked */
        return si_error(SI_ERR_ARG, "--chunk %ld: not a multiple of the batch (%d, %s)", cfg->chunk,
                        J->pc.batch, J->batch_why);
    uint64_t chunk = cfg->chunk ? (uint64_t)cfg->chunk
                                : si_job_chunk_size(J->n, J->pc.batch, J->m->size, plan->row_bytes);
    uint32_t chunk32 = (uint32_t)chunk;
    si_status st = SI_OK;
    if (J->m->rank == 0) {
        si_result_schema schema;
        si_post_schema(plan, &schema);
        /* --resume of a run killed before it recorded anything (or before it began): the same
         * command starts it, so that a requeued job step never needs another command line */
        char *partial = si_result_partial_path(cfg->output);
        bool begun = access(partial, F_OK) == 0;
        bool fresh = cfg->resume && !si_result_started(cfg->output);
        free(partial);
        if (fresh)
            si_log_warn(begun
                            ? "--resume: the interrupted run of %s was stopped while it created "
                              "its result, before any image was recorded: starting it afresh"
                            : "--resume: no run of %s to resume (no partial result): starting one",
                        cfg->output);
        if (cfg->resume && !fresh)
            st = si_result_resume(cfg->output, &schema, J->n, &J->meta, J->set, &chunk32, &J->done,
                                  &J->res);
        else
            st = si_result_create(cfg->output, &schema, J->n, chunk32, &J->meta, &J->res);
    }
    if ((st = si_mpi_agree(J->m, st)) != SI_OK) return st;
    mpiCheck(MPI_Bcast(&chunk32, 1, MPI_UINT32_T, 0, J->m->comm));
    if (chunk32 % (uint32_t)J->pc.batch)
        return si_error(SI_ERR_ARG,
                        "--resume: the run used chunks of %u images, not a multiple of "
                        "--batch %d",
                        chunk32, J->pc.batch);
    J->pc.chunk = J->chunk = chunk32;
    J->n_chunks = (J->n + chunk32 - 1) / chunk32;
    return SI_OK;
}

/* Rank 0's bitmap of the chunks done already (none unless resuming) goes to every rank, in
 * pieces of at most 1 GiB (MPI counts are int); the scheduler hands out only the others. */
static si_status share_done(si_job_state *J) {
    const si_mpi *m = J->m;
    uint64_t bytes = J->n_chunks / 8 + 1;
    if (m->rank != 0) J->done = si_xcalloc(bytes, 1);
    if (!J->done) J->done = si_xcalloc(bytes, 1);
    for (uint64_t o = 0; o < bytes; o += 1u << 30) {
        uint64_t c = bytes - o;
        mpiCheck(
            MPI_Bcast(J->done + o, (int)(c < (1u << 30) ? c : 1u << 30), MPI_BYTE, 0, m->comm));
    }
    if (m->rank == 0) J->done_before = si_result_images_done(J->res);
    return si_sched_create(m, J->cfg->schedule, J->n_chunks, J->done, &J->sched);
}

/* --writer parallel: every rank opens the partial result with MPI-IO at rank 0's offsets. */
static si_status open_parallel_writer(si_job_state *J) {
    if (!J->cfg->parallel_writer) return SI_OK;
    uint64_t offsets[SI_POST_MAX_COLS + 1] = {0};
    if (J->m->rank == 0) si_result_column_offsets(J->res, offsets);
    char *partial = si_result_partial_path(J->cfg->output);
    si_status st =
        si_mpi_agree(J->m, si_pwriter_open(J->m, partial, &J->pc.plan, offsets, &J->pwrite));
    free(partial);
    return st;
}

static void log_start(const si_job_state *J) {
    const si_job_config *cfg = J->cfg;
    const si_pipeline_config *pc = &J->pc;
    int size = J->m->size, threads = J->threads;
    if (J->m->rank == 0) {
        const double *s = J->t_step, *e = si_engine_mem(J->e)->init_step;
        double total = 0;
        for (int k = 0; k < SI_JOB_STEPS; k++) total += s[k];
        char engine[200] = "";
        if (si_engine_on_gpu(J->e))
            snprintf(engine, sizeof engine,
                     " (plan %.2f, allocate %.2f, slots %.2f, algorithms %.2f, warm-up %.2f, "
                     "capture %.2f)",
                     e[0], e[1], e[2], e[3], e[4], e[5]);
        si_log_info("start-up %.2f s: MPI and options %.2f, model, input and output %.2f, GPU "
                    "context %.2f, engine %.2f%s, input fingerprint %.2f, result %.2f",
                    total, s[0], s[1], s[2], s[3], engine, s[4], s[5]);
    }
    if (J->m->rank == 0)
        si_log_info(
            "%llu images from %s on %d rank%s, batch %d%s%s%s, chunks of %u (%s), input %dx%d "
            "(resize %d), post %s, backend %s%s%s%s, decode %s, %d thread%s + %d post "
            "per rank%s",
            (unsigned long long)J->n, cfg->input, size, size > 1 ? "s" : "", pc->batch,
            J->batch_why[0] ? " (" : "", J->batch_why, J->batch_why[0] ? ")" : "", J->chunk,
            cfg->schedule == SI_SCHED_STATIC ? "static" : "dynamic", pc->pre.crop_h, pc->pre.crop_w,
            pc->pre.resize, J->post_params, cfg->backend, cfg->backend_why[0] ? " (" : "",
            cfg->backend_why, cfg->backend_why[0] ? ")" : "",
            J->decode_why[0] ? J->decode_why : "cpu", threads, threads > 1 ? "s" : "",
            pc->post_threads, J->done_before ? " (resuming)" : "");
}

static int exit_code(si_status st) {
    switch (st) {
    case SI_OK: return SI_EXIT_OK;
    case SI_ERR_VERIFY: return SI_EXIT_VERIFY;
    case SI_ERR_LIMIT: return SI_EXIT_MAX_ERRORS;
    case SI_ERR_INTERRUPTED: return SI_EXIT_INTERRUPTED;
    default: return SI_EXIT_FAIL;
    }
}

static void job_free(si_job_state *J) {
#ifdef SI_HAVE_CUDA
    si_cuda_prewarm_join(); /* a job that ended before its GPU set-up */
#endif
    if (J->sha_running) pthread_join(J->sha_thread, NULL);
    si_progress_free(J->prog);
    si_pwriter_close(J->pwrite);
    si_result_close(J->res);
    si_sched_free(J->sched);
    si_gather_free(J->gather);
    free(J->done);
    free(J->busy);
    free(J->elapsed);
    free(J->final);
    si_bytes_free(&J->msg);
    free(J->key);
    if (J->cfg->gpu_left && J->e && si_engine_on_gpu(J->e)) {
        *J->cfg->gpu_left = true; /* the process's exit releases it, and the decoder */
    } else {
#ifdef SI_HAVE_CUDA
        si_hwjpeg_free(J->hw);
#endif
        si_engine_free(J->e);
    }
    si_graph_free(J->g);
    si_source_close(J->set);
    si_lock_release(J->lock); /* last: the result is renamed or left resumable by now */
}

int si_job_run(const si_job_config *cfg, const si_mpi *m) {
    si_job_state J = {.cfg = cfg, .m = m, .pc = cfg->pc, .eo = cfg->eo, .host = "?"};
    J.t_start = cfg->t_start > 0 ? cfg->t_start : si_now();
    double t = si_now();
    J.t_step[0] = t - J.t_start;
#define STEP(k) (J.t_step[k] = si_now() - t, t = si_now())
    set_threads(&J);
    prewarm_gpu(&J);
    si_status st = open_inputs(&J);
    STEP(1);
    if (st == SI_OK && J.complete) {
        job_free(&J);
        return SI_EXIT_OK;
    }
    if (st == SI_OK) st = select_gpu(&J);
    STEP(2);
    if (st == SI_OK) st = create_engine(&J);
    STEP(3);
    if (st == SI_OK) st = make_meta(&J);
    STEP(4);
    if (st == SI_OK) st = open_result(&J);
    if (st == SI_OK) st = share_done(&J);
    if (st == SI_OK) st = open_parallel_writer(&J);
    STEP(5);
#undef STEP
    if (st == SI_OK) {
        free(J.done); /* the scheduler has it */
        J.done = NULL;
#ifdef SI_HAVE_CUDA
        if (m->rank == 0) describe_decoder(&J);
#endif
        log_start(&J);
        si_job_stream(&J); /* ends the job with MPI_Abort on a failure of the run */
        st = si_mpi_agree(m, si_job_finish(&J));
    }
    int code = exit_code(st);
    job_free(&J);
    return code;
}
