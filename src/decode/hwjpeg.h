/* A hardware JPEG decoder for the GPU path (--decode gpu): nvJPEG's HARDWARE backend on the
 * NVJPG engines of A100, H100 and H200 (cuda/jpeg.cu). The pipeline's decode stage asks it
 * directly, a batch at a time: it fills a slot's job list (the bitstreams it copied into the
 * slot's page-locked packed buffer, where each image goes in the slot's device-only area), then
 * si_hwjpeg_decode queues the decode on the slot's stream ahead of the engine's resize. The
 * engine only lends the buffers and the stream (si_slot_pack); it never sees a JPEG. A build
 * without CUDA has the same calls, and si_hwjpeg_create says there is no decoder. */
#ifndef SI_DECODE_HWJPEG_H
#define SI_DECODE_HWJPEG_H

#include "engine/engine.h"
#include "io/yuv.h"

/* The device bytes per image of a slot's decode area (images decode there at full size, as RGB
 * and chroma planes, or with gpu-exact all three planes and RGB: 3 MiB holds a 1024x682 4:2:0
 * photo's; a batch of larger ones spills to the CPU decoder): the engine's
 * opts.device_area_per_image. */
#define SI_GPU_DECODE_PER_IMAGE ((size_t)3 << 20)

/* The host threads making each batch's decoder calls when --decode-parts is not given (on 4
 * H100s of one node one thread's calls were the limit: docs/performance.md). */
#define SI_DECODE_PARTS_DEFAULT 2

/* The images of one batch for the hardware decoder. Image k's bitstream is bytes
 * [src[k], src[k] + len[k]) of the slot's packed buffer (host side). It decodes to RGB
 * (h[k], w[k], 3) at byte dst[k] of the device side, where the resize reads it (its si_rs_item's
 * off is dst[k]). Its chroma is subsampled hs x vs with sub[k] = hs | vs << 8 (0 for gray). The
 * hardware's RGB replicates chroma where libjpeg-turbo interpolates: where si_yuv_replicated,
 * the chroma planes are recovered from it at dst[k] + si_jpeg_rgb_bytes(w, h) and the RGB
 * converted again as libjpeg-turbo does (io/yuv.h). An exact decoder decodes to the component
 * planes there instead, converted from there to libjpeg-turbo's RGB at dst[k].
 * si_jpeg_area_bytes in all, inside the slot's device-only area. */
typedef struct {
    int n;
    uint64_t *src, *len, *dst; /* [max_batch] each */
    int32_t *w, *h, *sub;
} si_jpeg_jobs;

/* An image's RGB in the decode area, rounded up so that its planes after it start aligned. */
static inline size_t si_jpeg_rgb_bytes(int w, int h) {
    return ((size_t)w * (size_t)h * 3 + 255) & ~(size_t)255;
}
/* All an image takes of the decode area: its RGB, then its planes (exact) or chroma planes. */
static inline size_t si_jpeg_area_bytes(int w, int h, int hs, int vs, bool exact) {
    si_yuv_shape s = {w, h, hs, vs};
    if (exact) return si_jpeg_rgb_bytes(w, h) + si_yuv_bytes(&s);
    return si_jpeg_rgb_bytes(w, h) + (si_yuv_replicated(&s) ? si_yuv_chroma_bytes(&s) : 0);
}

typedef struct si_hwjpeg si_hwjpeg;

/* A decoder on the current device for `slots` slots of up to max_batch images each, to the
 * hardware's RGB with its chroma recovered or (exact) to planes converted as libjpeg-turbo does,
 * making each batch's calls from `parts` host threads (the caller's and parts - 1 of its own;
 * clamped to [1, max_batch]). Its handle and a decode state per part, which the slots share, are
 * made on a thread of its own from here on (0.1-0.35 s a state on an H200, one process at a time
 * across the node), so that the engine's set-up and the run's first batches go on meanwhile. NULL
 * with the message set when its buffers cannot be allocated or the build has no CUDA. Free with
 * si_hwjpeg_free (accepts NULL). */
si_hwjpeg *si_hwjpeg_create(int slots, int max_batch, bool exact, int parts);
void si_hwjpeg_free(si_hwjpeg *j);
bool si_hwjpeg_exact(const si_hwjpeg *j);
int si_hwjpeg_parts(const si_hwjpeg *j); /* 0 for NULL */

/* Waits until the decoder's states are made: SI_ERR_UNSUPPORTED with the reason where the
 * hardware decoder could not be set up after all. */
si_status si_hwjpeg_ready(si_hwjpeg *j);
/* Does not wait: 1 when the decoder's states are made, 0 not yet, -1 never (si_hwjpeg_ready
 * says why). Until then the caller decodes every image on the CPU. */
int si_hwjpeg_usable(si_hwjpeg *j);

/* Slot k's job list, emptied. */
si_jpeg_jobs *si_hwjpeg_jobs(si_hwjpeg *j, int k);

/* Queues slot k's jobs on p's stream: bitstreams from p->host, pixels to p->device (the jobs'
 * dst inside its device-only area); waits for the decoder's states first if they are not made
 * yet. The slot's previous batch must be collected. On failure (a stream the hardware rejects)
 * nothing more is queued, the failed part's state is made again and the message says which
 * status nvJPEG gave: the caller decodes those images on the CPU instead. */
si_status si_hwjpeg_decode(si_hwjpeg *j, int k, const si_slot_pack *p);

#endif
