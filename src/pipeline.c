/* The per-rank batch loop. Buffers are sized once for the batch; decode scratch grows to the
 * largest image and stays. Failed images are left out of the model's batch (the good ones are
 * packed to the front), so a corrupt file costs nothing but its own row. */
#include "pipeline.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "postprocess.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

si_status si_pipeline_check_model(si_graph *g, si_pipeline_config *cfg, int64_t *classes) {
    const si_value *in = &g->values[g->inputs[0]];
    if (g->n_inputs != 1)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: the model has %d inputs; an image classifier "
                        "takes one (N, 3, H, W) tensor",
                        g->path, g->n_inputs);
    if (in->shape.ndim != 4 || in->shape.dims[1] != 3)
        return si_error(SI_ERR_UNSUPPORTED, "%s: input '%s' is not (N, 3, H, W)", g->path,
                        in->name);
    if (!in->batch_dim && in->shape.dims[0] != cfg->batch)
        return si_error(SI_ERR_ARG,
                        "%s: the model's batch dimension is fixed at %lld; run it "
                        "with --batch %lld",
                        g->path, (long long)in->shape.dims[0], (long long)in->shape.dims[0]);
    si_status st = si_graph_infer(g, in->batch_dim ? 1 : (int)in->shape.dims[0]);
    if (st != SI_OK) return st;
    int h = (int)in->shape.dims[2], w = (int)in->shape.dims[3];
    if (cfg->pre.crop_h == 0) {
        cfg->pre.crop_h = h;
        cfg->pre.crop_w = w;
    } else if (cfg->pre.crop_h != h || cfg->pre.crop_w != w) {
        return si_error(SI_ERR_ARG, "--crop %dx%d does not match the model's input %dx%d",
                        cfg->pre.crop_h, cfg->pre.crop_w, h, w);
    }
    if (cfg->pre.resize == 0) /* the usual 0.875 center crop: 224 from 256 */
        cfg->pre.resize = (int)((h > w ? h : w) / 0.875 + 0.5);
    if (cfg->pre.resize < (h > w ? h : w))
        return si_error(SI_ERR_ARG, "--resize %d is smaller than the crop %dx%d", cfg->pre.resize,
                        h, w);
    const si_value *out = &g->values[g->outputs[0]];
    int64_t per = 1;
    for (int d = 1; d < out->shape.ndim; d++) per *= out->shape.dims[d];
    if (out->shape.ndim < 2 || per < 1)
        return si_error(SI_ERR_UNSUPPORTED, "%s: output '%s' is not (N, classes)", g->path,
                        out->name);
    if (cfg->topk > per) cfg->topk = (int)per;
    *classes = per;
    return SI_OK;
}

void si_share_result_add_error(si_share_result *r, uint64_t index, const char *msg) {
    if (r->n_errors == r->err_cap) {
        r->err_cap = r->err_cap ? 2 * r->err_cap : 64;
        r->err_index = si_xrealloc(r->err_index, sizeof *r->err_index * r->err_cap);
        r->err_msg = si_xrealloc(r->err_msg, sizeof *r->err_msg * r->err_cap);
    }
    r->err_index[r->n_errors] = index;
    r->err_msg[r->n_errors++] = si_xstrdup(msg && msg[0] ? msg : "-");
}

void si_share_result_free(si_share_result *r) {
    if (!r) return;
    for (uint64_t i = 0; i < r->n_errors; i++) free(r->err_msg[i]);
    free(r->err_index);
    free(r->err_msg);
    free(r->index);
    free(r->status);
    free(r->topk_class);
    free(r->topk_prob);
    memset(r, 0, sizeof *r);
}

/* Reads a batch; if the one large read fails, reads image by image so that one bad record
 * costs only itself. */
static void read_batch(si_source *set, uint64_t b0, uint32_t n, si_bytes *buf, uint64_t *off,
                       int32_t *status, char (*msg)[256], si_bytes *one) {
    if (si_source_read(set, b0, n, buf, off) == SI_OK) return;
    si_log_warn("%s: batch read of images %llu..%llu failed (%s); reading them one by one",
                si_source_spec(set), (unsigned long long)b0, (unsigned long long)(b0 + n - 1),
                si_error_msg());
    buf->len = 0;
    off[0] = 0;
    for (uint32_t j = 0; j < n; j++) {
        uint64_t o[2];
        off[j + 1] = off[j];
        if (si_source_read(set, b0 + j, 1, one, o) != SI_OK ||
            si_bytes_reserve(buf, off[j] + (o[1] - o[0])) != SI_OK) {
            status[j] = SI_IMG_READ_ERROR;
            snprintf(msg[j], sizeof msg[j], "read error: %s", si_error_msg());
            si_log_error("image %llu: %s", (unsigned long long)(b0 + j), msg[j]);
            continue;
        }
        memcpy(buf->data + off[j], one->data + o[0], o[1] - o[0]);
        off[j + 1] = off[j] + (o[1] - o[0]);
    }
}

/* --- prefetch: a reader thread fills a ring of batch slots while the caller decodes ------------
 */
#define PREFETCH_SLOTS 3 /* the batch being decoded + up to two read ahead: bounded memory */

typedef struct {
    si_bytes buf;
    uint64_t *off;    /* [B+1] */
    int32_t *status;  /* [B]: SI_IMG_READ_ERROR for records that could not be read */
    char (*msg)[256]; /* [B]: why, for those */
    uint64_t first;
    uint32_t n;
} slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot slots[PREFETCH_SLOTS];
    int filled; /* slots read and not yet consumed */
    bool stop;  /* the consumer gave up: the reader leaves */
    si_source *set;
    uint64_t first, count;
    int batch;
    double read_seconds; /* the reader's busy time */
    uint64_t bytes;
} prefetcher;

static void *reader_main(void *arg) {
    prefetcher *pf = arg;
    si_bytes one = {0};
    uint64_t k = 0;
    for (uint64_t done = 0; done < pf->count; done += pf->slots[k++ % PREFETCH_SLOTS].n) {
        pthread_mutex_lock(&pf->mu);
        while (pf->filled == PREFETCH_SLOTS && !pf->stop) pthread_cond_wait(&pf->cv, &pf->mu);
        bool stop = pf->stop;
        pthread_mutex_unlock(&pf->mu);
        if (stop) break;
        slot *sl = &pf->slots[k % PREFETCH_SLOTS];
        uint64_t left = pf->count - done;
        sl->n = (uint32_t)(left < (uint64_t)pf->batch ? left : (uint64_t)pf->batch);
        sl->first = pf->first + done;
        for (uint32_t j = 0; j < sl->n; j++) sl->status[j] = SI_IMG_OK;
        double t = si_now();
        read_batch(pf->set, sl->first, sl->n, &sl->buf, sl->off, sl->status, sl->msg, &one);
        pthread_mutex_lock(&pf->mu);
        pf->read_seconds += si_now() - t;
        pf->bytes += sl->off[sl->n] - sl->off[0];
        pf->filled++;
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
    }
    si_bytes_free(&one);
    return NULL;
}

si_status si_pipeline_run(const si_pipeline_config *cfg, si_engine *e, si_source *set,
                          uint64_t first, uint64_t count, si_share_result *out) {
    memset(out, 0, sizeof *out);
    const int B = cfg->batch, K = cfg->topk;
    out->first = first;
    out->count = count;
    out->index = si_xmalloc(sizeof(uint64_t) * (count ? count : 1));
    out->status = si_xmalloc(sizeof(int32_t) * (count ? count : 1));
    out->topk_class = si_xmalloc(sizeof(int32_t) * (count ? count : 1) * (size_t)K);
    out->topk_prob = si_xmalloc(sizeof(float) * (count ? count : 1) * (size_t)K);
    for (uint64_t i = 0; i < count; i++) out->status[i] = SI_IMG_NOT_PROCESSED;

    const size_t plane = (size_t)cfg->pre.crop_h * cfg->pre.crop_w;
    const int nthreads = omp_get_max_threads();
    /* (B, H, W, 3) uint8 crops: the staging buffer the GPU path uploads as it is, pinned when a
     * CUDA device is there */
    size_t pixels_bytes = plane * 3 * (size_t)B;
    uint8_t *pixels = NULL;
#ifdef SI_HAVE_CUDA
    pixels = si_cuda_host_alloc(pixels_bytes);
    bool pinned = pixels != NULL;
#else
    bool pinned = false;
#endif
    if (!pixels) pixels = si_xmalloc(pixels_bytes);
    out->pinned = pinned;
    int32_t *rowmap = si_xmalloc(sizeof(int32_t) * (size_t)B);
    char(*msgs)[256] = si_xmalloc(sizeof(*msgs) * (size_t)B);
    si_decoder **dec = si_xcalloc((size_t)nthreads, sizeof *dec);
    const si_graph *g = e->g;
    int64_t classes = 1;
    {
        const si_shape *os = &g->values[g->outputs[0]].shape;
        for (int d = 1; d < os->ndim; d++) classes *= os->dims[d];
    }
    float *scratch = si_xmalloc(sizeof(float) * (size_t)classes * (size_t)nthreads);
    int ph = 0, pw = 0, pch = 0;
    bool pixels_in = si_source_pixel_shape(set, &ph, &pw, &pch);
    uint8_t *gray_rgb = pixels_in && pch == 1 ? si_xmalloc((size_t)ph * pw * 3 * (size_t)nthreads)
                                              : NULL; /* gray -> RGB per thread, reused */
    int32_t *pc = si_xmalloc(sizeof(int32_t) * (size_t)B * (size_t)K); /* packed-row top-K */
    float *pp = si_xmalloc(sizeof(float) * (size_t)B * (size_t)K);
    for (int t = 0; t < nthreads; t++)
        if (!(dec[t] = si_decoder_create()))
            si_fatal(__FILE__, __LINE__, "si_decoder_create", NULL);

    prefetcher pf = {.set = set, .first = first, .count = count, .batch = B};
    pthread_mutex_init(&pf.mu, NULL);
    pthread_cond_init(&pf.cv, NULL);
    for (int k = 0; k < PREFETCH_SLOTS; k++) {
        pf.slots[k].off = si_xmalloc(sizeof(uint64_t) * (size_t)(B + 1));
        pf.slots[k].status = si_xmalloc(sizeof(int32_t) * (size_t)B);
        pf.slots[k].msg = si_xmalloc(sizeof(*pf.slots[k].msg) * (size_t)B);
    }
    pthread_t reader;
    bool reader_up = count > 0 && pthread_create(&reader, NULL, reader_main, &pf) == 0;
    if (count > 0 && !reader_up) si_fatal(__FILE__, __LINE__, "pthread_create", "reader thread");

    si_status st = SI_OK;
    double t0 = si_now();
    uint64_t kb = 0; /* batch number: its slot is kb % PREFETCH_SLOTS */
    for (uint64_t done = 0; done < count; kb++) {
        double t = si_now();
        pthread_mutex_lock(&pf.mu);
        while (pf.filled == 0) pthread_cond_wait(&pf.cv, &pf.mu);
        pthread_mutex_unlock(&pf.mu);
        out->t_wait += si_now() - t; /* time the decoders starved: reading is the bottleneck */
        slot *sl = &pf.slots[kb % PREFETCH_SLOTS];
        uint32_t n = sl->n;
        uint64_t b0 = sl->first;
        const uint64_t *off = sl->off;
        const si_bytes buf = sl->buf;
        int32_t *status = out->status + done;
        memcpy(status, sl->status, sizeof(int32_t) * n);

        t = si_now();
        if (pixels_in) { /* pre-decoded images: resize and crop only */
#pragma omp parallel for schedule(dynamic, 1)
            for (uint32_t j = 0; j < n; j++) {
                if (status[j] != SI_IMG_OK) continue;
                const uint8_t *px = buf.data + off[j];
                uint8_t *rgb = (uint8_t *)(uintptr_t)px;
                if (pch == 1) { /* gray: replicate into this thread's scratch */
                    rgb = gray_rgb + (size_t)omp_get_thread_num() * (size_t)ph * pw * 3;
                    for (size_t i = 0; i < (size_t)ph * pw; i++)
                        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = px[i];
                }
                if (si_decoder_resize_crop(dec[omp_get_thread_num()], rgb, pw, ph, &cfg->pre,
                                           pixels + plane * 3 * j) != SI_OK) {
                    status[j] = SI_IMG_UNSUPPORTED;
                    snprintf(msgs[j], sizeof msgs[j], "%s", si_error_msg());
                }
            }
        } else
#pragma omp parallel for schedule(dynamic, 1)
            for (uint32_t j = 0; j < n; j++) {
                if (status[j] != SI_IMG_OK) continue;
                msgs[j][0] = 0;
                status[j] = (int32_t)si_decode_crop(
                    dec[omp_get_thread_num()], buf.data + off[j], off[j + 1] - off[j], &cfg->pre,
                    pixels + plane * 3 * j, msgs[j], sizeof msgs[j]);
            }
        /* pack the good images to the front of the model's batch */
        int rows = 0;
        for (uint32_t j = 0; j < n; j++) {
            if (status[j] == SI_IMG_OK) {
                rowmap[rows++] = (int32_t)j;
                continue;
            }
            if (status[j] == SI_IMG_READ_ERROR) { /* logged by read_batch */
                si_share_result_add_error(out, b0 + j, sl->msg[j]);
                continue;
            }
            si_share_result_add_error(out, b0 + j, msgs[j]);
            char *id = NULL;
            if (si_source_read_ids(set, b0 + j, 1, &id) != SI_OK) id = NULL;
            si_log_warn("image %llu '%s': %s: %s", (unsigned long long)(b0 + j), id ? id : "?",
                        si_image_status_name(status[j]), msgs[j][0] ? msgs[j] : "-");
            free(id);
        }
        float *x = si_engine_input(e, 0);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            si_normalize_chw(pixels + plane * 3 * (size_t)rowmap[r], cfg->pre.crop_h,
                             cfg->pre.crop_w, cfg->mean, cfg->std, x + plane * 3 * (size_t)r);
        out->t_decode += si_now() - t;

        int32_t *cls = out->topk_class + done * (uint64_t)K;
        float *prob = out->topk_prob + done * (uint64_t)K;
        for (uint32_t j = 0; j < n; j++) {
            out->index[done + j] = b0 + j;
            for (int k = 0; k < K; k++) {
                cls[j * K + k] = -1;
                prob[j * K + k] = 0.f;
            }
        }
        if (rows > 0) {
            t = si_now();
            if ((st = si_engine_run(e, rows)) != SI_OK) break;
            out->t_infer += si_now() - t;
            t = si_now();
            const float *logits = si_engine_output(e, 0, NULL);
            /* topk of the packed rows, then scattered back to the images' places */
            si_post_topk(logits, rows, classes, K, scratch, pc, pp);
            for (int r = 0; r < rows; r++) {
                memcpy(cls + (size_t)rowmap[r] * K, pc + (size_t)r * K,
                       sizeof(int32_t) * (size_t)K);
                memcpy(prob + (size_t)rowmap[r] * K, pp + (size_t)r * K, sizeof(float) * (size_t)K);
            }
            out->t_post += si_now() - t;
        }
        for (uint32_t j = 0; j < n; j++) status[j] == SI_IMG_OK ? out->ok++ : out->failed++;
        if (done == 0) out->t_first = si_now() - t0;
        done += n;
        pthread_mutex_lock(&pf.mu); /* the slot goes back to the reader */
        pf.filled--;
        pthread_cond_broadcast(&pf.cv);
        pthread_mutex_unlock(&pf.mu);
    }
    pthread_mutex_lock(&pf.mu);
    pf.stop = true;
    pthread_cond_broadcast(&pf.cv);
    pthread_mutex_unlock(&pf.mu);
    if (reader_up) pthread_join(reader, NULL);
    out->t_read = pf.read_seconds;
    out->bytes_read = pf.bytes;
    for (int s2 = 0; s2 < PREFETCH_SLOTS; s2++) {
        si_bytes_free(&pf.slots[s2].buf);
        free(pf.slots[s2].off);
        free(pf.slots[s2].status);
        free(pf.slots[s2].msg);
    }
    pthread_cond_destroy(&pf.cv);
    pthread_mutex_destroy(&pf.mu);
    out->t_total = si_now() - t0;
    for (int t = 0; t < nthreads; t++) si_decoder_destroy(dec[t]);
    free(dec);
#ifdef SI_HAVE_CUDA
    if (pinned)
        si_cuda_host_free(pixels);
    else
#endif
        free(pixels);
    free(gray_rgb);
    free(rowmap);
    free(msgs);
    free(scratch);
    free(pc);
    free(pp);
    return st;
}
