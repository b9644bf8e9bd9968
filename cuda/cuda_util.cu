// Device discovery for the CUDA backend, and the launch timer its init choices use.
#include "cuda/backend_internal.cuh"
#include "cuda/check.cuh"
#include "cuda/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" void si_cuda_set_work_queues(void) {
    char n[16];
    snprintf(n, sizeof n, "%d", SI_CUDA_WORK_QUEUES);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", n, 0);
}

// The GPUs of this node as NVML counts them (it needs no CUDA context: ~10 ms), 0 where NVML is
// missing or a GPU is in MIG mode (CUDA then sees instances, named otherwise).
static int nvml_gpu_count(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    typedef int (*init_fn)(void);
    typedef int (*count_fn)(unsigned *);
    typedef int (*handle_fn)(unsigned, void **);
    typedef int (*mig_fn)(void *, unsigned *, unsigned *);
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2"),
            shutdown = (init_fn)dlsym(lib, "nvmlShutdown");
    count_fn count = (count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    mig_fn mig = (mig_fn)dlsym(lib, "nvmlDeviceGetMigMode");
    unsigned n = 0;
    if (init && shutdown && count && handle && init() == 0) { // NVML_SUCCESS
        if (count(&n) != 0) n = 0;
        for (unsigned i = 0; i < n; i++) {
            void *h = NULL;
            unsigned cur = 0, pending = 0;
            if (handle(i, &h) != 0)
                n = 0;
            else if (mig && mig(h, &cur, &pending) == 0 && cur == 1)
                n = 0; // NVML_DEVICE_MIG_ENABLE
        }
        shutdown();
    }
    dlclose(lib);
    return (int)n;
}

static int pinned_gpu = -1, node_gpus = 0;

extern "C" int si_cuda_pin_local_gpu(int local_rank, const char *vis) {
    if (local_rank < 0) return -1;
    char v[256];
    if (vis) { // a list (Slurm's allocation, the user's): its entry local % its length
        int n = 1;
        for (const char *c = vis; *c; c++) n += *c == ',';
        if (!*vis || n < 2 || strlen(vis) >= sizeof v) return -1;
        int k = local_rank % n;
        const char *at = vis;
        for (int i = 0; i < k; i++) at = strchr(at, ',') + 1;
        size_t len = strchr(at, ',') ? (size_t)(strchr(at, ',') - at) : strlen(at);
        snprintf(v, sizeof v, "%.*s", (int)len, at);
        node_gpus = n;
        pinned_gpu = k;
    } else {
        int n = nvml_gpu_count();
        if (n <= 0) return -1;
        node_gpus = n;
        pinned_gpu = local_rank % n;
        snprintf(v, sizeof v, "%d", pinned_gpu);
    }
    setenv("CUDA_VISIBLE_DEVICES", v, 1);
    return pinned_gpu;
}

extern "C" int si_cuda_node_gpu(int dev, int *node_count) {
    if (pinned_gpu < 0) {
        if (node_count) *node_count = si_cuda_device_count();
        return dev;
    }
    if (node_count) *node_count = node_gpus;
    return pinned_gpu;
}

extern "C" int si_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return n;
}

extern "C" int si_cuda_device_probe(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (n == 0)
        snprintf(why, cap, "%s%s%s%s", e != cudaSuccess ? cudaGetErrorString(e) : "no device",
                 vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", "");
    return n;
}

extern "C" si_status si_cuda_device_info(int dev, char *buf, size_t cap) {
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, cap, "%s, %.1f GiB, compute capability %d.%d, %d SMs", p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor,
             p.multiProcessorCount);
    return SI_OK;
}

extern "C" si_status si_cuda_select_device(int local_rank, int *dev, char *info, size_t cap) {
    int n = si_cuda_device_count();
    if (n == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return si_error(SI_ERR_UNSUPPORTED, "--backend cuda: no CUDA device is visible%s%s%s",
                        vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
    }
    *dev = (local_rank < 0 ? 0 : local_rank) % n;
    cudaCheck(cudaSetDevice(*dev));
    return si_cuda_device_info(*dev, info, cap);
}

// The GPU's set-up thread: its progress under the lock (0 none, 1 started, 2 the context made or
// failed, 3 done), so that the caller can wait for the context alone and a decoder's thread for
// the whole (cuda/jpeg.cu).
static pthread_mutex_t prewarm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t prewarm_cv = PTHREAD_COND_INITIALIZER;
static struct {
    pthread_t thread, libs;
    int stage;
    bool joined, libs_started;
    int local;
    bool jpeg;
} prewarm;

// The libraries' first calls, made once the context is up on a thread of their own while the
// model and the input are opened (and the decoder's handle is made): cuBLASLt's first heuristic
// query loads its tables (0.08-0.15 s on an H100, whatever the handle; the engine's later ones
// take under a millisecond each) and cuDNN's first handle its sub-libraries. Results are thrown
// away; a failure is the engine's to meet and say.
static void *libs_main(void *) {
    cudaSetDevice(prewarm.local % si_cuda_device_count());
    cublasLtHandle_t lt = NULL;
    if (cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulDesc_t op = NULL;
        cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
        cublasLtMatmulPreference_t pref = NULL;
        cublasLtMatmulHeuristicResult_t res[4];
        int got = 0;
        if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&b, CUDA_R_16F, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&d, CUDA_R_16F, 256, 256, 256) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS)
            cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, d, d, pref, 4, res, &got);
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
        cublasLtDestroy(lt);
    }
    cudnnHandle_t dnn = NULL;
    if (cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS) cudnnDestroy(dnn);
    cudaGetLastError();
    return NULL;
}

static void prewarm_reach(int stage) {
    pthread_mutex_lock(&prewarm_mu);
    prewarm.stage = stage;
    pthread_cond_broadcast(&prewarm_cv);
    pthread_mutex_unlock(&prewarm_mu);
}

static void *prewarm_main(void *) {
    int n = si_cuda_device_count();
    bool up =
        n > 0 && cudaSetDevice(prewarm.local % n) == cudaSuccess && cudaFree(0) == cudaSuccess;
    if (!up) cudaGetLastError(); // the main thread meets and reports the same failure itself
    if (up) prewarm.libs_started = pthread_create(&prewarm.libs, NULL, libs_main, NULL) == 0;
    prewarm_reach(2);
    char why[256];
    if (up && prewarm.jpeg) si_cuda_hw_jpeg(why, sizeof why);
    prewarm_reach(3);
    return NULL;
}

extern "C" void si_cuda_prewarm_start(int local_rank, bool jpeg) {
    if (prewarm.stage != 0) return;
    prewarm.local = local_rank < 0 ? 0 : local_rank;
    prewarm.jpeg = jpeg;
    if (pthread_create(&prewarm.thread, NULL, prewarm_main, NULL) == 0) prewarm.stage = 1;
}

// Until the set-up thread reached `stage` (at once where none runs).
static void prewarm_wait(int stage) {
    pthread_mutex_lock(&prewarm_mu);
    while (prewarm.stage != 0 && prewarm.stage < stage) pthread_cond_wait(&prewarm_cv, &prewarm_mu);
    pthread_mutex_unlock(&prewarm_mu);
}

extern "C" void si_cuda_prewarm_context(void) {
    prewarm_wait(2);
}

extern "C" void si_cuda_prewarm_join(void) {
    prewarm_wait(3);
    pthread_mutex_lock(&prewarm_mu);
    bool join = prewarm.stage == 3 && !prewarm.joined;
    prewarm.joined |= join;
    pthread_mutex_unlock(&prewarm_mu);
    if (join) pthread_join(prewarm.thread, NULL);
    if (join && prewarm.libs_started) pthread_join(prewarm.libs, NULL);
}

extern "C" si_status si_cuda_mem_info(size_t *used, size_t *total) {
    size_t f = 0, t = 0;
    cudaCheck(cudaMemGetInfo(&f, &t));
    *used = t - f;
    *total = t;
    return SI_OK;
}

extern "C" void *si_cuda_host_alloc(size_t bytes) {
    if (si_cuda_device_count() == 0) return nullptr;
    void *p = nullptr;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError(); /* a failed pinning is not sticky: fall back to pageable memory */
        return nullptr;
    }
    return p;
}

extern "C" void si_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

float si_cuda_time_best(cudaStream_t s, bool (*launch)(void *ctx), void *ctx) {
    cudaEvent_t a, b;
    if (cudaEventCreate(&a) != cudaSuccess) return -1.f;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return -1.f;
    }
    float best = -1.f;
    for (int r = 0; r < 4; r++) { // the first run loads the kernel
        float ms = 0.f;
        if (cudaEventRecord(a, s) != cudaSuccess || !launch(ctx) ||
            cudaEventRecord(b, s) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
            cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
            best = -1.f;
            break;
        }
        if (r > 0 && (best < 0.f || ms < best)) best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    si_error_clear();
    cudaGetLastError(); // a failed candidate leaves nothing sticky behind (launch errors only)
    return best;
}
