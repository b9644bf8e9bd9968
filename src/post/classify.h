/* Postprocessing of classifier outputs on the CPU: softmax and top-K per image. */
#ifndef SI_POST_CLASSIFY_H
#define SI_POST_CLASSIFY_H

#include <stdint.h>

/* For each of `rows` rows of `cols` logits: softmax, then the k largest probabilities in
 * descending order (ties: lower class index first). k <= cols. scratch holds cols floats per
 * thread (omp_get_max_threads() * cols). Writes cls and prob, rows * k each. */
void si_post_topk(const float *logits, int64_t rows, int64_t cols, int k, float *scratch,
                  int32_t *cls, float *prob);

/* One row of si_post_topk without the softmax: the k largest of probs[0 .. cols) in descending
 * order, strict > so the lower index wins ties. k <= cols. Borrows probs; writes cls and prob
 * (k each). Allocates nothing. */
void si_post_topk_row(const float *probs, int64_t cols, int k, int32_t *cls, float *prob);

#endif
