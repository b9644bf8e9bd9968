// The GPU's hardware JPEG decoder for --decode gpu: nvJPEG's HARDWARE backend (the NVJPG engines
// of A100, H100 and H200), loaded at run time from libnvjpeg.so.13 so that a build with its
// header still runs where the library or the engines are missing (the CPU decodes then). A
// batch's images are split into `parts` contiguous parts whose calls are made at once from as
// many host threads (the calls' host work, not the engines, limits one thread), each part with
// its decode state and stream per slot, so that a slot's decode never shares buffers with another
// batch still in flight; a slot's states are reused only after its previous batch was collected.
#ifndef SI_CUDA_JPEG_CUH
#define SI_CUDA_JPEG_CUH

#include <cuda_runtime.h>

extern "C" {
#include "engine/engine.h"
}

typedef struct si_cuda_jpeg si_cuda_jpeg;

// Whether this process can decode on the current device's hardware JPEG decoder; why not in why.
// Loads the library and creates a handle on the first call (kept for the first decoder's
// make_states, which would otherwise make its own); the answer is kept.
bool si_cuda_jpeg_available(char *why, size_t cap);

// A decoder for `slots` slots of up to max_batch images each, to the hardware's RGB with its
// chroma recovered or (exact) to planes converted as libjpeg-turbo does (si_jpeg_jobs), making
// each batch's calls from `parts` host threads (the caller's and parts - 1 of its own; clamped
// to [1, max_batch]); NULL with the message set when its buffers cannot be allocated. Free with
// si_cuda_jpeg_free (accepts NULL).
si_cuda_jpeg *si_cuda_jpeg_create(int slots, int max_batch, bool exact, int parts);
void si_cuda_jpeg_free(si_cuda_jpeg *j);
// The parts a batch is split into (0 for NULL).
int si_cuda_jpeg_parts(const si_cuda_jpeg *j);

// The decoder's handle (the GPU's set-up thread may still be making it: its probe's, see
// si_cuda_prewarm_start) and its states are made on a thread of their own from
// si_cuda_jpeg_create on, so that the engine's set-up and the run's first batches (decoded by the
// CPU) go on meanwhile. si_cuda_jpeg_ready waits for all of them: SI_ERR_UNSUPPORTED with
// si_cuda_jpeg_available's reason where there is no hardware decoder after all.
// si_cuda_jpeg_usable does not wait: 1 when slot k's state is made, 0 not yet, -1 never (then
// si_cuda_jpeg_ready says why).
si_status si_cuda_jpeg_ready(si_cuda_jpeg *j);
int si_cuda_jpeg_usable(si_cuda_jpeg *j, int k);

// Slot k's job list, emptied.
si_jpeg_jobs *si_cuda_jpeg_jobs(si_cuda_jpeg *j, int k);

// Queues slot k's jobs on stream s: bitstreams from pack_h, pixels to pack_d (si_jpeg_jobs);
// waits for the slot's state first if it is not made yet. On failure nothing more is queued, the
// slot's state is reset and the message says which status nvJPEG gave.
si_status si_cuda_jpeg_decode(si_cuda_jpeg *j, int k, const uint8_t *pack_h, uint8_t *pack_d,
                              cudaStream_t s);

#endif
