/* `shardinfer show`: reads /ids, /status, /topk_class, /topk_prob of a result in blocks. */
#include "resultview.h"

#include "h5util.h"
#include <stdlib.h>
#include <string.h>

#define BLOCK 4096

static char **read_labels(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    *n = 0;
    if (!f) return NULL;
    char **names = NULL, line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        names = si_xrealloc(names, sizeof *names * (size_t)(*n + 1));
        names[(*n)++] = si_xstrdup(line);
    }
    fclose(f);
    return names;
}

/* Reads rows [first, first+count) of a 1-D or 2-D dataset into buf with the memory type. */
static herr_t read_rows(hid_t ds, hid_t memtype, hsize_t first, hsize_t count, hsize_t width,
                        void *buf) {
    hid_t fs = H5Dget_space(ds);
    int rank = H5Sget_simple_extent_ndims(fs);
    hsize_t start[2] = {first, 0}, cnt[2] = {count, width};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    hid_t ms = H5Screate_simple(rank, cnt, NULL);
    herr_t rc = H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc;
}

si_status si_result_print(const char *path, const char *labels, long limit, FILE *out) {
    int nlab = 0;
    char **lab = NULL;
    if (labels && !(lab = read_labels(labels, &nlab)))
        return si_error(SI_ERR_IO, "%s: cannot read the labels file", labels);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    si_status st = SI_OK;
    hid_t f = -1, ids = -1, sta = -1, cls = -1, prob = -1, strtype = -1;
    if (H5Fis_hdf5(path) <= 0) {
        st = si_error(SI_ERR_FORMAT, "%s: missing or not an HDF5 file", path);
        goto done;
    }
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0 || (ids = H5Dopen2(f, "/ids", H5P_DEFAULT)) < 0 ||
        (sta = H5Dopen2(f, "/status", H5P_DEFAULT)) < 0 ||
        (cls = H5Dopen2(f, "/topk_class", H5P_DEFAULT)) < 0 ||
        (prob = H5Dopen2(f, "/topk_prob", H5P_DEFAULT)) < 0) {
        st = si_error(SI_ERR_FORMAT,
                      "%s: not a shardinfer result (datasets /ids, /status, "
                      "/topk_class, /topk_prob expected)",
                      path);
        goto done;
    }
    hsize_t dims[2] = {0, 0};
    hid_t sp = H5Dget_space(cls);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    hsize_t n = dims[0], k = dims[1];
    if (limit >= 0 && (hsize_t)limit < n) n = (hsize_t)limit;
    strtype = si_h5_utf8_type();
    char **idbuf = si_xmalloc(sizeof(char *) * BLOCK);
    int32_t *sbuf = si_xmalloc(sizeof(int32_t) * BLOCK);
    int32_t *cbuf = si_xmalloc(sizeof(int32_t) * BLOCK * (k ? k : 1));
    float *pbuf = si_xmalloc(sizeof(float) * BLOCK * (k ? k : 1));
    fprintf(out, "%-28s %-10s top-%llu\n", "image", "status", (unsigned long long)k);
    for (hsize_t b = 0; b < n && st == SI_OK; b += BLOCK) {
        hsize_t c = n - b < BLOCK ? n - b : BLOCK;
        if (read_rows(ids, strtype, b, c, 1, idbuf) < 0 ||
            read_rows(sta, H5T_NATIVE_INT32, b, c, 1, sbuf) < 0 ||
            read_rows(cls, H5T_NATIVE_INT32, b, c, k, cbuf) < 0 ||
            read_rows(prob, H5T_NATIVE_FLOAT, b, c, k, pbuf) < 0) {
            st = si_error(SI_ERR_IO, "%s: read error at row %llu", path, (unsigned long long)b);
            break;
        }
        for (hsize_t i = 0; i < c; i++) {
            fprintf(out, "%-28s %-10s", idbuf[i] ? idbuf[i] : "?", si_image_status_name(sbuf[i]));
            for (hsize_t j = 0; sbuf[i] == 0 && j < k; j++) {
                int32_t cl = cbuf[i * k + j];
                if (cl >= 0 && cl < nlab)
                    fprintf(out, "%s %s %.3f", j ? " |" : "", lab[cl], pbuf[i * k + j]);
                else
                    fprintf(out, "%s %d %.3f", j ? " |" : "", cl, pbuf[i * k + j]);
            }
            fputc('\n', out);
        }
        hid_t ms = H5Screate_simple(1, &c, NULL);
        H5Dvlen_reclaim(strtype, ms, H5P_DEFAULT, idbuf);
        H5Sclose(ms);
    }
    free(idbuf);
    free(sbuf);
    free(cbuf);
    free(pbuf);
done:
    if (strtype >= 0) H5Tclose(strtype);
    if (prob >= 0) H5Dclose(prob);
    if (cls >= 0) H5Dclose(cls);
    if (sta >= 0) H5Dclose(sta);
    if (ids >= 0) H5Dclose(ids);
    if (f >= 0) H5Fclose(f);
    for (int i = 0; i < nlab; i++) free(lab[i]);
    free(lab);
    return st;
}
