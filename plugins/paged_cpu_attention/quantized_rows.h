/*
 * Rows of a quantized KV cache: one token's K (or V) of one KV head, head_dim int8 or e4m3 values, and
 * a float16 scale in a buffer beside the cache ([slots, num_kv_heads]). A row stands for its values
 * times its scale. The scale is the row's largest magnitude over the format's largest value (127, 448),
 * so a row's stored bits depend on that row alone: a token's K/V is stored the same whatever its
 * batch-mates. The Python side's reference is tercet.model.kv_cache.quantize_rows: the same bits
 * (tests/plugins/test_paged_cpu_quantized_cache.py).
 *
 * A row is rotated before it is quantized: H x, with H the Walsh-Hadamard matrix of the largest power of
 * two dividing head_dim (block-diagonal over the row's blocks of that size). Keys have a few channels far
 * larger than the rest, and one scale a row would round the rest coarsely; rotated, every channel is a
 * sum of all of them and none stands out (the default model in float32, teacher-forced over 3,072
 * positions of this project's docs, against a bfloat16 cache: int8's greedy tokens agreed at 0.984
 * without it and 0.990 with it, the mean KL divergence 9.1e-4 and 2.7e-4). H H = n I, so the kernel rotates each query
 * the same way (over n) and a key's score is unchanged, and un-rotates each output (H o / n), the
 * weighted sum of rotated values. n is a power of two: dividing by it is exact.
 *
 * Widened, an e4m3 value is taken as its value / 256 (what its bits give as a float16's, shifted: see
 * vec16's load16_e4m3), and its row's factor as scale × 256, which undoes the 256 exactly. The vector
 * path multiplies a key's score (its products with the stored values, summed) and a value's softmax
 * weight by the row's factor, rather than each stored value: one multiply a key instead of one a value.
 */
#ifndef TERCET_QUANTIZED_ROWS_H
#define TERCET_QUANTIZED_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cache_dtypes.h"

static inline float half_bits_to_float(uint16_t bits) {
    _Float16 half;
    memcpy(&half, &bits, sizeof half);
    return (float)half;
}

/* Round to nearest, ties to even, as torch's conversion does. */
static inline uint16_t float_to_half_bits(float value) {
    _Float16 half = (_Float16)value;
    uint16_t bits;
    memcpy(&bits, &half, sizeof bits);
    return bits;
}

/* What a stored row's widened values are multiplied by: its scale (int8), or scale × 256 (e4m3). */
static inline float row_factor(const uint16_t *scales, int dtype, int64_t row) {
    const float scale = half_bits_to_float(scales[row]);
    return dtype == DTYPE_FP8_E4M3 ? scale * 256.0f : scale;
}

/* An e4m3 value (bias 7, no infinities; 0x7f and 0xff are NaN) / 256, exactly. */
static inline float e4m3_over_256(uint8_t bits) {
    const int exponent = (bits >> 3) & 0xf, mantissa = bits & 7;
    const float magnitude = exponent == 0 ? ldexpf((float)mantissa, -17) : ldexpf((float)(8 + mantissa), exponent - 18);
    if ((bits & 0x7f) == 0x7f) return NAN;
    return bits & 0x80 ? -magnitude : magnitude;
}

/* `value` (|value| <= 448) as e4m3, rounded to nearest, ties to even. */
static inline uint8_t float_to_e4m3(float value) {
    const uint8_t sign = signbit(value) ? 0x80 : 0;
    const float magnitude = fabsf(value);
    if (!(magnitude >= ldexpf(1.0f, -6))) {
        /* Subnormal (or zero): steps of 2^-9, up to 8 steps (which is 2^-6, the smallest normal). */
        return sign | (uint8_t)nearbyintf(ldexpf(magnitude, 9));
    }
    int exponent;
    frexpf(magnitude, &exponent); /* magnitude = m × 2^exponent, m in [0.5, 1) */
    const float steps = nearbyintf(ldexpf(magnitude, 4 - exponent)); /* 8..16 steps of 2^(exponent - 4) */
    int biased = exponent - 1 + 7, mantissa = (int)steps - 8;
    if (mantissa == 8) {
        biased += 1;
        mantissa = 0;
    }
    return sign | (uint8_t)(biased << 3 | mantissa);
}

/* The size of the rotation's blocks: the largest power of two dividing head_dim. */
static inline int rotation_block(int head_dim) { return head_dim & -head_dim; }

/* x ← H x: the unnormalized Walsh-Hadamard transform of each block, its butterflies in a fixed order
 * (pairs `half` apart, half = 1, 2, 4, ...; kv_cache.rotate_rows does the same additions). */
static inline void rotate_blocks(float *x, int head_dim) {
    const int block = rotation_block(head_dim);
    for (int half = 1; half < block; half *= 2)
        for (int i = 0; i < head_dim; i += 2 * half)
            for (int j = i; j < i + half; j++) {
                const float a = x[j], b = x[j + half];
                x[j] = a + b;
                x[j + half] = a - b;
            }
}

/* x ← H x / n: a query into the rotated keys' basis, or an output back from the rotated values'. */
static inline void rotate_blocks_over_n(float *x, int head_dim) {
    const float over_n = 1.0f / (float)rotation_block(head_dim);
    rotate_blocks(x, head_dim);
    for (int d = 0; d < head_dim; d++) x[d] *= over_n;
}

/* A float32 row stored quantized at `stored` (head_dim values: the row rotated), its scale at `scale`. */
static inline void quantize_row(const float *unrotated, int head_dim, int dtype, void *stored, uint16_t *scale) {
    const float largest = dtype == DTYPE_INT8 ? 127.0f : 448.0f;
    float values[head_dim];
    memcpy(values, unrotated, sizeof(float) * (size_t)head_dim);
    rotate_blocks(values, head_dim);
    float absmax = 0.0f;
    for (int d = 0; d < head_dim; d++) absmax = fabsf(values[d]) > absmax ? fabsf(values[d]) : absmax;
    const float wanted = absmax / largest;
    *scale = float_to_half_bits(wanted < 65504.0f ? wanted : 65504.0f);
    const float widened = half_bits_to_float(*scale), inverse = widened > 0.0f ? 1.0f / widened : 0.0f;
    for (int d = 0; d < head_dim; d++) {
        float scaled = values[d] * inverse;
        scaled = scaled > largest ? largest : scaled < -largest ? -largest : scaled;
        if (dtype == DTYPE_INT8)
            ((int8_t *)stored)[d] = (int8_t)nearbyintf(scaled);
        else
            ((uint8_t *)stored)[d] = float_to_e4m3(scaled);
    }
}

/* A stored row's `width` values from element `offset` (of its cache), times `factor` (row_factor's). */
static inline void dequantize_row(const void *base, int dtype, int64_t offset, int width, float factor, float *out) {
    if (dtype == DTYPE_INT8) {
        const int8_t *row = (const int8_t *)base + offset;
        for (int d = 0; d < width; d++) out[d] = (float)row[d] * factor;
    } else {
        const uint8_t *row = (const uint8_t *)base + offset;
        for (int d = 0; d < width; d++) out[d] = e4m3_over_256(row[d]) * factor;
    }
}

#endif
