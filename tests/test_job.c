/* The job as a library call (src/job): si_job_run with a config built in code, no argv, on the
 * e2e set (tests/e2e.py prepare: 23 images, one truncated, one corrupt; the tiny model). The
 * result must hold every image once, in order, with the expected statuses, and the settings
 * `shardinfer run` records (resume key, preprocessing, post parameters, chunk size) must equal
 * those of the CLI's run with the same settings (result_np1.h5: --batch 4); check_results.py
 * compares the rows (test_job_same_as_cli). Also: the exit codes of an existing output and of
 * --max-errors, the chunk-size rule, the post parameter strings of the resume key (pinned: a
 * resumed run compares them byte for byte), the chunk message framing, and rank 0's writer
 * thread slower than the pipeline.
 * Usage: test_job E2E_DIR (skipped, 77, without the set). Runs as a singleton MPI process. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/h5util.h"
#include "job/job.h"
#include "pipeline/chunk.h"
#include "tests/test_util.h"

static char dir[3000], model[4096], input[4096], output[4096], cli_output[4096];

static si_job_config small_config(void) {
    si_job_config c = si_job_config_default();
    c.model = model;
    c.input = input;
    c.output = output;
    c.pc.batch = 4;
    c.threads = 2;
    c.progress = SI_PROGRESS_NONE;
    c.command_line = "test_job";
    return c;
}

/* Reads a whole 1-D dataset as type mt into a new buffer of *n elements of `size` bytes. */
static void *read_1d(hid_t f, const char *name, hid_t mt, size_t size, hsize_t *n) {
    *n = 0;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t sp = H5Dget_space(d);
    H5Sget_simple_extent_dims(sp, n, NULL);
    void *v = calloc(*n ? *n : 1, size);
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) *n = 0;
    H5Sclose(sp);
    H5Dclose(d);
    return v;
}

/* Every image exactly once, in index order, with expected_status.txt's statuses. */
static void check_result_rows(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_MSG(f >= 0, "%s: cannot open", path);
    if (f < 0) return;
    hsize_t ni = 0, ns = 0;
    int64_t *index = read_1d(f, "index", H5T_NATIVE_INT64, 8, &ni);
    int32_t *status = read_1d(f, "status", H5T_NATIVE_INT32, 4, &ns);
    char spath[4096], name[1024];
    snprintf(spath, sizeof spath, "%s/expected_status.txt", dir);
    FILE *sf = fopen(spath, "r");
    CHECK_MSG(sf != NULL, "%s", spath);
    hsize_t i = 0;
    int want, failed = 0;
    while (sf && fscanf(sf, "%1023s %d", name, &want) == 2) {
        CHECK_MSG(i < ni && index[i] == (int64_t)i, "image %llu: index", (unsigned long long)i);
        CHECK_MSG(i < ns && status[i] == want, "image %llu (%s): status %d, expected %d",
                  (unsigned long long)i, name, i < ns ? status[i] : -99, want);
        failed += want != 0;
        i++;
    }
    CHECK_MSG(i == 23 && ni == i && ns == i, "%llu images listed, %llu in /index, %llu statuses",
              (unsigned long long)i, (unsigned long long)ni, (unsigned long long)ns);
    CHECK(failed == 2);
    if (sf) fclose(sf);
    free(index);
    free(status);
    H5Fclose(f);
}

/* The settings a run records must be the CLI's (the resume key joins the two). */
static void check_same_settings(const char *a, const char *b) {
    hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT),
          fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_MSG(fa >= 0 && fb >= 0, "cannot open %s or %s (run e2e_run_np1 first)", a, b);
    const char *attrs[] = {"resume_key", "preprocess", "post_params", "model_sha256"};
    for (int k = 0; fa >= 0 && fb >= 0 && k < 4; k++) {
        char *va = si_h5_attr_read_str(fa, attrs[k]), *vb = si_h5_attr_read_str(fb, attrs[k]);
        CHECK_MSG(va && vb && !strcmp(va, vb), "attribute %s: '%s' vs the CLI's '%s'", attrs[k],
                  va ? va : "(none)", vb ? vb : "(none)");
        free(va);
        free(vb);
    }
    uint32_t ca = 0, cb = 1; /* the chunk size the CLI chose, whatever the resume key says */
    if (fa >= 0 && fb >= 0) {
        hid_t aa = H5Aopen(fa, "chunk_size", H5P_DEFAULT),
              ab = H5Aopen(fb, "chunk_size", H5P_DEFAULT);
        if (aa >= 0) H5Aread(aa, H5T_NATIVE_UINT32, &ca);
        if (ab >= 0) H5Aread(ab, H5T_NATIVE_UINT32, &cb);
        if (aa >= 0) H5Aclose(aa);
        if (ab >= 0) H5Aclose(ab);
    }
    CHECK_MSG(ca == cb, "chunk_size %u vs the CLI's %u", ca, cb);
    if (fa >= 0) H5Fclose(fa);
    if (fb >= 0) H5Fclose(fb);
}

static void test_runs(const si_mpi *m) {
    si_job_config c = small_config();
    c.overwrite = true;
    CHECK(si_job_run(&c, m) == SI_EXIT_OK);
    check_result_rows(output);
    check_same_settings(output, cli_output);
    /* an existing output without overwrite: refused before any work */
    c.overwrite = false;
    CHECK(si_job_run(&c, m) == SI_EXIT_FAIL);
    /* two images fail: more than a limit of 1 (a count), and than 5% of 23; not than 10% */
    c.overwrite = true;
    c.max_errors = 1;
    CHECK(si_job_run(&c, m) == SI_EXIT_MAX_ERRORS);
    c.max_errors = 0.05;
    c.max_errors_fraction = true;
    CHECK(si_job_run(&c, m) == SI_EXIT_MAX_ERRORS);
    c.max_errors = 0.10;
    CHECK(si_job_run(&c, m) == SI_EXIT_OK);
    check_result_rows(output); /* a run over the limit still writes the same result */
}

/* Whether dataset name holds the same bytes in the results a and b. */
static bool same_dataset(const char *a, const char *b, const char *name) {
    void *v[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    const char *path[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        hid_t f = H5Fopen(path[i], H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : H5I_INVALID_HID;
        if (d >= 0) {
            hid_t ft = H5Dget_type(d), mt = H5Tget_native_type(ft, H5T_DIR_ASCEND),
                  sp = H5Dget_space(d);
            len[i] = (size_t)H5Sget_simple_extent_npoints(sp) * H5Tget_size(mt);
            v[i] = calloc(len[i] ? len[i] : 1, 1);
            if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v[i]) < 0) len[i] = 0;
            H5Sclose(sp);
            H5Tclose(mt);
            H5Tclose(ft);
            H5Dclose(d);
        }
        if (f >= 0) H5Fclose(f);
    }
    bool same = v[0] && v[1] && len[0] && len[0] == len[1] && !memcmp(v[0], v[1], len[0]);
    free(v[0]);
    free(v[1]);
    return same;
}

/* si_job_run, for test_capture */
typedef struct {
    const si_job_config *c;
    const si_mpi *m;
    int code;
} job_call;

static void call_job(void *arg) {
    job_call *j = arg;
    j->code = si_job_run(j->c, j->m);
}

/* si_job_run with the summary (stdout) read back into out. */
static int run_capturing(const si_job_config *c, const si_mpi *m, char *out, size_t cap) {
    job_call j = {c, m, -1};
    test_capture(1, call_job, &j, out, cap);
    return j.code;
}

/* Rank 0's writer thread slower than the pipeline (it waits for its queue of 8 to fill, then
 * takes 20 ms a chunk; 23 chunks of one image): the main thread finds the queue full and waits,
 * and every image is still in the result once, with the same rows as a run whose writer keeps
 * up. */
static void test_slow_writer(const si_mpi *m) {
    char fast[4096], slow[4096], summary[16384];
    snprintf(fast, sizeof fast, "%s/result_job_b1.h5", dir);
    snprintf(slow, sizeof slow, "%s/result_job_slow.h5", dir);
    si_job_config c = small_config();
    c.overwrite = true;
    c.pc.batch = 1;
    c.chunk = 1;
    c.flush_interval = 0.01; /* the thread's flushes on the interval, between chunks too */
    c.output = fast;
    CHECK(si_job_run(&c, m) == SI_EXIT_OK);
    c.output = slow;
    c.slow_write_ms = 20;
    CHECK(run_capturing(&c, m, summary, sizeof summary) == SI_EXIT_OK);
    check_result_rows(slow);
    const char *sets[] = {"status", "index", "topk_class", "topk_prob", "errors/index"};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        CHECK_MSG(same_dataset(fast, slow, sets[i]), "%s differs", sets[i]);
    const char *w = strstr(summary, "rank 0's writer thread:");
    const char *f = w ? strstr(w, "entries, full ") : NULL;
    unsigned long long chunks = 0, full = 0;
    bool found = f &&
                 sscanf(w, "rank 0's writer thread: busy %*f s of %*f s (%*f%%): %llu chunks",
                        &chunks) == 1 &&
                 sscanf(f, "entries, full %llu", &full) == 1;
    CHECK_MSG(found, "the summary does not give the writer's line:\n%s", summary);
    CHECK_MSG(chunks == 23 && full > 0, "the writer wrote %llu chunks, found full %llu times",
              chunks, full);
}

static void test_chunk_size(void) {
    CHECK(si_job_chunk_size(23, 4, 1, 40) == 8);              /* 23 images: 2 batches a chunk */
    CHECK(si_job_chunk_size(23, 4, 3, 40) == 4);              /* 3 ranks: 1 batch */
    CHECK(si_job_chunk_size(1000000, 32, 4, 40) == 256);      /* at most 8 batches */
    CHECK(si_job_chunk_size(1000000, 32, 1, 2 << 20) == 128); /* rows within 256 MB */
    CHECK(si_job_chunk_size(1000000, 32, 1, 64 << 20) == 32); /* at least one batch */
    CHECK(si_job_chunk_size(0, 8, 2, 40) == 8);
}

static void test_post_params(void) {
    si_post_config c = si_post_config_default();
    si_post_plan p = {.topk = 3};
    char buf[256];
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "classify topk=3"), "%s", buf); /* the plan's K, after clamping */
    c.kind = SI_POST_DETECT;
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "detect score_threshold=0.25 iou_threshold=0.45 max_detections=300 "
                           "class_agnostic=0"),
              "%s", buf);
    c.kind = SI_POST_CONGESTION;
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "congestion k=4 sample=0.05 seed=12345 canny=100,200 blur=71 sigma=7"),
              "%s", buf);
    c.kind = SI_POST_EMBED;
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "embed"), "%s", buf);
    c.kind = SI_POST_RAW;
    si_post_params(&c, &p, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "raw"), "%s", buf);
}

/* pack -> parse of a chunk's message, with and without its rows. */
static void test_framing(void) {
    si_post_config cfg = si_post_config_default();
    si_shape per = {.ndim = 1, .dims = {10}};
    const char *names[1] = {"logits"};
    si_post_plan p;
    CHECK(si_post_plan_make(&cfg, 1, names, &per, &p) == SI_OK);
    si_chunk c;
    si_chunk_init(&c, 8, &p);
    uint8_t *empty = calloc(1, p.row_bytes);
    si_chunk_reset(&c, 3, 24, 7, empty);
    unsigned seed = 7;
    for (size_t k = 0; k < 7 * p.row_bytes; k++) c.rows[k] = (uint8_t)test_rand(&seed);
    for (uint32_t j = 0; j < 7; j++) c.status[j] = j == 2 ? SI_IMG_CORRUPT : SI_IMG_OK;
    snprintf(c.msg[2], SI_MSG_LEN, "bad");
    double busy[SI_STAGES] = {1, 2, 3, 4, 5, 6};
    size_t tail = si_chunk_tail_size(&c);
    uint8_t *want_tail = malloc(tail);
    si_chunk_tail_pack(&c, want_tail);
    for (int with_rows = 0; with_rows < 2; with_rows++) {
        si_chunk_msg_header h;
        size_t len = si_chunk_msg_header_make(&c, with_rows, 5, 9.5, busy, &h);
        size_t rows = with_rows ? 7 * p.row_bytes : 0;
        CHECK(len == sizeof h + ((rows + 7) & ~(size_t)7) + tail);
        uint8_t *b = malloc(len);
        memset(b, 0xAB, len); /* poisoned */
        si_chunk_msg_pack(&c, &h, b);
        si_chunk_msg m;
        si_chunk_msg_parse(b, len, &m);
        CHECK(m.h.rank == 5 && m.h.id == 3 && m.h.elapsed == 9.5 && m.h.busy[5] == 6);
        CHECK(m.h.rows_bytes == rows && m.h.tail_bytes == tail);
        CHECK(memcmp(m.rows, c.rows, rows) == 0 && memcmp(m.tail, want_tail, tail) == 0);
        free(b);
    }
    free(want_tail);
    free(empty);
    si_chunk_free(&c);
}

int main(int argc, char **argv) {
    si_mpi m;
    si_mpi_init(&argc, &argv, &m);
    test_chunk_size();
    test_post_params();
    test_framing();
    struct stat sb;
    if (test_fail || argc < 2) {
        if (argc < 2) fprintf(stderr, "usage: test_job E2E_DIR\n");
        si_mpi_finalize();
        return argc < 2 ? 2 : test_finish();
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    snprintf(model, sizeof model, "%s/tiny.onnx", dir);
    snprintf(input, sizeof input, "%s/set.h5", dir);
    snprintf(output, sizeof output, "%s/result_job.h5", dir);
    snprintf(cli_output, sizeof cli_output, "%s/result_np1.h5", dir);
    if (stat(model, &sb) != 0 || stat(input, &sb) != 0) {
        fprintf(stderr, "skipped: no e2e set in %s (tests/e2e.py prepare)\n", dir);
        si_mpi_finalize();
        return TEST_SKIP_CODE;
    }
    test_runs(&m);
    test_slow_writer(&m);
    si_mpi_finalize();
    return test_finish();
}
