// Preprocessing on the GPU: decoded uint8 HWC images cross PCIe as they are (a quarter of the
// bytes of float), and normalisation plus the layout change to CHW happen here in one pass.
#include "cuda/check.cuh"
#include "cuda/cuda.h"

struct norm_params {
    float scale[3], shift[3]; // y = x * scale + shift == (x/255 - mean) / std
};

// One thread per pixel: reads 3 bytes, writes 3 floats to three planes (coalesced per plane).
__global__ void normalize_hwc_to_chw(const uint8_t *__restrict__ src, int hw, int total,
                                     norm_params p, float *__restrict__ dst) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int img = i / hw, px = i - img * hw;
    const uint8_t *s = src + (size_t)i * 3;
    float *d = dst + (size_t)img * 3 * hw + px;
    d[0] = s[0] * p.scale[0] + p.shift[0];
    d[hw] = s[1] * p.scale[1] + p.shift[1];
    d[2 * hw] = s[2] * p.scale[2] + p.shift[2];
}

extern "C" si_status si_cuda_normalize(const uint8_t *src, int n, int h, int w, const float mean[3],
                                       const float std[3], float *dst) {
    norm_params p;
    for (int c = 0; c < 3; c++) {
        p.scale[c] = 1.0f / (255.0f * std[c]);
        p.shift[c] = -mean[c] / std[c];
    }
    size_t pixels = (size_t)n * h * w;
    uint8_t *d_src = nullptr;
    float *d_dst = nullptr;
    cudaCheck(cudaMalloc(&d_src, pixels * 3));
    cudaError_t e = cudaMalloc(&d_dst, pixels * 3 * sizeof(float));
    if (e != cudaSuccess) {
        cudaFree(d_src);
        cudaCheck(e);
    }
    si_status st = SI_OK;
    do {
        if ((e = cudaMemcpy(d_src, src, pixels * 3, cudaMemcpyHostToDevice)) != cudaSuccess) break;
        int threads = 256, blocks = (int)((pixels + threads - 1) / threads);
        normalize_hwc_to_chw<<<blocks, threads>>>(d_src, h * w, (int)pixels, p, d_dst);
        if ((e = cudaGetLastError()) != cudaSuccess) break;
        e = cudaMemcpy(dst, d_dst, pixels * 3 * sizeof(float), cudaMemcpyDeviceToHost);
    } while (0);
    if (e != cudaSuccess) st = cudaFail(e, "si_cuda_normalize: ");
    cudaFree(d_src);
    cudaFree(d_dst);
    return st;
}
