/* Parsers of the values that options and model metadata share (the command line's syntax). */
#ifndef SI_PARSE_H
#define SI_PARSE_H

#include <stdbool.h>

/* A decimal integer in [lo, hi], nothing else in s. */
bool si_parse_int(const char *s, long lo, long hi, long *out);
/* "R,G,B": three floats separated by commas, each finite and in [lo, hi] (NaN and infinities
 * never pass); out is written only when all three do. */
bool si_parse_floats3(const char *s, float lo, float hi, float out[3]);
/* "N" (N x N) or "HxW", each in 1..16384. */
bool si_parse_hw(const char *s, int *h, int *w);

/* The normalisation's bounds, for --mean and --std and the model's 'mean' and 'std' metadata,
 * in [0, 1] pixel units. A std of 0 or below is no normalisation at all; within these bounds
 * (x - mean) / std stays finite in float for every pixel. 1/255 (pixels fed as 0..255) is a
 * std models use; 1e-6 is far below any real one. */
#define SI_NORM_MEAN_MAX 1e6f
#define SI_NORM_STD_MIN  1e-6f
#define SI_NORM_STD_MAX  1e6f
/* What a mean or std must be, for messages ("--std '0': expected ..."). */
#define SI_NORM_MEAN_EXPECTED "three numbers R,G,B, each in -1e6..1e6"
#define SI_NORM_STD_EXPECTED  "three numbers R,G,B, each in 1e-6..1e6 (a std is > 0)"

#endif
