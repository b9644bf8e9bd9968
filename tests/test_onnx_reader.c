/* The ONNX reader on crafted protobuf bytes: field decoding (packed and unpacked repeated
 * fields, raw_data and typed data), and hostile inputs (every truncation, wrong wire types,
 * lengths past the end, absurd dims) which must give an error and never crash; then graph
 * building errors: unsupported ops listed together, cycles, missing initializers. */
#include <string.h>

#include "engine/graph.h"
#include "tests/test_util.h"

typedef struct {
    uint8_t b[8192];
    size_t n;
} pb;

static void put_varint(pb *p, uint64_t v) {
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        p->b[p->n++] = c | (v ? 0x80 : 0);
    } while (v);
}
static void put_key(pb *p, int field, int wt) {
    put_varint(p, ((uint64_t)field << 3) | (uint64_t)wt);
}
static void put_bytes(pb *p, int field, const void *d, size_t n) {
    put_key(p, field, 2);
    put_varint(p, n);
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void put_str(pb *p, int field, const char *s) {
    put_bytes(p, field, s, strlen(s));
}
static void put_msg(pb *p, int field, const pb *m) {
    put_bytes(p, field, m->b, m->n);
}
static void put_int(pb *p, int field, uint64_t v) {
    put_key(p, field, 0);
    put_varint(p, v);
}

/* ValueInfoProto for a float tensor with dims (negative = symbolic "N"). */
static void value_info(pb *out, int field, const char *name, int nd, const int64_t *dims) {
    pb shape = {0}, tt = {0}, type = {0}, vi = {0};
    for (int i = 0; i < nd; i++) {
        pb dim = {0};
        if (dims[i] < 0)
            put_str(&dim, 2, "N");
        else
            put_int(&dim, 1, (uint64_t)dims[i]);
        put_msg(&shape, 1, &dim);
    }
    put_int(&tt, 1, SI_DT_FLOAT);
    put_msg(&tt, 2, &shape);
    put_msg(&type, 1, &tt);
    put_str(&vi, 1, name);
    put_msg(&vi, 2, &type);
    put_msg(out, field, &vi);
}

static void node(pb *g, const char *op, const char *name, const char *in0, const char *in1,
                 const char *out) {
    pb n = {0};
    put_str(&n, 1, in0);
    if (in1) put_str(&n, 1, in1);
    put_str(&n, 2, out);
    put_str(&n, 3, name);
    put_str(&n, 4, op);
    put_msg(g, 1, &n);
}

static void model(pb *m, const pb *graph) {
    pb opset = {0};
    put_str(&opset, 1, "");
    put_int(&opset, 2, 13);
    put_int(m, 1, 8);
    put_str(m, 2, "crafted");
    put_msg(m, 7, graph);
    put_msg(m, 8, &opset);
}

/* x (N, 4) -> Add(x, c) -> Relu -> y; c is an initializer with the given encoding. */
static void build_valid(pb *m, int encoding) {
    pb g = {0}, init = {0};
    int64_t d[2] = {-1, 4}, c1[1] = {4};
    const float cv[4] = {0.5f, -1.5f, 2.25f, -3.0f};
    put_int(&init, 1, 4); /* dims: unpacked */
    put_int(&init, 2, SI_DT_FLOAT);
    put_str(&init, 8, "c");
    if (encoding == 0)
        put_bytes(&init, 9, cv, sizeof cv); /* raw_data */
    else if (encoding == 1)
        put_bytes(&init, 4, cv, sizeof cv); /* packed float_data */
    else
        for (int i = 0; i < 4; i++) { /* unpacked float_data */
            put_key(&init, 4, 5);
            memcpy(init.b + init.n, &cv[i], 4);
            init.n += 4;
        }
    node(&g, "Add", "add", "x", "c", "s");
    node(&g, "Relu", "relu", "s", NULL, "y");
    put_str(&g, 2, "g");
    put_msg(&g, 5, &init);
    value_info(&g, 11, "x", 2, d);
    value_info(&g, 12, "y", 2, d);
    (void)c1;
    model(m, &g);
}

static void test_valid(void) {
    for (int enc = 0; enc < 3; enc++) {
        pb m = {0};
        build_valid(&m, enc);
        si_model_proto *mp;
        si_status st = si_model_proto_parse(m.b, m.n, "crafted.onnx", &mp);
        CHECK_MSG(st == SI_OK, "encoding %d: %s", enc, si_error_msg());
        if (st != SI_OK) continue;
        CHECK(mp->ir_version == 8 && mp->opset == 13 && mp->n_nodes == 2);
        CHECK(!strcmp(mp->nodes[0].op_type, "Add") && !strcmp(mp->nodes[1].name, "relu"));
        CHECK(mp->n_inputs == 1 && mp->inputs[0].ndim == 2 && mp->inputs[0].dims[0] == -1 &&
              mp->inputs[0].dims[1] == 4 && !strcmp(mp->inputs[0].dim_params[0], "N"));
        CHECK(mp->n_inits == 1 && mp->inits[0].numel == 4);
        const float *c = mp->inits[0].data;
        CHECK(c[0] == 0.5f && c[1] == -1.5f && c[2] == 2.25f && c[3] == -3.0f);
        /* and it runs: relu(x + c) with a batch of 3 */
        si_graph *g;
        st = si_graph_build(mp, NULL, &g);
        CHECK_MSG(st == SI_OK, "%s", si_error_msg());
        if (st == SI_OK) {
            CHECK(g->fused_act == 1); /* Relu fused into the Add */
            si_graph_free(g);
        }
        si_model_proto_free(mp);
    }
}

static void test_truncations(void) {
    pb m = {0};
    build_valid(&m, 0);
    int errors = 0;
    for (size_t len = 0; len < m.n; len++) {
        /* a copy of exactly len bytes so that ASan sees any read past the end */
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, m.b, len);
        si_model_proto *mp = NULL;
        si_status st = si_model_proto_parse(copy, len, "cut.onnx", &mp);
        if (st != SI_OK) {
            errors++;
            CHECK(strstr(si_error_msg(), "cut.onnx") != NULL);
        }
        si_model_proto_free(mp);
        free(copy);
    }
    /* the trailing opset import can be cut cleanly; everything inside the graph cannot */
    CHECK_MSG(errors >= (int)m.n - 16, "only %d of %zu truncations rejected", errors, m.n);
}

static void test_hostile(void) {
    si_model_proto *mp;
    /* wrong wire type: graph (field 7) as a varint */
    pb a = {0};
    put_int(&a, 7, 5);
    CHECK(si_model_proto_parse(a.b, a.n, "w.onnx", &mp) == SI_ERR_FORMAT);
    /* length past the end */
    pb b = {0};
    put_key(&b, 7, 2);
    put_varint(&b, 1000);
    b.b[b.n++] = 0;
    CHECK(si_model_proto_parse(b.b, b.n, "l.onnx", &mp) == SI_ERR_FORMAT);
    CHECK(strstr(si_error_msg(), "l.onnx") != NULL);
    /* a varint that never ends */
    pb c = {0};
    put_key(&c, 1, 0);
    for (int i = 0; i < 12; i++) c.b[c.n++] = 0xff;
    CHECK(si_model_proto_parse(c.b, c.n, "v.onnx", &mp) == SI_ERR_FORMAT);
    /* not a model at all: text */
    const char *text = "this is not an ONNX file\n";
    CHECK(si_model_proto_parse((const uint8_t *)text, strlen(text), "t.onnx", &mp) != SI_OK);
    /* empty */
    CHECK(si_model_proto_parse((const uint8_t *)"", 0, "e.onnx", &mp) == SI_ERR_FORMAT);
    CHECK(strstr(si_error_msg(), "empty") != NULL);
    /* absurd dims with a tiny raw_data: refused before any allocation of that size */
    pb g = {0}, init = {0}, m = {0};
    put_int(&init, 1, 1u << 30);
    put_int(&init, 1, 1u << 30);
    put_int(&init, 2, SI_DT_FLOAT);
    put_str(&init, 8, "huge");
    put_bytes(&init, 9, "abcd", 4);
    node(&g, "Relu", "r", "x", NULL, "y");
    put_msg(&g, 5, &init);
    int64_t d[2] = {1, 4};
    value_info(&g, 11, "x", 2, d);
    value_info(&g, 12, "y", 2, d);
    model(&m, &g);
    CHECK(si_model_proto_parse(m.b, m.n, "huge.onnx", &mp) == SI_ERR_FORMAT);
    CHECK_MSG(strstr(si_error_msg(), "huge") != NULL, "%s", si_error_msg());
    /* negative dim */
    pb g2 = {0}, init2 = {0}, m2 = {0};
    put_int(&init2, 1, (uint64_t)-5);
    put_int(&init2, 2, SI_DT_FLOAT);
    put_str(&init2, 8, "neg");
    node(&g2, "Relu", "r", "x", NULL, "y");
    put_msg(&g2, 5, &init2);
    value_info(&g2, 11, "x", 2, d);
    value_info(&g2, 12, "y", 2, d);
    model(&m2, &g2);
    CHECK(si_model_proto_parse(m2.b, m2.n, "neg.onnx", &mp) == SI_ERR_FORMAT);
}

static si_status build(pb *g_body, char *msg, size_t cap) {
    pb m = {0};
    model(&m, g_body);
    si_model_proto *mp;
    si_status st = si_model_proto_parse(m.b, m.n, "g.onnx", &mp);
    if (st == SI_OK) {
        si_graph *g = NULL;
        st = si_graph_build(mp, NULL, &g);
        si_graph_free(g);
        si_model_proto_free(mp);
    }
    snprintf(msg, cap, "%s", si_error_msg());
    return st;
}

static void test_graph_errors(void) {
    int64_t d[2] = {1, 4};
    char msg[2048];
    /* two unsupported ops: both named in one message */
    pb g = {0};
    node(&g, "Foo", "first_bad", "x", NULL, "a");
    node(&g, "Relu", "ok", "a", NULL, "b");
    node(&g, "Bar", "second_bad", "b", NULL, "y");
    value_info(&g, 11, "x", 2, d);
    value_info(&g, 12, "y", 2, d);
    si_status st = build(&g, msg, sizeof msg);
    CHECK(st == SI_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(msg, "first_bad") && strstr(msg, "second_bad") && strstr(msg, "Foo") &&
                  strstr(msg, "Bar"),
              "%s", msg);
    /* a cycle: a <- Relu(b), b <- Relu(a) */
    pb c = {0};
    node(&c, "Relu", "r1", "b", NULL, "a");
    node(&c, "Relu", "r2", "a", NULL, "b");
    node(&c, "Add", "r3", "x", "b", "y");
    value_info(&c, 11, "x", 2, d);
    value_info(&c, 12, "y", 2, d);
    st = build(&c, msg, sizeof msg);
    CHECK(st == SI_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(msg, "cycle") != NULL, "%s", msg);
    /* a Conv whose weight is no initializer and no input */
    pb w = {0};
    node(&w, "Conv", "conv", "x", "missing_weight", "y");
    int64_t d4[4] = {1, 3, 8, 8};
    value_info(&w, 11, "x", 4, d4);
    value_info(&w, 12, "y", 4, d4);
    st = build(&w, msg, sizeof msg);
    CHECK(st != SI_OK);
    CHECK_MSG(strstr(msg, "missing_weight") != NULL, "%s", msg);
    /* a graph output nobody produces */
    pb o = {0};
    node(&o, "Relu", "r", "x", NULL, "z");
    value_info(&o, 11, "x", 2, d);
    value_info(&o, 12, "y", 2, d);
    st = build(&o, msg, sizeof msg);
    CHECK(st == SI_ERR_FORMAT);
    CHECK_MSG(strstr(msg, "'y'") != NULL, "%s", msg);
}

/* A float initializer `name` of nd dims into graph g, its values from v (raw_data). */
static void const_init(pb *g, const char *name, int nd, const int64_t *dims, const float *v) {
    pb t = {0};
    int64_t count = 1;
    for (int d = 0; d < nd; d++) {
        put_int(&t, 1, (uint64_t)dims[d]);
        count *= dims[d];
    }
    put_int(&t, 2, SI_DT_FLOAT);
    put_str(&t, 8, name);
    put_bytes(&t, 9, v, (size_t)count * sizeof(float));
    put_msg(g, 5, &t);
}

/* Node `name` of op on inputs ins (constants: folded at load) writing "t", with attribute attr
 * (or none), then y = x + t with x and y of nd dims: building must refuse it, in one message
 * that names the node and says `want`. */
static void check_refused(pb *g, const char *op, const char *name, const char *const *ins, int n_in,
                          const pb *attr, int nd, const int64_t *dims, const char *want) {
    pb n = {0};
    char msg[2048];
    for (int i = 0; i < n_in; i++) put_str(&n, 1, ins[i]);
    put_str(&n, 2, "t");
    put_str(&n, 3, name);
    put_str(&n, 4, op);
    if (attr) put_msg(&n, 5, attr);
    put_msg(g, 1, &n);
    node(g, "Add", "add", "x", "t", "y");
    value_info(g, 11, "x", nd, dims);
    value_info(g, 12, "y", nd, dims);
    si_status st = build(g, msg, sizeof msg);
    CHECK_MSG(st != SI_OK, "built: %s", msg); /* refused at load, the folding's error kept */
    CHECK_MSG(strstr(msg, name) && strstr(msg, want), "%s", msg);
}

/* Transpose of a (2, 3) constant with a perm that is no permutation of its axes: a repeated
 * axis (found by fuzzing: the host evaluator read and wrote past both tensors) and one of the
 * wrong length. */
static void test_bad_perm(void) {
    static const int64_t perms[2][2] = {{0, 0}, {1, -1}};
    static const char *const in[1] = {"c"};
    const float cv[6] = {1, 2, 3, 4, 5, 6};
    const int64_t cd[2] = {2, 3}, d[2] = {2, 2};
    for (int k = 0; k < 2; k++) {
        pb g = {0}, attr = {0};
        const_init(&g, "c", 2, cd, cv);
        put_str(&attr, 1, "perm");
        for (int i = 0; i < 2 && perms[k][i] >= 0; i++) put_int(&attr, 8, (uint64_t)perms[k][i]);
        put_int(&attr, 20, 7); /* INTS */
        check_refused(&g, "Transpose", "bad_transpose", in, 1, &attr, 2, d,
                      k ? "perm has 1 values" : "perm is not a permutation");
    }
}

/* Concat of constants whose inputs differ off the axis: (2, 3) and (1, 1) on axis 0 read past
 * the smaller one. */
static void test_bad_concat(void) {
    static const char *const in[2] = {"a", "b"};
    const float cv[6] = {1, 2, 3, 4, 5, 6};
    const int64_t ad[2] = {2, 3}, bd[2] = {1, 1}, d[2] = {3, 3};
    pb g = {0}, attr = {0};
    const_init(&g, "a", 2, ad, cv);
    const_init(&g, "b", 2, bd, cv);
    put_str(&attr, 1, "axis");
    put_int(&attr, 3, 0);
    put_int(&attr, 20, 2); /* INT */
    check_refused(&g, "Concat", "bad_concat", in, 2, &attr, 2, d, "differs");
}

/* Range whose start is no scalar (it read element 0 of whatever it was given). */
static void test_bad_range(void) {
    static const char *const in[3] = {"start", "limit", "delta"};
    const float vals[3][2] = {{0, 1}, {4, 0}, {1, 0}};
    const int64_t two[1] = {2}, d[1] = {4};
    pb g = {0};
    for (int k = 0; k < 3; k++) /* start has 2 values; limit and delta are scalars */
        const_init(&g, in[k], k == 0 ? 1 : 0, two, vals[k]);
    check_refused(&g, "Range", "bad_range", in, 3, NULL, 1, d, "scalars");
}

int main(void) {
    test_valid();
    test_truncations();
    test_hostile();
    test_graph_errors();
    test_bad_perm();
    test_bad_concat();
    test_bad_range();
    /* the file entry point: a missing file and a non-ONNX file */
    si_model_proto *mp;
    CHECK(si_model_proto_load("/nonexistent/model.onnx", &mp) == SI_ERR_IO);
    CHECK(strstr(si_error_msg(), "/nonexistent/model.onnx") != NULL);
    return test_finish();
}
