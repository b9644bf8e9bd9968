/* The pipeline's reader thread: one hyperslab read per batch into a ring of READ_SLOTS slots,
 * ahead of the main thread's decode, from the chunks the main thread claims for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/trace.h"
#include "stages.h"

void si_reader_init(si_pipe *R) {
    const size_t B = (size_t)R->cfg->batch;
    for (int k = 0; k < READ_SLOTS; k++) {
        R->rs[k].off = si_xmalloc(sizeof(uint64_t) * (B + 1));
        R->rs[k].status = si_xmalloc(sizeof(int32_t) * B);
        R->rs[k].msg = si_xmalloc(sizeof(*R->rs[k].msg) * B);
        R->rs[k].hash = si_xmalloc(sizeof(uint32_t) * B);
    }
}

void si_reader_free(si_pipe *R) {
    for (int q = 0; q < READ_SLOTS; q++) {
        si_bytes_free(&R->rs[q].buf);
        free(R->rs[q].off);
        free(R->rs[q].status);
        free(R->rs[q].msg);
        free(R->rs[q].hash);
    }
}

/* Reads a batch (io/source.h: one read, image by image where it fails for an image's sake) and
 * logs the images it could not read. SI_ERR_FAULT (message set) for a fault of the storage or
 * the machine, which no image is charged with. */
static si_status read_batch(si_source *set, uint64_t b0, uint32_t n, si_read_slot *sl) {
    char(*msg)[SI_MSG_LEN] = sl->msg;
    /* the readable images' hashes are the decode team's (keep_hashes): this thread alone reads,
     * and on one GPU it was the stage at its limit (ResNet-50 on an H200: 98% busy at 54 us of
     * CPU an image, of which the hash is about a third where the read alone was measured) */
    si_status st = si_source_read_batch(set, b0, n, &sl->buf, sl->off, sl->status, msg[0],
                                        SI_MSG_LEN, sl->hash, false);
    for (uint32_t j = 0; st == SI_OK && j < n; j++) {
        if (sl->status[j] == SI_IMG_OK) continue;
        si_faillog(set, b0 + j, sl->status[j], msg[j]);
    }
    return st;
}

/* The next claimed chunk into *chunk; false when the claims are closed and taken, or at abort. */
static bool take_claim(si_pipe *R, uint64_t *chunk) {
    pipe_lock(R);
    while (R->c_count == 0 && !R->claims_closed && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
    bool got = !R->abort && R->c_count > 0;
    if (got) {
        *chunk = R->claims[R->c_head];
        R->c_head = (R->c_head + 1) % (CLAIM_AHEAD + 1);
        R->c_count--;
        pipe_signal(R);
    }
    pipe_unlock(R);
    return got;
}

/* Reads a chunk's batches into the ring (batch numbers from *k on); false at abort. */
static bool read_chunk(si_pipe *R, uint64_t chunk, uint64_t *k) {
    const int B = R->cfg->batch;
    const uint64_t first = chunk * R->cfg->chunk;
    const uint32_t len = si_chunk_len(chunk, R->n_images, R->cfg->chunk);
    for (uint32_t done = 0; done < len; (*k)++) {
        pipe_lock(R);
        while (R->r_filled == READ_SLOTS && !R->abort) pthread_cond_wait(&R->cv, &R->mu);
        bool stop = R->abort;
        pipe_unlock(R);
        if (stop) return false;
        si_read_slot *sl = &R->rs[*k % READ_SLOTS];
        sl->chunk = chunk;
        sl->first = first + done;
        sl->n = len - done < (uint32_t)B ? len - done : (uint32_t)B;
        sl->chunk_start = done == 0;
        sl->chunk_end = done + sl->n == len;
        for (uint32_t j = 0; j < sl->n; j++) sl->status[j] = SI_IMG_OK;
        si_trace_push("read");
        double t = si_now(), c0 = si_thread_cpu();
        si_status st = read_batch(R->set, sl->first, sl->n, sl);
        double cpu = si_thread_cpu() - c0;
        si_trace_pop();
        if (st != SI_OK) { /* the main thread stops the run; this batch is never handed on */
            pipe_lock(R);
            R->fault = st;
            snprintf(R->fault_msg, sizeof R->fault_msg, "%s", si_error_msg());
            pipe_signal(R);
            pipe_unlock(R);
            return false;
        }
        double t1 = si_now();
        si_timeline_add(R->cfg->timeline, SI_TL_READ, (int64_t)*k, t, t1);
        done += sl->n;
        pipe_lock(R);
        R->st.busy[SI_STAGE_READ] += t1 - t;
        R->st.read_cpu_s += cpu;
        R->st.bytes_read += sl->off[sl->n] - sl->off[0];
        R->r_filled++;
        pipe_signal(R);
        pipe_unlock(R);
    }
    return true;
}

void *si_reader_main(void *arg) {
    si_pipe *R = arg;
    uint64_t k = 0, chunk;
    while (take_claim(R, &chunk) && read_chunk(R, chunk, &k)) {
    }
    pipe_lock(R);
    R->reader_done = true;
    pipe_signal(R);
    pipe_unlock(R);
    return NULL;
}
