/* Protobuf wire-format reader for ONNX ModelProto and TensorProto.
 * Field numbers follow onnx/onnx.proto3. Unknown fields are skipped, so newer files load. */
#include "onnx.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Wire types. Groups (3, 4) are deprecated and never appear in ONNX files. */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

typedef struct {
    const uint8_t *p, *end;
} rd;

static bool rd_varint(rd *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return false;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

static bool rd_key(rd *r, uint32_t *field, int *wt) {
    uint64_t k;
    if (!rd_varint(r, &k)) return false;
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    return *field != 0;
}

static bool rd_len(rd *r, rd *sub) {
    uint64_t n;
    if (!rd_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return false;
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return true;
}

static bool rd_fixed(rd *r, void *dst, size_t n) {
    if ((size_t)(r->end - r->p) < n) return false;
    memcpy(dst, r->p, n);
    r->p += n;
    return true;
}

static bool rd_skip(rd *r, int wt) {
    uint64_t v;
    rd sub;
    switch (wt) {
    case WT_VARINT: return rd_varint(r, &v);
    case WT_I64: return (size_t)(r->end - r->p) >= 8 ? (r->p += 8, true) : false;
    case WT_I32: return (size_t)(r->end - r->p) >= 4 ? (r->p += 4, true) : false;
    case WT_LEN: return rd_len(r, &sub);
    default: return false;
    }
}

static char *rd_string(rd *r) {
    rd sub;
    if (!rd_len(r, &sub)) return NULL;
    size_t n = (size_t)(sub.end - sub.p);
    char *s = si_xmalloc(n + 1);
    memcpy(s, sub.p, n);
    s[n] = 0;
    return s;
}

/* A growable array helper: ensures room for one more element of `size` bytes. */
static void *grow(void *arr, int n, size_t size) {
    if ((n & (n - 1)) == 0) { /* n is 0 or a power of two: double */
        size_t cap = n ? (size_t)n * 2 : 4;
        arr = si_xrealloc(arr, cap * size);
    }
    return arr;
}

/* Repeated scalar fields arrive packed (one LEN record) or one record per element; both are
 * legal protobuf. Appends to vals and n; the count is bounded by the bytes, so no blow-up. */
static bool rd_repeated_i64(rd *r, int wt, int64_t **vals, int64_t *n) {
    if (wt == WT_LEN) {
        rd sub;
        if (!rd_len(r, &sub)) return false;
        while (sub.p < sub.end) {
            uint64_t v;
            if (!rd_varint(&sub, &v)) return false;
            *vals = grow(*vals, (int)*n, sizeof **vals);
            (*vals)[(*n)++] = (int64_t)v;
        }
        return true;
    }
    if (wt != WT_VARINT) return false;
    uint64_t v;
    if (!rd_varint(r, &v)) return false;
    *vals = grow(*vals, (int)*n, sizeof **vals);
    (*vals)[(*n)++] = (int64_t)v;
    return true;
}

/* Fixed-width repeated fields (float, double, fixed64): packed or not. */
static bool rd_repeated_fixed(rd *r, int wt, int want_wt, size_t width, uint8_t **vals,
                              int64_t *n) {
    if (wt == WT_LEN) {
        rd sub;
        if (!rd_len(r, &sub)) return false;
        size_t bytes = (size_t)(sub.end - sub.p);
        if (bytes % width) return false;
        *vals = si_xrealloc(*vals, ((size_t)*n) * width + bytes);
        memcpy(*vals + (size_t)*n * width, sub.p, bytes);
        *n += (int64_t)(bytes / width);
        return true;
    }
    if (wt != want_wt) return false;
    *vals = si_xrealloc(*vals, ((size_t)*n + 1) * width);
    if (!rd_fixed(r, *vals + (size_t)*n * width, width)) return false;
    (*n)++;
    return true;
}

const char *si_dtype_name(int dtype) {
    static const char *names[] = {"undefined",  "float32", "uint8",  "int8",   "uint16",
                                  "int16",      "int32",   "int64",  "string", "bool",
                                  "float16",    "float64", "uint32", "uint64", "complex64",
                                  "complex128", "bfloat16"};
    return dtype >= 0 && dtype <= 16 ? names[dtype] : "unknown";
}

size_t si_dtype_size(int dtype) {
    switch (dtype) {
    case SI_DT_FLOAT:
    case SI_DT_INT32:
    case SI_DT_UINT32: return 4;
    case SI_DT_UINT8:
    case SI_DT_INT8:
    case SI_DT_BOOL: return 1;
    case SI_DT_UINT16:
    case SI_DT_INT16:
    case SI_DT_FLOAT16:
    case SI_DT_BFLOAT16: return 2;
    case SI_DT_INT64:
    case SI_DT_DOUBLE:
    case SI_DT_UINT64: return 8;
    default: return 0;
    }
}

void si_tensor_free_data(si_tensor *t) {
    if (!t) return;
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* A tensor's data buffer of nbytes, a size the file declared: failure is the model's problem
 * (too large for this machine), reported with the tensor and the size, never an abort. */
static si_status alloc_data(const char *tname, size_t nbytes, const char *from, void **out) {
    *out = malloc(nbytes ? nbytes : 1);
    if (*out) return SI_OK;
    return si_error(SI_ERR_NOMEM, "tensor '%s': cannot allocate %zu bytes (%.1f GiB) for its %s",
                    tname, nbytes, (double)nbytes / (1 << 30), from);
}

/* An external offset or length that is not a plain non-negative decimal number. */
#define EXT_BAD INT64_MIN

/* TensorProto: dims=1 data_type=2 float_data=4 int32_data=5 string_data=6 int64_data=7 name=8
 * raw_data=9 double_data=10 uint64_data=11 external_data=13 data_location=14. */
/* External data (TensorProto.external_data): weights in a side file next to the model. The
 * location must stay inside the model's directory: no absolute paths, no "..", and the resolved
 * path must lie under the resolved directory, so a model cannot make us read arbitrary files. */
static si_status read_external(const char *basedir, const char *tname, const char *location,
                               int64_t offset, int64_t length, size_t nbytes, void **out) {
    if (!basedir)
        return si_error(SI_ERR_UNSUPPORTED, "tensor '%s': external data outside a model file",
                        tname);
    bool dotdot = false;
    for (const char *c = location; c && *c; c = strchr(c, '/') ? strchr(c, '/') + 1 : "")
        if (c[0] == '.' && c[1] == '.' && (c[2] == '/' || c[2] == 0)) dotdot = true;
    if (!location || !location[0] || location[0] == '/' || dotdot)
        return si_error(SI_ERR_FORMAT,
                        "tensor '%s': external data location '%s' is not a path "
                        "inside the model's directory",
                        tname, location ? location : "");
    if (length == EXT_BAD || offset == EXT_BAD)
        return si_error(SI_ERR_FORMAT,
                        "tensor '%s': external data %s is not a number of bytes (0 to 2^63-1)",
                        tname, offset == EXT_BAD ? "offset" : "length");
    if (length >= 0 && (uint64_t)length != nbytes)
        return si_error(SI_ERR_FORMAT, "tensor '%s': external data length %lld, shape needs %zu",
                        tname, (long long)length, nbytes);
    char path[4096], real_dir[PATH_MAX], real_file[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", basedir, location) >= (int)sizeof path)
        return si_error(SI_ERR_FORMAT, "tensor '%s': external data location too long", tname);
    if (!realpath(basedir, real_dir) || !realpath(path, real_file))
        return si_error(SI_ERR_IO, "tensor '%s': external data file %s: %s", tname, path,
                        strerror(errno));
    size_t dl = strlen(real_dir);
    if (strncmp(real_file, real_dir, dl) || real_file[dl] != '/')
        return si_error(SI_ERR_FORMAT,
                        "tensor '%s': external data file %s resolves outside the "
                        "model's directory",
                        tname, path);
    /* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer, and is refused below;
     * O_NOFOLLOW: real_file is the checked path, with no link left in it to swap */
    int fd = open(real_file, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        si_status st =
            si_error(SI_ERR_IO, "tensor '%s': cannot open %s: %s", tname, path, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return si_error(SI_ERR_FORMAT,
                        "tensor '%s': external data file %s is %s, not a regular file", tname, path,
                        S_ISFIFO(sb.st_mode)  ? "a FIFO"
                        : S_ISDIR(sb.st_mode) ? "a directory"
                                              : "a device or socket");
    }
    if (offset < 0 || (uint64_t)offset > (uint64_t)sb.st_size ||
        nbytes > (uint64_t)sb.st_size - (uint64_t)offset) {
        close(fd);
        return si_error(SI_ERR_FORMAT,
                        "tensor '%s': %s holds %lld bytes, the tensor needs %zu "
                        "at offset %lld",
                        tname, path, (long long)sb.st_size, nbytes, (long long)offset);
    }
    uint8_t *d;
    char from[sizeof path + 32];
    snprintf(from, sizeof from, "external data in %s", path);
    si_status st = alloc_data(tname, nbytes, from, (void **)&d);
    if (st != SI_OK) {
        close(fd);
        return st;
    }
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = pread(fd, d + got, nbytes - got, (off_t)(offset + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != nbytes) {
        free(d);
        return si_error(SI_ERR_IO, "tensor '%s': short read from %s", tname, path);
    }
    *out = d;
    return SI_OK;
}

/* TensorProto's fields as read, before they are checked against each other. */
typedef struct {
    int64_t *dims, ndims, dtype;
    uint8_t *fdata, *ddata; /* float_data, double_data (fixed width) */
    int64_t nf, nd, nu64, ni32, ni64;
    int64_t *i32data, *i64data; /* int32_data (every narrow type), int64_data */
    int64_t *u64data;           /* uint64_data (uint32, uint64): varints, as uint64 bits */
    rd raw;
    bool have_raw, external;
    int64_t ext_offset, ext_length;
    char *ext_location;
} tensor_fields;

static void tensor_fields_free(tensor_fields *tf) {
    free(tf->ext_location);
    free(tf->dims);
    free(tf->fdata);
    free(tf->ddata);
    free(tf->u64data);
    free(tf->i32data);
    free(tf->i64data);
}

/* An external offset or length: decimal digits only, within int64; EXT_BAD otherwise, so that
 * "12abc" or "-1" is refused instead of read as 12 or "absent". */
static int64_t parse_ext_size(const char *v) {
    if (!v[0] || strspn(v, "0123456789") != strlen(v)) return EXT_BAD;
    errno = 0;
    long long x = strtoll(v, NULL, 10);
    return errno ? EXT_BAD : (int64_t)x;
}

/* One external_data entry: StringStringEntryProto {key=1, value=2}. */
static bool read_external_entry(rd *r, int wt, tensor_fields *tf) {
    rd sub = {0};
    char *key = NULL, *val = NULL;
    bool ok = wt == WT_LEN && rd_len(r, &sub);
    while (ok && sub.p < sub.end) {
        uint32_t f2;
        int wt2;
        if (!rd_key(&sub, &f2, &wt2))
            ok = false;
        else if ((f2 == 1 || f2 == 2) && wt2 == WT_LEN) {
            char **dst = f2 == 1 ? &key : &val;
            free(*dst);
            *dst = NULL;
            ok = (*dst = rd_string(&sub)) != NULL;
        } else
            ok = rd_skip(&sub, wt2);
    }
    if (ok && key && val) {
        if (!strcmp(key, "location")) {
            free(tf->ext_location);
            tf->ext_location = val;
            val = NULL;
        } else if (!strcmp(key, "offset"))
            tf->ext_offset = parse_ext_size(val);
        else if (!strcmp(key, "length"))
            tf->ext_length = parse_ext_size(val);
    }
    free(key);
    free(val);
    return ok;
}

/* Reads every field; the name goes straight into t. False when the bytes are malformed. */
static bool read_tensor_fields(rd r, si_tensor *t, tensor_fields *tf) {
    uint32_t f;
    int wt;
    while (r.p < r.end) {
        if (!rd_key(&r, &f, &wt)) return false;
        bool ok = true;
        uint64_t v;
        switch (f) {
        case 1: ok = rd_repeated_i64(&r, wt, &tf->dims, &tf->ndims); break;
        case 2:
            ok = wt == WT_VARINT && rd_varint(&r, &v);
            if (ok) tf->dtype = (int64_t)v;
            break;
        case 4: ok = rd_repeated_fixed(&r, wt, WT_I32, 4, &tf->fdata, &tf->nf); break;
        case 5: ok = rd_repeated_i64(&r, wt, &tf->i32data, &tf->ni32); break;
        case 7: ok = rd_repeated_i64(&r, wt, &tf->i64data, &tf->ni64); break;
        case 8:
            free(t->name);
            t->name = NULL;
            ok = wt == WT_LEN && (t->name = rd_string(&r)) != NULL;
            break;
        case 9:
            ok = wt == WT_LEN && rd_len(&r, &tf->raw);
            tf->have_raw = true;
            break;
        case 10: ok = rd_repeated_fixed(&r, wt, WT_I64, 8, &tf->ddata, &tf->nd); break;
        /* uint64_data is a (packed) varint field, like int64_data, not fixed64 */
        case 11: ok = rd_repeated_i64(&r, wt, &tf->u64data, &tf->nu64); break;
        case 13: ok = read_external_entry(&r, wt, tf); break;
        case 14:
            ok = wt == WT_VARINT && rd_varint(&r, &v);
            tf->external = ok && v == 1;
            break;
        default: ok = rd_skip(&r, wt);
        }
        if (!ok) return false;
    }
    return true;
}

/* dtype, dims and numel into t, each checked. */
static si_status tensor_shape(si_tensor *t, const tensor_fields *tf, const char *tname) {
    if (tf->ndims > SI_MAX_DIMS)
        return si_error(SI_ERR_UNSUPPORTED, "tensor '%s': %lld dimensions (at most %d supported)",
                        tname, (long long)tf->ndims, SI_MAX_DIMS);
    t->dtype = (int)tf->dtype;
    t->ndim = (int)tf->ndims;
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = tf->dims[i];
        /* each dimension bounded too: after a 0 the product no longer catches one */
        if (d < 0 || d > ((int64_t)1 << 40) || (d > 0 && numel > ((int64_t)1 << 40) / d))
            return si_error(SI_ERR_FORMAT, "tensor '%s': absurd dimension %lld", tname,
                            (long long)d);
        t->dims[i] = d;
        numel *= d;
    }
    t->numel = numel;
    if (si_dtype_size(t->dtype) == 0)
        return si_error(SI_ERR_UNSUPPORTED, "tensor '%s': data type %s (%d) is not supported",
                        tname, si_dtype_name(t->dtype), t->dtype);
    return SI_OK;
}

/* Data from the typed fields (float_data, int32_data, ...), converted to the native layout of
 * t->dtype; the count must match the shape. */
static si_status copy_typed_fields(si_tensor *t, const tensor_fields *tf, size_t nbytes,
                                   const char *tname) {
    int64_t have, numel = t->numel;
    switch (t->dtype) {
    case SI_DT_FLOAT: have = tf->nf; break;
    case SI_DT_DOUBLE: have = tf->nd; break;
    case SI_DT_INT64: have = tf->ni64; break;
    case SI_DT_UINT32:
    case SI_DT_UINT64: have = tf->nu64; break;
    default: have = tf->ni32; break; /* int32, int16, int8, uint16, uint8, bool, float16 */
    }
    if (have != numel)
        return si_error(SI_ERR_FORMAT, "tensor '%s': holds %lld values, shape needs %lld", tname,
                        (long long)have, (long long)numel);
    si_status st = alloc_data(tname, nbytes, "typed data", &t->data);
    if (st != SI_OK) return st;
    uint8_t *d = t->data;
    for (int64_t i = 0; i < numel; i++) {
        switch (t->dtype) {
        case SI_DT_FLOAT: memcpy(d + 4 * i, tf->fdata + 4 * i, 4); break;
        case SI_DT_DOUBLE: memcpy(d + 8 * i, tf->ddata + 8 * i, 8); break;
        case SI_DT_INT64: ((int64_t *)d)[i] = tf->i64data[i]; break;
        case SI_DT_UINT64: memcpy(d + 8 * i, tf->u64data + i, 8); break;
        case SI_DT_UINT32: ((uint32_t *)d)[i] = (uint32_t)(uint64_t)tf->u64data[i]; break;
        case SI_DT_INT32: ((int32_t *)d)[i] = (int32_t)tf->i32data[i]; break;
        case SI_DT_INT16:
        case SI_DT_UINT16:
        case SI_DT_FLOAT16:
        case SI_DT_BFLOAT16: ((uint16_t *)d)[i] = (uint16_t)tf->i32data[i]; break;
        default: d[i] = (uint8_t)tf->i32data[i];
        }
    }
    return SI_OK;
}

/* The data from the side file, raw_data or the typed fields. Every path checks the element
 * count against what the file actually holds, so a tensor cannot make us allocate more than
 * the file's size. */
static si_status tensor_data(si_tensor *t, const tensor_fields *tf, const char *basedir,
                             const char *tname) {
    size_t nbytes = (size_t)t->numel * si_dtype_size(t->dtype);
    if (tf->external)
        return read_external(basedir, tname, tf->ext_location, tf->ext_offset, tf->ext_length,
                             nbytes, &t->data);
    if (!tf->have_raw) return copy_typed_fields(t, tf, nbytes, tname);
    if ((size_t)(tf->raw.end - tf->raw.p) != nbytes)
        return si_error(SI_ERR_FORMAT, "tensor '%s': raw_data has %zu bytes, shape needs %zu",
                        tname, (size_t)(tf->raw.end - tf->raw.p), nbytes);
    si_status st = alloc_data(tname, nbytes, "raw_data", &t->data);
    if (st != SI_OK) return st;
    memcpy(t->data, tf->raw.p, nbytes);
    return SI_OK;
}

static si_status parse_tensor(rd r, si_tensor *t, const char *basedir) {
    tensor_fields tf = {.ext_length = -1};
    memset(t, 0, sizeof *t);
    si_status st;
    bool ok = read_tensor_fields(r, t, &tf);
    const char *tname = t->name ? t->name : "(unnamed)";
    if (!ok)
        st = si_error(SI_ERR_FORMAT,
                      "tensor '%s': malformed protobuf (wrong wire type or length past the end)",
                      tname);
    else if ((st = tensor_shape(t, &tf, tname)) == SI_OK)
        st = tensor_data(t, &tf, basedir, tname);
    tensor_fields_free(&tf);
    if (st != SI_OK) si_tensor_free_data(t);
    return st;
}

static void attr_free(si_attr *a) {
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    if (a->t) {
        si_tensor_free_data(a->t);
        free(a->t);
    }
}

/* AttributeProto: name=1 f=2 i=3 s=4 t=5 g=6 floats=7 ints=8 strings=9 tensors=10 graphs=11
 * type=20. */
static si_status parse_attr(rd r, si_attr *a) {
    memset(a, 0, sizeof *a);
    uint32_t f;
    int wt;
    int64_t nf = 0, ni = 0;
    uint8_t *floats = NULL;
    while (r.p < r.end) {
        if (!rd_key(&r, &f, &wt)) goto bad;
        bool ok = true;
        uint64_t v;
        rd sub;
        switch (f) {
        case 1:
            free(a->name);
            a->name = NULL;
            ok = wt == WT_LEN && (a->name = rd_string(&r)) != NULL;
            break;
        case 2: ok = wt == WT_I32 && rd_fixed(&r, &a->f, 4); break;
        case 3:
            ok = wt == WT_VARINT && rd_varint(&r, &v);
            if (ok) a->i = (int64_t)v;
            break;
        case 4:
            free(a->s);
            a->s = NULL;
            ok = wt == WT_LEN && (a->s = rd_string(&r)) != NULL;
            break;
        case 5:
            if (wt != WT_LEN || !rd_len(&r, &sub) || a->t) goto bad;
            a->t = si_xcalloc(1, sizeof *a->t);
            if (parse_tensor(sub, a->t, NULL) != SI_OK) {
                free(floats);
                free(a->t);
                a->t = NULL;
                return si_error_prefix(SI_ERR_FORMAT, "attribute '%s': ", a->name ? a->name : "?");
            }
            break;
        case 7: ok = rd_repeated_fixed(&r, wt, WT_I32, 4, &floats, &nf); break;
        case 8: ok = rd_repeated_i64(&r, wt, &a->ints, &ni); break;
        case 20:
            ok = wt == WT_VARINT && rd_varint(&r, &v);
            if (ok) a->type = (int)v;
            break;
        default: ok = rd_skip(&r, wt); /* graphs, strings, tensors lists: not needed by CNNs */
        }
        if (!ok) goto bad;
    }
    if (!a->name) goto bad;
    if (nf > INT32_MAX || ni > INT32_MAX) goto bad;
    if (a->type == SI_ATTR_UNDEFINED) /* IR < 0.0.2 files omit the type: infer it */
        a->type = nf     ? SI_ATTR_FLOATS
                  : ni   ? SI_ATTR_INTS
                  : a->t ? SI_ATTR_TENSOR
                  : a->s ? SI_ATTR_STRING
                         : SI_ATTR_INT;
    /* only the list of the declared type is kept, never NULL, so n always counts it */
    if (a->type == SI_ATTR_FLOATS) {
        a->floats = floats ? (float *)(void *)floats : si_xcalloc(1, sizeof(float));
        a->n = (int)nf;
        free(a->ints);
        a->ints = NULL;
    } else {
        free(floats);
        a->n = a->type == SI_ATTR_INTS ? (int)ni : 0;
        if (a->type == SI_ATTR_INTS && !a->ints) a->ints = si_xcalloc(1, sizeof(int64_t));
        if (a->type != SI_ATTR_INTS) {
            free(a->ints);
            a->ints = NULL;
        }
    }
    return SI_OK;
bad:
    free(floats);
    return si_error(SI_ERR_FORMAT, "attribute '%s': malformed protobuf",
                    a->name ? a->name : "(unnamed)");
}

/* NodeProto: input=1 output=2 name=3 op_type=4 attribute=5 domain=7. */
static si_status parse_node(rd r, si_node_proto *n, int index) {
    memset(n, 0, sizeof *n);
    uint32_t f;
    int wt;
    while (r.p < r.end) {
        if (!rd_key(&r, &f, &wt)) goto bad;
        rd sub;
        char *s;
        switch (f) {
        case 1:
        case 2:
            if (wt != WT_LEN || !(s = rd_string(&r))) goto bad;
            if (f == 1) {
                n->inputs = grow(n->inputs, n->n_inputs, sizeof *n->inputs);
                n->inputs[n->n_inputs++] = s;
            } else {
                n->outputs = grow(n->outputs, n->n_outputs, sizeof *n->outputs);
                n->outputs[n->n_outputs++] = s;
            }
            break;
        case 3:
            free(n->name);
            n->name = NULL;
            if (wt != WT_LEN || !(n->name = rd_string(&r))) goto bad;
            break;
        case 4:
            free(n->op_type);
            n->op_type = NULL;
            if (wt != WT_LEN || !(n->op_type = rd_string(&r))) goto bad;
            break;
        case 7:
            free(n->domain);
            n->domain = NULL;
            if (wt != WT_LEN || !(n->domain = rd_string(&r))) goto bad;
            break;
        case 5:
            if (wt != WT_LEN || !rd_len(&r, &sub)) goto bad;
            n->attrs = grow(n->attrs, n->n_attrs, sizeof *n->attrs);
            if (parse_attr(sub, &n->attrs[n->n_attrs]) != SI_OK) {
                attr_free(&n->attrs[n->n_attrs]);
                return si_error_prefix(SI_ERR_FORMAT, "node %d '%s': ", index,
                                       n->name ? n->name : "");
            }
            n->n_attrs++;
            break;
        default:
            if (!rd_skip(&r, wt)) goto bad;
        }
    }
    if (!n->op_type) goto bad;
    if (!n->name || !n->name[0]) { /* exporters may omit names; messages need one */
        free(n->name);
        char buf[64];
        snprintf(buf, sizeof buf, "%s_%d", n->op_type, index);
        n->name = si_xstrdup(buf);
    }
    if (!n->domain) n->domain = si_xstrdup("");
    return SI_OK;
bad:
    return si_error(SI_ERR_FORMAT, "node %d '%s': malformed protobuf", index,
                    n->name ? n->name : "");
}

static void node_free(si_node_proto *n) {
    for (int j = 0; j < n->n_inputs; j++) free(n->inputs[j]);
    for (int j = 0; j < n->n_outputs; j++) free(n->outputs[j]);
    for (int j = 0; j < n->n_attrs; j++) attr_free(&n->attrs[j]);
    free(n->inputs);
    free(n->outputs);
    free(n->attrs);
    free(n->name);
    free(n->op_type);
    free(n->domain);
}

/* ValueInfoProto: name=1 type=2; TypeProto: tensor_type=1; Tensor: elem_type=1 shape=2;
 * TensorShapeProto: dim=1; Dimension: dim_value=1 dim_param=2. */
static si_status parse_value_info(rd r, si_value_info *v) {
    memset(v, 0, sizeof *v);
    v->ndim = -1;
    uint32_t f;
    int wt;
    rd type = {0};
    bool have_type = false;
    while (r.p < r.end) {
        if (!rd_key(&r, &f, &wt)) goto bad;
        if (f == 1 && wt == WT_LEN) {
            free(v->name);
            v->name = NULL;
            if (!(v->name = rd_string(&r))) goto bad;
        } else if (f == 2 && wt == WT_LEN) {
            if (!rd_len(&r, &type)) goto bad;
            have_type = true;
        } else if (!rd_skip(&r, wt))
            goto bad;
    }
    if (!v->name) goto bad;
    while (have_type && type.p < type.end) {
        rd tt, shape;
        if (!rd_key(&type, &f, &wt)) goto bad;
        if (f != 1 || wt != WT_LEN) {
            if (!rd_skip(&type, wt)) goto bad;
            continue;
        }
        if (!rd_len(&type, &tt)) goto bad;
        while (tt.p < tt.end) {
            uint64_t x;
            if (!rd_key(&tt, &f, &wt)) goto bad;
            if (f == 1 && wt == WT_VARINT) {
                if (!rd_varint(&tt, &x)) goto bad;
                v->dtype = (int)x;
            } else if (f == 2 && wt == WT_LEN) {
                if (!rd_len(&tt, &shape)) goto bad;
                v->ndim = 0;
                while (shape.p < shape.end) {
                    rd dim;
                    if (!rd_key(&shape, &f, &wt)) goto bad;
                    if (f != 1 || wt != WT_LEN) {
                        if (!rd_skip(&shape, wt)) goto bad;
                        continue;
                    }
                    if (!rd_len(&shape, &dim)) goto bad;
                    if (v->ndim >= SI_MAX_DIMS)
                        return si_error(SI_ERR_UNSUPPORTED, "value '%s': more than %d dimensions",
                                        v->name, SI_MAX_DIMS);
                    int d = v->ndim++;
                    v->dims[d] = -1;
                    while (dim.p < dim.end) {
                        if (!rd_key(&dim, &f, &wt)) goto bad;
                        if (f == 1 && wt == WT_VARINT) {
                            if (!rd_varint(&dim, &x)) goto bad;
                            v->dims[d] = (int64_t)x;
                        } else if (f == 2 && wt == WT_LEN) {
                            free(v->dim_params[d]);
                            v->dim_params[d] = NULL;
                            if (!(v->dim_params[d] = rd_string(&dim))) goto bad;
                        } else if (!rd_skip(&dim, wt))
                            goto bad;
                    }
                }
            } else if (!rd_skip(&tt, wt))
                goto bad;
        }
    }
    return SI_OK;
bad:
    return si_error(SI_ERR_FORMAT, "value info '%s': malformed protobuf",
                    v->name ? v->name : "(unnamed)");
}

static void value_info_free(si_value_info *v) {
    free(v->name);
    for (int i = 0; i < SI_MAX_DIMS; i++) free(v->dim_params[i]);
}

/* GraphProto: node=1 name=2 initializer=5 input=11 output=12 value_info=13. */
static si_status parse_graph(rd r, si_model_proto *m) {
    uint32_t f;
    int wt;
    while (r.p < r.end) {
        rd sub;
        if (!rd_key(&r, &f, &wt)) goto bad;
        if (wt != WT_LEN || (f != 1 && f != 5 && f != 11 && f != 12)) {
            if (!rd_skip(&r, wt)) goto bad;
            continue;
        }
        if (!rd_len(&r, &sub)) goto bad;
        si_status st;
        switch (f) {
        case 1:
            m->nodes = grow(m->nodes, m->n_nodes, sizeof *m->nodes);
            st = parse_node(sub, &m->nodes[m->n_nodes], m->n_nodes);
            if (st == SI_OK)
                m->n_nodes++;
            else
                node_free(&m->nodes[m->n_nodes]);
            break;
        case 5:
            m->inits = grow(m->inits, m->n_inits, sizeof *m->inits);
            st = parse_tensor(sub, &m->inits[m->n_inits], m->dir);
            if (st == SI_OK)
                m->n_inits++;
            else
                si_error_prefix(st, "initializer %d: ", m->n_inits);
            break;
        case 11:
            m->inputs = grow(m->inputs, m->n_inputs, sizeof *m->inputs);
            st = parse_value_info(sub, &m->inputs[m->n_inputs]);
            if (st == SI_OK)
                m->n_inputs++;
            else
                value_info_free(&m->inputs[m->n_inputs]);
            break;
        default:
            m->outputs = grow(m->outputs, m->n_outputs, sizeof *m->outputs);
            st = parse_value_info(sub, &m->outputs[m->n_outputs]);
            if (st == SI_OK)
                m->n_outputs++;
            else
                value_info_free(&m->outputs[m->n_outputs]);
        }
        if (st != SI_OK) return st;
    }
    return SI_OK;
bad:
    return si_error(SI_ERR_FORMAT, "graph: malformed protobuf (wrong wire type or length past "
                                   "the end)");
}

/* ModelProto: ir_version=1 producer_name=2 graph=7 opset_import=8 metadata_props=14;
 * OperatorSetIdProto: domain=1 version=2; StringStringEntryProto: key=1 value=2. */
/* OperatorSetIdProto {domain=1, version=2}: the default domain's version is the opset. */
static bool read_opset_import(rd sub, si_model_proto *m) {
    char *domain = NULL;
    int64_t version = -1;
    uint32_t f;
    int wt;
    uint64_t v;
    bool ok = true;
    while (ok && sub.p < sub.end) {
        if (!rd_key(&sub, &f, &wt))
            ok = false;
        else if (f == 1 && wt == WT_LEN) {
            free(domain);
            ok = (domain = rd_string(&sub)) != NULL;
        } else if (f == 2 && wt == WT_VARINT) {
            if ((ok = rd_varint(&sub, &v))) version = (int64_t)v;
        } else
            ok = rd_skip(&sub, wt);
    }
    if (ok && (!domain || !domain[0] || !strcmp(domain, "ai.onnx"))) m->opset = version;
    free(domain);
    return ok;
}

/* StringStringEntryProto {key=1, value=2} of metadata_props; entries without a key are dropped. */
static bool read_metadata(rd sub, si_model_proto *m) {
    si_meta_prop p = {0};
    uint32_t f;
    int wt;
    bool ok = true;
    while (ok && sub.p < sub.end) {
        if (!rd_key(&sub, &f, &wt)) {
            ok = false;
            break;
        }
        char **dst = f == 1 ? &p.key : f == 2 ? &p.value : NULL;
        if (dst && wt == WT_LEN) {
            free(*dst);
            ok = (*dst = rd_string(&sub)) != NULL;
        } else
            ok = rd_skip(&sub, wt);
    }
    if (!ok || !p.key) {
        free(p.key);
        free(p.value);
        return ok;
    }
    m->meta = grow(m->meta, m->n_meta, sizeof *m->meta);
    if (!p.value) p.value = si_xstrdup("");
    m->meta[m->n_meta++] = p;
    return true;
}

/* ModelProto's fields; the graph is only located here and parsed afterwards. False when the
 * bytes are malformed, with r left where reading stopped. */
static bool read_model_fields(rd *r, si_model_proto *m, rd *graph, bool *have_graph) {
    uint32_t f;
    int wt;
    while (r->p < r->end) {
        rd sub;
        uint64_t v;
        bool ok;
        if (!rd_key(r, &f, &wt)) return false;
        if (f == 1 && wt == WT_VARINT) {
            if ((ok = rd_varint(r, &v))) m->ir_version = (int64_t)v;
        } else if (f == 2 && wt == WT_LEN) {
            free(m->producer);
            ok = (m->producer = rd_string(r)) != NULL;
        } else if (f == 7 && wt == WT_LEN) {
            ok = *have_graph = rd_len(r, graph);
        } else if (f == 8 && wt == WT_LEN) {
            ok = rd_len(r, &sub) && read_opset_import(sub, m);
        } else if (f == 14 && wt == WT_LEN) {
            ok = rd_len(r, &sub) && read_metadata(sub, m);
        } else
            ok = rd_skip(r, wt);
        if (!ok) return false;
    }
    return true;
}

si_status si_model_proto_parse(const uint8_t *buf, size_t len, const char *name,
                               si_model_proto **out) {
    *out = NULL;
    si_model_proto *m = si_xcalloc(1, sizeof *m);
    m->path = si_xstrdup(name);
    char *dir = si_xstrdup(name);
    m->dir = si_xstrdup(dirname(dir)); /* external data resolves against it */
    free(dir);
    m->opset = -1;
    rd r = {buf, buf + len}, graph = {0};
    bool have_graph = false;
    si_status st;
    if (!read_model_fields(&r, m, &graph, &have_graph))
        st = si_error(SI_ERR_FORMAT,
                      "%s: not an ONNX model or truncated (malformed protobuf at byte %zu of %zu)",
                      name, (size_t)(r.p - buf), len);
    else if (!have_graph)
        st = si_error(SI_ERR_FORMAT, "%s: not an ONNX model (no graph found%s)", name,
                      len == 0 ? "; the file is empty" : "");
    else if ((st = parse_graph(graph, m)) != SI_OK)
        si_error_prefix(st, "%s: ", name);
    else if (m->n_nodes == 0 || m->n_outputs == 0)
        st = si_error(SI_ERR_FORMAT, "%s: not an ONNX model (graph has %d nodes, %d outputs)", name,
                      m->n_nodes, m->n_outputs);
    if (st != SI_OK) {
        si_model_proto_free(m);
        return st;
    }
    if (m->opset < 0) m->opset = 1; /* no default-domain import: the oldest semantics */
    *out = m;
    return SI_OK;
}

static si_status map_file(const char *path, const uint8_t **buf, size_t *len) {
    /* O_NONBLOCK: a FIFO given as the model opens at once and is refused below, not waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return si_error(SI_ERR_IO, "%s: not a regular file", path);
    }
    *len = (size_t)sb.st_size;
    *buf = NULL;
    if (*len > 0) {
        void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return si_error(SI_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        }
        *buf = p;
    }
    close(fd);
    return SI_OK;
}

si_status si_model_proto_load(const char *path, si_model_proto **out) {
    const uint8_t *buf = NULL;
    size_t len = 0;
    *out = NULL;
    si_status st = map_file(path, &buf, &len);
    if (st != SI_OK) return st;
    st = si_model_proto_parse(buf ? buf : (const uint8_t *)"", len, path, out);
    if (buf) munmap((void *)buf, len);
    return st;
}

si_status si_tensor_load_pb(const char *path, si_tensor *out) {
    const uint8_t *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    si_status st = map_file(path, &buf, &len);
    if (st != SI_OK) return st;
    rd r = {buf, buf + len};
    char *dir = si_xstrdup(path);
    st = parse_tensor(r, out, dirname(dir));
    free(dir);
    if (buf) munmap((void *)buf, len);
    if (st != SI_OK) si_error_prefix(st, "%s: ", path);
    return st;
}

void si_model_proto_free(si_model_proto *m) {
    if (!m) return;
    for (int i = 0; i < m->n_nodes; i++) node_free(&m->nodes[i]);
    for (int i = 0; i < m->n_inits; i++) si_tensor_free_data(&m->inits[i]);
    for (int i = 0; i < m->n_inputs; i++) value_info_free(&m->inputs[i]);
    for (int i = 0; i < m->n_outputs; i++) value_info_free(&m->outputs[i]);
    for (int i = 0; i < m->n_meta; i++) {
        free(m->meta[i].key);
        free(m->meta[i].value);
    }
    free(m->nodes);
    free(m->inits);
    free(m->inputs);
    free(m->outputs);
    free(m->meta);
    free(m->producer);
    free(m->path);
    free(m->dir);
    free(m);
}

const si_attr *si_node_attr(const si_node_proto *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}

const si_attr *si_node_attr_ints(const si_node_proto *n, const char *name) {
    const si_attr *a = si_node_attr(n, name);
    return a && a->type == SI_ATTR_INTS ? a : NULL;
}

const char *si_model_meta(const si_model_proto *m, const char *key) {
    for (int i = 0; i < m->n_meta; i++)
        if (!strcmp(m->meta[i].key, key)) return m->meta[i].value;
    return NULL;
}
