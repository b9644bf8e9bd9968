/* SI_HD: marks an inline function that compiles for the host and, under nvcc, for the device
 * too, so the CPU and the GPU share one formula (src/engine/kernel_math.h, io/resample.h). */
#ifndef SI_HD_H
#define SI_HD_H

#if defined(__CUDACC__)
#define SI_HD __host__ __device__
#else
#define SI_HD
#endif

#endif
