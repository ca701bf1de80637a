/* bfloat16 <-> float for C kernels built by tercet's native build (on the include path of every
 * NativeSource): a bfloat16 is the top 16 bits of a float32. */
#ifndef TERCET_BFLOAT16_H
#define TERCET_BFLOAT16_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t bits) {
    uint32_t widened = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &widened, sizeof value);
    return value;
}

/* Round to nearest, ties to even, as torch's conversion does; a NaN stays a NaN. */
static inline uint16_t float_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

#endif
