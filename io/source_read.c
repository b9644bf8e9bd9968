/* The readers of an image source (io/source.h): encoded records (packed, vlen), pixels (dense) and
 * ids, across the files of a source, reopening evicted files as they are met. */
#include "io/source_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* --- reading ---------------------------------------------------------------------------------- */

/* The file holding global index i (i < total): the last one starting at or before i, which skips
 * empty files since they start where the next one does. */
static int file_of(const si_source *s, uint64_t i) {
    int lo = 0, hi = s->nfiles; /* first file with start > i is in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s->files[mid].start <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

static si_status check_range(const si_source *s, uint64_t first, uint64_t n) {
    if (first > s->total || n > s->total - first)
        return si_error(SI_ERR_ARG, "%s: images [%llu, %llu) requested, the source has %llu",
                        s->spec, (unsigned long long)first, (unsigned long long)(first + n),
                        (unsigned long long)s->total);
    return SI_OK;
}

/* Selects [lo, lo+m) along dim 0 of d (rank dims, the rest whole); caller closes *fs and *ms. */
static herr_t select_rows(hid_t d, int rank, uint64_t lo, uint64_t m, hid_t *fs, hid_t *ms) {
    hsize_t start[4] = {lo, 0, 0, 0}, count[4] = {m, 0, 0, 0};
    *fs = H5Dget_space(d);
    *ms = H5I_INVALID_HID;
    if (*fs < 0) return -1;
    if (rank > 1) {
        hsize_t dims[4];
        H5Sget_simple_extent_dims(*fs, dims, NULL);
        for (int k = 1; k < rank; k++) count[k] = dims[k];
    }
    *ms = H5Screate_simple(rank, count, NULL);
    if (*ms < 0) return -1;
    return H5Sselect_hyperslab(*fs, H5S_SELECT_SET, start, NULL, count, NULL);
}

static si_status read_fail(const src_file *f, const char *what, uint64_t lo, uint64_t m) {
    return si_error(SI_ERR_IO, "%s: cannot read %s[%llu..%llu] (global images %llu..%llu)", f->path,
                    what, (unsigned long long)lo, (unsigned long long)(lo + m - 1),
                    (unsigned long long)(f->start + lo),
                    (unsigned long long)(f->start + lo + m - 1));
}

/* H5Dread of what fs selects, its failure classified: SI_ERR_FAULT when the storage failed
 * under HDF5 (the caller reopens the file and tries again: HDF5 may keep what the failed read
 * left in its buffers), the file's own fault otherwise. Closes fs and ms. */
static si_status h5read(const src_file *f, hid_t d, hid_t mt, hid_t ms, hid_t fs, hid_t dxpl,
                        void *buf, const char *what, uint64_t lo, uint64_t m) {
    herr_t e = ms >= 0 && fs >= 0 ? H5Dread(d, mt, ms, fs, dxpl, buf) : -1;
    char why[256];
    bool fault = e < 0 && si_h5_storage_fault(why, sizeof why);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e >= 0) return SI_OK;
    if (fault)
        return si_error(SI_ERR_FAULT, "%s: I/O error reading %s[%llu..%llu]: %s", f->path, what,
                        (unsigned long long)lo, (unsigned long long)(lo + m - 1), why);
    return read_fail(f, what, lo, m);
}

/* Reads rows [lo, lo+m) of the 1-D or 4-D dataset d (rank dims) into buf as memory type mt. */
static si_status read_rows(const src_file *f, hid_t d, int rank, hid_t mt, hid_t dxpl, uint64_t lo,
                           uint64_t m, void *buf, const char *what) {
    hid_t fs, ms;
    if (select_rows(d, rank, lo, m, &fs, &ms) < 0) {
        if (ms >= 0) H5Sclose(ms);
        if (fs >= 0) H5Sclose(fs);
        return read_fail(f, what, lo, m);
    }
    return h5read(f, d, mt, ms, fs, dxpl, buf, what, lo, m);
}

/* Packed: the offsets of the range, then the bytes of its records, a record over the cap left
 * out (one read of the whole range when none is); appended at buf->len. */
static si_status read_packed(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                             uint64_t *off, uint64_t *big) {
    si_status st = read_rows(f, f->offsets, 1, H5T_NATIVE_UINT64, H5P_DEFAULT, lo, (uint64_t)m + 1,
                             off, f->offsets_name);
    if (st != SI_OK) return st;
    for (uint32_t j = 0; j < m; j++)
        if (off[j + 1] < off[j])
            return si_error(SI_ERR_FORMAT, "%s: %s is not monotonic at image %llu", f->path,
                            f->offsets_name, (unsigned long long)(f->start + lo + j));
    if (off[m] > f->total)
        return si_error(SI_ERR_FORMAT, "%s: image %llu ends past the end of %s", f->path,
                        (unsigned long long)(f->start + lo + m - (m > 0)), f->data_name);
    uint64_t want = 0;
    for (uint32_t j = 0; j < m; j++) {
        uint64_t len = off[j + 1] - off[j];
        big[j] = len > s->max_record ? len : 0;
        if (!big[j]) want += len;
    }
    size_t base = buf->len;
    if (want > SIZE_MAX - base)
        return si_error(SI_ERR_NOMEM, "%s: %llu bytes", f->path, (unsigned long long)want);
    if ((st = si_bytes_reserve(buf, base + (size_t)want)) != SI_OK) return st;
    /* runs of records within the cap, each one read */
    size_t pos = base;
    for (uint32_t j = 0; j < m;) {
        if (big[j]) {
            j++;
            continue;
        }
        uint32_t k = j;
        while (k < m && !big[k]) k++;
        uint64_t len = off[k] - off[j];
        if (len > 0 && (st = read_rows(f, f->data, 1, H5T_NATIVE_UINT8, H5P_DEFAULT, off[j], len,
                                       buf->data + pos, f->data_name)) != SI_OK)
            return st;
        pos += (size_t)len;
        j = k;
    }
    uint64_t at = base, was = off[0];
    for (uint32_t j = 0; j < m; j++) {
        uint64_t next = off[j + 1];
        off[j] = at;
        if (!big[j]) at += next - was;
        was = next;
    }
    off[m] = at;
    buf->len = pos;
    return SI_OK;
}

/* si_h5_vlen_refs_check of the references of dataset d: in the file that holds d, which an
 * external link (with --allow-external) makes another than f's. */
static size_t check_refs(const src_file *f, hid_t d, const si_h5_vlen_ref *ref, uint32_t m,
                         bool *fine) {
    hid_t file = H5Iget_file_id(d);
    size_t bad = si_h5_vlen_refs_check(file >= 0 ? file : f->file, ref, m, 1, fine);
    int err = errno;
    if (file >= 0) H5Fclose(file);
    errno = err;
    return bad;
}

/* vlen: the records' declared lengths first (their headers, not their bytes), then one H5Dread
 * of the range into hvl_t records, copied out; a range with a record over the cap reads the
 * others one by one. The buffers HDF5 made are freed after (src_vl_done), also after a read
 * that failed half way. Appended at buf->len. */
static si_status read_vlen(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                           uint64_t *off, uint64_t *big) {
    si_h5_vlen_ref *ref = s->refs;
    si_status st = read_rows(f, f->data, 1, s->vlen_ref, H5P_DEFAULT, lo, m, ref, f->data_name);
    if (st != SI_OK) return st;
    uint64_t want = 0;
    bool any_big = false;
    for (uint32_t j = 0; j < m; j++) {
        big[j] = ref[j].len > s->max_record ? ref[j].len : 0;
        if (big[j]) {
            any_big = true;
            ref[j].len = 0; /* not read: its reference is not followed */
        } else {
            want += ref[j].len;
        }
    }
    size_t bad = 0;
    bool *fine = s->fine;
    size_t n_bad = check_refs(f, f->data, ref, m, fine);
    if (n_bad == SIZE_MAX)
        return si_error(SI_ERR_FAULT, "%s: I/O error reading the bytes of %s[%llu..%llu]: %s",
                        f->path, f->data_name, (unsigned long long)lo,
                        (unsigned long long)(lo + m - 1), strerror(errno));
    if (n_bad > 0) {
        while (fine[bad]) bad++;
        return si_error(SI_ERR_FORMAT,
                        "%s: record %llu of %s has a damaged reference to its bytes (heap object "
                        "%llu at %llu is not a record of %llu bytes)",
                        f->path, (unsigned long long)(f->start + lo + bad), f->data_name,
                        (unsigned long long)ref[bad].heap_idx,
                        (unsigned long long)ref[bad].heap_addr, (unsigned long long)ref[bad].len);
    }
    if (want > SIZE_MAX - buf->len)
        return si_error(SI_ERR_NOMEM, "%s: %llu bytes", f->path, (unsigned long long)want);
    if ((st = si_bytes_reserve(buf, buf->len + (size_t)want)) != SI_OK) return st;
    if (m > s->vl_cap) {
        free(s->vl);
        s->vl = si_xmalloc((size_t)m * sizeof *s->vl);
        s->vl_cap = m;
    }
    memset(s->vl, 0, (size_t)m * sizeof *s->vl);
    if (!any_big) st = read_rows(f, f->data, 1, s->vlen_u8, s->vl_dxpl, lo, m, s->vl, f->data_name);
    for (uint32_t j = 0; any_big && j < m && st == SI_OK; j++)
        if (!big[j])
            st = read_rows(f, f->data, 1, s->vlen_u8, s->vl_dxpl, lo + j, 1, &s->vl[j],
                           f->data_name);
    size_t pos = buf->len;
    for (uint32_t j = 0; j < m && st == SI_OK; j++) {
        off[j] = pos;
        const hvl_t *v = &s->vl[j];
        /* the record as read, bounded by what its header declared */
        if (v->len > (size_t)want - (pos - buf->len))
            st = si_error(SI_ERR_FORMAT, "%s: record %llu of %s grew while read", f->path,
                          (unsigned long long)(f->start + lo + j), f->data_name);
        else if (v->len)
            memcpy(buf->data + pos, v->p, v->len);
        pos += v->len;
    }
    src_vl_done(s, false);
    if (st != SI_OK) return st;
    off[m] = pos;
    buf->len = pos;
    return SI_OK;
}

/* dense: one hyperslab read of m images, NHWC straight into buf, NCHW through scratch. */
static si_status read_dense(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                            uint64_t *off, uint64_t *big) {
    size_t img = (size_t)s->h * s->w * s->c, base = buf->len;
    if (m > (SIZE_MAX - base) / (img ? img : 1))
        return si_error(SI_ERR_NOMEM, "%s: %u images of %zu bytes", f->path, m, img);
    size_t bytes = (size_t)m * img;
    si_status st = si_bytes_reserve(buf, base + bytes);
    if (st != SI_OK) return st;
    bool nchw = s->layout == SI_LAYOUT_DENSE_NCHW;
    if (nchw && (st = si_bytes_reserve(&s->scratch, bytes)) != SI_OK) return st;
    uint8_t *dst = m == 0 ? NULL : nchw ? s->scratch.data : buf->data + base;
    if (m > 0 && (st = read_rows(f, f->data, 4, H5T_NATIVE_UINT8, H5P_DEFAULT, lo, m, dst,
                                 f->data_name)) != SI_OK)
        return st;
    if (nchw) {
        size_t hw = (size_t)s->h * s->w;
        int c = s->c;
        for (uint32_t j = 0; j < m; j++) {
            const uint8_t *src = s->scratch.data + j * img; /* (C, H, W) */
            uint8_t *out = buf->data + base + j * img;      /* (H, W, C) */
            /* RGB: the planes read in step and written in sequence, faster than the strided
             * loop below */
            if (c == 3) {
                const uint8_t *r = src, *g = src + hw, *bl = src + 2 * hw;
                for (size_t p = 0; p < hw; p++) {
                    out[3 * p] = r[p];
                    out[3 * p + 1] = g[p];
                    out[3 * p + 2] = bl[p];
                }
            } else {
                for (int k = 0; k < c; k++)
                    for (size_t p = 0; p < hw; p++) out[p * c + k] = src[k * hw + p];
            }
        }
    }
    for (uint32_t j = 0; j <= m; j++) off[j] = base + j * img;
    for (uint32_t j = 0; j < m; j++) big[j] = 0;
    buf->len = base + bytes;
    return SI_OK;
}

/* One file's part of a read, appended at buf->len. */
static si_status read_segment(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                              uint64_t *off, uint64_t *big) {
    switch (s->layout) {
    case SI_LAYOUT_PACKED: return read_packed(s, f, lo, m, buf, off, big);
    case SI_LAYOUT_VLEN: return read_vlen(s, f, lo, m, buf, off, big);
    default: return read_dense(s, f, lo, m, buf, off, big);
    }
}

/* Borrows s; grows buf and fills off[0..n] and big[0..n) (all owned by the caller). A segment
 * that meets an I/O error of the storage is read again on a reopened file, a few times, before
 * the error stands: a storage hiccup (an NFS timeout) must not end a long run, nor may HDF5's
 * buffers, which a failed read can leave holding bytes that were never read, serve the next. */
static si_status read_locked(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off,
                             uint64_t *big) {
    si_status st = check_range(s, first, n);
    if (st != SI_OK) return st;
    buf->len = 0;
    off[0] = 0;
    uint32_t done = 0;
    while (done < n) {
        uint64_t i = first + done;
        src_file *f = &s->files[file_of(s, i)];
        uint64_t lo = i - f->start, avail = f->n - lo;
        uint32_t m = avail < n - done ? (uint32_t)avail : n - done;
        size_t base = buf->len;
        for (int attempt = 0;; attempt++) {
            buf->len = base;
            /* (a file evicted, or closed after a fault, is opened again here) */
            si_status opened = src_touch(s, f);
            /* off + done: this segment's first offset lands on the previous one's last, which
             * has the same value (buf->len) */
            st = opened == SI_OK ? read_segment(s, f, lo, m, buf, off + done, big + done) : opened;
            /* a changed file explains any failure, and a read that "worked" may hold its
             * zeros */
            si_status id = src_check_unchanged(f);
            if (id != SI_OK) return id;
            /* the file is what it was, yet cannot be opened again: the storage's fault */
            if (opened != SI_OK) st = si_error_prefix(SI_ERR_FAULT, "reopening: ");
            if (st != SI_ERR_FAULT) break;
            src_close_handles(s, f);
            if (attempt == READ_RETRIES) {
                char why[1024];
                snprintf(why, sizeof why, "%s", si_error_msg());
                return si_error(SI_ERR_FAULT,
                                "%s (still after %d reads on the file reopened): a fault of the "
                                "storage, not of its images; nothing read since is kept",
                                why, READ_RETRIES);
            }
            si_log_warn("%s; reopening the file to read again (%d of %d)", si_error_msg(),
                        attempt + 1, READ_RETRIES);
            struct timespec pause = {.tv_sec = attempt, .tv_nsec = 200000000L};
            nanosleep(&pause, NULL);
        }
        if (st == SI_ERR_NOMEM) { /* the machine's fault, not the images' */
            char why[512];
            snprintf(why, sizeof why, "%s", si_error_msg());
            return si_error(SI_ERR_FAULT, "%s: out of memory reading images %llu..%llu (%s)",
                            f->path, (unsigned long long)i, (unsigned long long)(i + m - 1), why);
        }
        if (st != SI_OK) return st;
        done += m;
    }
    return SI_OK;
}

/* s->big holds at least n entries (the source's lock held). */
static void big_reserve(si_source *s, uint32_t n) {
    if (n <= s->big_cap) return;
    free(s->big);
    free(s->refs);
    free(s->fine);
    s->big = si_xmalloc(sizeof *s->big * n);
    s->refs = si_xmalloc(sizeof *s->refs * n);
    s->fine = si_xmalloc(sizeof *s->fine * n);
    s->big_cap = n;
}

/* Borrows s; grows buf and fills off[0..n] and big (all owned by the caller; big may be NULL). */
si_status si_source_read(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off,
                         uint64_t *big) {
    pthread_mutex_lock(&s->mu);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5's error printing is per thread */
    big_reserve(s, n);                     /* the vlen references too */
    si_status st = read_locked(s, first, n, buf, off, big ? big : s->big);
    for (uint32_t j = 0; st == SI_OK && !big && j < n; j++)
        if (s->big[j])
            st = si_error(SI_ERR_UNSUPPORTED,
                          "%s: image %llu declares %llu bytes, over the record cap of %llu",
                          s->spec, (unsigned long long)(first + j), (unsigned long long)s->big[j],
                          (unsigned long long)s->max_record);
    pthread_mutex_unlock(&s->mu);
    return st;
}

#define HASH_SEED_BIG   0x5349544f4f424947ull /* a record over the cap: its declared size */
#define HASH_SEED_ERROR 0x534952454144ull     /* a record that could not be read */

uint32_t si_source_hash(const uint8_t *p, size_t len) {
    return (uint32_t)XXH3_64bits(p, len);
}

static uint32_t hash_big(uint64_t declared) {
    return (uint32_t)XXH3_64bits_withSeed(&declared, sizeof declared, HASH_SEED_BIG);
}

/* Image j of a batch whose batch read failed, alone; *st_img its verdict. SI_ERR_FAULT ends the
 * batch. Appends to buf. */
static si_status read_alone(si_source *s, uint64_t i, si_bytes *buf, uint64_t *off_j,
                            int32_t *status, char *msg, size_t msg_len, uint32_t *hash) {
    uint64_t o[2], big = 0;
    si_status st = read_locked(s, i, 1, &s->one, o, &big);
    off_j[1] = off_j[0];
    if (st == SI_ERR_FAULT) return st;
    if (st != SI_OK) {
        *status = SI_IMG_READ_ERROR;
        snprintf(msg, msg_len, "read error: %s", si_error_msg());
        *hash = (uint32_t)XXH3_64bits_withSeed(NULL, 0, HASH_SEED_ERROR);
        return SI_OK;
    }
    if (big) {
        *status = SI_IMG_TOO_LARGE;
        snprintf(msg, msg_len,
                 "its record declares %llu bytes, over the cap of %llu (--max-record-bytes)",
                 (unsigned long long)big, (unsigned long long)s->max_record);
        *hash = hash_big(big);
        return SI_OK;
    }
    size_t len = (size_t)(o[1] - o[0]);
    if (si_bytes_reserve(buf, off_j[0] + len) != SI_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", si_error_msg());
        return si_error(SI_ERR_FAULT, "out of memory reading image %llu: %s", (unsigned long long)i,
                        why);
    }
    if (len) memcpy(buf->data + off_j[0], s->one.data + o[0], len);
    off_j[1] = off_j[0] + len;
    buf->len = (size_t)off_j[1];
    *status = SI_IMG_OK;
    *hash = si_source_hash(len ? buf->data + off_j[0] : NULL, len);
    return SI_OK;
}

si_status si_source_read_batch(si_source *s, uint64_t first, uint32_t n, si_bytes *buf,
                               uint64_t *off, int32_t *status, char *msg, size_t msg_len,
                               uint32_t *hash, bool ok_hashes) {
    pthread_mutex_lock(&s->mu);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    big_reserve(s, n);
    si_status st = read_locked(s, first, n, buf, off, s->big);
    if (st == SI_OK) {
        for (uint32_t j = 0; j < n; j++) {
            if (s->big[j]) {
                status[j] = SI_IMG_TOO_LARGE;
                snprintf(
                    msg + j * msg_len, msg_len,
                    "its record declares %llu bytes, over the cap of %llu (--max-record-bytes)",
                    (unsigned long long)s->big[j], (unsigned long long)s->max_record);
                hash[j] = hash_big(s->big[j]);
            } else {
                status[j] = SI_IMG_OK;
                size_t len = (size_t)(off[j + 1] - off[j]);
                if (ok_hashes) hash[j] = si_source_hash(len ? buf->data + off[j] : NULL, len);
            }
        }
    } else if (st != SI_ERR_FAULT) {
        si_log_warn("%s: batch read of images %llu..%llu failed (%s); reading them one by one",
                    s->spec, (unsigned long long)first, (unsigned long long)(first + n - 1),
                    si_error_msg());
        buf->len = 0;
        off[0] = 0;
        st = SI_OK;
        for (uint32_t j = 0; j < n && st == SI_OK; j++)
            st = read_alone(s, first + j, buf, off + j, status + j, msg + j * msg_len, msg_len,
                            hash + j);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* An id longer than this is not read: its image's id becomes a stand-in naming its length. Ids
 * are names (paths, keys), and a crafted one can declare gigabytes. */
#define MAX_ID_BYTES 4096

/* Variable-length string ids [lo, lo+m) of f: their declared lengths first, then one read, or
 * with an id over MAX_ID_BYTES each of the others alone. */
static si_status read_vstr_ids(si_source *s, src_file *f, uint64_t lo, uint32_t m, char **ids) {
    big_reserve(s, m);
    si_h5_vlen_ref *ref = s->refs;
    si_status st = read_rows(f, f->ids, 1, s->vlen_ref, H5P_DEFAULT, lo, m, ref, f->ids_name);
    if (st != SI_OK) return st;
    /* an id over the bound, or whose reference is damaged, is not read: a stand-in names it
     * (the run must still finish: a result holds every image, and its id) */
    bool any_long = false;
    for (uint32_t j = 0; j < m; j++) {
        s->big[j] = ref[j].len > MAX_ID_BYTES ? ref[j].len : 0;
        if (s->big[j]) ref[j].len = 0; /* not followed: not read */
    }
    if (check_refs(f, f->ids, ref, m, s->fine) == SIZE_MAX)
        return si_error(SI_ERR_FAULT, "%s: I/O error reading %s[%llu..%llu]: %s", f->path,
                        f->ids_name, (unsigned long long)lo, (unsigned long long)(lo + m - 1),
                        strerror(errno));
    for (uint32_t j = 0; j < m; j++) {
        if (!s->big[j] && !s->fine[j]) s->big[j] = UINT64_MAX;
        any_long |= s->big[j] != 0;
    }

    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, f->ids_cset);
    for (uint32_t j = 0; j < m; j++) ids[j] = NULL;
    if (!any_long) st = read_rows(f, f->ids, 1, mt, s->vl_dxpl, lo, m, ids, f->ids_name);
    for (uint32_t j = 0; any_long && j < m && st == SI_OK; j++) {
        if (s->big[j] == 0) {
            st = read_rows(f, f->ids, 1, mt, s->vl_dxpl, lo + j, 1, ids + j, f->ids_name);
            continue;
        }
        char b[96];
        if (s->big[j] == UINT64_MAX)
            snprintf(b, sizeof b, "(id not read: its reference in the file is damaged)");
        else
            snprintf(b, sizeof b, "(id of %llu bytes, not read: over %d)",
                     (unsigned long long)s->big[j], MAX_ID_BYTES);
        ids[j] = si_xstrdup(b);
    }
    H5Tclose(mt);
    if (st != SI_OK) {
        /* HDF5's strings freed through the tracker; the stand-ins made here freed after */
        for (uint32_t j = 0; any_long && j < m; j++)
            if (s->big[j]) free(ids[j]);
        for (uint32_t j = 0; j < m; j++) ids[j] = NULL;
        src_vl_done(s, false);
        return st;
    }
    src_vl_done(s, true); /* the strings are the caller's now */
    for (uint32_t j = 0; j < m; j++)
        if (!ids[j]) ids[j] = si_xstrdup("");
    return SI_OK;
}

/* ids [lo, lo+m) of f into ids (the caller's strings). */
static si_status read_ids_file(si_source *s, src_file *f, uint64_t lo, uint32_t m, char **ids) {
    if (f->ids_kind == IDS_INDEX) {
        for (uint32_t j = 0; j < m; j++) {
            char b[24];
            snprintf(b, sizeof b, "%llu", (unsigned long long)(f->start + lo + j));
            ids[j] = si_xstrdup(b);
        }
        return SI_OK;
    }
    if (f->ids_kind == IDS_VSTR) return read_vstr_ids(s, f, lo, m, ids);
    si_status st = SI_OK;
    if (f->ids_kind == IDS_FSTR) {
        /* one byte more per string: the terminator HDF5 adds converting to NULLTERM (the width
         * was bounded at open) */
        size_t w = f->ids_size + 1;
        if ((st = si_bytes_reserve(&s->scratch, (size_t)m * w)) != SI_OK) return st;
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, w);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        H5Tset_cset(mt, f->ids_cset);
        st = read_rows(f, f->ids, 1, mt, H5P_DEFAULT, lo, m, s->scratch.data, f->ids_name);
        H5Tclose(mt);
        for (uint32_t j = 0; st == SI_OK && j < m; j++)
            ids[j] = strndup((const char *)s->scratch.data + j * w, w - 1);
        return st;
    }
    if ((st = si_bytes_reserve(&s->scratch, (size_t)m * 8)) != SI_OK) return st;
    int64_t *v = (int64_t *)(void *)s->scratch.data;
    bool u = f->ids_sign == H5T_SGN_NONE;
    st = read_rows(f, f->ids, 1, u ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, H5P_DEFAULT, lo, m, v,
                   f->ids_name);
    for (uint32_t j = 0; st == SI_OK && j < m; j++) {
        char b[24];
        if (u)
            snprintf(b, sizeof b, "%llu", (unsigned long long)(uint64_t)v[j]);
        else
            snprintf(b, sizeof b, "%lld", (long long)v[j]);
        ids[j] = si_xstrdup(b);
    }
    return st;
}

/* Borrows s; ids[0..n) receive malloc'ed strings the caller frees with si_source_free_ids. */
static si_status read_ids_locked(si_source *s, uint64_t first, uint32_t n, char **ids);
si_status si_source_read_ids(si_source *s, uint64_t first, uint32_t n, char **ids) {
    pthread_mutex_lock(&s->mu);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    si_status st = read_ids_locked(s, first, n, ids);
    pthread_mutex_unlock(&s->mu);
    return st;
}

static si_status read_ids_locked(si_source *s, uint64_t first, uint32_t n, char **ids) {
    for (uint32_t j = 0; j < n; j++) ids[j] = NULL;
    si_status st = check_range(s, first, n);
    if (st != SI_OK) return st;
    uint32_t done = 0;
    while (done < n) {
        uint64_t i = first + done;
        src_file *f = &s->files[file_of(s, i)];
        uint64_t lo = i - f->start, avail = f->n - lo;
        uint32_t m = avail < n - done ? (uint32_t)avail : n - done;
        if (f->ids_kind != IDS_INDEX && (st = src_touch(s, f)) != SI_OK) break;
        st = read_ids_file(s, f, lo, m, ids + done);
        si_status id = src_check_unchanged(f);
        if (id != SI_OK) st = id;
        /* what a failed read left in HDF5's buffers must not serve the next read */
        if (st == SI_ERR_FAULT) src_close_handles(s, f);
        if (st != SI_OK) break;
        done += m;
    }
    if (st != SI_OK) si_source_free_ids(ids, n);
    return st;
}

/* Frees ids[0..n) and sets them to NULL; accepts NULL and NULL entries. */
void si_source_free_ids(char **ids, uint32_t n) {
    if (!ids) return;
    for (uint32_t j = 0; j < n; j++) {
        free(ids[j]);
        ids[j] = NULL;
    }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

/* Image i's bytes as the fingerprint takes them (read alone): its bytes, its declared size over
 * the cap, or the message of its own read error. */
static si_status fingerprint_one(si_source *s, uint64_t i, si_bytes *buf, uint64_t *h) {
    uint64_t off[2], big = 0;
    si_status st = si_source_read(s, i, 1, buf, off, &big);
    if (st == SI_OK)
        *h = big               ? fnv1a(*h, &big, sizeof big)
             : off[1] > off[0] ? fnv1a(*h, buf->data + off[0], (size_t)(off[1] - off[0]))
                               : *h;
    else if (st != SI_ERR_FAULT) /* a record's own fault is part of the content; the storage's
                                    is not, and stops */
        *h = fnv1a(*h, si_error_msg(), strlen(si_error_msg()));
    return st == SI_ERR_FAULT ? st : SI_OK;
}

si_status si_source_fingerprint(si_source *s, uint64_t *fp) {
    uint64_t n = si_source_count(s), h = fnv1a(0xcbf29ce484222325ULL, &n, sizeof n);
    const uint32_t samples = n < 64 ? (uint32_t)n : 64;
    si_status st = SI_OK;
    for (uint32_t k = 0; k < samples && st != SI_ERR_FAULT; k++) {
        uint64_t i = samples > 1 ? k * (n - 1) / (samples - 1) : 0;
        char *id = NULL;
        st = si_source_read_ids(s, i, 1, &id);
        if (st == SI_OK && id) h = fnv1a(h, id, strlen(id) + 1);
        si_source_free_ids(&id, 1);
    }
    if (st == SI_ERR_FAULT) return st;
    st = SI_OK;
    /* one image at a time: a read holds at most one record (up to the cap) in memory, and the
     * next image finds the chunks they share in the chunk cache (src_open_dataset sizes it) */
    si_bytes buf = {0};
    for (uint32_t j = 0; j < samples && st == SI_OK; j++) st = fingerprint_one(s, j, &buf, &h);
    si_bytes_free(&buf);
    *fp = h;
    return st == SI_ERR_FAULT ? st : SI_OK;
}

uint64_t si_source_identity(const si_source *s) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < s->nfiles; i++) {
        const struct stat *st = &s->files[i].id;
        /* the change time too: an edit whose mtime was set back (touch -r, cp -p) still moves
         * it, and nothing a user can do sets it back */
        uint64_t v[7] = {(uint64_t)st->st_dev,          (uint64_t)st->st_ino,
                         (uint64_t)st->st_size,         (uint64_t)st->st_mtim.tv_sec,
                         (uint64_t)st->st_mtim.tv_nsec, (uint64_t)st->st_ctim.tv_sec,
                         (uint64_t)st->st_ctim.tv_nsec};
        h = XXH3_64bits_withSeed(v, sizeof v, h);
    }
    return h;
}

const char *si_source_file_path(const si_source *s, int i) {
    return s->files[i].path;
}

bool si_source_file_is(const si_source *s, int i, uint64_t dev, uint64_t ino) {
    return (uint64_t)s->files[i].id.st_dev == dev && (uint64_t)s->files[i].id.st_ino == ino;
}
