/* The decode stage: a read batch's images into an engine slot's input, on the OpenMP pool, by
 * one of three ways picked at start (stages.h). Decode scratch grows to the largest image and
 * stays; failed images are left out and the good rows packed to the front, so a corrupt file
 * costs nothing but its own row. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "stages.h"

/* --resize-on gpu: the slot's packed buffer, shared by the decode threads. Every image of the
 * batch keeps a crop's worth of bytes in reserve until it is placed, so the ones resized here
 * (when the decoded ones do not fit) always find room. */
typedef struct {
    pthread_mutex_t mu;
    size_t used, cap, crop; /* bytes */
    uint32_t pending;       /* images not yet placed */
} pack_state;

/* One batch's decode into the slot's buffers (status/msgs as si_decode_batch). */
typedef void (*decode_fn)(si_decode *d, const si_read_slot *sl, int32_t *status,
                          char (*msgs)[SI_MSG_LEN]);

struct si_decode {
    const si_pipeline_config *cfg;
    si_engine *e;
    si_source *set;
    decode_fn run;
    size_t img;       /* bytes of one crop, (H, W, 3) */
    si_decoder **dec; /* [nthreads] */
    int nthreads;
    int ph, pw, pch;    /* pre-decoded sets: the file's pixel shape */
    uint8_t *gray_rgb;  /* pre-decoded gray: RGB per thread, reused */
    bool packed;        /* decode into the slot's packed buffer */
    pack_state pk;      /* with packed */
    si_rs_item *jitems; /* [B] with packed: image j's item, before the good rows move up */
    uint64_t spilled;   /* with packed: this batch's images resized here */
    /* the slot being filled */
    uint8_t *px, *pool;
    si_rs_item *items;
};

/* Room for an image of `need` bytes at *off, if the others' reserve stays whole; need = crop
 * always fits. Without room (false) the image is still pending. */
static bool pack_take(pack_state *pk, size_t need, uint64_t *off) {
    pthread_mutex_lock(&pk->mu);
    SI_ASSERT(pk->pending > 0);
    bool ok = pk->used + need + (size_t)(pk->pending - 1) * pk->crop <= pk->cap;
    if (ok) {
        *off = pk->used;
        pk->used += need;
        pk->pending--;
    }
    pthread_mutex_unlock(&pk->mu);
    SI_ASSERT(ok || need > pk->crop);
    return ok;
}

/* An image that failed: its reserve goes back. */
static void pack_drop(pack_state *pk) {
    pthread_mutex_lock(&pk->mu);
    pk->pending--;
    pthread_mutex_unlock(&pk->mu);
}

/* Decodes image j at its DCT scale into the packed buffer for the GPU's resize, or resizes it
 * here into a crop-sized place when it does not fit (counted in *cpu_resized). */
static si_image_status decode_packed(si_decoder *d, const uint8_t *data, size_t len,
                                     const si_preproc *pre, pack_state *pk, uint8_t *pool,
                                     si_rs_item *it, uint64_t *cpu_resized, char *msg, size_t cap) {
    const uint8_t *img;
    int w, h;
    si_image_status st = si_decode_scaled(d, data, len, pre, &img, &w, &h, msg, cap);
    if (st != SI_IMG_OK) {
        pack_drop(pk);
        return st;
    }
    int fits = si_rs_item_make(w, h, pre->resize, pre->interp, pre->crop_h, pre->crop_w, it);
    SI_ASSERT(fits); /* the decoder checked that the crop fits */
    size_t need = (size_t)w * (size_t)h * 3;
    if (si_rs_gpu_fits(it) && pack_take(pk, need, &it->off)) {
        memcpy(pool + it->off, img, need);
        return SI_IMG_OK;
    }
    bool placed = pack_take(pk, pk->crop, &it->off);
    SI_ASSERT(placed);
#pragma omp atomic
    (*cpu_resized)++;
    if (si_decoder_resize_crop(d, img, w, h, pre, pool + it->off) != SI_OK) {
        snprintf(msg, cap, "%s", si_error_msg());
        return SI_IMG_TOO_LARGE;
    }
    /* the crop as it is: resizing a crop-sized image to itself is the identity (with either
     * filter: its weights at the input pixels are 1 there and 0 at the neighbours) */
    it->w = it->rw = pre->crop_w;
    it->h = it->rh = pre->crop_h;
    it->top = it->left = 0;
    return SI_IMG_OK;
}

/* Pre-decoded images: resize and crop only. */
static void decode_from_pixels(si_decode *d, const si_read_slot *sl, int32_t *status,
                               char (*msgs)[SI_MSG_LEN]) {
    const size_t plane = (size_t)d->ph * (size_t)d->pw;
#pragma omp parallel for schedule(dynamic, 1)
    for (uint32_t j = 0; j < sl->n; j++) {
        if (status[j] != SI_IMG_OK) continue;
        const uint8_t *px = sl->buf.data + sl->off[j];
        uint8_t *rgb = (uint8_t *)(uintptr_t)px;
        if (d->pch == 1) { /* gray: replicate into this thread's scratch */
            rgb = d->gray_rgb + (size_t)omp_get_thread_num() * plane * 3;
            for (size_t i = 0; i < plane; i++) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = px[i];
        }
        if (si_decoder_resize_crop(d->dec[omp_get_thread_num()], rgb, d->pw, d->ph, &d->cfg->pre,
                                   d->px + d->img * j) != SI_OK) {
            status[j] = SI_IMG_UNSUPPORTED;
            snprintf(msgs[j], SI_MSG_LEN, "%s", si_error_msg());
        }
    }
}

/* JPEGs at their DCT scale into the slot's packed buffer, for the GPU's resize. */
static void decode_for_gpu_resize(si_decode *d, const si_read_slot *sl, int32_t *status,
                                  char (*msgs)[SI_MSG_LEN]) {
    uint64_t spilled = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : spilled)
    for (uint32_t j = 0; j < sl->n; j++) {
        if (status[j] != SI_IMG_OK) {
            pack_drop(&d->pk);
            continue;
        }
        msgs[j][0] = 0;
        status[j] = (int32_t)decode_packed(d->dec[omp_get_thread_num()], sl->buf.data + sl->off[j],
                                           sl->off[j + 1] - sl->off[j], &d->cfg->pre, &d->pk,
                                           d->pool, &d->jitems[j], &spilled, msgs[j], SI_MSG_LEN);
    }
    d->spilled = spilled;
}

/* JPEGs decoded, resized and cropped here. */
static void decode_crops(si_decode *d, const si_read_slot *sl, int32_t *status,
                         char (*msgs)[SI_MSG_LEN]) {
#pragma omp parallel for schedule(dynamic, 1)
    for (uint32_t j = 0; j < sl->n; j++) {
        if (status[j] != SI_IMG_OK) continue;
        msgs[j][0] = 0;
        status[j] = (int32_t)si_decode_crop(d->dec[omp_get_thread_num()], sl->buf.data + sl->off[j],
                                            sl->off[j + 1] - sl->off[j], &d->cfg->pre,
                                            d->px + d->img * j, msgs[j], SI_MSG_LEN);
    }
}

si_decode *si_decode_create(const si_pipeline_config *cfg, si_engine *e, si_source *set) {
    const size_t B = (size_t)cfg->batch;
    si_decode *d = si_xcalloc(1, sizeof *d);
    d->cfg = cfg;
    d->e = e;
    d->set = set;
    d->img = (size_t)cfg->pre.crop_h * (size_t)cfg->pre.crop_w * 3;
    d->nthreads = omp_get_max_threads();
    d->dec = si_xcalloc((size_t)d->nthreads, sizeof *d->dec);
    for (int t = 0; t < d->nthreads; t++)
        if (!(d->dec[t] = si_decoder_create()))
            si_fatal(__FILE__, __LINE__, "si_decoder_create", NULL);
    bool pixels_in = si_source_pixel_shape(set, &d->ph, &d->pw, &d->pch);
    if (pixels_in && d->pch == 1)
        d->gray_rgb = si_xmalloc((size_t)d->ph * (size_t)d->pw * 3 * (size_t)d->nthreads);
    /* --resize-on gpu, where the engine resizes (encoded JPEGs only: pre-decoded sets are
     * resized here from the file's pixels) */
    si_rs_item *items;
    size_t cap;
    d->packed = cfg->gpu_resize && !pixels_in && si_engine_pack(e, 0, &items, &cap) != NULL;
    d->pk.crop = d->img;
    pthread_mutex_init(&d->pk.mu, NULL);
    d->jitems = si_xmalloc(sizeof(si_rs_item) * B);
    d->run = pixels_in ? decode_from_pixels : d->packed ? decode_for_gpu_resize : decode_crops;
    return d;
}

void si_decode_free(si_decode *d) {
    if (!d) return;
    for (int t = 0; t < d->nthreads; t++) si_decoder_destroy(d->dec[t]);
    free(d->dec);
    free(d->gray_rgb);
    free(d->jitems);
    pthread_mutex_destroy(&d->pk.mu);
    free(d);
}

/* The good rows into rowmap, in order; the others' failures logged (read errors were logged by
 * the reader). */
static int good_rows(si_decode *d, const si_read_slot *sl, const int32_t *status,
                     char (*msgs)[SI_MSG_LEN], int32_t *rowmap) {
    int rows = 0;
    for (uint32_t j = 0; j < sl->n; j++) {
        if (status[j] == SI_IMG_OK) {
            rowmap[rows++] = (int32_t)j;
        } else if (status[j] != SI_IMG_READ_ERROR) {
            char *id = NULL;
            if (si_source_read_ids(d->set, sl->first + j, 1, &id) != SI_OK) id = NULL;
            si_log_warn("image %llu '%s': %s: %s", (unsigned long long)(sl->first + j),
                        id ? id : "?", si_image_status_name(status[j]), msgs[j][0] ? msgs[j] : "-");
            free(id);
        }
    }
    return rows;
}

int si_decode_batch(si_decode *d, int slot, const si_read_slot *sl, int32_t *status,
                    char (*msgs)[SI_MSG_LEN], int32_t *rowmap, size_t *packed,
                    uint64_t *cpu_resized) {
    d->px = si_engine_pixels(d->e, slot);
    if (d->packed) {
        d->pool = si_engine_pack(d->e, slot, &d->items, &d->pk.cap);
        d->pk.used = 0;
        d->pk.pending = sl->n;
        d->spilled = 0;
        SI_ASSERT(d->pool && d->pk.crop * sl->n <= d->pk.cap);
    }
    d->run(d, sl, status, msgs);
    int rows = good_rows(d, sl, status, msgs, rowmap);
    *packed = d->packed ? d->pk.used : 0;
    if (d->packed) { /* the good rows' items to the front; the pixels stay where they are */
        for (int r = 0; r < rows; r++) d->items[r] = d->jitems[rowmap[r]];
        *cpu_resized += d->spilled;
    } else { /* the good rows' crops to the front of the slot's input, as decoded */
        for (int r = 0; r < rows; r++)
            if (rowmap[r] != r)
                memcpy(d->px + d->img * (size_t)r, d->px + d->img * (size_t)rowmap[r], d->img);
    }
    return rows;
}
