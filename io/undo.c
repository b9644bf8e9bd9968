/* The undo record of a file changed in place (see undo.h). Layout of the record:
 *   "SIUNDO01", u64 size, u64 n, n x (u64 off, u64 len), the n spans' bytes, u32 crc32 of all
 *   that precedes it. */
#include "io/undo.h"

#include "io/beside.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define UNDO_MAGIC "SIUNDO01"
#define MAX_SPANS  64
#define UNDO_MAX   (64 << 20) /* bytes: a record holds the kilobytes outside the rows */

static int by_off(const void *a, const void *b) {
    const si_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The spans of [0, size) outside `keep` (sorted here); returns their count. */
static int complement(si_span *keep, int n, uint64_t size, si_span *out) {
    qsort(keep, (size_t)n, sizeof *keep, by_off);
    int m = 0;
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t lo = keep[i].off < size ? keep[i].off : size;
        if (lo > at) out[m++] = (si_span){at, lo - at};
        uint64_t hi = keep[i].off + keep[i].len;
        if (hi > at) at = hi;
    }
    if (at < size) out[m++] = (si_span){at, size - at};
    return m;
}

static bool write_all(int fd, const void *p, size_t len, uLong *crc) {
    *crc = crc32(*crc, p, (uInt)len);
    for (size_t o = 0; o < len;) {
        ssize_t w = write(fd, (const char *)p + o, len - o);
        if (w <= 0) return false;
        o += (size_t)w;
    }
    return true;
}

static bool pread_all(int fd, void *p, size_t len, uint64_t at) {
    for (size_t o = 0; o < len;) {
        ssize_t g = pread(fd, (char *)p + o, len - o, (off_t)(at + o));
        if (g <= 0) return false;
        o += (size_t)g;
    }
    return true;
}

si_status si_sync_dir_of(const char *path) {
    char *copy = si_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    si_status st = SI_OK;
    if (fd < 0 || fsync(fd) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot sync its directory: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    free(copy);
    return st;
}

si_status si_undo_save(const char *path, const char *undo_path, const si_span *keep, int n) {
    SI_ASSERT(n <= MAX_SPANS);
    si_span k[MAX_SPANS], save[MAX_SPANS + 1];
    memcpy(k, keep, sizeof *k * (size_t)n);
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", undo_path) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    int in = -1, out = -1;
    struct stat sb;
    si_status st = si_beside_open(path, O_RDONLY, &in);
    if (st != SI_OK) goto done;
    if (fstat(in, &sb) != 0) {
        st = si_error(SI_ERR_IO, "%s: cannot read it: %s", path, strerror(errno));
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    int m = complement(k, n, size, save);
    /* a temporary of our own (the output's lock is held): made new, never through a link */
    if ((st = si_beside_create(tmp, O_WRONLY, &out)) != SI_OK) goto done;
    uLong crc = crc32(0, NULL, 0);
    uint64_t head[2] = {size, (uint64_t)m};
    bool ok = out >= 0 && write_all(out, UNDO_MAGIC, 8, &crc) && write_all(out, head, 16, &crc) &&
              write_all(out, save, sizeof *save * (size_t)m, &crc);
    char buf[1 << 16];
    for (int i = 0; ok && i < m; i++)
        for (uint64_t o = 0; ok && o < save[i].len; o += sizeof buf) {
            size_t len = save[i].len - o < sizeof buf ? (size_t)(save[i].len - o) : sizeof buf;
            ok = pread_all(in, buf, len, save[i].off + o) && write_all(out, buf, len, &crc);
        }
    uint32_t c32 = (uint32_t)crc;
    uLong ignore = 0;
    ok = ok && write_all(out, &c32, 4, &ignore) && fsync(out) == 0;
    if (out >= 0 && close(out) != 0) ok = false;
    out = -1;
    if (!ok || rename(tmp, undo_path) != 0) {
        st = si_error(SI_ERR_IO, "%s: cannot write it: %s", tmp, strerror(errno ? errno : EIO));
        unlink(tmp);
        goto done;
    }
    st = si_sync_dir_of(undo_path);
done:
    if (in >= 0) close(in);
    free(tmp);
    return st;
}

si_status si_undo_restore(const char *path, const char *undo_path, bool *restored) {
    *restored = false;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", undo_path) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    unlink(tmp);
    free(tmp);
    struct stat lsb;
    if (lstat(undo_path, &lsb) != 0 && errno == ENOENT) return SI_OK;
    int in = -1;
    si_status st = si_beside_open(undo_path, O_RDONLY, &in);
    if (st != SI_OK) return st;
    si_bytes b = {0};
    for (;;) { /* the whole record: kilobytes, bounded so that a planted file cannot exhaust memory
                */
        if (b.len > UNDO_MAX) {
            st = si_error(SI_ERR_FORMAT, "%s: over %d MiB: not an undo record of shardinfer's",
                          undo_path, UNDO_MAX >> 20);
            break;
        }
        if ((st = si_bytes_reserve(&b, b.len + (1 << 16))) != SI_OK) break;
        ssize_t got = read(in, b.data + b.len, 1 << 16);
        if (got < 0) st = si_error(SI_ERR_IO, "%s: cannot read: %s", undo_path, strerror(errno));
        if (got <= 0) break;
        b.len += (size_t)got;
    }
    close(in);
    uint64_t size = 0, m = 0;
    if (st == SI_OK && b.len >= 28) {
        memcpy(&size, b.data + 8, 8);
        memcpy(&m, b.data + 16, 8);
    }
    uint32_t c32 = 0;
    if (b.len >= 4) memcpy(&c32, b.data + b.len - 4, 4);
    /* every count and length checked against the record's own size before it is used: the
     * record lies beside the output, where anything may have been put */
    bool valid = st == SI_OK && b.len >= 28 && !memcmp(b.data, UNDO_MAGIC, 8) &&
                 m <= MAX_SPANS + 1 && 28 + 16 * m <= b.len &&
                 crc32(0, b.data, (uInt)(b.len - 4)) == c32;
    const si_span *spans = (const si_span *)(b.data + 24);
    uint64_t need = 28 + 16 * m;
    for (uint64_t i = 0; valid && i < m; i++) {
        valid = spans[i].len <= b.len - need && spans[i].off <= size &&
                spans[i].len <= size - spans[i].off;
        need += valid ? spans[i].len : 0;
    }
    if (st == SI_OK && (!valid || need != b.len))
        st = si_error(SI_ERR_FORMAT,
                      "%s: the undo record of an interrupted final step does not check out "
                      "(damaged); %s is left as it is: start again with --overwrite",
                      undo_path, path);
    int fd = -1;
    if (st == SI_OK && (st = si_beside_open(path, O_WRONLY, &fd)) != SI_OK)
        si_error_prefix(st, "restoring from %s: ", undo_path);
    const uint8_t *p = st == SI_OK ? b.data + 24 + 16 * m : NULL;
    for (uint64_t i = 0; st == SI_OK && i < m; i++) {
        for (uint64_t o = 0; o < spans[i].len;) {
            ssize_t w = pwrite(fd, p + o, spans[i].len - o, (off_t)(spans[i].off + o));
            if (w <= 0) {
                st = si_error(SI_ERR_IO, "%s: cannot restore it: %s", path, strerror(errno));
                break;
            }
            o += (uint64_t)w;
        }
        p += spans[i].len;
    }
    if (st == SI_OK && (ftruncate(fd, (off_t)size) != 0 || fsync(fd) != 0))
        st = si_error(SI_ERR_IO, "%s: cannot restore it: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    si_bytes_free(&b);
    if (st != SI_OK) return st;
    si_undo_drop(undo_path);
    *restored = true;
    return SI_OK;
}

void si_undo_drop(const char *undo_path) {
    if (unlink(undo_path) == 0) si_sync_dir_of(undo_path);
}
