/* Softmax + top-K against a brute-force reference (double-precision softmax, full sort) on
 * seeded random logits, including ties and K == classes. */
#include <omp.h>
#include <stdlib.h>

#include "post/classify.h"
#include "tests/test_util.h"

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const double *p = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    if (p[i] != p[j]) return p[i] > p[j] ? -1 : 1;
    return i - j; /* ties: lower index first */
}

int main(void) {
    unsigned seed = 7;
    const int rows = 37;
    const int shapes[][2] = {{1000, 5}, {10, 10}, {3, 1}, {1001, 7}};
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int cols = shapes[s][0], k = shapes[s][1];
        float *x = malloc(sizeof(float) * rows * cols);
        for (int i = 0; i < rows * cols; i++) x[i] = 8.f * test_randf(&seed);
        for (int j = 0; j < cols; j += 3) x[j] = x[0]; /* ties in row 0 */
        float *scratch = malloc(sizeof(float) * cols * omp_get_max_threads());
        int32_t *cls = malloc(sizeof(int32_t) * rows * k);
        float *prob = malloc(sizeof(float) * rows * k);
        for (int i = 0; i < rows * k; i++) cls[i] = -7, prob[i] = NAN;
        si_post_topk(x, rows, cols, k, scratch, cls, prob);
        double *p = malloc(sizeof(double) * cols);
        int *order = malloc(sizeof(int) * cols);
        for (int r = 0; r < rows; r++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < cols; j++) mx = fmax(mx, x[r * cols + j]);
            for (int j = 0; j < cols; j++) sum += p[j] = exp((double)x[r * cols + j] - mx);
            for (int j = 0; j < cols; j++) p[j] /= sum, order[j] = j;
            qsort_r(order, cols, sizeof(int), cmp_desc, p);
            for (int i = 0; i < k; i++) {
                CHECK_MSG(cls[r * k + i] == order[i], "cols %d row %d rank %d: %d vs %d", cols, r,
                          i, cls[r * k + i], order[i]);
                CHECK_MSG(fabs(prob[r * k + i] - p[order[i]]) < 1e-6, "prob %g vs %g",
                          prob[r * k + i], p[order[i]]);
            }
        }
        free(x), free(scratch), free(cls), free(prob), free(p), free(order);
    }
    return test_finish();
}
