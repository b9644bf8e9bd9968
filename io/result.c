/* The result writer and journal (see result.h for the design and why it survives a kill). */
#include "io/result.h"

#include "io/beside.h"
#include "io/h5util.h"
#include "io/tail.h"
#include "io/undo.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FORMAT_VERSION 2
#define ID_BLOCK       65536 /* ids, index and messages per write; the chunk of those datasets */
#define JOURNAL_MAGIC  "SIJRNL03"  /* 03: the tails carry the input's hashes */
#define RECORD_MAGIC   0x4b4e4843u /* "CHNK" */
#define PENDING_MAX    (16u << 20) /* flush early when this many record bytes wait */
#define RECORD_MAX     (1ull << 31)

typedef struct {
    char magic[8];
    uint64_t n_images;
    uint32_t chunk, row_bytes;
    uint32_t detect, reserved;
    uint64_t key_hash; /* crc32 of the resume key, a quick check; the key itself is in the file */
} journal_header;

struct si_result {
    char *path, *partial, *journal, *undo;
    hid_t file, status_ds, col_ds[SI_RESULT_MAX_COLS];
    hid_t f16; /* the half type when a column is F16 (si_h5_f16_type), else invalid */
    si_result_schema schema;
    uint64_t n, n_chunks, images_done, chunks_done;
    uint32_t chunk;
    uint8_t *done; /* bitmap */
    int jfd;
    si_bytes pending; /* journal records not yet appended (the partial file flushes first) */
    si_bytes colbuf;  /* one column of one chunk, contiguous */
    double last_flush, interval;
};

static char *suffixed(const char *path, const char *suffix) {
    char *s = NULL;
    if (asprintf(&s, "%s%s", path, suffix) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    return s;
}
char *si_result_partial_path(const char *path) {
    return suffixed(path, ".partial");
}
char *si_result_journal_path(const char *path) {
    return suffixed(path, ".journal");
}
char *si_result_undo_path(const char *path) {
    return suffixed(path, ".undo");
}

/* A half column has one type in memory and in the file, so HDF5 copies its bits unconverted:
 * the rounding is src/base/half.h's, never HDF5's. */
static hid_t col_mem_type(const si_result *r, si_result_type t) {
    return t == SI_RESULT_I32   ? H5T_NATIVE_INT32
           : t == SI_RESULT_F32 ? H5T_NATIVE_FLOAT
           : t == SI_RESULT_F16 ? r->f16
                                : H5T_NATIVE_DOUBLE;
}
static hid_t col_file_type(const si_result *r, si_result_type t) {
    return t == SI_RESULT_I32   ? H5T_STD_I32LE
           : t == SI_RESULT_F32 ? H5T_IEEE_F32LE
           : t == SI_RESULT_F16 ? r->f16
                                : H5T_IEEE_F64LE;
}

/* Copies column c of n consecutive rows (s->row_bytes each) back to back into dst
 * (n * cols[c].bytes): the layout of the column's dataset. Borrows everything. */
static void gather_column(const si_result_schema *s, int c, const uint8_t *rows, uint32_t n,
                          void *dst) {
    const si_result_col *col = &s->cols[c];
    if (col->bytes == 0) return;
    uint8_t *d = dst;
    for (uint32_t j = 0; j < n; j++)
        memcpy(d + col->bytes * j, rows + s->row_bytes * j + col->offset, col->bytes);
}

static bool bit(const uint8_t *b, uint64_t i) {
    return b[i / 8] >> (i % 8) & 1;
}

static void result_free(si_result *r) {
    if (!r) return;
    for (int c = 0; c < r->schema.n_cols; c++)
        if (r->col_ds[c] >= 0) H5Dclose(r->col_ds[c]);
    if (r->status_ds >= 0) H5Dclose(r->status_ds);
    if (r->file >= 0) H5Fclose(r->file);
    if (r->f16 >= 0) H5Tclose(r->f16);
    if (r->jfd >= 0) close(r->jfd);
    si_bytes_free(&r->pending);
    si_bytes_free(&r->colbuf);
    free(r->done);
    free(r->path);
    free(r->partial);
    free(r->journal);
    free(r->undo);
    free(r);
}

static si_result *result_new(const char *path, const si_result_schema *schema, uint64_t n,
                             uint32_t chunk, const si_result_meta *meta) {
    si_result *r = si_xcalloc(1, sizeof *r);
    r->path = si_xstrdup(path);
    r->partial = si_result_partial_path(path);
    r->journal = si_result_journal_path(path);
    r->undo = si_result_undo_path(path);
    r->file = r->status_ds = r->f16 = H5I_INVALID_HID;
    for (int c = 0; c < SI_RESULT_MAX_COLS; c++) r->col_ds[c] = H5I_INVALID_HID;
    for (int c = 0; c < schema->n_cols; c++)
        if (schema->cols[c].type == SI_RESULT_F16 && r->f16 < 0) r->f16 = si_h5_f16_type();
    r->jfd = -1;
    r->schema = *schema;
    r->n = n;
    r->chunk = chunk;
    r->n_chunks = chunk ? (n + chunk - 1) / chunk : 0;
    r->done = si_xcalloc(r->n_chunks / 8 + 1, 1);
    r->interval = meta->flush_interval > 0 ? meta->flush_interval : 10.0;
    r->last_flush = si_now();
    return r;
}

/* A contiguous dataset of [n, per-image dims], its space allocated now, never filled: writing
 * rows into it later changes no metadata. */
static hid_t make_fixed(hid_t file, const char *name, hid_t ftype, uint64_t n, int ndim,
                        const int64_t *dims) {
    hsize_t d[SI_RESULT_MAX_DIMS + 1] = {n};
    for (int i = 0; i < ndim; i++) d[i + 1] = (hsize_t)dims[i];
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = H5Screate_simple(ndim + 1, d, NULL);
    hid_t ds = H5Dcreate2(file, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    return ds;
}

static hid_t file_access(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* no sieve buffer: a row write goes to the file at once, before its journal record */
    H5Pset_sieve_buf_size(fapl, 0);
    return fapl;
}

bool si_result_started(const char *path) {
    char *j = si_result_journal_path(path);
    struct stat sb;
    bool started = stat(j, &sb) == 0 && sb.st_size >= (off_t)sizeof(journal_header);
    free(j);
    return started;
}

int si_result_batch_of(const char *path, bool partial) {
    char *name = partial ? si_result_partial_path(path) : strdup(path);
    long batch = 0;
    struct stat sb;
    if (name && lstat(name, &sb) == 0 && S_ISREG(sb.st_mode)) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        hid_t fapl = file_access();
        hid_t f = H5Fis_hdf5(name) > 0 ? H5Fopen(name, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
        H5Pclose(fapl);
        /* the resume key's last field (the batch_size attribute comes with the final step) */
        char *key = f >= 0 ? si_h5_attr_read_str(f, "resume_key") : NULL;
        const char *at = key ? strstr(key, ";batch=") : NULL;
        if (at) {
            char *end;
            batch = strtol(at + 7, &end, 10);
            if (*end) batch = 0;
        }
        free(key);
        if (f >= 0) H5Fclose(f);
    }
    free(name);
    return batch > 0 && batch <= 65536 ? (int)batch : 0;
}

/* The partial file's HDF5 state on disk: flushed and synced. */
static si_status sync_partial(si_result *r) {
    void *h = NULL;
    if (H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0)
        return si_error(SI_ERR_IO, "%s: cannot flush (disk full?)", r->partial);
    if (H5Fget_vfd_handle(r->file, H5P_DEFAULT, &h) >= 0 && h && fsync(*(int *)h) != 0)
        return si_error(SI_ERR_IO, "%s: cannot sync: %s", r->partial, strerror(errno));
    return SI_OK;
}

/* Before HDF5 metadata of the partial file changes (the final step, a resume's run count): the
 * undo record of every byte outside the rows, which no such change touches (io/undo.h). */
static si_status save_undo(si_result *r) {
    si_status st = sync_partial(r);
    if (st != SI_OK) return st;
    si_span rows[SI_RESULT_MAX_COLS + 1];
    int n = 0;
    for (int c = -1; c < r->schema.n_cols; c++) {
        hid_t ds = c < 0 ? r->status_ds : r->col_ds[c];
        haddr_t a = H5Dget_offset(ds);
        hsize_t len = H5Dget_storage_size(ds);
        if (a != HADDR_UNDEF && len) rows[n++] = (si_span){(uint64_t)a, (uint64_t)len};
    }
    return si_undo_save(r->partial, r->undo, rows, n);
}

static si_status write_header(si_result *r, const si_result_meta *meta) {
    journal_header h = {
        .n_images = r->n,
        .chunk = r->chunk,
        .row_bytes = (uint32_t)r->schema.row_bytes,
        .detect = r->schema.detect,
        .key_hash = crc32(0, (const Bytef *)meta->resume_key, (uInt)strlen(meta->resume_key))};
    memcpy(h.magic, JOURNAL_MAGIC, 8);
    if (write(r->jfd, &h, sizeof h) != (ssize_t)sizeof h || fsync(r->jfd) != 0)
        return si_error(SI_ERR_IO, "%s: cannot write: %s", r->journal, strerror(errno));
    return SI_OK;
}

si_status si_result_create(const char *path, const si_result_schema *schema, uint64_t n,
                           uint32_t chunk, const si_result_meta *meta, si_result **out) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    SI_ASSERT(chunk > 0 && meta->resume_key);
    si_result *r = result_new(path, schema, n, chunk, meta);
    unlink(r->journal); /* a journal without its partial file is meaningless */
    si_undo_drop(r->undo);
    /* made new (H5F_ACC_EXCL is O_EXCL: a planted link is not followed), never truncated
     * through whatever has the name */
    si_status st = SI_OK;
    if (unlink(r->partial) != 0 && errno != ENOENT) {
        st = si_error(SI_ERR_IO, "%s: cannot remove the old one: %s", r->partial, strerror(errno));
        goto fail;
    }
    hid_t fapl = file_access();
    r->file = H5Fcreate(r->partial, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (r->file < 0) {
        st = si_error(SI_ERR_IO, "%s: cannot create", r->partial);
        goto fail;
    }
    hid_t strtype = si_h5_utf8_type();
    int runs = 1;
    herr_t e = si_h5_attr_str(r->file, "resume_key", strtype, meta->resume_key);
    if (e >= 0) e = si_h5_attr(r->file, "images", H5T_STD_U64LE, H5T_NATIVE_UINT64, &n);
    if (e >= 0) e = si_h5_attr(r->file, "chunk_size", H5T_STD_U32LE, H5T_NATIVE_UINT32, &chunk);
    if (e >= 0) e = si_h5_attr(r->file, "runs", H5T_STD_I32LE, H5T_NATIVE_INT, &runs);
    if (e >= 0)
        e = si_h5_attr(r->file, "input_identity", H5T_STD_U64LE, H5T_NATIVE_UINT64,
                       &meta->input_identity);
    H5Tclose(strtype);
    r->status_ds = make_fixed(r->file, "status", H5T_STD_I32LE, n, 0, NULL);
    for (int c = 0; c < schema->n_cols && e >= 0; c++) {
        const si_result_col *col = &schema->cols[c];
        r->col_ds[c] =
            make_fixed(r->file, col->name, col_file_type(r, col->type), n, col->ndim, col->dims);
        if (r->col_ds[c] < 0) e = -1;
    }
    if (e < 0 || r->status_ds < 0 || H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0) {
        st =
            si_error(SI_ERR_IO, "%s: cannot create the result's datasets (disk full?)", r->partial);
        goto fail;
    }
    if ((st = si_beside_create(r->journal, O_RDWR | O_APPEND, &r->jfd)) != SI_OK) goto fail;
    if ((st = write_header(r, meta)) != SI_OK) goto fail;
    *out = r;
    return SI_OK;
fail:
    result_free(r);
    char *p = si_result_partial_path(path), *j = si_result_journal_path(path);
    unlink(p);
    unlink(j);
    free(p);
    free(j);
    return st;
}

static herr_t read_attr(hid_t obj, const char *name, hid_t mt, void *v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t e = a >= 0 ? H5Aread(a, mt, v) : -1;
    if (a >= 0) H5Aclose(a);
    return e;
}

/* The first differing "k=v" item of two resume keys, for the message. */
void si_result_key_difference(const char *a, const char *b, char *out, size_t cap) {
    const char *pa = a, *pb = b;
    while (*pa && *pb) {
        size_t la = strcspn(pa, ";"), lb = strcspn(pb, ";");
        if (la != lb || memcmp(pa, pb, la)) {
            snprintf(out, cap, "'%.*s' then, '%.*s' now", (int)la, pa, (int)lb, pb);
            return;
        }
        pa += la + (pa[la] == ';');
        pb += lb + (pb[lb] == ';');
    }
    snprintf(out, cap, "'%s' then, '%s' now", a, b);
}

/* The record at *pos, read into b (grown) and parsed into t; *pos moves past it. Returns 1, 0 at
 * the end of the journal or at a record that does not check out (torn or damaged: the records
 * before it stand), -1 when b cannot grow (message set). */
static int next_record(si_result *r, off_t *pos, si_bytes *b, si_tail *t) {
    uint32_t rh[2];
    uint64_t len;
    struct stat sb;
    if (pread(r->jfd, rh, 8, *pos) != 8 || pread(r->jfd, &len, 8, *pos + 8) != 8 ||
        rh[0] != RECORD_MAGIC || len > RECORD_MAX || fstat(r->jfd, &sb) != 0)
        return 0;
    /* no more bytes are allocated than the journal holds after the record's head: a damaged
     * length is a torn record, not 2 GiB of memory */
    if (sb.st_size < *pos + 16 || len > (uint64_t)(sb.st_size - *pos - 16)) return 0;
    if (si_bytes_reserve(b, len + 1) != SI_OK) return -1;
    if (pread(r->jfd, b->data, len, *pos + 16) != (ssize_t)len ||
        crc32(0, b->data, (uInt)len) != rh[1] ||
        si_tail_parse(b->data, len, r->schema.detect, r->n, r->chunk, t) != SI_OK)
        return 0;
    *pos += 16 + (off_t)len;
    return 1;
}

/* Whether the record at pos that did not check out is whole and followed by more bytes: a
 * damaged record (a fault of the storage), not the torn last one of a killed run. */
static bool record_complete(si_result *r, off_t pos, off_t size) {
    uint32_t rh[2];
    uint64_t len;
    if (pread(r->jfd, rh, 8, pos) != 8 || pread(r->jfd, &len, 8, pos + 8) != 8) return false;
    return len <= RECORD_MAX && pos + 16 + (off_t)len < size;
}

/* Reads the journal's records into r->done, truncating a torn tail. */
static si_status read_journal(si_result *r, const si_result_meta *meta) {
    journal_header h;
    if (read(r->jfd, &h, sizeof h) != (ssize_t)sizeof h || memcmp(h.magic, "SIJRNL", 6))
        return si_error(
            SI_ERR_FORMAT,
            "%s: not a shardinfer journal; start again with --overwrite instead of --resume",
            r->journal);
    if (memcmp(h.magic, JOURNAL_MAGIC, 8))
        return si_error(SI_ERR_FORMAT,
                        "%s: written by another version of shardinfer (journal format %.2s, this "
                        "one writes %.2s): finish the run with that version, or start again with "
                        "--overwrite",
                        r->journal, h.magic + 6, JOURNAL_MAGIC + 6);
    if (h.n_images != r->n || h.chunk != r->chunk || h.row_bytes != r->schema.row_bytes ||
        h.detect != (r->schema.detect) ||
        h.key_hash != crc32(0, (const Bytef *)meta->resume_key, (uInt)strlen(meta->resume_key)))
        return si_error(SI_ERR_FORMAT, "%s: does not belong to %s", r->journal, r->partial);
    off_t pos = (off_t)sizeof h;
    si_bytes b = {0};
    si_status st = SI_OK;
    si_tail t;
    int got;
    uint64_t n_records = 0;
    while ((got = next_record(r, &pos, &b, &t)) == 1) {
        n_records++;
        if (!bit(r->done, t.id)) {
            r->done[t.id / 8] |= (uint8_t)(1u << (t.id % 8));
            r->chunks_done++;
            r->images_done += t.n;
        }
    }
    if (got < 0) st = SI_ERR_NOMEM;
    si_bytes_free(&b);
    if (st != SI_OK) return st;
    struct stat sb;
    if (fstat(r->jfd, &sb) == 0 && sb.st_size > pos) {
        if (record_complete(r, pos, sb.st_size))
            si_log_warn("%s: record %llu at byte %lld is damaged (it does not check out, yet the "
                        "file goes on after it): dropping it and the %lld bytes after it; their "
                        "chunks are computed again",
                        r->journal, (unsigned long long)n_records, (long long)pos,
                        (long long)(sb.st_size - pos));
        else
            si_log_warn("%s: dropping %lld bytes of an incomplete last record (the run was "
                        "killed while writing it); its chunk is computed again",
                        r->journal, (long long)(sb.st_size - pos));
        if (ftruncate(r->jfd, pos) != 0)
            return si_error(SI_ERR_IO, "%s: cannot truncate: %s", r->journal, strerror(errno));
    }
    return SI_OK;
}

/* The partial file's columns, each of the type this run writes: the resume key already holds
 * what decides the types, so a mismatch here is a file changed by hand. */
/* A fixed-size dataset of the partial file as this run made it: n rows of the per-image dims,
 * contiguous and allocated in the file itself (rows are written at its byte offsets, by MPI-IO
 * with --writer parallel). A file changed by hand is refused, never written wherever it points. */
static si_status check_fixed(const si_result *r, hid_t ds, const char *name, int ndim,
                             const int64_t *dims) {
    hid_t sp = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t d[SI_RESULT_MAX_DIMS + 1] = {0};
    bool ok = rank == ndim + 1 && H5Sget_simple_extent_dims(sp, d, NULL) == rank && d[0] == r->n;
    for (int i = 0; ok && i < ndim; i++) ok = d[i + 1] == (hsize_t)dims[i];
    ok = ok && dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
         H5Pget_external_count(dcpl) == 0 && (r->n == 0 || H5Dget_offset(ds) != HADDR_UNDEF);
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (ok) return SI_OK;
    return si_error(SI_ERR_FORMAT,
                    "--resume: %s: %s is not the contiguous dataset of %llu rows this run made "
                    "(changed by hand?); start again with --overwrite instead of --resume",
                    r->partial, name, (unsigned long long)r->n);
}

static si_status open_columns(si_result *r) {
    static const char *const type_names[] = {[SI_RESULT_I32] = "int32",
                                             [SI_RESULT_F32] = "float32",
                                             [SI_RESULT_F64] = "float64",
                                             [SI_RESULT_F16] = "float16"};
    si_status st = check_fixed(r, r->status_ds, "status", 0, NULL);
    if (st != SI_OK) return st;
    for (int c = 0; c < r->schema.n_cols; c++) {
        const si_result_col *col = &r->schema.cols[c];
        r->col_ds[c] = H5Dopen2(r->file, col->name, H5P_DEFAULT);
        if (r->col_ds[c] < 0)
            return si_error(SI_ERR_FORMAT, "--resume: %s has no dataset %s", r->partial, col->name);
        if ((st = check_fixed(r, r->col_ds[c], col->name, col->ndim, col->dims)) != SI_OK)
            return st;
        hid_t t = H5Dget_type(r->col_ds[c]);
        htri_t same = t >= 0 ? H5Tequal(t, col_file_type(r, col->type)) : -1;
        if (t >= 0) H5Tclose(t);
        if (same <= 0)
            return si_error(SI_ERR_FORMAT,
                            "--resume: %s holds %s in another type than the %s this run writes; "
                            "start again with --overwrite instead of --resume",
                            r->partial, col->name, type_names[col->type]);
    }
    return SI_OK;
}

/* Every image the journal holds a record of, read from input again and hashed as a run reads
 * it: the first that differs is named. A run resumed on other bytes would mix two inputs'
 * results in one file. */
static si_status verify_input(si_result *r, si_source *input) {
    si_log_info("%s: the input's files are not the ones the interrupted run read (copied, "
                "touched or rewritten since): checking the %llu images done against them",
                r->path, (unsigned long long)r->images_done);
    enum { PIECE = 256, MSG = 256 };
    uint64_t *off = si_xmalloc(sizeof *off * (PIECE + 1));
    int32_t *status = si_xmalloc(sizeof *status * PIECE);
    uint32_t *hash = si_xmalloc(sizeof *hash * PIECE);
    char *msg = si_xmalloc((size_t)PIECE * MSG);
    si_bytes b = {0}, buf = {0};
    si_tail t;
    off_t pos = (off_t)sizeof(journal_header);
    double t0 = si_now(), told = t0;
    uint64_t checked = 0, bad = UINT64_MAX;
    si_status st = SI_OK;
    int got;
    while (st == SI_OK && bad == UINT64_MAX && (got = next_record(r, &pos, &b, &t)) == 1) {
        for (uint32_t p = 0; p < t.n && st == SI_OK && bad == UINT64_MAX; p += PIECE) {
            uint32_t m = t.n - p < PIECE ? t.n - p : PIECE;
            st = si_source_read_batch(input, t.first + p, m, &buf, off, status, msg, MSG, hash,
                                      true);
            for (uint32_t j = 0; st == SI_OK && j < m && bad == UINT64_MAX; j++)
                if (hash[j] != t.input_hash[p + j]) bad = t.first + p + j;
            checked += m;
        }
        if (si_now() - told > 10) {
            told = si_now();
            si_log_info("%s: %llu of %llu images checked", r->path, (unsigned long long)checked,
                        (unsigned long long)r->images_done);
        }
    }
    if (st == SI_OK && bad != UINT64_MAX) {
        char *id = NULL;
        si_source_read_ids(input, bad, 1, &id);
        st = si_error(SI_ERR_ARG,
                      "--resume: the input changed since the interrupted run read it: image %llu "
                      "('%s') is not what the run read then (and later ones may differ too); "
                      "restore the input the run started on, or pass --overwrite instead of "
                      "--resume to start again",
                      (unsigned long long)bad, id ? id : "?");
        si_source_free_ids(&id, 1);
    }
    if (st == SI_OK)
        si_log_info("%s: the %llu images done are the input's (checked in %.1f s)", r->path,
                    (unsigned long long)checked, si_now() - t0);
    free(off);
    free(status);
    free(hash);
    free(msg);
    si_bytes_free(&b);
    si_bytes_free(&buf);
    return st;
}

/* The resumed run counted in the partial file (runs + 1) and the input it reads now recorded,
 * behind the undo record (the attributes are HDF5 metadata). */
static si_status count_run(si_result *r, const si_result_meta *meta) {
    si_status st = save_undo(r);
    if (st != SI_OK) return st;
    int runs = 0;
    read_attr(r->file, "runs", H5T_NATIVE_INT, &runs);
    if (runs < 0 || runs == INT32_MAX) runs = 0; /* a count from a file, never to overflow */
    runs++;
    hid_t a = H5Aopen(r->file, "runs", H5P_DEFAULT);
    herr_t e = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT, &runs) : -1;
    if (a >= 0) H5Aclose(a);
    if (e >= 0 && H5Aexists(r->file, "input_identity") > 0) {
        a = H5Aopen(r->file, "input_identity", H5P_DEFAULT);
        e = a >= 0 ? H5Awrite(a, H5T_NATIVE_UINT64, &meta->input_identity) : -1;
        if (a >= 0) H5Aclose(a);
    } else if (e >= 0) {
        e = si_h5_attr(r->file, "input_identity", H5T_STD_U64LE, H5T_NATIVE_UINT64,
                       &meta->input_identity);
    }
    if (e < 0 || H5Fflush(r->file, H5F_SCOPE_GLOBAL) < 0)
        return si_error(SI_ERR_IO, "%s: cannot update it", r->partial);
    if ((st = sync_partial(r)) != SI_OK) return st;
    si_undo_drop(r->undo);
    return SI_OK;
}

si_status si_result_resume(const char *path, const si_result_schema *schema, uint64_t n,
                           const si_result_meta *meta, si_source *input, uint32_t *chunk,
                           uint8_t **done, si_result **out) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char *partial = si_result_partial_path(path);
    struct stat sb;
    if (stat(partial, &sb) != 0) {
        si_status st =
            si_error(SI_ERR_ARG, "--resume: %s: no interrupted run to resume (%s does not exist)",
                     path, partial);
        free(partial);
        return st;
    }
    /* a final step cut short: the partial file back to where it began, to be made again */
    char *undo = si_result_undo_path(path);
    bool restored = false;
    si_status ust = si_undo_restore(partial, undo, &restored);
    free(undo);
    if (ust != SI_OK) {
        free(partial);
        return ust;
    }
    if (restored)
        si_log_warn("%s: the final step of an earlier run was cut short; the partial result is "
                    "restored to where that step began, and the step is made again",
                    path);
    si_status bst = si_beside_check(partial);
    if (bst != SI_OK) {
        free(partial);
        return si_error_prefix(bst, "--resume: ");
    }
    hid_t fapl = file_access();
    hid_t file = H5Fopen(partial, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    free(partial);
    uint64_t n_file = 0;
    uint32_t chunk_file = 0;
    char *key = file >= 0 ? si_h5_attr_read_str(file, "resume_key") : NULL;
    if (file < 0 || !key || read_attr(file, "images", H5T_NATIVE_UINT64, &n_file) < 0 ||
        read_attr(file, "chunk_size", H5T_NATIVE_UINT32, &chunk_file) < 0 || chunk_file == 0) {
        if (file >= 0) H5Fclose(file);
        free(key);
        return si_error(SI_ERR_FORMAT,
                        "--resume: %s.partial is not a readable partial result (damaged?); run "
                        "again with --overwrite instead of --resume",
                        path);
    }
    if (strcmp(key, meta->resume_key) || n_file != n) {
        char diff[600];
        si_result_key_difference(key, meta->resume_key, diff, sizeof diff);
        H5Fclose(file);
        free(key);
        if (strstr(diff, "'input_fp=")) /* same path and count, other content */
            return si_error(SI_ERR_ARG,
                            "--resume: the input is not the one %s was started on: its ids and "
                            "images differ (%s); restore it, or pass --overwrite to start again",
                            path, diff);
        return si_error(SI_ERR_ARG,
                        "--resume: %s was started with different settings (%s); resume with the "
                        "same ones, or pass --overwrite instead of --resume to start again",
                        path, diff);
    }
    free(key);
    si_result *r = result_new(path, schema, n, chunk_file, meta);
    r->file = file;
    si_status st = SI_OK;
    r->status_ds = H5Dopen2(file, "status", H5P_DEFAULT);
    if (r->status_ds < 0)
        st = si_error(SI_ERR_FORMAT, "--resume: %s has no dataset status", r->partial);
    if (st == SI_OK) st = open_columns(r);
    if (st == SI_OK && (st = si_beside_open(r->journal, O_RDWR | O_APPEND, &r->jfd)) != SI_OK)
        si_error_prefix(st, "--resume: ");
    if (st == SI_OK) st = read_journal(r, meta);
    uint64_t identity = 0;
    if (st == SI_OK && input &&
        (read_attr(file, "input_identity", H5T_NATIVE_UINT64, &identity) < 0 ||
         identity != meta->input_identity))
        st = verify_input(r, input);
    if (st == SI_OK) st = count_run(r, meta);
    if (st != SI_OK) {
        result_free(r);
        return st;
    }
    *chunk = r->chunk;
    *done = si_xmalloc(r->n_chunks / 8 + 1);
    memcpy(*done, r->done, r->n_chunks / 8 + 1);
    *out = r;
    return SI_OK;
}

static herr_t write_rows(hid_t ds, hid_t mt, int ndim_extra, uint64_t first, uint32_t n,
                         const void *buf) {
    hid_t fs = H5Dget_space(ds);
    hsize_t dims[SI_RESULT_MAX_DIMS + 1], start[SI_RESULT_MAX_DIMS + 1] = {first},
                                                                     count[SI_RESULT_MAX_DIMS + 1];
    int nd = H5Sget_simple_extent_dims(fs, dims, NULL);
    SI_ASSERT(nd == ndim_extra + 1);
    count[0] = n;
    for (int i = 1; i < nd; i++) start[i] = 0, count[i] = dims[i];
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(nd, count, NULL);
    if (e >= 0) e = H5Dwrite(ds, mt, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return e;
}

si_status si_result_put(si_result *r, const uint8_t *rows, const uint8_t *tail, size_t tail_len) {
    si_tail t;
    si_status st = si_tail_parse(tail, tail_len, r->schema.detect, r->n, r->chunk, &t);
    if (st != SI_OK) return st;
    if (bit(r->done, t.id))
        return si_error(SI_ERR_VERIFY,
                        "chunk %llu (images %llu..%llu) arrived twice: its images would be "
                        "counted twice",
                        (unsigned long long)t.id, (unsigned long long)t.first,
                        (unsigned long long)(t.first + t.n - 1));
    if (rows && t.n > 0 &&
        write_rows(r->status_ds, H5T_NATIVE_INT32, 0, t.first, t.n, t.status) < 0)
        return si_error(SI_ERR_IO, "%s: cannot write status (disk full?)", r->partial);
    for (int c = 0; c < r->schema.n_cols && t.n > 0 && rows; c++) {
        const si_result_col *col = &r->schema.cols[c];
        if ((st = si_bytes_reserve(&r->colbuf, col->bytes * t.n)) != SI_OK) return st;
        gather_column(&r->schema, c, rows, t.n, r->colbuf.data);
        if (write_rows(r->col_ds[c], col_mem_type(r, col->type), col->ndim, t.first, t.n,
                       r->colbuf.data) < 0)
            return si_error(SI_ERR_IO, "%s: cannot write %s (disk full?)", r->partial, col->name);
    }
    /* the record goes to the journal only at the next flush, after the rows are on disk */
    size_t at = r->pending.len;
    if ((st = si_bytes_reserve(&r->pending, at + 16 + tail_len)) != SI_OK) return st;
    uint32_t rh[2] = {RECORD_MAGIC, (uint32_t)crc32(0, tail, (uInt)tail_len)};
    uint64_t len = tail_len;
    memcpy(r->pending.data + at, rh, 8);
    memcpy(r->pending.data + at + 8, &len, 8);
    memcpy(r->pending.data + at + 16, tail, tail_len);
    r->pending.len = at + 16 + tail_len;
    r->done[t.id / 8] |= (uint8_t)(1u << (t.id % 8));
    r->chunks_done++;
    r->images_done += t.n;
    if (r->pending.len > PENDING_MAX) return si_result_flush(r, true);
    return SI_OK;
}

si_status si_result_flush(si_result *r, bool force) {
    double now = si_now();
    if (!force && now - r->last_flush < r->interval) return SI_OK;
    r->last_flush = now;
    if (r->pending.len == 0) return SI_OK;
    si_status st = sync_partial(r);
    if (st != SI_OK) return st;
    for (size_t o = 0; o < r->pending.len;) {
        ssize_t w = write(r->jfd, r->pending.data + o, r->pending.len - o);
        if (w <= 0)
            return si_error(SI_ERR_IO, "%s: cannot append: %s", r->journal, strerror(errno));
        o += (size_t)w;
    }
    if (fsync(r->jfd) != 0)
        return si_error(SI_ERR_IO, "%s: cannot sync: %s", r->journal, strerror(errno));
    r->pending.len = 0;
    return SI_OK;
}

void si_result_column_offsets(const si_result *r, uint64_t *offsets) {
    haddr_t a = H5Dget_offset(r->status_ds);
    offsets[0] = a == HADDR_UNDEF ? 0 : (uint64_t)a;
    for (int c = 0; c < r->schema.n_cols; c++) {
        a = H5Dget_offset(r->col_ds[c]);
        offsets[1 + c] = a == HADDR_UNDEF ? 0 : (uint64_t)a;
    }
}

uint64_t si_result_images_done(const si_result *r) {
    return r->images_done;
}
uint64_t si_result_chunks_done(const si_result *r) {
    return r->chunks_done;
}
uint64_t si_result_chunks(const si_result *r) {
    return r->n_chunks;
}

si_status si_result_close(si_result *r) {
    if (!r) return SI_OK;
    si_status st = si_result_flush(r, true);
    result_free(r);
    return st;
}

/* --- finish ----------------------------------------------------------------------------------- */

/* Calls fn for each journal record in file order (each chunk once: the journal was verified and
 * every chunk is done). */
typedef si_status (*record_fn)(si_result *r, const si_tail *t, void *ctx);
static si_status each_record(si_result *r, record_fn fn, void *ctx) {
    off_t pos = (off_t)sizeof(journal_header);
    si_bytes b = {0};
    si_status st = SI_OK;
    for (uint64_t k = 0; k < r->n_chunks && st == SI_OK; k++) {
        si_tail t;
        int got = next_record(r, &pos, &b, &t);
        if (got < 0)
            st = SI_ERR_NOMEM;
        else if (got == 0)
            st = si_error(SI_ERR_IO, "%s: record %llu does not read back", r->journal,
                          (unsigned long long)k);
        else
            st = fn(r, &t, ctx);
    }
    si_bytes_free(&b);
    return st;
}

typedef struct {
    uint64_t *err_base, *det_base; /* per chunk: the first row of its errors / detections */
    uint64_t n_err, n_det;
    hid_t ei, em, boxes, scores, classes, offsets, strtype;
} finish_ctx;

static si_status count_record(si_result *r, const si_tail *t, void *ctx) {
    finish_ctx *f = ctx;
    f->err_base[t->id] = t->n_errors;
    f->det_base[t->id] = t->n_dets;
    return SI_OK;
}

/* A chunked (compressible) 1-D or 2-D dataset of n rows, created now. */
static hid_t make_col(hid_t file, const char *name, hid_t ftype, uint64_t n, hsize_t width) {
    hsize_t dims[2] = {n, width};
    return si_h5_create_chunked(file, name, ftype, width ? 2 : 1, dims, ID_BLOCK);
}

static si_status place_record(si_result *r, const si_tail *t, void *ctx) {
    finish_ctx *f = ctx;
    if (t->n_errors) {
        uint64_t *idx = si_xmalloc(sizeof *idx * t->n_errors);
        char **msg = si_xcalloc(t->n_errors, sizeof *msg);
        size_t pos = 0;
        const char *m;
        uint16_t l;
        for (uint32_t k = 0; si_tail_error(t, &pos, &idx[k], &m, &l); k++) {
            msg[k] = si_xmalloc((size_t)l + 1);
            memcpy(msg[k], m, l);
            msg[k][l] = 0;
        }
        herr_t e = write_rows(f->ei, H5T_NATIVE_UINT64, 0, f->err_base[t->id], t->n_errors, idx);
        if (e >= 0) e = write_rows(f->em, f->strtype, 0, f->err_base[t->id], t->n_errors, msg);
        for (uint32_t k = 0; k < t->n_errors; k++) free(msg[k]);
        free(msg);
        free(idx);
        if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write /errors (disk full?)", r->partial);
    }
    if (!r->schema.detect) return SI_OK;
    uint64_t base = f->det_base[t->id], m = t->n_dets;
    uint64_t *off = si_xmalloc(sizeof *off * (t->n + 1));
    off[0] = base;
    for (uint32_t j = 0; j < t->n; j++) off[j + 1] = off[j] + t->dets_per_image[j];
    float *boxes = si_xmalloc(sizeof(float) * 4 * (m + 1)),
          *scores = si_xmalloc(sizeof(float) * (m + 1));
    int32_t *cls = si_xmalloc(sizeof(int32_t) * (m + 1));
    for (uint64_t k = 0; k < m; k++) {
        const si_tail_det *d = &t->dets[k];
        boxes[4 * k] = d->x1, boxes[4 * k + 1] = d->y1, boxes[4 * k + 2] = d->x2,
                  boxes[4 * k + 3] = d->y2;
        scores[k] = d->score;
        cls[k] = d->cls;
    }
    /* offsets[first + j] for the chunk's images; offsets[N] is written by the caller */
    herr_t e = write_rows(f->offsets, H5T_NATIVE_UINT64, 0, t->first, t->n, off);
    if (e >= 0 && m) e = write_rows(f->boxes, H5T_NATIVE_FLOAT, 1, base, (uint32_t)m, boxes);
    if (e >= 0 && m) e = write_rows(f->scores, H5T_NATIVE_FLOAT, 0, base, (uint32_t)m, scores);
    if (e >= 0 && m) e = write_rows(f->classes, H5T_NATIVE_INT32, 0, base, (uint32_t)m, cls);
    free(off);
    free(boxes);
    free(scores);
    free(cls);
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write /detections (disk full?)", r->partial);
    return SI_OK;
}

/* /ids copied from the input, and /index = 0..N-1, in blocks. */
/* Bytes of the valid UTF-8 sequence at s (n bytes left), 0 when there is none. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0; /* overlong, surrogate, beyond U+10FFFF */
    return k;
}

/* An id that is not UTF-8, made so (docs/output-format.md): each byte outside a valid sequence
 * as \xNN and each backslash doubled; NULL when id is UTF-8 already. */
static char *escape_id(const char *id) {
    const unsigned char *s = (const unsigned char *)id;
    size_t n = strlen(id), i = 0;
    while (i < n && utf8_seq(s + i, n - i)) i += utf8_seq(s + i, n - i);
    if (i == n) return NULL;
    char *e = si_xmalloc(4 * n + 1), *o = e;
    for (i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (k == 1 && s[i] == '\\') {
            *o++ = '\\', *o++ = '\\', i++;
        } else if (k) {
            memcpy(o, s + i, k), o += k, i += k;
        } else {
            o += sprintf(o, "\\x%02x", s[i]), i++;
        }
    }
    *o = 0;
    return e;
}

/* The rows whose ids escape_id changed, as /ids_escaped (only when there are any). */
static si_status write_escaped_rows(si_result *r, const uint64_t *rows, uint64_t n) {
    if (!n) return SI_OK;
    hid_t ds = make_col(r->file, "ids_escaped", H5T_STD_U64LE, n, 0);
    herr_t e = ds < 0 ? -1 : write_rows(ds, H5T_NATIVE_UINT64, 0, 0, (uint32_t)n, rows);
    if (ds >= 0) H5Dclose(ds);
    si_log_warn("%s: %llu ids are not UTF-8: written with \\xNN escapes, their rows listed in "
                "/ids_escaped",
                r->path, (unsigned long long)n);
    return e < 0 ? si_error(SI_ERR_IO, "%s: cannot write /ids_escaped", r->partial) : SI_OK;
}

static si_status write_ids(si_result *r, si_source *input, hid_t strtype) {
    hid_t ids = make_col(r->file, "ids", strtype, r->n, 0);
    hid_t index = make_col(r->file, "index", H5T_STD_U64LE, r->n, 0);
    si_status st =
        ids < 0 || index < 0 ? si_error(SI_ERR_IO, "%s: cannot create /ids", r->partial) : SI_OK;
    char **block = si_xcalloc(ID_BLOCK, sizeof *block);
    uint64_t *ix = si_xmalloc(sizeof *ix * ID_BLOCK);
    uint64_t *esc = NULL, n_esc = 0, cap_esc = 0;
    for (uint64_t r0 = 0; st == SI_OK && r0 < r->n; r0 += ID_BLOCK) {
        uint32_t m = (uint32_t)(r->n - r0 < ID_BLOCK ? r->n - r0 : ID_BLOCK);
        if ((st = si_source_read_ids(input, r0, m, block)) != SI_OK) break;
        for (uint32_t j = 0; j < m; j++) {
            ix[j] = r0 + j;
            char *e = block[j] ? escape_id(block[j]) : NULL;
            if (!e) continue;
            free(block[j]); /* si_source_free_ids frees each id with free() */
            block[j] = e;
            if (n_esc == cap_esc)
                esc = si_xrealloc(esc, sizeof *esc * (cap_esc = 2 * cap_esc + 64));
            esc[n_esc++] = r0 + j;
        }
        herr_t e = write_rows(ids, strtype, 0, r0, m, block);
        if (e >= 0) e = write_rows(index, H5T_NATIVE_UINT64, 0, r0, m, ix);
        si_source_free_ids(block, m);
        if (e < 0) st = si_error(SI_ERR_IO, "%s: cannot write /ids (disk full?)", r->partial);
    }
    if (st == SI_OK) st = write_escaped_rows(r, esc, n_esc);
    free(esc);
    free(block);
    free(ix);
    if (ids >= 0) H5Dclose(ids);
    if (index >= 0) H5Dclose(index);
    return st;
}

/* The first row of each chunk's errors and detections (counted from the journal), then
 * /errors and, when the run detects, /detections created at their final sizes. */
static si_status create_lists(si_result *r, finish_ctx *f) {
    si_status st = each_record(r, count_record, f);
    for (uint64_t c = 0; c < r->n_chunks; c++) { /* counts -> first rows */
        uint64_t e = f->err_base[c], d = f->det_base[c];
        f->err_base[c] = f->n_err;
        f->det_base[c] = f->n_det;
        f->n_err += e;
        f->n_det += d;
    }
    if (st != SI_OK) return st;
    f->ei = make_col(r->file, "errors/index", H5T_STD_U64LE, f->n_err, 0);
    f->em = make_col(r->file, "errors/message", f->strtype, f->n_err, 0);
    if (r->schema.detect) {
        f->boxes = make_col(r->file, "detections/boxes", H5T_IEEE_F32LE, f->n_det, 4);
        f->scores = make_col(r->file, "detections/scores", H5T_IEEE_F32LE, f->n_det, 0);
        f->classes = make_col(r->file, "detections/classes", H5T_STD_I32LE, f->n_det, 0);
        f->offsets = make_col(r->file, "detections/offsets", H5T_STD_U64LE, r->n + 1, 0);
    }
    if (f->ei < 0 || f->em < 0 ||
        (r->schema.detect && (f->boxes < 0 || f->scores < 0 || f->classes < 0 || f->offsets < 0)))
        return si_error(SI_ERR_IO, "%s: cannot create /errors or /detections", r->partial);
    return SI_OK;
}

/* The root attributes of the finished file (docs/output-format.md), in their fixed order. */
static si_status write_attrs(si_result *r, const si_result_meta *meta, uint64_t n_err, hid_t t) {
    int version = FORMAT_VERSION;
    hid_t file = r->file;
    herr_t e = si_h5_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    if (e >= 0) e = si_h5_attr_str(file, "shardinfer_version", t, SI_VERSION);
    if (e >= 0) e = si_h5_attr_str(file, "model", t, meta->model_path);
    if (e >= 0) e = si_h5_attr_str(file, "model_sha256", t, meta->model_sha256);
    if (e >= 0) e = si_h5_attr_str(file, "input", t, meta->input_path);
    if (e >= 0) e = si_h5_attr(file, "ranks", H5T_STD_I32LE, H5T_NATIVE_INT, &meta->ranks);
    if (e >= 0)
        e = si_h5_attr(file, "batch_size", H5T_STD_I32LE, H5T_NATIVE_INT, &meta->batch_size);
    if (e >= 0)
        e = si_h5_attr(file, "elapsed_seconds", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                       &meta->elapsed_seconds);
    if (e >= 0) e = si_h5_attr(file, "failed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &n_err);
    if (e >= 0) e = si_h5_attr_str(file, "command_line", t, meta->command_line);
    if (e >= 0) e = si_h5_attr_str(file, "preprocess", t, meta->preprocess);
    if (e >= 0) e = si_h5_attr_str(file, "post", t, r->schema.post);
    if (e >= 0) e = si_h5_attr_str(file, "post_params", t, meta->post_params);
    /* who the input's files were serves resumes only: a result holds what they held */
    if (e >= 0 && H5Aexists(file, "input_identity") > 0) e = H5Adelete(file, "input_identity");
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write the root attributes", r->partial);
    return SI_OK;
}

/* Closes the complete partial file, syncs it, renames it to PATH and removes the journal and
 * the undo record, each step durable before the next. */
static si_status publish(si_result *r) {
    for (int c = 0; c < r->schema.n_cols; c++) H5Dclose(r->col_ds[c]), r->col_ds[c] = -1;
    H5Dclose(r->status_ds);
    r->status_ds = -1;
    herr_t e = H5Fclose(r->file);
    r->file = -1;
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot close (disk full?)", r->partial);
    si_test_point("finish:closed");
    int fd = open(r->partial, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        si_status st = si_error(SI_ERR_IO, "%s: cannot sync: %s", r->partial, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    close(fd);
    if (rename(r->partial, r->path) != 0)
        return si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", r->path, r->partial,
                        strerror(errno));
    si_status st = si_sync_dir_of(r->path);
    if (st != SI_OK) return st;
    si_test_point("finish:renamed");
    /* from here PATH is whole: a leftover journal or undo record is removed by --resume */
    unlink(r->journal);
    si_undo_drop(r->undo);
    return SI_OK;
}

/* The final step failed before PATH was in place: the partial file back to where the step
 * began (HDF5 has closed it), so that the next --resume finds what it expects. */
static void undo_finish(const char *path, const char *partial, const char *undo) {
    bool restored = false;
    si_status st = si_undo_restore(partial, undo, &restored);
    if (st != SI_OK)
        si_log_warn("%s; --resume tries again", si_error_msg());
    else if (restored)
        si_log_info("%s: the partial result is back to where the final step began", path);
}

si_status si_result_finish(si_result *r, si_source *input, const si_result_meta *meta,
                           uint64_t *failed, si_result_finish_times *times) {
    si_result_finish_times tm = {0};
    double t = si_now();
    si_status st = si_result_flush(r, true);
    if (st == SI_OK && r->chunks_done != r->n_chunks)
        st = si_error(SI_ERR_VERIFY, "%s: %llu of %llu chunks are missing", r->partial,
                      (unsigned long long)(r->n_chunks - r->chunks_done),
                      (unsigned long long)r->n_chunks);
    si_test_point("finish:begin");
    if (st == SI_OK && (st = save_undo(r)) != SI_OK) { /* nothing changed yet */
        char why[1024];
        snprintf(why, sizeof why, "%s", si_error_msg());
        st = si_error(st,
                      "the final step cannot begin: %s. Every image's result is kept (%s and "
                      "its journal): make room or fix the cause, then run the same command with "
                      "--resume",
                      why, r->partial);
    }
    if (st != SI_OK) {
        result_free(r);
        return st;
    }
    si_test_point("finish:undo");
    tm.begin = si_now() - t, t = si_now();
    finish_ctx f = {.err_base = si_xcalloc(r->n_chunks + 1, sizeof(uint64_t)),
                    .det_base = si_xcalloc(r->n_chunks + 1, sizeof(uint64_t)),
                    .strtype = si_h5_utf8_type()};
    f.ei = f.em = f.boxes = f.scores = f.classes = f.offsets = H5I_INVALID_HID;
    st = create_lists(r, &f);
    if (st == SI_OK) si_test_point("finish:lists");
    if (st == SI_OK) st = each_record(r, place_record, &f);
    if (st == SI_OK && f.offsets >= 0 &&
        write_rows(f.offsets, H5T_NATIVE_UINT64, 0, r->n, 1, &f.n_det) < 0)
        st = si_error(SI_ERR_IO, "%s: cannot write /detections/offsets", r->partial);
    if (st == SI_OK) si_test_point("finish:records");
    tm.records = si_now() - t, t = si_now();
    if (st == SI_OK) st = write_ids(r, input, f.strtype);
    if (st == SI_OK) si_test_point("finish:ids");
    tm.ids = si_now() - t, t = si_now();
    if (st == SI_OK) st = write_attrs(r, meta, f.n_err, f.strtype);
    hid_t hs[6] = {f.ei, f.em, f.boxes, f.scores, f.classes, f.offsets};
    for (int i = 0; i < 6; i++)
        if (hs[i] >= 0) H5Dclose(hs[i]);
    H5Tclose(f.strtype);
    free(f.err_base);
    free(f.det_base);
    *failed = f.n_err;
    if (st == SI_OK) st = publish(r);
    tm.publish = si_now() - t;
    if (times) *times = tm;
    bool in_place = st == SI_OK || access(r->path, F_OK) == 0;
    char *path = si_xstrdup(r->path), *partial = si_xstrdup(r->partial),
         *undo = si_xstrdup(r->undo);
    result_free(r);
    if (!in_place) {
        char why[1024];
        snprintf(why, sizeof why, "%s", si_error_msg());
        undo_finish(path, partial, undo);
        st = si_error(st,
                      "the final step failed: %s. Every image's result is kept (%s and its "
                      "journal): make room or fix the cause, then run the same command with "
                      "--resume to make the step again",
                      why, partial);
    }
    free(path);
    free(partial);
    free(undo);
    return st;
}
