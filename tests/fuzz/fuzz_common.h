/* What the file-format fuzz targets (fuzz_input.c, fuzz_journal.c, fuzz_result.c,
 * fuzz_packlist.c) share: a recipe reader in the manner of LLVM's FuzzedDataProvider (the input's
 * bytes, consumed from the front, pick every choice; an exhausted input reads as zeros, so choice
 * 0 is always the plain, valid case and an empty input makes a valid file), a private temporary
 * directory per process, and the check that an input leaves no HDF5 handle open behind it
 * (libFuzzer runs millions of inputs in one process: a leaked handle per input is a leaked file
 * descriptor and memory per input in the program too). Header-only: each target is one
 * translation unit compiled by scripts/fuzz.sh. */
#ifndef SI_FUZZ_COMMON_H
#define SI_FUZZ_COMMON_H

#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- the recipe ------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_recipe;

/* The next nbytes (at most 8) as a big-endian integer; zeros past the end. */
static inline uint64_t fz_bits(fz_recipe *r, int nbytes) {
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++) {
        v <<= 8;
        if (r->n) v |= *r->p++, r->n--;
    }
    return v;
}

/* A value in [lo, hi], consuming as few bytes as the range needs. */
static inline uint64_t fz_range(fz_recipe *r, uint64_t lo, uint64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = hi - lo;
    int nb = 0;
    for (uint64_t s = span; s; s >>= 8) nb++;
    uint64_t v = fz_bits(r, nb);
    return lo + (span == UINT64_MAX ? v : v % (span + 1));
}

/* One of n choices, 0 being the default. */
static inline int fz_pick(fz_recipe *r, int n) {
    return (int)fz_range(r, 0, (uint64_t)n - 1);
}

static inline bool fz_bool(fz_recipe *r) {
    return fz_bits(r, 1) & 1;
}

/* A run of up to max bytes taken from the recipe (borrowed: *out points into it). */
static inline size_t fz_blob(fz_recipe *r, size_t max, const uint8_t **out) {
    size_t len = (size_t)fz_range(r, 0, max);
    if (len > r->n) len = r->n;
    *out = r->p;
    r->p += len;
    r->n -= len;
    return len;
}

/* A 64-bit value that is often an edge: 0, 1, -1, a power of two and its neighbours, or any. */
static inline uint64_t fz_edge_u64(fz_recipe *r) {
    switch (fz_pick(r, 6)) {
    case 0: return fz_bits(r, 1);
    case 1: return UINT64_MAX - fz_bits(r, 1);
    case 2: return (uint64_t)1 << fz_range(r, 0, 63);
    case 3: return ((uint64_t)1 << fz_range(r, 0, 63)) - 1;
    case 4: return ((uint64_t)1 << fz_range(r, 0, 63)) + 1;
    default: return fz_bits(r, 8);
    }
}

/* --- temporary files -------------------------------------------------------------------------- */

static char fz_dir[4096];

static int fz_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag;
    if (ftw->level > 0) remove(path);
    return 0;
}

/* Empties dir (recursively, following no symbolic link), keeping dir itself. With
 * SI_FUZZ_KEEP set in the environment (replaying one input), the files stay for inspection. */
static inline void fz_clean(const char *dir) {
    static int keep = -1;
    if (keep < 0) keep = getenv("SI_FUZZ_KEEP") != NULL;
    if (keep) {
        fprintf(stderr, "==fuzz== SI_FUZZ_KEEP: this input's files are in %s\n", dir);
        return;
    }
    nftw(dir, fz_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void fz_remove_dir(void) {
    if (!fz_dir[0] || getenv("SI_FUZZ_KEEP")) return;
    fz_clean(fz_dir);
    rmdir(fz_dir);
}

/* This process's own directory, $TMPDIR/si-fuzz-NAME-XXXXXX (TMPDIR unset: /dev/shm, so that
 * the files of millions of inputs never touch a disk), made on the first call and removed at a
 * normal exit; a crash leaves it for the reproducer's inspection (scripts/fuzz.sh points TMPDIR
 * into build-fuzz/ and empties it). */
static inline const char *fz_tmpdir(const char *name) {
    if (fz_dir[0]) return fz_dir;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz_dir, sizeof fz_dir, "%s/si-fuzz-%s-XXXXXX", base, name);
    if (!mkdtemp(fz_dir)) {
        perror(fz_dir);
        abort();
    }
    atexit(fz_remove_dir);
    return fz_dir;
}

/* "DIR/name" in a static buffer of its own per slot (slot < 16), for the few paths an input
 * uses at a time. */
static inline const char *fz_path(int slot, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline const char *fz_path(int slot, const char *fmt, ...) {
    static char bufs[16][4096 + 256];
    char *b = bufs[slot & 15];
    int n = snprintf(b, sizeof bufs[0], "%s/", fz_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, sizeof bufs[0] - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

static inline void fz_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* Writes a new file at path unless something is there already (a FIFO made by the same
 * input, which an fopen would wait on forever, or a directory); no symbolic link followed. */
static inline void fz_write_new(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd < 0) return;
    if (n && write(fd, p, n) != (ssize_t)n) abort();
    close(fd);
}

/* --- HDF5 handles ----------------------------------------------------------------------------- */

/* The open identifiers of each kind an input may leave behind. */
static const H5I_type_t fz_h5_kinds[] = {H5I_FILE,      H5I_GROUP,   H5I_DATATYPE,
                                         H5I_DATASPACE, H5I_DATASET, H5I_ATTR};
static const char *const fz_h5_kind_names[] = {"file",      "group",   "datatype",
                                               "dataspace", "dataset", "attribute"};
#define FZ_H5_KINDS 6

typedef struct {
    hsize_t n[FZ_H5_KINDS];
} fz_h5_counts;

static inline void fz_h5_count(fz_h5_counts *c) {
    for (int k = 0; k < FZ_H5_KINDS; k++) {
        c->n[k] = 0;
        H5Inmembers(fz_h5_kinds[k], &c->n[k]);
    }
}

/* Aborts (a finding: libFuzzer keeps the input) when an input left identifiers open that were
 * not open before it. */
static inline void fz_h5_check(const fz_h5_counts *before, const char *what) {
    fz_h5_counts now;
    fz_h5_count(&now);
    bool leak = false;
    for (int k = 0; k < FZ_H5_KINDS; k++) leak |= now.n[k] > before->n[k];
    if (!leak) return;
    fprintf(stderr, "==fuzz== HDF5 handle leak in %s: this input left open", what);
    for (int k = 0; k < FZ_H5_KINDS; k++)
        if (now.n[k] > before->n[k])
            fprintf(stderr, " %llu %s(s)", (unsigned long long)(now.n[k] - before->n[k]),
                    fz_h5_kind_names[k]);
    fprintf(stderr, "\n");
    abort();
}

/* Once per process: HDF5 prints no error stack (every failure is expected here). */
static inline void fz_h5_quiet(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* HDF5 keeps some of what it allocates on first use for the life of the process (the type
 * conversion paths it finds, its free lists), which libFuzzer would call the leak of the input
 * that came first: a few short inputs run before it watches for leaks. A leak of every input
 * still shows on the next. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static const uint8_t warm[] = {0, 1, 2, 3, 7, 0xff, 0x80, 0x11};
    for (size_t n = 0; n <= sizeof warm; n++) LLVMFuzzerTestOneInput(warm, n);
    return 0;
}

#endif
