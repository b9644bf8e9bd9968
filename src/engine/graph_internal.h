/* Internals shared by the graph builder (graph.c), the op converters (graph_ops.c) and the
 * host evaluator (host_eval.c). Not part of the engine's interface. */
#ifndef SI_GRAPH_INTERNAL_H
#define SI_GRAPH_INTERNAL_H

#include "graph.h"

typedef struct {
    int *slots, cap;
    si_graph *g;
} si_name_map;

typedef struct {
    si_graph *g;
    si_name_map map;
    const si_model_proto *m;
    char *unsupported; /* accumulated "node (op): reason" lines */
    size_t unsup_len;
    int n_unsupported;
} si_builder;

int si_b_add_value(si_builder *b, const char *name);
int si_b_find(si_builder *b, const char *name);
void si_b_unsupported(si_builder *b, const si_node_proto *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Value id of node input i, or -1 when absent or empty. */
int si_b_input(si_builder *b, const si_node_proto *n, int i);
/* A parameter input (shape, axes, scales): must be CONST or HOST. Returns -1 (and records the
 * node as unsupported) when it is computed from image data; -2 when absent. */
int si_b_param(si_builder *b, const si_node_proto *n, int i);
int64_t si_attr_int(const si_node_proto *n, const char *name, int64_t def);
float si_attr_float(const si_node_proto *n, const char *name, float def);

/* Converts a device op into `gn` (fields set, inputs attached). Returns false when the op is
 * unknown or unsupported (recorded). graph_ops.c. */
bool si_convert_device_op(si_builder *b, const si_node_proto *n, si_gnode *gn);
/* Converts a host op (shape arithmetic) into `gn`. host_eval.c. */
bool si_convert_host_op(si_builder *b, const si_node_proto *n, si_gnode *gn);

/* Appends input value `id` to the node. */
void si_node_add_input(si_gnode *gn, int id);

/* Host tensor helpers (host_eval.c): element count and int64 reads of CONST/HOST values. */
int64_t si_value_numel(const si_value *v);
int64_t si_value_i64(const si_value *v, int64_t i); /* element i as int64 (floats truncate) */
double si_value_f64(const si_value *v, int64_t i);

#endif
