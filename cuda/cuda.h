/* The extern "C" boundary of shardinfer's CUDA code. Built only when CUDA is found
 * (SI_HAVE_CUDA); without a device every entry point reports so instead of failing hard. */
#ifndef SI_CUDA_H
#define SI_CUDA_H

#include "io/resample.h"
#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The hardware work queues CUDA multiplexes streams onto (CUDA_DEVICE_MAX_CONNECTIONS; CUDA's
 * default is 8, this its most). nvJPEG's hardware decoder runs a kernel an image on streams of
 * its own; where one of them shares a queue with a slot stream, the decoder's call waits behind
 * the model's whole batch there, and decoding and computing take turns (on an H100, steady
 * images/s with 8 -> 32: the CLIP tower 10,500-10,700 -> 11,800-12,100, ResNet-50
 * 13,700-14,200 -> 17,700-18,300; docs/performance.md). */
#define SI_CUDA_WORK_QUEUES 32
/* Sets CUDA_DEVICE_MAX_CONNECTIONS to SI_CUDA_WORK_QUEUES unless the environment has a value
 * (the user's stays). Only before anything can start CUDA: the device probe, MPI, the prewarm
 * thread (the process's first call). */
void si_cuda_set_work_queues(void);

/* A rank that a launcher started (local_rank >= 0: its node-local rank; visible: the
 * CUDA_VISIBLE_DEVICES it started with, or NULL) gets CUDA_VISIBLE_DEVICES set to the one GPU it
 * will use, the one cudaSetDevice(local rank % count) would pick: without the variable, local rank
 * % the node's GPUs (counted by NVML, which needs no CUDA; nothing where NVML is missing or a GPU
 * is in MIG mode); with a list of several (Slurm's allocation, the user's), its entry local rank %
 * its length; a single entry stays. Its CUDA start then sets up that device alone, not every GPU
 * of the node for each rank. The GPU's index among the node's (or the list's), or -1.
 * Only before anything can start CUDA (main, beside si_cuda_set_work_queues). */
int si_cuda_pin_local_gpu(int local_rank, const char *visible);
/* CUDA device dev's index among the node's GPUs (dev itself unless pinned), and their count
 * in *node_count (may be NULL): what logs and summaries name. */
int si_cuda_node_gpu(int dev, int *node_count);
/* Number of usable devices; 0 when there is no driver or no device (never an error). */
int si_cuda_device_count(void);
/* The same, and with none, why not (the CUDA runtime's reason, CUDA_VISIBLE_DEVICES) in why. */
int si_cuda_device_probe(char *why, size_t cap);
/* A one-line description of device `dev` (name, memory, compute capability) into buf. */
si_status si_cuda_device_info(int dev, char *buf, size_t cap);

/* Makes device local_rank % count current for the calling thread (one GPU per rank); *dev and
 * a description in info. An error when no device is visible. */
si_status si_cuda_select_device(int local_rank, int *dev, char *info, size_t cap);
/* A thread makes device local_rank % count's context current and, with jpeg, asks
 * si_cuda_hw_jpeg (whose answer and decoder handle are kept), so that both (about 0.8 s on an
 * H100) overlap the caller's other set-up; once the context is up a second thread makes
 * cuBLASLt's first heuristic query and cuDNN's first handle (0.1-0.15 s of library set-up the
 * engine then skips); nothing happens without a device. Nothing may call
 * setenv until si_cuda_prewarm_join has waited for it (call that before the process exits).
 * si_cuda_prewarm_context waits for the context alone (then the process may use the GPU
 * elsewhere; si_cuda_hw_jpeg only after si_cuda_prewarm_join). Any thread may wait, any number
 * of times. */
void si_cuda_prewarm_start(int local_rank, bool jpeg);
void si_cuda_prewarm_context(void);
void si_cuda_prewarm_join(void);
/* Device memory in use (total - free, the whole device as the driver sees it) and its size. */
si_status si_cuda_mem_info(size_t *used, size_t *total);
/* cudaMalloc, cudaHostAlloc and their frees made by the CUDA backend so far (the steady state
 * makes none: tests/test_gpu_engine.c counts them). */
long si_cuda_backend_alloc_calls(void);

/* Whether the current device has a hardware JPEG decoder this process can use (nvJPEG's hardware
 * backend, loaded at run time): true with its description in why, false with the reason. */
bool si_cuda_hw_jpeg(char *why, size_t cap);
/* Whether device dev is of a kind that has hardware JPEG decoders (A100, A30, H100, H200,
 * B200; not a MIG instance), before si_cuda_hw_jpeg's answer is in: a run may plan for the
 * decoder while the set-up thread still makes its handle. False in a build without nvJPEG. */
bool si_cuda_hw_jpeg_expected(int dev);

/* Page-locked host memory for the buffers the GPU path uploads from (decoded uint8 batches), so
 * copies to the device run at full PCIe speed and asynchronously. NULL when there is no device
 * or the allocation fails: callers fall back to malloc. Free with si_cuda_host_free. */
void *si_cuda_host_alloc(size_t bytes);
void si_cuda_host_free(void *p); /* accepts NULL */

/* (N, H, W, 3) uint8 -> (N, 3, H, W) float: (x/255 - mean[c]) / std[c], on the device. The
 * GPU twin of si_normalize_chw (io/jpeg.h). Host pointers; copies in and out (for tests). */
si_status si_cuda_normalize(const uint8_t *src, int n, int h, int w, const float mean[3],
                            const float std[3], float *dst);

/* The GPU resize (cuda/resize.cu) of n packed images (items into pool, io/resample.h) into
 * (n, ch, cw, 3) uint8 crops. Host pointers; copies in and out (for tests). */
si_status si_cuda_resize_crop(const uint8_t *pool, size_t pool_bytes, const si_rs_item *items,
                              int n, int ch, int cw, uint8_t *out);

/* --decode gpu's recovery of libjpeg-turbo's pixels from the hardware's replicated chroma
 * (io/yuv.h, cuda/jpeg.cu's kernels) on one w x h RGB image with hs x vs chroma subsampling, in
 * place. Host pointer; copies in and out (for tests; nothing happens where si_yuv_replicated
 * says no). */
si_status si_cuda_unreplicate(uint8_t *rgb, int w, int h, int hs, int vs);

#ifdef __cplusplus
}
#endif

#endif
