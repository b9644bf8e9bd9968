/* libFuzzer target for what `--resume` reads (io/result.h): the journal, the partial file's
 * attributes and datasets, and the undo record of an interrupted final step. The input is a
 * recipe (fuzz_common.h): a result schema (0 to 4 columns of any type and small shape, with or
 * without detections), an image count and chunk size, the chunks put before the run "stops"
 * (tails with failed images, messages and detections; now and then a tail of fuzz bytes, which
 * si_result_put must refuse, and a chunk put twice, which it must refuse too), then the damage:
 * the journal's records (or all of it, or its header's fields) replaced, cut or followed by fuzz
 * bytes, records with a valid CRC around fuzz or mutated tails, attributes of the partial file
 * (resume_key, images, chunk_size, runs) deleted or of other types and values, datasets removed,
 * an undo record of fuzz bytes or with forged fields and a valid CRC. Then si_result_resume as
 * the program calls it, and when it succeeds the missing chunks and si_result_finish over a small
 * packed source (ids that are not UTF-8 included). Nothing may crash, hang, allocate without
 * bound or leave an HDF5 handle open; an undamaged run must resume with exactly the chunks it
 * put, finish with the failures it recorded, and be readable by si_result_print.
 * Build and run: scripts/fuzz.sh journal [SECONDS] (docs/user-guide.md, "Fuzzing"). */
#include "io/resultview.h"
#include "io/undo.h"
#include "fuzz_common.h"
#include "fuzz_run.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_IMAGES  40
#define JOURNAL_HDR 40u         /* sizeof(journal_header) in result.c */
#define RECORD_TAG  0x4b4e4843u /* "CHNK" */

static FILE *devnull;

/* --- the damage ------------------------------------------------------------------------------- */

static void append(int fd, const void *p, size_t n) {
    if (n && write(fd, p, n) != (ssize_t)n) abort();
}

/* A record as result.c frames one: tag, CRC of the tail, length, tail; now and then with a
 * length that is not the tail's (the journal's end comes first, or the length is absurd). */
static void append_record(fz_recipe *r, int fd, const uint8_t *tail, size_t len) {
    uint32_t rh[2] = {RECORD_TAG, (uint32_t)crc32(0, tail, (uInt)len)};
    uint64_t l = fz_pick(r, 8) == 7 ? fz_edge_u64(r) : len;
    append(fd, rh, 8);
    append(fd, &l, 8);
    append(fd, tail, len);
}

/* The journal damaged by the recipe's choice. Returns whether it changed. */
static bool damage_journal(fz_recipe *r, const char *path, const fz_run *u) {
    int mode = fz_pick(r, 8);
    if (mode == 0) return false;
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    const uint8_t *b;
    size_t len;
    switch (mode) {
    case 1:   /* the records replaced by fuzz bytes */
    case 2: { /* all of it */
        if (truncate(path, mode == 1 ? JOURNAL_HDR : 0) != 0) abort();
        int fd = open(path, O_WRONLY | O_APPEND);
        len = fz_blob(r, r->n, &b);
        append(fd, b, len);
        close(fd);
        return true;
    }
    case 3: /* cut anywhere */
        return truncate(path, (off_t)fz_range(r, 0, (uint64_t)sb.st_size)) == 0;
    case 4: { /* bytes flipped */
        int fd = open(path, O_RDWR);
        for (int k = (int)fz_range(r, 1, 8); k > 0 && sb.st_size > 0; k--) {
            off_t at = (off_t)fz_range(r, 0, (uint64_t)sb.st_size - 1);
            uint8_t x = 0;
            if (pread(fd, &x, 1, at) == 1) x ^= (uint8_t)(fz_bits(r, 1) | 1);
            if (pwrite(fd, &x, 1, at) != 1) abort();
        }
        close(fd);
        return true;
    }
    case 5: { /* a header field of the recipe's value */
        static const uint8_t at[] = {0, 8, 16, 20, 24, 28, 32};
        uint64_t v = fz_edge_u64(r);
        int fd = open(path, O_RDWR);
        int k = fz_pick(r, 7);
        if (pwrite(fd, &v, at[k] == 16 || at[k] == 20 || at[k] == 24 || at[k] == 28 ? 4 : 8,
                   at[k]) < 0)
            abort();
        close(fd);
        return true;
    }
    default: { /* records with a valid CRC: fuzz tails, or valid ones with a field forged */
        int fd = open(path, O_WRONLY | O_APPEND);
        static uint8_t tail[FZ_TAIL_MAX];
        for (int k = (int)fz_range(r, 1, 4); k > 0; k--) {
            if (mode == 6) {
                len = fz_blob(r, FZ_TAIL_MAX, &b);
                append_record(r, fd, b, len);
                continue;
            }
            uint64_t c = fz_range(r, 0, u->chunks ? u->chunks - 1 : 0);
            len = u->chunks ? fz_run_tail(r, u, c, tail) : SI_TAIL_HEAD;
            for (int m = (int)fz_range(r, 0, 3); m > 0; m--) { /* forge 4 or 8 bytes */
                size_t at = (size_t)fz_range(r, 0, len ? len - 1 : 0);
                uint64_t v = fz_edge_u64(r);
                size_t w = fz_bool(r) ? 8 : 4;
                if (at + w <= FZ_TAIL_MAX) memcpy(tail + at, &v, w);
            }
            if (fz_pick(r, 4) == 3) len = (size_t)fz_range(r, 0, len); /* cut short */
            append_record(r, fd, tail, len);
        }
        close(fd);
        return true;
    }
    }
}

/* Replaces attribute name of obj with a scalar of type ft holding v (memory type mt). */
static void set_attr(hid_t obj, const char *name, hid_t ft, hid_t mt, const void *v) {
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    if (ft < 0) return; /* deleted only */
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        H5Awrite(a, mt, v);
        H5Aclose(a);
    }
    H5Sclose(sp);
}

/* The partial file's attributes and datasets changed by the recipe. Returns whether any did. */
static bool damage_partial(fz_recipe *r, const char *path, const fz_run *u) {
    int k = fz_pick(r, 4);
    if (k != 3) return false;
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return false;
    hid_t vstr = H5Tcopy(H5T_C_S1);
    H5Tset_size(vstr, H5T_VARIABLE);
    hid_t fstr = H5Tcopy(H5T_C_S1);
    H5Tset_size(fstr, (size_t)fz_range(r, 1, 300));
    static char big[100000];
    for (int m = (int)fz_range(r, 1, 4); m > 0; m--) {
        static const char *const attrs[] = {"resume_key", "images", "chunk_size", "runs"};
        const char *name = attrs[fz_pick(r, 4)];
        uint64_t v = fz_edge_u64(r);
        const char *s = u->key;
        switch (fz_pick(r, 9)) {
        case 0: set_attr(f, name, -1, -1, NULL); break;
        case 1: set_attr(f, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v); break;
        case 2: set_attr(f, name, H5T_STD_I8LE, H5T_NATIVE_UINT64, &v); break;
        case 3: set_attr(f, name, H5T_IEEE_F64LE, H5T_NATIVE_UINT64, &v); break;
        case 4: set_attr(f, name, vstr, vstr, &s); break;
        case 5: { /* a fixed-length string of any size: the key, cut or padded */
            static char fixed[512];
            snprintf(fixed, sizeof fixed, "%s", u->key);
            set_attr(f, name, fstr, fstr, fixed);
            break;
        }
        case 6: {
            const uint8_t *b;
            size_t len = fz_blob(r, 64, &b);
            char tmp[65];
            memcpy(tmp, b, len);
            tmp[len] = 0;
            s = tmp;
            set_attr(f, name, vstr, vstr, &s);
            break;
        }
        case 7:
            memset(big, 'k', sizeof big - 1);
            s = big;
            set_attr(f, name, vstr, vstr, &s);
            break;
        default: { /* a dataset gone, or another type in its place */
            const char *ds =
                u->schema.n_cols && fz_bool(r)
                    ? u->schema.cols[fz_range(r, 0, (uint64_t)u->schema.n_cols - 1)].name
                    : "status";
            H5Ldelete(f, ds, H5P_DEFAULT);
            if (fz_bool(r)) {
                hsize_t d = fz_range(r, 0, u->n + 2);
                hid_t sp = H5Screate_simple(1, &d, NULL);
                hid_t x = H5Dcreate2(f, ds, fz_bool(r) ? H5T_STD_I16LE : H5T_IEEE_F64LE, sp,
                                     H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                if (x >= 0) H5Dclose(x);
                H5Sclose(sp);
            }
            break;
        }
        }
    }
    H5Tclose(vstr);
    H5Tclose(fstr);
    H5Fclose(f);
    return true;
}

/* An undo record beside the partial file: none, fuzz bytes, the real one, or one with forged
 * fields and a valid CRC. Returns whether its restore may change the partial file. */
static bool make_undo(fz_recipe *r, const char *partial, const char *undo) {
    int mode = fz_pick(r, 6);
    if (mode == 0) return false;
    if (mode == 1) {
        const uint8_t *b;
        size_t len = fz_blob(r, 4096, &b);
        fz_write_file(undo, b, len);
        return true;
    }
    if (mode == 2) { /* the real thing, as finish saves it: a restore changes nothing */
        si_span keep[1] = {{fz_range(r, 0, 4096), fz_range(r, 0, 4096)}};
        si_undo_save(partial, undo, keep, fz_bool(r) ? 1 : 0);
        return false;
    }
    struct stat sb;
    if (stat(partial, &sb) != 0) return false;
    uint64_t size = (uint64_t)sb.st_size, m = fz_range(r, 0, 66);
    if (fz_pick(r, 4) == 3)
        size = fz_edge_u64(r);
    else if (fz_bool(r))
        size += fz_range(r, 0, 4096);
    static uint8_t rec[1 << 16];
    size_t o = 24;
    memcpy(rec, "SIUNDO01", 8);
    memcpy(rec + 8, &size, 8);
    memcpy(rec + 16, &m, 8);
    uint64_t lens[70], body = 0;
    for (uint64_t i = 0; i < m; i++) {
        /* spans past the file's end: HDF5's metadata stays as it is */
        uint64_t off = (uint64_t)sb.st_size + fz_range(r, 0, 4096);
        if (fz_pick(r, 8) == 7) off = fz_edge_u64(r);
        lens[i] = fz_range(r, 0, 64);
        body += lens[i];
        memcpy(rec + o, &off, 8);
        memcpy(rec + o + 8, &lens[i], 8);
        o += 16;
    }
    if (m >= 2 && fz_pick(r, 4) == 3) { /* lengths that add up only modulo 2^64 */
        uint64_t extra = fz_edge_u64(r), a = lens[0] + extra, b = lens[1] - extra;
        memcpy(rec + 24 + 8, &a, 8);
        memcpy(rec + 24 + 16 + 8, &b, 8);
    }
    for (uint64_t i = 0; i < body && o < sizeof rec - 4; i++) rec[o++] = (uint8_t)i;
    uint32_t c = (uint32_t)crc32(0, rec, (uInt)o);
    memcpy(rec + o, &c, 4);
    fz_write_file(undo, rec, o + 4);
    return true;
}

/* --- the input -------------------------------------------------------------------------------- */

static void fail(const char *what) {
    fprintf(stderr, "==fuzz== %s: %s\n", what, si_error_msg());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        fz_h5_quiet();
        si_log_set_level(SI_LOG_ERROR);
    }
    fz_tmpdir("journal");
    fz_recipe rr = {data, size}, *r = &rr;
    fz_h5_counts before;
    fz_h5_count(&before);
    static fz_run u;
    char out[4096 + 64], src[4096 + 64];
    snprintf(out, sizeof out, "%s", fz_path(0, "res.h5"));
    snprintf(src, sizeof src, "%s", fz_path(0, "src.h5"));
    char *partial = si_result_partial_path(out), *journal = si_result_journal_path(out),
         *undo = si_result_undo_path(out);
    fz_run_begin(r, &u, src, MAX_IMAGES, NULL);
    si_source *in = u.in;

    /* the run before it stops */
    si_result *res = NULL;
    if (si_result_create(out, &u.schema, u.n, u.chunk, &u.meta, &res) != SI_OK) fail("create");
    for (uint64_t c = 0; c < u.chunks; c++) {
        if (fz_pick(r, 4) == 1) continue;
        if (fz_run_put(r, res, &u, c) != SI_OK) fail("put of a valid chunk");
        u.put[c] = 1;
        if (fz_pick(r, 16) == 15 && fz_run_put(r, res, &u, c) != SI_ERR_VERIFY)
            fail("a chunk put twice is not refused");
    }
    if (fz_pick(r, 8) == 7) { /* a tail of fuzz bytes, of no chunk put yet */
        const uint8_t *b;
        size_t len = fz_blob(r, 512, &b);
        static uint8_t rows[FZ_RUN_MAX_CHUNK * 4 * 36 * 8];
        si_tail t;
        if (si_tail_parse(b, len, u.schema.detect, u.n, u.chunk, &t) == SI_OK && t.id < u.chunks &&
            !u.put[t.id]) {
            if (si_result_put(res, fz_bool(r) ? rows : NULL, b, len) != SI_OK)
                fail("put of a tail that parses");
            u.put[t.id] = 2; /* its failures are the tail's, not u.status's */
        } else if (si_result_put(res, rows, b, len) == SI_OK) {
            fail("put of a tail that does not parse succeeds");
        }
    }
    if (si_result_close(res) != SI_OK) fail("close");
    res = NULL;

    bool damaged = damage_journal(r, journal, &u);
    damaged |= damage_partial(r, partial, &u);
    damaged |= make_undo(r, partial, undo);
    for (uint64_t c = 0; c < u.chunks; c++) damaged |= u.put[c] == 2;

    /* --resume, as the program calls it; now and then with other settings */
    si_result_meta meta = u.meta;
    uint64_t n = u.n;
    si_result_schema schema = u.schema;
    bool same = true;
    switch (fz_pick(r, 8)) {
    case 5: meta.resume_key = "model=other", same = false; break;
    case 6: n = fz_range(r, 0, MAX_IMAGES), same = n == u.n; break;
    case 7: fz_run_schema(r, &schema), same = false; break;
    default: break;
    }
    uint32_t chunk = 0;
    uint8_t *done = NULL;
    switch (fz_pick(r, 4)) { /* the input's files touched since, or no input to check */
    case 1: meta.input_identity ^= 1; break;
    case 2: meta.input_identity = 0; break;
    default: break;
    }
    bool check_input = fz_pick(r, 4) != 3;
    si_status st =
        si_result_resume(out, &schema, n, &meta, check_input ? in : NULL, &chunk, &done, &res);
    if (st != SI_OK) {
        if (res) fail("a failed resume returns a result");
        if (!damaged && same) fail("an undamaged run does not resume");
    } else {
        uint64_t chunks = si_result_chunks(res);
        if (si_result_images_done(res) > n || si_result_chunks_done(res) > chunks)
            fail("more done than there is");
        if (!damaged && same) {
            if (chunk != u.chunk) fail("resumed with another chunk size");
            for (uint64_t c = 0; c < chunks; c++)
                if ((bool)(done[c / 8] >> (c % 8) & 1) != (bool)u.put[c])
                    fail("resumed with other chunks done than were put");
        }
        /* the missing chunks, as the run computes them, then the final step */
        static fz_run v;
        v = u;
        v.n = n, v.chunk = chunk, v.schema = schema, v.chunks = chunks;
        bool ok = true;
        for (uint64_t c = 0; c < chunks && ok; c++)
            if (!(done[c / 8] >> (c % 8) & 1)) ok = fz_run_put(r, res, &v, c) == SI_OK;
        if (!ok && !damaged && same) fail("put after resume");
        uint64_t failed = 0;
        st = si_result_finish(res, in, &meta, &failed, NULL);
        if (st != SI_OK && !damaged && same) fail("an undamaged run does not finish");
        if (st == SI_OK && !damaged && same && failed != u.failed)
            fail("finish counts other failures than were put");
        if (st == SI_OK &&
            si_result_print(out, NULL, (long)fz_range(r, 0, 50) - 1, devnull) != SI_OK)
            fail("a finished result cannot be shown");
    }
    si_source_close(in);
    free(done);
    free(partial);
    free(journal);
    free(undo);
    fz_h5_check(&before, "resume");
    fz_clean(fz_dir);
    return 0;
}
