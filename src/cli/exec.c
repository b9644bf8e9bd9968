/* `shardinfer exec`: runs a model once on tensors given as .npy files and writes every graph
 * output as DIR/<name>.npy, so that the engine can be checked on one's own data against another
 * framework. Inputs that feed only parameter slots (Reshape's shape, Clip's bounds) or are not
 * float32 become constants of the graph, because the graph needs them when it is built; float32
 * inputs are fed at run time, and the batch is dim 0 of the first of them when that dim is
 * symbolic in the model. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "io/npy.h"

static const char exec_usage[] =
    "usage: shardinfer exec MODEL.onnx --input NAME=FILE.npy [--input ...] --output-dir DIR\n"
    "                       [--backend cpu] [--threads N]\n"
    "  Runs MODEL once on the given tensors and writes every graph output to DIR/<name>.npy\n"
    "  (DIR is created if missing; characters of a name other than letters, digits, '.', '-'\n"
    "  and '_' become '_'). Every graph input is given exactly once, in C order with the\n"
    "  model's dtype; a symbolic dim 0 of the first float32 input sets the batch.\n"
    "  --threads N        threads (default: OMP_NUM_THREADS, else all cores)\n"
    "  --backend NAME     cpu (default)\n";

typedef struct {
    const char *name, *file; /* from the command line */
    const si_value_info *vi; /* the model's input of that name; borrowed from the model */
    si_tensor t;             /* read from file */
    bool bound;              /* a constant of the graph, not a runtime input */
} exec_input;

typedef struct {
    const char *model, *outdir, *backend;
    int threads;
    exec_input *in;
    int n_in;
} exec_args;

/* An integer lo..hi, the whole of s. */
static bool parse_count(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Formats the problem into buf (borrowed) and returns it. */
static const char *problem(char *buf, size_t cap, const char *fmt, const char *arg) {
    snprintf(buf, cap, fmt, arg);
    return buf;
}

/* Parses exec's options into a (a->in allocated; the caller frees it); returns NULL, "help" or
 * the one-line problem (in buf or static). */
static const char *parse_exec(int argc, char **argv, exec_args *a, char *buf, size_t cap) {
    static const struct option opts[] = {
        {"input", required_argument, 0, 'i'},   {"output-dir", required_argument, 0, 'o'},
        {"backend", required_argument, 0, 'B'}, {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    long v;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":i:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1])
                return problem(buf, cap, "--input '%s': expected NAME=FILE.npy", optarg);
            *eq = 0; /* argv is ours to split: NAME and FILE point into it */
            for (int i = 0; i < a->n_in; i++)
                if (!strcmp(a->in[i].name, optarg))
                    return problem(buf, cap, "input '%s' is given more than once", optarg);
            a->in = si_xrealloc(a->in, sizeof *a->in * (size_t)(a->n_in + 1));
            a->in[a->n_in++] = (exec_input){.name = optarg, .file = eq + 1};
            break;
        }
        case 'o': a->outdir = optarg; break;
        case 'B': a->backend = optarg; break;
        case 't':
            if (!parse_count(optarg, 1, 4096, &v))
                return problem(buf, cap, "--threads '%s': expected 1..4096", optarg);
            a->threads = (int)v;
            break;
        case 'h': return "help";
        case ':': return problem(buf, cap, "option '%s' needs a value", argv[optind - 1]);
        default:
            return problem(buf, cap, "unknown option '%s' (see shardinfer exec --help)",
                           argv[optind - 1]);
        }
    }
    if (optind >= argc) return "missing MODEL.onnx (see shardinfer exec --help)";
    if (optind < argc - 1) return problem(buf, cap, "unexpected argument '%s'", argv[optind + 1]);
    a->model = argv[optind];
    if (!a->outdir) return "missing --output-dir";
    if (strcmp(a->backend, "cpu"))
        return problem(buf, cap, "--backend '%s': available backends: cpu", a->backend);
    return NULL;
}

/* --- model inputs -------------------------------------------------------------------------- */

/* Borrows m. */
static bool is_initializer(const si_model_proto *m, const char *name) {
    for (int k = 0; k < m->n_inits; k++)
        if (m->inits[k].name && !strcmp(m->inits[k].name, name)) return true;
    return false;
}

/* "(N, 3, 224, 224)" into buf, returned: symbolic dims by their name, "?" when unnamed. */
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int64_t *dims,
                             char *const *params) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && n < cap; d++) {
        if (dims[d] >= 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)dims[d]);
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", d ? ", " : "",
                                  params && params[d] ? params[d] : "?");
    }
    if (n < cap) snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")"); /* as numpy prints */
    return buf;
}

/* "a, b, c" into buf, returned: the inputs a user has to give, for messages. */
static const char *list_inputs(const si_model_proto *m, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_inputs && n < cap; i++)
        if (!is_initializer(m, m->inputs[i].name))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", m->inputs[i].name);
    return buf;
}

/* Pairs each --input with the model's input of its name (x->vi borrows from m) and checks
 * every one is given. */
static si_status match_inputs(const si_model_proto *m, exec_args *a) {
    char names[512];
    for (int i = 0; i < a->n_in; i++) {
        exec_input *x = &a->in[i];
        for (int k = 0; k < m->n_inputs && !x->vi; k++)
            if (!strcmp(m->inputs[k].name, x->name)) x->vi = &m->inputs[k];
        if (x->vi && is_initializer(m, x->name))
            return si_error(SI_ERR_ARG,
                            "%s: '%s' is an initializer (a weight), not an input; "
                            "the model's inputs: %s",
                            a->model, x->name, list_inputs(m, names, sizeof names));
        if (!x->vi)
            return si_error(SI_ERR_ARG, "%s: the model has no input '%s'; its inputs: %s", a->model,
                            x->name, list_inputs(m, names, sizeof names));
    }
    char missing[512] = "";
    size_t n = 0;
    int n_missing = 0;
    for (int k = 0; k < m->n_inputs; k++) {
        const char *name = m->inputs[k].name;
        bool given = false;
        for (int i = 0; i < a->n_in && !given; i++) given = a->in[i].vi == &m->inputs[k];
        if (given || is_initializer(m, name)) continue;
        if (n < sizeof missing)
            n += (size_t)snprintf(missing + n, sizeof missing - n, "%s'%s'", n ? ", " : "", name);
        n_missing++;
    }
    if (n_missing)
        return si_error(SI_ERR_ARG, "%s: missing --input for %s %s (pass --input NAME=FILE.npy)",
                        a->model, n_missing > 1 ? "inputs" : "input", missing);
    return SI_OK;
}

/* io/npy.h numbers its dtypes as ONNX does, so an array becomes a tensor as it is. */
#define SAME_DT(n, d) ((int)(n) == (int)(d))
_Static_assert(SAME_DT(SI_NPY_FLOAT32, SI_DT_FLOAT) && SAME_DT(SI_NPY_UINT8, SI_DT_UINT8) &&
                   SAME_DT(SI_NPY_INT8, SI_DT_INT8) && SAME_DT(SI_NPY_INT32, SI_DT_INT32) &&
                   SAME_DT(SI_NPY_INT64, SI_DT_INT64) && SAME_DT(SI_NPY_BOOL, SI_DT_BOOL) &&
                   SAME_DT(SI_NPY_FLOAT16, SI_DT_FLOAT16) &&
                   SAME_DT(SI_NPY_FLOAT64, SI_DT_DOUBLE) && SI_NPY_MAX_DIMS == SI_MAX_DIMS,
               "io/npy.h's dtypes must match si_dtype");

/* Reads a .npy file into *t (name NULL; the caller frees it with si_tensor_free_data). */
static si_status read_npy(const char *file, si_tensor *t) {
    si_npy_array a;
    si_status st = si_npy_read(file, &a);
    memset(t, 0, sizeof *t);
    if (st != SI_OK) return st;
    t->dtype = a.dtype;
    t->ndim = a.ndim;
    memcpy(t->dims, a.dims, sizeof t->dims);
    t->numel = a.numel;
    t->data = a.data;
    return SI_OK;
}

/* Reads each file into x->t (freed by the caller) and checks it against the model's declared dtype
 * and shape (a symbolic dim matches any size). */
static si_status read_inputs(const si_model_proto *m, exec_args *a) {
    char s1[256], s2[256];
    for (int i = 0; i < a->n_in; i++) {
        exec_input *x = &a->in[i];
        const si_value_info *vi = x->vi;
        si_status st = read_npy(x->file, &x->t);
        if (st != SI_OK) return si_error_prefix(st, "input '%s': ", x->name);
        if (vi->dtype != SI_DT_FLOAT && !si_npy_descr(vi->dtype))
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: input '%s' has type %s, which .npy files "
                            "cannot give here",
                            a->model, x->name, vi->dtype ? si_dtype_name(vi->dtype) : "non-tensor");
        if (x->t.dtype != vi->dtype)
            return si_error(SI_ERR_ARG, "input '%s': %s holds %s, the model expects %s", x->name,
                            x->file, si_dtype_name(x->t.dtype), si_dtype_name(vi->dtype));
        bool same = vi->ndim < 0 || vi->ndim == x->t.ndim;
        for (int d = 0; same && d < vi->ndim; d++)
            same = vi->dims[d] < 0 || vi->dims[d] == x->t.dims[d];
        if (!same)
            return si_error(SI_ERR_ARG, "input '%s': %s has shape %s, the model expects %s",
                            x->name, x->file, fmt_shape(s1, sizeof s1, x->t.ndim, x->t.dims, NULL),
                            fmt_shape(s2, sizeof s2, vi->ndim, vi->dims, vi->dim_params));
        x->bound = vi->dtype != SI_DT_FLOAT || si_model_input_is_param(m, x->name) ||
                   si_model_input_host_only(m, x->name);
    }
    return SI_OK;
}

/* --- outputs -------------------------------------------------------------------------------- */

/* mkdir -p: every missing component of dir is created; borrows dir. */
static si_status make_dir(const char *dir) {
    char *p = si_xstrdup(dir);
    si_status st = SI_OK;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = si_error(SI_ERR_IO, "%s: cannot create directory '%s': %s", dir, p,
                          strerror(errno));
            break;
        }
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (st == SI_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = si_error(SI_ERR_IO, "%s: not a directory", dir);
    free(p);
    return st;
}

/* DIR/<name>.npy for every output, with each character of a name outside [A-Za-z0-9._-]
 * replaced by '_' so that a name like "logits/Softmax:0" can neither leave DIR nor need quoting;
 * a suffix "_K" keeps apart outputs whose names sanitise alike. Caller frees each and the array. */
static char **output_paths(const char *dir, const si_graph *g) {
    char **paths = si_xcalloc((size_t)g->n_outputs + 1, sizeof *paths);
    for (int o = 0; o < g->n_outputs; o++) {
        const char *name = g->values[g->outputs[o]].name;
        size_t cap = strlen(name) + 24;
        char *base = si_xmalloc(cap);
        size_t n = 0;
        for (const char *s = name; *s; s++) {
            char c = *s;
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
            base[n++] = ok ? c : '_';
        }
        base[n] = 0;
        /* "" and ".." would otherwise name ".npy" (hidden) and "...npy": harmless but puzzling */
        if (!strcmp(base, "") || !strcmp(base, ".") || !strcmp(base, ".."))
            snprintf(base, cap, "output%d", o);
        size_t pcap = strlen(dir) + strlen(base) + 32;
        char *path = si_xmalloc(pcap);
        for (int k = 0;; k++) {
            if (k == 0)
                snprintf(path, pcap, "%s/%s.npy", dir, base);
            else
                snprintf(path, pcap, "%s/%s_%d.npy", dir, base, k);
            bool clash = false;
            for (int p = 0; p < o && !clash; p++) clash = !strcmp(paths[p], path);
            if (!clash) break;
        }
        free(base);
        paths[o] = path;
    }
    return paths;
}

/* --- the run -------------------------------------------------------------------------------- */

/* Builds the graph with the bound inputs as constants; *bind (a shallow copy of those tensors,
 * names and data borrowed from a) is the caller's to free, after the graph is built. */
static si_status build_graph(const si_model_proto *m, const exec_args *a, si_tensor **bind,
                             si_graph **g) {
    *bind = si_xcalloc((size_t)a->n_in + 1, sizeof **bind);
    int n_bind = 0;
    for (int i = 0; i < a->n_in; i++) {
        if (!a->in[i].bound) continue;
        (*bind)[n_bind] = a->in[i].t;
        (*bind)[n_bind++].name = (char *)a->in[i].name;
    }
    si_graph_opts opts = {.bind = *bind, .n_bind = n_bind};
    return si_graph_build(m, &opts, g);
}

/* Pairs the graph's runtime inputs, in its order, with their --input (rt, g->n_inputs entries)
 * and finds the batch: dim 0 of the first input when the model leaves it symbolic, else 1. */
static si_status runtime_inputs(const si_graph *g, exec_args *a, exec_input **rt, int *batch) {
    for (int i = 0; i < g->n_inputs; i++)
        for (int k = 0; k < a->n_in && !rt[i]; k++)
            if (!strcmp(a->in[k].name, g->values[g->inputs[i]].name)) rt[i] = &a->in[k];
    *batch = 1;
    /* match_inputs saw every input that is not an initializer given */
    for (int i = 0; i < g->n_inputs; i++) SI_ASSERT(rt[i]);
    if (g->n_inputs > 0 && g->values[g->inputs[0]].batch_dim) {
        int64_t b = rt[0]->t.dims[0];
        if (b < 1 || b > 1 << 20)
            return si_error(SI_ERR_ARG, "input '%s': %s has batch dimension %lld (1..%d allowed)",
                            rt[0]->name, rt[0]->file, (long long)b, 1 << 20);
        *batch = (int)b;
    }
    return SI_OK;
}

/* Copies each runtime input into the engine after checking its shape against the batch's. */
static si_status feed_inputs(si_engine *e, exec_input *const *rt, int batch) {
    char s1[256], s2[256];
    const si_graph *G = si_engine_graph(e);
    for (int i = 0; i < G->n_inputs; i++) {
        const si_value *v = &G->values[G->inputs[i]];
        const si_tensor *t = &rt[i]->t;
        bool same = t->ndim == v->shape.ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->dims[d] == v->shape.dims[d];
        if (!same)
            return si_error(
                SI_ERR_ARG, "input '%s': %s has shape %s, the model expects %s for batch %d",
                rt[i]->name, rt[i]->file, fmt_shape(s1, sizeof s1, t->ndim, t->dims, NULL),
                fmt_shape(s2, sizeof s2, v->shape.ndim, v->shape.dims, NULL), batch);
        memcpy(si_engine_input(e, i), t->data, sizeof(float) * (size_t)t->numel);
    }
    return SI_OK;
}

/* Writes every output to its .npy under outdir (created if missing), a line each on stdout. */
static si_status write_outputs(si_engine *e, const char *outdir) {
    char s1[256];
    si_status st = make_dir(outdir);
    if (st != SI_OK) return st;
    const si_graph *G = si_engine_graph(e);
    char **paths = output_paths(outdir, G);
    for (int o = 0; o < G->n_outputs; o++) {
        si_shape sh;
        const float *y = si_engine_output(e, o, &sh);
        int dtype = si_engine_output_dtype(e, o);
        if (!si_npy_descr(dtype)) {
            st = si_error(SI_ERR_UNSUPPORTED, "%s: cannot write %s tensors as .npy", paths[o],
                          si_dtype_name(dtype));
            break;
        }
        if ((st = si_npy_write_data(paths[o], dtype, sh.ndim, sh.dims, y)) != SI_OK) break;
        printf("%s %s float32 -> %s\n", G->values[G->outputs[o]].name,
               fmt_shape(s1, sizeof s1, sh.ndim, sh.dims, NULL), paths[o]);
    }
    fflush(stdout);
    for (int i = 0; paths[i]; i++) free(paths[i]);
    free(paths);
    return st;
}

/* Loads, binds, runs once and writes the outputs; the message of a failure is in si_error. The
 * input tensors stay in a (the caller frees them); everything else is freed here. */
static si_status exec_run(exec_args *a) {
    si_model_proto *m = NULL;
    si_graph *g = NULL;
    si_engine *e = NULL;
    si_tensor *bind = NULL;
    exec_input **rt = NULL;
    int batch = 1;
    si_status st = si_model_proto_load(a->model, &m);
    if (st == SI_OK) st = match_inputs(m, a);
    if (st == SI_OK) st = read_inputs(m, a);
    if (st == SI_OK) st = build_graph(m, a, &bind, &g);
    if (st == SI_OK) {
        rt = si_xcalloc((size_t)g->n_inputs + 1, sizeof *rt);
        st = runtime_inputs(g, a, rt, &batch);
    }
    if (st == SI_OK) {
        st = si_engine_create(g, a->backend, batch, &e);
        g = NULL; /* owned by the engine now, or freed */
    }
    if (st == SI_OK) st = feed_inputs(e, rt, batch);
    if (st == SI_OK) st = si_engine_run(e, batch);
    if (st == SI_OK) st = write_outputs(e, a->outdir);
    free(rt);
    free(bind);
    si_engine_free(e);
    si_graph_free(g);
    si_model_proto_free(m);
    return st;
}

/* Prints msg on one line: some messages list items on indented lines of their own (the graph's
 * unsupported nodes), which become "; "-separated here. */
static void print_error(const char *msg) {
    fputs("shardinfer exec: ", stderr);
    char last = 0;
    for (const char *s = msg; *s; s++) {
        if (*s != '\n') {
            fputc(last = *s, stderr);
            continue;
        }
        while (s[1] == ' ' || s[1] == '\t' || s[1] == '\n') s++;
        if (s[1]) fputs(last == ':' ? " " : "; ", stderr);
    }
    fputc('\n', stderr);
}

int si_cli_exec(int argc, char **argv) {
    exec_args a = {.backend = "cpu"};
    char buf[512];
    const char *bad = parse_exec(argc, argv, &a, buf, sizeof buf);
    int code = SI_EXIT_OK;
    if (bad && !strcmp(bad, "help")) {
        fputs(exec_usage, stdout);
    } else if (bad) {
        fprintf(stderr, "shardinfer exec: %s\n", bad);
        code = SI_EXIT_USAGE;
    } else {
        if (a.threads) omp_set_num_threads(a.threads);
        if (exec_run(&a) != SI_OK) {
            print_error(si_error_msg());
            code = SI_EXIT_FAIL;
        }
    }
    for (int i = 0; i < a.n_in; i++) si_tensor_free_data(&a.in[i].t);
    free(a.in);
    return code;
}
