/* Reading ONNX files: a hand-written protobuf wire-format reader (no generated code) for the
 * parts of ModelProto that vision CNN exports use: nodes, attributes, initializers (raw_data and
 * typed fields), graph inputs/outputs with shapes, opset imports, metadata. Every length and
 * count is checked against the bytes that remain, so a hostile file yields SI_ERR_FORMAT with a
 * message naming the file and the place, never a crash or an allocation beyond the file size. */
#ifndef SI_ONNX_H
#define SI_ONNX_H

#include "base/common.h"

#define SI_MAX_DIMS 8

/* TensorProto.DataType values. */
typedef enum {
    SI_DT_UNDEFINED = 0,
    SI_DT_FLOAT = 1,
    SI_DT_UINT8 = 2,
    SI_DT_INT8 = 3,
    SI_DT_UINT16 = 4,
    SI_DT_INT16 = 5,
    SI_DT_INT32 = 6,
    SI_DT_INT64 = 7,
    SI_DT_STRING = 8,
    SI_DT_BOOL = 9,
    SI_DT_FLOAT16 = 10,
    SI_DT_DOUBLE = 11,
    SI_DT_UINT32 = 12,
    SI_DT_UINT64 = 13,
    SI_DT_BFLOAT16 = 16
} si_dtype;

const char *si_dtype_name(int dtype);
size_t si_dtype_size(int dtype); /* 0 for STRING and unknown types */

/* A tensor with its data in native little-endian layout of its dtype (typed fields converted). */
typedef struct {
    char *name;
    int dtype;
    int ndim;
    int64_t dims[SI_MAX_DIMS];
    int64_t numel;
    void *data; /* owned; numel * si_dtype_size(dtype) bytes; NULL for STRING */
} si_tensor;

typedef enum {
    SI_ATTR_UNDEFINED = 0,
    SI_ATTR_FLOAT = 1,
    SI_ATTR_INT = 2,
    SI_ATTR_STRING = 3,
    SI_ATTR_TENSOR = 4,
    SI_ATTR_GRAPH = 5,
    SI_ATTR_FLOATS = 6,
    SI_ATTR_INTS = 7,
    SI_ATTR_STRINGS = 8,
    SI_ATTR_TENSORS = 9,
    SI_ATTR_GRAPHS = 10
} si_attr_type;

typedef struct {
    char *name;
    int type;
    float f;
    int64_t i;
    char *s; /* NUL-terminated copy of the bytes */
    int n;   /* count of floats or ints */
    float *floats;
    int64_t *ints;
    si_tensor *t;
} si_attr;

typedef struct {
    char *name, *op_type, *domain;
    int n_inputs, n_outputs, n_attrs;
    char **inputs; /* "" marks an omitted optional input */
    char **outputs;
    si_attr *attrs;
} si_node_proto;

typedef struct {
    char *name;
    int dtype;
    int ndim;                  /* -1 when the shape is unknown */
    int64_t dims[SI_MAX_DIMS]; /* -1 for a symbolic or unknown dimension */
    char *dim_params[SI_MAX_DIMS];
} si_value_info;

typedef struct {
    char *key, *value;
} si_meta_prop;

typedef struct {
    char *path;
    char *dir; /* the model's directory: external data files are resolved (and confined) there */
    int64_t ir_version;
    int64_t opset; /* version of the default ("" or "ai.onnx") domain */
    char *producer;
    int n_nodes, n_inits, n_inputs, n_outputs, n_meta;
    si_node_proto *nodes;
    si_tensor *inits;
    si_value_info *inputs, *outputs;
    si_meta_prop *meta;
} si_model_proto;

/* Parses an ONNX file. On success *out is owned by the caller (free with si_model_proto_free). */
si_status si_model_proto_load(const char *path, si_model_proto **out);
/* Parses an in-memory ModelProto; `name` is used in messages. */
si_status si_model_proto_parse(const uint8_t *buf, size_t len, const char *name,
                               si_model_proto **out);
void si_model_proto_free(si_model_proto *m);

/* Reads a serialized TensorProto (.pb, as in ONNX's test data). Caller frees with
 * si_tensor_free_data. */
si_status si_tensor_load_pb(const char *path, si_tensor *out);
void si_tensor_free_data(si_tensor *t); /* frees the members, not t itself; accepts NULL */

/* Lookups; return NULL when absent. Borrowed. */
const si_attr *si_node_attr(const si_node_proto *n, const char *name);
/* The attribute only if it is a list of ints (a->ints has a->n values, never NULL). */
const si_attr *si_node_attr_ints(const si_node_proto *n, const char *name);
const char *si_model_meta(const si_model_proto *m, const char *key);

#endif
