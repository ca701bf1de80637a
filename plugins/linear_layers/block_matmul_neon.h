/* The block kernel's aarch64 code (NEON, and the dot-product and int8-matrix extensions where the
 * build has them): included by block_matmul.c after its shared definitions (Rows, COLUMNS, BLOCK,
 * Q4 / Q8, codes_bytes, unit_bytes), in place of its portable quantize_block_bf16, quantize_block_f32,
 * tile_portable and store_bf16.
 *
 * It computes the portable path's bits: the same int8 inputs (xq, sx, sx Σ xq, 128 Σ xq), the same
 * exact integer sums Σ q xq of a unit's codes (see code_at in block_matmul.c), and per output column
 * the same float steps in the same order, block after block:
 *
 *     acc = fma((float) dot, d · sx, acc), then for Q4  acc = fma(m, sx Σ xq, acc)
 *
 * done lane-wise on 4 columns at a time (a 4-lane vector a quarter of a unit's 16 columns: a "quad").
 * A unit's register g (bytes g · 64 …) holds, per column, the 4 codes of inputs 4g..4g+3, so a
 * quad's 16 bytes of it are exactly what the integer sums take per 4 inputs:
 *
 * - dot product (__ARM_FEATURE_DOTPROD): SDOT of the quad's codes against 4 inputs of one row
 *   broadcast by lane; Q4's codes (0..15) and Q8's q = u ^ 0x80 (the stored u = q + 128) are signed
 *   bytes already, so Q8 needs no 128 Σ xq correction;
 * - int8 matrices (__ARM_FEATURE_MATMUL_INT8), from MMLA_ROWS rows: SMMLA multiplies 2 rows × 8 inputs
 *   by 2 columns × 8 inputs, twice SDOT's multiply-adds an instruction; a quad's codes of registers
 *   g and g + 1 are zipped once a block into that shape and each pair of rows' inputs once a block
 *   for both tiles; an odd last row takes the dot-product path;
 * - plain NEON: widening byte products (SMULL, SMLAL: two products of at most 128 · 127 fit 16 bits)
 *   added pairwise into 32-bit lanes (SADALP).
 */
#ifndef TERCET_BLOCK_MATMUL_NEON_H
#define TERCET_BLOCK_MATMUL_NEON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

/* Calls of this many rows or more take SMMLA's integer sums where the build has i8mm: below it the
 * zipping of a block's codes is paid for too few rows (a choice by instruction counts; not measured
 * on i8mm hardware). */
#define MMLA_ROWS 4
/* Rows whose zipped input pairs (NEON_BATCH · 32 bytes) are kept for both tiles of a block. */
#define NEON_BATCH 64

/* One block of 32 float32 inputs (their bits, 4 a vector), as the portable quantize_floats: the same max,
 * xq (the product rounded half to even, as lrintf; a product that is not a number or out of range, only
 * when 127 / max overflows or x is not finite, gives 0 as on x86), sx and sums. */
static inline __attribute__((always_inline)) void neon_quantize(const uint32x4_t bits[8], int8_t *out, float *scale,
                                                                float *sum, int32_t *offset) {
    float32x4_t x[8];
    uint32x4_t widest = vdupq_n_u32(0);
    const uint32x4_t infinity = vdupq_n_u32(0x7f800000u), magnitude_bits = vdupq_n_u32(0x7fffffffu);
    for (int i = 0; i < 8; i++) {
        x[i] = vreinterpretq_f32_u32(bits[i]);
        /* |x| ordered as integers; a NaN (above infinity's bits) never wins, as in the portable loop. */
        const uint32x4_t magnitude = vandq_u32(bits[i], magnitude_bits);
        widest = vmaxq_u32(widest, vandq_u32(magnitude, vcleq_u32(magnitude, infinity)));
    }
    const uint32_t largest_bits = vmaxvq_u32(widest);
    float largest;
    memcpy(&largest, &largest_bits, sizeof largest);
    const float inverse = block_inverse(largest);
    const float32x4_t scaled_by = vdupq_n_f32(inverse), limit = vdupq_n_f32(128.0f);
    int32x4_t total = vdupq_n_s32(0);
    int16x4_t narrow[8];
    for (int i = 0; i < 8; i++) {
        const float32x4_t product = vmulq_f32(x[i], scaled_by);
        const int32x4_t q = vandq_s32(vcvtnq_s32_f32(product), vreinterpretq_s32_u32(vcaleq_f32(product, limit)));
        total = vaddq_s32(total, q);
        narrow[i] = vmovn_s32(q);
    }
    for (int i = 0; i < 2; i++)
        vst1q_s8(out + 16 * i, vcombine_s8(vmovn_s16(vcombine_s16(narrow[4 * i], narrow[4 * i + 1])),
                                           vmovn_s16(vcombine_s16(narrow[4 * i + 2], narrow[4 * i + 3]))));
    const int32_t codes = vaddvq_s32(total);
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}

/* A block of 32 bfloat16 inputs, widened exactly (a bfloat16 is a float32's top half). */
static void quantize_block_bf16(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    uint32x4_t bits[8];
    for (int i = 0; i < 4; i++) {
        const uint16x8_t halves = vld1q_u16(values + 8 * i);
        bits[2 * i] = vshll_n_u16(vget_low_u16(halves), 16);
        bits[2 * i + 1] = vshll_high_n_u16(halves, 16);
    }
    neon_quantize(bits, out, scale, sum, offset);
}

static void quantize_block_f32(const float *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    uint32x4_t bits[8];
    for (int i = 0; i < 8; i++) bits[i] = vreinterpretq_u32_f32(vld1q_f32(values + 4 * i));
    neon_quantize(bits, out, scale, sum, offset);
}

/* A quad's codes of one block as signed bytes: codes[g] holds columns 4 quad..4 quad + 3 × inputs
 * 4g..4g+3 (Q4's registers g and g + 4 split from their nibbles, Q8's u as q = u ^ 0x80). */
static inline __attribute__((always_inline)) void quad_codes(const uint8_t *unit, int kind, int quad,
                                                             int8x16_t codes[8]) {
    if (kind == Q8) {
        const uint8x16_t sign = vdupq_n_u8(0x80);
        for (int g = 0; g < 8; g++) codes[g] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(unit + g * 64 + quad * 16), sign));
        return;
    }
    const uint8x16_t nibble = vdupq_n_u8(0x0f);
    for (int g = 0; g < 4; g++) {
        const uint8x16_t both = vld1q_u8(unit + g * 64 + quad * 16);
        codes[g] = vreinterpretq_s8_u8(vandq_u8(both, nibble));
        codes[g + 4] = vreinterpretq_s8_u8(vshrq_n_u8(both, 4));
    }
}

/* Σ q xq of a quad's 4 columns against one row's 32 inputs (low: inputs 0..15, high: 16..31). */
static inline __attribute__((always_inline)) int32x4_t quad_dot(const int8x16_t codes[8], int8x16_t low,
                                                                int8x16_t high) {
#if defined(__ARM_FEATURE_DOTPROD)
    /* Two chains, added at the end (integers: exact in any order). */
    int32x4_t even = vdupq_n_s32(0), odd = vdupq_n_s32(0);
    even = vdotq_laneq_s32(even, codes[0], low, 0);
    odd = vdotq_laneq_s32(odd, codes[1], low, 1);
    even = vdotq_laneq_s32(even, codes[2], low, 2);
    odd = vdotq_laneq_s32(odd, codes[3], low, 3);
    even = vdotq_laneq_s32(even, codes[4], high, 0);
    odd = vdotq_laneq_s32(odd, codes[5], high, 1);
    even = vdotq_laneq_s32(even, codes[6], high, 2);
    odd = vdotq_laneq_s32(odd, codes[7], high, 3);
    return vaddq_s32(even, odd);
#else
    /* Lanes of `left`: columns c, c + 1 × input pairs; of `right`: c + 2, c + 3 (SADALP's pairs). */
    const int32x4_t low_words = vreinterpretq_s32_s8(low), high_words = vreinterpretq_s32_s8(high);
    int8x16_t inputs[8];
    inputs[0] = vreinterpretq_s8_s32(vdupq_laneq_s32(low_words, 0));
    inputs[1] = vreinterpretq_s8_s32(vdupq_laneq_s32(low_words, 1));
    inputs[2] = vreinterpretq_s8_s32(vdupq_laneq_s32(low_words, 2));
    inputs[3] = vreinterpretq_s8_s32(vdupq_laneq_s32(low_words, 3));
    inputs[4] = vreinterpretq_s8_s32(vdupq_laneq_s32(high_words, 0));
    inputs[5] = vreinterpretq_s8_s32(vdupq_laneq_s32(high_words, 1));
    inputs[6] = vreinterpretq_s8_s32(vdupq_laneq_s32(high_words, 2));
    inputs[7] = vreinterpretq_s8_s32(vdupq_laneq_s32(high_words, 3));
    int32x4_t left = vdupq_n_s32(0), right = vdupq_n_s32(0);
    for (int g = 0; g < 8; g += 2) {
        int16x8_t products = vmull_s8(vget_low_s8(codes[g]), vget_low_s8(inputs[g]));
        products = vmlal_s8(products, vget_low_s8(codes[g + 1]), vget_low_s8(inputs[g + 1]));
        left = vpadalq_s16(left, products);
        products = vmull_high_s8(codes[g], inputs[g]);
        products = vmlal_high_s8(products, codes[g + 1], inputs[g + 1]);
        right = vpadalq_s16(right, products);
    }
    return vpaddq_s32(left, right);
#endif
}

/* A quad's d (or m) as float32: the unit's float16 of columns 4 quad..4 quad + 3 from `halves`. */
static inline __attribute__((always_inline)) float32x4_t quad_halves(const uint16_t *halves, int quad) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 4 * quad)));
}

/* One row's integer sums of a block into its quad of float32 sums: tile_portable's float steps. */
static inline __attribute__((always_inline)) void finish_quad(int32x4_t dot, float32x4_t d, float32x4_t m, int kind,
                                                              const Rows *rows, int64_t at, float *acc) {
    float32x4_t out = vfmaq_f32(vld1q_f32(acc), vcvtq_f32_s32(dot), vmulq_n_f32(d, rows->scales[at]));
    if (kind == Q4) out = vfmaq_f32(out, m, vdupq_n_f32(rows->sums[at]));
    vst1q_f32(acc, out);
}

/* `n` rows (1..4, a constant once inlined) from row r of block b against a quad's codes. */
static inline __attribute__((always_inline)) void rows_of_quad(const Rows *rows, int64_t count, int64_t b, int64_t r,
                                                               int n, const int8x16_t codes[8], float32x4_t d,
                                                               float32x4_t m, int kind, float *acc) {
    int32x4_t dots[4];
    for (int i = 0; i < n; i++) {
        const int8_t *xq = rows->xq + (b * count + r + i) * BLOCK;
        dots[i] = quad_dot(codes, vld1q_s8(xq), vld1q_s8(xq + 16));
    }
    for (int i = 0; i < n; i++) finish_quad(dots[i], d, m, kind, rows, b * count + r + i, acc + (r + i) * COLUMNS);
}

/* Block b of one tile (its unit `unit`) against all `count` rows, 4 rows at a time. */
static inline __attribute__((always_inline)) void unit_rows(const Rows *rows, int64_t count, int64_t b,
                                                            const uint8_t *unit, int kind, float *acc) {
    const uint16_t *halves = (const uint16_t *)(unit + codes_bytes(kind));
    for (int quad = 0; quad < COLUMNS / 4; quad++) {
        int8x16_t codes[8];
        quad_codes(unit, kind, quad, codes);
        const float32x4_t d = quad_halves(halves, quad);
        const float32x4_t m = kind == Q4 ? quad_halves(halves + COLUMNS, quad) : vdupq_n_f32(0.0f);
        float *quad_acc = acc + 4 * quad;
        int64_t r = 0;
        for (; r + 4 <= count; r += 4) rows_of_quad(rows, count, b, r, 4, codes, d, m, kind, quad_acc);
        switch (count - r) {
            case 3: rows_of_quad(rows, count, b, r, 3, codes, d, m, kind, quad_acc); break;
            case 2: rows_of_quad(rows, count, b, r, 2, codes, d, m, kind, quad_acc); break;
            case 1: rows_of_quad(rows, count, b, r, 1, codes, d, m, kind, quad_acc); break;
            default: break;
        }
    }
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
/* Block b of both tiles against rows r0..r0 + n - 1 through SMMLA. `pairs` holds each pair of rows'
 * inputs as SMMLA's left operand: [pair][h] = 8 inputs 8h..8h+7 of the first row, then the second's. */
static inline __attribute__((always_inline)) void mmla_batch(const Rows *rows, int64_t count, int64_t b, int64_t r0,
                                                             int64_t n, const uint8_t *units[2], float *accs[2],
                                                             int sides, int kind, int8x16_t pairs[][4]) {
    const int64_t pair_count = n / 2;
    for (int64_t p = 0; p < pair_count; p++) {
        const int8_t *xq = rows->xq + (b * count + r0 + 2 * p) * BLOCK;
        const int64x2_t first_low = vreinterpretq_s64_s8(vld1q_s8(xq));
        const int64x2_t first_high = vreinterpretq_s64_s8(vld1q_s8(xq + 16));
        const int64x2_t second_low = vreinterpretq_s64_s8(vld1q_s8(xq + BLOCK));
        const int64x2_t second_high = vreinterpretq_s64_s8(vld1q_s8(xq + BLOCK + 16));
        pairs[p][0] = vreinterpretq_s8_s64(vzip1q_s64(first_low, second_low));
        pairs[p][1] = vreinterpretq_s8_s64(vzip2q_s64(first_low, second_low));
        pairs[p][2] = vreinterpretq_s8_s64(vzip1q_s64(first_high, second_high));
        pairs[p][3] = vreinterpretq_s8_s64(vzip2q_s64(first_high, second_high));
    }
    for (int side = 0; side < sides; side++) {
        const uint8_t *unit = units[side];
        const uint16_t *halves = (const uint16_t *)(unit + codes_bytes(kind));
        for (int quad = 0; quad < COLUMNS / 4; quad++) {
            int8x16_t codes[8], near[4], far[4];
            quad_codes(unit, kind, quad, codes);
            /* Columns c, c + 1 (near) and c + 2, c + 3 (far) × inputs 8h..8h+7, from registers 2h, 2h + 1. */
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                const int32x4_t a = vreinterpretq_s32_s8(codes[2 * h]), z = vreinterpretq_s32_s8(codes[2 * h + 1]);
                near[h] = vreinterpretq_s8_s32(vzip1q_s32(a, z));
                far[h] = vreinterpretq_s8_s32(vzip2q_s32(a, z));
            }
            const float32x4_t d = quad_halves(halves, quad);
            const float32x4_t m = kind == Q4 ? quad_halves(halves + COLUMNS, quad) : vdupq_n_f32(0.0f);
            float *acc = accs[side] + 4 * quad;
#pragma GCC unroll 2
            for (int64_t p = 0; p < pair_count; p++) {
                /* [r·c, r·c+1, r'·c, r'·c+1] and the same for c + 2, c + 3. */
                int32x4_t near_dots = vdupq_n_s32(0), far_dots = vdupq_n_s32(0);
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++) {
                    near_dots = vmmlaq_s32(near_dots, pairs[p][h], near[h]);
                    far_dots = vmmlaq_s32(far_dots, pairs[p][h], far[h]);
                }
                const int64x2_t near_words = vreinterpretq_s64_s32(near_dots);
                const int64x2_t far_words = vreinterpretq_s64_s32(far_dots);
                const int64_t r = r0 + 2 * p;
                finish_quad(vreinterpretq_s32_s64(vzip1q_s64(near_words, far_words)), d, m, kind, rows, b * count + r,
                            acc + r * COLUMNS);
                finish_quad(vreinterpretq_s32_s64(vzip2q_s64(near_words, far_words)), d, m, kind, rows,
                            b * count + r + 1, acc + (r + 1) * COLUMNS);
            }
            if (n % 2) rows_of_quad(rows, count, b, r0 + n - 1, 1, codes, d, m, kind, acc);
        }
    }
}
#endif

static inline __attribute__((always_inline)) void tiles_of_kind(const Rows *rows, int64_t count, const uint8_t *left,
                                                             const uint8_t *right, int64_t blocks, int kind,
                                                             float *acc_left, float *acc_right) {
    const int64_t bytes = unit_bytes(kind);
    const int sides = right != left ? 2 : 1;
#if defined(__ARM_FEATURE_MATMUL_INT8)
    if (count >= MMLA_ROWS) {
        int8x16_t pairs[NEON_BATCH / 2][4];
        float *accs[2] = {acc_left, acc_right};
        for (int64_t b = 0; b < blocks; b++) {
            const uint8_t *units[2] = {left + b * bytes, right + b * bytes};
            for (int64_t r0 = 0; r0 < count; r0 += NEON_BATCH) {
                const int64_t n = count - r0 < NEON_BATCH ? count - r0 : NEON_BATCH;
                mmla_batch(rows, count, b, r0, n, units, accs, sides, kind, pairs);
            }
        }
        return;
    }
#endif
    for (int64_t b = 0; b < blocks; b++) {
        unit_rows(rows, count, b, left + b * bytes, kind, acc_left);
        if (sides == 2) unit_rows(rows, count, b, right + b * bytes, kind, acc_right);
    }
}

/* The first `width` (1..16) of 16 float32 sums as bfloat16: float_to_bf16's integer steps, 4 lanes
 * at a time (round to nearest even; a NaN keeps its top bits with the quiet bit set). */
static inline void store_bf16(const float *sums, int64_t width, uint16_t *out) {
    uint16_t halves[COLUMNS];
    const uint32x4_t magnitude_bits = vdupq_n_u32(0x7fffffffu), infinity = vdupq_n_u32(0x7f800000u),
                     bias = vdupq_n_u32(0x7fffu), one = vdupq_n_u32(1u);
    for (int quad = 0; quad < COLUMNS / 4; quad++) {
        const uint32x4_t bits = vreinterpretq_u32_f32(vld1q_f32(sums + 4 * quad));
        const uint16x4_t nan = vmovn_u32(vcgtq_u32(vandq_u32(bits, magnitude_bits), infinity));
        const uint32x4_t rounded = vaddq_u32(bits, vaddq_u32(bias, vandq_u32(vshrq_n_u32(bits, 16), one)));
        const uint16x4_t quiet = vorr_u16(vshrn_n_u32(bits, 16), vdup_n_u16(0x40));
        vst1_u16((width == COLUMNS ? out : halves) + 4 * quad, vbsl_u16(nan, quiet, vshrn_n_u32(rounded, 16)));
    }
    if (width < COLUMNS) memcpy(out, halves, sizeof(uint16_t) * (size_t)width);
}

#endif
