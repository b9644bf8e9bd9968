/* Chunk tails (src/pipeline/chunk.c): pack -> parse round trip with statuses, messages and
 * detections; every corruption of a tail's structure is refused with a message; the progress line's
 * text. */
#include "pipeline/chunk.h"
#include "job/progress.h"
#include "tests/test_util.h"

#include <string.h>

static unsigned seed = 99;

int main(void) {
    si_post_config cfg = si_post_config_default();
    cfg.kind = SI_POST_DETECT;
    si_shape per = {.ndim = 2, .dims = {4 + 3, 50}};
    const char *names[1] = {"out"};
    si_post_plan p;
    CHECK(si_post_plan_make(&cfg, 1, names, &per, &p) == SI_OK);
    const uint64_t N = 1000;
    const uint32_t size = 96;
    si_chunk c;
    si_chunk_init(&c, size, &p);
    uint8_t empty[8];
    for (uint64_t id = 0; id < (N + size - 1) / size; id++) {
        uint32_t n = si_chunk_len(id, N, size);
        si_chunk_reset(&c, id, id * size, n, empty);
        uint64_t dets = 0;
        for (uint32_t j = 0; j < n; j++) {
            c.status[j] = test_rand(&seed) % 5 == 0 ? SI_IMG_CORRUPT : SI_IMG_OK;
            if (c.status[j]) {
                snprintf(c.msg[j], SI_MSG_LEN, "image %u is bad", j);
                continue;
            }
            int nd = (int)(test_rand(&seed) % 4);
            si_detection d[4];
            for (int k = 0; k < nd; k++)
                d[k] = (si_detection){test_randf(&seed), 1, 2, 3, 0.5f, (int32_t)k};
            si_chunk_add_dets(&c, j, d, nd);
            dets += (uint64_t)nd;
        }
        size_t len = si_chunk_tail_size(&c);
        CHECK(len % 8 == 0);
        uint8_t *b = malloc(len);
        memset(b, 0xAB, len); /* poisoned */
        si_chunk_tail_pack(&c, b);
        si_tail t;
        CHECK_MSG(si_tail_parse(b, len, true, N, size, &t) == SI_OK, "%s", si_error_msg());
        CHECK(t.id == id && t.first == id * size && t.n == n && t.n_dets == dets);
        CHECK(memcmp(t.status, c.status, 4 * n) == 0);
        CHECK(memcmp(t.dets, c.dets, sizeof(si_detection) * dets) == 0);
        size_t pos = 0;
        uint64_t idx;
        const char *msg;
        uint16_t ml;
        uint32_t seen = 0;
        while (si_tail_error(&t, &pos, &idx, &msg, &ml)) {
            char want[64];
            snprintf(want, sizeof want, "image %u is bad", (unsigned)(idx - id * size));
            CHECK(ml == strlen(want) && memcmp(msg, want, ml) == 0 && c.status[idx - id * size]);
            seen++;
        }
        CHECK(seen == t.n_errors);
        /* corruptions: each must be refused, none may crash */
        uint8_t *bad = malloc(len);
        for (int k = 0; k < 6; k++) {
            memcpy(bad, b, len);
            size_t blen = len;
            switch (k) {
            case 0: blen = 16; break;                            /* truncated header */
            case 1: bad[0] ^= 1; break;                          /* another chunk's id */
            case 2: bad[16] ^= 1; break;                         /* image count */
            case 3: blen = len > 40 ? len - 24 : len / 2; break; /* cut short */
            case 4: bad[24] ^= 2; break;                         /* detection total */
            case 5: bad[32] = bad[32] ? 0 : 3; break;            /* a status flipped */
            }
            si_tail tt;
            CHECK_MSG(si_tail_parse(bad, blen, true, N, size, &tt) == SI_ERR_FORMAT,
                      "corruption %d of chunk %llu accepted", k, (unsigned long long)id);
        }
        free(bad);
        free(b);
    }
    si_chunk_free(&c);

    double busy[SI_STAGES] = {0.1, 0.9, 0.5, 0.2, 0.05, 0.95};
    char line[256];
    si_progress_format(line, sizeof line, 250, 1000, 50.0, busy, false);
    CHECK_MSG(!strcmp(line, " 25.0% 250/1000 images, 50.0 images/s, ETA 0:15, bottleneck decode "
                            "(90% busy)"),
              "'%s'", line);
    si_progress_format(line, sizeof line, 1000, 1000, 0.0, busy, true);
    CHECK_MSG(!strncmp(line, "[##############################] 100.0%", 39), "'%s'", line);
    si_progress_format(line, sizeof line, 0, 7200000, 1000.0, busy, false);
    CHECK_MSG(strstr(line, "ETA 2:00:00"), "'%s'", line);
    return test_finish();
}
