/* A twenty-line test helper: CHECK records a failure with file and line and carries on;
 * test_finish prints "N passed, N failed" and returns the exit code. Exit 77 means skipped. */
#ifndef SI_TEST_UTIL_H
#define SI_TEST_UTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int test_pass, test_fail;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond)                                                                                  \
            test_pass++;                                                                           \
        else {                                                                                     \
            test_fail++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)
#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond)                                                                                  \
            test_pass++;                                                                           \
        else {                                                                                     \
            test_fail++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)
#define TEST_SKIP_CODE 77
/* A GPU test's first line: skipped (77) where no CUDA device is visible (devices: the count,
 * si_cuda_device_count()). */
#define TEST_SKIP_WITHOUT_GPU(devices)                                                             \
    do {                                                                                           \
        if ((devices) == 0) {                                                                      \
            printf("no CUDA device: skipped\n");                                                   \
            return TEST_SKIP_CODE;                                                                 \
        }                                                                                          \
    } while (0)
static inline int test_finish(void) {
    printf("%d passed, %d failed\n", test_pass, test_fail);
    return test_fail ? 1 : 0;
}
/* What run(arg) writes to file descriptor fd (1: stdout, 2: stderr), read back into out
 * (NUL-terminated, at most cap - 1 bytes); its length. */
static inline size_t test_capture(int fd, void (*run)(void *), void *arg, char *out, size_t cap) {
    FILE *tmp = tmpfile(), *std = fd == 1 ? stdout : stderr;
    out[0] = 0;
    if (!tmp) return 0;
    fflush(std);
    int saved = dup(fd);
    dup2(fileno(tmp), fd);
    run(arg);
    fflush(std);
    dup2(saved, fd);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = 0;
    fclose(tmp);
    return n;
}
/* Deterministic xorshift generator for seeded random inputs. */
static inline unsigned test_rand(unsigned *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}
static inline float test_randf(unsigned *s) { /* uniform in [-1, 1) */
    return (float)(test_rand(s) >> 8) / (float)(1u << 23) - 1.0f;
}
/* Reads a whole file (test data made by a reference script); NUL-terminated for text. NULL, with
 * a line naming the file and `hint`, when it cannot be opened. Caller frees. */
static inline unsigned char *test_slurp(const char *path, size_t *len, const char *hint) {
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) {
        fprintf(stderr, "cannot open %s (%s)\n", path, hint);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = (unsigned char *)malloc(n > 0 ? (size_t)n + 1 : 1); /* C++ too */
    *len = fread(b, 1, n > 0 ? (size_t)n : 0, f);
    b[*len] = 0;
    fclose(f);
    return b;
}
#endif
