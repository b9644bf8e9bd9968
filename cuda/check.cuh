/* One checking macro per CUDA library: a failed call records file, line, the call and the
 * library's own message as an si_status error, so the caller decides (the CLI turns a failure
 * in a multi-rank run into MPI_Abort through si_fatal's hook). */
#ifndef SI_CUDA_CHECK_CUH
#define SI_CUDA_CHECK_CUH

#include <cuda_runtime.h>

#include "base/common.h"

#define cudaCheck(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return si_error(SI_ERR_INTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,           \
                            cudaGetErrorString(e_));                                               \
    } while (0)

#endif
