/* io/npy: every dtype at ranks 0..4 written and read back bit-exactly, headers as NumPy writes
 * them (versions 1.0, 2.0, 3.0, Python 2 longs, trailing commas, Fortran order where it equals C
 * order), and hostile files, each of which must fail with SI_ERR_FORMAT (or UNSUPPORTED for
 * valid files the reader refuses) and a message naming the file. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "engine/onnx.h"
#include "io/npy.h"
#include "tests/test_util.h"

static char dir[] = "/tmp/si_test_npy_XXXXXX";
static char path[512];

static void write_raw(const char *p, const void *bytes, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    if (n) fwrite(bytes, 1, n, f);
    fclose(f);
}

/* A file with the given version and header text, then `data_bytes` bytes of seeded data. */
static void write_npy(const char *p, int major, const char *hdr, size_t data_bytes) {
    size_t hl = strlen(hdr), lb = major == 1 ? 2 : 4, n = 8 + lb + hl + data_bytes;
    uint8_t *b = malloc(n ? n : 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    for (size_t i = 0; i < lb; i++) b[8 + i] = (uint8_t)(hl >> (8 * i));
    memcpy(b + 8 + lb, hdr, hl);
    unsigned seed = 7;
    for (size_t i = 0; i < data_bytes; i++) b[8 + lb + hl + i] = (uint8_t)test_rand(&seed);
    write_raw(p, b, n);
    free(b);
}

static void round_trips(void) {
    static const int types[] = {SI_DT_FLOAT, SI_DT_DOUBLE, SI_DT_FLOAT16, SI_DT_INT64,
                                SI_DT_INT32, SI_DT_UINT8,  SI_DT_INT8,    SI_DT_BOOL};
    unsigned seed = 12345;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        for (int rank = 0; rank <= 4; rank++) {
            si_npy_array t = {.dtype = types[ti], .ndim = rank, .numel = 1};
            for (int d = 0; d < rank; d++) {
                t.dims[d] = 1 + (int64_t)(test_rand(&seed) % 4);
                t.numel *= t.dims[d];
            }
            size_t bytes = (size_t)t.numel * si_dtype_size(t.dtype);
            uint8_t *data = malloc(bytes);
            for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)test_rand(&seed);
            if (t.dtype == SI_DT_BOOL)
                for (size_t i = 0; i < bytes; i++) data[i] &= 1;
            t.data = data;
            snprintf(path, sizeof path, "%s/rt_%zu_%d.npy", dir, ti, rank);
            CHECK_MSG(si_npy_write(path, &t) == SI_OK, "%s", si_error_msg());
            si_npy_array r;
            si_status st = si_npy_read(path, &r);
            CHECK_MSG(st == SI_OK, "%s", si_error_msg());
            if (st == SI_OK) {
                CHECK(r.dtype == t.dtype && r.ndim == rank && r.numel == t.numel);
                CHECK(!memcmp(r.dims, t.dims, sizeof(int64_t) * (size_t)rank));
                CHECK(!memcmp(r.data, data, bytes));
            }
            si_npy_free(&r);
            /* data starts 64-byte aligned, as NumPy writes it */
            FILE *f = fopen(path, "rb");
            fseek(f, 0, SEEK_END);
            CHECK((ftell(f) - (long)bytes) % 64 == 0);
            fclose(f);
            free(data);
        }
    }
    /* an empty tensor: shape (0, 3) has no data bytes */
    int64_t dims[2] = {0, 3};
    snprintf(path, sizeof path, "%s/empty.npy", dir);
    CHECK(si_npy_write_data(path, SI_DT_FLOAT, 2, dims, NULL) == SI_OK);
    si_npy_array r;
    CHECK(si_npy_read(path, &r) == SI_OK && r.numel == 0 && r.ndim == 2 && r.dims[1] == 3);
    si_npy_free(&r);
    /* unsupported dtype and rank are refused on writing */
    CHECK(si_npy_write_data(path, SI_DT_STRING, 1, dims + 1, "abc") == SI_ERR_UNSUPPORTED);
    CHECK(si_npy_write_data(path, SI_DT_FLOAT, 9, dims, NULL) == SI_ERR_ARG);
    CHECK(si_npy_write_data("/nonexistent_dir/x.npy", SI_DT_FLOAT, 0, NULL, (float[]){1}) ==
          SI_ERR_IO);
}

/* Headers written the ways NumPy (old and new) writes them, read correctly. */
static void accepted_headers(void) {
    static const struct {
        int major;
        const char *hdr;
        int ndim;
        int64_t d0;
        int dtype;
    } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }     \n", 2, 2,
         SI_DT_FLOAT},
        {2, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }\n", 1, 5, SI_DT_INT64},
        {3, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }\n", 0, 0, SI_DT_UINT8},
        {1, "{\"shape\": (3L, 2L), \"descr\": \"<f8\", \"fortran_order\": False}\n", 2, 3,
         SI_DT_DOUBLE},
        {1, "{'descr': '<u1', 'fortran_order': False, 'shape': (4,)}", 1, 4, SI_DT_UINT8},
        /* Fortran order of a vector is the same bytes as C order */
        {1, "{'descr': '<f2', 'fortran_order': True, 'shape': (1, 6, 1), }\n", 3, 1, SI_DT_FLOAT16},
    };
    static const int64_t numel[] = {6, 5, 1, 6, 4, 6};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/ok_%zu.npy", dir, i);
        write_npy(path, cases[i].major, cases[i].hdr,
                  (size_t)numel[i] * si_dtype_size(cases[i].dtype));
        si_npy_array t;
        si_status st = si_npy_read(path, &t);
        CHECK_MSG(st == SI_OK, "case %zu: %s", i, si_error_msg());
        CHECK_MSG(t.ndim == cases[i].ndim && t.dtype == cases[i].dtype && t.numel == numel[i] &&
                      (t.ndim == 0 || t.dims[0] == cases[i].d0),
                  "case %zu", i);
        si_npy_free(&t);
    }
}

static void expect_fail(const char *name, si_status want) {
    si_npy_array t;
    memset(&t, 0x5a, sizeof t); /* poisoned: a failed read must leave it zeroed */
    si_status st = si_npy_read(path, &t);
    CHECK_MSG(st == want, "%s: got %s (%s), want %s", name, si_status_name(st), si_error_msg(),
              si_status_name(want));
    CHECK_MSG(strstr(si_error_msg(), path) != NULL, "%s: message '%s' does not name the file", name,
              si_error_msg());
    CHECK_MSG(t.data == NULL && t.ndim == 0, "%s: tensor not cleared", name);
}

static void hostile_files(void) {
    static const struct {
        const char *name;
        int major;
        const char *hdr;
        long data; /* data bytes after the header */
        si_status want;
    } cases[] = {
        {"count > data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20,
         SI_ERR_FORMAT},
        {"count < data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28,
         SI_ERR_FORMAT},
        {"absurd dims", 1,
         "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 8,
         SI_ERR_FORMAT},
        {"dim overflow", 1,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8,
         SI_ERR_FORMAT},
        {"absurd with zero", 1,
         "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 9223372036854775807, 2), }", 0,
         SI_ERR_FORMAT},
        {"negative dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2), }", 8,
         SI_ERR_FORMAT},
        {"no shape", 1, "{'descr': '<f4', 'fortran_order': False, }", 4, SI_ERR_FORMAT},
        {"unknown key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4,
         SI_ERR_FORMAT},
        {"repeated key", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, }", 4,
         SI_ERR_FORMAT},
        {"unterminated", 1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", 4,
         SI_ERR_FORMAT},
        {"not a dict", 1, "['descr', '<f4']", 4, SI_ERR_FORMAT},
        {"trailing text", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4,
         SI_ERR_FORMAT},
        {"bad bool", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", 4, SI_ERR_FORMAT},
        {"empty header", 1, "", 4, SI_ERR_FORMAT},
        {"structured", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4,
         SI_ERR_FORMAT},
        {"fortran", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
         SI_ERR_UNSUPPORTED},
        {"big-endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4,
         SI_ERR_UNSUPPORTED},
        {"object", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8,
         SI_ERR_UNSUPPORTED},
        {"rank 9", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 1,
         SI_ERR_UNSUPPORTED},
        {"version 4", 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4,
         SI_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/bad_%zu.npy", dir, i);
        write_npy(path, cases[i].major, cases[i].hdr, (size_t)cases[i].data);
        expect_fail(cases[i].name, cases[i].want);
    }

    /* header length past the end (v1 and v2: the v2 length would be a 4 GiB allocation) */
    snprintf(path, sizeof path, "%s/hlen1.npy", dir);
    write_raw(path, "\x93NUMPY\x01\x00\xff\xff{'descr'", 18);
    expect_fail("header length past end v1", SI_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/hlen2.npy", dir);
    write_raw(path, "\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr'", 20);
    expect_fail("header length past end v2", SI_ERR_FORMAT);
    /* truncated in the magic, in the length, and right after the prefix */
    snprintf(path, sizeof path, "%s/trunc_magic.npy", dir);
    write_raw(path, "\x93NUM", 4);
    expect_fail("truncated magic", SI_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/trunc_len.npy", dir);
    write_raw(path, "\x93NUMPY\x02\x00\x10", 9);
    expect_fail("truncated length", SI_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/trunc_hdr.npy", dir);
    write_raw(path, "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4'", 25);
    expect_fail("truncated header", SI_ERR_FORMAT);
    /* the whole of a valid file cut at every length must fail cleanly */
    snprintf(path, sizeof path, "%s/whole.npy", dir);
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3};
    CHECK(si_npy_write_data(path, SI_DT_FLOAT, 2, dims, v) == SI_OK);
    FILE *f = fopen(path, "rb");
    uint8_t buf[256];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int cut_ok = 0;
    for (size_t len = 0; len < n; len++) {
        snprintf(path, sizeof path, "%s/cut.npy", dir);
        write_raw(path, buf, len);
        si_npy_array t;
        si_status st = si_npy_read(path, &t);
        cut_ok += st == SI_ERR_FORMAT && strstr(si_error_msg(), path) != NULL;
        si_npy_free(&t);
    }
    CHECK_MSG(cut_ok == (int)n, "%d of %zu truncations reported as format errors", cut_ok, n);
    /* bad magic, a text file, a missing file, a directory */
    snprintf(path, sizeof path, "%s/magic.npy", dir);
    write_raw(path, "\x93NUMPX\x01\x00\x00\x00", 10);
    expect_fail("bad magic", SI_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/text.npy", dir);
    write_raw(path, "x,y\n1,2\n", 8);
    expect_fail("text file", SI_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/missing.npy", dir);
    expect_fail("missing file", SI_ERR_IO);
    snprintf(path, sizeof path, "%s", dir);
    expect_fail("directory", SI_ERR_IO);
}

/* Seeded mutations of a valid file's header bytes: every outcome must be a clean status (run
 * under the sanitizers, this is the reader's fuzz test), and an accepted file must be consistent.
 */
static void mutations(void) {
    float v[24];
    unsigned seed = 99;
    for (int i = 0; i < 24; i++) v[i] = test_randf(&seed);
    int64_t dims[3] = {2, 3, 4};
    snprintf(path, sizeof path, "%s/orig.npy", dir);
    CHECK(si_npy_write_data(path, SI_DT_FLOAT, 3, dims, v) == SI_OK);
    FILE *f = fopen(path, "rb");
    uint8_t orig[256], buf[256];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/mut.npy", dir);
    static const char alphabet[] = "0123456789(),:{}' L-\n\"";
    int clean = 0, runs = 3000;
    for (int it = 0; it < runs; it++) {
        memcpy(buf, orig, n);
        int flips = 1 + (int)(test_rand(&seed) % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = test_rand(&seed) % 64; /* prefix and the start of the dict */
            if (test_rand(&seed) % 2)
                buf[at] = (uint8_t)test_rand(&seed);
            else /* swap in characters the parser cares about */
                buf[at] = (uint8_t)alphabet[test_rand(&seed) % (sizeof alphabet - 1)];
        }
        size_t len = test_rand(&seed) % 8 ? n : test_rand(&seed) % n;
        write_raw(path, buf, len);
        si_npy_array t;
        si_status st = si_npy_read(path, &t);
        if (st == SI_OK)
            clean += t.numel >= 0 && t.ndim <= SI_MAX_DIMS &&
                     (size_t)t.numel * si_dtype_size(t.dtype) <= len;
        else
            clean += st == SI_ERR_FORMAT || st == SI_ERR_UNSUPPORTED;
        si_npy_free(&t);
    }
    CHECK_MSG(clean == runs, "%d of %d mutated files handled cleanly", clean, runs);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    round_trips();
    accepted_headers();
    hostile_files();
    mutations();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish();
}
