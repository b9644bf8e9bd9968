/* `shardinfer show`: reads a result in blocks and prints a line per image: the top-K classes of a
 * classify result; for the other postprocessors the per-image values (an embedding's first
 * values, the congestion score, the detections). */
#include "io/resultview.h"

#include "io/h5util.h"
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

/* One value of a float/double/int dataset row as text. */
static void print_values(FILE *out, hid_t ds, hsize_t row, int max) {
    hid_t sp = H5Dget_space(ds);
    hsize_t dims[8] = {0};
    int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    hsize_t per = 1;
    for (int d = 1; d < nd; d++) per *= dims[d];
    double *v = si_xmalloc(sizeof(double) * (per ? per : 1));
    hsize_t start[8] = {row}, cnt[8] = {1};
    for (int d = 1; d < nd; d++) cnt[d] = dims[d];
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(nd, cnt, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v) >= 0)
        for (hsize_t j = 0; j < per && j < (hsize_t)max; j++)
            fprintf(out, "%s%.4g", j ? " " : "", v[j]);
    if (per > (hsize_t)max) fprintf(out, " ... (%llu values)", (unsigned long long)per);
    H5Sclose(ms);
    H5Sclose(fs);
    free(v);
}

typedef struct {
    hid_t ds[16];
    char name[16][64];
    int n;
} value_sets;

static herr_t find_values(hid_t loc, const char *name, const H5O_info_t *info, void *arg) {
    value_sets *v = arg;
    if (info->type != H5O_TYPE_DATASET || v->n == 16) return 0;
    if (!strcmp(name, "ids") || !strcmp(name, "index") || !strcmp(name, "status") ||
        !strncmp(name, "errors/", 7) || !strncmp(name, "detections/", 11))
        return 0;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return 0;
    v->ds[v->n] = d;
    snprintf(v->name[v->n++], 64, "%s", name);
    return 0;
}

/* Prints the non-classify results: every per-image dataset's first values, and detections. */
static si_status print_generic(hid_t f, const char *path, long limit, FILE *out) {
    hid_t ids = H5Dopen2(f, "/ids", H5P_DEFAULT), sta = H5Dopen2(f, "/status", H5P_DEFAULT);
    if (ids < 0 || sta < 0) {
        if (ids >= 0) H5Dclose(ids);
        if (sta >= 0) H5Dclose(sta);
        return si_error(SI_ERR_FORMAT, "%s: not a shardinfer result (/ids, /status expected)",
                        path);
    }
    value_sets v = {.n = 0};
    H5Ovisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, find_values, &v);
    hid_t off = H5Lexists(f, "detections", H5P_DEFAULT) > 0
                    ? H5Dopen2(f, "detections/offsets", H5P_DEFAULT)
                    : -1;
    hid_t box = off >= 0 ? H5Dopen2(f, "detections/boxes", H5P_DEFAULT) : -1;
    hid_t sco = off >= 0 ? H5Dopen2(f, "detections/scores", H5P_DEFAULT) : -1;
    hid_t cla = off >= 0 ? H5Dopen2(f, "detections/classes", H5P_DEFAULT) : -1;
    hsize_t n = 0;
    hid_t sp = H5Dget_space(sta);
    H5Sget_simple_extent_dims(sp, &n, NULL);
    H5Sclose(sp);
    if (limit >= 0 && (hsize_t)limit < n) n = (hsize_t)limit;
    hid_t strtype = si_h5_utf8_type();
    si_status st = SI_OK;
    for (hsize_t i = 0; i < n && st == SI_OK; i++) {
        char *id = NULL;
        int32_t s = -1;
        if (read_rows(ids, strtype, i, 1, 1, &id) < 0 ||
            read_rows(sta, H5T_NATIVE_INT32, i, 1, 1, &s) < 0) {
            st = si_error(SI_ERR_IO, "%s: read error at row %llu", path, (unsigned long long)i);
            break;
        }
        fprintf(out, "%-28s %-10s", id ? id : "?", si_image_status_name(s));
        H5free_memory(id);
        for (int k = 0; s == 0 && k < v.n; k++) {
            fprintf(out, " %s: ", v.name[k]);
            print_values(out, v.ds[k], i, 4);
        }
        uint64_t o[2];
        if (s == 0 && off >= 0 && read_rows(off, H5T_NATIVE_UINT64, i, 2, 1, o) >= 0) {
            fprintf(out, " %llu detections", (unsigned long long)(o[1] - o[0]));
            for (uint64_t d = o[0]; d < o[1] && d < o[0] + 3; d++) {
                float b[4], sc;
                int32_t c;
                if (read_rows(box, H5T_NATIVE_FLOAT, d, 1, 4, b) < 0 ||
                    read_rows(sco, H5T_NATIVE_FLOAT, d, 1, 1, &sc) < 0 ||
                    read_rows(cla, H5T_NATIVE_INT32, d, 1, 1, &c) < 0)
                    break;
                fprintf(out, "%s class %d %.3f [%.1f %.1f %.1f %.1f]", d == o[0] ? ":" : " |", c,
                        sc, b[0], b[1], b[2], b[3]);
            }
        }
        fputc('\n', out);
    }
    H5Tclose(strtype);
    hid_t all[4] = {off, box, sco, cla};
    for (int k = 0; k < 4; k++)
        if (all[k] >= 0) H5Dclose(all[k]);
    for (int k = 0; k < v.n; k++) H5Dclose(v.ds[k]);
    H5Dclose(ids);
    H5Dclose(sta);
    return st;
}

/* Why path, which is not an HDF5 file, cannot be shown: missing, or a run not finished yet. */
static si_status not_hdf5(const char *path) {
    char partial[4096];
    snprintf(partial, sizeof partial, "%s.partial", path);
    if (H5Fis_hdf5(partial) > 0)
        return si_error(SI_ERR_FORMAT,
                        "%s: not complete: an interrupted run left %s; finish it by running "
                        "the same command with --resume",
                        path, partial);
    return si_error(SI_ERR_FORMAT, "%s: missing or not an HDF5 file", path);
}

/* The open classify datasets of a result, and the labels that name its classes. */
typedef struct {
    hid_t ids, sta, cls, prob;
    char **lab;
    int nlab;
} topk_view;

/* One line per image of rows [b, b + c): id, status and, for an image that is ok, its top-k. */
static void print_block(const topk_view *v, hsize_t c, hsize_t k, char **idbuf, const int32_t *sbuf,
                        const int32_t *cbuf, const float *pbuf, FILE *out) {
    for (hsize_t i = 0; i < c; i++) {
        fprintf(out, "%-28s %-10s", idbuf[i] ? idbuf[i] : "?", si_image_status_name(sbuf[i]));
        for (hsize_t j = 0; sbuf[i] == 0 && j < k; j++) {
            int32_t cl = cbuf[i * k + j];
            if (cl >= 0 && cl < v->nlab)
                fprintf(out, "%s %s %.3f", j ? " |" : "", v->lab[cl], pbuf[i * k + j]);
            else
                fprintf(out, "%s %d %.3f", j ? " |" : "", cl, pbuf[i * k + j]);
        }
        fputc('\n', out);
    }
}

/* The classify table: up to limit images (all when negative), read in blocks. */
static si_status print_topk(const topk_view *v, const char *path, long limit, FILE *out) {
    hsize_t dims[2] = {0, 0};
    hid_t sp = H5Dget_space(v->cls);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    hsize_t n = dims[0], k = dims[1];
    if (limit >= 0 && (hsize_t)limit < n) n = (hsize_t)limit;
    hid_t strtype = si_h5_utf8_type();
    char **idbuf = si_xmalloc(sizeof(char *) * BLOCK);
    int32_t *sbuf = si_xmalloc(sizeof(int32_t) * BLOCK);
    int32_t *cbuf = si_xmalloc(sizeof(int32_t) * BLOCK * (k ? k : 1));
    float *pbuf = si_xmalloc(sizeof(float) * BLOCK * (k ? k : 1));
    si_status st = SI_OK;
    fprintf(out, "%-28s %-10s top-%llu\n", "image", "status", (unsigned long long)k);
    for (hsize_t b = 0; b < n && st == SI_OK; b += BLOCK) {
        hsize_t c = n - b < BLOCK ? n - b : BLOCK;
        if (read_rows(v->ids, strtype, b, c, 1, idbuf) < 0 ||
            read_rows(v->sta, H5T_NATIVE_INT32, b, c, 1, sbuf) < 0 ||
            read_rows(v->cls, H5T_NATIVE_INT32, b, c, k, cbuf) < 0 ||
            read_rows(v->prob, H5T_NATIVE_FLOAT, b, c, k, pbuf) < 0) {
            st = si_error(SI_ERR_IO, "%s: read error at row %llu", path, (unsigned long long)b);
            break;
        }
        print_block(v, c, k, idbuf, sbuf, cbuf, pbuf, out);
        hid_t ms = H5Screate_simple(1, &c, NULL);
        H5Dvlen_reclaim(strtype, ms, H5P_DEFAULT, idbuf);
        H5Sclose(ms);
    }
    free(idbuf);
    free(sbuf);
    free(cbuf);
    free(pbuf);
    H5Tclose(strtype);
    return st;
}

si_status si_result_print(const char *path, const char *labels, long limit, FILE *out) {
    topk_view v = {.ids = -1, .sta = -1, .cls = -1, .prob = -1};
    if (labels && !(v.lab = read_labels(labels, &v.nlab)))
        return si_error(SI_ERR_IO, "%s: cannot read the labels file", labels);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    si_status st = SI_OK;
    hid_t f = -1;
    if (H5Fis_hdf5(path) <= 0) {
        st = not_hdf5(path);
        goto done;
    }
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0 && H5Lexists(f, "topk_class", H5P_DEFAULT) <= 0) {
        st = print_generic(f, path, limit, out);
        goto done;
    }
    if (f < 0 || (v.ids = H5Dopen2(f, "/ids", H5P_DEFAULT)) < 0 ||
        (v.sta = H5Dopen2(f, "/status", H5P_DEFAULT)) < 0 ||
        (v.cls = H5Dopen2(f, "/topk_class", H5P_DEFAULT)) < 0 ||
        (v.prob = H5Dopen2(f, "/topk_prob", H5P_DEFAULT)) < 0) {
        st = si_error(SI_ERR_FORMAT,
                      "%s: not a shardinfer result (datasets /ids, /status, "
                      "/topk_class, /topk_prob expected)",
                      path);
        goto done;
    }
    st = print_topk(&v, path, limit, out);
done:
    if (v.prob >= 0) H5Dclose(v.prob);
    if (v.cls >= 0) H5Dclose(v.cls);
    if (v.sta >= 0) H5Dclose(v.sta);
    if (v.ids >= 0) H5Dclose(v.ids);
    if (f >= 0) H5Fclose(f);
    for (int i = 0; i < v.nlab; i++) free(v.lab[i]);
    free(v.lab);
    return st;
}
