// The resize and center crop on the GPU (--resize-on gpu): decode threads pack the DCT-scaled,
// oriented images back to back in a slot's pinned buffer with an si_rs_item each; one kernel
// turns them into the (N, crop_h, crop_w, 3) uint8 crops the normalization kernel reads. Each
// thread is si_rs_pixel (io/resample.h), the formula the CPU resize runs, so the crops are the
// CPU's to the byte (tests/test_jpeg.c checks the formula on the host, test_gpu_resize the
// kernel). Built with -fmad=false: the weights' double arithmetic must not be contracted.
#include "cuda/check.cuh"
#include "cuda/cuda.h"
#include "cuda/resize.cuh"

// One thread per output pixel (3 channels); blockIdx.y is the image.
__global__ void resize_crop_kernel(const uint8_t *__restrict__ pool,
                                   const si_rs_item *__restrict__ items, int ch, int cw,
                                   uint8_t *__restrict__ out) {
    int img = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ch * cw) return;
    si_rs_item it = items[img];
    uint8_t *o = out + ((size_t)img * ch * cw + i) * 3;
    if (it.w == 0) {
        o[0] = o[1] = o[2] = 0;
        return;
    }
    int oy = i / cw, ox = i - oy * cw;
    si_rs_pixel(pool + it.off, &it, ox, oy, o);
}

cudaError_t si_k_resize_crop(cudaStream_t s, const uint8_t *pool, const si_rs_item *items, int n,
                             int ch, int cw, uint8_t *out) {
    if (n <= 0) return cudaSuccess;
    int threads = 256;
    dim3 grid((unsigned)((ch * cw + threads - 1) / threads), (unsigned)n);
    resize_crop_kernel<<<grid, threads, 0, s>>>(pool, items, ch, cw, out);
    return cudaGetLastError();
}

// Host pointers; allocates, copies in, runs, copies out and frees (for tests).
extern "C" si_status si_cuda_resize_crop(const uint8_t *pool, size_t pool_bytes,
                                         const si_rs_item *items, int n, int ch, int cw,
                                         uint8_t *out) {
    uint8_t *d_pool = nullptr, *d_out = nullptr;
    si_rs_item *d_items = nullptr;
    size_t out_bytes = (size_t)n * ch * cw * 3;
    cudaError_t e;
    do {
        if ((e = cudaMalloc(&d_pool, pool_bytes ? pool_bytes : 1)) != cudaSuccess) break;
        if ((e = cudaMalloc(&d_items, sizeof *items * (size_t)n)) != cudaSuccess) break;
        if ((e = cudaMalloc(&d_out, out_bytes)) != cudaSuccess) break;
        if ((e = cudaMemcpy(d_pool, pool, pool_bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
            break;
        if ((e = cudaMemcpy(d_items, items, sizeof *items * (size_t)n, cudaMemcpyHostToDevice)) !=
            cudaSuccess)
            break;
        if ((e = si_k_resize_crop(0, d_pool, d_items, n, ch, cw, d_out)) != cudaSuccess) break;
        e = cudaMemcpy(out, d_out, out_bytes, cudaMemcpyDeviceToHost);
    } while (0);
    cudaFree(d_pool);
    cudaFree(d_items);
    cudaFree(d_out);
    if (e != cudaSuccess) return cudaFail(e, "si_cuda_resize_crop: ");
    return SI_OK;
}
