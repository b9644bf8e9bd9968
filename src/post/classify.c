/* Softmax + top-K. K is small (default 5), so a insertion pass over the row beats sorting. */
#include "classify.h"

#include <omp.h>

#include "cpu/kernels.h"

void si_post_topk_row(const float *p, int64_t cols, int k, int32_t *cls, float *prob) {
    int n = 0;
    for (int64_t j = 0; j < cols; j++) {
        float v = p[j];
        if (n == k && !(v > prob[k - 1])) continue; /* strict: earlier index wins ties */
        int pos = n < k ? n++ : k - 1;
        while (pos > 0 && v > prob[pos - 1]) {
            prob[pos] = prob[pos - 1];
            cls[pos] = cls[pos - 1];
            pos--;
        }
        prob[pos] = v;
        cls[pos] = (int32_t)j;
    }
}

void si_post_topk(const float *logits, int64_t rows, int64_t cols, int k, float *scratch,
                  int32_t *cls, float *prob) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *p = scratch + (int64_t)omp_get_thread_num() * cols;
        si_cpu_softmax(logits + r * cols, 1, cols, p);
        si_post_topk_row(p, cols, k, cls + r * k, prob + r * k);
    }
}
