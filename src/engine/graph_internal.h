/* Internals shared by the graph builder (graph.c), the device-op import (import.h: import.c and
 * the ops_*.c families) and the host evaluator (ops_host.c). Not part of the engine's
 * interface. */
#ifndef SI_GRAPH_INTERNAL_H
#define SI_GRAPH_INTERNAL_H

#include <string.h>

#include "graph.h"

/* The node that makes value v, NULL for a constant or graph input. Borrows g. */
static inline si_gnode *si_graph_producer(si_graph *g, int v) {
    int p = g->values[v].producer;
    return p >= 0 ? &g->nodes[p] : NULL;
}

/* Whether value v is one of the graph's outputs. */
static inline bool si_graph_is_output(const si_graph *g, int v) {
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o] == v) return true;
    return false;
}

static inline bool si_shape_same(const si_shape *a, const si_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* Whether node r reads its inputs' shapes alone (the host's Shape and Size: the legacy
 * exporter's shapes for a Reshape, which do not keep a fusion from taking their input). */
static inline bool si_reads_shape_only(const si_gnode *r) {
    return r->op == SI_OP_HOST && (!strcmp(r->op_type, "Shape") || !strcmp(r->op_type, "Size"));
}

typedef struct {
    int *slots, cap;
    si_graph *g;
} si_name_map;

/* One line of the unsupported-model message: an op type, or "OpType (reason)" when the node was
 * refused for an attribute, an input or its place in the graph rather than its type. */
typedef struct {
    char *key;
    char *first; /* name of the first node in the group */
    int count;
} si_unsup_group;

/* The reason si_convert_device_op records for an op type it has no row for. */
#define SI_UNSUPPORTED_OP "operator not supported"

typedef struct {
    si_graph *g;
    si_name_map map;
    const si_model_proto *m;
    si_unsup_group *unsup; /* in order of first appearance */
    int n_groups, n_unsupported;
    const si_node_proto *last_unsup; /* a node refused twice counts once */
    /* per value id: produced by an unsupported node, so its readers are not reported */
    bool *from_unsupported;
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
 * unknown or unsupported (recorded). import.c. */
bool si_convert_device_op(si_builder *b, const si_node_proto *n, si_gnode *gn);
/* Converts a host op (shape arithmetic) into `gn`. ops_host.c. */
bool si_convert_host_op(si_builder *b, const si_node_proto *n, si_gnode *gn);

/* Drops the nodes marked dead (op < 0), renumbers producers and recounts uses. graph.c. */
void si_graph_compact(si_graph *g);
/* "a+b": a fused node's op types; the caller frees it. graph.c. */
char *si_graph_join_types(const char *a, const char *b);
/* Node c is absorbed by its producer p: p writes c's output value (graph outputs and later
 * readers keep working) and c is marked dead for si_graph_compact. graph.c. */
void si_graph_absorb(si_graph *g, si_gnode *p, si_gnode *c);
/* Mul before and Add after a LayerNorm taken into it (premul, residual); how many.
 * norm_fusion.c. */
int si_fuse_layernorm_neighbours(si_graph *g);
/* Fuses the exported attention pattern into SI_OP_ATTENTION nodes (shapes inferred at batch 1;
 * host_scalars_at_2[v]: one-element float HOST values at batch 2, NAN otherwise, so scales
 * computed from shapes count only when the batch does not change them); returns how many.
 * attention.c. */
/* si_gnode.view_kind of SI_OP_VIEW: the ONNX op whose shape rule the view follows */
enum { SI_VIEW_IDENTITY = 0, SI_VIEW_FLATTEN, SI_VIEW_RESHAPE, SI_VIEW_SQUEEZE, SI_VIEW_UNSQUEEZE };

/* Transpose node n's perm for rank nd into perm (the reverse when it has none); an error when
 * it is not a permutation of 0..nd-1. ops_tensor.c. */
si_status si_transpose_perm(si_graph *g, si_gnode *n, int nd, int *perm);
/* A new CONST float value of the given shape, taking ownership of data; its id. */
int si_graph_add_const(si_graph *g, const char *name, const si_shape *shape, float *data);
/* Every read of value from (inputs, residuals, premuls) becomes a read of value to. */
void si_graph_replace_reads(si_graph *g, int from, int to);
int si_fuse_attention(si_graph *g, const float *host_scalars_at_2);
/* Lets fused attention read Q, K and V through the layout ops between them and the projection
 * that made them (Reshape, Transpose, Split, Slice, Gather, Squeeze) and write Y through the
 * Transpose after it, where strides can say it, and a RowNorm or Rotary read its input so (the
 * q and k of Swin V2 and EVA-02); the layout ops then die. Returns the operands rewired. */
int si_fuse_attention_views(si_graph *g);
/* Lets a Concat read each input made by a Slice of a computed value through that Slice (starts
 * and steps), when they are the same at batch 1 and 2; the Slices die. Returns the inputs. */
int si_fuse_concat_slices(si_graph *g);
/* Moves a Gather of one token (axis 1 of a rank-3 value, a constant index) up through the
 * row-wise nodes before it, each value entering them gathered first, so they compute one row
 * an image (a ViT head's class token: the last block runs for it alone). Needs the shapes
 * inferred; leaves them to be inferred again. Returns the Gathers moved. token_select.c. */
int si_select_token_early(si_graph *g);

/* Rotary position embeddings (x C + rot(x) S, behind a class token left alone) made one
 * SI_OP_ROTARY node each; the nodes they replace die unread. Needs inferred shapes. Returns the
 * count. rotary.c. */
int si_fuse_rotary(si_graph *g);
si_status si_infer_rotary(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y);

/* x / max(|x|_2 over the last axis, eps) as exported (ReduceL2, Clip, [Expand], Div) made one
 * SI_OP_ROWNORM node each; returns the count (the replaced nodes die unread). Then
 * si_rownorm_take_scale: q = RowNorm(x) read once takes constant c's scale (constant along its
 * rows, varying over one run of their axes: Swin V2's per-head logit scale); false if not.
 * rownorm.c. */
int si_fuse_rownorm(si_graph *g);
bool si_rownorm_take_scale(si_graph *g, int q, int c);
/* The fused attention node att whose q and k (K's rows keys) are each a RowNorm read by it
 * alone, of one eps, k's unscaled and q's scale constant over each matrix: the normalisation
 * moves into att (qk_norm, in[0] and in[1] their inputs, q's scale its last input) and the
 * RowNorms die (op -1; the caller compacts). False, nothing changed, otherwise. */
bool si_rownorm_into_attention(si_graph *g, si_gnode *att);
si_status si_infer_rownorm(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y);
/* The operands' shapes at the current batch from a node's views; an error when the values they
 * read no longer have the shapes the views were made for. */
si_status si_attention_view_shapes(const si_graph *g, const si_gnode *n, si_attn_view op[4]);
/* Node n's input i as read at the shapes inferred now: its strided view (n->aview[i], taken)
 * at this batch, or the value itself row-major. attention_views.c. */
si_status si_view_input(const si_graph *g, const si_gnode *n, int i, si_attn_view *op);

/* Drops the bias of attention nodes where it is zero at batch 2 and 3, so at every batch (a
 * value computed from shapes alone: Hugging Face's eager attention adds a mask of zeros made
 * for the batch when no padding is given), so that the kernels without a bias run. Returns how
 * many. attention.c. */
int si_attention_drop_zero_bias(si_graph *g);
/* nn.MultiheadAttention's out-projection as a Linear layer: a Gemm by a constant matrix becomes
 * MatMul and bias, and Reshape -> Linear -> Reshape that flattens and restores leading axes one
 * Linear over them. Returns the rewrites. layout_moves.c. */
int si_linear_from_gemm(si_graph *g);
/* Transposes that keep the last axis moved across Linear layers: up to compose with the head
 * merge after an attention, down below a packed projection whose heads the attention's views
 * will read. Run after si_fuse_attention, before its views. Returns the moves. layout_moves.c. */
int si_move_transposes(si_graph *g);
/* A Linear layer: MatMul of a computed tensor by a constant (K, N) matrix. graph.c. */
bool si_graph_is_linear(const si_graph *g, const si_gnode *n);
/* A new runtime float value of this shape, made by a pass (the caller sets its producer). */
int si_graph_add_runtime(si_graph *g, const char *name, const si_shape *shape);

/* Inserts count empty nodes (no inputs or outputs; residual, bias and parameter slots -1) at
 * position at; the nodes from there on move count places and their outputs' producers follow.
 * The caller fills the new ones (in topological order) and sets their outputs' producers.
 * Returns the first; pointers into g->nodes taken before are stale. graph.c. */
si_gnode *si_graph_insert_nodes(si_graph *g, int at, int count);
/* Appends input value `id` to the node. */
void si_node_add_input(si_gnode *gn, int id);

/* The indexing ops' geometry from the data's shape x and the indices' ix (ops_index.c), for the
 * device rows and the host rows alike: the shapes checked (an error names the node), then every
 * index of iv against the data (an index out of range is an error at load when the indices are
 * constants, at shape inference when they follow from shapes). GatherND's output shape into y. */
si_status si_elements_geom_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                              const si_shape *ix, int64_t axis, si_elements_geom *geo);
si_status si_elements_check(const si_graph *g, const si_gnode *n, const si_elements_geom *geo,
                            const si_value *iv);
si_status si_gathernd_geom_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                              const si_shape *ix, int64_t batch_dims, si_gathernd_geom *geo,
                              si_shape *y);
si_status si_gathernd_check(const si_graph *g, const si_gnode *n, const si_gathernd_geom *geo,
                            const si_value *iv);
/* ScatterElements' and ScatterND's reduction attribute as si_scatter_reduction; false when it
 * names none (recorded). */
bool si_scatter_reduction_of(si_builder *b, const si_node_proto *n, int *red);

/* Tile's output shape from x's and the repeats (a host tensor, ops_tensor.c), for the device
 * row and the host row alike: one repeat per dim, none negative, and the output at most
 * SI_TILE_MAX_ELEMS elements; a hostile repeats is an error naming the node, before anything is
 * allocated (at load, or at the batch that makes repeats that follow from shapes too large). */
#define SI_TILE_MAX_ELEMS ((int64_t)1 << 31)
si_status si_tile_shape_of(const si_graph *g, const si_gnode *n, const si_shape *x,
                           const si_value *reps, si_shape *y);

/* An Einsum equation parsed (ops_einsum.c): each operand's labels and the output's, letters as
 * 0..51, the ellipsis' dims as the labels after them, right-aligned across operands (an operand
 * whose ellipsis covers fewer dims takes the last ones). */
#define SI_EINSUM_MAX_IN 8
typedef struct {
    int n_in, out_rank;
    int n_ell;         /* dims the ellipsis covers (the most of any operand) */
    bool has_ellipsis; /* some operand has one */
    bool repeats;      /* a label repeats within an operand: a diagonal or a trace */
    int rank[SI_EINSUM_MAX_IN];
    int8_t lab[SI_EINSUM_MAX_IN][SI_MAX_DIMS];
    int8_t out[SI_MAX_DIMS];
} si_einsum_eq;
/* Parses eq for n_in operands of the given ranks (-1: not known, refused only when that operand
 * has an ellipsis), the implicit output (no "->") as numpy forms it. False with the reason in why
 * when malformed or over SI_MAX_DIMS dims. */
bool si_einsum_parse(const char *eq, int n_in, const int *ranks, si_einsum_eq *e, char *why,
                     size_t cap);
/* Einsum of the host tensors in[0..n->n_in) by n->equation into y, any form; refused (an error
 * naming the node) when the output exceeds max_elems or the products 64 times that. */
si_status si_einsum_eval(si_graph *g, si_gnode *n, const si_value *const *in, si_value *y,
                         int64_t max_elems);

/* Einsum on image data (some input not known at load) lowered into Transpose, Unsqueeze,
 * Squeeze, ReduceSum, MatMul and Mul nodes, each converted with si_b_convert; false when refused
 * (the node, the equation and the reason recorded) or a lowered node is. si_einsum_max_nodes:
 * the nodes (and twice that in values) the builder reserves for node n (0 unless an Einsum). */
bool si_einsum_lower(si_builder *b, const si_node_proto *n);
int si_einsum_max_nodes(const si_node_proto *n);
/* Converts one node as the model's own are converted (graph.c); false when refused (recorded). */
bool si_b_convert(si_builder *b, const si_node_proto *n);

/* Host tensor helpers (ops_host.c): element count and int64 reads of CONST/HOST values. */
int64_t si_value_numel(const si_value *v);
int64_t si_value_i64(const si_value *v, int64_t i); /* element i as int64 (floats truncate) */
double si_value_f64(const si_value *v, int64_t i);

#endif
