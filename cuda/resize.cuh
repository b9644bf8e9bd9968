// The GPU resize's launch, for the backend (cuda/resize.cu).
#ifndef SI_CUDA_RESIZE_CUH
#define SI_CUDA_RESIZE_CUH

#include <cuda_runtime.h>

#include "io/resample.h"

// items[0, n) of pool (device pointers) into (n, ch, cw, 3) uint8 crops at out, on stream s.
cudaError_t si_k_resize_crop(cudaStream_t s, const uint8_t *pool, const si_rs_item *items, int n,
                             int ch, int cw, uint8_t *out);

#endif
