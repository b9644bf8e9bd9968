/* `shardinfer pack`: streams JPEG files into the packed layout of source.h. Records pass
 * through fixed buffers (16 MiB of bytes, 16384 offsets/ids/labels) that are appended to
 * chunked, extendible datasets when full, so memory does not grow with the number of images.
 * The file is built as a temporary of its own beside the output (OUTPUT.PID-RANDOM.tmp, created
 * with O_EXCL) and renamed at the end: a failed or interrupted pack leaves nothing behind, and
 * two packs to one output cannot delete each other's work. Inputs may be hostile: only regular
 * files are opened for reading (never a FIFO, which would block, or a device, which may never
 * end), each read is bounded by a per-file cap, and a directory walk does not follow a symlink
 * out of the tree unless asked to. */
#include "io/pack.h"

#include "io/h5util.h"
#include "io/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_BLOCK ((size_t)16 << 20) /* bytes buffered before an append to /images/data */
#define REC_BLOCK  16384              /* offsets/ids/labels buffered; also their chunk length */
#define MAX_DEPTH  256                /* directory nesting; deeper is a loop or a mistake */
#define MAX_CHUNK  ((size_t)256 << 20)
#define MAX_LINE   65536 /* bytes of one list line: a path, an id and a label fit many times */

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
    uint64_t cap;     /* bytes per file */
    char *root_real;  /* directory mode: the tree's real path, which links may not leave */
    const char *tmp;  /* the temporary's path */
    struct stat tmp_sb, out_sb; /* identities never to pack: the temporary, an existing output */
    bool out_exists;
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
    return si_error(SI_ERR_IO, "%s: cannot write %s (disk full?)", pk->tmp, what);
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
    if (d < 0) si_error(SI_ERR_IO, "%s: cannot create /images/%s", pk->tmp, name);
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

/* SI_ERR_INTERRUPTED with its message when the caller asked to stop, else SI_OK. */
static si_status check_stop(packer *pk) {
    int sig = pk->o->stop ? pk->o->stop() : 0;
    if (!sig) return SI_OK;
    return si_error(SI_ERR_INTERRUPTED,
                    "%s: interrupted by %s after %llu images; the temporary file is removed "
                    "and nothing is written",
                    pk->o->output, strsignal(sig), (unsigned long long)pk->st->count);
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Whether sb (of path) may be packed: a regular file within the cap that is neither the output
 * nor our temporary. Checked (again) on the descriptor about to be read, so a rename in between
 * cannot substitute something else. */
static si_status check_file(const packer *pk, const char *path, const struct stat *sb) {
    if (!S_ISREG(sb->st_mode))
        return si_error(SI_ERR_IO, "%s: %s, not a regular file; pack reads regular files only",
                        path, file_kind(sb->st_mode));
    if ((pk->out_exists && same_file(sb, &pk->out_sb)) || same_file(sb, &pk->tmp_sb))
        return si_error(SI_ERR_ARG, "%s: is the output %s; refusing to pack it into itself", path,
                        pk->o->output);
    if ((uint64_t)sb->st_size > pk->cap)
        return si_error(SI_ERR_IO,
                        "%s: %llu bytes, over the limit of %llu per file (--max-file-bytes)", path,
                        (unsigned long long)sb->st_size, (unsigned long long)pk->cap);
    return SI_OK;
}

/* Streams the file open as fd into the pack as the next record: at most pk->cap bytes, even if
 * it grows while read. Borrows all arguments; the caller closes fd. */
static si_status add_fd(packer *pk, int fd, const char *path, const char *id, int64_t label) {
    if (!valid_utf8(id))
        return si_error(SI_ERR_ARG,
                        "%s: the id is not valid UTF-8; rename the file or give an "
                        "id in a list file",
                        path);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return si_error(SI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    si_status st = check_file(pk, path, &sb);
    if (st != SI_OK) return st;
    uint64_t size = 0;
    uint8_t head[2] = {0, 0};
    for (;;) {
        if (pk->buf_len == DATA_BLOCK) {
            /* a stop request is honoured within a block, not only after a whole large file */
            if ((st = check_stop(pk)) != SI_OK || (st = flush_data(pk)) != SI_OK) return st;
        }
        /* one byte past the cap tells a file that grew from one that just fits */
        size_t want = DATA_BLOCK - pk->buf_len;
        if (pk->cap - size < want) want = (size_t)(pk->cap - size) + 1;
        ssize_t r = read(fd, pk->buf + pk->buf_len, want);
        if (r < 0 && errno == EINTR) continue; /* a stop signal: seen at the next check */
        if (r < 0) return si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        if (r == 0) break;
        for (size_t i = 0; i < (size_t)r && size + i < 2; i++)
            head[size + i] = pk->buf[pk->buf_len + i];
        pk->buf_len += (size_t)r;
        size += (uint64_t)r;
        if (size > pk->cap)
            return si_error(SI_ERR_IO,
                            "%s: grew past the limit of %llu bytes per file (--max-file-bytes) "
                            "while read",
                            path, (unsigned long long)pk->cap);
    }

    if (size < 2 || head[0] != 0xFF || head[1] != 0xD8) pk->st->not_jpeg++;
    pk->total += size;
    pk->st->bytes += size;
    pk->st->count++;
    pk->offs[pk->noffs++] = pk->total;
    if (pk->noffs == REC_BLOCK) {
        st = flush_offsets(pk);
        if (st != SI_OK) return st;
    }
    pk->idbuf[pk->nids] = si_xstrdup(id);
    pk->labbuf[pk->nids] = label;
    pk->nids++;
    if (pk->nids == REC_BLOCK) return flush_ids(pk);
    return SI_OK;
}

/* A file the user named (a list entry): symlinks followed, since naming one is a choice, but it
 * must be a regular file, checked before opening (opening a device can have effects of its own)
 * and again on the descriptor. O_NONBLOCK: should a FIFO be swapped in, open does not wait for
 * a writer. Borrows all arguments. */
static si_status add_path(packer *pk, const char *path, const char *id, int64_t label) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    si_status st = check_file(pk, path, &sb);
    if (st != SI_OK) return st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    st = add_fd(pk, fd, path, id, label);
    close(fd);
    return st;
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

/* Whether the real path `real` lies in the tree (the root itself counts). */
static bool in_tree(const packer *pk, const char *real) {
    size_t n = strlen(pk->root_real);
    if (n == 1) return true; /* the tree is "/" */
    return strncmp(real, pk->root_real, n) == 0 && (real[n] == '/' || real[n] == 0);
}

/* Opens what the symlink `path` (entry `name`) points to, if it is ours to pack: a directory,
 * or a regular file with a JPEG name, inside the tree unless follow_links. *fd stays -1 for a
 * link that is not ours (a dangling link or one to a file of another name). The target is
 * opened by its real path with O_NOFOLLOW, the path that was checked. */
static si_status open_link(packer *pk, const char *path, const char *name, int *fd) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return is_jpeg_name(name)
                   ? si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(errno))
                   : SI_OK;
    bool dir = S_ISDIR(sb.st_mode);
    if (!dir && !is_jpeg_name(name)) return SI_OK;
    if (!dir && !S_ISREG(sb.st_mode))
        return si_error(SI_ERR_IO, "%s: a symbolic link to %s; pack reads regular files only", path,
                        file_kind(sb.st_mode));
    char *real = realpath(path, NULL);
    if (!real) return si_error(SI_ERR_IO, "%s: cannot resolve: %s", path, strerror(errno));
    si_status st = SI_OK;
    if (!pk->o->follow_links && !in_tree(pk, real))
        st = si_error(SI_ERR_ARG,
                      "%s: a symbolic link to %s, outside the tree %s; not followed (pass "
                      "--follow-links to pack what it points to, or remove it)",
                      path, real, pk->root_real);
    else if ((*fd = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW |
                                   (dir ? O_DIRECTORY : 0))) < 0)
        st = si_error(SI_ERR_IO, "%s: cannot open %s: %s", path, real, strerror(errno));
    free(real);
    return st;
}

static si_status walk(packer *pk, int dfd, const char *dir, const char *rel, dir_key *up,
                      int depth);

/* One entry of a directory being walked: a directory is descended into, a regular file with a
 * JPEG name packed, anything else with a JPEG name refused, the rest ignored. Entries are opened
 * relative to their directory with O_NOFOLLOW, so only open_link's checked targets are followed. */
static si_status walk_entry(packer *pk, int dfd, const char *path, const char *name,
                            unsigned char type, const char *id, dir_key *up, int depth) {
    if (type == DT_REG && !is_jpeg_name(name)) return SI_OK; /* most of a tree: no syscall */
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return is_jpeg_name(name)
                   ? si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(errno))
                   : SI_OK; /* gone since the listing: not ours */
    int fd = -1;
    si_status st = SI_OK;
    if (S_ISLNK(sb.st_mode))
        st = open_link(pk, path, name, &fd);
    else if (S_ISDIR(sb.st_mode)) {
        if ((fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            st = si_error(SI_ERR_IO, "%s: cannot list the directory: %s", path, strerror(errno));
    } else if (!is_jpeg_name(name))
        return SI_OK;
    else if (!S_ISREG(sb.st_mode))
        st = si_error(SI_ERR_IO, "%s: %s, not a regular file; pack reads regular files only", path,
                      file_kind(sb.st_mode));
    else if ((fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)) < 0)
        st = si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (st != SI_OK || fd < 0) return st;

    if (fstat(fd, &sb) != 0) {
        st = si_error(SI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        bool loop = false;
        for (int k = 0; k < depth; k++) loop |= up[k].dev == sb.st_dev && up[k].ino == sb.st_ino;
        if (loop) /* its files are packed once already, through the real path */
            si_log_warn("pack: skipping %s: a symbolic link back to a directory above it", path);
        else if (depth + 1 >= MAX_DEPTH)
            st = si_error(SI_ERR_ARG, "%s: directories nested deeper than %d", path, MAX_DEPTH);
        else {
            up[depth] = (dir_key){sb.st_dev, sb.st_ino};
            st = walk(pk, fd, path, id, up, depth + 1);
        }
    } else if (is_jpeg_name(name)) {
        st = add_fd(pk, fd, path, id, 0);
    }
    close(fd);
    return st;
}

/* Packs the JPEG files under the directory open as dfd (its path `dir`, relative to the root
 * `rel`, "" at the root), in sorted order, depth first. Only this directory's listing is held
 * in memory (plus those of its ancestors up the recursion). `up` holds the ancestors'
 * identities to skip symlink loops. Borrows dfd. */
static si_status walk(packer *pk, int dfd, const char *dir, const char *rel, dir_key *up,
                      int depth) {
    struct dirent **list = NULL;
    int n = scandirat(dfd, ".", &list, not_dots, by_name);
    if (n < 0)
        return si_error(SI_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
    si_status st = SI_OK;
    int i = 0;
    for (; i < n && st == SI_OK; i++) {
        const char *name = list[i]->d_name;
        char *path = NULL, *id = NULL;
        if (asprintf(&path, "%s/%s", dir, name) < 0 ||
            asprintf(&id, "%s%s%s", rel, rel[0] ? "/" : "", name) < 0)
            si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
        st = check_stop(pk);
        if (st == SI_OK) st = walk_entry(pk, dfd, path, name, list[i]->d_type, id, up, depth);
        free(path);
        free(id);
        free(list[i]);
    }
    for (; i < n; i++) free(list[i]);
    free(list);
    return st;
}

static si_status pack_dir(packer *pk, const char *root) {
    /* the root is what the user named: a symlink to the tree is followed */
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !(pk->root_real = realpath(root, NULL))) {
        si_status st = si_error(SI_ERR_IO, "%s: %s", root, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    dir_key *up = si_xcalloc(MAX_DEPTH, sizeof *up);
    up[0] = (dir_key){sb.st_dev, sb.st_ino};
    /* a trailing slash would make ids start with "/" below it; strip them for the paths */
    char *r = si_xstrdup(root);
    for (size_t l = strlen(r); l > 1 && r[l - 1] == '/'; l--) r[l - 1] = 0;
    si_status st = walk(pk, fd, r, "", up, 1);
    free(r);
    free(up);
    close(fd);
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

/* Opens the list file for reading: a regular file (a FIFO or device swapped in after si_pack
 * looked is refused, without waiting for a writer), not the output. */
static si_status open_list(packer *pk, const char *list, FILE **out) {
    int fd = open(list, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return si_error(SI_ERR_IO, "%s: cannot open: %s", list, strerror(errno));
    struct stat sb;
    si_status st = SI_OK;
    if (fstat(fd, &sb) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot stat: %s", list, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = si_error(SI_ERR_ARG, "%s: %s, not a list file", list, file_kind(sb.st_mode));
    else if (pk->out_exists && same_file(&sb, &pk->out_sb))
        st = si_error(SI_ERR_ARG, "%s: is the list file; refusing to write the output over it",
                      pk->o->output);
    else if (!(*out = fdopen(fd, "r")))
        st = si_error(SI_ERR_IO, "%s: cannot open: %s", list, strerror(errno));
    if (st != SI_OK) close(fd);
    return st;
}

/* Reads one line of at most MAX_LINE bytes into line[MAX_LINE + 2], without its end of line.
 * Returns its length, -1 at the end, -2 for a longer line (the rest is not read). */
static long read_line(FILE *f, char *line) {
    if (!fgets(line, MAX_LINE + 2, f)) return -1;
    size_t len = strlen(line);
    if (len > MAX_LINE && line[len - 1] != '\n') return -2;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    return (long)len;
}

static si_status pack_list(packer *pk, const char *list) {
    FILE *f = NULL;
    si_status st = open_list(pk, list, &f);
    if (st != SI_OK) return st;
    char *base = si_xstrdup(list), *slash = strrchr(base, '/');
    if (slash)
        slash[1] = 0;
    else
        base[0] = 0; /* relative to the current directory, as the list itself */
    char *line = si_xmalloc(MAX_LINE + 2), *path = NULL;
    long len;
    int lineno = 0;
    while (st == SI_OK && (st = check_stop(pk)) == SI_OK && (len = read_line(f, line)) != -1) {
        lineno++;
        if (len == -2) {
            st = si_error(SI_ERR_ARG, "%s:%d: line longer than %d bytes", list, lineno, MAX_LINE);
            break;
        }
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
        st = add_path(pk, path, nf > 1 ? fld[1] : fld[0], label);
        if (st != SI_OK && st != SI_ERR_INTERRUPTED) si_error_prefix(st, "%s:%d: ", list, lineno);
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

/* Creates a temporary of our own beside the output: a name no other pack picks (pid and random
 * bits) and O_EXCL|O_NOFOLLOW, so an existing file or symlink of that name is never opened. On
 * success *path (caller frees) and *fd (caller closes) are set. */
static si_status make_temp(const char *output, char **path, int *fd) {
    for (int attempt = 0; attempt < 64; attempt++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = (uint32_t)(si_now() * 1e9) ^ ((uint32_t)attempt << 24);
        if (asprintf(path, "%s.%ld-%08x.tmp", output, (long)getpid(), (unsigned)r) < 0)
            si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
        *fd = open(*path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (*fd >= 0) return SI_OK;
        int e = errno;
        free(*path);
        *path = NULL;
        if (e != EEXIST)
            return si_error(SI_ERR_IO, "%s: cannot create a temporary file beside it: %s", output,
                            strerror(e));
    }
    return si_error(SI_ERR_IO, "%s: no free name for a temporary file beside it", output);
}

/* HDF5 opens the temporary again by name; its descriptor must be the file make_temp created,
 * not something put in its place in between. */
static si_status check_h5_file(packer *pk) {
    int *h5fd = NULL;
    struct stat sb;
    if (H5Fget_vfd_handle(pk->file, H5P_DEFAULT, (void **)&h5fd) < 0 || !h5fd ||
        fstat(*h5fd, &sb) != 0 || !same_file(&sb, &pk->tmp_sb))
        return si_error(SI_ERR_IO, "%s: replaced by another file while being created", pk->tmp);
    return SI_OK;
}

/* Removes the temporary only while its name still holds the file we made: never another
 * process's. */
static void remove_temp(const packer *pk) {
    struct stat sb;
    if (lstat(pk->tmp, &sb) == 0 && same_file(&sb, &pk->tmp_sb) && unlink(pk->tmp) != 0)
        si_log_warn("%s: cannot remove the temporary file: %s", pk->tmp, strerror(errno));
}

/* Moves the finished temporary to the output in one step. Without overwrite the output must
 * still not exist at that moment (another pack may have made it meanwhile): RENAME_NOREPLACE,
 * or a hard link where the file system lacks it. */
static si_status publish(packer *pk) {
    const char *out = pk->o->output;
    struct stat sb;
    if (lstat(pk->tmp, &sb) != 0 || !same_file(&sb, &pk->tmp_sb))
        return si_error(SI_ERR_IO, "%s: replaced by another file while being written", pk->tmp);
    if (pk->o->overwrite) {
        if (rename(pk->tmp, out) == 0) return SI_OK;
    } else if (renameat2(AT_FDCWD, pk->tmp, AT_FDCWD, out, RENAME_NOREPLACE) == 0) {
        return SI_OK;
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        if (link(pk->tmp, out) == 0) {
            if (unlink(pk->tmp) != 0)
                si_log_warn("%s: cannot remove the temporary file: %s", pk->tmp, strerror(errno));
            return SI_OK;
        }
    }
    if (errno == EEXIST)
        return si_error(SI_ERR_IO, "%s: created by someone else while packing; not overwriting it",
                        out);
    return si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", out, pk->tmp, strerror(errno));
}

/* Refuses, before any work, an output that cannot or must not be replaced. */
static si_status check_output(packer *pk, const struct stat *source, bool from_dir) {
    const si_pack_opts *o = pk->o;
    struct stat lsb;
    if (lstat(o->output, &lsb) != 0) return SI_OK;
    /* a symlink as output: rename replaces the link, but refuse what it points to as well */
    pk->out_exists = stat(o->output, &pk->out_sb) == 0;
    if (pk->out_exists && same_file(&pk->out_sb, source))
        return si_error(SI_ERR_ARG, "%s: is the %s %s; refusing to write the output over it",
                        o->output, from_dir ? "source directory" : "list file", o->source);
    if (!o->overwrite)
        return si_error(SI_ERR_IO, "%s: already exists; not overwriting it", o->output);
    if (pk->out_exists && S_ISDIR(pk->out_sb.st_mode))
        return si_error(SI_ERR_ARG, "%s: is a directory; the output is a file", o->output);
    return SI_OK;
}

/* Creates the temporary, its HDF5 file and the datasets every pack has. */
static si_status packer_open(packer *pk, char **tmp, int *tmpfd, size_t chunk) {
    si_status s = make_temp(pk->o->output, tmp, tmpfd);
    if (s != SI_OK) return s;
    pk->tmp = *tmp;
    if (fstat(*tmpfd, &pk->tmp_sb) != 0)
        return si_error(SI_ERR_IO, "%s: cannot stat: %s", *tmp, strerror(errno));
    pk->file = H5Fcreate(*tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (pk->file < 0) return si_error(SI_ERR_IO, "%s: cannot create", *tmp);
    if ((s = check_h5_file(pk)) != SI_OK) return s;
    pk->strtype = si_h5_utf8_type();
    pk->grp = H5Gcreate2(pk->file, "images", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (pk->grp < 0) return si_error(SI_ERR_IO, "%s: cannot create /images", *tmp);
    if ((pk->data = create_1d(pk, "data", H5T_STD_U8LE, chunk)) < 0 ||
        (pk->offsets = create_1d(pk, "offsets", H5T_STD_U64LE, REC_BLOCK)) < 0 ||
        (pk->ids = create_1d(pk, "ids", pk->strtype, REC_BLOCK)) < 0)
        return SI_ERR_IO;
    return SI_OK;
}

/* Borrows o; fills *st (zeroed first). On failure no output file exists and the temporary is
 * removed. */
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
    packer pk = {.o = o, .st = st, .labelled = from_dir ? 0 : -1, .file = H5I_INVALID_HID};
    pk.grp = pk.data = pk.offsets = pk.ids = pk.labels = pk.strtype = H5I_INVALID_HID;
    pk.cap = o->max_file_bytes ? o->max_file_bytes : SI_PACK_DEFAULT_MAX_FILE_BYTES;
    si_status s = check_output(&pk, &sb, from_dir);
    if (s != SI_OK) return s;

    char *tmp = NULL;
    int tmpfd = -1;
    pk.buf = si_xmalloc(DATA_BLOCK);
    pk.offs = si_xmalloc(REC_BLOCK * sizeof *pk.offs);
    pk.idbuf = si_xcalloc(REC_BLOCK, sizeof *pk.idbuf);
    pk.labbuf = si_xmalloc(REC_BLOCK * sizeof *pk.labbuf);
    pk.offs[pk.noffs++] = 0;

    s = packer_open(&pk, &tmp, &tmpfd, chunk);
    if (s == SI_OK) s = from_dir ? pack_dir(&pk, o->source) : pack_list(&pk, o->source);
    if (s == SI_OK && st->count == 0)
        s = si_error(SI_ERR_ARG, "%s: no images found (%s)", o->source,
                     from_dir ? "files named *.jpg or *.jpeg, in any case" : "empty list");
    if (s == SI_OK) s = check_stop(&pk);
    if (s == SI_OK) s = flush_data(&pk);
    if (s == SI_OK) s = flush_offsets(&pk);
    if (s == SI_OK) s = flush_ids(&pk);
    if (s == SI_OK) s = write_attrs(&pk);
    packer_close(&pk);
    for (size_t i = 0; i < pk.nids; i++) free(pk.idbuf[i]);
    if (pk.file >= 0 && H5Fclose(pk.file) < 0 && s == SI_OK) s = write_failed(&pk, "the file");
    if (s == SI_OK) s = publish(&pk);
    if (s != SI_OK && tmp) remove_temp(&pk);
    if (tmpfd >= 0) close(tmpfd);
    free(tmp);
    free(pk.root_real);
    free(pk.buf);
    free(pk.offs);
    free(pk.idbuf);
    free(pk.labbuf);
    st->seconds = si_now() - t0;
    return s;
}
