/* Error buffer, logging, fatal checks and small utilities shared by every module. */
#include "common.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char errbuf[2048];
static int log_rank = -1, log_nranks = 1;
static si_log_level log_level = SI_LOG_INFO;
static char log_host[64];
static void (*abort_hook)(int code);

const char *si_status_name(si_status s) {
    switch (s) {
    case SI_OK: return "ok";
    case SI_ERR_ARG: return "bad argument";
    case SI_ERR_IO: return "I/O error";
    case SI_ERR_FORMAT: return "bad format";
    case SI_ERR_UNSUPPORTED: return "unsupported";
    case SI_ERR_NOMEM: return "out of memory";
    case SI_ERR_VERIFY: return "verification failed";
    case SI_ERR_LIMIT: return "too many failed images";
    case SI_ERR_INTERRUPTED: return "interrupted";
    case SI_ERR_INTERNAL: return "internal error";
    case SI_ERR_FAULT: return "storage or machine fault";
    }
    return "unknown";
}

const char *si_image_status_name(int status) {
    switch (status) {
    case SI_IMG_OK: return "ok";
    case SI_IMG_EMPTY: return "empty";
    case SI_IMG_NOT_JPEG: return "not_jpeg";
    case SI_IMG_TRUNCATED: return "truncated";
    case SI_IMG_CORRUPT: return "corrupt";
    case SI_IMG_TOO_LARGE: return "too_large";
    case SI_IMG_UNSUPPORTED: return "unsupported";
    case SI_IMG_READ_ERROR: return "read_error";
    case SI_IMG_POST_ERROR: return "post_error";
    case SI_IMG_NOT_PROCESSED: return "not_processed";
    }
    return "unknown";
}

si_status si_error(si_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return code;
}

si_status si_error_prefix(si_status code, const char *fmt, ...) {
    char prefix[1024], old[sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errbuf, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof errbuf) n = sizeof errbuf - 1;
    memcpy(errbuf, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof errbuf - 1 - n) m = sizeof errbuf - 1 - n;
    memcpy(errbuf + n, old, m);
    errbuf[n + m] = 0;
    return code;
}

const char *si_error_msg(void) {
    return errbuf[0] ? errbuf : "(no message)";
}

void si_error_clear(void) {
    errbuf[0] = 0;
}

void si_log_set_rank(int rank, int nranks) {
    log_rank = rank;
    log_nranks = nranks;
    if (gethostname(log_host, sizeof log_host) != 0) snprintf(log_host, sizeof log_host, "?");
    log_host[sizeof log_host - 1] = 0;
}

void si_log_set_level(si_log_level level) {
    log_level = level;
}

si_log_level si_log_get_level(void) {
    return log_level;
}

static void log_prefix(char *buf, size_t cap, si_log_level level) {
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (log_rank >= 0 && log_nranks > 1)
        snprintf(buf, cap, "shardinfer[%s:%d/%d] %s: ", log_host, log_rank, log_nranks,
                 names[level]);
    else
        snprintf(buf, cap, "shardinfer: %s: ", names[level]);
}

/* Copies src into dst (cap > 0 bytes, always terminated) with every control byte (below 0x20,
 * and 0x7f) written as \n, \t, \r or \xNN, so that whatever a message quotes (an image's id, a
 * file or dataset name, a model's metadata) stays on the message's line and cannot start a line
 * of its own that poses as another message. One exception keeps the messages that list items on
 * lines of their own readable (unsupported operators): a newline followed by two spaces stays,
 * since an indented line cannot pass for a message. Writes whole escapes only; returns the
 * length written. */
static size_t escape_controls(char *dst, size_t cap, const char *src) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char e[4] = {(char)*p};
        size_t k = 1;
        bool control = *p < 0x20 || *p == 0x7f;
        if (control && !(*p == '\n' && p[1] == ' ' && p[2] == ' ')) {
            char named = *p == '\n' ? 'n' : *p == '\t' ? 't' : *p == '\r' ? 'r' : 0;
            e[0] = '\\';
            if (named) {
                e[1] = named;
                k = 2;
            } else {
                e[1] = 'x';
                e[2] = hex[*p >> 4];
                e[3] = hex[*p & 15];
                k = 4;
            }
        }
        if (n + k >= cap) break;
        memcpy(dst + n, e, k);
        n += k;
    }
    dst[n] = 0;
    return n;
}

void si_log(si_log_level level, const char *fmt, ...) {
    if (level > log_level) return;
    char msg[4096], line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_prefix(line, sizeof line, level);
    size_t n = strlen(line);
    n += escape_controls(line + n, sizeof line - n - 1, msg); /* room for the newline */
    line[n] = '\n';
    /* one write per line so that lines of concurrent ranks and threads do not interleave */
    fwrite(line, 1, n + 1, stderr);
    fflush(stderr);
}

void si_set_abort_hook(void (*hook)(int code)) {
    abort_hook = hook;
}

void si_fatal(const char *file, int line, const char *expr, const char *fmt, ...) {
    char raw[1024] = "", msg[1024];
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
    }
    escape_controls(msg, sizeof msg, raw);
    fprintf(stderr, "shardinfer[%s:%d] FATAL at %s:%d: %s%s%s\n", log_host[0] ? log_host : "-",
            log_rank, file, line, expr ? expr : "", expr && msg[0] ? ": " : "", msg);
    fflush(stderr);
    if (abort_hook) abort_hook(3);
    abort();
}

void *si_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) si_fatal(__FILE__, __LINE__, "malloc", "%zu bytes", n);
    return p;
}

void *si_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) si_fatal(__FILE__, __LINE__, "calloc", "%zu x %zu bytes", n, size);
    return p;
}

void *si_pages_alloc(size_t n) {
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* advice: where THP is off, small pages serve the same */
#endif
    /* the first write of each page faults it in, zeroed by the kernel: spread over the team */
    const long page = 4096;
    uint8_t *b = p;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)((n + page - 1) / page); i++) b[i * page] = 0;
    return p;
}

void si_pages_free(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

void *si_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) si_fatal(__FILE__, __LINE__, "realloc", "%zu bytes", n);
    return q;
}

char *si_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = si_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

si_status si_bytes_reserve(si_bytes *b, size_t n) {
    if (n <= b->cap) return SI_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return si_error(SI_ERR_NOMEM, "cannot allocate a buffer of %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return SI_OK;
}

void si_bytes_free(si_bytes *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

double si_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double si_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

si_status si_sha256_file(const char *path, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        fclose(f);
        EVP_MD_CTX_free(ctx);
        return si_error(SI_ERR_INTERNAL, "sha256: cannot initialise digest");
    }
    static _Thread_local unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, n);
    int err = ferror(f);
    fclose(f);
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (err) return si_error(SI_ERR_IO, "%s: read error while hashing", path);
    for (unsigned i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    return SI_OK;
}
