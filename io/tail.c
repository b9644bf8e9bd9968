/* Parsing a chunk's tail (layout in tail.h). */
#include "io/tail.h"

#include <string.h>

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

/* The head, checked against N images in chunks of `size`. */
static si_status parse_head(const uint8_t *b, size_t len, uint64_t n_images, uint32_t size,
                            si_tail *t) {
    if (len < SI_TAIL_HEAD)
        return si_error(SI_ERR_FORMAT, "chunk record of %zu bytes is too short", len);
    memcpy(&t->id, b, 8);
    memcpy(&t->first, b + 8, 8);
    memcpy(&t->n, b + 16, 4);
    memcpy(&t->n_errors, b + 20, 4);
    memcpy(&t->n_dets, b + 24, 8);
    uint64_t chunks = size ? (n_images + size - 1) / size : 0;
    uint64_t first = t->id * size;
    uint32_t n =
        first < n_images ? (uint32_t)(n_images - first < size ? n_images - first : size) : 0;
    if (t->id >= chunks || t->first != first || t->n != n)
        return si_error(SI_ERR_FORMAT,
                        "chunk record for chunk %llu (images %llu+%u) does not fit %llu images in "
                        "chunks of %u",
                        (unsigned long long)t->id, (unsigned long long)t->first, t->n,
                        (unsigned long long)n_images, size);
    return SI_OK;
}

/* The per-image detection counts and the detections from offset *o; *o moves past them. */
static si_status parse_dets(const uint8_t *b, size_t len, size_t *o, si_tail *t) {
    size_t need = ALIGN8(sizeof(uint32_t) * t->n);
    if (len - *o < need || t->n_dets > (len - *o - need) / sizeof(si_tail_det))
        return si_error(SI_ERR_FORMAT, "chunk %llu: detections truncated",
                        (unsigned long long)t->id);
    t->dets_per_image = (const uint32_t *)(b + *o);
    *o += need;
    t->dets = (const si_tail_det *)(b + *o);
    *o += sizeof(si_tail_det) * t->n_dets;
    uint64_t sum = 0;
    for (uint32_t j = 0; j < t->n; j++) sum += t->dets_per_image[j];
    if (sum != t->n_dets)
        return si_error(SI_ERR_FORMAT, "chunk %llu: detection counts do not add up",
                        (unsigned long long)t->id);
    return SI_OK;
}

/* Every failed image has exactly one message, in ascending order. */
static si_status check_errors(const si_tail *t) {
    size_t pos = 0;
    uint64_t idx;
    const char *m;
    uint16_t l;
    uint32_t j = 0, seen = 0;
    while (si_tail_error(t, &pos, &idx, &m, &l)) {
        while (j < t->n && t->status[j] == SI_IMG_OK) j++;
        if (j == t->n || idx != t->first + j)
            return si_error(SI_ERR_FORMAT, "chunk %llu: error message for image %llu out of place",
                            (unsigned long long)t->id, (unsigned long long)idx);
        j++;
        seen++;
    }
    uint32_t failed = 0;
    for (uint32_t k = 0; k < t->n; k++) failed += t->status[k] != SI_IMG_OK;
    if (seen != t->n_errors || failed != t->n_errors || ALIGN8(pos) != t->errors_bytes)
        return si_error(SI_ERR_FORMAT, "chunk %llu: %u failed images but %u messages",
                        (unsigned long long)t->id, failed, seen);
    return SI_OK;
}

si_status si_tail_parse(const uint8_t *b, size_t len, bool detect, uint64_t n_images, uint32_t size,
                        si_tail *t) {
    memset(t, 0, sizeof *t);
    si_status st = parse_head(b, len, n_images, size, t);
    if (st != SI_OK) return st;
    size_t o = SI_TAIL_HEAD;
    size_t need = ALIGN8(sizeof(int32_t) * t->n);
    if (len - o < need)
        return si_error(SI_ERR_FORMAT, "chunk %llu: record truncated", (unsigned long long)t->id);
    t->status = (const int32_t *)(b + o);
    o += need;
    if (len - o < need)
        return si_error(SI_ERR_FORMAT, "chunk %llu: record truncated", (unsigned long long)t->id);
    t->input_hash = (const uint32_t *)(b + o);
    o += need;
    if (detect) {
        if ((st = parse_dets(b, len, &o, t)) != SI_OK) return st;
    } else if (t->n_dets) {
        return si_error(SI_ERR_FORMAT, "chunk %llu: detections in a run without --post detect",
                        (unsigned long long)t->id);
    }
    t->errors = b + o;
    t->errors_bytes = len - o;
    return check_errors(t);
}

bool si_tail_error(const si_tail *t, size_t *pos, uint64_t *index, const char **msg,
                   uint16_t *len) {
    size_t p = *pos;
    if (t->errors_bytes - p < 10) return false;
    uint16_t l;
    memcpy(&l, t->errors + p + 8, 2);
    if (l == 0 || t->errors_bytes - p - 10 < l) return false; /* padding or a torn record */
    memcpy(index, t->errors + p, 8);
    *len = l;
    *msg = (const char *)t->errors + p + 10;
    *pos = p + 10 + l;
    return true;
}
