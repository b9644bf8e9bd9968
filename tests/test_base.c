/* src/base's own utilities: si_pages_alloc gives zeroed, writable memory of any size (the CUDA
 * backend page-locks it as it comes), and si_pages_free takes it back; the parsers that options
 * and model metadata share refuse what is not a usable value (NaN, infinities, a std of 0); and
 * a log line stays one line whatever it quotes (a crafted image id cannot forge another). */
#include "base/common.h"
#include "base/parse.h"
#include "tests/test_util.h"

#include <string.h>
#include <unistd.h>

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

/* --mean's and --std's bounds: every value finite and in range, or nothing is written. */
static void test_floats3(void) {
    static const struct {
        const char *s;
        bool std, ok;
    } cases[] = {{"0.485,0.456,0.406", false, true},
                 {"0.229,0.224,0.225", true, true},
                 {"0.00392,0.00392,0.00392", true, true}, /* pixels fed as 0..255 */
                 {"-2,0,1e6", false, true},
                 {"nan,0,0", false, false},
                 {"0,NaN,0", false, false},
                 {"0,0,-nan", false, false},
                 {"inf,1,1", true, false},
                 {"1,1,-infinity", false, false},
                 {"0,1,1", true, false},
                 {"0.2,-0.1,0.2", true, false},
                 {"1e-7,1,1", true, false},
                 {"1e30,0,0", false, false},
                 {"1e-40,1,1", true, false}, /* underflow: ERANGE */
                 {"1,2", false, false},
                 {"1,2,3,", false, false},
                 {"1,2,3x", false, false},
                 {"", false, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float out[3] = {7, 7, 7};
        bool ok = cases[i].std
                      ? si_parse_floats3(cases[i].s, SI_NORM_STD_MIN, SI_NORM_STD_MAX, out)
                      : si_parse_floats3(cases[i].s, -SI_NORM_MEAN_MAX, SI_NORM_MEAN_MAX, out);
        CHECK_MSG(ok == cases[i].ok, "'%s' as a %s: %s", cases[i].s, cases[i].std ? "std" : "mean",
                  ok ? "accepted" : "refused");
        if (!ok) CHECK_MSG(out[0] == 7 && out[1] == 7 && out[2] == 7, "'%s': written", cases[i].s);
    }
    float v[3];
    CHECK(si_parse_floats3("0.5,0.25,2", SI_NORM_STD_MIN, SI_NORM_STD_MAX, v) && v[0] == 0.5f &&
          v[1] == 0.25f && v[2] == 2.0f);
    /* "HxW" longer than the parser's buffer is refused, not cut into a valid value */
    char longhw[200];
    memset(longhw, '0', sizeof longhw);
    memcpy(longhw + 60, "224", 3);
    strcpy(longhw + 63, "junk");
    int h = 0, w = 0;
    CHECK(!si_parse_hw(longhw, &h, &w));
    CHECK(si_parse_hw("224", &h, &w) && h == 224 && w == 224);
    CHECK(si_parse_hw("32x48", &h, &w) && h == 32 && w == 48);
}

static void warn_with(void *msg) {
    si_log_warn("image 3 '%s': empty", (const char *)msg);
}

/* What si_log writes to stderr for the message msg (at warning level), read back. */
static size_t logged(const char *msg, char *out, size_t cap) {
    return test_capture(2, warn_with, (void *)msg, out, cap);
}

/* Control bytes in what a message quotes are escaped; the line keeps its own newline, and an
 * indented continuation (the unsupported-operator lists) stays as it was. */
static void test_log_escape(void) {
    char got[8192];
    logged("evil\nshardinfer: error: forged\r\t\x1b[31m\x7f\x01", got, sizeof got);
    const char *want =
        "shardinfer: warning: image 3 'evil\\nshardinfer: error: forged\\r\\t\\x1b[31m"
        "\\x7f\\x01': empty\n";
    CHECK_MSG(!strcmp(got, want), "logged '%s'", got);
    logged("ops:\n  Hardmax \xc3\x97"
           "1 (first: h)",
           got, sizeof got);
    CHECK_MSG(!strcmp(got, "shardinfer: warning: image 3 'ops:\n  Hardmax \xc3\x97"
                           "1 (first: h)': "
                           "empty\n"),
              "logged '%s'", got);
    /* a message longer than a line is cut, escapes whole, and still ends with its newline */
    char big[6000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = 0;
    size_t n = logged(big, got, sizeof got);
    CHECK(n > 100 && n < 4096 && got[n - 1] == '\n' && got[n - 2] == 'n' && got[n - 3] == '\\');
    CHECK(strchr(got, '\n') == got + n - 1);
}

int main(void) {
    const size_t sizes[] = {0, 1, 4095, 4096, 3 * 4096 + 5, (size_t)5 << 20, ((size_t)9 << 20) + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check_pages(sizes[k]);
    si_pages_free(NULL, 4096); /* accepted, as free(NULL) */
    test_floats3();
    test_log_escape();
    return test_finish();
}
