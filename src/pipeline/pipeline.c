/* The per-rank batch loop (stages and queues in pipeline.h), the post thread and the hooks'
 * side of the main thread; the reader is in reader.c, the decode in decode.c. One loop serves
 * every backend through the engine's slot ring: batch k decodes into slot k % S and is
 * submitted, the oldest batch is retired to post when its slot is needed again (at once on the
 * CPU's one synchronous slot). Every buffer is sized at start for the batch and the chunk. One
 * mutex and one condition variable guard all the queues: they change once per batch, so
 * contention is nil and the waits are easy to reason about. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/trace.h"
#include "stages.h"

const char *const si_stage_names[SI_STAGES] = {"read", "decode", "compute",
                                               "post", "write",  "starved"};

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

/* A batch in an engine slot: what post needs once its results are back. */
typedef struct {
    int32_t *rowmap; /* [B] */
    int rows;
    uint64_t b0;
    si_chunk *c;
    bool last;
    int64_t k;       /* the batch's number, for --timeline */
    double t_submit; /* when it went to the engine */
} flight;
#define MAX_SLOTS 16

/* The post thread: each computed batch through the postprocessor on its OpenMP pool, into the
 * batch's chunk; a chunk's last batch puts the chunk on the finished list for the main thread. */
static void *post_main(void *arg) {
    si_pipe *R = arg;
    const si_pipeline_config *cfg = R->cfg;
    const si_post_plan *p = &cfg->plan;
    for (;;) {
        pipe_lock(R);
        while (R->p_count == 0 && !R->post_closed && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
        if (R->abort || R->p_count == 0) {
            pipe_unlock(R);
            break;
        }
        si_post_slot *sl = &R->ps[R->p_head];
        pipe_unlock(R);
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
                si_faillog(R->set, c->first + j, SI_IMG_POST_ERROR, c->msg[j]);
            else if (c->detect && R->n_dets[r] > 0)
                si_chunk_add_dets(c, j, R->dets + (size_t)r * p->max_dets, R->n_dets[r]);
        }
        si_trace_pop();
        double t1 = si_now();
        si_timeline_add(cfg->timeline, SI_TL_POST, sl->k, t, t1);
        pipe_lock(R);
        R->st.busy[SI_STAGE_POST] += t1 - t;
        if (sl->last) {
            R->done_c[(R->d_head + R->d_count) % CHUNK_SLOTS] = c;
            R->d_count++;
        }
        R->p_head = (R->p_head + 1) % POST_SLOTS;
        R->p_count--;
        pipe_signal(R);
        pipe_unlock(R);
    }
    pipe_lock(R);
    R->post_exited = true;
    pipe_signal(R);
    pipe_unlock(R);
    return NULL;
}

static void snapshot(si_pipe *R, si_rank_stats *s) {
    pipe_lock(R);
    *s = R->st;
    pipe_unlock(R);
    s->t_total = si_now() - R->t0;
}

/* Main thread: hands finished chunks to the caller and returns them to the free list. */
static si_status drain(si_pipe *R) {
    for (;;) {
        pipe_lock(R);
        si_chunk *c = R->d_count ? R->done_c[R->d_head] : NULL;
        pipe_unlock(R);
        if (!c) return SI_OK;
        for (uint32_t j = 0; j < c->n; j++)
            c->status[j] == SI_IMG_OK ? R->st.images++ : R->st.failed++;
        pipe_lock(R);
        R->st.chunks++;
        if (R->st.chunks == 1) R->st.t_first = si_now() - R->t0;
        pipe_unlock(R);
        si_rank_stats s;
        snapshot(R, &s);
        double t = si_now();
        si_status st = R->h->chunk_done(R->h->ctx, c, &s);
        double t1 = si_now();
        si_timeline_add(R->cfg->timeline, SI_TL_WRITE, (int64_t)c->id, t, t1);
        pipe_lock(R);
        R->st.busy[SI_STAGE_WRITE] += t1 - t;
        R->d_head = (R->d_head + 1) % CHUNK_SLOTS;
        R->d_count--;
        R->free_c[R->n_free++] = c;
        pipe_signal(R);
        pipe_unlock(R);
        if (st != SI_OK) return st;
    }
}

/* Main thread: tops up the reader's claims. */
static void refill(si_pipe *R) {
    for (;;) {
        pipe_lock(R);
        bool want = !R->claims_closed && R->c_count < CLAIM_AHEAD;
        pipe_unlock(R);
        if (!want) return;
        uint64_t id;
        bool got = R->h->next_chunk(R->h->ctx, &id);
        pipe_lock(R);
        if (got) {
            R->claims[(R->c_head + R->c_count) % (CLAIM_AHEAD + 1)] = id;
            R->c_count++;
        } else {
            R->claims_closed = true;
        }
        pipe_signal(R);
        pipe_unlock(R);
    }
}

/* Main thread: the hooks' share of a pause. */
static si_status service(si_pipe *R) {
    si_status st = drain(R);
    if (st != SI_OK) return st;
    si_rank_stats s;
    snapshot(R, &s);
    double t = si_now();
    st = R->h->pump(R->h->ctx, &s);
    pipe_lock(R);
    R->st.busy[SI_STAGE_WRITE] += si_now() - t;
    pipe_unlock(R);
    refill(R);
    return st;
}

typedef bool (*ready_fn)(const si_pipe *R);
static bool have_read(const si_pipe *R) {
    return R->r_filled > 0 || R->reader_done || R->fault;
}
static bool have_chunk(const si_pipe *R) {
    return R->n_free > 0;
}
static bool have_post(const si_pipe *R) {
    return R->p_count < POST_SLOTS;
}
static bool all_posted(const si_pipe *R) {
    return R->post_exited && R->d_count == 0;
}

/* Main thread: waits until ready(R), servicing the hooks every 2 ms meanwhile. */
static si_status wait_for(si_pipe *R, ready_fn ready, int stage) {
    double t = si_now();
    si_status st = SI_OK;
    pipe_lock(R);
    while (!ready(R) && st == SI_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&R->cv, &R->mu, &ts);
        if (ready(R)) break;
        pipe_unlock(R);
        st = service(R);
        pipe_lock(R);
    }
    if (stage >= 0) R->st.busy[stage] += si_now() - t;
    pipe_unlock(R);
    return st;
}

/* Hands a computed batch to the post thread (waiting for a free post slot): outs[o] holds
 * rows * out_numel[o] floats. */
static si_status to_post(si_pipe *R, const float *const *outs, const flight *f) {
    const si_post_plan *p = &R->cfg->plan;
    si_status st = wait_for(R, have_post, -1);
    if (st != SI_OK) return st;
    si_post_slot *ps = &R->ps[(R->p_head + R->p_count) % POST_SLOTS]; /* free: only main adds */
    for (int o = 0; o < p->n_outputs && f->rows > 0; o++)
        memcpy(ps->out[o], outs[o], sizeof(float) * (size_t)f->rows * (size_t)p->out_numel[o]);
    memcpy(ps->rowmap, f->rowmap, sizeof(int32_t) * (size_t)f->rows);
    ps->rows = f->rows;
    ps->b0 = f->b0;
    ps->c = f->c;
    ps->last = f->last;
    ps->k = f->k;
    pipe_lock(R);
    R->p_count++;
    pipe_signal(R);
    pipe_unlock(R);
    return SI_OK;
}

/* --test-slow-rank: this rank sleeps after each batch. */
static void test_slow(const si_pipeline_config *cfg) {
    if (cfg->slow_ms <= 0) return;
    struct timespec ts = {cfg->slow_ms / 1000, (long)(cfg->slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The main thread's side of the slot ring: batch k decodes into slot k % S (free: up to S - 1
 * earlier batches are in flight meanwhile, a GPU's upload, model and download), then goes in
 * with submit; a batch is retired (collected and handed to post) when its slot is needed again,
 * or at once on a synchronous backend, whose batch is finished when submit returns. */
typedef struct {
    si_engine *e;
    int S;
    uint64_t keep; /* batches that may stay in flight after a submit */
    flight fl[MAX_SLOTS];
    uint64_t k, k_ret; /* batches submitted, retired */
    si_decode *dec;
    si_chunk *cur;  /* the chunk being filled */
    uint8_t *empty; /* a failed image's result row */
} feed;

/* Waits for the oldest batch in flight and hands it to post. */
static si_status retire(si_pipe *R, feed *F) {
    int slot = (int)(F->k_ret % (uint64_t)F->S);
    flight *f = &F->fl[slot];
    const float *outs[SI_MAX_OUTPUTS] = {0};
    if (f->rows > 0) {
        double t = si_now();
        si_status st = si_engine_collect(F->e, slot, outs);
        R->st.busy[SI_STAGE_COMPUTE] += si_now() - t;
        if (st != SI_OK) return st;
        double g0, g1; /* the backend's own times for the batch (a GPU's events) */
        if (R->cfg->timeline && si_engine_slot_times(F->e, slot, &g0, &g1) == SI_OK) {
            if (!si_engine_synchronous(F->e))
                si_timeline_add(R->cfg->timeline, SI_TL_INFLIGHT, f->k, f->t_submit, si_now());
            si_timeline_add(R->cfg->timeline, SI_TL_COMPUTE, f->k, g0, g1);
        }
    }
    si_status st = to_post(R, outs, f);
    if (st == SI_OK) F->k_ret++;
    return st;
}

static si_status retire_and_service(si_pipe *R, feed *F) {
    si_status st = retire(R, F);
    return st == SI_OK ? service(R) : st;
}

/* Read slot sl starts a chunk: takes a free one. Batches in flight hold chunks, so they finish
 * first when none is free. */
static si_status start_chunk(si_pipe *R, feed *F, const si_read_slot *sl) {
    si_status st = SI_OK;
    while (st == SI_OK && F->k_ret < F->k && !have_chunk(R)) st = retire_and_service(R, F);
    if (st == SI_OK) st = wait_for(R, have_chunk, -1);
    if (st != SI_OK) return st;
    pipe_lock(R);
    F->cur = R->free_c[--R->n_free];
    pipe_unlock(R);
    si_chunk_reset(F->cur, sl->chunk, sl->chunk * R->cfg->chunk,
                   si_chunk_len(sl->chunk, R->n_images, R->cfg->chunk), F->empty);
    return SI_OK;
}

/* The batch's content hashes into the chunk (hash, sl->n entries): the reader's for the images it
 * could not read, each readable image's computed here by the OpenMP team (reader.c says why). */
static void keep_hashes(const si_read_slot *sl, uint32_t *hash) {
#pragma omp parallel for schedule(static)
    for (uint32_t j = 0; j < sl->n; j++) {
        size_t len = (size_t)(sl->off[j + 1] - sl->off[j]);
        hash[j] = sl->status[j] != SI_IMG_OK ? sl->hash[j]
                  : len                      ? si_source_hash(sl->buf.data + sl->off[j], len)
                                             : si_source_hash(NULL, 0);
    }
}

/* Decodes read slot sl into the engine slot of batch F->k (free), records the batch in its
 * flight and gives the read slot back to the reader. *packed: as si_decode_batch. */
static void decode(si_pipe *R, feed *F, const si_read_slot *sl, size_t *packed) {
    const int slot = (int)(F->k % (uint64_t)F->S);
    flight *f = &F->fl[slot];
    si_chunk *cur = F->cur;
    int32_t *status = cur->status + (sl->first - cur->first);
    char(*msgs)[SI_MSG_LEN] = cur->msg + (sl->first - cur->first);
    for (uint32_t j = 0; j < sl->n; j++) {
        status[j] = sl->status[j];
        if (status[j] != SI_IMG_OK) memcpy(msgs[j], sl->msg[j], SI_MSG_LEN);
    }
    keep_hashes(sl, cur->hash + (sl->first - cur->first));
    f->b0 = sl->first;
    f->c = cur;
    f->last = sl->chunk_end;
    f->k = (int64_t)F->k;
    si_trace_push("decode");
    double t = si_now();
    f->rows = si_decode_batch(F->dec, slot, sl, status, msgs, f->rowmap, packed, &R->st);
    double t1 = si_now();
    R->st.busy[SI_STAGE_DECODE] += t1 - t;
    si_trace_pop();
    si_timeline_add(R->cfg->timeline, SI_TL_DECODE, f->k, t, t1);
    pipe_lock(R); /* the read slot goes back to the reader */
    R->r_filled--;
    pipe_signal(R);
    pipe_unlock(R);
}

/* Submits the decoded batch F->k; what may not stay in flight goes to post. */
static si_status submit(si_pipe *R, feed *F, size_t packed) {
    const int slot = (int)(F->k % (uint64_t)F->S);
    flight *f = &F->fl[slot];
    f->t_submit = si_now();
    if (f->rows > 0) {
        double t = si_now();
        si_status st = si_decode_packed(F->dec)
                           ? si_engine_submit_packed(F->e, slot, f->rows, packed)
                           : si_engine_submit(F->e, slot, f->rows);
        R->st.busy[SI_STAGE_COMPUTE] += si_now() - t;
        if (st != SI_OK) return st;
    }
    F->k++;
    test_slow(R->cfg);
    while (F->k - F->k_ret > F->keep) {
        si_status st = retire(R, F);
        if (st != SI_OK) return st;
    }
    return service(R);
}

/* The batch loop: read -> decode into a free slot -> submit, until the reader has no more. */
static si_status batch_loop(si_pipe *R, feed *F) {
    for (;;) {
        si_status st = wait_for(R, have_read, SI_STAGE_STARVED);
        if (st != SI_OK) return st;
        pipe_lock(R);
        bool end = R->r_filled == 0;
        si_status fault = R->fault;
        pipe_unlock(R);
        if (fault) /* the chunk being read never finishes: nothing of it is journaled */
            return si_error(fault, "%s", R->fault_msg);
        if (end) return SI_OK;
        const si_read_slot *sl = &R->rs[F->k % READ_SLOTS];
        if (sl->chunk_start && (st = start_chunk(R, F, sl)) != SI_OK) return st;
        SI_ASSERT(F->cur && F->cur->id == sl->chunk);
        while (F->k - F->k_ret >= (uint64_t)F->S) /* the slot's previous batch retires */
            if ((st = retire_and_service(R, F)) != SI_OK) return st;
        size_t packed = 0;
        decode(R, F, sl, &packed);
        if ((st = submit(R, F, packed)) != SI_OK) return st;
    }
}

/* After the loop: the batches still in flight go to post, oldest first (after an error they
 * are only waited for: nothing may still write into the slots' buffers), post finishes, and
 * the threads are told to leave. */
static si_status finish(si_pipe *R, feed *F, si_status st) {
    while (st == SI_OK && F->k_ret < F->k) st = retire_and_service(R, F);
    for (uint64_t q = F->k_ret; st != SI_OK && q < F->k; q++) {
        const float *outs[SI_MAX_OUTPUTS];
        if (F->fl[q % (uint64_t)F->S].rows > 0)
            (void)si_engine_collect(F->e, (int)(q % (uint64_t)F->S), outs);
    }
    pipe_lock(R);
    R->post_closed = true;
    if (st != SI_OK) R->abort = true;
    pipe_signal(R);
    pipe_unlock(R);
    if (st == SI_OK) st = wait_for(R, all_posted, -1);
    pipe_lock(R);
    R->abort = true; /* the reader may still wait for claims */
    pipe_signal(R);
    pipe_unlock(R);
    return st;
}

/* The engine must feed on pixels normalised as the config says. */
static si_status feed_check(const si_pipeline_config *cfg, si_engine *e) {
    SI_ASSERT(si_engine_slots(e) >= 1 && si_engine_slots(e) <= MAX_SLOTS);
    if (!si_engine_pixels(e, 0))
        return si_error(SI_ERR_INTERNAL, "pipeline: the engine has no pixel input (opts.pixels)");
    if (memcmp(si_engine_options(e)->mean, cfg->mean, sizeof cfg->mean) ||
        memcmp(si_engine_options(e)->std, cfg->std, sizeof cfg->std))
        return si_error(SI_ERR_INTERNAL,
                        "pipeline: the engine normalises with another mean/std than the config");
    return SI_OK;
}

/* The main thread's buffers, once for the run; free with feed_free. */
static void feed_init(feed *F, const si_pipeline_config *cfg, si_engine *e, si_source *set) {
    F->e = e;
    F->S = si_engine_slots(e);
    F->keep = si_engine_synchronous(e) ? 0 : (uint64_t)F->S;
    for (int q = 0; q < F->S; q++)
        F->fl[q].rowmap = si_xmalloc(sizeof(int32_t) * (size_t)cfg->batch);
    F->dec = si_decode_create(cfg, e, set);
    F->empty = si_xmalloc(cfg->plan.row_bytes + 1);
    si_post_fill_empty(&cfg->plan, F->empty);
}

static void feed_free(feed *F) {
    for (int q = 0; q < F->S; q++) free(F->fl[q].rowmap);
    si_decode_free(F->dec);
    free(F->empty);
}

/* The threads' shared state with every queue's buffers, once for the run. */
static si_pipe *pipe_create(const si_pipeline_config *cfg, const si_pipeline_hooks *h,
                            si_source *set) {
    const size_t B = (size_t)cfg->batch;
    const si_post_plan *p = &cfg->plan;
    si_pipe *R = si_xcalloc(1, sizeof *R);
    R->cfg = cfg;
    R->h = h;
    R->set = set;
    R->n_images = si_source_count(set);
    pthread_mutex_init(&R->mu, NULL);
    pthread_cond_init(&R->cv, NULL);
    si_reader_init(R);
    for (int k = 0; k < POST_SLOTS; k++) {
        for (int o = 0; o < p->n_outputs; o++)
            R->ps[k].out[o] = si_xmalloc(sizeof(float) * B * (size_t)p->out_numel[o] + 1);
        R->ps[k].rowmap = si_xmalloc(sizeof(int32_t) * B);
    }
    for (int k = 0; k < CHUNK_SLOTS; k++) {
        si_chunk_init(&R->chunks[k], cfg->chunk, p);
        R->free_c[R->n_free++] = &R->chunks[k];
    }
    R->scratch = si_xmalloc(p->scratch_bytes * (size_t)cfg->post_threads + 1);
    R->dets = p->max_dets ? si_xmalloc(sizeof(si_detection) * B * (size_t)p->max_dets) : NULL;
    R->n_dets = si_xmalloc(sizeof(int) * B);
    return R;
}

static void pipe_free(si_pipe *R) {
    si_reader_free(R);
    for (int q = 0; q < POST_SLOTS; q++) {
        for (int o = 0; o < R->cfg->plan.n_outputs; o++) free(R->ps[q].out[o]);
        free(R->ps[q].rowmap);
    }
    for (int q = 0; q < CHUNK_SLOTS; q++) si_chunk_free(&R->chunks[q]);
    pthread_cond_destroy(&R->cv);
    pthread_mutex_destroy(&R->mu);
    free(R->scratch);
    free(R->dets);
    free(R->n_dets);
    free(R);
}

si_status si_pipeline_run(const si_pipeline_config *cfg, si_engine *e, si_source *set,
                          const si_pipeline_hooks *h, si_rank_stats *stats) {
    SI_ASSERT(cfg->chunk > 0 && cfg->chunk % (uint32_t)cfg->batch == 0 && cfg->post_threads > 0);
    si_status st = feed_check(cfg, e);
    if (st != SI_OK) return st;
    si_pipe *R = pipe_create(cfg, h, set);
    feed F = {0};
    feed_init(&F, cfg, e, set);
    R->st.pinned = si_engine_mem(e)->pinned > 0; /* the slots' buffers are page-locked (a GPU's) */

    R->t0 = si_now();
    if (cfg->timeline) cfg->timeline->t0 = R->t0;
    si_faillog_reset();
    refill(R);
    pthread_t reader, post;
    if (pthread_create(&reader, NULL, si_reader_main, R) != 0 ||
        pthread_create(&post, NULL, post_main, R) != 0)
        si_fatal(__FILE__, __LINE__, "pthread_create", "pipeline threads");
    st = batch_loop(R, &F);
    st = finish(R, &F, st);
    pthread_join(reader, NULL);
    pthread_join(post, NULL);
    si_faillog_report();
    snapshot(R, stats);

    feed_free(&F);
    pipe_free(R);
    return st;
}
