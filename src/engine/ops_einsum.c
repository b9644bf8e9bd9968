/* Einsum: the equation's parser, its evaluation on host tensors (constants folded at load, any
 * form, diagonals included), and its lowering on image data into the ops every backend already
 * runs (Transpose, Unsqueeze, Squeeze, ReduceSum, MatMul, Mul), so the fusion passes see an
 * ordinary MatMul (a Linear layer, the attention pattern) where torch.einsum wrote one. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* Labels: 'a'..'z' are 0..25, 'A'..'Z' 26..51, the ellipsis' dims 52.. (right-aligned). */
#define LETTERS  52
#define N_LABELS (LETTERS + SI_MAX_DIMS)

static int label_of(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return c - 'A' + 26;
    return -1;
}

static char label_char(int l) {
    return l < 26 ? (char)('a' + l) : l < LETTERS ? (char)('A' + l - 26) : '.';
}

/* One term: its letters (the ellipsis as -1) into t, their count into *n; false when malformed
 * (why filled). */
static bool term_of(const char *s, size_t len, int8_t *t, int *n, char *why, size_t cap) {
    bool ell = false;
    *n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.') {
            if (ell || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.') {
                snprintf(why, cap, "a malformed or second ellipsis");
                return false;
            }
            ell = true;
            i += 2;
            t[(*n)++] = -1;
        } else if (label_of(s[i]) >= 0) {
            t[(*n)++] = (int8_t)label_of(s[i]);
        } else {
            snprintf(why, cap, "character '%c' is not a label", s[i]);
            return false;
        }
        if (*n > SI_MAX_DIMS) {
            snprintf(why, cap, "a term of more than %d labels", SI_MAX_DIMS);
            return false;
        }
    }
    return true;
}

/* Expands term t (n entries, -1 the ellipsis) for an operand of `rank` dims into e's labels;
 * the ellipsis covers rank - (n - 1) dims, the last n_ell of the ellipsis labels. */
static int expand(const int8_t *t, int n, int n_ell, int8_t *lab) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t[i] >= 0)
            lab[k++] = t[i];
        else
            for (int j = SI_MAX_DIMS - n_ell; j < SI_MAX_DIMS; j++)
                lab[k++] = (int8_t)(LETTERS + j);
    return k;
}

/* The output's labels into e: rhs's (after "->"), or numpy's implicit ones when rhs is NULL;
 * count[l]: how many operand dims have label l. */
static bool output_of(const char *rhs, const int *count, si_einsum_eq *e, char *why, size_t cap) {
    if (!rhs) { /* implicit: the ellipsis, then the letters used once, in ASCII order */
        for (int j = SI_MAX_DIMS - e->n_ell; j < SI_MAX_DIMS; j++)
            e->out[e->out_rank++] = (int8_t)(LETTERS + j);
        for (int a = 0; a < LETTERS; a++) {
            int l = (a + 26) % LETTERS; /* 'A'..'Z' (26..51) first, as ASCII has them */
            if (count[l] != 1) continue;
            if (e->out_rank == SI_MAX_DIMS) {
                snprintf(why, cap, "an output of more than %d dims", SI_MAX_DIMS);
                return false;
            }
            e->out[e->out_rank++] = (int8_t)l;
        }
        return true;
    }
    int8_t ot[SI_MAX_DIMS + 1];
    int on;
    if (!term_of(rhs, strlen(rhs), ot, &on, why, cap)) return false;
    bool has = memchr(ot, -1, (size_t)on) != NULL;
    if (e->n_ell > 0 && !has) {
        snprintf(why, cap, "the output drops the ellipsis' dims");
        return false;
    }
    if (on - has + e->n_ell > SI_MAX_DIMS) {
        snprintf(why, cap, "an output of more than %d dims", SI_MAX_DIMS);
        return false;
    }
    e->out_rank = expand(ot, on, e->n_ell, e->out);
    bool seen[N_LABELS] = {false};
    for (int d = 0; d < e->out_rank; d++) {
        int l = e->out[d];
        if (seen[l] || !count[l]) {
            snprintf(why, cap, "output label '%c' %s", label_char(l),
                     seen[l] ? "repeats" : "is in no input");
            return false;
        }
        seen[l] = true;
    }
    return true;
}

bool si_einsum_parse(const char *eq, int n_in, const int *ranks, si_einsum_eq *e, char *why,
                     size_t cap) {
    char s[512];
    size_t len = 0;
    memset(e, 0, sizeof *e);
    for (const char *p = eq; *p; p++)
        if (*p != ' ') {
            if (len + 1 >= sizeof s) {
                snprintf(why, cap, "the equation is too long");
                return false;
            }
            s[len++] = *p;
        }
    s[len] = 0;
    const char *arrow = strstr(s, "->");
    size_t lhs = arrow ? (size_t)(arrow - s) : len;
    if (n_in < 1 || n_in > SI_EINSUM_MAX_IN) {
        snprintf(why, cap, "%d operands (at most %d)", n_in, SI_EINSUM_MAX_IN);
        return false;
    }
    int8_t t[SI_EINSUM_MAX_IN][SI_MAX_DIMS + 1];
    int tn[SI_EINSUM_MAX_IN], k = 0, ell[SI_EINSUM_MAX_IN] = {0};
    for (size_t a = 0, i = 0; i <= lhs; i++) {
        if (i < lhs && s[i] != ',') continue;
        if (k == n_in) {
            snprintf(why, cap, "more terms than the node's %d inputs", n_in);
            return false;
        }
        if (!term_of(s + a, i - a, t[k], &tn[k], why, cap)) return false;
        k++;
        a = i + 1;
    }
    if (k != n_in) {
        snprintf(why, cap, "%d terms for the node's %d inputs", k, n_in);
        return false;
    }
    e->n_in = n_in;
    for (int o = 0; o < n_in; o++) {
        bool has = memchr(t[o], -1, (size_t)tn[o]) != NULL;
        int letters = tn[o] - has;
        e->has_ellipsis |= has;
        if (ranks[o] < 0) {
            if (has) {
                snprintf(why, cap, "operand %d's rank is not known at load", o);
                return false;
            }
        } else if (has ? ranks[o] < letters : ranks[o] != letters) {
            snprintf(why, cap, "operand %d has rank %d but %d labels", o, ranks[o], letters);
            return false;
        }
        ell[o] = has ? ranks[o] - letters : 0;
        if (letters + ell[o] > SI_MAX_DIMS) {
            snprintf(why, cap, "operand %d has more than %d dims", o, SI_MAX_DIMS);
            return false;
        }
        if (ell[o] > e->n_ell) e->n_ell = ell[o];
    }
    int count[N_LABELS] = {0};
    for (int o = 0; o < n_in; o++) {
        e->rank[o] = expand(t[o], tn[o], ell[o], e->lab[o]);
        bool seen[N_LABELS] = {false};
        for (int d = 0; d < e->rank[o]; d++) {
            if (seen[e->lab[o][d]]) e->repeats = true;
            seen[e->lab[o][d]] = true;
            count[e->lab[o][d]]++;
        }
    }
    return output_of(arrow ? arrow + 2 : NULL, count, e, why, cap);
}

/* --- host evaluation --------------------------------------------------------------------------
 */
si_status si_einsum_eval(si_graph *g, si_gnode *n, const si_value *const *in, si_value *y,
                         int64_t max_elems) {
    int ranks[SI_EINSUM_MAX_IN];
    char why[256];
    si_einsum_eq e;
    if (n->n_in > SI_EINSUM_MAX_IN)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "%d operands (at most %d)", n->n_in,
                             SI_EINSUM_MAX_IN);
    for (int o = 0; o < n->n_in; o++) ranks[o] = in[o]->shape.ndim;
    if (!si_einsum_parse(n->equation, n->n_in, ranks, &e, why, sizeof why))
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "equation '%s': %s", n->equation, why);
    int64_t size[N_LABELS];
    bool ints = true;
    for (int l = 0; l < N_LABELS; l++) size[l] = -1;
    for (int o = 0; o < e.n_in; o++) {
        ints &= in[o]->dtype == SI_DT_INT64;
        for (int d = 0; d < e.rank[o]; d++) {
            int l = e.lab[o][d];
            int64_t s = in[o]->shape.dims[d];
            if (size[l] < 0 || size[l] == 1)
                size[l] = s;
            else if (s != size[l] && !(s == 1 && l >= LETTERS))
                return si_node_error(g, n, SI_ERR_FORMAT, "label '%c' has sizes %lld and %lld",
                                     label_char(l), (long long)size[l], (long long)s);
        }
    }
    /* the output's labels, then the summed ones: one index walk over all of them */
    int8_t walk[N_LABELS];
    int nw = 0;
    bool is_out[N_LABELS] = {false};
    y->shape.ndim = e.out_rank;
    for (int d = 0; d < e.out_rank; d++) {
        walk[nw++] = e.out[d];
        is_out[e.out[d]] = true;
        y->shape.dims[d] = size[e.out[d]];
    }
    int64_t sums = 1, numel = si_shape_numel(&y->shape);
    for (int l = 0; l < N_LABELS; l++)
        if (size[l] >= 0 && !is_out[l]) {
            walk[nw++] = (int8_t)l;
            sums = si_mul_sat(sums, size[l]);
        }
    if (numel > max_elems || si_mul_sat(numel, sums) > 64 * max_elems)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                             "folding it takes %lld products into %lld elements, too many",
                             (long long)si_mul_sat(numel, sums), (long long)numel);
    /* each operand's stride per dim, 0 where an ellipsis dim of 1 broadcasts (a label repeated
     * within an operand, a diagonal, reads both its dims at the same index) */
    int64_t dst[SI_EINSUM_MAX_IN][SI_MAX_DIMS];
    for (int o = 0; o < e.n_in; o++)
        for (int64_t d = e.rank[o] - 1, s = 1; d >= 0; d--) {
            dst[o][d] = in[o]->shape.dims[d] != 1 ? s : 0;
            s *= in[o]->shape.dims[d];
        }
    free(y->data);
    y->dtype = ints ? SI_DT_INT64 : SI_DT_FLOAT;
    y->data = si_xcalloc((size_t)(numel ? numel : 1), ints ? 8 : 4);
    int64_t idx[N_LABELS] = {0};
    for (int64_t i = 0; i < numel; i++) {
        double acc = 0;
        int64_t iacc = 0;
        for (int64_t j = 0; j < sums; j++) {
            int64_t rem = i * sums + j;
            for (int w = nw - 1; w >= 0; w--) {
                idx[walk[w]] = rem % size[walk[w]];
                rem /= size[walk[w]];
            }
            double p = 1;
            int64_t ip = 1;
            bool over = false; /* int64 overflow is refused, as the host's Add and Mul do */
            for (int o = 0; o < e.n_in; o++) {
                int64_t at = 0;
                for (int d = 0; d < e.rank[o]; d++) at += idx[e.lab[o][d]] * dst[o][d];
                if (ints)
                    over |= __builtin_mul_overflow(ip, ((const int64_t *)in[o]->data)[at], &ip);
                else
                    p *= si_value_f64(in[o], at);
            }
            acc += p;
            if (ints && (over || __builtin_add_overflow(iacc, ip, &iacc)))
                return si_node_error(g, n, SI_ERR_FORMAT, "integer overflow");
        }
        if (ints)
            ((int64_t *)y->data)[i] = iacc;
        else /* saturating: an out-of-range conversion is undefined */
            ((float *)y->data)[i] = acc > FLT_MAX    ? INFINITY
                                    : acc < -FLT_MAX ? -INFINITY
                                                     : (float)acc;
    }
    return SI_OK;
}

/* --- lowering onto image data ------------------------------------------------------------------
 * Two operands at a time, left to right, each pair one MatMul (or one Mul when nothing is
 * contracted) with Transposes and Unsqueezes to line the labels up and a ReduceSum or Squeeze
 * after; labels only one operand has and nothing later needs are summed first. The MatMul takes
 * one label each as M, N and K; the other labels of either operand ride as batch dims, the
 * operand without them broadcasting (size 1), and further contracted labels as batch dims summed
 * after. Every step is planned before any is converted, so a refusal leaves nothing behind. */
#define GAP        (-1)    /* a label position an Unsqueeze made: size 1 */
#define NO_OPERAND (-1000) /* a step's absent second operand (the Einsum's inputs are -1 - k) */
#define MAX_STEPS  (8 * SI_EINSUM_MAX_IN + 4)
#define MAX_KEEP   (SI_MAX_DIMS * (SI_EINSUM_MAX_IN + 1)) /* the output's and every operand's */

typedef struct {
    const char *op; /* Transpose, Unsqueeze, Squeeze, ReduceSum, MatMul, Mul, Identity */
    int a, b;   /* operands: step j's output (j >= 0), the Einsum's input -1 - k, or NO_OPERAND */
    int n_ints; /* Transpose's perm, or the axes */
    int64_t ints[SI_MAX_DIMS];
} step;

typedef struct {
    step s[MAX_STEPS];
    int n;
    char why[256];
} plan;

typedef struct {
    int id, rank;
    int8_t lab[SI_MAX_DIMS];
} operand;

/* Each pair: a ReduceSum, a Transpose and an Unsqueeze per operand, the MatMul, one ReduceSum
 * or Squeeze; then a ReduceSum, a Transpose, an Identity. */
int si_einsum_max_nodes(const si_node_proto *n) {
    bool lowered = !strcmp(n->op_type, "Einsum") && n->n_inputs <= SI_EINSUM_MAX_IN;
    return lowered ? 8 * n->n_inputs + 4 : 0;
}

static bool has(const operand *x, int l) {
    return memchr(x->lab, l, (size_t)x->rank) != NULL;
}

static bool in_list(const int8_t *ls, int n, int l) {
    return memchr(ls, l, (size_t)n) != NULL;
}

static void add_step(plan *p, operand *x, const char *op, int b, const int64_t *ints, int n_ints) {
    step *s = &p->s[p->n];
    *s = (step){.op = op, .a = x->id, .b = b, .n_ints = n_ints};
    if (n_ints) memcpy(s->ints, ints, sizeof(int64_t) * (size_t)n_ints);
    x->id = p->n++;
}

/* Sums x over the labels that are not in keep (ReduceSum, keepdims 0). */
static void sum_out(plan *p, operand *x, const int8_t *keep, int nk) {
    int64_t axes[SI_MAX_DIMS];
    int na = 0, r = 0;
    for (int d = 0; d < x->rank; d++)
        if (x->lab[d] != GAP && in_list(keep, nk, x->lab[d]))
            x->lab[r++] = x->lab[d];
        else
            axes[na++] = d;
    if (!na) return;
    add_step(p, x, "ReduceSum", NO_OPERAND, axes, na);
    x->rank = r;
}

/* Transposes x so that its labels follow `order` (the labels x lacks skipped), then inserts
 * GAPs where order has a label x lacks, except in the leading run that broadcasting adds; the
 * last `fixed` positions are always there (a MatMul's matrix dims). */
static bool line_up(plan *p, operand *x, const int8_t *order, int no, int fixed) {
    int64_t perm[SI_MAX_DIMS], axes[SI_MAX_DIMS];
    int k = 0, na = 0;
    bool moved = false;
    if (no > SI_MAX_DIMS) {
        snprintf(p->why, sizeof p->why, "a step needs %d dims (at most %d)", no, SI_MAX_DIMS);
        return false;
    }
    for (int d = 0; d < no; d++)
        for (int e = 0; order[d] != GAP && e < x->rank; e++)
            if (x->lab[e] == order[d]) {
                moved |= e != k;
                perm[k++] = e;
            }
    if (moved) add_step(p, x, "Transpose", NO_OPERAND, perm, k);
    int8_t lab[SI_MAX_DIMS];
    bool lead = true;
    int r = 0;
    for (int d = 0; d < no; d++) {
        bool here = order[d] != GAP && has(x, order[d]);
        lead &= !here;
        if (!here && lead && d < no - fixed) continue; /* broadcast: no dim needed */
        if (!here) axes[na++] = r;
        lab[r++] = here ? order[d] : GAP;
    }
    if (na) add_step(p, x, "Unsqueeze", NO_OPERAND, axes, na);
    memcpy(x->lab, lab, (size_t)r);
    x->rank = r;
    return true;
}

/* Drops the GAP positions of x (Squeeze) and sums over the labels in `sum` (ReduceSum, which
 * takes the GAPs too). */
static void drop(plan *p, operand *x, const int8_t *sum, int ns) {
    int64_t axes[SI_MAX_DIMS];
    int na = 0, r = 0;
    bool summed = false;
    for (int d = 0; d < x->rank; d++) {
        bool s = x->lab[d] != GAP && in_list(sum, ns, x->lab[d]);
        summed |= s;
        if (s || x->lab[d] == GAP)
            axes[na++] = d;
        else
            x->lab[r++] = x->lab[d];
    }
    if (na) add_step(p, x, summed ? "ReduceSum" : "Squeeze", NO_OPERAND, axes, na);
    x->rank = r;
}

/* a (labels) x b, keeping the labels in keep (the output's and those later operands use). */
static bool pair(plan *p, operand a, operand b, const int8_t *keep, int nk, operand *out) {
    int8_t ka[MAX_KEEP], kb[MAX_KEEP]; /* what each may not sum alone: keep and the other's */
    int na = 0, nb = 0;
    memcpy(ka, keep, (size_t)nk);
    memcpy(kb, keep, (size_t)nk);
    na = nb = nk;
    for (int d = 0; d < b.rank; d++) ka[na++] = b.lab[d];
    for (int d = 0; d < a.rank; d++) kb[nb++] = a.lab[d];
    sum_out(p, &a, ka, na);
    sum_out(p, &b, kb, nb);
    int8_t bt[N_LABELS], ao[SI_MAX_DIMS], bo[SI_MAX_DIMS], k_rest[SI_MAX_DIMS];
    int nbt = 0, nao = 0, nbo = 0, nk_rest = 0, m = GAP, nn = GAP, k = GAP;
    for (int d = 0; d < a.rank; d++) {
        int l = a.lab[d];
        if (!has(&b, l))
            m = l; /* the last of A's own labels is M */
        else if (!in_list(keep, nk, l))
            k = l;
    }
    for (int d = 0; d < b.rank; d++)
        if (!has(&a, b.lab[d])) nn = b.lab[d];
    if (k == GAP) { /* nothing contracted: a broadcast Mul in A's order, then B's own labels */
        int8_t r[2 * SI_MAX_DIMS];
        int nr = 0;
        for (int d = 0; d < a.rank; d++) r[nr++] = a.lab[d];
        for (int d = 0; d < b.rank; d++)
            if (!has(&a, b.lab[d])) r[nr++] = b.lab[d];
        if (!line_up(p, &a, r, nr, 0) || !line_up(p, &b, r, nr, 0)) return false;
        add_step(p, &a, "Mul", b.id, NULL, 0);
        memcpy(a.lab, r, (size_t)nr);
        a.rank = nr;
        *out = a;
        return true;
    }
    /* batch: the shared kept labels, A's and B's other own labels, the other contracted ones */
    for (int d = 0; d < a.rank; d++)
        if (has(&b, a.lab[d]) && in_list(keep, nk, a.lab[d])) bt[nbt++] = a.lab[d];
    for (int d = 0; d < a.rank; d++)
        if (!has(&b, a.lab[d]) && a.lab[d] != m) bt[nbt++] = a.lab[d];
    for (int d = 0; d < b.rank; d++)
        if (!has(&a, b.lab[d]) && b.lab[d] != nn) bt[nbt++] = b.lab[d];
    for (int d = 0; d < a.rank; d++)
        if (has(&b, a.lab[d]) && !in_list(keep, nk, a.lab[d]) && a.lab[d] != k)
            bt[nbt++] = k_rest[nk_rest++] = a.lab[d];
    if (nbt + 2 > SI_MAX_DIMS) {
        snprintf(p->why, sizeof p->why, "its MatMul needs %d dims (at most %d)", nbt + 2,
                 SI_MAX_DIMS);
        return false;
    }
    memcpy(ao, bt, (size_t)nbt);
    memcpy(bo, bt, (size_t)nbt);
    nao = nbo = nbt;
    ao[nao++] = (int8_t)m, ao[nao++] = (int8_t)k;  /* (..., M, K) */
    bo[nbo++] = (int8_t)k, bo[nbo++] = (int8_t)nn; /* (..., K, N) */
    if (!line_up(p, &a, ao, nao, 2) || !line_up(p, &b, bo, nbo, 2)) return false;
    add_step(p, &a, "MatMul", b.id, NULL, 0);
    memcpy(a.lab, bt, (size_t)nbt);
    a.lab[nbt] = (int8_t)m, a.lab[nbt + 1] = (int8_t)nn;
    a.rank = nbt + 2;
    drop(p, &a, k_rest, nk_rest);
    *out = a;
    return true;
}

/* The plan for e, its last step giving the output (an Identity when nothing else does). */
static bool plan_of(const si_einsum_eq *e, plan *p) {
    operand x = {.id = -1, .rank = e->rank[0]};
    memcpy(x.lab, e->lab[0], (size_t)x.rank);
    for (int o = 1; o < e->n_in; o++) {
        int8_t keep[MAX_KEEP]; /* the output's labels and the later operands' */
        int nk = e->out_rank;
        memcpy(keep, e->out, (size_t)nk);
        for (int q = o + 1; q < e->n_in; q++)
            for (int d = 0; d < e->rank[q]; d++) keep[nk++] = e->lab[q][d];
        operand y = {.id = -1 - o, .rank = e->rank[o]}, r1, r2;
        memcpy(y.lab, e->lab[o], (size_t)y.rank);
        plan p2 = *p; /* both orders planned; the one of fewer steps taken */
        if (!pair(p, x, y, keep, nk, &r1)) return false;
        if (pair(&p2, y, x, keep, nk, &r2) && p2.n < p->n) {
            *p = p2;
            r1 = r2;
        }
        x = r1;
    }
    sum_out(p, &x, e->out, e->out_rank);
    if (!line_up(p, &x, e->out, e->out_rank, 0)) return false;
    if (x.id < 0) add_step(p, &x, "Identity", NO_OPERAND, NULL, 0);
    return true;
}

/* A heap string from a format; the caller frees it. */
static char *str_of(const char *fmt, const char *a, const char *b, int j) {
    size_t len = strlen(a) + strlen(b) + 32;
    char *s = si_xmalloc(len);
    snprintf(s, len, fmt, a, b, j);
    return s;
}

/* Step j's axes as the int64 constant input `name` (ReduceSum, Squeeze, Unsqueeze from opset
 * 13 on take them so). */
static void axes_const(si_builder *b, const char *name, const step *s) {
    si_value *v = &b->g->values[si_b_add_value(b, name)];
    v->kind = SI_VAL_CONST;
    v->dtype = SI_DT_INT64;
    v->shape = (si_shape){.ndim = 1, .dims = {s->n_ints}};
    v->data = si_xmalloc(sizeof(int64_t) * (size_t)(s->n_ints ? s->n_ints : 1));
    memcpy(v->data, s->ints, sizeof(int64_t) * (size_t)s->n_ints);
}

/* Converts step j as an ONNX node of the model's opset: its output the Einsum's when it is the
 * last, else a value of its own. names[k]: step k's output. */
static bool emit(si_builder *b, const si_node_proto *n, const plan *p, int j, char **names) {
    const step *s = &p->s[j];
    bool last = j == p->n - 1, axes = s->n_ints && strcmp(s->op, "Transpose");
    bool by_input = axes && b->m->opset >= 13;
    char *in[3], *out[1], *name = str_of("%s/%s%d", n->name, s->op, j), *axes_name = NULL;
    int n_in = 0;
    for (int k = 0; k < 2; k++) {
        int id = k ? s->b : s->a;
        if (id == NO_OPERAND) break;
        in[n_in++] = id >= 0 ? names[id] : n->inputs[-1 - id];
    }
    names[j] = last ? si_xstrdup(n->outputs[0]) : str_of("%s::%s%d", n->outputs[0], "einsum", j);
    out[0] = names[j];
    if (by_input) {
        axes_name = str_of("%s::%s%d", n->outputs[0], "axes", j);
        if (si_b_find(b, axes_name) < 0) axes_const(b, axes_name, s);
        in[n_in++] = axes_name;
    }
    si_attr attrs[2] = {{.name = (char *)(axes ? "axes" : "perm"),
                         .type = SI_ATTR_INTS,
                         .n = s->n_ints,
                         .ints = (int64_t *)s->ints},
                        {.name = (char *)"keepdims", .type = SI_ATTR_INT, .i = 0}};
    int n_attrs = (s->n_ints && !by_input) + !strcmp(s->op, "ReduceSum");
    if (n_attrs == 1 && !strcmp(s->op, "ReduceSum")) attrs[0] = attrs[1];
    si_node_proto pr = {.name = name,
                        .op_type = (char *)s->op,
                        .domain = (char *)"",
                        .n_inputs = n_in,
                        .n_outputs = 1,
                        .n_attrs = n_attrs,
                        .inputs = in,
                        .outputs = out,
                        .attrs = attrs};
    bool ok = si_b_find(b, names[j]) < 0 || last;
    if (!ok) si_b_unsupported(b, n, "its intermediate name '%s' is taken", names[j]);
    ok = ok && si_b_convert(b, &pr);
    b->last_unsup = NULL; /* the next step's proto may reuse this one's address */
    free(name);
    free(axes_name);
    return ok;
}

/* Every node converted so far, inferred at batch 1: the operands' ranks, which an ellipsis
 * needs and against which the equation is checked (they do not change with the batch). */
static bool ranks_now(si_builder *b, char *why, size_t cap) {
    si_graph *g = b->g;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *gn = &g->nodes[j];
        si_status st = gn->op == SI_OP_HOST ? si_host_eval(g, gn) : si_graph_infer_node(g, gn);
        if (st != SI_OK) {
            snprintf(why, cap, "its operands' ranks are not known (%s)", si_error_msg());
            return false;
        }
    }
    return true;
}

bool si_einsum_lower(si_builder *b, const si_node_proto *n) {
    const si_attr *a = si_node_attr(n, "equation");
    const char *eq = a && a->s ? a->s : "";
    int ranks[SI_EINSUM_MAX_IN];
    bool unknown = false;
    char why[256] = "";
    si_einsum_eq e;
    if (!a || !a->s) {
        si_b_unsupported(b, n, "the equation attribute is missing");
        return false;
    }
    for (int k = 0; k < n->n_inputs && k < SI_EINSUM_MAX_IN; k++) {
        int id = si_b_input(b, n, k);
        if (id < 0) {
            si_b_unsupported(b, n, "equation '%s': input %d is omitted", eq, k);
            return false;
        }
        const si_value *v = &b->g->values[id];
        ranks[k] = v->kind == SI_VAL_CONST || v->is_input ? v->shape.ndim : -1;
        unknown |= ranks[k] < 0;
    }
    if (unknown && ranks_now(b, why, sizeof why))
        for (int k = 0; k < n->n_inputs && k < SI_EINSUM_MAX_IN; k++)
            ranks[k] = b->g->values[si_b_input(b, n, k)].shape.ndim;
    if (!why[0]) si_einsum_parse(eq, n->n_inputs, ranks, &e, why, sizeof why);
    for (int o = 0; !why[0] && e.repeats && o < e.n_in; o++)
        for (int d = 1; d < e.rank[o] && !why[0]; d++)
            if (memchr(e.lab[o], e.lab[o][d], (size_t)d))
                snprintf(why, sizeof why,
                         "label '%c' repeats within operand %d (a diagonal or a trace): not "
                         "supported on image data",
                         label_char(e.lab[o][d]), o);
    plan *p = si_xcalloc(1, sizeof *p);
    if (!why[0] && !plan_of(&e, p)) snprintf(why, sizeof why, "%s", p->why);
    SI_ASSERT(p->n <= si_einsum_max_nodes(n)); /* the builder reserved that many */
    bool ok = !why[0];
    if (!ok) si_b_unsupported(b, n, "equation '%s': %s", eq, why);
    char *names[MAX_STEPS] = {NULL};
    for (int j = 0; j < p->n && ok; j++) ok = emit(b, n, p, j, names);
    for (int j = 0; j < p->n; j++) free(names[j]);
    free(p);
    return ok;
}
