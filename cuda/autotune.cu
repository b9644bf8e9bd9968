// The autotune cache's file (autotune.cuh). Layout: "SIAT0006", u32 sizeof(memo_entry), u32 n,
// char[256] the GPU's name, i32 compute capability, i32 cuDNN version, u64 workspace, u32
// sizeof(gemm_memo_entry), u32 gn, u64 cuBLASLt version, u32 sizeof(attn_memo_entry), u32 an, n
// conv entries, gn GEMM entries, an attention entries, u32 CRC-32 of all that precedes it.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cublasLt.h>

#include "cuda/autotune.cuh"

// The number moves with the layout, and also where our own kernels changed what a timed choice
// picks: 0004, the wgmma attention kernel (a file from before says cuDNN's SDPA for the ViTs'
// 197 tokens, which it now beats); 0005, an attention entry's key names which of our kernels
// its choice was timed against, and the fused Linear kernels' table (the GEMM entries' variant
// indices) has six tiles; 0006, a conv entry says whether the narrow-channel kernel ran it
#define AT_MAGIC "SIAT0006"

typedef struct {
    char magic[8];
    uint32_t entry_bytes, n;
    char gpu[256];
    int32_t cc, cudnn;
    uint64_t workspace;
    uint32_t gemm_entry_bytes, gn;
    uint64_t lt;
    uint32_t attn_entry_bytes, an;
} at_header;

// The header this process would write: what a file must match to be used.
static void own_header(at_header *h, int device, size_t workspace) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, AT_MAGIC, 8);
    h->entry_bytes = (uint32_t)sizeof(memo_entry);
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) == cudaSuccess) {
        snprintf(h->gpu, sizeof h->gpu, "%s", p.name);
        h->cc = p.major * 10 + p.minor;
    }
    h->cudnn = (int32_t)cudnnGetVersion();
    h->workspace = workspace;
    h->gemm_entry_bytes = (uint32_t)sizeof(gemm_memo_entry);
    h->lt = (uint64_t)cublasLtGetVersion();
    h->attn_entry_bytes = (uint32_t)sizeof(attn_memo_entry);
}

static bool mkdirs(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
            *s = '/';
        }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

void si_cuda_autotune_load(algo_memo *m, const char *dir, int device, size_t workspace) {
    m->path[0] = 0;
    m->device = device;
    m->workspace = workspace;
    char base[768];
    if (dir && !strcmp(dir, "off")) return;
    if (dir)
        snprintf(base, sizeof base, "%s", dir);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
        snprintf(base, sizeof base, "%s/shardinfer/autotune", getenv("XDG_CACHE_HOME"));
    else if (getenv("HOME") && *getenv("HOME"))
        snprintf(base, sizeof base, "%s/.cache/shardinfer/autotune", getenv("HOME"));
    else
        return;
    at_header h;
    own_header(&h, device, workspace);
    char gpu[64]; // the name made a file name: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3"
    size_t k = 0;
    for (const char *c = h.gpu; *c && k + 1 < sizeof gpu; c++)
        gpu[k++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
                       ? *c
                       : '-';
    gpu[k] = 0;
    snprintf(m->path, sizeof m->path, "%s/conv-%s-sm%d-cudnn%d-ws%lluM.bin", base, gpu, h.cc,
             h.cudnn, (unsigned long long)(workspace >> 20));
    FILE *f = fopen(m->path, "rb");
    if (!f) return;
    at_header fh;
    bool ok = fread(&fh, sizeof fh, 1, f) == 1 && !memcmp(&fh, &h, offsetof(at_header, n)) &&
              !memcmp(fh.gpu, h.gpu, sizeof h.gpu) && fh.cc == h.cc && fh.cudnn == h.cudnn &&
              fh.workspace == h.workspace && fh.n <= MEMO_CAP &&
              fh.gemm_entry_bytes == h.gemm_entry_bytes && fh.lt == h.lt && fh.gn <= GEMM_MEMO_CAP &&
              fh.attn_entry_bytes == h.attn_entry_bytes && fh.an <= ATTN_MEMO_CAP;
    uint32_t crc = 0, want = 0;
    if (ok) {
        ok = fread(m->e, sizeof(memo_entry), fh.n, f) == fh.n &&
             fread(m->ge, sizeof(gemm_memo_entry), fh.gn, f) == fh.gn &&
             fread(m->ae, sizeof(attn_memo_entry), fh.an, f) == fh.an &&
             fread(&want, 4, 1, f) == 1;
        crc = (uint32_t)crc32(crc32(0, (const Bytef *)&fh, sizeof fh), (const Bytef *)m->e,
                              (uInt)(sizeof(memo_entry) * fh.n));
        crc = (uint32_t)crc32(crc, (const Bytef *)m->ge, (uInt)(sizeof(gemm_memo_entry) * fh.gn));
        crc = (uint32_t)crc32(crc, (const Bytef *)m->ae, (uInt)(sizeof(attn_memo_entry) * fh.an));
    }
    fclose(f);
    if (ok && crc == want) {
        m->n = m->loaded = (int)fh.n;
        m->gn = m->gloaded = (int)fh.gn;
        m->an = m->aloaded = (int)fh.an;
    } else {
        m->n = m->loaded = m->gn = m->gloaded = m->an = m->aloaded = 0;
        si_log_warn("autotune cache %s: damaged or from another build; timing again and "
                    "rewriting it",
                    m->path);
    }
}

// The parts, then the CRC-32 of them all, written to path through a private temporary renamed
// into place (ranks writing at once never leave a torn file), its folder made first. A failure is
// a warning that says what the next start does instead (then), and false.
typedef struct {
    const void *p;
    size_t n;
} part;
static bool write_atomically(const char *path, const part *parts, int n_parts, const char *then) {
    char dir[1200], tmp[1300];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    uint32_t crc = 0;
    for (int i = 0; i < n_parts; i++)
        crc = (uint32_t)crc32(crc, (const Bytef *)parts[i].p, (uInt)parts[i].n);
    FILE *f = mkdirs(dir) ? fopen(tmp, "wb") : NULL;
    bool ok = f != NULL;
    for (int i = 0; ok && i < n_parts; i++) ok = fwrite(parts[i].p, 1, parts[i].n, f) == parts[i].n;
    ok = ok && fwrite(&crc, 4, 1, f) == 1;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) == 0) return true;
    si_log_warn("autotune cache %s: cannot write it (%s); %s", path, strerror(errno), then);
    unlink(tmp);
    return false;
}

void si_cuda_autotune_save(const algo_memo *m) {
    if (!m->path[0] ||
        (m->n == m->loaded && m->gn == m->gloaded && m->an == m->aloaded && !m->dirty))
        return;
    at_header h;
    own_header(&h, m->device, m->workspace);
    h.n = (uint32_t)m->n;
    h.gn = (uint32_t)m->gn;
    h.an = (uint32_t)m->an;
    const part parts[] = {{&h, sizeof h},
                          {m->e, sizeof(memo_entry) * (size_t)m->n},
                          {m->ge, sizeof(gemm_memo_entry) * (size_t)m->gn},
                          {m->ae, sizeof(attn_memo_entry) * (size_t)m->an}};
    write_atomically(m->path, parts, 4, "the next start times again");
}

#define BLOB_MAGIC "SIBL0002" // 0001: the CRC over the bytes alone
#define BLOB_MAX ((size_t)64 << 20)

static void blob_path(const algo_memo *m, const char *tag, char *out, size_t cap) {
    snprintf(out, cap, "%s.%s", m->path, tag);
}

// A blob: "SIBL0002", u64 its length, the bytes, u32 CRC-32 of all that precedes it
void *si_cuda_autotune_blob_load(const algo_memo *m, const char *tag, size_t *n) {
    *n = 0;
    if (!m->path[0]) return NULL;
    char path[1200];
    blob_path(m, tag, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char magic[8];
    uint64_t len = 0;
    uint32_t want = 0;
    void *data = NULL;
    bool ok = fread(magic, 8, 1, f) == 1 && !memcmp(magic, BLOB_MAGIC, 8) &&
              fread(&len, 8, 1, f) == 1 && len > 0 && len <= BLOB_MAX &&
              (data = malloc((size_t)len)) != NULL && fread(data, 1, (size_t)len, f) == len &&
              fread(&want, 4, 1, f) == 1;
    fclose(f);
    if (ok) {
        uint32_t crc = (uint32_t)crc32(0, (const Bytef *)magic, 8);
        crc = (uint32_t)crc32(crc, (const Bytef *)&len, 8);
        ok = (uint32_t)crc32(crc, (const Bytef *)data, (uInt)len) == want;
    }
    if (!ok) {
        free(data);
        return NULL;
    }
    *n = (size_t)len;
    return data;
}

bool si_cuda_autotune_blob_save(const algo_memo *m, const char *tag, const void *data, size_t n) {
    if (!m->path[0] || n == 0 || n > BLOB_MAX) return false;
    char path[1200];
    blob_path(m, tag, path, sizeof path);
    const uint64_t len = n;
    const part parts[] = {{BLOB_MAGIC, 8}, {&len, 8}, {data, n}};
    return write_atomically(path, parts, 3, "the next start builds it again");
}
