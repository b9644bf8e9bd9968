/* Pack, image set and result file: round trips against the source files, hostile HDF5 inputs,
 * and h5py's view of what we write (io_ref.py check-pack / check-result).
 * Usage: test_io WORKDIR PYTHON IO_REF_PY */
#include "io/source.h"
#include "io/pack.h"
#include "io/result.h"
#include "pipeline/chunk.h"
#include "io/h5util.h"
#include "io/source.h"
#include "tests/test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char work[4096];
static const char *python, *io_ref;
static unsigned seed = 20240501;

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
/* Formatted strings live until the end of the test (freed there, so that the leak checker of
 * a sanitizer build only reports the library's leaks). */
static char *pool[1 << 17];
static size_t npool;
static char *fmt(const char *f, ...) {
    char *s;
    va_list ap;
    va_start(ap, f);
    if (vasprintf(&s, f, ap) < 0) abort();
    va_end(ap);
    if (npool == sizeof pool / sizeof pool[0]) abort();
    return pool[npool++] = s;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Writes n random bytes, starting with the JPEG SOI marker when soi; returns the path (owned). */
static char *make_file(const char *rel, size_t n, bool soi) {
    char *path = fmt("%s/%s", work, rel);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s: %s\n", path, strerror(errno));
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        int b = (int)(test_rand(&seed) & 255);
        if (soi && i < 2)
            b = i == 0 ? 0xFF : 0xD8;
        else if (!soi && i == 0 && b == 0xFF)
            b = 0x42;
        fputc(b, f);
    }
    fclose(f);
    return path;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* The list test names the same three files 30000 times: keep the last ones read. */
static const uint8_t *cached(const char *path, size_t *len) {
    static char *paths[4];
    static uint8_t *data[4];
    static size_t lens[4];
    static int next;
    if (!path) { /* end of test: free the cache */
        for (int i = 0; i < 4; i++) {
            free(paths[i]);
            free(data[i]);
            paths[i] = NULL;
            data[i] = NULL;
        }
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (paths[i] && strcmp(paths[i], path) == 0) {
            *len = lens[i];
            return data[i];
        }
    uint8_t *d = slurp(path, len);
    if (!d) return NULL;
    free(paths[next]);
    free(data[next]);
    paths[next] = strdup(path);
    data[next] = d;
    lens[next] = *len;
    next = (next + 1) % 4;
    return d;
}

typedef struct {
    const char *id;
    char *file;
    long long label;
} entry;

/* Writes the listing io_ref.py check-pack reads. */
static char *write_listing(const char *name, const entry *e, int n, bool labels) {
    char *path = fmt("%s/%s", work, name);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\t%s", e[i].id, e[i].file);
        if (labels) fprintf(f, "\t%lld", e[i].label);
        fputc('\n', f);
    }
    fclose(f);
    return path;
}

static void run_py(const char *mode, const char *h5, const char *expected) {
    char *cmd = fmt("'%s' '%s' %s '%s' '%s'", python, io_ref, mode, h5, expected);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
}

/* Reads the whole set back in random batches and compares bytes and ids with the entries. */
static void check_set(const char *h5, const entry *e, int n) {
    si_source *s = NULL;
    si_status st = si_source_open(h5, NULL, &s);
    CHECK_MSG(st == SI_OK, "%s", si_error_msg());
    if (st != SI_OK) return;
    CHECK(si_source_count(s) == (uint64_t)n);
    CHECK(strcmp(si_source_file_path(s, 0), h5) == 0);
    si_bytes buf = {0};
    int bad = 0;
    for (int first = 0; first < n;) {
        uint32_t m = 1 + test_rand(&seed) % 9000;
        if (m > (uint32_t)(n - first)) m = (uint32_t)(n - first);
        uint64_t *off = malloc((m + 1) * sizeof *off);
        char **ids = malloc(m * sizeof *ids);
        st = si_source_read(s, (uint64_t)first, m, &buf, off, NULL);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        st = si_source_read_ids(s, (uint64_t)first, m, ids);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        CHECK(off[0] == 0 && off[m] == buf.len);
        for (uint32_t j = 0; j < m && bad < 5; j++) {
            size_t len;
            const uint8_t *want = cached(e[first + j].file, &len);
            bool ok =
                want && off[j + 1] - off[j] == len && memcmp(buf.data + off[j], want, len) == 0;
            bad += !ok;
            CHECK_MSG(ok, "%s: image %d (%s) differs from %s", h5, first + (int)j, ids[j],
                      e[first + j].file);
            CHECK_MSG(strcmp(ids[j], e[first + j].id) == 0, "id %d: '%s' != '%s'", first + (int)j,
                      ids[j], e[first + j].id);
        }
        si_source_free_ids(ids, m);
        CHECK(ids[0] == NULL);
        free(ids);
        free(off);
        first += (int)m;
    }
    /* a range past the end is an argument error, not a read out of bounds */
    uint64_t off2[3];
    CHECK(si_source_read(s, (uint64_t)n - 1, 2, &buf, off2, NULL) == SI_ERR_ARG);
    char *ids2[2];
    CHECK(si_source_read_ids(s, (uint64_t)n, 1, ids2) == SI_ERR_ARG);
    CHECK(si_source_read(s, (uint64_t)n, 0, &buf, off2, NULL) == SI_OK && buf.len == 0);
    si_bytes_free(&buf);
    si_source_close(s);
}

static entry tree[32];
static int ntree;

static void add(const char *id, size_t size, bool soi) {
    tree[ntree].id = id;
    tree[ntree].file = make_file(fmt("tree/%s", id), size, soi);
    ntree++;
}

static void test_pack_dir(void) {
    const char *dirs[] = {"tree", "tree/a", "tree/a/deep", "tree/dir.jpeg", "tree/empty_dir"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        CHECK(mkdir(fmt("%s/%s", work, dirs[i]), 0755) == 0);
    /* in the walk's order: byte order per directory, so "a" (a directory) before "a.jpg" */
    add("a/deep/z.jpg", 3000 + test_rand(&seed) % 5000, true);
    add("a/x.JPG", 20000 + test_rand(&seed) % 5000, true);
    add("a/y.jpeg", 1 + test_rand(&seed) % 5000, true);
    add("a.jpg", (17u << 20) + 12345, true); /* larger than one 16 MiB block */
    add("b.jpg", 70000 + test_rand(&seed) % 5000, true);
    add("dir.jpeg/inner.jpg", 999, true);
    add("empty.jpg", 0, false);
    add("ff_not_d8.jpg", 300, true);
    FILE *ff = fopen(tree[ntree - 1].file, "r+b"); /* FF then not D8: still not a JPEG */
    fseek(ff, 1, SEEK_SET);
    fputc(0xD9, ff);
    fclose(ff);
    add("not_really.jpg", 5000, false);
    add("\xc3\xbc"
        "n"
        "\xc3\xaf"
        "c"
        "\xc3\xb6"
        "de.jpg",
        4321, true); /* "ünïcöde.jpg" */
    make_file("tree/notes.txt", 100, false);
    make_file("tree/image.png", 100, false);
    make_file("tree/a/b.jpg.bak", 100, true);
    CHECK(symlink("..", fmt("%s/tree/a/deep/loop", work)) == 0); /* skipped, not followed */

    char *out = fmt("%s/dir.h5", work);
    si_pack_opts o = {.source = fmt("%s/tree", work), .output = out, .chunk_bytes = 4096};
    si_pack_stats st;
    memset(&st, 0x5A, sizeof st);
    si_status s = si_pack(&o, &st);
    CHECK_MSG(s == SI_OK, "%s", si_error_msg());
    CHECK_MSG(st.count == (uint64_t)ntree, "count %llu", (unsigned long long)st.count);
    CHECK_MSG(st.not_jpeg == 3, "not_jpeg %llu", (unsigned long long)st.not_jpeg);
    uint64_t bytes = 0;
    for (int i = 0; i < ntree; i++) {
        struct stat sb;
        stat(tree[i].file, &sb);
        bytes += (uint64_t)sb.st_size;
    }
    CHECK(st.bytes == bytes);
    CHECK(!exists(fmt("%s.tmp", out)));
    check_set(out, tree, ntree);
    run_py("check-pack", out, write_listing("dir.tsv", tree, ntree, false));

    /* an existing output is refused and left alone; overwrite replaces it */
    o.chunk_bytes = 0;
    s = si_pack(&o, &st);
    CHECK(s != SI_OK && strstr(si_error_msg(), out) && strstr(si_error_msg(), "exists"));
    check_set(out, tree, ntree);
    o.overwrite = true;
    s = si_pack(&o, &st);
    CHECK_MSG(s == SI_OK, "%s", si_error_msg());
    check_set(out, tree, ntree);

    /* a .jpg that cannot be read fails the pack, names the file and leaves no output */
    CHECK(symlink("nowhere.jpg", fmt("%s/tree/a/dangling.jpg", work)) == 0);
    o.output = fmt("%s/dangling.h5", work);
    s = si_pack(&o, &st);
    CHECK_MSG(s == SI_ERR_IO && strstr(si_error_msg(), "dangling.jpg"), "%s", si_error_msg());
    CHECK(!exists(o.output) && !exists(fmt("%s.tmp", o.output)));
    unlink(fmt("%s/tree/a/dangling.jpg", work));

    /* a file name that is not UTF-8 cannot be an id that h5py reads: refused, named */
    CHECK(mkdir(fmt("%s/badname", work), 0755) == 0);
    make_file("badname/caf\xe9.jpg", 10, true); /* Latin-1 */
    o.source = fmt("%s/badname", work);
    o.output = fmt("%s/badname.h5", work);
    s = si_pack(&o, &st);
    CHECK_MSG(s == SI_ERR_ARG && strstr(si_error_msg(), "not valid UTF-8") &&
                  strstr(si_error_msg(), "badname/caf"),
              "%s", si_error_msg());
    CHECK(!exists(o.output) && !exists(fmt("%s.tmp", o.output)));

    /* a directory without JPEGs is an error, not an empty set */
    o.source = fmt("%s/tree/empty_dir", work);
    o.output = fmt("%s/none.h5", work);
    s = si_pack(&o, &st);
    CHECK_MSG(s == SI_ERR_ARG && strstr(si_error_msg(), "no images"), "%s", si_error_msg());
    CHECK(!exists(o.output) && !exists(fmt("%s.tmp", o.output)));
}

static void test_pack_list(void) {
    /* more lines than one 16384-record block, over three files, with ids and labels; comments,
     * blank and CRLF lines are skipped, relative paths resolve against the list's directory */
    int n = 16384 * 2 + 77;
    entry *e = calloc((size_t)n, sizeof *e);
    const char *files[3] = {"small/s0.jpg", "small/s1.jpg", "tree/empty.jpg"};
    CHECK(mkdir(fmt("%s/small", work), 0755) == 0);
    make_file(files[0], 1 + test_rand(&seed) % 3000, true);
    make_file(files[1], 1 + test_rand(&seed) % 3000, false);
    char *list = fmt("%s/list.txt", work);
    FILE *f = fopen(list, "w");
    fprintf(f, "# path\tid\tlabel\n\n");
    for (int i = 0; i < n; i++) {
        int k = (int)(test_rand(&seed) % 3);
        e[i].id = fmt("id_%05d_%u", i, test_rand(&seed) % 1000);
        e[i].file = fmt("%s/%s", work, files[k]);
        e[i].label = (long long)(test_rand(&seed) % 2000) - 1000;
        if (i % 1000 == 7) e[i].label = INT64_MIN + i; /* the full range survives */
        fprintf(f, "%s\t%s\t%lld%s\n", files[k], e[i].id, e[i].label, i % 5 ? "" : "\r");
        if (i == 100) fprintf(f, "   \n");
    }
    fclose(f);
    char *out = fmt("%s/list.h5", work);
    si_pack_opts o = {.source = list, .output = out};
    si_pack_stats st;
    si_status s = si_pack(&o, &st);
    CHECK_MSG(s == SI_OK, "%s", si_error_msg());
    CHECK(st.count == (uint64_t)n);
    check_set(out, e, n);
    run_py("check-pack", out, write_listing("list.tsv", e, n, true));

    /* paths only: the id is the path as written; no labels dataset */
    char *list2 = fmt("%s/list2.txt", work);
    f = fopen(list2, "w");
    fprintf(f, "tree/b.jpg\n%s/tree/a/y.jpeg\n", work);
    fclose(f);
    entry e2[2] = {{"tree/b.jpg", fmt("%s/tree/b.jpg", work), 0},
                   {fmt("%s/tree/a/y.jpeg", work), fmt("%s/tree/a/y.jpeg", work), 0}};
    o = (si_pack_opts){.source = list2, .output = fmt("%s/list2.h5", work)};
    s = si_pack(&o, &st);
    CHECK_MSG(s == SI_OK, "%s", si_error_msg());
    check_set(o.output, e2, 2);
    run_py("check-pack", o.output, write_listing("list2.tsv", e2, 2, false));

    /* bad lists: each error names the list and the line, and leaves no file */
    struct {
        const char *text, *want;
    } bad[] = {
        {"tree/b.jpg\tb\t1\ntree/a/x.JPG\tx\n", "list_bad.txt:2"},
        {"tree/b.jpg\tb\ntree/a/x.JPG\tx\t3\n", "list_bad.txt:2"},
        {"# c\ntree/b.jpg\tb\tone\n", "list_bad.txt:2"},
        {"tree/b.jpg\tb\t1\t2\n", "list_bad.txt:1"},
        {"tree/b.jpg\t\t1\n", "list_bad.txt:1"},
        {"tree/b.jpg\n\ntree/missing.jpg\n", "missing.jpg"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *lb = fmt("%s/list_bad.txt", work);
        f = fopen(lb, "w");
        fputs(bad[i].text, f);
        fclose(f);
        o = (si_pack_opts){.source = lb, .output = fmt("%s/bad.h5", work)};
        s = si_pack(&o, &st);
        CHECK_MSG(s != SI_OK && strstr(si_error_msg(), bad[i].want), "case %zu: %s", i,
                  si_error_msg());
        CHECK(!exists(o.output) && !exists(fmt("%s.tmp", o.output)));
    }
    o = (si_pack_opts){.source = fmt("%s/no_such_list.txt", work), .output = out};
    CHECK(si_pack(&o, &st) == SI_ERR_IO && strstr(si_error_msg(), "no_such_list.txt"));
    free(e);
}

/* A hand-made set: ids vlen strings (or fixed-length when fixed_ids), offsets of type otype,
 * data of type dtype; any dataset can be left out. */
static char *make_h5(const char *name, int n, const uint64_t *offsets, int noff, int ndata,
                     hid_t otype, hid_t dtype, bool fixed_ids, bool with_group) {
    char *path = fmt("%s/%s", work, name);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (!with_group) {
        hid_t g = H5Gcreate2(f, "other", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Gclose(g);
        H5Fclose(f);
        return path;
    }
    hid_t g = H5Gcreate2(f, "images", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (n >= 0) {
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, fixed_ids ? 8 : H5T_VARIABLE);
        hsize_t dim = (hsize_t)n;
        hid_t sp = H5Screate_simple(1, &dim, NULL);
        hid_t d = H5Dcreate2(g, "ids", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (!fixed_ids && n > 0) {
            const char **v = malloc((size_t)n * sizeof *v);
            for (int i = 0; i < n; i++) v[i] = "some id";
            H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
            free(v);
        }
        H5Dclose(d);
        H5Sclose(sp);
        H5Tclose(t);
    }
    if (noff >= 0) {
        hsize_t dim = (hsize_t)noff;
        hid_t sp = H5Screate_simple(1, &dim, NULL);
        hid_t d = H5Dcreate2(g, "offsets", otype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (noff > 0) H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets);
        H5Dclose(d);
        H5Sclose(sp);
    }
    if (ndata >= 0) {
        hsize_t dim = (hsize_t)ndata;
        hid_t sp = H5Screate_simple(1, &dim, NULL);
        hid_t d = H5Dcreate2(g, "data", dtype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        uint8_t *b = malloc((size_t)ndata + 1);
        for (int i = 0; i < ndata; i++) b[i] = (uint8_t)test_rand(&seed);
        if (ndata > 0) H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, b);
        free(b);
        H5Dclose(d);
        H5Sclose(sp);
    }
    H5Gclose(g);
    H5Fclose(f);
    return path;
}

static void expect_open(const char *path, si_status want, const char *what) {
    si_source *s = (si_source *)(uintptr_t)1; /* poison: must come back NULL */
    si_status st = si_source_open(path, NULL, &s);
    CHECK_MSG(st == want, "%s: status %s, expected %s (%s)", path, si_status_name(st),
              si_status_name(want), si_error_msg());
    CHECK_MSG(want == SI_OK || s == NULL, "%s: handle not NULL on failure", path);
    if (want == SI_OK) {
        si_source_close(s);
        return;
    }
    CHECK_MSG(strstr(si_error_msg(), path) != NULL, "message does not name the file: %s",
              si_error_msg());
    CHECK_MSG(strstr(si_error_msg(), what) != NULL, "message lacks '%s': %s", what, si_error_msg());
}

static void test_hostile_sets(void) {
    expect_open(fmt("%s/does_not_exist.h5", work), SI_ERR_IO, "no such file");
    char *txt = make_file("text.h5", 0, false);
    FILE *f = fopen(txt, "w");
    fputs("this is not HDF5\n", f);
    fclose(f);
    /* a text file is a list of HDF5 paths: its line is named */
    expect_open(txt, SI_ERR_IO, "line 1");

    uint64_t off[4] = {0, 10, 25, 40};
    hid_t u64 = H5T_STD_U64LE, u8 = H5T_STD_U8LE;
    expect_open(make_h5("nogroup.h5", 3, off, 4, 40, u64, u8, false, false), SI_ERR_FORMAT,
                "no image dataset");
    expect_open(make_h5("nooffsets.h5", 3, off, -1, 40, u64, u8, false, true), SI_ERR_FORMAT,
                "no image dataset");
    /* no ids: the ids are the images' indices */
    expect_open(make_h5("noids.h5", -1, off, 4, 40, u64, u8, false, true), SI_OK, "");
    expect_open(make_h5("nodata.h5", 3, off, 4, -1, u64, u8, false, true), SI_ERR_FORMAT,
                "no dataset /images/data");
    expect_open(make_h5("shortoffsets.h5", 3, off, 3, 40, u64, u8, false, true), SI_ERR_FORMAT,
                "runs from 0 to 25");
    expect_open(make_h5("datasize.h5", 3, off, 4, 39, u64, u8, false, true), SI_ERR_FORMAT,
                "expected 0 to 39");
    expect_open(make_h5("floatoffsets.h5", 3, off, 4, 40, H5T_IEEE_F64LE, u8, false, true),
                SI_ERR_FORMAT, "must be 1-D integers");
    expect_open(make_h5("int32data.h5", 3, off, 4, 40, u64, H5T_STD_I32LE, false, true),
                SI_ERR_FORMAT, "expected 1-D uint8");
    /* fixed-length string ids are read as they are */
    expect_open(make_h5("fixedids.h5", 3, off, 4, 40, u64, u8, true, true), SI_OK, "");
    uint64_t off1[4] = {5, 10, 25, 40};
    expect_open(make_h5("offset0.h5", 3, off1, 4, 40, u64, u8, false, true), SI_ERR_FORMAT,
                "runs from 5 to 40");

    /* non-monotonic offsets pass the open (only ends are checked) and fail the read with the
     * image's index */
    uint64_t off2[6] = {0, 10, 30, 20, 35, 40};
    char *p = make_h5("nonmono.h5", 5, off2, 6, 40, u64, u8, false, true);
    si_source *s = NULL;
    CHECK_MSG(si_source_open(p, NULL, &s) == SI_OK, "%s", si_error_msg());
    if (s) {
        si_bytes buf = {0};
        uint64_t o[6];
        CHECK(si_source_read(s, 0, 2, &buf, o, NULL) == SI_OK && buf.len == 30);
        si_status st = si_source_read(s, 1, 3, &buf, o, NULL);
        CHECK_MSG(st == SI_ERR_FORMAT && strstr(si_error_msg(), "image 2") &&
                      strstr(si_error_msg(), p),
                  "%s", si_error_msg());
        char *ids[5];
        CHECK(si_source_read_ids(s, 0, 5, ids) == SI_OK && strcmp(ids[4], "some id") == 0);
        si_source_free_ids(ids, 5);
        si_bytes_free(&buf);
        si_source_close(s);
    }
    si_source_close(NULL);

    /* a set made by a user with h5py (io_ref.py make-set) reads as written */
    p = fmt("%s/user_h5py.h5", work);
    char *cmd = fmt("'%s' '%s' make-set '%s' 40", python, io_ref, p);
    CHECK(system(cmd) == 0);
    s = NULL;
    CHECK_MSG(si_source_open(p, NULL, &s) == SI_OK, "%s", si_error_msg());
    if (s) {
        si_bytes buf = {0};
        uint64_t o[41];
        char *ids[40];
        CHECK(si_source_count(s) == 40);
        CHECK(si_source_read(s, 0, 40, &buf, o, NULL) == SI_OK);
        CHECK(si_source_read_ids(s, 0, 40, ids) == SI_OK);
        for (int i = 0; i < 40; i++) {
            bool ok = o[i + 1] - o[i] == (uint64_t)(13 * i + 5);
            for (int j = 0; ok && j < 13 * i + 5; j++)
                ok = buf.data[o[i] + (uint64_t)j] == (i * 7 + j) % 251;
            CHECK_MSG(ok, "h5py set: image %d differs", i);
            char want[32];
            snprintf(want, sizeof want, "h5py-\xc3\xa9-%d", i);
            CHECK_MSG(ids[i] && strcmp(ids[i], want) == 0, "h5py set: id %d '%s'", i, ids[i]);
        }
        si_source_free_ids(ids, 40);
        si_bytes_free(&buf);
        si_source_close(s);
    }

    /* an empty set is valid */
    uint64_t zero = 0;
    p = make_h5("emptyset.h5", 0, &zero, 1, 0, u64, u8, false, true);
    s = NULL;
    CHECK_MSG(si_source_open(p, NULL, &s) == SI_OK, "%s", si_error_msg());
    if (s) CHECK(si_source_count(s) == 0);
    si_source_close(s);
}

/* The expected dump of a result (io_ref.py dump_result's format). */
static void write_expected(const char *path, const si_result_meta *m, uint64_t n, int k,
                           uint32_t chunk, char **ids, const int32_t *status, const int32_t *cls,
                           const float *prob, int runs) {
    FILE *f = fopen(path, "w");
    uint64_t failed = 0;
    for (uint64_t i = 0; i < n; i++) failed += status[i] != 0;
    /* sorted by name, as io_ref.py lists them */
    fprintf(f, "attr\tbatch_size\t%d\n", m->batch_size);
    fprintf(f, "attr\tchunk_size\t%u\n", chunk);
    fprintf(f, "attr\tcommand_line\t%s\n", m->command_line);
    fprintf(f, "attr\telapsed_seconds\t%.17g\n", m->elapsed_seconds);
    fprintf(f, "attr\tfailed\t%llu\n", (unsigned long long)failed);
    fprintf(f, "attr\tformat_version\t2\n");
    fprintf(f, "attr\timages\t%llu\n", (unsigned long long)n);
    fprintf(f, "attr\tinput\t%s\n", m->input_path);
    fprintf(f, "attr\tmodel\t%s\n", m->model_path);
    fprintf(f, "attr\tmodel_sha256\t%s\n", m->model_sha256);
    fprintf(f, "attr\tpost\tclassify\n");
    fprintf(f, "attr\tpost_params\t%s\n", m->post_params);
    fprintf(f, "attr\tpreprocess\t%s\n", m->preprocess);
    fprintf(f, "attr\tranks\t%d\n", m->ranks);
    fprintf(f, "attr\tresume_key\t%s\n", m->resume_key);
    fprintf(f, "attr\truns\t%d\n", runs);
    fprintf(f, "attr\tshardinfer_version\t%s\n", SI_VERSION);
    fprintf(f, "shape\t%llu\t%d\n", (unsigned long long)n, k);
    for (uint64_t i = 0; i < n; i++) {
        fprintf(f, "row\t%s\t%llu\t%d\t", ids[i], (unsigned long long)i, status[i]);
        for (int j = 0; j < k; j++) fprintf(f, "%s%d", j ? "," : "", cls[i * (uint64_t)k + j]);
        fputc('\t', f);
        for (int j = 0; j < k; j++)
            fprintf(f, "%s%.9g", j ? "," : "", (double)prob[i * (uint64_t)k + j]);
        fputc('\n', f);
    }
    for (uint64_t i = 0; i < n; i++)
        if (status[i])
            fprintf(f, "error\t%llu\tbad image %llu\n", (unsigned long long)i,
                    (unsigned long long)i);
    fclose(f);
}

/* Puts chunk `id` of the arrays into r. */
static si_status put_chunk(si_result *r, const si_post_plan *p, si_chunk *c, uint64_t id,
                           uint64_t n, uint32_t size, const int32_t *status, const int32_t *cls,
                           const float *prob, const uint8_t *empty) {
    uint32_t len = si_chunk_len(id, n, size);
    si_chunk_reset(c, id, id * size, len, empty);
    for (uint32_t j = 0; j < len; j++) {
        uint64_t i = id * size + j;
        c->status[j] = status[i];
        if (status[i]) snprintf(c->msg[j], SI_MSG_LEN, "bad image %llu", (unsigned long long)i);
        uint8_t *row = c->rows + (size_t)j * p->row_bytes;
        memcpy(row + p->cols[0].offset, cls + i * p->topk, p->cols[0].bytes);
        memcpy(row + p->cols[1].offset, prob + i * p->topk, p->cols[1].bytes);
    }
    size_t tl = si_chunk_tail_size(c);
    uint8_t *tail = malloc(tl);
    si_chunk_tail_pack(c, tail);
    si_status st = si_result_put(r, c->rows, tail, tl);
    free(tail);
    return st;
}

/* test_result's interruption after order[c] of the nc chunks (of `size` images, n in all): a
 * close, a journal record torn at its end, a resume refused for another batch size, then the
 * resume, which must find the chunks put so far done. The resumed writer, or NULL. */
static si_result *interrupt_and_resume(si_result *r, const char *out, const si_result_schema *sc,
                                       uint64_t n, const si_result_meta *m, uint32_t size,
                                       const uint64_t *order, uint64_t c, uint64_t nc) {
    CHECK(si_result_close(r) == SI_OK);
    char *jp = si_result_journal_path(out);
    FILE *jf = fopen(jp, "ab");
    fwrite("CHNK\x01\x02\x03", 1, 7, jf); /* a record cut short by a kill */
    fclose(jf);
    free(jp);
    si_result_meta other = *m;
    other.resume_key = "model=a;batch=8";
    uint32_t got_size = 0;
    uint8_t *done = NULL;
    r = NULL;
    si_status st = si_result_resume(out, sc, n, &other, NULL, &got_size, &done, &r);
    CHECK_MSG(st == SI_ERR_ARG && strstr(si_error_msg(), "batch=7") &&
                  strstr(si_error_msg(), "batch=8"),
              "%s", si_error_msg());
    st = si_result_resume(out, sc, n, m, NULL, &got_size, &done, &r);
    CHECK_MSG(st == SI_OK, "%s", si_error_msg());
    if (!r) return NULL;
    CHECK(got_size == size && si_result_chunks_done(r) == c + 1);
    for (uint64_t q = 0; q < nc; q++) {
        bool want = false;
        for (uint64_t z = 0; z <= c; z++) want |= order[z] == q;
        CHECK_MSG((bool)(done[q / 8] >> (q % 8) & 1) == want, "chunk %llu", (unsigned long long)q);
    }
    free(done);
    return r;
}

/* The result writer over the list set (33k images): chunks put in a shuffled order, a close and
 * resume in the middle with a torn journal record, a chunk put twice, a resume with other
 * settings, and an empty run. */
static void test_result(void) {
    si_source *in = NULL; /* the result writer reads ids through the source layer */
    char *inpath = fmt("%s/list.h5", work);
    CHECK_MSG(si_source_open(inpath, NULL, &in) == SI_OK, "%s", si_error_msg());
    if (!in) return;
    uint64_t count = si_source_count(in);
    char **all = malloc(count * sizeof *all);
    CHECK(si_source_read_ids(in, 0, (uint32_t)count, all) == SI_OK);

    for (int variant = 0; variant < 3; variant++) {
        /* 0: every image, chunks of 1024; 1: chunks of 777 with a resume; 2: no images */
        uint64_t n = variant == 2 ? 0 : count;
        uint32_t size = variant == 1 ? 777 : 1024;
        int k = variant == 1 ? 3 : 5;
        si_post_config cfg = si_post_config_default();
        cfg.topk = k;
        si_shape per = {.ndim = 1, .dims = {1000}};
        const char *names[1] = {"logits"};
        si_post_plan p;
        CHECK_MSG(si_post_plan_make(&cfg, 1, names, &per, &p) == SI_OK, "%s", si_error_msg());
        si_result_schema sc;
        si_post_schema(&p, &sc);
        int32_t *status = malloc((n + 1) * sizeof *status);
        int32_t *cls = malloc((n * k + 1) * sizeof *cls);
        float *prob = malloc((n * k + 1) * sizeof *prob);
        for (uint64_t i = 0; i < n; i++) {
            status[i] = test_rand(&seed) % 4 == 0 ? (int32_t)(1 + test_rand(&seed) % 7) : 0;
            for (int j = 0; j < k; j++) {
                cls[i * k + j] = status[i] ? -1 : (int32_t)(test_rand(&seed) % 1000);
                prob[i * k + j] = status[i] ? 0.0f : 0.5f + 0.5f * test_randf(&seed);
            }
        }
        si_result_meta m = {.model_path = "/models/resnet50.onnx",
                            .model_sha256 =
                                "3f2a9c0d5e6b7a8190aabbccddeeff00112233445566778899aabbccddeeff00",
                            .input_path = inpath,
                            .command_line = "shardinfer run --model m.onnx --input list.h5 -o r.h5",
                            .preprocess = "resize=256 crop=224x224",
                            .post_params = "classify topk=5",
                            .resume_key = variant == 1 ? "model=a;batch=7" : "model=a;batch=64",
                            .ranks = 4 + variant,
                            .batch_size = 64 + variant,
                            .elapsed_seconds = 123.125 + variant,
                            .flush_interval = 1e-3};
        char *out = fmt("%s/result%d.h5", work, variant);
        si_result *r = NULL;
        si_status st = si_result_create(out, &sc, n, size, &m, &r);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        if (!r) continue;
        uint64_t nc = (n + size - 1) / size;
        uint64_t *order = malloc((nc + 1) * sizeof *order);
        for (uint64_t c = 0; c < nc; c++) order[c] = c;
        for (uint64_t c = nc; c > 1; c--) { /* Fisher-Yates */
            uint64_t o = test_rand(&seed) % c, t = order[c - 1];
            order[c - 1] = order[o];
            order[o] = t;
        }
        si_chunk ch;
        si_chunk_init(&ch, size, &p);
        uint8_t *empty = malloc(p.row_bytes);
        si_post_fill_empty(&p, empty);
        int runs = 1;
        for (uint64_t c = 0; c < nc; c++) {
            st = put_chunk(r, &p, &ch, order[c], n, size, status, cls, prob, empty);
            CHECK_MSG(st == SI_OK, "chunk %llu: %s", (unsigned long long)order[c], si_error_msg());
            if (c == 0) { /* the same chunk again would count its images twice */
                st = put_chunk(r, &p, &ch, order[c], n, size, status, cls, prob, empty);
                CHECK_MSG(st == SI_ERR_VERIFY && strstr(si_error_msg(), "twice"), "%s",
                          si_error_msg());
            }
            if (variant == 1 && c == nc / 2) {
                r = interrupt_and_resume(r, out, &sc, n, &m, size, order, c, nc);
                if (!r) break;
                runs = 2;
            }
        }
        si_chunk_free(&ch);
        uint64_t failed = 0;
        st = si_result_finish(r, in, &m, &failed, NULL);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        CHECK(!exists(fmt("%s.partial", out)) && !exists(fmt("%s.journal", out)));
        char *exp = fmt("%s/result%d.expected", work, variant);
        write_expected(exp, &m, n, k, size, all, status, cls, prob, runs);
        run_py("check-result", out, exp);
        /* resuming a finished run finds nothing to resume */
        uint32_t sz;
        uint8_t *dn = NULL;
        r = NULL;
        st = si_result_resume(out, &sc, n, &m, NULL, &sz, &dn, &r);
        CHECK(st == SI_ERR_ARG && !r);
        free(order);
        free(empty);
        free(status);
        free(cls);
        free(prob);
    }
    si_source_free_ids(all, (uint32_t)count);
    free(all);
    si_source_close(in);
}

/* stderr into a file while fn runs (the resume's warnings); the file's text, owned. */
static char *stderr_of(void (*fn)(void *), void *arg) {
    char *path = fmt("%s/stderr.txt", work);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 8192);
    if (f) {
        size_t got = fread(text, 1, 8191, f);
        text[got] = 0;
        fclose(f);
    }
    return text;
}

typedef struct {
    const char *out;
    const si_result_schema *sc;
    uint64_t n;
    const si_result_meta *m;
    si_result *r;
    uint8_t *done;
    si_status st;
} resume_args;

static void do_resume(void *arg) {
    resume_args *a = arg;
    uint32_t size = 0;
    a->st = si_result_resume(a->out, a->sc, a->n, a->m, NULL, &size, &a->done, &a->r);
}

/* A journal record damaged in the middle (a storage fault) is named as such, with its number
 * and offset, not taken for the torn last record of a killed run; the chunks from it on are
 * computed again, the ones before it stand (issue 15, item 9). */
static void test_journal_damage(void) {
    si_post_config cfg = si_post_config_default();
    si_shape per = {.ndim = 1, .dims = {10}};
    const char *names[1] = {"logits"};
    si_post_plan p;
    CHECK(si_post_plan_make(&cfg, 1, names, &per, &p) == SI_OK);
    si_result_schema sc;
    si_post_schema(&p, &sc);
    const uint64_t n = 30;
    const uint32_t size = 10;
    int32_t status[30] = {0}, cls[30 * 5];
    float prob[30 * 5];
    for (int i = 0; i < 30 * 5; i++) cls[i] = i % 10, prob[i] = 0.1f;
    si_result_meta m = {.model_path = "m.onnx",
                        .model_sha256 = "00",
                        .input_path = "in.h5",
                        .command_line = "",
                        .preprocess = "",
                        .post_params = "classify topk=5",
                        .resume_key = "model=a",
                        .ranks = 1,
                        .batch_size = 10};
    char *out = fmt("%s/damaged.h5", work);
    si_result *r = NULL;
    CHECK_MSG(si_result_create(out, &sc, n, size, &m, &r) == SI_OK, "%s", si_error_msg());
    if (!r) return;
    si_chunk ch;
    si_chunk_init(&ch, size, &p);
    uint8_t *empty = malloc(p.row_bytes);
    si_post_fill_empty(&p, empty);
    for (uint64_t c = 0; c < 3; c++)
        CHECK(put_chunk(r, &p, &ch, c, n, size, status, cls, prob, empty) == SI_OK);
    CHECK(si_result_close(r) == SI_OK);
    /* one byte of the second record's body flipped: header, record 0, then record 1 */
    char *jp = si_result_journal_path(out);
    FILE *jf = fopen(jp, "r+b");
    uint64_t len0 = 0;
    long head = 40; /* the journal header */
    fseek(jf, head + 8, SEEK_SET);
    CHECK(fread(&len0, 8, 1, jf) == 1);
    long body1 = head + 16 + (long)len0 + 16 + 4;
    fseek(jf, body1, SEEK_SET);
    int byte = fgetc(jf);
    fseek(jf, body1, SEEK_SET);
    fputc(byte ^ 0x5a, jf);
    fclose(jf);
    resume_args a = {.out = out, .sc = &sc, .n = n, .m = &m};
    char *said = stderr_of(do_resume, &a);
    CHECK_MSG(a.st == SI_OK, "%s", si_error_msg());
    CHECK_MSG(strstr(said, "record 1 at byte") && strstr(said, "damaged") &&
                  !strstr(said, "incomplete last record"),
              "%s", said);
    if (a.r) {
        CHECK(si_result_chunks_done(a.r) == 1 && a.done && a.done[0] == 1);
        CHECK(si_result_close(a.r) == SI_OK);
    }
    free(a.done);
    free(said);
    free(jp);
    free(empty);
    si_chunk_free(&ch);
}

/* si_h5_vlen_refs_check on a file HDF5 wrote: 5,000 short strings (collections of many objects
 * each), their references in a shuffled order, some repeated, some made wrong (an index that no
 * object has, a length that is not the object's, an address that is no collection): the good
 * ones pass, the wrong ones alone fail. */
static void test_vlen_refs(void) {
    enum { N = 5000 };
    char *path = fmt("%s/vlen_refs.h5", work);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = si_h5_utf8_type();
    hsize_t dim = N;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t d = H5Dcreate2(f, "ids", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    char **v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) v[i] = fmt("image_%05d.jpg", i * 7); /* freed with the pool */
    CHECK(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
    H5Fclose(f);
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "ids", H5P_DEFAULT);
    si_h5_vlen_ref *r = malloc(N * sizeof *r), *q = malloc(2 * N * sizeof *q);
    CHECK(H5Dread(d, si_h5_vlen_ref_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, r) >= 0);
    bool *ok = malloc(2 * N * sizeof *ok), want[2 * N];
    size_t collections = 0;
    for (int i = 0; i < N; i++) collections += i == 0 || r[i].heap_addr != r[i - 1].heap_addr;
    CHECK_MSG(collections > 1 && collections < N / 50, "%zu heap collections for %d strings",
              collections, N);
    /* every reference twice, in an order that is not the file's */
    for (int i = 0; i < 2 * N; i++) q[i] = r[(i * 2971) % N], want[i] = true;
    q[10].heap_idx = 60000, want[10] = false; /* no such object */
    q[20].len += 1, want[20] = false;         /* not the object's size */
    q[30].heap_addr = 8, want[30] = false;    /* no collection there */
    q[40].len = 0, want[40] = true;           /* nothing to follow */
    size_t bad = si_h5_vlen_refs_check(f, q, 2 * N, 1, ok);
    CHECK_MSG(bad == 3, "%zu references found bad, 3 made so", bad);
    int wrong = 0;
    for (int i = 0; i < 2 * N; i++) wrong += ok[i] != want[i];
    CHECK_MSG(wrong == 0, "%d references judged wrongly", wrong);
    H5Dclose(d);
    H5Fclose(f);
    H5Sclose(sp);
    H5Tclose(t);
    free(v), free(r), free(q), free(ok);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s WORKDIR PYTHON IO_REF_PY\n", argv[0]);
        return 2;
    }
    python = argv[2];
    io_ref = argv[3];
    snprintf(work, sizeof work, "%s/test_io.XXXXXX", argv[1]);
    if (!mkdtemp(work)) {
        fprintf(stderr, "cannot create a directory in %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    printf("working in %s\n", work);
    test_pack_dir();
    test_pack_list();
    test_hostile_sets();
    test_result();
    test_journal_damage();
    test_vlen_refs();
    int rc = test_finish();
    if (rc == 0) { /* keep the evidence of a failure, drop that of a success */
        char *cmd = fmt("rm -rf '%s'", work);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
    }
    for (size_t i = 0; i < npool; i++) free(pool[i]);
    cached(NULL, NULL);
    return rc;
}
