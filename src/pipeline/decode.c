/* The decode stage: a read batch's images into an engine slot's input, on the OpenMP pool, by
 * one of three ways picked at start (stages.h). Decode scratch grows to the largest image and
 * stays; failed images are left out and the good rows packed to the front, so a corrupt file
 * costs nothing but its own row. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "decode/hwjpeg.h"
#include "stages.h"

/* --resize-on gpu: the slot's packed buffer, shared by the decode threads. Every image of the
 * batch keeps a crop's worth of bytes in reserve until it is placed, so the ones resized here
 * (when the decoded ones do not fit) always find room. */
typedef struct {
    pthread_mutex_t mu;
    size_t used, cap, crop; /* bytes */
    uint32_t pending;       /* images not yet placed */
    /* --decode gpu: bitstreams at the pool's end (host side only), and the device's decode
     * area after the pool (where the hardware decoder writes) */
    size_t bits, dec_used, dec_base, dec_cap;
} pack_state;

/* --decode gpu: one image's job before the batch's list is made in order. */
typedef struct {
    uint64_t src, len, dst;
    int32_t w, h, hs, vs;
    int kind;    /* 0: failed or not to decode, 1: the CPU's, 2: the hardware could take it */
    bool on_gpu; /* the hardware decoder's job */
} gpu_job;

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
    /* --decode gpu */
    si_hwjpeg *hw;         /* the hardware decoder (cfg's), NULL without */
    bool hw_exact;         /* it decodes to planes converted as libjpeg-turbo does */
    bool hw_gone;          /* it could not be set up after all (said once; the CPU decodes) */
    gpu_job *gj;           /* [B] */
    int slot;              /* the engine slot being filled */
    uint64_t gpu_decoded;  /* this batch's images decoded by the GPU */
    uint64_t gpu_retried;  /* this batch's images the GPU rejected, decoded here instead */
    double gpu_call_s;     /* this batch's seconds in the decoder's host call */
    double gpu_call_cpu_s; /* of them, the calling thread's CPU time */
    double gpu_plan_s;     /* this batch's seconds before the call */
    double cpu_share;      /* of the images the hardware could take, the part the CPU decodes */
    bool share_fixed;      /* --decode-cpu-share gave it (else balanced batch by batch) */
    long reject_every;     /* SI_TEST_GPU_DECODE_REJECT=K: every K-th call fails (tests) */
    long calls;
    /* the slot being filled: its pixels, or its packed buffer (sp.host, sp.items) */
    uint8_t *px;
    si_slot_pack sp;
};

/* Room for an image of `need` bytes at *off, if the others' reserve stays whole; need = crop
 * always fits. Without room (false) the image is still pending. */
static bool pack_take(pack_state *pk, size_t need, uint64_t *off) {
    pthread_mutex_lock(&pk->mu);
    SI_ASSERT(pk->pending > 0);
    bool ok = pk->used + need + pk->bits + (size_t)(pk->pending - 1) * pk->crop <= pk->cap;
    if (ok) {
        *off = pk->used;
        pk->used += need;
        pk->pending--;
    }
    pthread_mutex_unlock(&pk->mu);
    SI_ASSERT(ok || need > pk->crop);
    return ok;
}

/* --decode gpu: room for a bitstream of len bytes at the pool's end (*src) and for its decode of
 * dec bytes in the device's area (*dst, 256-byte aligned). The image keeps its reserve until the
 * decoder's call has succeeded (pack_gpu_done), so that a batch the decoder rejects can still be
 * decoded here. False (nothing taken) when either is full. */
static bool pack_take_gpu(pack_state *pk, size_t len, size_t dec, uint64_t *src, uint64_t *dst) {
    pthread_mutex_lock(&pk->mu);
    SI_ASSERT(pk->pending > 0);
    size_t at = (pk->dec_used + 255) & ~(size_t)255;
    bool ok = pk->used + pk->bits + len + (size_t)pk->pending * pk->crop <= pk->cap &&
              at + dec <= pk->dec_cap;
    if (ok) {
        pk->bits += len;
        *src = pk->cap - pk->bits;
        *dst = pk->dec_base + at;
        pk->dec_used = at + dec;
    }
    pthread_mutex_unlock(&pk->mu);
    return ok;
}

/* --decode gpu, after the decoder's call: its n images placed (their reserves go), or, when the
 * call failed, their bitstreams given up (the images are decoded here, from the read buffer, into
 * their reserves). */
static void pack_gpu_done(pack_state *pk, uint32_t n, bool decoded) {
    pthread_mutex_lock(&pk->mu);
    if (decoded) {
        SI_ASSERT(pk->pending >= n);
        pk->pending -= n;
    } else {
        pk->bits = 0;
    }
    pthread_mutex_unlock(&pk->mu);
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
        status[j] = (int32_t)decode_packed(
            d->dec[omp_get_thread_num()], sl->buf.data + sl->off[j], sl->off[j + 1] - sl->off[j],
            &d->cfg->pre, &d->pk, d->sp.host, &d->jitems[j], &spilled, msgs[j], SI_MSG_LEN);
    }
    d->spilled = spilled;
}

/* --decode gpu: the batch's decoder call, made by thread 0 of the OpenMP team while the others
 * decode the CPU's share; the jobs' bitstreams are in the slot's page-locked buffer already
 * (the decoder reads them from there while the slot's batch is in flight). */
typedef struct {
    si_decode *d;
    const si_read_slot *sl;
    si_status st;
    double seconds, cpu_seconds;
    char msg[512];
} gpu_call;

static void gpu_call_main(gpu_call *c) {
    si_decode *d = c->d;
    double t = si_now(), c0 = si_thread_cpu();
    if (d->reject_every > 0 && ++d->calls % d->reject_every == 0)
        c->st = si_error(SI_ERR_FORMAT, "the decoder's call failed (SI_TEST_GPU_DECODE_REJECT)");
    else
        c->st = si_hwjpeg_decode(d->hw, d->slot, &d->sp);
    if (c->st != SI_OK) snprintf(c->msg, sizeof c->msg, "%s", si_error_msg());
    c->seconds = si_now() - t;
    c->cpu_seconds = si_thread_cpu() - c0;
}

/* --decode gpu, phase 1 for image j: the header checks (a failure is the image's status) and
 * whether the hardware decoder can take it and the GPU resize its full-size decode (kind 2) or
 * only the CPU can (kind 1). */
static si_image_status plan_one(si_decode *d, const uint8_t *data, size_t len, uint32_t j,
                                char *msg) {
    const si_preproc *pre = &d->cfg->pre;
    si_gpu_plan plan;
    gpu_job *g = &d->gj[j];
    si_image_status st =
        si_decode_plan_gpu(d->dec[omp_get_thread_num()], data, len, pre, &plan, msg, SI_MSG_LEN);
    if (st != SI_IMG_OK) return st;
    si_rs_item *it = &d->jitems[j];
    g->kind = 1;
    const bool exact = d->hw_exact;
    if (!(exact ? plan.exact_reason : plan.cpu_reason) &&
        si_rs_item_make(plan.full_w, plan.full_h, pre->resize, pre->interp, pre->crop_h,
                        pre->crop_w, it) &&
        si_rs_gpu_fits(it)) {
        g->kind = 2;
        g->len = len;
        g->w = plan.full_w;
        g->h = plan.full_h;
        g->hs = plan.hs;
        g->vs = plan.vs;
    }
    return SI_IMG_OK;
}

/* --decode gpu: which of the images the hardware can take go to the CPU instead, as many as
 * d->cpu_share of them, spread evenly; then room for the rest (an image without room stays on
 * the CPU). All of them while the slot's decoder is not set up yet (hw false: a run's first
 * batches). Sequential: a few hundred cheap steps. */
static int split_batch(si_decode *d, const si_read_slot *sl, bool hw, uint32_t *n_cpu) {
    double acc = 0.5;
    int n_gpu = 0;
    *n_cpu = 0;
    for (uint32_t j = 0; j < sl->n; j++) {
        gpu_job *g = &d->gj[j];
        g->on_gpu = false;
        if (g->kind == 2 && hw) {
            acc += d->cpu_share;
            if (acc >= 1.0) {
                acc -= 1.0;
            } else if (pack_take_gpu(&d->pk, g->len,
                                     si_jpeg_area_bytes(g->w, g->h, g->hs, g->vs, d->hw_exact),
                                     &g->src, &g->dst)) {
                g->on_gpu = true;
                d->jitems[j].off = g->dst;
                n_gpu++;
                continue;
            }
        }
        if (g->kind) (*n_cpu)++;
    }
    return n_gpu;
}

/* The split that would have made both sides finish together, from this batch's rates, folded
 * into d->cpu_share (unless --decode-cpu-share fixed it). */
static void balance(si_decode *d, uint32_t n_cpu, int n_gpu, double t_cpu, double t_gpu) {
    if (d->share_fixed || n_gpu == 0 || n_cpu == 0 || t_cpu <= 0 || t_gpu <= 0) return;
    double r_cpu = n_cpu / t_cpu, r_gpu = n_gpu / t_gpu;
    double ideal = r_cpu / (r_cpu + r_gpu); /* of all the batch's decodes */
    double share = d->cpu_share + 0.3 * (ideal - (double)n_cpu / (n_cpu + n_gpu));
    d->cpu_share = share < 0.02 ? 0.02 : share > 0.9 ? 0.9 : share;
}

/* --decode gpu: the images the GPU rejected as a batch, decoded here (their statuses are then
 * libjpeg-turbo's, as with --decode cpu). */
static void gpu_fallback(si_decode *d, const si_read_slot *sl, int32_t *status,
                         char (*msgs)[SI_MSG_LEN], uint64_t *spilled) {
    uint32_t n = 0;
    for (uint32_t j = 0; j < sl->n; j++) n += d->gj[j].on_gpu;
    pack_gpu_done(&d->pk, n, false);
    uint64_t sp = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : sp)
    for (uint32_t j = 0; j < sl->n; j++) {
        if (!d->gj[j].on_gpu) continue;
        d->gj[j].on_gpu = false;
        status[j] = (int32_t)decode_packed(d->dec[omp_get_thread_num()], sl->buf.data + sl->off[j],
                                           sl->off[j + 1] - sl->off[j], &d->cfg->pre, &d->pk,
                                           d->sp.host, &d->jitems[j], &sp, msgs[j], SI_MSG_LEN);
    }
    *spilled += sp;
    d->gpu_retried += n;
}

/* --decode gpu: whether the hardware decoder is up (until it is, a run's first batches, the CPU
 * decodes). Where it could not be set up at all, the CPU decodes every image from then
 * on, said once. */
static bool hw_usable(si_decode *d, const si_read_slot *sl) {
    int usable = si_hwjpeg_usable(d->hw);
    if (usable < 0 && !d->hw_gone) {
        d->hw_gone = true;
        si_hwjpeg_ready(d->hw);
        si_log_warn("images %llu..: %s; the CPU decodes every image instead",
                    (unsigned long long)sl->first, si_error_msg());
        si_error_clear();
    }
    return usable == 1;
}

/* --decode gpu: the headers first (phase 1), the split between the hardware decoder and the CPU
 * (split_batch), then both at once: the decoder's call on thread 0, the CPU's share on the
 * OpenMP team's others; a batch the decoder rejects is decoded here after all. */
static void decode_for_gpu_decode(si_decode *d, const si_read_slot *sl, int32_t *status,
                                  char (*msgs)[SI_MSG_LEN]) {
    si_jpeg_jobs *q = si_hwjpeg_jobs(d->hw, d->slot);
    const bool hw = hw_usable(d, sl);
    const double t_plan = si_now();
    d->pk.bits = d->pk.dec_used = 0;
    d->pk.dec_base = d->sp.area_off;
    d->pk.dec_cap = d->sp.area_cap;
#pragma omp parallel for schedule(dynamic, 4)
    for (uint32_t j = 0; j < sl->n; j++) {
        d->gj[j].kind = 0;
        if (status[j] != SI_IMG_OK) {
            pack_drop(&d->pk);
            continue;
        }
        msgs[j][0] = 0;
        status[j] = (int32_t)plan_one(d, sl->buf.data + sl->off[j], sl->off[j + 1] - sl->off[j], j,
                                      msgs[j]);
        if (status[j] != SI_IMG_OK) pack_drop(&d->pk);
    }
    uint32_t n_cpu;
    int n_gpu = split_batch(d, sl, hw, &n_cpu);
    q->n = 0;
    for (uint32_t j = 0; j < sl->n; j++) {
        const gpu_job *g = &d->gj[j];
        if (!g->on_gpu) continue;
        q->src[q->n] = g->src;
        q->len[q->n] = g->len;
        q->dst[q->n] = g->dst;
        q->w[q->n] = g->w;
        q->h[q->n] = g->h;
        q->sub[q->n] = g->hs | g->vs << 8;
        q->n++;
    }
    /* the bitstreams into the page-locked buffer, by the whole team rather than by thread 0
     * before its call (on the H100 that copy was 3-4% of the calls' time, ResNet-50 with
     * SI_DECODE_CPU_SHARE=0: 4.03-4.13 s of calls with it, 3.90-3.97 s without) */
#pragma omp parallel for schedule(dynamic, 8)
    for (uint32_t j = 0; j < sl->n; j++)
        if (d->gj[j].on_gpu)
            memcpy(d->sp.host + d->gj[j].src, sl->buf.data + sl->off[j], d->gj[j].len);
    /* Thread 0 of the team makes the decoder's call, then joins the others on what is left of
     * the CPU's share (the decoder sets its device itself: a thread of its own without that got
     * allocator failures, status 5, on the H100). */
    gpu_call call = {.d = d, .sl = sl, .st = SI_OK};
    double t = si_now(), t_cpu = 0;
    d->gpu_plan_s = t - t_plan;
    uint64_t spilled = 0;
#pragma omp parallel reduction(+ : spilled) reduction(max : t_cpu)
    {
        int me = omp_get_thread_num();
        if (me == 0 && n_gpu > 0) gpu_call_main(&call);
        double t0 = si_now();
#pragma omp for schedule(dynamic, 1) nowait
        for (uint32_t j = 0; j < sl->n; j++) {
            if (!d->gj[j].kind || d->gj[j].on_gpu) continue;
            status[j] =
                (int32_t)decode_packed(d->dec[omp_get_thread_num()], sl->buf.data + sl->off[j],
                                       sl->off[j + 1] - sl->off[j], &d->cfg->pre, &d->pk,
                                       d->sp.host, &d->jitems[j], &spilled, msgs[j], SI_MSG_LEN);
        }
        /* the CPU side's time: the other threads' (thread 0 only helps once its call is done),
         * or thread 0's own loop when it is alone */
        if (me != 0 || omp_get_num_threads() == 1) t_cpu = si_now() - (me == 0 ? t0 : t);
    }
    d->gpu_call_s = call.seconds;
    d->gpu_call_cpu_s = call.cpu_seconds;
    balance(d, n_cpu, n_gpu, t_cpu, call.seconds);
    if (call.st == SI_OK) {
        pack_gpu_done(&d->pk, (uint32_t)n_gpu, true);
    } else {
        si_log_warn("images %llu..%llu: %s; decoding its images on the CPU",
                    (unsigned long long)sl->first, (unsigned long long)(sl->first + sl->n - 1),
                    call.msg);
        gpu_fallback(d, sl, status, msgs, &spilled);
        q->n = 0;
    }
    d->gpu_decoded = (uint64_t)q->n;
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
    d->packed = cfg->gpu_resize && !pixels_in && si_engine_pack(e, 0, &d->sp);
    if (d->packed && d->sp.area_cap > 0) d->hw = cfg->hw_jpeg;
    d->hw_exact = si_hwjpeg_exact(d->hw);
    d->pk.crop = d->img;
    pthread_mutex_init(&d->pk.mu, NULL);
    d->jitems = si_xmalloc(sizeof(si_rs_item) * B);
    d->gj = si_xcalloc(B, sizeof *d->gj);
    /* The hardware decodes every image it can take; the CPU only the others (and a slot's
     * batches until its decoder is up). A CPU share of the hardware's images, balanced batch by
     * batch, looked cheaper to one rank than it is to a node: the CPU decodes an image in ~2 ms
     * of a core against ~50 us of host work on the hardware path, and on a node whose ranks
     * share the cores (and their hyper-thread siblings) that time comes out of every rank's
     * reader and decoder calls. On 4 H100s of one node, ResNet-50: 4 ranks 61,155-63,002
     * images/s steady with the balanced share, 69,146-71,387 without; 1 rank 17,677-19,457
     * against 19,111-19,209 (docs/performance.md). --decode-cpu-share F fixes another share,
     * auto (< 0 here) balances it from 0.3 (measurements, tests). */
    d->share_fixed = cfg->decode_cpu_share >= 0;
    d->cpu_share = d->share_fixed ? cfg->decode_cpu_share : 0.3;
    const char *reject = getenv("SI_TEST_GPU_DECODE_REJECT");
    if (reject && *reject) d->reject_every = atol(reject);
    d->run = pixels_in   ? decode_from_pixels
             : d->hw     ? decode_for_gpu_decode
             : d->packed ? decode_for_gpu_resize
                         : decode_crops;
    return d;
}

void si_decode_free(si_decode *d) {
    if (!d) return;
    for (int t = 0; t < d->nthreads; t++) si_decoder_destroy(d->dec[t]);
    free(d->dec);
    free(d->gray_rgb);
    free(d->jitems);
    free(d->gj);
    pthread_mutex_destroy(&d->pk.mu);
    free(d);
}

/* The good rows into rowmap, in order; the decode's failures logged (the read's, read_error
 * and too_large records, were logged by the reader). */
static int good_rows(si_decode *d, const si_read_slot *sl, const int32_t *status,
                     char (*msgs)[SI_MSG_LEN], int32_t *rowmap) {
    int rows = 0;
    for (uint32_t j = 0; j < sl->n; j++) {
        if (status[j] == SI_IMG_OK) {
            rowmap[rows++] = (int32_t)j;
        } else if (sl->status[j] == SI_IMG_OK) {
            si_faillog(d->set, sl->first + j, status[j], msgs[j]);
        }
    }
    return rows;
}

bool si_decode_packed(const si_decode *d) {
    return d->packed;
}

int si_decode_batch(si_decode *d, int slot, const si_read_slot *sl, int32_t *status,
                    char (*msgs)[SI_MSG_LEN], int32_t *rowmap, size_t *packed, si_rank_stats *st) {
    d->px = si_engine_pixels(d->e, slot);
    d->slot = slot;
    d->gpu_decoded = d->gpu_retried = 0;
    d->gpu_call_s = d->gpu_call_cpu_s = d->gpu_plan_s = 0;
    if (d->packed) {
        bool ok = si_engine_pack(d->e, slot, &d->sp);
        d->pk.cap = d->sp.cap;
        d->pk.used = 0;
        d->pk.pending = sl->n;
        d->spilled = 0;
        SI_ASSERT(ok && d->pk.crop * sl->n <= d->pk.cap);
    }
    d->run(d, sl, status, msgs);
    int rows = good_rows(d, sl, status, msgs, rowmap);
    *packed = d->packed ? d->pk.used : 0;
    if (d->packed) { /* the good rows' items to the front; the pixels stay where they are */
        for (int r = 0; r < rows; r++) d->sp.items[r] = d->jitems[rowmap[r]];
        st->cpu_resized += d->spilled;
        st->gpu_decoded += d->gpu_decoded;
        st->gpu_retried += d->gpu_retried;
        st->gpu_call_s += d->gpu_call_s;
        st->gpu_call_cpu_s += d->gpu_call_cpu_s;
        st->gpu_plan_s += d->gpu_plan_s;
    } else { /* the good rows' crops to the front of the slot's input, as decoded */
        for (int r = 0; r < rows; r++)
            if (rowmap[r] != r)
                memcpy(d->px + d->img * (size_t)r, d->px + d->img * (size_t)rowmap[r], d->img);
    }
    return rows;
}
