/* The per-rank batch loop (stages and queues in pipeline.h). Every buffer is sized at start for
 * the batch and the chunk; decode scratch grows to the largest image and stays. One mutex and
 * one condition variable guard all the queues: they change once per batch, so contention is
 * nil and the waits are easy to reason about. Failed images are left out of the model's batch
 * (the good ones are packed to the front), so a corrupt file costs nothing but its own row. */
#include "pipeline.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif
#include "base/trace.h"

const char *const si_stage_names[SI_STAGES] = {"read", "decode", "compute",
                                               "post", "write",  "starved"};

#define READ_SLOTS  3 /* the batch being decoded + up to two read ahead */
#define POST_SLOTS  2 /* batches waiting for or in the postprocessor */
#define CHUNK_SLOTS 4 /* being filled, in post, finished and not yet handed over */
#define CLAIM_AHEAD 2 /* chunks claimed beyond the one being read */

int si_pipeline_default_resize(int h, int w) {
    return (int)((h > w ? h : w) / 0.875 + 0.5);
}

si_status si_pipeline_check_model(si_graph *g, si_pipeline_config *cfg) {
    const si_value *in = &g->values[g->inputs[0]];
    if (g->n_inputs != 1)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: the model has %d inputs; shardinfer feeds one (N, 3, H, W) tensor",
                        g->path, g->n_inputs);
    if (in->shape.ndim != 4 || in->shape.dims[1] != 3)
        return si_error(SI_ERR_UNSUPPORTED, "%s: input '%s' is not (N, 3, H, W)", g->path,
                        in->name);
    if (!in->batch_dim && in->shape.dims[0] != cfg->batch)
        return si_error(SI_ERR_ARG,
                        "%s: the model's batch dimension is fixed at %lld; run it with --batch "
                        "%lld",
                        g->path, (long long)in->shape.dims[0], (long long)in->shape.dims[0]);
    int b = in->batch_dim ? 1 : (int)in->shape.dims[0];
    si_status st = si_graph_infer(g, b);
    if (st != SI_OK) return st;
    int h = (int)in->shape.dims[2], w = (int)in->shape.dims[3];
    if (cfg->pre.crop_h == 0) {
        cfg->pre.crop_h = h;
        cfg->pre.crop_w = w;
    } else if (cfg->pre.crop_h != h || cfg->pre.crop_w != w) {
        return si_error(SI_ERR_ARG, "--crop %dx%d does not match the model's input %dx%d",
                        cfg->pre.crop_h, cfg->pre.crop_w, h, w);
    }
    if (cfg->pre.resize == 0) cfg->pre.resize = si_pipeline_default_resize(h, w);
    if (cfg->pre.resize < (h > w ? h : w))
        return si_error(SI_ERR_ARG, "--resize %d is smaller than the crop %dx%d", cfg->pre.resize,
                        h, w);
    si_shape per[SI_MAX_OUTPUTS];
    const char *names[SI_MAX_OUTPUTS];
    if (g->n_outputs > SI_MAX_OUTPUTS)
        return si_error(SI_ERR_UNSUPPORTED, "%s: %d outputs (at most %d)", g->path, g->n_outputs,
                        SI_MAX_OUTPUTS);
    for (int o = 0; o < g->n_outputs; o++) {
        const si_value *v = &g->values[g->outputs[o]];
        if (v->shape.ndim < 1 || v->shape.dims[0] != b)
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: output '%s' does not have the batch as its first dimension",
                            g->path, v->name);
        per[o].ndim = v->shape.ndim - 1;
        for (int d = 1; d < v->shape.ndim; d++) per[o].dims[d - 1] = v->shape.dims[d];
        names[o] = v->name;
    }
    st = si_post_plan_make(&cfg->post, g->n_outputs, names, per, &cfg->plan);
    if (st != SI_OK) return si_error_prefix(st, "%s: ", g->path);
    return SI_OK;
}

/* Reads a batch; if the one large read fails, reads image by image so that one bad record
 * costs only itself. */
static void read_batch(si_source *set, uint64_t b0, uint32_t n, si_bytes *buf, uint64_t *off,
                       int32_t *status, char (*msg)[SI_MSG_LEN], si_bytes *one) {
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
            snprintf(msg[j], SI_MSG_LEN, "read error: %s", si_error_msg());
            si_log_error("image %llu: %s", (unsigned long long)(b0 + j), msg[j]);
            continue;
        }
        memcpy(buf->data + off[j], one->data + o[0], o[1] - o[0]);
        off[j + 1] = off[j] + (o[1] - o[0]);
    }
}

typedef struct {
    si_bytes buf;
    uint64_t *off;           /* [B+1] */
    int32_t *status;         /* [B]: SI_IMG_READ_ERROR for records that could not be read */
    char (*msg)[SI_MSG_LEN]; /* [B]: why, for those */
    uint64_t chunk, first;   /* the batch's chunk and first image */
    uint32_t n;
    bool chunk_start, chunk_end;
} rslot;

/* --resize-on gpu: the slot's packed buffer, shared by the decode threads. Every image of the
 * batch keeps a crop's worth of bytes in reserve until it is placed, so the ones resized here
 * (when the decoded ones do not fit) always find room. */
typedef struct {
    pthread_mutex_t mu;
    size_t used, cap, crop; /* bytes */
    uint32_t pending;       /* images not yet placed */
} pack_state;

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
    int fits = si_rs_item_make(w, h, pre->resize, pre->crop_h, pre->crop_w, it);
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
    /* the crop as it is: resizing a crop-sized image to itself is the identity */
    it->w = it->rw = pre->crop_w;
    it->h = it->rh = pre->crop_h;
    it->top = it->left = 0;
    return SI_IMG_OK;
}

/* A batch in a GPU slot: what post needs once its results are back. */
typedef struct {
    int32_t *rowmap; /* [B] */
    int rows;
    uint64_t b0;
    si_chunk *c;
    bool last;
    int64_t k;       /* the batch's number, for --timeline */
    double t_submit; /* when it went to the GPU */
} flight;
#define MAX_SLOTS 16

typedef struct {
    float *out[SI_MAX_OUTPUTS]; /* [B * out_numel[o]]: the packed rows' outputs */
    int32_t *rowmap;            /* [B]: row -> position in the batch */
    int rows;
    uint64_t b0;
    si_chunk *c;
    bool last; /* the chunk's last batch */
    int64_t k;
} pslot;

typedef struct {
    const si_pipeline_config *cfg;
    const si_pipeline_hooks *h;
    si_source *set;
    uint64_t n_images;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* claimed chunks, main -> reader */
    uint64_t claims[CLAIM_AHEAD + 1];
    int c_head, c_count;
    bool claims_closed;
    /* read batches, reader -> main */
    rslot rs[READ_SLOTS];
    int r_filled;
    bool reader_done;
    /* batches to postprocess, main -> post */
    pslot ps[POST_SLOTS];
    int p_head, p_count;
    bool post_closed, post_exited;
    /* chunks: free ones, and finished ones, post -> main */
    si_chunk chunks[CHUNK_SLOTS];
    si_chunk *free_c[CHUNK_SLOTS], *done_c[CHUNK_SLOTS];
    int n_free, d_head, d_count;
    bool abort; /* the main thread gave up: the threads leave */
    /* the post pool's buffers */
    uint8_t *scratch;   /* [post_threads * scratch_bytes] */
    si_detection *dets; /* [B * max_dets] */
    int *n_dets;        /* [B] */
    si_rank_stats st;   /* read and post times under mu, the rest main-thread only */
    double t0;
} run;

static void lock(run *R) {
    pthread_mutex_lock(&R->mu);
}
static void unlock(run *R) {
    pthread_mutex_unlock(&R->mu);
}
static void signal_all(run *R) {
    pthread_cond_broadcast(&R->cv);
}

static void *reader_main(void *arg) {
    run *R = arg;
    const int B = R->cfg->batch;
    const uint32_t C = R->cfg->chunk;
    si_bytes one = {0};
    uint64_t k = 0;
    for (;;) {
        lock(R);
        while (R->c_count == 0 && !R->claims_closed && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
        if (R->abort || R->c_count == 0) {
            unlock(R);
            break;
        }
        uint64_t chunk = R->claims[R->c_head];
        R->c_head = (R->c_head + 1) % (CLAIM_AHEAD + 1);
        R->c_count--;
        signal_all(R);
        unlock(R);
        uint64_t first = chunk * C;
        uint32_t len = si_chunk_len(chunk, R->n_images, C);
        bool stop = false;
        for (uint32_t done = 0; done < len && !stop; k++) {
            lock(R);
            while (R->r_filled == READ_SLOTS && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
            stop = R->abort;
            unlock(R);
            if (stop) break;
            rslot *sl = &R->rs[k % READ_SLOTS];
            sl->chunk = chunk;
            sl->first = first + done;
            sl->n = len - done < (uint32_t)B ? len - done : (uint32_t)B;
            sl->chunk_start = done == 0;
            sl->chunk_end = done + sl->n == len;
            for (uint32_t j = 0; j < sl->n; j++) sl->status[j] = SI_IMG_OK;
            si_trace_push("read");
            double t = si_now();
            read_batch(R->set, sl->first, sl->n, &sl->buf, sl->off, sl->status, sl->msg, &one);
            si_trace_pop();
            double t1 = si_now();
            si_timeline_add(R->cfg->timeline, SI_TL_READ, (int64_t)k, t, t1);
            done += sl->n;
            lock(R);
            R->st.busy[SI_STAGE_READ] += t1 - t;
            R->st.bytes_read += sl->off[sl->n] - sl->off[0];
            R->r_filled++;
            signal_all(R);
            unlock(R);
        }
        if (stop) break;
    }
    lock(R);
    R->reader_done = true;
    signal_all(R);
    unlock(R);
    si_bytes_free(&one);
    return NULL;
}

static void *post_main(void *arg) {
    run *R = arg;
    const si_pipeline_config *cfg = R->cfg;
    const si_post_plan *p = &cfg->plan;
    for (;;) {
        lock(R);
        while (R->p_count == 0 && !R->post_closed && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
        if (R->abort || R->p_count == 0) {
            unlock(R);
            break;
        }
        pslot *sl = &R->ps[R->p_head];
        unlock(R);
        si_trace_push("postprocess");
        double t = si_now();
        si_chunk *c = sl->c;
        const int rows = sl->rows;
#pragma omp parallel for num_threads(cfg->post_threads) schedule(dynamic, 1)
        for (int r = 0; r < rows; r++) {
            uint32_t j = (uint32_t)(sl->b0 - c->first) + (uint32_t)sl->rowmap[r];
            const float *outs[SI_MAX_OUTPUTS];
            for (int o = 0; o < p->n_outputs; o++)
                outs[o] = sl->out[o] + (size_t)r * p->out_numel[o];
            int nd = 0;
            si_detection *d = R->dets ? R->dets + (size_t)r * p->max_dets : NULL;
            void *scr = R->scratch + (size_t)omp_get_thread_num() * p->scratch_bytes;
            if (si_post_image(&cfg->post, p, outs, scr, c->rows + (size_t)j * p->row_bytes, d,
                              &nd) != SI_OK) {
                c->status[j] = SI_IMG_POST_ERROR;
                snprintf(c->msg[j], SI_MSG_LEN, "postprocess: %s", si_error_msg());
                si_post_fill_empty(p, c->rows + (size_t)j * p->row_bytes);
                nd = 0;
            }
            R->n_dets[r] = nd;
        }
        for (int r = 0; r < rows; r++) {
            uint32_t j = (uint32_t)(sl->b0 - c->first) + (uint32_t)sl->rowmap[r];
            if (c->status[j] == SI_IMG_POST_ERROR)
                si_log_warn("image %llu: %s", (unsigned long long)(c->first + j), c->msg[j]);
            else if (c->detect && R->n_dets[r] > 0)
                si_chunk_add_dets(c, j, R->dets + (size_t)r * p->max_dets, R->n_dets[r]);
        }
        si_trace_pop();
        double t1 = si_now();
        si_timeline_add(cfg->timeline, SI_TL_POST, sl->k, t, t1);
        lock(R);
        R->st.busy[SI_STAGE_POST] += t1 - t;
        if (sl->last) {
            R->done_c[(R->d_head + R->d_count) % CHUNK_SLOTS] = c;
            R->d_count++;
        }
        R->p_head = (R->p_head + 1) % POST_SLOTS;
        R->p_count--;
        signal_all(R);
        unlock(R);
    }
    lock(R);
    R->post_exited = true;
    signal_all(R);
    unlock(R);
    return NULL;
}

static void snapshot(run *R, si_rank_stats *s) {
    lock(R);
    *s = R->st;
    unlock(R);
    s->t_total = si_now() - R->t0;
}

/* Main thread: hands finished chunks to the caller and returns them to the free list. */
static si_status drain(run *R) {
    for (;;) {
        lock(R);
        si_chunk *c = R->d_count ? R->done_c[R->d_head] : NULL;
        unlock(R);
        if (!c) return SI_OK;
        for (uint32_t j = 0; j < c->n; j++)
            c->status[j] == SI_IMG_OK ? R->st.images++ : R->st.failed++;
        lock(R);
        R->st.chunks++;
        if (R->st.chunks == 1) R->st.t_first = si_now() - R->t0;
        unlock(R);
        si_rank_stats s;
        snapshot(R, &s);
        double t = si_now();
        si_status st = R->h->chunk_done(R->h->ctx, c, &s);
        double t1 = si_now();
        si_timeline_add(R->cfg->timeline, SI_TL_WRITE, (int64_t)c->id, t, t1);
        lock(R);
        R->st.busy[SI_STAGE_WRITE] += t1 - t;
        R->d_head = (R->d_head + 1) % CHUNK_SLOTS;
        R->d_count--;
        R->free_c[R->n_free++] = c;
        signal_all(R);
        unlock(R);
        if (st != SI_OK) return st;
    }
}

/* Main thread: tops up the reader's claims. */
static void refill(run *R) {
    for (;;) {
        lock(R);
        bool want = !R->claims_closed && R->c_count < CLAIM_AHEAD;
        unlock(R);
        if (!want) return;
        uint64_t id;
        bool got = R->h->next_chunk(R->h->ctx, &id);
        lock(R);
        if (got) {
            R->claims[(R->c_head + R->c_count) % (CLAIM_AHEAD + 1)] = id;
            R->c_count++;
        } else {
            R->claims_closed = true;
        }
        signal_all(R);
        unlock(R);
    }
}

/* Main thread: the hooks' share of a pause. */
static si_status service(run *R) {
    si_status st = drain(R);
    if (st != SI_OK) return st;
    si_rank_stats s;
    snapshot(R, &s);
    double t = si_now();
    st = R->h->pump(R->h->ctx, &s);
    lock(R);
    R->st.busy[SI_STAGE_WRITE] += si_now() - t;
    unlock(R);
    refill(R);
    return st;
}

typedef bool (*ready_fn)(const run *R);
static bool have_read(const run *R) {
    return R->r_filled > 0 || R->reader_done;
}
static bool have_chunk(const run *R) {
    return R->n_free > 0;
}
static bool have_post(const run *R) {
    return R->p_count < POST_SLOTS;
}
static bool all_posted(const run *R) {
    return R->post_exited && R->d_count == 0;
}

/* Main thread: waits until ready(R), servicing the hooks every 2 ms meanwhile. */
static si_status wait_for(run *R, ready_fn ready, int stage) {
    double t = si_now();
    si_status st = SI_OK;
    lock(R);
    while (!ready(R) && st == SI_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&R->cv, &R->mu, &ts);
        if (ready(R)) break;
        unlock(R);
        st = service(R);
        lock(R);
    }
    if (stage >= 0) R->st.busy[stage] += si_now() - t;
    unlock(R);
    return st;
}

/* Hands a computed batch to the post thread (waiting for a free post slot): outs[o] holds
 * rows * out_numel[o] floats. */
static si_status to_post(run *R, const float *const *outs, const flight *f) {
    const si_post_plan *p = &R->cfg->plan;
    si_status st = wait_for(R, have_post, -1);
    if (st != SI_OK) return st;
    pslot *ps = &R->ps[(R->p_head + R->p_count) % POST_SLOTS]; /* free: only main adds */
    for (int o = 0; o < p->n_outputs && f->rows > 0; o++)
        memcpy(ps->out[o], outs[o], sizeof(float) * (size_t)f->rows * (size_t)p->out_numel[o]);
    memcpy(ps->rowmap, f->rowmap, sizeof(int32_t) * (size_t)f->rows);
    ps->rows = f->rows;
    ps->b0 = f->b0;
    ps->c = f->c;
    ps->last = f->last;
    ps->k = f->k;
    lock(R);
    R->p_count++;
    signal_all(R);
    unlock(R);
    return SI_OK;
}

/* --test-slow-rank: this rank sleeps after each batch. */
static void test_slow(const si_pipeline_config *cfg) {
    if (cfg->slow_ms <= 0) return;
    struct timespec ts = {cfg->slow_ms / 1000, (long)(cfg->slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* GPU: waits for the oldest batch in flight and hands it to post. */
static si_status retire(run *R, si_engine *e, flight *fl, uint64_t *k_ret) {
    int slot = (int)(*k_ret % (uint64_t)e->n_slots);
    flight *f = &fl[slot];
    const float *outs[SI_MAX_OUTPUTS] = {0};
    si_status st = SI_OK;
    if (f->rows > 0) {
        double t = si_now();
        st = si_engine_collect(e, slot, outs);
        R->st.busy[SI_STAGE_COMPUTE] += si_now() - t;
        if (st != SI_OK) return st;
        double g0, g1; /* the GPU's own times for the batch (its events) */
        if (R->cfg->timeline && si_engine_slot_times(e, slot, &g0, &g1) == SI_OK) {
            si_timeline_add(R->cfg->timeline, SI_TL_INFLIGHT, f->k, f->t_submit, si_now());
            si_timeline_add(R->cfg->timeline, SI_TL_COMPUTE, f->k, g0, g1);
        }
    }
    if ((st = to_post(R, outs, f)) != SI_OK) return st;
    (*k_ret)++;
    return service(R);
}

si_status si_pipeline_run(const si_pipeline_config *cfg, si_engine *e, si_source *set,
                          const si_pipeline_hooks *h, si_rank_stats *stats) {
    const int B = cfg->batch;
    const si_post_plan *p = &cfg->plan;
    SI_ASSERT(cfg->chunk > 0 && cfg->chunk % (uint32_t)B == 0 && cfg->post_threads > 0);
    run *R = si_xcalloc(1, sizeof *R);
    R->cfg = cfg;
    R->h = h;
    R->set = set;
    R->n_images = si_source_count(set);
    pthread_mutex_init(&R->mu, NULL);
    pthread_cond_init(&R->cv, NULL);
    for (int k = 0; k < READ_SLOTS; k++) {
        R->rs[k].off = si_xmalloc(sizeof(uint64_t) * (size_t)(B + 1));
        R->rs[k].status = si_xmalloc(sizeof(int32_t) * (size_t)B);
        R->rs[k].msg = si_xmalloc(sizeof(*R->rs[k].msg) * (size_t)B);
    }
    for (int k = 0; k < POST_SLOTS; k++) {
        for (int o = 0; o < p->n_outputs; o++)
            R->ps[k].out[o] = si_xmalloc(sizeof(float) * (size_t)B * (size_t)p->out_numel[o] + 1);
        R->ps[k].rowmap = si_xmalloc(sizeof(int32_t) * (size_t)B);
    }
    for (int k = 0; k < CHUNK_SLOTS; k++) {
        si_chunk_init(&R->chunks[k], cfg->chunk, p);
        R->free_c[R->n_free++] = &R->chunks[k];
    }
    R->scratch = si_xmalloc(p->scratch_bytes * (size_t)cfg->post_threads + 1);
    R->dets =
        p->max_dets ? si_xmalloc(sizeof(si_detection) * (size_t)B * (size_t)p->max_dets) : NULL;
    R->n_dets = si_xmalloc(sizeof(int) * (size_t)B);
    uint8_t *empty = si_xmalloc(p->row_bytes + 1);
    si_post_fill_empty(p, empty);

    const size_t plane = (size_t)cfg->pre.crop_h * cfg->pre.crop_w;
    const int nthreads = omp_get_max_threads();
    /* with a GPU backend, batch k decodes straight into slot k % S's pinned input and is in
     * flight (upload, model, download) while the next ones decode */
    const int S = e->n_slots;
    SI_ASSERT(S <= MAX_SLOTS);
    flight fl[MAX_SLOTS];
    for (int k = 0; k < S; k++) fl[k].rowmap = si_xmalloc(sizeof(int32_t) * (size_t)B);
    uint64_t k_ret = 0; /* batches retired from the slots */
    /* (B, H, W, 3) uint8 crops: the staging buffer the GPU path uploads as it is, pinned when a
     * CUDA device is there */
    size_t pixels_bytes = plane * 3 * (size_t)B;
    uint8_t *pixels = NULL;
    bool pixels_pinned = false;
#ifdef SI_HAVE_CUDA
    if (S == 0) {
        pixels = si_cuda_host_alloc(pixels_bytes);
        pixels_pinned = pixels != NULL;
    }
#endif
    R->st.pinned = pixels_pinned || S > 0; /* a GPU backend's slots are pinned */
    if (!pixels && S == 0) pixels = si_xmalloc(pixels_bytes);
    int32_t *rowmap = si_xmalloc(sizeof(int32_t) * (size_t)B);
    si_decoder **dec = si_xcalloc((size_t)nthreads, sizeof *dec);
    for (int t = 0; t < nthreads; t++)
        if (!(dec[t] = si_decoder_create()))
            si_fatal(__FILE__, __LINE__, "si_decoder_create", NULL);
    int ph = 0, pw = 0, pch = 0;
    bool pixels_in = si_source_pixel_shape(set, &ph, &pw, &pch);
    /* --resize-on gpu: decode into the slot's packed buffer (encoded JPEGs only: pre-decoded
     * sets are resized here from the file's pixels) */
    const bool packed = S > 0 && cfg->gpu_resize && e->opts.pack_per_image > 0 && !pixels_in;
    pack_state pk = {.crop = plane * 3};
    pthread_mutex_init(&pk.mu, NULL);
    si_rs_item *jitems = si_xmalloc(sizeof(si_rs_item) * (size_t)B);
    uint8_t *gray_rgb = pixels_in && pch == 1 ? si_xmalloc((size_t)ph * pw * 3 * (size_t)nthreads)
                                              : NULL; /* gray -> RGB per thread, reused */

    R->t0 = si_now();
    if (cfg->timeline) cfg->timeline->t0 = R->t0;
    refill(R);
    pthread_t reader, post;
    if (pthread_create(&reader, NULL, reader_main, R) != 0 ||
        pthread_create(&post, NULL, post_main, R) != 0)
        si_fatal(__FILE__, __LINE__, "pthread_create", "pipeline threads");

    si_status st = SI_OK;
    si_chunk *cur = NULL;
    uint64_t k = 0; /* batches started */
    for (;; k++) {
        if ((st = wait_for(R, have_read, SI_STAGE_STARVED)) != SI_OK) break;
        lock(R);
        bool end = R->r_filled == 0;
        unlock(R);
        if (end) break;
        rslot *sl = &R->rs[k % READ_SLOTS];
        if (sl->chunk_start) {
            /* batches in flight hold chunks: finish them before waiting for one */
            while (S > 0 && k_ret < k && !have_chunk(R))
                if ((st = retire(R, e, fl, &k_ret)) != SI_OK) break;
            if (st != SI_OK) break;
            if ((st = wait_for(R, have_chunk, -1)) != SI_OK) break;
            lock(R);
            cur = R->free_c[--R->n_free];
            unlock(R);
            si_chunk_reset(cur, sl->chunk, sl->chunk * cfg->chunk,
                           si_chunk_len(sl->chunk, R->n_images, cfg->chunk), empty);
        }
        SI_ASSERT(cur && cur->id == sl->chunk);
        const uint32_t n = sl->n;
        const uint64_t b0 = sl->first;
        const uint64_t *off = sl->off;
        const si_bytes buf = sl->buf;
        const bool chunk_end = sl->chunk_end; /* the slot is the reader's again after decoding */
        int32_t *status = cur->status + (b0 - cur->first);
        char(*msgs)[SI_MSG_LEN] = cur->msg + (b0 - cur->first);
        for (uint32_t j = 0; j < n; j++) {
            status[j] = sl->status[j];
            if (status[j] != SI_IMG_OK) memcpy(msgs[j], sl->msg[j], SI_MSG_LEN);
        }

        uint8_t *px_out = pixels, *pool = NULL;
        si_rs_item *items = NULL;
        if (S > 0) { /* the slot must be free: its previous batch done */
            while (k - k_ret >= (uint64_t)S)
                if ((st = retire(R, e, fl, &k_ret)) != SI_OK) break;
            if (st != SI_OK) break;
            px_out = si_engine_pixels(e, (int)(k % (uint64_t)S));
            if (packed) {
                pool = si_engine_pack(e, (int)(k % (uint64_t)S), &items, &pk.cap);
                pk.used = 0;
                pk.pending = n;
                SI_ASSERT(pk.crop * n <= pk.cap);
            }
        }
        si_trace_push("decode");
        double t = si_now();
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
                                           px_out + plane * 3 * j) != SI_OK) {
                    status[j] = SI_IMG_UNSUPPORTED;
                    snprintf(msgs[j], SI_MSG_LEN, "%s", si_error_msg());
                }
            }
        } else if (packed) {
            uint64_t spilled = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : spilled)
            for (uint32_t j = 0; j < n; j++) {
                if (status[j] != SI_IMG_OK) {
                    pack_drop(&pk);
                    continue;
                }
                msgs[j][0] = 0;
                status[j] = (int32_t)decode_packed(dec[omp_get_thread_num()], buf.data + off[j],
                                                   off[j + 1] - off[j], &cfg->pre, &pk, pool,
                                                   &jitems[j], &spilled, msgs[j], SI_MSG_LEN);
            }
            R->st.cpu_resized += spilled;
        } else
#pragma omp parallel for schedule(dynamic, 1)
            for (uint32_t j = 0; j < n; j++) {
                if (status[j] != SI_IMG_OK) continue;
                msgs[j][0] = 0;
                status[j] = (int32_t)si_decode_crop(dec[omp_get_thread_num()], buf.data + off[j],
                                                    off[j + 1] - off[j], &cfg->pre,
                                                    px_out + plane * 3 * j, msgs[j], SI_MSG_LEN);
            }
        int rows = 0;
        for (uint32_t j = 0; j < n; j++) {
            if (status[j] == SI_IMG_OK) {
                rowmap[rows++] = (int32_t)j;
            } else if (status[j] != SI_IMG_READ_ERROR) { /* read errors: logged by read_batch */
                char *id = NULL;
                if (si_source_read_ids(set, b0 + j, 1, &id) != SI_OK) id = NULL;
                si_log_warn("image %llu '%s': %s: %s", (unsigned long long)(b0 + j), id ? id : "?",
                            si_image_status_name(status[j]), msgs[j][0] ? msgs[j] : "-");
                free(id);
            }
        }
        if (packed) { /* the good rows' items to the front; the pixels stay where they are */
            for (int r = 0; r < rows; r++) items[r] = jitems[rowmap[r]];
        } else if (S > 0) { /* pack the good rows to the front of the slot's input, as decoded */
            for (int r = 0; r < rows; r++)
                if (rowmap[r] != r)
                    memcpy(px_out + plane * 3 * (size_t)r, px_out + plane * 3 * (size_t)rowmap[r],
                           plane * 3);
        } else {
            float *x = si_engine_input(e, 0);
#pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++)
                si_normalize_chw(pixels + plane * 3 * (size_t)rowmap[r], cfg->pre.crop_h,
                                 cfg->pre.crop_w, cfg->mean, cfg->std, x + plane * 3 * (size_t)r);
        }
        double t1 = si_now();
        R->st.busy[SI_STAGE_DECODE] += t1 - t;
        si_trace_pop();
        si_timeline_add(cfg->timeline, SI_TL_DECODE, (int64_t)k, t, t1);
        lock(R); /* the read slot goes back to the reader */
        R->r_filled--;
        signal_all(R);
        unlock(R);

        if (S > 0) {
            flight *f = &fl[k % (uint64_t)S];
            f->rows = rows;
            f->b0 = b0;
            f->c = cur;
            f->last = chunk_end;
            f->k = (int64_t)k;
            f->t_submit = si_now();
            memcpy(f->rowmap, rowmap, sizeof(int32_t) * (size_t)rows);
            if (rows > 0) {
                t = si_now();
                st = si_engine_submit(e, (int)(k % (uint64_t)S), rows, packed ? pk.used : 0);
                R->st.busy[SI_STAGE_COMPUTE] += si_now() - t;
                if (st != SI_OK) break;
            }
            test_slow(cfg);
            if ((st = service(R)) != SI_OK) break;
            continue;
        }
        if (rows > 0) {
            si_trace_push("compute");
            t = si_now();
            st = si_engine_run(e, rows);
            t1 = si_now();
            R->st.busy[SI_STAGE_COMPUTE] += t1 - t;
            si_trace_pop();
            si_timeline_add(cfg->timeline, SI_TL_COMPUTE, (int64_t)k, t, t1);
            if (st != SI_OK) break;
        }
        test_slow(cfg);
        const float *outs[SI_MAX_OUTPUTS] = {0};
        for (int o = 0; o < p->n_outputs && rows > 0; o++) {
            si_shape sh;
            outs[o] = si_engine_output(e, o, &sh);
            SI_ASSERT(sh.ndim >= 1 && sh.dims[0] == rows);
        }
        flight f = {rowmap, rows, b0, cur, chunk_end, (int64_t)k, 0};
        if ((st = to_post(R, outs, &f)) != SI_OK) break;
        if ((st = service(R)) != SI_OK) break;
    }
    /* the batches still in the GPU's slots, oldest first */
    while (st == SI_OK && S > 0 && k_ret < k) st = retire(R, e, fl, &k_ret);
    if (S > 0 && st != SI_OK) /* nothing may still write into the slots' buffers */
        for (int q = 0; q < S; q++) {
            const float *outs[SI_MAX_OUTPUTS];
            if (k_ret + (uint64_t)q < k && fl[(k_ret + (uint64_t)q) % (uint64_t)S].rows > 0)
                (void)si_engine_collect(e, (int)((k_ret + (uint64_t)q) % (uint64_t)S), outs);
        }
    lock(R);
    R->post_closed = true;
    if (st != SI_OK) R->abort = true;
    signal_all(R);
    unlock(R);
    if (st == SI_OK) st = wait_for(R, all_posted, -1);
    lock(R);
    R->abort = true; /* the reader may still wait for claims */
    signal_all(R);
    unlock(R);
    pthread_join(reader, NULL);
    pthread_join(post, NULL);
    snapshot(R, stats);

    for (int q = 0; q < READ_SLOTS; q++) {
        si_bytes_free(&R->rs[q].buf);
        free(R->rs[q].off);
        free(R->rs[q].status);
        free(R->rs[q].msg);
    }
    for (int q = 0; q < POST_SLOTS; q++) {
        for (int o = 0; o < p->n_outputs; o++) free(R->ps[q].out[o]);
        free(R->ps[q].rowmap);
    }
    for (int q = 0; q < CHUNK_SLOTS; q++) si_chunk_free(&R->chunks[q]);
    pthread_cond_destroy(&R->cv);
    pthread_mutex_destroy(&R->mu);
    for (int t = 0; t < nthreads; t++) si_decoder_destroy(dec[t]);
    free(dec);
#ifdef SI_HAVE_CUDA
    if (pixels_pinned)
        si_cuda_host_free(pixels);
    else
#endif
        free(pixels);
    free(gray_rgb);
    free(rowmap);
    free(jitems);
    pthread_mutex_destroy(&pk.mu);
    for (int q = 0; q < S; q++) free(fl[q].rowmap);
    free(empty);
    free(R->scratch);
    free(R->dets);
    free(R->n_dets);
    free(R);
    return st;
}
