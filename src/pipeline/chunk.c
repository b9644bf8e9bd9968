/* Chunk results and their tail encoding (the layout in io/tail.h). */
#include "chunk.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)
/* the tail stores the postprocessor's detections as they are */
_Static_assert(sizeof(si_detection) == sizeof(si_tail_det) &&
                   offsetof(si_detection, cls) == offsetof(si_tail_det, cls),
               "si_detection and si_tail_det differ");

void si_chunk_init(si_chunk *c, uint32_t cap, const si_post_plan *p) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->row_bytes = p->row_bytes;
    c->detect = p->kind == SI_POST_DETECT;
    c->status = si_xmalloc(sizeof(int32_t) * cap);
    c->rows = si_xmalloc(p->row_bytes * cap + 1);
    c->msg = si_xmalloc(sizeof *c->msg * cap);
    if (c->detect) c->n_dets = si_xmalloc(sizeof(uint32_t) * cap);
}

void si_chunk_free(si_chunk *c) {
    if (!c) return;
    free(c->status);
    free(c->rows);
    free(c->msg);
    free(c->n_dets);
    free(c->dets);
    memset(c, 0, sizeof *c);
}

void si_chunk_reset(si_chunk *c, uint64_t id, uint64_t first, uint32_t n, const uint8_t *empty) {
    SI_ASSERT(n <= c->cap);
    c->id = id;
    c->first = first;
    c->n = n;
    c->n_det_total = 0;
    for (uint32_t j = 0; j < n; j++) {
        c->status[j] = SI_IMG_NOT_PROCESSED;
        c->msg[j][0] = 0;
        if (c->row_bytes) memcpy(c->rows + (size_t)j * c->row_bytes, empty, c->row_bytes);
        if (c->detect) c->n_dets[j] = 0;
    }
}

void si_chunk_add_dets(si_chunk *c, uint32_t j, const si_detection *d, int n) {
    SI_ASSERT(c->detect && j < c->n && n >= 0);
    if (c->n_det_total + (uint64_t)n > c->det_cap) {
        uint64_t cap = c->det_cap ? c->det_cap : 1024;
        while (cap < c->n_det_total + (uint64_t)n) cap *= 2;
        c->dets = si_xrealloc(c->dets, sizeof *c->dets * cap);
        c->det_cap = cap;
    }
    memcpy(c->dets + c->n_det_total, d, sizeof *d * (size_t)n);
    c->n_det_total += (uint64_t)n;
    c->n_dets[j] += (uint32_t)n;
}

static size_t msg_len(const char *m) {
    size_t l = strnlen(m, SI_MSG_LEN - 1);
    return l ? l : 1; /* an empty message is stored as "-" */
}

size_t si_chunk_tail_size(const si_chunk *c) {
    size_t b = SI_TAIL_HEAD + ALIGN8(sizeof(int32_t) * c->n);
    if (c->detect) b += ALIGN8(sizeof(uint32_t) * c->n) + sizeof(si_detection) * c->n_det_total;
    size_t e = 0;
    for (uint32_t j = 0; j < c->n; j++)
        if (c->status[j] != SI_IMG_OK) e += 10 + msg_len(c->msg[j]);
    return b + ALIGN8(e);
}

void si_chunk_tail_pack(const si_chunk *c, uint8_t *dst) {
    uint32_t n_err = 0;
    for (uint32_t j = 0; j < c->n; j++) n_err += c->status[j] != SI_IMG_OK;
    uint8_t *p = dst;
    memcpy(p, &c->id, 8);
    memcpy(p + 8, &c->first, 8);
    memcpy(p + 16, &c->n, 4);
    memcpy(p + 20, &n_err, 4);
    memcpy(p + 24, &c->n_det_total, 8);
    p += SI_TAIL_HEAD;
    memcpy(p, c->status, sizeof(int32_t) * c->n);
    memset(p + sizeof(int32_t) * c->n, 0, ALIGN8(sizeof(int32_t) * c->n) - sizeof(int32_t) * c->n);
    p += ALIGN8(sizeof(int32_t) * c->n);
    if (c->detect) {
        memcpy(p, c->n_dets, sizeof(uint32_t) * c->n);
        memset(p + 4 * (size_t)c->n, 0, ALIGN8(4 * (size_t)c->n) - 4 * (size_t)c->n);
        p += ALIGN8(sizeof(uint32_t) * c->n);
        memcpy(p, c->dets, sizeof(si_detection) * c->n_det_total);
        p += sizeof(si_detection) * c->n_det_total;
    }
    uint8_t *e0 = p;
    for (uint32_t j = 0; j < c->n; j++) {
        if (c->status[j] == SI_IMG_OK) continue;
        uint64_t idx = c->first + j;
        uint16_t l = (uint16_t)msg_len(c->msg[j]);
        memcpy(p, &idx, 8);
        memcpy(p + 8, &l, 2);
        memcpy(p + 10, c->msg[j][0] ? c->msg[j] : "-", l);
        p += 10 + l;
    }
    size_t e = (size_t)(p - e0);
    memset(p, 0, ALIGN8(e) - e);
}
