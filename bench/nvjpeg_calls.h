/* The nvJPEG calls the bench probes make (nvjpeg_probe.c, nvjpeg_bringup.c), resolved from
 * libnvjpeg.so.13 at run time as cuda/jpeg.cu resolves them (only nvjpeg.h is needed to build),
 * and one batched call's arguments. */
#ifndef SI_BENCH_NVJPEG_CALLS_H
#define SI_BENCH_NVJPEG_CALLS_H

#include <dlfcn.h>
#include <nvjpeg.h>

#define BATCH 256 /* images per batched call */

static struct {
    nvjpegStatus_t (*create)(nvjpegBackend_t, nvjpegDevAllocator_t *, nvjpegPinnedAllocator_t *,
                             unsigned int, nvjpegHandle_t *);
    nvjpegStatus_t (*state_create)(nvjpegHandle_t, nvjpegJpegState_t *);
    nvjpegStatus_t (*init)(nvjpegHandle_t, nvjpegJpegState_t, int, int, nvjpegOutputFormat_t);
    nvjpegStatus_t (*decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *,
                             const size_t *, nvjpegImage_t *, cudaStream_t);
    nvjpegStatus_t (*info)(nvjpegHandle_t, const unsigned char *, size_t, int *,
                           nvjpegChromaSubsampling_t *, int *, int *);
} nv;

/* Resolves nv's calls: NULL, else what is missing. */
static inline const char *nvjpeg_calls_load(void) {
    void *lib = dlopen("libnvjpeg.so.13", RTLD_NOW);
    if (!lib) return dlerror();
    *(void **)&nv.create = dlsym(lib, "nvjpegCreateEx");
    *(void **)&nv.state_create = dlsym(lib, "nvjpegJpegStateCreate");
    *(void **)&nv.init = dlsym(lib, "nvjpegDecodeBatchedInitialize");
    *(void **)&nv.decode = dlsym(lib, "nvjpegDecodeBatched");
    *(void **)&nv.info = dlsym(lib, "nvjpegGetImageInfo");
    return nv.create && nv.state_create && nv.init && nv.decode && nv.info
               ? NULL
               : "libnvjpeg.so.13 lacks a call the probes make";
}

/* One batched call's arguments. */
typedef struct {
    const unsigned char *data[BATCH];
    size_t lens[BATCH];
    nvjpegImage_t imgs[BATCH];
} batch;

#endif
