/* The engine's ONNX import: one row per ONNX op type, found by name when a node is converted.
 * A device row converts the node into a shardinfer op kind and infers its output shape; a host
 * row (shape arithmetic) converts the node's attributes and evaluates it on the host. Adding an
 * op means one row in its family's table (ops_conv.c, ops_tensor.c, ops_math.c, ops_norm.c,
 * ops_index.c, ops_host.c, attention.c) and its functions. Internal to the graph module. */
#ifndef SI_IMPORT_H
#define SI_IMPORT_H

#include "graph_internal.h"

/* Fills `gn` from the node (gn->op is already the row's kind; x is the first input's value id).
 * Returns false when the node is refused (recorded with si_b_unsupported). */
typedef bool (*si_import_convert_fn)(si_builder *b, const si_node_proto *n, si_gnode *gn, int x);
/* Output shape `y` from input shape `x` (the first input) and the node's parameters; resolves
 * parameters given as CONST/HOST inputs into the node for the backends. */
typedef si_status (*si_import_infer_fn)(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y);

typedef struct {
    const char *onnx; /* ONNX op type */
    int kind;         /* si_op the node becomes */
    si_import_convert_fn convert;
    si_import_infer_fn infer; /* the same for every row of one kind */
} si_import_row;

/* The family tables, each ended by a row with onnx == NULL. */
extern const si_import_row si_import_conv_rows[];
extern const si_import_row si_import_tensor_rows[];
extern const si_import_row si_import_math_rows[];
extern const si_import_row si_import_norm_rows[];
extern const si_import_row si_import_attention_rows[];
extern const si_import_row si_import_index_rows[];

/* The device row for an ONNX op type, or NULL. */
const si_import_row *si_import_device(const char *op_type);

/* --- helpers shared by the converters (import.c) ------------------------------------------- */
/* Input i when it is a CONST value, else NULL. */
const si_value *si_imp_const_in(si_builder *b, const si_node_proto *n, int i);
/* Attaches parameter input i if present (CONST or HOST) and stores its position in *slot (-1
 * when absent). Returns false when it is computed from image data (recorded). */
bool si_imp_add_param(si_builder *b, const si_node_proto *n, si_gnode *gn, int i, int *slot);
/* Copies an ints attribute of older opsets into gn->attr_ints (n_attr_ints). */
bool si_imp_store_attr_ints(si_builder *b, const si_node_proto *n, si_gnode *gn, const char *name);

/* --- helpers shared by the inferrers ------------------------------------------------------- */
int si_imp_norm_axis(int64_t axis, int ndim);
/* Parameter slot k's value, or NULL. */
const si_value *si_imp_param(const si_graph *g, const si_gnode *n, int k);
/* Numpy broadcasting of a and b into y. */
si_status si_imp_broadcast(si_graph *g, si_gnode *n, const si_shape *a, const si_shape *b,
                           si_shape *y);
/* Axes of Squeeze/Unsqueeze/Reduce: from parameter slot 0 or the attribute. Returns the count,
 * -1 when none are given. */
int si_imp_read_axes(const si_graph *g, const si_gnode *n, int64_t *axes);

#endif
