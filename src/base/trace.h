/* NVTX ranges, so Nsight Systems shows the stages of each thread (read, decode, upload, compute,
 * download, post) side by side; nothing without CUDA. nvtx3 is header-only: when no profiler is
 * attached a push costs a branch. */
#ifndef SI_TRACE_H
#define SI_TRACE_H

#ifdef SI_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#define si_trace_push(name) nvtxRangePushA(name)
#define si_trace_pop()      nvtxRangePop()
#else
#define si_trace_push(name) ((void)0)
#define si_trace_pop()      ((void)0)
#endif

#endif
