/* The autotune cache's files without a GPU (cuda/autotune.cu). The cache file: entries saved load
 * back, and a flipped byte has the whole file ignored. Its blobs (cuDNN's serialized plans beside
 * it): a blob saved is loaded byte for byte; a missing, damaged (a flipped byte), truncated or
 * foreign file, or one whose header claims more than a blob may hold, loads as none (the engine
 * then builds the plan again); no cache gives none and saves nothing; a folder that cannot be
 * made is a warning and false; and ranks saving the same blob at once leave one whole copy (a
 * private temporary each, renamed into place). */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/autotune.cuh"
#include "tests/test_util.h"

#include <sys/wait.h> /* after the project's headers: its signal.h defines si_status as a macro */

static void pattern(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(test_rand(&seed) >> 7);
}

static void poke(const char *path, long at, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, at, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

int main(void) {
    char dir[] = "/tmp/si_blob_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    algo_memo *m = (algo_memo *)calloc(1, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s/sub/conv-test.bin", dir); /* sub/ made by save */
    char blob[1200];
    snprintf(blob, sizeof blob, "%s.sdpa-0123", m->path);
    enum { N = 70000 };
    static unsigned char data[N];
    pattern(data, N, 7u);
    size_t n = 1;

    CHECK(si_cuda_autotune_blob_load(m, "sdpa-0123", &n) == NULL && n == 0); /* none yet */
    CHECK(si_cuda_autotune_blob_save(m, "sdpa-0123", data, N));
    void *got = si_cuda_autotune_blob_load(m, "sdpa-0123", &n);
    CHECK(got && n == N && memcmp(got, data, N) == 0);
    free(got);
    CHECK(si_cuda_autotune_blob_load(m, "sdpa-4567", &n) == NULL); /* another tag */

    const unsigned char x = 0x5a; /* a flipped byte in the data: its CRC no longer matches */
    poke(blob, 16 + 1000, &x, 1);
    CHECK(si_cuda_autotune_blob_load(m, "sdpa-0123", &n) == NULL && n == 0);
    CHECK(si_cuda_autotune_blob_save(m, "sdpa-0123", data, N)); /* rewritten whole */
    got = si_cuda_autotune_blob_load(m, "sdpa-0123", &n);
    CHECK(got && n == N && memcmp(got, data, N) == 0);
    free(got);

    CHECK(truncate(blob, 16 + N / 2) == 0); /* cut short */
    CHECK(si_cuda_autotune_blob_load(m, "sdpa-0123", &n) == NULL);
    CHECK(si_cuda_autotune_blob_save(m, "sdpa-0123", data, N));
    poke(blob, 0, "SIBL9999", 8); /* another format */
    CHECK(si_cuda_autotune_blob_load(m, "sdpa-0123", &n) == NULL);
    CHECK(si_cuda_autotune_blob_save(m, "sdpa-0123", data, N));
    const uint64_t huge = (uint64_t)1 << 40; /* a length no blob has: refused before allocating */
    poke(blob, 8, &huge, 8);
    CHECK(si_cuda_autotune_blob_load(m, "sdpa-0123", &n) == NULL);

    CHECK(!si_cuda_autotune_blob_save(m, "sdpa-0123", data, 0)); /* nothing to keep */
    algo_memo *none = (algo_memo *)calloc(1, sizeof *none);      /* --autotune-cache off: no path */
    CHECK(!si_cuda_autotune_blob_save(none, "sdpa-0123", data, N));
    CHECK(si_cuda_autotune_blob_load(none, "sdpa-0123", &n) == NULL);
    snprintf(none->path, sizeof none->path, "/proc/self/no/such/conv.bin"); /* cannot be made */
    CHECK(!si_cuda_autotune_blob_save(none, "sdpa-0123", data, N));

    /* eight ranks saving the same tag at once, each its own content: one of them, whole */
    unlink(blob);
    for (int r = 0; r < 8; r++) {
        if (fork() == 0) {
            static unsigned char mine[N];
            pattern(mine, N, 100u + (unsigned)r);
            for (int k = 0; k < 20; k++) si_cuda_autotune_blob_save(m, "sdpa-0123", mine, N);
            _exit(0);
        }
    }
    int st = 0, ok_children = 0;
    while (wait(&st) > 0) ok_children += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    CHECK(ok_children == 8);
    got = si_cuda_autotune_blob_load(m, "sdpa-0123", &n);
    int which = -1;
    for (int r = 0; got && n == N && r < 8; r++) {
        static unsigned char want[N];
        pattern(want, N, 100u + (unsigned)r);
        if (memcmp(got, want, N) == 0) which = r;
    }
    CHECK_MSG(which >= 0, "the blob after concurrent saves is none of them whole");
    free(got);

    /* the cache file itself, written the same way: saved entries load back, one flipped byte
     * and the whole file is ignored (no GPU here: the header names none, on both sides) */
    char cache_dir[1100];
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
    algo_memo *w = (algo_memo *)calloc(1, sizeof *w), *r = (algo_memo *)calloc(1, sizeof *r);
    si_cuda_autotune_load(w, cache_dir, 0, 1 << 20);
    CHECK(w->path[0] && w->n == 0 && w->gn == 0 && w->an == 0);
    pattern((unsigned char *)w->e, 3 * sizeof(memo_entry), 11u);
    pattern((unsigned char *)w->ge, 2 * sizeof(gemm_memo_entry), 12u);
    pattern((unsigned char *)w->ae, sizeof(attn_memo_entry), 13u);
    w->n = 3, w->gn = 2, w->an = 1;
    si_cuda_autotune_save(w);
    si_cuda_autotune_load(r, cache_dir, 0, 1 << 20);
    CHECK(r->n == 3 && r->loaded == 3 && r->gn == 2 && r->an == 1 &&
          !memcmp(r->e, w->e, 3 * sizeof(memo_entry)) &&
          !memcmp(r->ge, w->ge, 2 * sizeof(gemm_memo_entry)) &&
          !memcmp(r->ae, w->ae, sizeof(attn_memo_entry)));
    poke(w->path, 400, &x, 1);
    memset(r, 0, sizeof *r);
    si_cuda_autotune_load(r, cache_dir, 0, 1 << 20); /* said, and nothing taken */
    CHECK(r->n == 0 && r->gn == 0 && r->an == 0);
    free(w);
    free(r);

    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(m);
    free(none);
    return test_finish();
}
