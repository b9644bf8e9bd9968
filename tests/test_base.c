/* src/base's own utilities: si_pages_alloc gives zeroed, writable memory of any size (the CUDA
 * backend page-locks it as it comes), and si_pages_free takes it back. */
#include "base/common.h"
#include "tests/test_util.h"

#include <string.h>

static void check_pages(size_t n) {
    uint8_t *p = si_pages_alloc(n);
    CHECK_MSG(p != NULL, "si_pages_alloc(%zu) failed", n);
    if (!p) return;
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += p[i] != 0;
    CHECK_MSG(nonzero == 0, "si_pages_alloc(%zu): %zu bytes not zero", n, nonzero);
    memset(p, 0xa5, n); /* every byte writable, the last one included */
    CHECK(n == 0 || (p[0] == 0xa5 && p[n - 1] == 0xa5));
    si_pages_free(p, n);
}

int main(void) {
    const size_t sizes[] = {0, 1, 4095, 4096, 3 * 4096 + 5, (size_t)5 << 20, ((size_t)9 << 20) + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check_pages(sizes[k]);
    si_pages_free(NULL, 4096); /* accepted, as free(NULL) */
    return test_finish();
}
