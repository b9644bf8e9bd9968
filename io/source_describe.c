/* `shardinfer inspect` of a source: its files, layout, datasets (type, shape, storage, filters)
 * and a sample of the images' encoded sizes. */
#include "io/source_internal.h"

#include <stdlib.h>
#include <string.h>

/* --- describe --------------------------------------------------------------------------------- */

static void print_dims(FILE *out, hid_t sp) {
    hsize_t dims[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_ndims(sp);
    if (r < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        fputs("?", out);
        return;
    }
    fputc('[', out);
    for (int k = 0; k < r; k++) fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)dims[k]);
    fputc(']', out);
}

/* One dataset: type, shape, storage (chunks or contiguous) and the filter pipeline. */
static void describe_dataset(FILE *out, hid_t file, hid_t dapl, const char *role,
                             const char *name) {
    hid_t d = H5Dopen2(file, name, dapl);
    if (d < 0) {
        fprintf(out, "  %-8s %s: cannot open\n", role, name);
        return;
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    char ts[128] = "?";
    if (t >= 0) src_type_str(t, ts, sizeof ts);
    fprintf(out, "  %-8s %s: %s, shape ", role, name, ts);
    if (sp >= 0) print_dims(out, sp);
    H5D_layout_t lay = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    if (lay == H5D_CHUNKED) {
        hsize_t ch[H5S_MAX_RANK];
        int r = H5Pget_chunk(dcpl, H5S_MAX_RANK, ch);
        fputs(", chunks [", out);
        for (int k = 0; k < r; k++)
            fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)ch[k]);
        fputc(']', out);
    } else {
        fputs(lay == H5D_COMPACT ? ", compact" : ", contiguous", out);
    }
    int nf = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
    fputs(nf > 0 ? ", filters: " : ", no filters", out);
    for (int k = 0; k < nf; k++) {
        unsigned flags = 0, cd[8] = {0}, fcfg = 0;
        size_t ncd = 8;
        char fname[64] = "";
        H5Z_filter_t id =
            H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, cd, sizeof fname, fname, &fcfg);
        if (k) fputs(", ", out);
        switch (id) {
        case H5Z_FILTER_DEFLATE: fprintf(out, "gzip level %u", ncd ? cd[0] : 0); break;
        case H5Z_FILTER_SHUFFLE: fputs("shuffle", out); break;
        case H5Z_FILTER_FLETCHER32: fputs("fletcher32", out); break;
        case H5Z_FILTER_SZIP: fputs("szip", out); break;
        case H5Z_FILTER_NBIT: fputs("nbit", out); break;
        case H5Z_FILTER_SCALEOFFSET: fputs("scaleoffset", out); break;
        default:
            fprintf(out, "filter %d (%s%s)", (int)id, fname[0] ? fname : "unknown",
                    H5Zfilter_avail(id) > 0 ? "" : ", NOT AVAILABLE: reads will fail");
            break;
        }
    }
    fputc('\n', out);
    if (nf > 0 && t >= 0 && H5Tget_class(t) == H5T_VLEN)
        fprintf(out, "           (filters of a variable-length dataset compress only its heap "
                     "references, not the records)\n");
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sizes of up to DESCRIBE_SAMPLE images spread over the whole set, read one by one. */
static si_status describe_sample(si_source *s, FILE *out) {
    uint64_t m = s->total < DESCRIBE_SAMPLE ? s->total : DESCRIBE_SAMPLE;
    if (m == 0) return SI_OK;
    uint64_t *sz = si_xmalloc(m * sizeof *sz), off[2], big = 0;
    si_bytes b = {0};
    uint64_t soi = 0;
    si_status st = SI_OK;
    for (uint64_t k = 0; k < m && st == SI_OK; k++) {
        uint64_t i = (uint64_t)((double)k * (double)s->total / (double)m);
        st = si_source_read(s, i, 1, &b, off, &big);
        sz[k] = big ? big : off[1] - off[0];
        if (st == SI_OK && !big && sz[k] >= 2 && b.data[0] == 0xFF && b.data[1] == 0xD8) soi++;
    }
    if (st == SI_OK) {
        qsort(sz, m, sizeof *sz, cmp_u64);
        fprintf(out, "encoded size: min %llu, median %llu, max %llu bytes (%s %llu images)\n",
                (unsigned long long)sz[0], (unsigned long long)sz[m / 2],
                (unsigned long long)sz[m - 1], m == s->total ? "all" : "a sample of",
                (unsigned long long)m);
        fprintf(out, "JPEG SOI marker: %llu of %llu%s\n", (unsigned long long)soi,
                (unsigned long long)m, soi == m ? "" : " (the others will be reported not_jpeg)");
    }
    free(sz);
    si_bytes_free(&b);
    return st;
}

/* Borrows s and out. */
si_status si_source_describe(si_source *s, FILE *out) {
    fprintf(out, "source: %s (%s)\n", s->spec, s->origin);
    fprintf(out, "files: %d\n", s->nfiles);
    for (int i = 0; i < s->nfiles && i < DESCRIBE_FILES; i++)
        fprintf(out, "  %s: %llu images\n", s->files[i].path, (unsigned long long)s->files[i].n);
    if (s->nfiles > DESCRIBE_FILES) fprintf(out, "  ... and %d more\n", s->nfiles - DESCRIBE_FILES);
    fprintf(out, "layout: %s (%s)\n", si_source_layout_name(s->layout),
            s->forced ? "forced" : "detected");
    if (s->ambiguous && !s->forced)
        fprintf(out, "  ambiguous: dims 1 and 3 are both 1 or 3, read as NHWC; if the images "
                     "are stored (N, C, H, W) force --layout dense-nchw\n");
    fprintf(out, "images: %llu\n", (unsigned long long)s->total);
    if (s->nfiles == 0) return SI_OK;
    const src_file *f = &s->files[0];
    hid_t file;
    si_status st = src_guard_file(s, f);
    if (st == SI_OK) st = src_h5_open(f->path, &file);
    if (st != SI_OK) return st;
    fprintf(out, "datasets%s:\n", s->nfiles > 1 ? " (of the first file)" : "");
    describe_dataset(out, file, s->dapl, "images", f->data_name);
    if (s->layout == SI_LAYOUT_PACKED)
        describe_dataset(out, file, s->dapl, "offsets", f->offsets_name);
    if (f->ids_name) describe_dataset(out, file, s->dapl, "ids", f->ids_name);
    H5Fclose(file);
    if (f->ids_name)
        fprintf(out, "ids: dataset %s%s\n", f->ids_name,
                s->nfiles > 1 ? ", as stored in each file (duplicates across files are possible)"
                              : "");
    else
        fprintf(out, "ids: none stored; the global image index in decimal\n");
    if (src_is_dense(s->layout)) {
        fprintf(out, "pixels: H %d, W %d, C %d (%d bytes an image; read as HWC%s)\n", s->h, s->w,
                s->c, s->h * s->w * s->c,
                s->layout == SI_LAYOUT_DENSE_NCHW ? ", transposed from CHW" : "");
        return SI_OK;
    }
    return describe_sample(s, out);
}
