// Device discovery for the CUDA backend.
#include "cuda/check.cuh"
#include "cuda/cuda.h"

#include <stdio.h>

extern "C" int si_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
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
