/* Decoding of a YOLOv8-style detection head (ultralytics export, opset 17) on the CPU: score
 * threshold, xywh -> xyxy, greedy class-wise NMS, top max_detections. The head's output per image
 * is (4 + C, A): rows 0..3 are box centre x, y, width, height in input pixels, rows 4.. are the C
 * class scores, already through a sigmoid. */
#ifndef SI_POST_DETECT_H
#define SI_POST_DETECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float x1, y1, x2, y2, score;
    int32_t cls;
} si_detection;

typedef struct {
    float score_threshold; /* an anchor is a candidate if its best class score >= this */
    float iou_threshold;   /* a box is suppressed if its IoU with a kept box is > this */
    int max_detections;    /* at most this many detections per image; 0 gives none */
    bool class_agnostic;   /* true: boxes of different classes suppress each other too */
} si_detect_params;

/* The ultralytics defaults: 0.25, 0.45, 300, class-wise. */
si_detect_params si_detect_params_default(void);

/* The parameters as the result's post_params and the resume key spell them
 * ("detect score_threshold=0.25 ..."); a resumed run compares this string, so it never changes.
 * Writes at most cap bytes into buf, NUL-terminated. */
void si_detect_params_format(const si_detect_params *p, char *buf, size_t cap);

/* Bytes of scratch si_detect_decode needs for `anchors` anchors (0 if anchors < 0). */
size_t si_detect_scratch_size(int64_t anchors);

/* Decodes one image's prediction `pred` (4 + classes, anchors), row-major.
 * - An anchor's class is its highest score's (ties: lower class index); the anchor is a
 *   candidate if that score >= score_threshold (NaN scores never are).
 * - Box: x1 = cx - w/2, y1 = cy - h/2, x2 = cx + w/2, y2 = cy + h/2, in float.
 * - Greedy NMS in order of score descending, equal scores by lower anchor index; a candidate is
 *   suppressed by an earlier kept box of the same class (any class if class_agnostic) when
 *   inter / (area_a + area_b - inter) > iou_threshold, areas (x2-x1)*(y2-y1) with no +1. IoU
 *   exactly equal to the threshold keeps both, as torchvision.ops.nms does.
 * - Output in that same order, at most min(max_detections, cap) detections.
 * Borrows pred, p and scratch (si_detect_scratch_size(anchors) bytes, aligned as malloc's);
 * writes out[0 .. return value). Allocates nothing.
 * Returns the number of detections written, or -1 with a message in si_error_msg() on a bad
 * argument (NULL pointers, classes < 1, anchors < 0, cap < 0, NaN or negative limits). */
int si_detect_decode(const float *pred, int64_t classes, int64_t anchors, const si_detect_params *p,
                     void *scratch, si_detection *out, int cap);

#endif
