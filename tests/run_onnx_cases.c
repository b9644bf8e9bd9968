/* Runs test cases in ONNX's backend node-test layout (DIR/model.onnx,
 * DIR/test_data_set_N/input_K.pb and output_K.pb) on the CPU backend and compares every output
 * with the suite's own rule, |out - ref| <= abs_tol + rel_tol * |ref| (rel_tol 1e-3, abs_tol 1e-7
 * by default), or, with --max-rel, to a bound on max|out - ref| / max|ref| instead. A case the
 * engine refuses as unsupported fails unless listed in --expect-unsupported with its reason, so the
 * claimed-op list in docs cannot drift from what runs. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "engine/engine.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static double rel_tol = 1e-3, abs_tol = 1e-7, max_rel = -1;
/* --backend/--precision: what runs the cases; --vs-cpu TOL: also run them on the CPU backend and
 * hold max|out - cpu| / max|cpu| to TOL (GPU parity); --no-ref: skip the .pb references */
static const char *backend = "cpu";
static int precision = SI_PREC_FP32;
static double vs_cpu = -1;
static bool no_ref;
static bool verbose; // --verbose: the engine says what it chose (conv algorithms, fused GEMMs)
static double worst_parity;
static char worst_parity_case[256];
static const char *prefix = ""; /* directory mode: only cases whose names start with it */
static char **expected, **skipped;
static int n_expected, n_skipped;
static int passed, failed, unsupported_ok;

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool expect_unsupported(const char *name) {
    for (int i = 0; i < n_expected; i++)
        if (!strcmp(expected[i], name)) return true;
    return false;
}

static int load_set(const char *dir, const char *kind, si_tensor *t, int cap) {
    int n = 0;
    for (; n < cap; n++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, kind, n);
        struct stat sb;
        if (stat(p, &sb) != 0) break;
        if (si_tensor_load_pb(p, &t[n]) != SI_OK) {
            fprintf(stderr, "  %s\n", si_error_msg());
            return -1;
        }
    }
    return n;
}

static const char *base(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The same case on the CPU backend: max|e's output - cpu| / max|cpu| per output, against vs_cpu.
 * Returns 0 when every output is within it. */
static int parity(const si_model_proto *m, const si_graph_opts *opts, si_tensor **data_in,
                  int ndata, int batch, si_engine *e, const char *name) {
    si_graph *g;
    si_engine *c = NULL;
    if (si_graph_build(m, opts, &g) != SI_OK || si_engine_create(g, "cpu", batch, &c) != SI_OK) {
        printf("FAIL %s: the CPU twin: %s\n", name, si_error_msg());
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < ndata; i++)
        memcpy(si_engine_input(c, i), data_in[i]->data, sizeof(float) * (size_t)data_in[i]->numel);
    if (si_engine_run(c, batch) != SI_OK) {
        printf("FAIL %s: the CPU twin: %s\n", name, si_error_msg());
        si_engine_free(c);
        return 1;
    }
    for (int o = 0; o < si_engine_graph(e)->n_outputs; o++) {
        si_shape sa, sb;
        const float *a = si_engine_output(e, o, &sa), *b = si_engine_output(c, o, &sb);
        if (si_engine_output_dtype(e, o) != SI_DT_FLOAT) continue; /* shapes: computed on host */
        int64_t n = si_shape_numel(&sb);
        double md = 0, mr = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = a[i] == b[i] ? 0 : fabs((double)a[i] - b[i]); /* infinities agree too */
            if (isnan(b[i]) || isnan(a[i])) d = isnan(a[i]) && isnan(b[i]) ? 0 : INFINITY;
            if (!(d <= md)) md = d;
            if (isfinite(b[i]) && fabs(b[i]) > mr) mr = fabs(b[i]);
        }
        double rel = mr > 0 ? md / mr : md;
        printf("  parity %s output %d: max|%s - cpu| / max|cpu| = %.3g (bound %.1g)\n", name, o,
               backend, rel, vs_cpu);
        if (!(rel <= worst_parity)) {
            worst_parity = rel;
            snprintf(worst_parity_case, sizeof worst_parity_case, "%s", name);
        }
        if (!(rel <= vs_cpu)) {
            printf("FAIL %s: output %d differs from the CPU backend: %.3g > %.1g\n", name, o, rel,
                   vs_cpu);
            rc = 1;
        }
    }
    si_engine_free(c);
    return rc;
}

/* The test's inputs, in the model's order: those that only feed parameter slots (or are not
 * float, or feed only shape arithmetic) into bind[] as constants, the image data into data_in[].
 * Borrows in[]. */
static void split_inputs(const si_model_proto *m, si_tensor *in, int nin, si_tensor *bind,
                         int *nbind, si_tensor **data_in, const char **data_name, int *ndata) {
    int runtime_inputs = 0;
    for (int i = 0; i < m->n_inputs; i++) {
        bool is_init = false;
        for (int k = 0; k < m->n_inits; k++)
            if (m->inits[k].name && !strcmp(m->inits[k].name, m->inputs[i].name)) is_init = true;
        if (is_init) continue;
        if (runtime_inputs >= nin) break;
        si_tensor *t = &in[runtime_inputs++];
        const char *nm = m->inputs[i].name;
        if (si_model_input_is_param(m, nm) || t->dtype != SI_DT_FLOAT ||
            si_model_input_host_only(m, nm)) {
            bind[*nbind] = *t;
            bind[*nbind].name = (char *)nm;
            (*nbind)++;
        } else {
            data_in[*ndata] = t;
            data_name[(*ndata)++] = nm;
        }
    }
}

/* Output o of the engine's run against the reference tensor r: 0 when within the tolerances,
 * 1 (and a FAIL line) when not. */
static int compare_output(si_engine *e, int o, const si_tensor *r, const char *name) {
    si_shape sh;
    const float *yf = si_engine_output(e, o, &sh);
    bool y_int = si_engine_output_dtype(e, o) == SI_DT_INT64;
    bool r_int = r->dtype != SI_DT_FLOAT && r->dtype != SI_DT_DOUBLE && r->dtype != SI_DT_FLOAT16;
    /* a bool computed from image data (IsNaN, IsInf) is the engine's float 0 or 1, held
     * exactly as the integer types are */
    bool bool_as_float = r->dtype == SI_DT_BOOL && !y_int;
    bool same =
        r->ndim == sh.ndim && (r_int == y_int || bool_as_float) && r->dtype != SI_DT_FLOAT16;
    for (int d = 0; same && d < r->ndim; d++) same = r->dims[d] == sh.dims[d];
    if (!same) {
        printf("FAIL %s: output %d shape differs from the reference\n", name, o);
        return 1;
    }
    double maxdiff = 0, maxref = 0;
    int64_t bad = 0, first_bad = -1;
    double *y = malloc(sizeof(double) * (size_t)(r->numel ? r->numel : 1));
    double *rv = malloc(sizeof(double) * (size_t)(r->numel ? r->numel : 1));
    for (int64_t i = 0; i < r->numel; i++) { /* both sides as doubles, by their dtypes */
        y[i] = y_int ? (double)((const int64_t *)(const void *)yf)[i] : (double)yf[i];
        switch (r->dtype) {
        case SI_DT_FLOAT: rv[i] = ((const float *)r->data)[i]; break;
        case SI_DT_DOUBLE: rv[i] = ((const double *)r->data)[i]; break;
        case SI_DT_INT64: rv[i] = (double)((const int64_t *)r->data)[i]; break;
        case SI_DT_INT32: rv[i] = ((const int32_t *)r->data)[i]; break;
        case SI_DT_INT8: rv[i] = ((const int8_t *)r->data)[i]; break;
        case SI_DT_INT16: rv[i] = ((const int16_t *)r->data)[i]; break;
        case SI_DT_UINT16: rv[i] = ((const uint16_t *)r->data)[i]; break;
        case SI_DT_UINT32: rv[i] = ((const uint32_t *)r->data)[i]; break;
        case SI_DT_UINT64: rv[i] = (double)((const uint64_t *)r->data)[i]; break;
        default: rv[i] = ((const uint8_t *)r->data)[i]; /* uint8, bool */
        }
    }
    for (int64_t i = 0; i < r->numel; i++) {
        double d = fabs(y[i] - rv[i]);
        if (isnan(rv[i]) != isnan(y[i]))
            d = INFINITY;
        else if (isnan(rv[i]))
            d = 0;
        if (r_int ? d != 0 : d > abs_tol + rel_tol * fabs(rv[i])) {
            if (first_bad < 0) first_bad = i;
            bad++;
        }
        if (d > maxdiff) maxdiff = d;
        if (fabs(rv[i]) > maxref) maxref = fabs(rv[i]);
    }
    double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    /* with --max-rel the normalised bound is the criterion, instead of the per-element rule */
    if (max_rel >= 0) bad = rel > max_rel;
    if (bad) {
        printf("FAIL %s: output %d: %lld of %lld values off (first at %lld: %g vs %g), "
               "max|diff|/max|ref| = %.3g\n",
               name, o, (long long)bad, (long long)r->numel, (long long)first_bad,
               first_bad >= 0 ? y[first_bad] : 0.0, first_bad >= 0 ? rv[first_bad] : 0.0, rel);
    } else if (max_rel >= 0) {
        printf("  %s: output %d: max|diff| = %.3g, max|ref| = %.3g, max|diff|/max|ref| = "
               "%.3g (bound %.1g)\n",
               name, o, maxdiff, maxref, rel, max_rel);
    }
    free(y);
    free(rv);
    return bad ? 1 : 0;
}

/* Returns 0 pass, 1 fail, 2 unsupported. */
static int run_set(si_model_proto *m, const char *setdir, const char *name) {
    si_tensor in[16] = {0}, ref[16] = {0};
    int nin = load_set(setdir, "input", in, 16), nref = load_set(setdir, "output", ref, 16);
    int rc = 1;
    si_engine *e = NULL;
    if (nin < 0 || nref < 0) {
        /* sequence and optional test data are not TensorProtos: only tensors are claimed */
        if (expect_unsupported(name)) {
            printf("UNSUPPORTED (expected) %s: test data is not a tensor\n", name);
            rc = 2;
        }
        goto done;
    }
    /* inputs that only feed parameter slots become constants (see graph.h) */
    si_tensor bind[16];
    si_tensor *data_in[16];
    const char *data_name[16];
    int nbind = 0, ndata = 0;
    split_inputs(m, in, nin, bind, &nbind, data_in, data_name, &ndata);
    si_graph_opts opts = {.bind = bind, .n_bind = nbind};
    si_graph *g;
    si_status st = si_graph_build(m, &opts, &g);
    if (st != SI_OK) {
        if (st == SI_ERR_UNSUPPORTED && expect_unsupported(name)) {
            printf("UNSUPPORTED (expected) %s\n", name);
            rc = 2;
        } else {
            printf("FAIL %s: %s\n", name, si_error_msg());
        }
        goto done;
    }
    int batch = 1;
    for (int i = 0; i < g->n_inputs && i < ndata; i++) {
        si_value *v = &g->values[g->inputs[i]];
        if (strcmp(v->name, data_name[i])) {
            printf("FAIL %s: input order mismatch (%s vs %s)\n", name, v->name, data_name[i]);
            si_graph_free(g);
            goto done;
        }
        if (v->batch_dim && data_in[i]->ndim > 0) batch = (int)data_in[i]->dims[0];
    }
    if (g->n_inputs != ndata) {
        printf("FAIL %s: graph has %d runtime inputs, test data %d\n", name, g->n_inputs, ndata);
        si_graph_free(g);
        goto done;
    }
    si_engine_opts eo = {.precision = precision, .slots = 1, .verbose = verbose};
    si_cli_engine_switches(&eo.sw); /* the tests of each side of an A/B switch set it */
    if ((st = si_engine_create_opts(g, backend, batch, &eo, &e)) != SI_OK) {
        printf("%s %s: %s\n",
               st == SI_ERR_UNSUPPORTED && expect_unsupported(name) ? "UNSUPPORTED (expected)"
                                                                    : "FAIL",
               name, si_error_msg());
        rc = st == SI_ERR_UNSUPPORTED && expect_unsupported(name) ? 2 : 1;
        goto done;
    }
    const si_graph *G = si_engine_graph(e);
    for (int i = 0; i < ndata; i++) {
        const si_value *v = &G->values[G->inputs[i]];
        si_tensor *t = data_in[i];
        bool same = t->ndim == v->shape.ndim && t->dtype == SI_DT_FLOAT;
        for (int d = 0; same && d < t->ndim; d++) same = t->dims[d] == v->shape.dims[d];
        if (!same) {
            printf("FAIL %s: input '%s' shape or type differs from the graph's\n", name, v->name);
            goto done;
        }
        memcpy(si_engine_input(e, i), t->data, sizeof(float) * (size_t)t->numel);
    }
    if ((st = si_engine_run(e, batch)) != SI_OK) {
        printf("FAIL %s: %s\n", name, si_error_msg());
        goto done;
    }
    if (vs_cpu >= 0 && parity(m, &opts, data_in, ndata, batch, e, name) != 0) goto done;
    if (no_ref) {
        rc = 0;
        printf("PASS %s\n", name);
        goto done;
    }
    if (nref != G->n_outputs) {
        printf("FAIL %s: %d reference outputs, graph has %d\n", name, nref, G->n_outputs);
        goto done;
    }
    rc = 0;
    for (int o = 0; o < nref; o++) rc |= compare_output(e, o, &ref[o], name);
    if (rc == 0) printf("PASS %s\n", name);
done:
    si_engine_free(e);
    for (int i = 0; i < 16; i++) {
        si_tensor_free_data(&in[i]);
        si_tensor_free_data(&ref[i]);
    }
    return rc;
}

static void run_case(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    const char *name = base(dir);
    for (int i = 0; i < n_skipped; i++)
        if (!strcmp(skipped[i], name)) {
            printf("SKIP %s (listed in --skip)\n", name);
            unsupported_ok++;
            return;
        }
    si_model_proto *m;
    if (si_model_proto_load(p, &m) != SI_OK) {
        printf("FAIL %s: %s\n", name, si_error_msg());
        failed++;
        return;
    }
    int sets = 0, worst = 0;
    for (int k = 0; k < 64; k++) {
        snprintf(p, sizeof p, "%s/test_data_set_%d", dir, k);
        if (!is_dir(p)) break;
        int rc = run_set(m, p, name);
        sets++;
        if (rc == 1)
            worst = 1;
        else if (rc == 2 && worst == 0)
            worst = 2;
        if (rc == 2) break;
    }
    si_model_proto_free(m);
    if (!sets) {
        printf("FAIL %s: no test_data_set_0\n", name);
        worst = 1;
    }
    if (worst == 0 && expect_unsupported(name)) {
        printf("FAIL %s: listed as unsupported but passes: update the list\n", name);
        worst = 1;
    }
    if (worst == 0)
        passed++;
    else if (worst == 2)
        unsupported_ok++;
    else
        failed++;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory is a case if it has model.onnx; otherwise its subdirectories are cases. */
static void run_path(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", path);
    struct stat sb;
    if (stat(p, &sb) == 0) {
        run_case(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        printf("FAIL %s: cannot open\n", path);
        failed++;
        return;
    }
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strncmp(de->d_name, prefix, strlen(prefix))) continue;
        names = si_xrealloc(names, sizeof *names * (size_t)(n + 1));
        names[n++] = si_xstrdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (is_dir(p)) run_case(p);
        free(names[i]);
    }
    free(names);
}

static void load_list(const char *file, char ***list, int *n);
static void load_expected(const char *file) {
    load_list(file, &expected, &n_expected);
}

/* Reads case names, one per line (the rest of a line is the reason; # comments). */
static void load_list(const char *file, char ***list, int *n) {
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", file);
        exit(2);
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *s = line;
        while (*s == ' ') s++;
        if (*s == '#' || *s == '\n' || !*s) continue;
        s[strcspn(s, " \t\n")] = 0; /* the case name; the rest of the line is the reason */
        *list = si_xrealloc(*list, sizeof **list * (size_t)(*n + 1));
        (*list)[(*n)++] = si_xstrdup(s);
    }
    fclose(f);
}

int main(int argc, char **argv) {
    int first = 1;
    for (; first < argc && !strncmp(argv[first], "--", 2); first++) {
        if (!strcmp(argv[first], "--no-ref")) {
            no_ref = true;
            continue;
        }
        if (!strcmp(argv[first], "--verbose")) { // the engine's choices, to stderr
            verbose = true;
            continue;
        }
        if (first + 1 >= argc) break;
        if (!strcmp(argv[first], "--rtol"))
            rel_tol = atof(argv[++first]);
        else if (!strcmp(argv[first], "--atol"))
            abs_tol = atof(argv[++first]);
        else if (!strcmp(argv[first], "--max-rel"))
            max_rel = atof(argv[++first]);
        else if (!strcmp(argv[first], "--prefix"))
            prefix = argv[++first];
        else if (!strcmp(argv[first], "--expect-unsupported"))
            load_expected(argv[++first]);
        else if (!strcmp(argv[first], "--skip"))
            load_list(argv[++first], &skipped, &n_skipped);
        else if (!strcmp(argv[first], "--backend"))
            backend = argv[++first];
        else if (!strcmp(argv[first], "--precision"))
            precision = si_precision_parse(argv[++first]);
        else if (!strcmp(argv[first], "--vs-cpu"))
            vs_cpu = atof(argv[++first]);

        else {
            fprintf(stderr, "unknown option %s\n", argv[first]);
            return 2;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "usage: run_onnx_cases [--rtol R] [--atol A] [--max-rel R] "
                        "[--prefix P] [--expect-unsupported FILE] [--backend B] "
                        "[--precision P] [--vs-cpu TOL] [--no-ref] [--skip FILE] [--verbose] "
                        "DIR...\n");
        return 2;
    }
#ifdef SI_HAVE_CUDA
    if (!strcmp(backend, "cuda") && si_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
#endif
    for (int i = first; i < argc; i++) run_path(argv[i]);
    if (vs_cpu >= 0)
        printf("largest %s vs cpu error: %.3g (%s)\n", backend, worst_parity, worst_parity_case);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, unsupported_ok);
    for (int i = 0; i < n_expected; i++) free(expected[i]);
    free(expected);
    for (int i = 0; i < n_skipped; i++) free(skipped[i]);
    free(skipped);
    return failed || passed == 0 ? 1 : 0;
}
