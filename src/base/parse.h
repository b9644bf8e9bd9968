/* Parsers of the values that options and model metadata share (the command line's syntax). */
#ifndef SI_PARSE_H
#define SI_PARSE_H

#include <stdbool.h>

/* A decimal integer in [lo, hi], nothing else in s. */
bool si_parse_int(const char *s, long lo, long hi, long *out);
/* "R,G,B": three floats separated by commas. */
bool si_parse_floats3(const char *s, float out[3]);
/* "N" (N x N) or "HxW", each in 1..16384. */
bool si_parse_hw(const char *s, int *h, int *w);

#endif
