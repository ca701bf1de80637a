/* exp for C kernels built by tercet's native build (on the include path of every NativeSource). */
#ifndef TERCET_EXP_H
#define TERCET_EXP_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x <= 0, to about one float32 rounding: 2^n times a polynomial on [-ln2/2, ln2/2],
 * written so that the compiler vectorizes it (libm's expf would be one call per score). */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    /* n = x / ln 2 rounded to the nearest integer, by the 1.5 * 2^23 trick (exact for |n| < 2^22):
     * unlike floorf, it vectorizes without -fno-trapping-math. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
