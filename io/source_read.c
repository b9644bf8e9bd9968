/* The readers of an image source (io/source.h): encoded records (packed, vlen), pixels (dense) and
 * ids, across the files of a source, reopening evicted files as they are met. */
#include "io/source_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Packed through imageset.c; appends at buf->len (a first segment is read in place). */
static si_status read_set(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                          uint64_t *off) {
    if (buf->len == 0) return si_imageset_read(f->set, lo, m, buf, off);
    si_status st = si_imageset_read(f->set, lo, m, &s->scratch, off);
    if (st != SI_OK) return st;
    size_t base = buf->len;
    if ((st = si_bytes_reserve(buf, base + s->scratch.len)) != SI_OK) return st;
    memcpy(buf->data + base, s->scratch.data, s->scratch.len);
    buf->len += s->scratch.len;
    for (uint32_t j = 0; j <= m; j++) off[j] += base;
    return SI_OK;
}

/* Packed with other dataset names: the same reads as imageset.c, appended at buf->len. */
static si_status read_packed(src_file *f, uint64_t lo, uint32_t m, si_bytes *buf, uint64_t *off) {
    hid_t fs, ms;
    herr_t e = select_rows(f->offsets, 1, lo, (uint64_t)m + 1, &fs, &ms);
    if (e >= 0) e = H5Dread(f->offsets, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, off);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->offsets_name, lo, (uint64_t)m + 1);
    for (uint32_t j = 0; j < m; j++)
        if (off[j + 1] < off[j])
            return si_error(SI_ERR_FORMAT, "%s: %s is not monotonic at image %llu", f->path,
                            f->offsets_name, (unsigned long long)(lo + j));
    if (off[m] > f->total)
        return si_error(SI_ERR_FORMAT, "%s: image %llu ends past the end of %s", f->path,
                        (unsigned long long)(lo + m - (m > 0)), f->data_name);
    uint64_t first = off[0], len = off[m] - first;
    size_t base = buf->len;
    si_status st = si_bytes_reserve(buf, base + (size_t)len);
    if (st != SI_OK) return st;
    if (len > 0) {
        e = select_rows(f->data, 1, first, len, &fs, &ms);
        if (e >= 0) e = H5Dread(f->data, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf->data + base);
        if (ms >= 0) H5Sclose(ms);
        if (fs >= 0) H5Sclose(fs);
        if (e < 0) return read_fail(f, f->data_name, lo, m);
    }
    buf->len = base + (size_t)len;
    for (uint32_t j = 0; j <= m; j++) off[j] = off[j] - first + base;
    return SI_OK;
}

/* vlen: one H5Dread of the range into hvl_t records, copied out and reclaimed. */
static si_status read_vlen(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                           uint64_t *off) {
    if (m > s->vl_cap) {
        free(s->vl);
        s->vl = si_xmalloc((size_t)m * sizeof *s->vl);
        s->vl_cap = m;
    }
    memset(s->vl, 0, (size_t)m * sizeof *s->vl);
    hid_t fs, ms;
    herr_t e = select_rows(f->data, 1, lo, m, &fs, &ms);
    if (e >= 0) e = H5Dread(f->data, s->vlen_u8, ms, fs, H5P_DEFAULT, s->vl);
    si_status st = SI_OK;
    if (e < 0) {
        /* what a failed read left allocated is unknown: leak rather than risk a double free */
        st = read_fail(f, f->data_name, lo, m);
    } else {
        size_t total = buf->len;
        for (uint32_t j = 0; j < m; j++) total += s->vl[j].len;
        st = si_bytes_reserve(buf, total);
        if (st == SI_OK) {
            size_t pos = buf->len;
            for (uint32_t j = 0; j < m; j++) {
                off[j] = pos;
                if (s->vl[j].len) memcpy(buf->data + pos, s->vl[j].p, s->vl[j].len);
                pos += s->vl[j].len;
            }
            off[m] = pos;
            buf->len = pos;
        }
        vlen_reclaim(s->vlen_u8, ms, H5P_DEFAULT, s->vl);
    }
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return st;
}

/* dense: one hyperslab read of m images, NHWC straight into buf, NCHW through scratch. */
static si_status read_dense(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                            uint64_t *off) {
    size_t img = (size_t)s->h * s->w * s->c, base = buf->len;
    if (m > (SIZE_MAX - base) / (img ? img : 1))
        return si_error(SI_ERR_NOMEM, "%s: %u images of %zu bytes", f->path, m, img);
    size_t bytes = (size_t)m * img;
    si_status st = si_bytes_reserve(buf, base + bytes);
    if (st != SI_OK) return st;
    bool nchw = s->layout == SI_LAYOUT_DENSE_NCHW;
    if (nchw && (st = si_bytes_reserve(&s->scratch, bytes)) != SI_OK) return st;
    uint8_t *dst = nchw ? s->scratch.data : buf->data + base;
    hid_t fs, ms;
    herr_t e = select_rows(f->data, 4, lo, m, &fs, &ms);
    if (e >= 0 && m > 0) e = H5Dread(f->data, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->data_name, lo, m);
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
    buf->len = base + bytes;
    return SI_OK;
}

/* Borrows s; grows buf and fills off[0..n] (both owned by the caller). */
static si_status read_locked(si_source *s, uint64_t first, uint32_t n, si_bytes *buf,
                             uint64_t *off);
si_status si_source_read(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off) {
    pthread_mutex_lock(&s->mu);
    si_status st = read_locked(s, first, n, buf, off);
    pthread_mutex_unlock(&s->mu);
    return st;
}

static si_status read_locked(si_source *s, uint64_t first, uint32_t n, si_bytes *buf,
                             uint64_t *off) {
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
        if ((st = src_touch(s, f)) != SI_OK) return st;
        /* off + done: this segment's first offset lands on the previous one's last, which has
         * the same value (buf->len) */
        switch (s->layout) {
        case SI_LAYOUT_PACKED:
            st = f->use_set ? read_set(s, f, lo, m, buf, off + done)
                            : read_packed(f, lo, m, buf, off + done);
            break;
        case SI_LAYOUT_VLEN: st = read_vlen(s, f, lo, m, buf, off + done); break;
        default: st = read_dense(s, f, lo, m, buf, off + done); break;
        }
        /* a changed file explains any failure, and a read that "worked" may hold its zeros */
        si_status id = src_check_unchanged(f);
        if (id != SI_OK) return id;
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
    if (f->ids_kind == IDS_SET) return si_imageset_read_ids(f->set, lo, m, ids);
    hid_t fs, ms;
    herr_t e = select_rows(f->ids, 1, lo, m, &fs, &ms);
    if (f->ids_kind == IDS_VSTR) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, f->ids_cset);
        if (e >= 0) e = H5Dread(f->ids, mt, ms, fs, s->ids_dxpl, ids);
        H5Tclose(mt);
        if (e < 0)
            for (uint32_t j = 0; j < m; j++) ids[j] = NULL; /* unknown state: leak, not free */
        for (uint32_t j = 0; e >= 0 && j < m; j++)
            if (!ids[j]) ids[j] = si_xstrdup("");
    } else if (f->ids_kind == IDS_FSTR) {
        /* one byte more per string: the terminator HDF5 adds converting to NULLTERM */
        size_t w = f->ids_size + 1;
        si_status st = si_bytes_reserve(&s->scratch, (size_t)m * w);
        if (st != SI_OK) e = -1;
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, w);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        H5Tset_cset(mt, f->ids_cset);
        if (e >= 0) e = H5Dread(f->ids, mt, ms, fs, H5P_DEFAULT, s->scratch.data);
        H5Tclose(mt);
        for (uint32_t j = 0; e >= 0 && j < m; j++)
            ids[j] = strndup((const char *)s->scratch.data + j * w, w - 1);
    } else {
        int64_t *v = NULL;
        si_status st = si_bytes_reserve(&s->scratch, (size_t)m * 8);
        if (st == SI_OK) v = (int64_t *)(void *)s->scratch.data;
        bool u = f->ids_sign == H5T_SGN_NONE;
        if (e >= 0 && v)
            e = H5Dread(f->ids, u ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, v);
        else
            e = -1;
        for (uint32_t j = 0; e >= 0 && j < m; j++) {
            char b[24];
            if (u)
                snprintf(b, sizeof b, "%llu", (unsigned long long)(uint64_t)v[j]);
            else
                snprintf(b, sizeof b, "%lld", (long long)v[j]);
            ids[j] = si_xstrdup(b);
        }
    }
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->ids_name, lo, m);
    return SI_OK;
}

/* Borrows s; ids[0..n) receive malloc'ed strings the caller frees with si_source_free_ids. */
static si_status read_ids_locked(si_source *s, uint64_t first, uint32_t n, char **ids);
si_status si_source_read_ids(si_source *s, uint64_t first, uint32_t n, char **ids) {
    pthread_mutex_lock(&s->mu);
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
        if (st != SI_OK) break;
        done += m;
    }
    if (st != SI_OK) si_source_free_ids(ids, n);
    return st;
}

/* Frees ids[0..n) and sets them to NULL; accepts NULL and NULL entries. */
void si_source_free_ids(char **ids, uint32_t n) {
    si_imageset_free_ids(ids, n); /* the same strings, however they were read */
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t si_source_fingerprint(si_source *s) {
    uint64_t n = si_source_count(s), h = fnv1a(0xcbf29ce484222325ULL, &n, sizeof n);
    const uint64_t samples = n < 64 ? n : 64;
    si_bytes buf = {0};
    for (uint64_t k = 0; k < samples; k++) {
        uint64_t i = samples > 1 ? k * (n - 1) / (samples - 1) : 0, off[2];
        char *id = NULL;
        if (si_source_read_ids(s, i, 1, &id) == SI_OK && id) h = fnv1a(h, id, strlen(id) + 1);
        si_source_free_ids(&id, 1);
        if (si_source_read(s, i, 1, &buf, off) == SI_OK)
            h = fnv1a(h, buf.data + off[0], (size_t)(off[1] - off[0]));
        else
            h = fnv1a(h, si_error_msg(), strlen(si_error_msg()));
    }
    si_bytes_free(&buf);
    return h;
}
