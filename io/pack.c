/* `shardinfer pack`: streams JPEG files into the packed layout of imageset.h. Records pass
 * through fixed buffers (16 MiB of bytes, 16384 offsets/ids/labels) that are appended to
 * chunked, extendible datasets when full, so memory does not grow with the number of images.
 * The file is built as OUTPUT.tmp and renamed at the end: a failed pack leaves nothing behind. */
#include "io/pack.h"

#include "io/h5util.h"
#include "io/imageset.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_BLOCK ((size_t)16 << 20) /* bytes buffered before an append to /images/data */
#define REC_BLOCK  16384              /* offsets/ids/labels buffered; also their chunk length */
#define MAX_DEPTH  256                /* directory nesting; deeper is a loop or a mistake */
#define MAX_CHUNK  ((size_t)256 << 20)

typedef struct {
    const si_pack_opts *o;
    si_pack_stats *st;
    hid_t file, grp, data, offsets, ids, labels, strtype;
    uint8_t *buf; /* [DATA_BLOCK] */
    size_t buf_len;
    uint64_t data_len; /* bytes appended to /images/data so far */
    uint64_t total;    /* bytes of all records so far, buffered or not */
    uint64_t *offs;    /* [REC_BLOCK] pending offsets */
    size_t noffs;
    uint64_t offs_len; /* entries appended to /images/offsets */
    char **idbuf;      /* [REC_BLOCK] pending ids (owned) */
    int64_t *labbuf;   /* [REC_BLOCK] pending labels */
    size_t nids;
    uint64_t ids_len; /* entries appended to /images/ids (and labels) */
    int labelled;     /* -1 undecided, 0 no labels, 1 labels */
    int label_line;   /* list line that decided `labelled` */
} packer;

/* Appends n elements of buf (memory type mt) at *len of the 1-D extendible dataset d. */
static herr_t append(hid_t d, hid_t mt, uint64_t *len, const void *buf, size_t n) {
    if (n == 0) return 0;
    hsize_t start = *len, count = n, size = *len + n;
    if (H5Dset_extent(d, &size) < 0) return -1;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? 0 : -1;
    if (e >= 0) e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0) e = H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e >= 0) *len = size;
    return e;
}

static si_status write_failed(packer *pk, const char *what) {
    return si_error(SI_ERR_IO, "%s.tmp: cannot write %s (disk full?)", pk->o->output, what);
}

static si_status flush_data(packer *pk) {
    if (append(pk->data, H5T_NATIVE_UINT8, &pk->data_len, pk->buf, pk->buf_len) < 0)
        return write_failed(pk, "/images/data");
    pk->buf_len = 0;
    return SI_OK;
}

static si_status flush_offsets(packer *pk) {
    if (append(pk->offsets, H5T_NATIVE_UINT64, &pk->offs_len, pk->offs, pk->noffs) < 0)
        return write_failed(pk, "/images/offsets");
    pk->noffs = 0;
    return SI_OK;
}

static si_status flush_ids(packer *pk) {
    uint64_t before = pk->ids_len;
    if (append(pk->ids, pk->strtype, &pk->ids_len, pk->idbuf, pk->nids) < 0)
        return write_failed(pk, "/images/ids");
    if (pk->labelled == 1) {
        uint64_t l = before;
        if (append(pk->labels, H5T_NATIVE_INT64, &l, pk->labbuf, pk->nids) < 0)
            return write_failed(pk, "/images/labels");
    }
    for (size_t i = 0; i < pk->nids; i++) free(pk->idbuf[i]);
    pk->nids = 0;
    return SI_OK;
}

/* Creates a 1-D dataset of length 0, extendible without limit, chunked by `chunk` elements. */
static hid_t create_1d(packer *pk, const char *name, hid_t type, size_t chunk) {
    hsize_t dim = 0, maxdim = H5S_UNLIMITED, ch = chunk;
    hid_t sp = H5Screate_simple(1, &dim, &maxdim);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dapl = H5Pcreate(H5P_DATASET_ACCESS);
    hid_t d = H5I_INVALID_HID;
    /* room for a few chunks so the partly written chunk at the end of one append is still
     * cached when the next append completes it (the default cache is 1 MiB) */
    if (sp >= 0 && dcpl >= 0 && dapl >= 0 && H5Pset_chunk(dcpl, 1, &ch) >= 0 &&
        H5Pset_chunk_cache(dapl, 521, 4 * chunk * H5Tget_size(type), 1.0) >= 0)
        d = H5Dcreate2(pk->grp, name, type, sp, H5P_DEFAULT, dcpl, dapl);
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (dapl >= 0) H5Pclose(dapl);
    if (d < 0) si_error(SI_ERR_IO, "%s.tmp: cannot create /images/%s", pk->o->output, name);
    return d;
}

/* Valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): ids are declared
 * UTF-8 and h5py refuses to decode anything else. */
static bool valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, n;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (unsigned i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += n + 1;
    }
    return true;
}

/* Streams one file into the pack as the next record. Borrows all arguments. */
static si_status add_file(packer *pk, const char *path, const char *id, int64_t label) {
    if (!valid_utf8(id))
        return si_error(SI_ERR_ARG,
                        "%s: the id is not valid UTF-8; rename the file or give an "
                        "id in a list file",
                        path);
    FILE *f = fopen(path, "rb");
    if (!f) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint64_t size = 0;
    uint8_t head[2] = {0, 0};
    for (;;) {
        if (pk->buf_len == DATA_BLOCK) {
            si_status st = flush_data(pk);
            if (st != SI_OK) {
                fclose(f);
                return st;
            }
        }
        size_t r = fread(pk->buf + pk->buf_len, 1, DATA_BLOCK - pk->buf_len, f);
        for (size_t i = 0; i < r && size + i < 2; i++) head[size + i] = pk->buf[pk->buf_len + i];
        pk->buf_len += r;
        size += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    int e = errno;
    fclose(f);
    if (err) return si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(e));

    if (size < 2 || head[0] != 0xFF || head[1] != 0xD8) pk->st->not_jpeg++;
    pk->total += size;
    pk->st->bytes += size;
    pk->st->count++;
    pk->offs[pk->noffs++] = pk->total;
    if (pk->noffs == REC_BLOCK) {
        si_status st = flush_offsets(pk);
        if (st != SI_OK) return st;
    }
    pk->idbuf[pk->nids] = si_xstrdup(id);
    pk->labbuf[pk->nids] = label;
    pk->nids++;
    if (pk->nids == REC_BLOCK) return flush_ids(pk);
    return SI_OK;
}

static bool is_jpeg_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

static int not_dots(const struct dirent *e) {
    return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

/* Byte order, not alphasort's strcoll: the order of a pack must not depend on the locale. */
static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

typedef struct {
    dev_t dev;
    ino_t ino;
} dir_key;

/* Packs the JPEG files under dir (its path relative to the root is rel, "" at the root), in
 * sorted order, depth first. Only this directory's listing is held in memory (plus those of its
 * ancestors up the recursion). `up` holds the ancestors' identities to skip symlink loops. */
static si_status walk(packer *pk, const char *dir, const char *rel, dir_key *up, int depth) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, not_dots, by_name);
    if (n < 0)
        return si_error(SI_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
    si_status st = SI_OK;
    int i = 0;
    for (; i < n && st == SI_OK; i++) {
        const char *name = list[i]->d_name;
        unsigned char type = list[i]->d_type;
        char *path = NULL, *id = NULL;
        if (asprintf(&path, "%s/%s", dir, name) < 0 ||
            asprintf(&id, "%s%s%s", rel, rel[0] ? "/" : "", name) < 0)
            si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
        struct stat sb;
        bool is_dir = type == DT_DIR, is_reg = type == DT_REG;
        if (type == DT_LNK || type == DT_UNKNOWN || is_dir) {
            if (stat(path, &sb) == 0) {
                is_dir = S_ISDIR(sb.st_mode);
                is_reg = S_ISREG(sb.st_mode);
            } else if (is_jpeg_name(name)) {
                st = si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            } else {
                is_dir = is_reg = false; /* e.g. a dangling link to something else: not ours */
            }
        }
        if (st != SI_OK) {
            /* fall through to the frees */
        } else if (is_dir) {
            bool loop = false;
            for (int k = 0; k < depth; k++)
                loop |= up[k].dev == sb.st_dev && up[k].ino == sb.st_ino;
            if (loop) /* its files are packed once already, through the real path */
                si_log_warn("pack: skipping %s: a symbolic link back to a directory above it",
                            path);
            else if (depth + 1 >= MAX_DEPTH)
                st = si_error(SI_ERR_ARG, "%s: directories nested deeper than %d", path, MAX_DEPTH);
            else {
                up[depth] = (dir_key){sb.st_dev, sb.st_ino};
                st = walk(pk, path, id, up, depth + 1);
            }
        } else if (is_reg && is_jpeg_name(name)) {
            st = add_file(pk, path, id, 0);
        }
        free(path);
        free(id);
        free(list[i]);
    }
    for (; i < n; i++) free(list[i]);
    free(list);
    return st;
}

static si_status pack_dir(packer *pk, const char *root) {
    dir_key *up = si_xcalloc(MAX_DEPTH, sizeof *up);
    struct stat sb;
    si_status st;
    if (stat(root, &sb) != 0) {
        st = si_error(SI_ERR_IO, "%s: %s", root, strerror(errno));
    } else {
        up[0] = (dir_key){sb.st_dev, sb.st_ino};
        /* a trailing slash would make ids start with "/" below it; strip them for the paths */
        char *r = si_xstrdup(root);
        for (size_t l = strlen(r); l > 1 && r[l - 1] == '/'; l--) r[l - 1] = 0;
        st = walk(pk, r, "", up, 1);
        free(r);
    }
    free(up);
    return st;
}

/* Splits a list line in place at tabs; returns the number of fields (up to 4 reported). */
static int split_tabs(char *line, char *f[4]) {
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p; p++)
        if (*p == '\t') {
            *p = 0;
            if (n == 4) return 5;
            f[n++] = p + 1;
        }
    return n;
}

static si_status pack_list(packer *pk, const char *list) {
    FILE *f = fopen(list, "r");
    if (!f) return si_error(SI_ERR_IO, "%s: cannot open: %s", list, strerror(errno));
    char *base = si_xstrdup(list), *slash = strrchr(base, '/');
    if (slash)
        slash[1] = 0;
    else
        base[0] = 0; /* relative to the current directory, as the list itself */
    char *line = NULL, *path = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    si_status st = SI_OK;
    while (st == SI_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (strspn(line, " \t") == (size_t)len || line[0] == '#') continue;
        char *fld[4];
        int nf = split_tabs(line, fld);
        if (nf > 3) {
            st = si_error(SI_ERR_ARG, "%s:%d: more than 3 tab-separated fields (PATH, ID, LABEL)",
                          list, lineno);
            break;
        }
        if (!fld[0][0] || (nf > 1 && !fld[1][0])) {
            st = si_error(SI_ERR_ARG, "%s:%d: empty %s", list, lineno, fld[0][0] ? "id" : "path");
            break;
        }
        int has_label = nf == 3;
        if (pk->labelled < 0) {
            pk->labelled = has_label;
            pk->label_line = lineno;
            if (has_label && (pk->labels = create_1d(pk, "labels", H5T_STD_I64LE, REC_BLOCK)) < 0) {
                st = SI_ERR_IO;
                break;
            }
        } else if (pk->labelled != has_label) {
            st = si_error(SI_ERR_ARG,
                          "%s:%d: %s a label but line %d %s; label every line of the list or "
                          "none",
                          list, lineno, has_label ? "has" : "has no", pk->label_line,
                          has_label ? "has none" : "has one");
            break;
        }
        int64_t label = 0;
        if (has_label) {
            char *end;
            errno = 0;
            long long v = strtoll(fld[2], &end, 10);
            if (errno || end == fld[2] || *end) {
                st = si_error(SI_ERR_ARG, "%s:%d: label '%s' is not a 64-bit integer", list, lineno,
                              fld[2]);
                break;
            }
            label = v;
        }
        free(path);
        path = NULL;
        if (asprintf(&path, "%s%s", fld[0][0] == '/' ? "" : base, fld[0]) < 0)
            si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
        st = add_file(pk, path, nf > 1 ? fld[1] : fld[0], label);
        if (st != SI_OK) si_error_prefix(st, "%s:%d: ", list, lineno);
    }
    if (st == SI_OK && ferror(f)) st = si_error(SI_ERR_IO, "%s: read error", list);
    fclose(f);
    free(line);
    free(path);
    free(base);
    return st;
}

static si_status write_attrs(packer *pk) {
    int version = SI_PACK_FORMAT_VERSION;
    char *src = realpath(pk->o->source, NULL);
    if (!src) src = si_xstrdup(pk->o->source);
    /* h5py cannot read an attribute that is not UTF-8; a byte or two of the provenance path is
     * not worth that */
    if (!valid_utf8(src))
        for (char *p = src; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    const char *s = src;
    herr_t e = si_h5_attr(pk->grp, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    if (e >= 0) e = si_h5_attr(pk->grp, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, &pk->st->count);
    if (e >= 0) e = si_h5_attr(pk->grp, "source", pk->strtype, pk->strtype, &s);
    free(src);
    return e < 0 ? write_failed(pk, "the attributes of /images") : SI_OK;
}

static void packer_close(packer *pk) {
    hid_t *h[] = {&pk->labels, &pk->ids, &pk->offsets, &pk->data};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (*h[i] >= 0) H5Dclose(*h[i]);
    if (pk->strtype >= 0) H5Tclose(pk->strtype);
    if (pk->grp >= 0) H5Gclose(pk->grp);
    pk->labels = pk->ids = pk->offsets = pk->data = pk->strtype = pk->grp = H5I_INVALID_HID;
}

/* Borrows o; fills *st (zeroed first). On failure no output file exists. */
si_status si_pack(const si_pack_opts *o, si_pack_stats *st) {
    double t0 = si_now();
    memset(st, 0, sizeof *st);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    size_t chunk = o->chunk_bytes ? o->chunk_bytes : (size_t)1 << 20;
    if (chunk > MAX_CHUNK)
        return si_error(SI_ERR_ARG, "chunk size %zu bytes is over the limit of %zu", chunk,
                        MAX_CHUNK);
    struct stat sb;
    if (stat(o->source, &sb) != 0)
        return si_error(SI_ERR_IO, "%s: %s", o->source,
                        errno == ENOENT ? "no such file or directory" : strerror(errno));
    bool from_dir = S_ISDIR(sb.st_mode);
    if (!from_dir && !S_ISREG(sb.st_mode))
        return si_error(SI_ERR_ARG, "%s: neither a directory nor a list file", o->source);
    if (!o->overwrite && stat(o->output, &sb) == 0)
        return si_error(SI_ERR_IO, "%s: already exists; not overwriting it", o->output);

    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", o->output) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
    packer pk = {.o = o, .st = st, .labelled = from_dir ? 0 : -1};
    pk.grp = pk.data = pk.offsets = pk.ids = pk.labels = pk.strtype = H5I_INVALID_HID;
    pk.buf = si_xmalloc(DATA_BLOCK);
    pk.offs = si_xmalloc(REC_BLOCK * sizeof *pk.offs);
    pk.idbuf = si_xcalloc(REC_BLOCK, sizeof *pk.idbuf);
    pk.labbuf = si_xmalloc(REC_BLOCK * sizeof *pk.labbuf);
    pk.offs[pk.noffs++] = 0;

    si_status s = SI_OK;
    pk.file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (pk.file < 0) {
        s = si_error(SI_ERR_IO, "%s: cannot create", tmp);
        goto done;
    }
    pk.strtype = si_h5_utf8_type();
    pk.grp = H5Gcreate2(pk.file, "images", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (pk.grp < 0 || (pk.data = create_1d(&pk, "data", H5T_STD_U8LE, chunk)) < 0 ||
        (pk.offsets = create_1d(&pk, "offsets", H5T_STD_U64LE, REC_BLOCK)) < 0 ||
        (pk.ids = create_1d(&pk, "ids", pk.strtype, REC_BLOCK)) < 0) {
        s = pk.grp < 0 ? si_error(SI_ERR_IO, "%s: cannot create /images", tmp) : SI_ERR_IO;
        goto done;
    }
    s = from_dir ? pack_dir(&pk, o->source) : pack_list(&pk, o->source);
    if (s == SI_OK && st->count == 0)
        s = si_error(SI_ERR_ARG, "%s: no images found (%s)", o->source,
                     from_dir ? "files named *.jpg or *.jpeg, in any case" : "empty list");
    if (s == SI_OK) s = flush_data(&pk);
    if (s == SI_OK) s = flush_offsets(&pk);
    if (s == SI_OK) s = flush_ids(&pk);
    if (s == SI_OK) s = write_attrs(&pk);
done:
    packer_close(&pk);
    for (size_t i = 0; i < pk.nids; i++) free(pk.idbuf[i]);
    if (pk.file >= 0 && H5Fclose(pk.file) < 0 && s == SI_OK) s = write_failed(&pk, "the file");
    if (s == SI_OK && rename(tmp, o->output) != 0)
        s = si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", o->output, tmp, strerror(errno));
    if (s != SI_OK) unlink(tmp);
    free(tmp);
    free(pk.buf);
    free(pk.offs);
    free(pk.idbuf);
    free(pk.labbuf);
    st->seconds = si_now() - t0;
    return s;
}
