// The probe of nvJPEG's hardware decoder, shared by the GPU's set-up thread (cuda_util.cu) and the
// decoder itself (cuda/jpeg.cu, behind src/decode/hwjpeg.h).
#ifndef SI_CUDA_JPEG_CUH
#define SI_CUDA_JPEG_CUH

#include <stddef.h>

// Whether this process can decode on the current device's hardware JPEG decoder; why not in why.
// Loads the library and creates a handle on the first call (kept for the first decoder's
// make_states, which would otherwise make its own); the answer is kept.
bool si_cuda_jpeg_available(char *why, size_t cap);

#endif
