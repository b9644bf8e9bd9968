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
    if (!arrow) { /* implicit: the ellipsis, then the letters used once, in ASCII order */
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
    if (!term_of(arrow + 2, strlen(arrow + 2), ot, &on, why, cap)) return false;
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
