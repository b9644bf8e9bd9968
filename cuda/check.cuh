/* One checking macro per CUDA library: a failed call records file, line, the call and the
 * library's own message as an si_status error, so the caller decides (the CLI turns a failure
 * in a multi-rank run into MPI_Abort through si_fatal's hook).
 *
 * cudaCheck, cudnnCheck, ltCheck (cuBLASLt): return the error from the calling function.
 * cudaFail, cudnnFail: the same record as a value, for a failure handled after clean-up.
 * The cuDNN and cuBLASLt forms name those libraries' types and functions only where they expand,
 * so a file using them includes <cudnn.h> or <cublasLt.h> itself and the others need neither. */
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

#define cudnnCheck(call)                                                                           \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return si_error(SI_ERR_INTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,           \
                            cudnnGetErrorString(s_));                                              \
    } while (0)

#define ltCheck(call)                                                                              \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return si_error(SI_ERR_INTERNAL, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__,    \
                            #call, (int)s_);                                                       \
    } while (0)

/* The library's message after a prefix (a format and its arguments, "what: "), recorded as an
 * SI_ERR_INTERNAL si_status and returned as a value */
#define cudaFail(err, ...)                                                                         \
    si_error_prefix(si_error(SI_ERR_INTERNAL, "%s", cudaGetErrorString(err)), __VA_ARGS__)
#define cudnnFail(err, ...)                                                                        \
    si_error_prefix(si_error(SI_ERR_INTERNAL, "%s", cudnnGetErrorString(err)), __VA_ARGS__)

#endif
