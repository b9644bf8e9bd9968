/* An LD_PRELOAD library that makes reads of one file fail with EIO for a while, as a flaky disk
 * or network file system does, without ever altering the bytes a read returns: the transient
 * storage errors of tests/hostile_input.py (issue 36).
 *
 *   SI_EIO_PATH        the file: a descriptor matches when its device and inode are those of
 *                      stat(SI_EIO_PATH) (taken at the first read), whatever path opened it
 *   SI_EIO_AFTER=N     the first N matching reads succeed (default 0) ...
 *   SI_EIO_TIMES=K     ... then the next K fail with EIO (default 1), then all succeed again
 *   SI_EIO_MIN_OFFSET  only reads at this offset or beyond count and fail (default 0)
 *   SI_EIO_LOG=1       one line on stderr per read failed, for debugging a test
 *   SI_EIO_COUNT_FILE  at exit, the number of matching reads is written there: a test runs once
 *                      with SI_EIO_TIMES=0 to learn where in the run its failures will fall
 *
 * pread, pread64 and read are wrapped (HDF5's sec2 driver uses pread; a caller that probes the
 * file may read()), and so is fopen for reading: stdio's own reads call glibc's internal read,
 * which no preload sees, so the file comes back as a stdio stream over the wrapped pread (a
 * failing disk fails fgets too). Without SI_EIO_PATH every call passes straight through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*read_fn)(int, void *, size_t);

static atomic_int ready; /* 0: not yet, 1: configured, 2: off (no SI_EIO_PATH) */
static dev_t target_dev;
static ino_t target_ino;
static long long eio_after, eio_times = 1, min_offset;
static int log_failures;
static atomic_llong calls; /* matching reads at offset >= min_offset so far */

static long long env_ll(const char *name, long long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoll(v, NULL, 0) : dflt;
}

/* Reads the settings once; racing first calls may both do it, with the same answer. */
static int configured(void) {
    int r = atomic_load(&ready);
    if (r) return r == 1;
    const char *path = getenv("SI_EIO_PATH");
    struct stat sb;
    if (!path || !*path || stat(path, &sb) != 0) {
        atomic_store(&ready, 2);
        return 0;
    }
    target_dev = sb.st_dev;
    target_ino = sb.st_ino;
    eio_after = env_ll("SI_EIO_AFTER", 0);
    eio_times = env_ll("SI_EIO_TIMES", 1);
    min_offset = env_ll("SI_EIO_MIN_OFFSET", 0);
    log_failures = env_ll("SI_EIO_LOG", 0) != 0;
    atomic_store(&ready, 1);
    return 1;
}

/* 1 when this read of fd at offset must fail (and counts it), 0 to let it through. */
static int should_fail(int fd, long long offset) {
    if (!configured() || offset < min_offset) return 0;
    int saved = errno;
    struct stat sb;
    int match = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_dev == target_dev &&
                sb.st_ino == target_ino;
    errno = saved;
    if (!match) return 0;
    long long n = atomic_fetch_add(&calls, 1);
    int fail = n >= eio_after && n - eio_after < eio_times;
    if (fail && log_failures)
        fprintf(stderr, "eio_shim: read %lld at offset %lld fails\n", n, offset);
    return fail;
}

__attribute__((destructor)) static void write_count(void) {
    const char *path = getenv("SI_EIO_COUNT_FILE");
    if (atomic_load(&ready) != 1 || !path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%lld\n", (long long)atomic_load(&calls));
    fclose(f);
}

static void *next(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    static pread_fn real;
    if (!real) real = (pread_fn)next("pread");
    if (should_fail(fd, (long long)offset)) {
        errno = EIO;
        return -1;
    }
    return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    static pread_fn real;
    if (!real) real = (pread_fn)next("pread64");
    if (should_fail(fd, (long long)offset)) {
        errno = EIO;
        return -1;
    }
    return real(fd, buf, count, offset);
}

ssize_t read(int fd, void *buf, size_t count) {
    static read_fn real;
    if (!real) real = (read_fn)next("read");
    if (atomic_load(&ready) != 2) {
        int saved = errno;
        off_t at = lseek(fd, 0, SEEK_CUR); /* -1 for pipes and sockets: never a match */
        errno = saved;
        if (at >= 0 && should_fail(fd, (long long)at)) {
            errno = EIO;
            return -1;
        }
    }
    return real(fd, buf, count);
}

/* --- stdio: a stream whose reads are the wrapped pread's ------------------------------------ */

typedef struct {
    int fd;
    long long pos;
} cookie;

static ssize_t cookie_read(void *c, char *buf, size_t size) {
    cookie *k = c;
    ssize_t got = pread(k->fd, buf, size, (off_t)k->pos);
    if (got > 0) k->pos += got;
    return got;
}

static int cookie_seek(void *c, off64_t *offset, int whence) {
    cookie *k = c;
    long long base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? k->pos : -1;
    if (whence == SEEK_END) {
        struct stat sb;
        if (fstat(k->fd, &sb) != 0) return -1;
        base = (long long)sb.st_size;
    }
    if (base < 0 || base + (long long)*offset < 0) {
        errno = EINVAL;
        return -1;
    }
    k->pos = base + (long long)*offset;
    *offset = k->pos;
    return 0;
}

static int cookie_close(void *c) {
    cookie *k = c;
    int r = close(k->fd);
    free(k);
    return r;
}

typedef FILE *(*fopen_fn)(const char *, const char *);

/* The target file opened for reading only: a cookie stream; NULL (errno kept) to open normally. */
static FILE *target_stream(const char *path, const char *mode) {
    if (!configured() || !mode || mode[0] != 'r' || strchr(mode, '+')) return NULL;
    int saved = errno;
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_dev != target_dev ||
        sb.st_ino != target_ino) {
        errno = saved;
        return NULL;
    }
    errno = saved;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    cookie *k = calloc(1, sizeof *k);
    if (!k) {
        close(fd);
        return NULL;
    }
    k->fd = fd;
    cookie_io_functions_t io = {.read = cookie_read, .seek = cookie_seek, .close = cookie_close};
    FILE *f = fopencookie(k, "r", io);
    if (!f) cookie_close(k);
    return f;
}

FILE *fopen(const char *path, const char *mode) {
    static fopen_fn real;
    if (!real) real = (fopen_fn)next("fopen");
    FILE *f = target_stream(path, mode);
    return f ? f : real(path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
    static fopen_fn real;
    if (!real) real = (fopen_fn)next("fopen64");
    FILE *f = target_stream(path, mode);
    return f ? f : real(path, mode);
}
