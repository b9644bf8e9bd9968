/* .npy reading and writing (see npy.h). The format: 6 magic bytes "\x93NUMPY", a major and
 * minor version byte, the header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0),
 * the header (an ASCII/UTF-8 Python dict literal with keys descr, fortran_order and shape, padded
 * with spaces and a newline), then the raw array data. */
#include "io/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

typedef struct {
    const char *descr, *name;
    int dtype;
    int size;
} dtype_info;

static const dtype_info dtypes[] = {
    {"<f4", "float32", SI_NPY_FLOAT32, 4}, {"<f8", "float64", SI_NPY_FLOAT64, 8},
    {"<f2", "float16", SI_NPY_FLOAT16, 2}, {"<i8", "int64", SI_NPY_INT64, 8},
    {"<i4", "int32", SI_NPY_INT32, 4},     {"|u1", "uint8", SI_NPY_UINT8, 1},
    {"|i1", "int8", SI_NPY_INT8, 1},       {"|b1", "bool", SI_NPY_BOOL, 1},
};
#define N_DTYPES (sizeof dtypes / sizeof *dtypes)

/* NULL for a dtype .npy files do not carry here. */
static const dtype_info *info_of(int dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == dtype) return &dtypes[i];
    return NULL;
}

const char *si_npy_descr(int dtype) {
    const dtype_info *d = info_of(dtype);
    return d ? d->descr : NULL;
}

/* --- header parsing ------------------------------------------------------------------------- */

/* A cursor over the header; `err` holds the first problem found, which ends parsing. */
typedef struct {
    const char *p, *end, *start;
    char err[160];
} cur;

static bool fail(cur *c, const char *what) {
    if (!c->err[0])
        snprintf(c->err, sizeof c->err, "%s at header offset %d", what, (int)(c->p - c->start));
    return false;
}

static void skip_ws(cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool accept(cur *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static bool expect(cur *c, char ch) {
    if (accept(c, ch)) return true;
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", ch);
    return fail(c, what);
}

/* A quoted Python string without escapes (none of the keys or descrs we accept need them). */
static bool parse_str(cur *c, char *buf, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return fail(c, "expected a string");
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\') return fail(c, "escape in a string");
        if (n + 1 >= cap) return fail(c, "string too long");
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return fail(c, "unterminated string");
    c->p++;
    buf[n] = 0;
    return true;
}

static bool parse_word(cur *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return false;
    c->p += n;
    return true;
}

/* A non-negative integer; Python 2 era files may write longs as "3L". */
static bool parse_dim(cur *c, int64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return fail(c, "expected a dimension");
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (x > (INT64_MAX - d) / 10) return fail(c, "dimension out of range");
        x = x * 10 + d;
    }
    if (c->p < c->end && *c->p == 'L') c->p++;
    *v = x;
    return true;
}

typedef struct {
    char descr[64];
    bool fortran;
    int ndim; /* may exceed SI_NPY_MAX_DIMS: the caller refuses that with its own message */
    int64_t dims[SI_NPY_MAX_DIMS];
} header;

/* "(2, 3)", "(3,)" or "()". */
static bool parse_shape(cur *c, header *h) {
    if (!expect(c, '(')) return false;
    h->ndim = 0;
    if (accept(c, ')')) return true;
    for (;;) {
        int64_t d;
        if (!parse_dim(c, &d)) return false;
        if (h->ndim < SI_NPY_MAX_DIMS) h->dims[h->ndim] = d;
        if (h->ndim < 1000) h->ndim++;
        if (accept(c, ')')) return true;
        if (!expect(c, ',')) return false;
        if (accept(c, ')')) return true;
    }
}

static bool parse_header(cur *c, header *h) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!expect(c, '{')) return false;
    while (!accept(c, '}')) {
        char key[32];
        if (!parse_str(c, key, sizeof key) || !expect(c, ':')) return false;
        bool *seen;
        if (!strcmp(key, "descr")) {
            seen = &have_descr;
            skip_ws(c);
            if (c->p < c->end && *c->p == '[') return fail(c, "structured dtype (descr is a list)");
            if (!parse_str(c, h->descr, sizeof h->descr)) return false;
        } else if (!strcmp(key, "fortran_order")) {
            seen = &have_fortran;
            if (parse_word(c, "True"))
                h->fortran = true;
            else if (parse_word(c, "False"))
                h->fortran = false;
            else
                return fail(c, "fortran_order is neither True nor False");
        } else if (!strcmp(key, "shape")) {
            seen = &have_shape;
            if (!parse_shape(c, h)) return false;
        } else {
            return fail(c, "unknown key");
        }
        if (*seen) return fail(c, "repeated key");
        *seen = true;
        if (!accept(c, ',')) {
            if (!expect(c, '}')) return false;
            break;
        }
    }
    skip_ws(c);
    if (c->p != c->end) return fail(c, "text after the dict");
    if (!have_descr || !have_fortran || !have_shape) {
        snprintf(c->err, sizeof c->err, "header lacks '%s'",
                 !have_descr     ? "descr"
                 : !have_fortran ? "fortran_order"
                                 : "shape");
        return false;
    }
    return true;
}

/* The dtype of a descr; NULL for one not read. */
static const dtype_info *descr_dtype(const char *descr) {
    for (size_t i = 0; i < N_DTYPES; i++) {
        const char *d = dtypes[i].descr;
        if (!strcmp(d, descr)) return &dtypes[i];
        /* byte-sized types have no byte order: '<u1' and '|u1' are the same */
        if (d[0] == '|' && (descr[0] == '<' || descr[0] == '=') && !strcmp(d + 1, descr + 1))
            return &dtypes[i];
    }
    return NULL;
}

/* --- reading -------------------------------------------------------------------------------- */

static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Reads exactly n bytes or reports how the file ended. */
static si_status read_exact(FILE *f, void *buf, size_t n, const char *path, const char *what) {
    if (fread(buf, 1, n, f) == n) return SI_OK;
    if (ferror(f))
        return si_error(SI_ERR_IO, "%s: reading the %s: %s", path, what, strerror(errno));
    return si_error(SI_ERR_FORMAT, "%s: the file ends inside the %s", path, what);
}

/* The magic, version and header length: *off gets where the header starts, *hlen its length. */
static si_status read_preamble(FILE *f, const char *path, int64_t size, int64_t *off,
                               int64_t *hlen) {
    uint8_t pre[12];
    if (size < 8 || fread(pre, 1, 8, f) != 8 || memcmp(pre, magic, sizeof magic))
        return si_error(SI_ERR_FORMAT, "%s: not a .npy file (no \\x93NUMPY magic at the start)",
                        path);
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: .npy format version %d.%d (1.0, 2.0, 3.0 are read)", path, major,
                        minor);
    int lenbytes = major == 1 ? 2 : 4;
    si_status st = read_exact(f, pre + 8, (size_t)lenbytes, path, "header length");
    if (st != SI_OK) return st;
    *hlen = major == 1 ? (int64_t)(pre[8] | pre[9] << 8) : (int64_t)le32(pre + 8);
    *off = 8 + lenbytes;
    if (*hlen > size - *off)
        return si_error(SI_ERR_FORMAT,
                        "%s: header length %lld runs past the end of the file (%lld bytes)", path,
                        (long long)*hlen, (long long)size);
    return SI_OK;
}

/* The header's text (hlen bytes, bounded by the file's size) parsed into h. */
static si_status read_header(FILE *f, const char *path, int64_t hlen, header *h) {
    char *text = malloc((size_t)hlen + 1); /* bounded by the file's size, checked before */
    if (!text)
        return si_error(SI_ERR_NOMEM, "%s: no memory for a %lld-byte header", path,
                        (long long)hlen);
    si_status st = read_exact(f, text, (size_t)hlen, path, "header");
    if (st != SI_OK) {
        free(text);
        return st;
    }
    text[hlen] = 0;
    cur c = {.p = text, .end = text + hlen, .start = text};
    bool ok = parse_header(&c, h);
    free(text);
    if (!ok) return si_error(SI_ERR_FORMAT, "%s: malformed .npy header: %s", path, c.err);
    return SI_OK;
}

/* What the header declares that this reader does not take: the dtype, the rank, Fortran order. */
static si_status check_header(const char *path, const header *h, const dtype_info **dt) {
    *dt = descr_dtype(h->descr);
    if (!*dt)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: dtype '%s' is not supported (little-endian f4, f8, f2, i8, i4, u1, "
                        "i1, b1 are)%s",
                        path, h->descr, h->descr[0] == '>' ? "; the file is big-endian" : "");
    if (h->ndim > SI_NPY_MAX_DIMS)
        return si_error(SI_ERR_UNSUPPORTED, "%s: rank %d array (at most %d dimensions)", path,
                        h->ndim, SI_NPY_MAX_DIMS);
    /* Fortran and C order lay out the same bytes when at most one dimension exceeds 1 */
    int big = 0;
    for (int d = 0; d < h->ndim; d++) big += h->dims[d] > 1;
    if (h->fortran && big > 1)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: Fortran-order array (fortran_order: True); only C order is read "
                        "(save np.ascontiguousarray(a) instead)",
                        path);
    return SI_OK;
}

/* The element count the shape declares, which must fill exactly the data_bytes that follow. */
static si_status data_numel(const char *path, const header *h, const dtype_info *dt,
                            int64_t data_bytes, int64_t *numel) {
    /* the product of the nonzero dims bounds what any shape may claim, zero-sized ones included */
    int64_t es = dt->size, nonzero = 1;
    bool empty = false;
    for (int d = 0; d < h->ndim; d++) {
        int64_t x = h->dims[d];
        if (x == 0) {
            empty = true;
            continue;
        }
        if (nonzero > INT64_MAX / es / x)
            return si_error(SI_ERR_FORMAT, "%s: shape declares an absurd element count", path);
        nonzero *= x;
    }
    *numel = empty ? 0 : nonzero;
    int64_t need = *numel * es;
    if (need != data_bytes)
        return si_error(SI_ERR_FORMAT,
                        "%s: shape needs %lld elements (%lld bytes of %s) but %lld data bytes "
                        "follow the header",
                        path, (long long)*numel, (long long)need, dt->name, (long long)data_bytes);
    return SI_OK;
}

static si_status read_file(FILE *f, const char *path, si_npy_array *out) {
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return si_error(SI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return si_error(SI_ERR_IO, "%s: not a regular file", path);
    int64_t size = (int64_t)sb.st_size, off = 0, hlen = 0, numel = 0;
    header h = {0};
    const dtype_info *dt = NULL;
    si_status st = read_preamble(f, path, size, &off, &hlen);
    if (st == SI_OK) st = read_header(f, path, hlen, &h);
    if (st == SI_OK) st = check_header(path, &h, &dt);
    if (st == SI_OK) st = data_numel(path, &h, dt, size - off - hlen, &numel);
    if (st != SI_OK) return st;
    int64_t need = numel * dt->size;
    void *data = malloc(need ? (size_t)need : 1); /* exactly the file's remaining bytes */
    if (!data)
        return si_error(SI_ERR_NOMEM, "%s: no memory for %lld bytes of data", path,
                        (long long)need);
    if ((st = read_exact(f, data, (size_t)need, path, "data")) != SI_OK) {
        free(data);
        return st;
    }
    out->dtype = dt->dtype;
    out->ndim = h.ndim;
    memcpy(out->dims, h.dims, sizeof(int64_t) * (size_t)h.ndim);
    out->numel = numel;
    out->data = data;
    return SI_OK;
}

/* Caller frees out->data (si_npy_free); zeroed on failure. */
si_status si_npy_read(const char *path, si_npy_array *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    si_status st = read_file(f, path, out);
    fclose(f);
    return st;
}

void si_npy_free(si_npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* --- writing -------------------------------------------------------------------------------- */

/* Borrows everything; path is replaced, or removed again if writing fails. */
si_status si_npy_write_data(const char *path, int dtype, int ndim, const int64_t *dims,
                            const void *data) {
    const dtype_info *dt = info_of(dtype);
    if (!dt)
        return si_error(SI_ERR_UNSUPPORTED, "%s: cannot write data type %d as .npy", path, dtype);
    const char *descr = dt->descr;
    if (ndim < 0 || ndim > SI_NPY_MAX_DIMS)
        return si_error(SI_ERR_ARG, "%s: rank %d tensor (at most %d dimensions)", path, ndim,
                        SI_NPY_MAX_DIMS);
    int64_t es = dt->size, numel = 1, nonzero = 1;
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] > 0 && nonzero > INT64_MAX / es / dims[d]))
            return si_error(SI_ERR_ARG, "%s: dimension %d is %lld", path, d, (long long)dims[d]);
        numel *= dims[d];
        if (dims[d]) nonzero *= dims[d];
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%lld", d ? ", " : "", (long long)dims[d]);
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    /* numpy pads so that the data starts 64-byte aligned; the header ends with '\n' */
    while ((10 + n + 1) % 64) hdr[n++] = ' ';
    hdr[n++] = '\n';
    if (numel && !data) return si_error(SI_ERR_ARG, "%s: tensor has no data", path);

    FILE *f = fopen(path, "wb");
    if (!f) return si_error(SI_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    uint8_t pre[10];
    memcpy(pre, magic, sizeof magic);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (uint8_t)(n & 0xff);
    pre[9] = (uint8_t)(n >> 8);
    size_t bytes = (size_t)(numel * es);
    bool ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
              fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
              (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        remove(path);
        return si_error(SI_ERR_IO, "%s: write failed: %s", path, strerror(err));
    }
    return SI_OK;
}

/* Borrows a. */
si_status si_npy_write(const char *path, const si_npy_array *a) {
    return si_npy_write_data(path, a->dtype, a->ndim, a->dims, a->data);
}
