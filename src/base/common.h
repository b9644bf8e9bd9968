/* Shared conventions of shardinfer: status codes, the per-thread error buffer, rank-aware logging
 * and the invariant check. Every module reports expected failures by returning an si_status and
 * recording one message (with file, dataset, image or node as context) with si_error(); the
 * caller decides whether to print it. Broken invariants abort through SI_ASSERT. */
#ifndef SI_COMMON_H
#define SI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SI_VERSION "0.1.0"

typedef enum {
    SI_OK = 0,
    SI_ERR_ARG,         /* bad command line or option value */
    SI_ERR_IO,          /* missing/unreadable file, failed read or write */
    SI_ERR_FORMAT,      /* file exists but is not what it should be (HDF5, ONNX, .pb, ...) */
    SI_ERR_UNSUPPORTED, /* valid input the engine cannot run (unknown op, dtype, layout) */
    SI_ERR_NOMEM,       /* allocation failed or a declared size is beyond a cap */
    SI_ERR_VERIFY,      /* a consistency check of results failed */
    SI_ERR_LIMIT,       /* more images failed than --max-errors allows */
    SI_ERR_INTERRUPTED, /* a signal stopped the run before every image was done */
    SI_ERR_INTERNAL,    /* library call failed unexpectedly */
    SI_ERR_FAULT        /* a fault of the storage or the machine (an input file changed while
                           read, memory exhausted): never an image's status; the run stops */
} si_status;

/* Per-image outcome, stored in the output's /status. Values are part of the file format. */
typedef enum {
    SI_IMG_OK = 0,
    SI_IMG_EMPTY = 1,          /* zero-length record */
    SI_IMG_NOT_JPEG = 2,       /* no JPEG SOI marker / header unreadable */
    SI_IMG_TRUNCATED = 3,      /* stream ends before the image data does */
    SI_IMG_CORRUPT = 4,        /* decoder error or corrupt-data warning inside the stream */
    SI_IMG_TOO_LARGE = 5,      /* declared pixel count over the cap */
    SI_IMG_UNSUPPORTED = 6,    /* valid JPEG in a form not handled (e.g. unknown colorspace) */
    SI_IMG_READ_ERROR = 7,     /* bytes could not be read from the input file */
    SI_IMG_POST_ERROR = 8,     /* the postprocessor could not use the model's output (e.g. NaN) */
    SI_IMG_NOT_PROCESSED = 255 /* never reached a rank: only seen if a run is broken */
} si_image_status;

const char *si_image_status_name(int status);
const char *si_status_name(si_status s);

/* Records a message in the calling thread's error buffer and returns `code`, so that
 * `return si_error(SI_ERR_IO, "%s: cannot open", path);` reads naturally. */
si_status si_error(si_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context ("model.onnx: ") to the current message; returns `code`. */
si_status si_error_prefix(si_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The calling thread's last message; borrowed, valid until the next si_error on this thread. */
const char *si_error_msg(void);
void si_error_clear(void);

/* Logging. The prefix carries host and rank once si_log_set_rank has been called (by mpi/). */
typedef enum { SI_LOG_ERROR = 0, SI_LOG_WARN = 1, SI_LOG_INFO = 2, SI_LOG_DEBUG = 3 } si_log_level;
void si_log_set_rank(int rank, int nranks);
void si_log_set_level(si_log_level level);
si_log_level si_log_get_level(void);
void si_log(si_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define si_log_error(...) si_log(SI_LOG_ERROR, __VA_ARGS__)
#define si_log_warn(...)  si_log(SI_LOG_WARN, __VA_ARGS__)
#define si_log_info(...)  si_log(SI_LOG_INFO, __VA_ARGS__)
#define si_log_debug(...) si_log(SI_LOG_DEBUG, __VA_ARGS__)

/* Broken invariants only (never user input): prints file, line, rank, expression; aborts. In a
 * multi-rank run the abort hook (set by mpi/) turns this into MPI_Abort so no rank hangs. */
void si_fatal(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));
void si_set_abort_hook(void (*hook)(int code));
#define SI_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) si_fatal(__FILE__, __LINE__, #cond, NULL);                                    \
    } while (0)

/* Allocation that treats failure as fatal: for sizes the program itself planned. Sizes derived
 * from input (model dims, image headers) must be checked against a cap and use plain malloc. */
void *si_xmalloc(size_t n);
void *si_xcalloc(size_t n, size_t size);
void *si_xrealloc(void *p, size_t n);
char *si_xstrdup(const char *s);

/* Zeroed memory of its own mapping, in transparent huge pages where the kernel gives them, its
 * pages faulted in by the OpenMP team: for a large block about to be page-locked (a block made
 * so, then registered with CUDA, took 0.12 s where cudaHostAlloc took 0.24 s for 545 MiB, H200).
 * NULL (errno set) when the mapping fails. Free with si_pages_free and the same size. */
void *si_pages_alloc(size_t n);
void si_pages_free(void *p, size_t n);

/* A growable byte buffer; grows geometrically and never shrinks, so a steady state reuses it. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} si_bytes;
/* Ensures cap >= n; returns SI_ERR_NOMEM (message set) if n is beyond the buffer's limit. */
si_status si_bytes_reserve(si_bytes *b, size_t n);
void si_bytes_free(si_bytes *b);

double si_now(void); /* monotonic seconds */
double si_thread_cpu(void); /* the calling thread's CPU seconds */

/* Fault tests' hook: with SI_TEST_KILL_AT=NAME in the environment, the process kills itself
 * (SIGKILL: nothing is cleaned up, as with the OOM killer or a node failure) on reaching the
 * point NAME; with SI_TEST_KILL_AT unset, nothing. Points: docs/architecture.md. */
void si_test_point(const char *name);

/* Lowercase hex sha256 of a file into out[65]. */
si_status si_sha256_file(const char *path, char out[65]);

#ifdef __cplusplus
}
#endif

#endif
