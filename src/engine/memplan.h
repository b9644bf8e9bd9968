/* Memory planning: every RUNTIME value gets an offset in one arena, assigned by liveness (two
 * values share bytes only if no node needs both), greedily, largest first. Views (Reshape,
 * Flatten, ...) share their source's storage and extend its lifetime. Planned for the shapes the
 * graph is inferred for; a smaller batch fits in the same offsets. */
#ifndef SI_MEMPLAN_H
#define SI_MEMPLAN_H

#include "graph.h"

typedef struct {
    int *root;          /* per value: the value whose storage it uses (itself unless a view) */
    size_t *offset;     /* per value: byte offset of its root in the arena (SIZE_MAX if none) */
    size_t arena_bytes; /* the arena's size */
    size_t naive_bytes; /* the sum of every runtime value's size: what one buffer each costs */
} si_memplan;

/* Plans for the graph's current shapes (si_graph_infer first). align: offsets' alignment.
 * Caller frees with si_memplan_free. */
void si_memplan_build(const si_graph *g, size_t align, si_memplan *p);
/* The same with elem bytes per element (2 for FP16 activations) and, when same_bytes is given,
 * only the nodes flagged there share their input's storage (a GPU backend's views that need no
 * copy, and Transposes between an NHWC tensor and its row-major (N, H, W, C) twin); without
 * it every view of a computed value does. */
void si_memplan_build_ex(const si_graph *g, size_t align, size_t elem, const uint8_t *same_bytes,
                         si_memplan *p);
void si_memplan_free(si_memplan *p);

#endif
