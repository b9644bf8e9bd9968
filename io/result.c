/* Writing the result file (layout in result.h). The numeric columns are already in memory and go
 * out in one write each; the ids are copied from the input set in blocks so that memory stays
 * bounded. Written as PATH.tmp and renamed, so a reader never sees a half-written result. */
#include "result.h"

#include "h5util.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ids per read from the input and per write; also the chunk length of the columns */
#define ID_BLOCK       65536
#define FORMAT_VERSION 1

/* Creates dataset `name` of rank 1 (k < 0) or 2 ([n, k]) and writes buf (memory type mt) into
 * it, unless buf is NULL (the ids, written later in blocks). Chunked, and compressed where the
 * filters exist (status and classes compress well); empty datasets are left contiguous since a
 * chunk cannot have a zero dimension. */
static hid_t write_col(hid_t file, const char *name, hid_t ftype, hid_t mt, uint64_t n, int k,
                       const void *buf) {
    int rank = k < 0 ? 1 : 2;
    hsize_t dims[2] = {n, k < 0 ? 1 : (hsize_t)k}, chunk[2];
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (n > 0 && dims[1] > 0) {
        uint64_t rows = ID_BLOCK / dims[1];
        if (rows == 0) rows = 1;
        chunk[0] = n < rows ? n : rows;
        chunk[1] = dims[1];
        H5Pset_chunk(dcpl, rank, chunk);
        if (H5Tget_class(ftype) != H5T_STRING && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 4);
        }
    }
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(file, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    H5Pclose(dcpl);
    if (d >= 0 && buf && n > 0 && dims[1] > 0 &&
        H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        H5Dclose(d);
        return H5I_INVALID_HID;
    }
    return d;
}

/* Fills ids[0..m) with the input ids of rows [r0, r0+m): runs of consecutive indices are read
 * with one call each (a whole block in the usual case, where index is 0..N-1 in order). */
static si_status gather_ids(si_source *in, const uint64_t *index, uint64_t r0, uint32_t m,
                            char **ids) {
    uint64_t count = si_source_count(in);
    for (uint32_t j = 0; j < m;) {
        uint64_t first = index[r0 + j];
        if (first >= count) {
            si_source_free_ids(ids, j);
            return si_error(SI_ERR_ARG, "result row %llu: index %llu is past the %llu images of %s",
                            (unsigned long long)(r0 + j), (unsigned long long)first,
                            (unsigned long long)count, si_source_spec(in));
        }
        uint32_t run = 1;
        while (j + run < m && index[r0 + j + run] == first + run && first + run < count) run++;
        si_status st = si_source_read_ids(in, first, run, ids + j);
        if (st != SI_OK) {
            si_source_free_ids(ids, j);
            return st;
        }
        j += run;
    }
    return SI_OK;
}

static si_status write_all(hid_t file, hid_t strtype, const char *tmp, const si_result_meta *meta,
                           const si_result_cols *c, si_source *input) {
    uint64_t n = c->n;
    hid_t d[5] = {
        write_col(file, "ids", strtype, strtype, n, -1, NULL),
        write_col(file, "index", H5T_STD_U64LE, H5T_NATIVE_UINT64, n, -1, c->index),
        write_col(file, "status", H5T_STD_I32LE, H5T_NATIVE_INT32, n, -1, c->status),
        write_col(file, "topk_class", H5T_STD_I32LE, H5T_NATIVE_INT32, n, c->k, c->topk_class),
        write_col(file, "topk_prob", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, c->k, c->topk_prob),
    };
    static const char *names[5] = {"/ids", "/index", "/status", "/topk_class", "/topk_prob"};
    si_status st = SI_OK;
    for (int i = 0; i < 5 && st == SI_OK; i++)
        if (d[i] < 0) st = si_error(SI_ERR_IO, "%s: cannot write %s (disk full?)", tmp, names[i]);

    char **ids = si_xcalloc(ID_BLOCK, sizeof *ids);
    for (uint64_t r0 = 0; st == SI_OK && r0 < n; r0 += ID_BLOCK) {
        uint32_t m = (uint32_t)(n - r0 < ID_BLOCK ? n - r0 : ID_BLOCK);
        st = gather_ids(input, c->index, r0, m, ids);
        if (st != SI_OK) break;
        hsize_t start = r0, count = m;
        hid_t fs = H5Dget_space(d[0]), ms = H5Screate_simple(1, &count, NULL);
        herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
        if (e >= 0) e = H5Dwrite(d[0], strtype, ms, fs, H5P_DEFAULT, ids);
        H5Sclose(ms);
        H5Sclose(fs);
        si_source_free_ids(ids, m);
        if (e < 0) st = si_error(SI_ERR_IO, "%s: cannot write /ids (disk full?)", tmp);
    }
    free(ids);
    for (int i = 0; i < 5; i++)
        if (d[i] >= 0) H5Dclose(d[i]);
    if (st != SI_OK) return st;

    /* the failures' messages, sparse: the file stays small when few images fail */
    hid_t grp = H5Gcreate2(file, "errors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ei = grp >= 0 ? write_col(grp, "index", H5T_STD_U64LE, H5T_NATIVE_UINT64, c->n_errors, -1,
                                    c->err_index)
                        : H5I_INVALID_HID;
    hid_t em = grp >= 0 ? write_col(grp, "message", strtype, strtype, c->n_errors, -1,
                                    c->n_errors ? (const void *)c->err_msg : NULL)
                        : H5I_INVALID_HID;
    if (ei < 0 || em < 0) st = si_error(SI_ERR_IO, "%s: cannot write /errors (disk full?)", tmp);
    if (ei >= 0) H5Dclose(ei);
    if (em >= 0) H5Dclose(em);
    if (grp >= 0) H5Gclose(grp);
    if (st != SI_OK) return st;

    uint64_t failed = 0;
    for (uint64_t i = 0; i < n; i++) failed += c->status[i] != SI_IMG_OK;
    int version = FORMAT_VERSION;
    herr_t e = si_h5_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    if (e >= 0) e = si_h5_attr_str(file, "shardinfer_version", strtype, SI_VERSION);
    if (e >= 0) e = si_h5_attr_str(file, "model", strtype, meta->model_path);
    if (e >= 0) e = si_h5_attr_str(file, "model_sha256", strtype, meta->model_sha256);
    if (e >= 0) e = si_h5_attr_str(file, "input", strtype, meta->input_path);
    if (e >= 0) e = si_h5_attr(file, "ranks", H5T_STD_I32LE, H5T_NATIVE_INT, &meta->ranks);
    if (e >= 0)
        e = si_h5_attr(file, "batch_size", H5T_STD_I32LE, H5T_NATIVE_INT, &meta->batch_size);
    if (e >= 0)
        e = si_h5_attr(file, "elapsed_seconds", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                       &meta->elapsed_seconds);
    if (e >= 0) e = si_h5_attr(file, "images", H5T_STD_U64LE, H5T_NATIVE_UINT64, &n);
    if (e >= 0) e = si_h5_attr(file, "failed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &failed);
    if (e >= 0) e = si_h5_attr_str(file, "command_line", strtype, meta->command_line);
    if (e >= 0 && meta->preprocess)
        e = si_h5_attr_str(file, "preprocess", strtype, meta->preprocess);
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write the root attributes", tmp);
    return SI_OK;
}

/* Borrows every argument; on failure neither PATH nor PATH.tmp is left behind. */
si_status si_result_write(const char *path, bool overwrite, const si_result_meta *meta,
                          const si_result_cols *cols, si_source *input) {
    SI_ASSERT(path && meta && cols && input && cols->k >= 0);
    SI_ASSERT(cols->n == 0 || (cols->index && cols->status));
    SI_ASSERT(cols->n == 0 || cols->k == 0 || (cols->topk_class && cols->topk_prob));
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    struct stat sb;
    if (!overwrite && stat(path, &sb) == 0)
        return si_error(SI_ERR_IO, "%s: already exists; not overwriting it", path);
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", path) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "out of memory");
    si_status st;
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        st = si_error(SI_ERR_IO, "%s: cannot create", tmp);
    } else {
        hid_t strtype = si_h5_utf8_type();
        st = write_all(file, strtype, tmp, meta, cols, input);
        H5Tclose(strtype);
        if (H5Fclose(file) < 0 && st == SI_OK)
            st = si_error(SI_ERR_IO, "%s: cannot close (disk full?)", tmp);
        if (st == SI_OK && rename(tmp, path) != 0)
            st = si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
        if (st != SI_OK) unlink(tmp);
    }
    free(tmp);
    return st;
}
