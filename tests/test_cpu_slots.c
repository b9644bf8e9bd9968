/* The CPU backend's one synchronous slot against its plain run: seeded random pixels through
 * pixels -> submit -> collect must give exactly (bit for bit) what si_engine_run gives on the
 * same pixels normalised by si_normalize_chw, for full and short batches, with every output
 * poisoned before each run. Also the slot contract: one slot, synchronous, no packed buffer,
 * run times in order. Usage: test_cpu_slots MODEL.onnx */
#include <string.h>

#include "engine/engine.h"
#include "io/jpeg.h"
#include "tests/test_util.h"

#define B 4

static void poison(const float *p, size_t n) {
    memset((void *)(uintptr_t)p, 0xff, n * sizeof(float)); /* NaN everywhere */
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_cpu_slots MODEL.onnx\n");
        return 2;
    }
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    si_graph *g1, *g2;
    si_engine *slot = NULL, *ref = NULL;
    if (si_graph_load(argv[1], NULL, &g1) != SI_OK || si_graph_load(argv[1], NULL, &g2) != SI_OK) {
        fprintf(stderr, "%s\n", si_error_msg());
        return 1;
    }
    si_engine_opts o = {.pixels = true};
    memcpy(o.mean, mean, sizeof mean);
    memcpy(o.std, std, sizeof std);
    if (si_engine_create_opts(g1, "cpu", B, &o, &slot) != SI_OK ||
        si_engine_create(g2, "cpu", B, &ref) != SI_OK) {
        fprintf(stderr, "engine: %s\n", si_error_msg());
        return 1;
    }
    CHECK(si_engine_slots(slot) == 1 && si_engine_synchronous(slot));
    si_slot_pack pk;
    memset(&pk, 0xff, sizeof pk);
    CHECK(!si_engine_pack(slot, 0, &pk) && pk.host == NULL && pk.items == NULL && pk.cap == 0);
    CHECK(si_engine_pixels(ref, 0) == NULL); /* no pixel path asked for */

    const si_graph *G = si_engine_graph(slot);
    si_shape in = G->values[G->inputs[0]].shape;
    const int h = (int)in.dims[2], w = (int)in.dims[3];
    const size_t img = (size_t)h * (size_t)w * 3;
    unsigned seed = 20261123u;
    const int rows[3] = {B, 3, B}; /* a short batch between full ones */
    const float *outs[SI_MAX_OUTPUTS] = {0};
    for (int k = 0; k < 3; k++) {
        uint8_t *px = si_engine_pixels(slot, 0);
        for (size_t i = 0; i < img * (size_t)rows[k]; i++) px[i] = (uint8_t)(test_rand(&seed) >> 9);
        float *x = si_engine_input(ref, 0);
        for (int r = 0; r < rows[k]; r++)
            si_normalize_chw(px + img * (size_t)r, h, w, mean, std, x + img * (size_t)r);
        /* poison: the slot's input and both engines' outputs of the batch before */
        poison(si_engine_input(slot, 0), img * B);
        for (int q = 0; k > 0 && q < G->n_outputs; q++) {
            si_shape s; /* filled before its size is read: arguments have no order in C */
            const float *prev = si_engine_output(ref, q, &s);
            poison(prev, (size_t)si_shape_numel(&s));
            poison(outs[q], (size_t)si_shape_numel(&s));
        }
        double t_before = si_now();
        CHECK_MSG(si_engine_submit(slot, 0, rows[k]) == SI_OK, "%s", si_error_msg());
        CHECK_MSG(si_engine_collect(slot, 0, outs) == SI_OK, "%s", si_error_msg());
        double t0 = 0, t1 = -1;
        CHECK(si_engine_slot_times(slot, 0, &t0, &t1) == SI_OK);
        CHECK(t_before <= t0 && t0 <= t1 && t1 <= si_now());
        CHECK_MSG(si_engine_run(ref, rows[k]) == SI_OK, "%s", si_error_msg());
        for (int q = 0; q < G->n_outputs; q++) {
            si_shape s, rs;
            const float *want = si_engine_output(ref, q, &rs);
            si_engine_output(slot, q, &s);
            CHECK(s.ndim == rs.ndim && s.dims[0] == rows[k] && rs.dims[0] == rows[k]);
            size_t n = (size_t)si_shape_numel(&rs);
            CHECK_MSG(outs[q] && !memcmp(outs[q], want, n * sizeof(float)),
                      "batch %d (%d rows), output %d differs from si_engine_run", k, rows[k], q);
            bool finite = true;
            for (size_t i = 0; i < n; i++) finite = finite && isfinite(want[i]);
            CHECK_MSG(finite, "batch %d output %d: not finite (poison left)", k, q);
        }
    }
    CHECK(si_engine_submit(slot, 0, B + 1) != SI_OK); /* past max_batch: an error */
    si_engine_free(slot);
    si_engine_free(ref);
    return test_finish();
}
