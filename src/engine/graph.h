/* The executable graph: ONNX nodes turned into shardinfer ops with checked attributes, and the
 * passes that run at load: constant folding, dead-node removal, BatchNorm folded into Conv,
 * activations (Relu, Clip, HardSwish, SiLU as Sigmoid*Mul, GELU as exported, ...), Linear
 * layers' bias Adds and residual Adds fused into the
 * op before them, and shape inference with a symbolic batch dimension.
 *
 * Values are of three kinds. CONST: known when the model loads (initializers, Constant nodes,
 * folded results). HOST: small tensors computed from shapes (Shape -> Gather -> Concat ->
 * Reshape, as exporters emit them), re-evaluated on the host whenever the batch size changes.
 * RUNTIME: float tensors that the backend computes. Backend-neutral: every backend executes the
 * RUNTIME nodes of this form and reads CONST/HOST values from si_value.data. */
#ifndef SI_GRAPH_H
#define SI_GRAPH_H

#include "onnx.h"
#include "ops.h"

typedef enum {
    SI_OP_CONV = 0,
    SI_OP_MAXPOOL,
    SI_OP_AVGPOOL,
    SI_OP_GLOBAL_AVGPOOL,
    SI_OP_GEMM,
    SI_OP_MATMUL,
    SI_OP_BINARY,     /* Add, Sub, Mul, Div, Pow, Min, Max with broadcasting */
    SI_OP_ACTIVATION, /* Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Gelu and the
                         unary math ops (Erf, Tanh, Sqrt, Reciprocal, Exp, Log, ...: si_act_kind) */
    SI_OP_AFFINE,     /* BatchNormalization not folded into a Conv */
    SI_OP_VIEW,       /* Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout: same bytes */
    SI_OP_CONCAT,
    SI_OP_SPLIT,
    SI_OP_SLICE,
    SI_OP_TRANSPOSE,
    SI_OP_EXPAND,
    SI_OP_GATHER,
    SI_OP_RESIZE,
    SI_OP_SOFTMAX,
    SI_OP_PAD,
    SI_OP_REDUCE,
    SI_OP_HOST, /* evaluated on the host from CONST/HOST inputs (shape arithmetic) */
    /* LayerNormalization (rows of x[axis:], Scale and B repeated over them) and
     * InstanceNormalization (per (n, c) over the spatial dims) */
    SI_OP_LAYERNORM,
    SI_OP_INSTANCENORM,
    /* softmax(alpha * Q K^T + bias) V (attention.c): ONNX's Attention or the fused pattern */
    SI_OP_ATTENTION,
    /* the indexing ops, their indices constants or values that follow from shapes */
    SI_OP_GATHER_ND,
    SI_OP_GATHER_ELEMENTS,
    SI_OP_SCATTER_ELEMENTS, /* in[0] data, in[pslot[0]] indices, in[2] updates */
    SI_OP_ROTARY,           /* in[0] x (.., T, D), in[1] cos, in[2] sin (T - rot_skip, D) */
    SI_OP_TILE,             /* in[0] data, in[pslot[0]] repeats; a broadcast (kernel_math.h) */
    SI_OP_ROWNORM,          /* in[0] x; in[1] the rows' scales (rn_mod of them), if any */
    SI_OP_COUNT
} si_op;

const char *si_op_name(int op);

typedef struct {
    int ndim;
    int64_t dims[SI_MAX_DIMS];
} si_shape;

/* Element count; saturates instead of overflowing, so hostile dims hit the size caps. */
int64_t si_shape_numel(const si_shape *s);
int64_t si_mul_sat(int64_t a, int64_t b);
/* double -> int64 truncating, NaN -> 0, saturating (a plain cast of those is undefined). */
int64_t si_f2i_sat(double v);

typedef enum { SI_VAL_RUNTIME = 0, SI_VAL_CONST, SI_VAL_HOST } si_value_kind;

typedef struct {
    char *name;
    int kind;       /* si_value_kind */
    int dtype;      /* SI_DT_FLOAT or SI_DT_INT64 (every integer and bool type) */
    si_shape shape; /* for the current batch size (si_graph_infer) */
    bool is_input;  /* runtime graph input */
    bool batch_dim; /* dim 0 of a runtime input is symbolic: it is the batch */
    void *data;     /* CONST and HOST values: float32 or int64 data, owned */
    int producer;   /* node index, -1 for inputs and constants */
    /* A 4-D image-like (N, C, H, W) runtime value: read or written by a spatial op (Conv,
     * pooling, Resize, BatchNorm, InstanceNorm), or joined to one through elementwise ops, or a
     * 4-D graph input. Backends may store these channel-last; other 4-D values (a transformer's
     * (N, heads, T, D) or (N, H, W, C) tensors) stay in ONNX's row-major order. */
    bool spatial;
    int uses; /* node inputs reading it, graph outputs included */
} si_value;

#define SI_MAX_OUTPUTS 16

/* One input of a Concat read through the Slice that made it (concat_views.c): the part at
 * `starts` every `steps` of in[i], so the Slice's copy is never made (Swin's torch.roll is two
 * Slices and a Concat per axis). Dim 0 of both shapes is the batch's (set at infer). */
typedef struct {
    bool on;
    si_shape src;   /* in[i]'s shape */
    si_shape shape; /* the part read */
    int64_t starts[SI_MAX_DIMS], steps[SI_MAX_DIMS];
} si_slice_view;

/* One operand of a fused attention node as a strided view (attention_views.c): Q, K or V read
 * from in[0..2], or Y written into out, at an element offset and strides, so the head split of
 * a packed QKV projection and the head merge after it are never copied. Dim 0 of the logical
 * shape is the batch's; the source's batch axis may be any (a sequence-first (T, N, 3E)
 * projection, as nn.MultiheadAttention writes it). As stored, off, st and the source's shape
 * are at batch 0, and off_b, st_b what each grows by per image; si_attention_operands gives them
 * at the inferred batch. */
typedef struct {
    si_shape shape; /* the operand's logical shape */
    si_shape src;   /* the shape of the value read or written */
    int64_t off, st[SI_MAX_DIMS];
    int64_t off_b, st_b[SI_MAX_DIMS];
    int src_batch; /* the axis of src whose extent is the batch; -1: none (a fixed batch) */
    bool taken;    /* false: the value itself, row-major */
} si_attn_view;

typedef enum { SI_PAD_NOTSET = 0, SI_PAD_SAME_UPPER, SI_PAD_SAME_LOWER, SI_PAD_VALID } si_auto_pad;

typedef struct {
    int op;
    char *name;    /* the ONNX node's name, for messages */
    char *op_type; /* the ONNX op type(s), e.g. "Conv+BatchNormalization+Relu" after fusion */
    int *in, n_in; /* value ids; parameter inputs (shapes, axes, scales) are CONST or HOST */
    int out;       /* first output; Split has n_out of them in outs */
    int outs[SI_MAX_OUTPUTS], n_out;
    si_act act;   /* fused activation (or the op itself for SI_OP_ACTIVATION) */
    int residual; /* Conv, MatMul: value added before the activation (fused residual Add);
                     LayerNorm: added to its output (a post-norm block's Add); -1 if none */
    int premul;   /* LayerNorm: value x is multiplied by first (SwiGLU's gate product), -1 if
                     none */
    int bias;     /* MatMul: a constant per-column bias (fused Add of a Linear layer), -1 if none */
    int pslot[4]; /* positions in `in` of parameter inputs (op-specific order), -1 if absent */
    struct {
        int kh, kw, sh, sw, dh, dw, pads[4]; /* pads: top, left, bottom, right */
        int group, auto_pad, ceil_mode, count_include_pad;
    } win;                /* Conv, MaxPool, AveragePool */
    si_conv_shape conv;   /* filled by si_graph_infer */
    si_pool_shape pool;   /* filled by si_graph_infer */
    int trans_a, trans_b; /* Gemm */
    float alpha, beta;
    si_binop binop;
    int axis;              /* Flatten, Concat, Split, Softmax, Gather (normalised at infer) */
    int legacy_axis;       /* Softmax before opset 13: coerce to 2-D at axis */
    int perm[SI_MAX_DIMS]; /* Transpose (normalised at infer) */
    int64_t starts[SI_MAX_DIMS], steps[SI_MAX_DIMS]; /* Slice, resolved at infer */
    int64_t pads[2 * SI_MAX_DIMS];                   /* Pad, resolved at infer */
    int pad_mode;
    float pad_value;
    int reduce_op, keepdims, noop_with_empty_axes; /* Reduce* */
    uint8_t reduce_mask[SI_MAX_DIMS];
    float epsilon; /* LayerNormalization, InstanceNormalization */
    si_resize_params resize;
    int batch_dims;         /* GatherND */
    int reduction;          /* ScatterElements: si_scatter_reduction */
    si_elements_geom elems; /* GatherElements, ScatterElements: filled by si_graph_infer */
    si_gathernd_geom gnd;   /* GatherND: filled by si_graph_infer */
    float scales[2];        /* Resize: output/input of H and W, resolved at infer */
    int64_t attr_ints[2 * SI_MAX_DIMS]; /* attribute-given parameters of older opsets */
    int n_attr_ints;
    int64_t split_sizes[SI_MAX_OUTPUTS];
    bool split_from_attr;
    int view_kind;         /* SI_OP_VIEW: which ONNX op (for shape inference) */
    int host_op;           /* SI_OP_HOST: which host operation */
    unsigned host_present; /* SI_OP_HOST: bit k set when ONNX input k is present */
    int64_t host_i[4];     /* host op integer attributes (Shape start/end, Cast to, axis, ...) */
    float host_f;
    si_tensor *host_t;      /* ConstantOfShape value */
    char *equation;         /* Einsum on the host (owned) */
    si_attn_view *aview;    /* Attention: Q, K, V, Y views (4, owned); RowNorm and Rotary: their
                               input's (1, owned); NULL when all are row-major */
    si_slice_view *sview;   /* Concat: per input (n_in, owned), NULL when none reads a Slice */
    bool bias_tiles;        /* Attention: the bias's batch dims repeat (index mod extent): Swin's
                               per-window mask over (images x windows) */
    int rot_skip;           /* Rotary: the leading tokens left as they are (a class token) */
    bool rot_half;          /* Rotary: partners D/2 apart (rotate_half), not adjacent pairs */
    int64_t rn_div, rn_mod; /* RowNorm: row r scaled by in[1][(r / rn_div) % rn_mod] (mod 0: 1);
                               cosine Attention: matrix b's q by in[n_in - 1][(b / rn_div) %
                               rn_mod] */
    int qk_norm; /* Attention: 0, or 1 when q and k rows are L2-normalised first, each divided by
                    max(|row|, epsilon) (Swin V2's cosine attention, its RowNorms absorbed); 2:
                    q's then scaled per matrix by the last input, as rn_div and rn_mod say */
} si_gnode;

/* Attention: the bias or mask added to the scores (in[3]), or -1; a cosine attention's per-head
 * scales of q come last. */
static inline int si_attention_bias(const si_gnode *n) {
    return n->n_in - (n->qk_norm == 2) > 3 ? n->in[3] : -1;
}
static inline int si_attention_qk_scale(const si_gnode *n) {
    return n->qk_norm == 2 ? n->in[n->n_in - 1] : -1;
}

/* LayerNorm: whether ONNX's B is given (in[2]); a fused premul and residual follow the ONNX
 * inputs in `in`. */
static inline bool si_layernorm_has_bias(const si_gnode *n) {
    return n->n_in - (n->residual >= 0) - (n->premul >= 0) > 2;
}

typedef struct si_graph {
    char *path;
    int64_t opset;
    int n_values, n_nodes, n_inputs, n_outputs, cap_values;
    si_value *values;
    si_gnode *nodes; /* topological order */
    int *inputs;     /* value ids of the runtime inputs */
    int *outputs;    /* value ids of the graph outputs */
    int folded_bn, fused_act, fused_residual, fused_bias, fused_attention, folded_scale,
        folded_consts, removed_nodes;
    int attention_views;  /* attention operands read or written in place (no layout copy) */
    int zero_masks;       /* attention biases dropped: zero at every batch */
    int attention_missed; /* Softmaxes shaped like attention that did not fuse (each warned) */
    int linear_moves;     /* Gemms made Linear layers, and Transposes moved across them */
    int dropped_copies;   /* Pads that add nothing and Slices that keep all, made identity views */
    int concat_slices;    /* Concat inputs read through their Slice (the Slice gone) */
    int token_early;     /* Gathers of one token moved up through row-wise nodes (token_select.c) */
    int fused_rotary;    /* rotary position embeddings made one node (rotary.c) */
    int fused_norm;      /* Muls and Adds fused into LayerNorm (norm_fusion.c) */
    int inferred_batch;  /* batch size the shapes are inferred for, -1 if none yet */
    bool spatial_marked; /* si_value.spatial is set (at the first si_graph_infer) */
    si_meta_prop *meta;
    int n_meta;
} si_graph;

typedef struct {
    /* Constants supplied for graph inputs (ONNX node tests pass Reshape's shape and Clip's
     * bounds as inputs; shardinfer needs such parameters when the model loads). Borrowed. */
    const si_tensor *bind;
    int n_bind;
    bool no_fusion; /* keep BatchNorm, activations and Adds as separate ops (for tests) */
} si_graph_opts;

/* Builds the graph from a parsed model. All unsupported nodes are listed in one message.
 * *out is owned by the caller (si_graph_free). opts may be NULL. */
si_status si_graph_build(const si_model_proto *m, const si_graph_opts *opts, si_graph **out);
/* Convenience: parse the file and build. */
si_status si_graph_load(const char *path, const si_graph_opts *opts, si_graph **out);
void si_graph_free(si_graph *g);

/* Infers every value's shape for the given batch size (replacing the symbolic dim 0 of runtime
 * inputs) and evaluates the HOST nodes. Does nothing if already inferred for this batch. */
si_status si_graph_infer(si_graph *g, int batch);

/* True when the ONNX input `name` feeds only parameter slots (Clip bounds, Reshape shape,
 * Slice/Pad/Resize parameters, BatchNormalization statistics) and so must be bound as a
 * constant. */
bool si_model_input_is_param(const si_model_proto *m, const char *name);

/* True when every reader of input `name` is an op that exists only as shape arithmetic (Range,
 * Equal, Where, Shape, ...): in real models such inputs come from shapes and constants, so
 * `exec` and the test runner bind them as constants, as they do parameters. */
bool si_model_input_host_only(const si_model_proto *m, const char *name);

const char *si_graph_meta(const si_graph *g, const char *key);

/* A fused attention node's Q, K, V and Y at the inferred batch (attention_views.c): their
 * logical shapes, and the offset and strides at which the backends read in[0..2] and write out
 * (row-major unless the node has views). */
void si_attention_operands(const si_graph *g, const si_gnode *n, si_attn_view op[4]);
/* A row-wise node's rows (RowNorm, Rotary) at the shapes inferred now: its output's *rows rows
 * of *d elements, and where each starts in its input 0 (rg: through its strided view, when it
 * has one, the head split of a packed projection read in place). */
si_status si_node_rows(const si_graph *g, const si_gnode *n, si_row_geom *rg, int64_t *rows,
                       int64_t *d);
/* The shape of Concat input i at the inferred batch: its part when read through a Slice
 * (sview; concat_views.c); an error when in[i] no longer has the shape the view was made for. */
si_status si_concat_input_shape(const si_graph *g, const si_gnode *n, int i, si_shape *s);

/* --- internal to the graph module (graph.c, import.c, ops_*.c) ------------------------------- */
/* Evaluates a HOST node from its inputs' data; (re)allocates its outputs' data. */
si_status si_host_eval(si_graph *g, si_gnode *n);
/* Whether an ONNX op type can be evaluated on the host. */
bool si_host_supports(const char *op_type);
/* Device-op shape inference (import.c). */
si_status si_graph_infer_node(si_graph *g, si_gnode *n);
si_status si_node_error(const si_graph *g, const si_gnode *n, si_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
