/* The executable graph: ONNX nodes turned into shardinfer ops with checked attributes, constants
 * converted to float, BatchNormalization folded into the preceding Conv, Relu/Clip fused into
 * the op before them, and shape inference with a symbolic batch dimension. Backend-neutral: the
 * CPU and CUDA backends both execute this form. Unsupported nodes are all reported at once. */
#ifndef SI_GRAPH_H
#define SI_GRAPH_H

#include "cpu_kernels.h"
#include "onnx.h"

typedef enum {
    SI_OP_CONV = 0,
    SI_OP_MAXPOOL,
    SI_OP_GLOBAL_AVGPOOL,
    SI_OP_GEMM,
    SI_OP_BINARY,     /* Add (Sub, Mul, Div share the kernel) */
    SI_OP_ACTIVATION, /* Relu, Clip */
    SI_OP_AFFINE,     /* BatchNormalization not folded into a Conv */
    SI_OP_VIEW,       /* Flatten, Reshape, Identity: same bytes, new shape */
    SI_OP_COUNT
} si_op;

const char *si_op_name(int op);

typedef struct {
    int ndim;
    int64_t dims[SI_MAX_DIMS];
} si_shape;

int64_t si_shape_numel(const si_shape *s);

typedef struct {
    char *name;
    int dtype;      /* of the ONNX value; runtime values are float32 */
    si_shape shape; /* inferred for the current batch size (si_graph_infer) */
    bool is_const;  /* initializer or folded constant: data holds it */
    bool is_input;  /* runtime graph input */
    bool batch_dim; /* dim 0 of a runtime input is symbolic: it is the batch */
    void *data;     /* constant data (float32 for float values, int64 for int values) */
    int producer;   /* node index, -1 for inputs and constants */
    int uses;       /* number of node inputs reading it, graph outputs included */
} si_value;

typedef enum { SI_PAD_NOTSET = 0, SI_PAD_SAME_UPPER, SI_PAD_SAME_LOWER, SI_PAD_VALID } si_auto_pad;

typedef struct {
    int op;
    char *name;    /* the ONNX node's name, for messages */
    char *op_type; /* the ONNX op type(s), e.g. "Conv+BatchNormalization+Relu" after fusion */
    int in[5], n_in;
    int out;
    si_act act; /* fused activation (or the op itself for SI_OP_ACTIVATION) */
    struct {
        int kh, kw, sh, sw, dh, dw, pads[4]; /* pads: top, left, bottom, right */
        int group, auto_pad, ceil_mode;
    } win;                /* Conv and MaxPool attributes */
    si_conv_shape conv;   /* filled by si_graph_infer */
    si_pool_shape pool;   /* filled by si_graph_infer */
    int trans_a, trans_b; /* Gemm */
    float alpha, beta;
    si_binop binop;
    int axis;                     /* Flatten */
    int64_t reshape[SI_MAX_DIMS]; /* Reshape target as given (0 and -1 resolved at infer) */
    int reshape_ndim, allowzero;
    bool is_reshape, is_flatten;
} si_gnode;

typedef struct si_graph {
    char *path;
    int64_t opset;
    int n_values, n_nodes, n_inputs, n_outputs;
    si_value *values;
    si_gnode *nodes; /* topological order */
    int *inputs;     /* value ids of the runtime inputs */
    int *outputs;    /* value ids of the graph outputs */
    int folded_bn, fused_act;
    si_meta_prop *meta;
    int n_meta;
} si_graph;

typedef struct {
    /* Constants supplied for graph inputs (ONNX node tests pass Reshape's shape and Clip's
     * bounds as inputs; shardinfer needs such parameters when the model loads). Borrowed. */
    const si_tensor *bind;
    int n_bind;
    bool no_fusion; /* keep BatchNorm and activations as separate ops (for tests) */
} si_graph_opts;

/* Builds the graph from a parsed model. All unsupported nodes are listed in one message.
 * *out is owned by the caller (si_graph_free). opts may be NULL. */
si_status si_graph_build(const si_model_proto *m, const si_graph_opts *opts, si_graph **out);
/* Convenience: parse the file and build. */
si_status si_graph_load(const char *path, const si_graph_opts *opts, si_graph **out);
void si_graph_free(si_graph *g);

/* Infers every value's shape for the given batch size (replacing the symbolic dim 0 of runtime
 * inputs). Reports shape errors with the node's name. */
si_status si_graph_infer(si_graph *g, int batch);

/* True when the ONNX input `name` feeds only parameter slots (Clip bounds, Reshape shape,
 * BatchNormalization statistics) and so must be bound as a constant. */
bool si_model_input_is_param(const si_model_proto *m, const char *name);

const char *si_graph_meta(const si_graph *g, const char *key);

#endif
