// nvJPEG's hardware backend behind src/decode/hwjpeg.h (and cuda/jpeg.cuh's probe). Measured on an
// H100 (docs/performance.md): batches of 256 ImageNet-sized photos at about 20,000 images/s from
// one host thread; decode-time scaling through nvjpegDecodeBatchedEx gave wrong pixels there (mean
// |diff| ~60 against libjpeg-turbo at the same scale), so images decode at full size and the resize
// scales them. The hardware's planes are libjpeg-turbo's bit for bit, its RGB output is not: it
// replicates chroma where libjpeg-turbo interpolates. --decode gpu takes the RGB (the planar
// outputs run at a third of its speed) and k_unreplicate + k_refancy recover the chroma planes from
// it and convert again with libjpeg-turbo's upsampling (io/yuv.h): its pixels wherever no whole
// block of the image was clamped. --decode gpu-exact decodes to planes and k_yuv_rgb converts them:
// --decode cpu's pixels everywhere.
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/check.cuh"
#include "cuda/cuda.h"
#include "cuda/jpeg.cuh"

extern "C" {
#include "decode/hwjpeg.h"
}

// One image's conversion between its planes and its RGB, offsets into the slot's device buffer.
typedef struct {
    uint64_t yuv, rgb;
    int32_t w, h, hs, vs;
} yuv_job;

// libjpeg-turbo's RGB of each image from its planes (io/yuv.h); image blockIdx.y, pixels strided.
__global__ void k_yuv_rgb(uint8_t *base, const yuv_job *jobs) {
    const yuv_job J = jobs[blockIdx.y];
    const si_yuv_shape s = {J.w, J.h, J.hs, J.vs};
    const uint8_t *yuv = base + J.yuv;
    uint8_t *rgb = base + J.rgb;
    const int n = J.w * J.h;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += gridDim.x * blockDim.x) {
        int y = p / J.w, x = p - y * J.w;
        si_yuv_rgb(yuv, &s, x, y, rgb + (size_t)p * 3);
    }
}

// The hardware's RGB of each image: its chroma planes (cw x ch each, at yuv) from each block's
// pixels (io/yuv.h); image blockIdx.y, chroma samples strided a warp at a time. A block clamped
// whole is searched for by its whole warp, 32 candidates a step in si_yuv_unreplicate's order,
// so the pair found is the host's.
__global__ void k_unreplicate(uint8_t *base, const yuv_job *jobs) {
    const yuv_job J = jobs[blockIdx.y];
    const si_yuv_shape s = {J.w, J.h, J.hs, J.vs};
    const int cw = si_yuv_cw(&s), n = cw * si_yuv_ch(&s), lane = (int)(threadIdx.x & 31);
    const uint8_t *rgb = base + J.rgb;
    uint8_t *cb = base + J.yuv, *cr = cb + n;
    for (int p0 = (int)(blockIdx.x * blockDim.x + (threadIdx.x & ~31u)); p0 < n;
         p0 += (int)(gridDim.x * blockDim.x)) {
        const int p = p0 + lane;
        int x = 0, y = 0, b = 0, r = 0;
        bool exact = true;
        if (p < n) {
            y = p / cw;
            x = p - y * cw;
            exact = si_yuv_block_chroma(rgb, &s, x, y, &b, &r);
        }
        for (unsigned clamped = __ballot_sync(~0u, !exact); clamped; clamped &= clamped - 1) {
            const int who = __ffs(clamped) - 1;
            const int wx = __shfl_sync(~0u, x, who), wy = __shfl_sync(~0u, y, who);
            const int eb = __shfl_sync(~0u, b, who), er = __shfl_sync(~0u, r, who);
            for (int i0 = 0; i0 < SI_YUV_CANDIDATES; i0 += 32) {
                int tb = 0, tr = 0;
                const bool ok = i0 + lane < SI_YUV_CANDIDATES &&
                                si_yuv_try(rgb, &s, wx, wy, eb, er, i0 + lane, &tb, &tr);
                const unsigned hit = __ballot_sync(~0u, ok);
                if (!hit) continue;
                tb = __shfl_sync(~0u, tb, __ffs(hit) - 1);
                tr = __shfl_sync(~0u, tr, __ffs(hit) - 1);
                if (lane == who) b = tb, r = tr;
                break;
            }
        }
        if (p < n) cb[p] = (uint8_t)b, cr[p] = (uint8_t)r;
    }
}

// Then each chroma sample's pixels in place, from themselves and those planes: libjpeg-turbo's
// RGB.
__global__ void k_refancy(uint8_t *base, const yuv_job *jobs) {
    const yuv_job J = jobs[blockIdx.y];
    const si_yuv_shape s = {J.w, J.h, J.hs, J.vs};
    const int cw = si_yuv_cw(&s), n = cw * si_yuv_ch(&s);
    const uint8_t *cb = base + J.yuv, *cr = cb + n;
    uint8_t *rgb = base + J.rgb;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += gridDim.x * blockDim.x) {
        int y = p / cw, x = p - y * cw;
        si_yuv_refancy(rgb, cb, cr, &s, x, y);
    }
}

// The conversions of n images (jobs_d, device) in buffer base on stream s: planes to RGB
// (exact: a thread per pixel), or the replicated RGB to libjpeg-turbo's (a thread per chroma
// sample). most: the largest image's pixels or chroma samples.
static void convert(uint8_t *base, const yuv_job *jobs_d, int n, int most, bool exact,
                    cudaStream_t s) {
    const int want = (most + 255) / 256;
    dim3 grid((unsigned)(want < 48 ? (want > 0 ? want : 1) : 48), (unsigned)n);
    if (exact) {
        k_yuv_rgb<<<grid, 256, 0, s>>>(base, jobs_d);
    } else {
        k_unreplicate<<<grid, 256, 0, s>>>(base, jobs_d);
        k_refancy<<<grid, 256, 0, s>>>(base, jobs_d);
    }
}

extern "C" si_status si_cuda_unreplicate(uint8_t *rgb, int w, int h, int hs, int vs) {
    const si_yuv_shape sh = {w, h, hs, vs};
    if (!si_yuv_replicated(&sh)) return SI_OK;
    const size_t px = si_jpeg_rgb_bytes(w, h), all = px + si_yuv_chroma_bytes(&sh);
    uint8_t *d = NULL;
    yuv_job *jd = NULL;
    const yuv_job job = {px, 0, w, h, hs, vs};
    cudaCheck(cudaMalloc((void **)&d, all));
    cudaCheck(cudaMalloc((void **)&jd, sizeof job));
    cudaCheck(cudaMemcpy(d, rgb, (size_t)w * (size_t)h * 3, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(jd, &job, sizeof job, cudaMemcpyHostToDevice));
    convert(d, jd, 1, si_yuv_cw(&sh) * si_yuv_ch(&sh), false, 0);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpy(rgb, d, (size_t)w * (size_t)h * 3, cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(jd));
    return SI_OK;
}

extern "C" bool si_cuda_hw_jpeg(char *why, size_t cap) {
    return si_cuda_jpeg_available(why, cap);
}

#ifndef SI_HAVE_NVJPEG_H

bool si_cuda_jpeg_available(char *why, size_t cap) {
    snprintf(why, cap,
             "this build has no nvJPEG (nvjpeg.h was not found when it was configured; "
             "scripts/setup.sh installs it)");
    return false;
}
extern "C" bool si_cuda_hw_jpeg_expected(int) {
    return false;
}
// the si_hwjpeg calls of this build: src/decode/hwjpeg_none.c's
#else
#include <nvjpeg.h>

// The calls we make, resolved from libnvjpeg.so.13 once.
static struct {
    decltype(&nvjpegCreateEx) create;
    decltype(&nvjpegDestroy) destroy;
    decltype(&nvjpegGetHardwareDecoderInfo) hw_info;
    decltype(&nvjpegJpegStateCreate) state_create;
    decltype(&nvjpegJpegStateDestroy) state_destroy;
    decltype(&nvjpegDecodeBatchedInitialize) batch_init;
    decltype(&nvjpegDecodeBatched) batch_decode;
    decltype(&nvjpegGetProperty) property;
    bool tried, ok;
    char why[256];
} api;

struct si_hwjpeg {
    nvjpegHandle_t hw; // made or taken from the probe by make_states
    int device;        // the engine's: the calls may come from a thread that has not chosen it
    int slots, max_batch;
    int parts;  // host threads making one batch's calls, a contiguous part of its images each
    bool exact; // planes converted by k_yuv_rgb, else the hardware's RGB with its chroma recovered
    // a state and a stream per part, shared by the slots: a state takes the next batch while
    // its previous one is still in flight (nvJPEG orders them on the part's stream), which gave
    // the same pixels and rate as a state per slot (bench/nvjpeg_bringup.c, 2 H200s), and its
    // making is what the node's processes wait for one another in (0.1 s each alone, 0.24 s
    // each with 2 processes at once)
    nvjpegJpegState_t *state; // [parts]
    cudaStream_t *pstream;    // [parts]: where each part's decode is queued
    cudaEvent_t *pdone;       // [slots * parts]: slot k's part p's end on its stream
    cudaEvent_t *pstart;      // [slots]: the slot's stream up to the decode
    si_jpeg_jobs *jobs;       // [slots], their arrays carved from `arrays`
    void *arrays;
    const unsigned char **data; // [max_batch]: one batch's arguments, part p's a range of them
    size_t *lens;
    nvjpegImage_t *dst;
    yuv_job *conv_h, *conv_d; // [slots * max_batch], the conversions' arguments
    // the handle and the decode states are made on a thread of their own while the engine sets
    // up and the run starts; every slot is usable once `ready` (atomic), `made` is final once
    // `done`
    pthread_t maker;
    bool making;
    int ready, done;
    int made; // nvJPEG's status (0: made; MADE_NONE: no hardware decoder, why says why)
    char why[256];
    // parts 1..parts-1 run on helper threads (part 0 on the caller's): a batch is handed out by
    // bumping `gen`; each helper makes its part's call and counts `left` down
    pthread_t *helper;
    int n_helpers;
    pthread_mutex_t mu;
    pthread_cond_t go, finished;
    unsigned gen;
    int left;
    bool quit;
    int cur_slot, cur_n;    // the batch handed out: its slot and its images
    int *part_status;       // [parts]: nvJPEG's status of each part's call
    si_hwjpeg **helper_arg; // [parts - 1]: each helper's part is its place here, plus 1
};
#define MADE_NONE (-2)

static bool load_api(void) {
    if (api.tried) return api.ok;
    api.tried = true;
    void *lib = dlopen("libnvjpeg.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(api.why, sizeof api.why, "cannot load libnvjpeg.so.13: %s", dlerror());
        return false;
    }
#define SYM(field, name)                                                                           \
    if (!(*(void **)&api.field = dlsym(lib, name))) {                                              \
        snprintf(api.why, sizeof api.why, "libnvjpeg.so.13 has no %s", name);                      \
        return false;                                                                              \
    }
    SYM(create, "nvjpegCreateEx");
    SYM(destroy, "nvjpegDestroy");
    SYM(hw_info, "nvjpegGetHardwareDecoderInfo");
    SYM(state_create, "nvjpegJpegStateCreate");
    SYM(state_destroy, "nvjpegJpegStateDestroy");
    SYM(batch_init, "nvjpegDecodeBatchedInitialize");
    SYM(batch_decode, "nvjpegDecodeBatched");
    SYM(property, "nvjpegGetProperty");
#undef SYM
    api.ok = true;
    return true;
}

// A handle on the hardware backend; the nvJPEG status, 0 on success. nvJPEG's own allocators:
// the hardware backend calls none that a caller gives it (with counting hooks, measured on the
// H100: not one call, states and steady state included), so what it takes is measured as device
// memory beside the plan (the run's summary).
static int create_handle(nvjpegHandle_t *h) {
    return (int)api.create(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_DEFAULT, h);
}

// The probe's handle, kept for the first decoder: creating a handle on the hardware backend takes
// about half a second (the engines' set-up), once is enough. The probe runs once per process,
// under the lock (the GPU's set-up thread and a decoder's may both ask).
static nvjpegHandle_t spare;
static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;

bool si_cuda_jpeg_available(char *why, size_t cap) {
    static int answer = -1; // per process: every rank asks once for its device
    static char reason[256];
    pthread_mutex_lock(&probe_mu);
    if (answer < 0) {
        answer = 0;
        nvjpegHandle_t probe = NULL;
        int r;
        unsigned engines = 0, cores = 0;
        if (!load_api()) {
            snprintf(reason, sizeof reason, "%s", api.why);
        } else if (getenv("SI_TEST_NO_HW_JPEG")) { // tests: a GPU of the kind without them
            snprintf(reason, sizeof reason, "SI_TEST_NO_HW_JPEG is set");
        } else if ((r = create_handle(&probe)) != 0) {
            snprintf(reason, sizeof reason,
                     "nvJPEG's hardware backend is not available on this GPU (status %d): it "
                     "has no JPEG decoding engines",
                     r);
        } else {
            api.hw_info(probe, &engines, &cores);
            spare = probe;
            answer = 1;
            int v[3] = {0, 0, 0};
            api.property(MAJOR_VERSION, &v[0]);
            api.property(MINOR_VERSION, &v[1]);
            api.property(PATCH_LEVEL, &v[2]);
            // the hardware work queues CUDA started with (si_cuda_set_work_queues, cuda/cuda.h)
            static_assert(SI_CUDA_WORK_QUEUES == 32, "the message below says 32");
            const char *q = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
            const int queues = q && atoi(q) > 0 ? atoi(q) : 8;
            snprintf(reason, sizeof reason,
                     "nvJPEG %d.%d.%d, %u hardware decoders, %d CUDA work queues%s", v[0], v[1],
                     v[2], engines, queues,
                     queues < SI_CUDA_WORK_QUEUES
                         ? " (CUDA_DEVICE_MAX_CONNECTIONS: below 32 the decoder's calls can "
                           "wait for the model's batches)"
                         : "");
        }
    }
    snprintf(why, cap, "%s", reason);
    pthread_mutex_unlock(&probe_mu);
    return answer == 1;
}

extern "C" bool si_cuda_hw_jpeg_expected(int dev) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    // A100 and A30 (8.0), H100 and H200 (9.0), B200 (10.0) carry NVJPG engines; a MIG instance
    // may have none
    return p.minor == 0 && (p.major == 8 || p.major == 9 || p.major == 10) &&
           !strstr(p.name, "MIG");
}

// The handle (the probe's, else a new one) and the parts' decode states (the first about
// 0.35 s, the others 0.1 s on an H200; nvJPEG makes them one at a time, even from several
// threads, and across the node's processes). The probe may still be running on the GPU's set-up
// thread (si_cuda_prewarm_start): this waits for it, not the engine. A shared handle with a
// state per calling thread is what nvJPEG's thread-safety rules ask for.
static void *make_states(void *arg) {
    si_hwjpeg *j = (si_hwjpeg *)arg;
    si_cuda_prewarm_join();
    j->made = cudaSetDevice(j->device) == cudaSuccess ? 0 : -1;
    if (j->made == 0 && !si_cuda_jpeg_available(j->why, sizeof j->why)) j->made = MADE_NONE;
    if (j->made == 0) {
        pthread_mutex_lock(&probe_mu);
        j->hw = spare;
        spare = NULL;
        pthread_mutex_unlock(&probe_mu);
        if (!j->hw && (j->made = create_handle(&j->hw)) != 0) {
            j->hw = NULL;
            snprintf(j->why, sizeof j->why, "nvjpegCreateEx failed (status %d)", j->made);
            j->made = MADE_NONE;
        }
    }
    for (int p = 0; p < j->parts && j->made == 0; p++)
        j->made = (int)api.state_create(j->hw, &j->state[p]);
    if (j->made == 0) __atomic_store_n(&j->ready, 1, __ATOMIC_RELEASE);
    if (j->made != 0 && j->made != MADE_NONE)
        snprintf(j->why, sizeof j->why, "its decode states could not be made (status %d)", j->made);
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

// Part p of the batch handed out: its contiguous range of the images, on the part's state,
// queued on the part's stream after the slot's stream has come to the decode.
static int decode_part(si_hwjpeg *j, int p) {
    const int k = j->cur_slot, n = j->cur_n;
    const int lo = (int)((long)n * p / j->parts), hi = (int)((long)n * (p + 1) / j->parts);
    if (hi == lo) return 0;
    cudaStream_t ps = j->pstream[p];
    if (cudaStreamWaitEvent(ps, j->pstart[k], 0) != cudaSuccess) return -1;
    nvjpegJpegState_t st = j->state[p];
    int r = (int)api.batch_init(j->hw, st, hi - lo, 1,
                                j->exact ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_RGBI);
    if (r == 0) r = (int)api.batch_decode(j->hw, st, j->data + lo, j->lens + lo, j->dst + lo, ps);
    if (r == 0 && cudaEventRecord(j->pdone[k * j->parts + p], ps) != cudaSuccess) r = -1;
    return r;
}

static void *helper_main(void *arg) {
    si_hwjpeg *j = *(si_hwjpeg **)arg;
    const int p = (int)((si_hwjpeg **)arg - (si_hwjpeg **)j->helper_arg) + 1;
    cudaSetDevice(j->device);
    unsigned seen = 0;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->gen == seen && !j->quit) pthread_cond_wait(&j->go, &j->mu);
        if (j->quit) break;
        seen = j->gen;
        pthread_mutex_unlock(&j->mu);
        int r = decode_part(j, p);
        pthread_mutex_lock(&j->mu);
        j->part_status[p] = r;
        if (--j->left == 0) pthread_cond_signal(&j->finished);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

extern "C" si_hwjpeg *si_hwjpeg_create(int slots, int max_batch, bool exact, int parts) {
    si_hwjpeg *j = (si_hwjpeg *)si_xcalloc(1, sizeof *j);
    j->slots = slots;
    j->max_batch = max_batch;
    j->exact = exact;
    j->parts = parts < 1 ? 1 : parts > max_batch ? max_batch : parts;
    if (cudaGetDevice(&j->device) != cudaSuccess) j->device = 0;
    j->state = (nvjpegJpegState_t *)si_xcalloc((size_t)j->parts, sizeof *j->state);
    // per slot: src, len, dst (uint64) and w, h, sub (int32), max_batch each
    size_t per = (size_t)max_batch * (3 * sizeof(uint64_t) + 3 * sizeof(int32_t));
    uint8_t *a = (uint8_t *)si_xcalloc((size_t)slots, per);
    j->arrays = a;
    j->jobs = (si_jpeg_jobs *)si_xcalloc((size_t)slots, sizeof *j->jobs);
    for (int k = 0; k < slots; k++, a += per) {
        si_jpeg_jobs *q = &j->jobs[k];
        q->src = (uint64_t *)a;
        q->len = q->src + max_batch;
        q->dst = q->len + max_batch;
        q->w = (int32_t *)(q->dst + max_batch);
        q->h = q->w + max_batch;
        q->sub = q->h + max_batch;
    }
    j->data = (const unsigned char **)si_xcalloc((size_t)max_batch, sizeof *j->data);
    j->lens = (size_t *)si_xcalloc((size_t)max_batch, sizeof *j->lens);
    j->dst = (nvjpegImage_t *)si_xcalloc((size_t)max_batch, sizeof *j->dst);
    j->part_status = (int *)si_xcalloc((size_t)j->parts, sizeof *j->part_status);
    size_t conv = (size_t)slots * (size_t)max_batch * sizeof(yuv_job);
    if (cudaHostAlloc((void **)&j->conv_h, conv, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc((void **)&j->conv_d, conv) != cudaSuccess) {
        si_error(SI_ERR_NOMEM, "--decode gpu: cannot allocate %zu bytes", conv);
        si_hwjpeg_free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->go, NULL);
    pthread_cond_init(&j->finished, NULL);
    const int n_done = slots * j->parts;
    j->pstream = (cudaStream_t *)si_xcalloc((size_t)j->parts, sizeof *j->pstream);
    j->pdone = (cudaEvent_t *)si_xcalloc((size_t)n_done, sizeof *j->pdone);
    j->pstart = (cudaEvent_t *)si_xcalloc((size_t)slots, sizeof *j->pstart);
    bool made = true;
    for (int p = 0; p < j->parts; p++)
        made =
            made && cudaStreamCreateWithFlags(&j->pstream[p], cudaStreamNonBlocking) == cudaSuccess;
    for (int i = 0; i < n_done; i++)
        made =
            made && cudaEventCreateWithFlags(&j->pdone[i], cudaEventDisableTiming) == cudaSuccess;
    for (int k = 0; k < slots; k++)
        made =
            made && cudaEventCreateWithFlags(&j->pstart[k], cudaEventDisableTiming) == cudaSuccess;
    if (!made) {
        si_error(SI_ERR_NOMEM, "--decode gpu: cannot create the decoder's streams: %s",
                 cudaGetErrorString(cudaGetLastError()));
        si_hwjpeg_free(j);
        return NULL;
    }
    if (j->parts > 1) {
        j->helper = (pthread_t *)si_xcalloc((size_t)j->parts - 1, sizeof *j->helper);
        j->helper_arg = (si_hwjpeg **)si_xcalloc((size_t)j->parts - 1, sizeof *j->helper_arg);
        for (int p = 1; p < j->parts; p++) {
            j->helper_arg[p - 1] = j;
            if (pthread_create(&j->helper[p - 1], NULL, helper_main, &j->helper_arg[p - 1]) != 0)
                si_fatal(__FILE__, __LINE__, "pthread_create", "a decoder's helper thread");
            j->n_helpers++;
        }
    }
    j->making = pthread_create(&j->maker, NULL, make_states, j) == 0;
    if (!j->making) make_states(j);
    return j;
}

extern "C" si_status si_hwjpeg_ready(si_hwjpeg *j) {
    if (j->making) pthread_join(j->maker, NULL);
    j->making = false;
    if (j->made == MADE_NONE) return si_error(SI_ERR_UNSUPPORTED, "--decode gpu: %s", j->why);
    if (j->made != 0) return si_error(SI_ERR_INTERNAL, "--decode gpu: %s", j->why);
    return SI_OK;
}

extern "C" int si_hwjpeg_usable(si_hwjpeg *j) {
    if (__atomic_load_n(&j->ready, __ATOMIC_ACQUIRE)) return 1;
    return __atomic_load_n(&j->done, __ATOMIC_ACQUIRE) ? -1 : 0;
}

extern "C" bool si_hwjpeg_exact(const si_hwjpeg *j) {
    return j && j->exact;
}

extern "C" int si_hwjpeg_parts(const si_hwjpeg *j) {
    return j ? j->parts : 0;
}

extern "C" void si_hwjpeg_free(si_hwjpeg *j) {
    if (!j) return;
    if (j->making) pthread_join(j->maker, NULL);
    if (j->n_helpers) {
        pthread_mutex_lock(&j->mu);
        j->quit = true;
        pthread_cond_broadcast(&j->go);
        pthread_mutex_unlock(&j->mu);
        for (int p = 0; p < j->n_helpers; p++) pthread_join(j->helper[p], NULL);
    }
    for (int p = 0; j->state && p < j->parts; p++)
        if (j->state[p]) api.state_destroy(j->state[p]);
    if (j->hw) api.destroy(j->hw);
    for (int p = 0; j->pstream && p < j->parts; p++)
        if (j->pstream[p]) cudaStreamDestroy(j->pstream[p]);
    for (int i = 0; j->pdone && i < j->slots * j->parts; i++)
        if (j->pdone[i]) cudaEventDestroy(j->pdone[i]);
    for (int k = 0; j->pstart && k < j->slots; k++)
        if (j->pstart[k]) cudaEventDestroy(j->pstart[k]);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->go);
    pthread_cond_destroy(&j->finished);
    free(j->helper);
    free(j->helper_arg);
    free(j->pstream);
    free(j->pdone);
    free(j->pstart);
    free(j->part_status);
    free(j->state);
    free(j->jobs);
    free(j->arrays);
    free(j->data);
    free(j->lens);
    free(j->dst);
    if (j->conv_h) cudaFreeHost(j->conv_h);
    if (j->conv_d) cudaFree(j->conv_d);
    free(j);
}

extern "C" si_jpeg_jobs *si_hwjpeg_jobs(si_hwjpeg *j, int k) {
    j->jobs[k].n = 0;
    return &j->jobs[k];
}

// After a call nvJPEG failed (part p's status r): whatever the parts left queued finishes before
// the caller reuses the buffers, and each failed part's state is made again (a failed batch
// leaves it unusable).
static si_status rejected(si_hwjpeg *j, int k, cudaStream_t s) {
    cudaCheck(cudaStreamSynchronize(s));
    int first = 0;
    for (int p = 0; p < j->parts; p++) {
        cudaCheck(cudaStreamSynchronize(j->pstream[p]));
        if (j->part_status[p] == 0) continue;
        if (!first) first = j->part_status[p];
        nvjpegJpegState_t *st = &j->state[p];
        api.state_destroy(*st);
        *st = NULL;
        int r2 = (int)api.state_create(j->hw, st);
        if (r2 != 0)
            return si_error(SI_ERR_INTERNAL,
                            "nvjpegJpegStateCreate failed (status %d) after a "
                            "batch the decoder rejected",
                            r2);
    }
    return si_error(SI_ERR_FORMAT, "nvJPEG rejected the batch of %d images (status %d)",
                    j->jobs[k].n, first);
}

extern "C" si_status si_hwjpeg_decode(si_hwjpeg *j, int k, const si_slot_pack *pk) {
    const si_jpeg_jobs *q = &j->jobs[k];
    const uint8_t *pack_h = pk->host;
    uint8_t *pack_d = pk->device;
    cudaStream_t s = (cudaStream_t)pk->stream;
    if (q->n == 0) return SI_OK;
    SI_ASSERT(q->n <= j->max_batch);
    if (si_hwjpeg_usable(j) != 1) { // a caller that did not ask (tests) waits for it
        si_status st = si_hwjpeg_ready(j);
        if (st != SI_OK) return st;
    }
    cudaCheck(cudaSetDevice(j->device));
    // the call's arguments: the hardware's RGB at dst, or (exact) the planes after it; and the
    // conversions after the call: every image's (exact), or those with chroma to recover
    yuv_job *conv = j->conv_h + (size_t)k * (size_t)j->max_batch;
    int n_conv = 0, most = 0; // most: the largest image's work (convert)
    for (int i = 0; i < q->n; i++) {
        const int w = q->w[i], h = q->h[i];
        const si_yuv_shape sh = {w, h, q->sub[i] & 255, q->sub[i] >> 8};
        j->data[i] = pack_h + q->src[i];
        j->lens[i] = (size_t)q->len[i];
        memset(&j->dst[i], 0, sizeof j->dst[i]);
        if (!j->exact) {
            j->dst[i].channel[0] = pack_d + q->dst[i];
            j->dst[i].pitch[0] = (size_t)w * 3;
            if (!si_yuv_replicated(&sh)) continue;
        }
        const int work = j->exact ? w * h : si_yuv_cw(&sh) * si_yuv_ch(&sh);
        if (work > most) most = work;
        yuv_job *c = &conv[n_conv++];
        *c = (yuv_job){q->dst[i] + si_jpeg_rgb_bytes(w, h), q->dst[i], w, h, sh.hs, sh.vs};
        if (!j->exact) continue;
        const size_t cw = (size_t)si_yuv_cw(&sh), luma = (size_t)w * (size_t)h;
        uint8_t *planes = pack_d + c->yuv;
        j->dst[i].channel[0] = planes;
        j->dst[i].pitch[0] = (size_t)w;
        j->dst[i].channel[1] = planes + luma;
        j->dst[i].pitch[1] = cw;
        j->dst[i].channel[2] = planes + luma + cw * (size_t)si_yuv_ch(&sh);
        j->dst[i].pitch[2] = cw;
    }
    // the parts' calls: part 0 here, the others on the helpers at the same time (the calls'
    // host work, the bitstreams' parsing, is what limits one thread to ~20,000 images/s)
    j->cur_slot = k;
    j->cur_n = q->n;
    cudaCheck(cudaEventRecord(j->pstart[k], s));
    if (j->parts > 1) {
        pthread_mutex_lock(&j->mu);
        j->left = j->parts - 1;
        j->gen++;
        pthread_cond_broadcast(&j->go);
        pthread_mutex_unlock(&j->mu);
    }
    j->part_status[0] = decode_part(j, 0);
    bool failed = j->part_status[0] != 0;
    if (j->parts > 1) {
        pthread_mutex_lock(&j->mu);
        while (j->left > 0) pthread_cond_wait(&j->finished, &j->mu);
        pthread_mutex_unlock(&j->mu);
        for (int p = 1; p < j->parts; p++) failed |= j->part_status[p] != 0;
    }
    for (int p = 0; p < j->parts && !failed; p++) {
        const int lo = (int)((long)q->n * p / j->parts);
        const int hi = (int)((long)q->n * (p + 1) / j->parts);
        if (hi > lo) cudaCheck(cudaStreamWaitEvent(s, j->pdone[k * j->parts + p], 0));
    }
    if (failed) return rejected(j, k, s);
    if (n_conv > 0) { // to libjpeg-turbo's RGB, on the same stream
        yuv_job *conv_d = j->conv_d + (size_t)k * (size_t)j->max_batch;
        cudaCheck(cudaMemcpyAsync(conv_d, conv, sizeof(yuv_job) * (size_t)n_conv,
                                  cudaMemcpyHostToDevice, s));
        convert(pack_d, conv_d, n_conv, most, j->exact, s);
        cudaCheck(cudaGetLastError());
    }
    return SI_OK;
}

#endif
