/* The AVX2 level of block_matmul.c (x86-64-v3: AVX2, FMA, F16C), included there; it meets the
 * contract written above that include: the bits of the portable path, with 256-bit registers only.
 *
 * A unit's code register g (64 bytes: 16 columns × inputs 4g..4g+3, see code_at) is two 256-bit
 * halves here, columns 0-7 and 8-15, each 32-bit lane the four inputs of one column. A row's four
 * inputs 4g..4g+3 are broadcast to every lane and meet the codes in vpmaddubsw (unsigned byte ×
 * signed byte, adjacent pairs summed into int16, saturating), then vpmaddwd by ones sums the two
 * pairs of a lane into its column's int32:
 *
 * - Q4: codes 0..15 times xq (−128..127): a pair is at most 2 · 15 · 128 = 3840 in magnitude, and all
 *   8 registers' pairs of a lane together at most 30720, so the int16 sums of the 8 registers are
 *   added first (exact, no saturation) and widened once a block;
 * - Q8: the stored u = q + 128 (0..255) would overflow a pair (2 · 255 · 127), so the signed code
 *   q = u ^ 0x80 is split as |q| (unsigned, up to 128) and its sign moved onto xq (vpsignb):
 *   |q| · (±xq) pairs are at most 2 · 128 · 127 = 32512, exact; widened every register. That is
 *   Σ q xq directly (the AVX-512 path's Σ u xq − 128 Σ xq, the same integer), so no offset is
 *   subtracted. It needs |xq| ≤ 127 (vpsignb of −128 is −128), which the quantization gives wherever
 *   127 / max |x| is finite.
 *
 * The float steps a block are the contract's, lane-wise (fmadd of (float)dot by d · sx, then m by
 * sx Σ xq), on 8 columns at a time.
 *
 * Sixteen ymm registers cannot hold a unit's codes for a group of rows as the AVX-512 path does
 * (16 zmm for two tiles), so a unit is taken one code register (Q8) or one pair g, g + 4 (Q4) at a
 * time, both halves: its codes are reloaded from L1 (and Q4's split again) for every group of
 * AVX2_Q4_ROWS / AVX2_Q8_ROWS rows, whose sums of both halves stay in registers, and each broadcast
 * of a row's four inputs feeds both halves. Measured on Zen 4 (one thread, 576 → 1536 Q4_1 in L2),
 * over AVX-512's time: 4 rows a group 1.34x at one row, 1.47x at 8, 1.50x at 32; 2 or 3 rows and 5
 * or 6 were the same or slower. With the register loops unrolled GCC split all of a unit's codes
 * first and spilled them (1.7-1.9x).
 */
#ifndef TERCET_BLOCK_MATMUL_AVX2_H
#define TERCET_BLOCK_MATMUL_AVX2_H

#include <immintrin.h>

/* Where the CPU multiplies four unsigned bytes by four signed ones and adds them to an int32 lane in
 * one instruction, vpdpbusd, in 256-bit registers: AVX-VNNI's VEX form (the avxvnni level: Intel client
 * chips from Alder Lake, Zen 5), or AVX-512 VNNI's EVEX form with VL (the same operation; what the tests
 * build to run this code on an AVX-512 CPU without AVX-VNNI). It replaces vpmaddubsw + vpmaddwd: Q4's
 * pairs need no int16 step, and Q8's stored u = q + 128 meet xq unsigned, as on the AVX-512 level. The
 * int32 sums are the same integers either way, so the bits are too. */
#if defined(__AVXVNNI__)
#define AVX2_DOT_PRODUCTS 1
static inline __attribute__((always_inline)) __m256i avx2_dot_products(__m256i sums, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(sums, u, s);
}
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define AVX2_DOT_PRODUCTS 1
static inline __attribute__((always_inline)) __m256i avx2_dot_products(__m256i sums, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(sums, u, s);
}
#else
#define AVX2_DOT_PRODUCTS 0
#endif

/* Rows of x whose integer sums (both halves) live in registers at once, per kind. */
#ifndef AVX2_Q4_ROWS
#define AVX2_Q4_ROWS 4
#endif
#ifndef AVX2_Q8_ROWS
#define AVX2_Q8_ROWS 4
#endif
#define AVX2_ROW_GROUP (AVX2_Q4_ROWS > AVX2_Q8_ROWS ? AVX2_Q4_ROWS : AVX2_Q8_ROWS)
/* Units ahead whose bytes are prefetched into L2, as the AVX-512 path does (see PREFETCH_UNITS
 * there): at one row the kernel waits on memory. */
#define AVX2_PREFETCH_UNITS 64
#define AVX2_PREFETCH_HINT _MM_HINT_T1

/* Eight bfloat16 as float32 (exact: a bfloat16 is a float32's top half). */
static inline __m256 avx2_widen_bf16(const uint16_t *values) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)values)), 16));
}

/* One block of 32 float32 inputs (see the contract): 4 registers of 8. The largest magnitude is exact in
 * any order; 127 / largest is the same scalar division; vcvtps2dq rounds to nearest even, as lrintf; the
 * two packs saturate as one int32 → int8 saturation does; Σ xq is the int32 sum of the conversions. */
static inline __attribute__((always_inline)) void avx2_quantize(const __m256 x[4], int8_t *out, float *scale,
                                                                float *sum, int32_t *offset) {
    const __m256 magnitude_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 most = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(x[0], magnitude_mask), _mm256_and_ps(x[1], magnitude_mask)),
                                _mm256_max_ps(_mm256_and_ps(x[2], magnitude_mask), _mm256_and_ps(x[3], magnitude_mask)));
    __m128 four = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
    four = _mm_max_ps(four, _mm_movehl_ps(four, four));
    four = _mm_max_ss(four, _mm_movehdup_ps(four));
    float largest = _mm_cvtss_f32(four);
    const __m256 inverse = _mm256_set1_ps(block_inverse(largest));
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(x[i], inverse));
    /* Per 128-bit lane the packs interleave groups of four: lane 0 holds q0[0-3] q1[0-3] q2[0-3]
     * q3[0-3], lane 1 the [4-7]s; the permutation puts the eight 4-byte groups back in order. */
    __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)out, bytes);
    __m256i total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i half = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(2, 3, 0, 1)));
    int32_t codes = _mm_cvtsi128_si32(half);
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}

static void quantize_block_bf16(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    __m256 x[4];
    for (int i = 0; i < 4; i++) x[i] = avx2_widen_bf16(values + 8 * i);
    avx2_quantize(x, out, scale, sum, offset);
}

static void quantize_block_f32(const float *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    __m256 x[4];
    for (int i = 0; i < 4; i++) x[i] = _mm256_loadu_ps(values + 8 * i);
    avx2_quantize(x, out, scale, sum, offset);
}

/* Four inputs 4g..4g+3 of a quantized row, broadcast to every 32-bit lane. */
static inline __attribute__((always_inline)) __m256i avx2_inputs(const int8_t *xq, int g) {
    int32_t four;
    memcpy(&four, xq + 4 * g, 4);
    return _mm256_set1_epi32(four);
}

/* One row's int32 sums of a half (8 columns) into its 8 float32 sums: the contract's float steps,
 * with the half's d and m already widened (exactly) and the row's sx and sx Σ xq. */
static inline __attribute__((always_inline)) void avx2_finish(__m256i dot, __m256 d, __m256 m, float scale,
                                                              float sum, int kind, float *acc) {
    __m256 out = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(scale)), _mm256_loadu_ps(acc));
    if (kind == Q4) out = _mm256_fmadd_ps(m, _mm256_set1_ps(sum), out);
    _mm256_storeu_ps(acc, out);
}

/* Q4: `count` (1..AVX2_ROW_GROUP, a constant once inlined) quantized rows xq (BLOCK apart) against a
 * unit's codes, into dots[row][half], the int32 Σ q xq of each column. */
static inline __attribute__((always_inline)) void avx2_q4_dots(const int8_t *xq, int count, const uint8_t *unit,
                                                              __m256i dots[][2]) {
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    /* The register loops stay loops (unroll 1): unrolled, the compiler splits every register's codes
     * first and spills them. */
#pragma GCC unroll 1
    for (int g = 0; g < 4; g++) {
        __m256i low[2], high[2]; /* registers g and g + 4 of each half */
        for (int h = 0; h < 2; h++) {
            const __m256i both = _mm256_loadu_si256((const __m256i *)(unit + g * 64 + 32 * h));
            low[h] = _mm256_and_si256(both, nibble);
            high[h] = _mm256_and_si256(_mm256_srli_epi16(both, 4), nibble);
        }
#pragma GCC unroll 8
        for (int i = 0; i < count; i++) {
            const __m256i first = avx2_inputs(xq + i * BLOCK, g), second = avx2_inputs(xq + i * BLOCK, g + 4);
            for (int h = 0; h < 2; h++) {
#if AVX2_DOT_PRODUCTS
                dots[i][h] = avx2_dot_products(avx2_dot_products(dots[i][h], low[h], first), high[h], second);
#else
                const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low[h], first),
                                                       _mm256_maddubs_epi16(high[h], second));
                dots[i][h] = _mm256_add_epi16(dots[i][h], pairs);
#endif
            }
        }
    }
#if !AVX2_DOT_PRODUCTS
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int i = 0; i < count; i++)
        for (int h = 0; h < 2; h++) dots[i][h] = _mm256_madd_epi16(dots[i][h], ones);
#endif
}

/* Q8: as avx2_q4_dots; `offsets` are the rows' 128 Σ xq. */
static inline __attribute__((always_inline)) void avx2_q8_dots(const int8_t *xq, const int32_t *offsets, int count,
                                                              const uint8_t *unit, __m256i dots[][2]) {
#if AVX2_DOT_PRODUCTS
    /* The stored u = q + 128 meet xq as they are: Σ u xq, less the row's 128 Σ xq. */
#pragma GCC unroll 1
    for (int g = 0; g < 8; g++) {
        __m256i u[2];
        for (int h = 0; h < 2; h++) u[h] = _mm256_loadu_si256((const __m256i *)(unit + g * 64 + 32 * h));
#pragma GCC unroll 8
        for (int i = 0; i < count; i++) {
            const __m256i inputs = avx2_inputs(xq + i * BLOCK, g);
            for (int h = 0; h < 2; h++) dots[i][h] = avx2_dot_products(dots[i][h], u[h], inputs);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < count; i++)
        for (int h = 0; h < 2; h++) dots[i][h] = _mm256_sub_epi32(dots[i][h], _mm256_set1_epi32(offsets[i]));
#else
    (void)offsets;
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
#pragma GCC unroll 1
    for (int g = 0; g < 8; g++) {
        __m256i q[2], magnitude[2];
        for (int h = 0; h < 2; h++) {
            q[h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(unit + g * 64 + 32 * h)), flip);
            magnitude[h] = _mm256_abs_epi8(q[h]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < count; i++) {
            const __m256i inputs = avx2_inputs(xq + i * BLOCK, g);
            for (int h = 0; h < 2; h++) {
                const __m256i products = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(magnitude[h], _mm256_sign_epi8(inputs, q[h])), ones);
                dots[i][h] = _mm256_add_epi32(dots[i][h], products);
            }
        }
    }
#endif
}

/* `count` (1..AVX2_ROW_GROUP, a constant once inlined) rows of block b from row r against a unit,
 * both halves at once (each broadcast of four inputs feeds both); acc is the tile's [rows][16]. */
static inline __attribute__((always_inline)) void avx2_rows_against_unit(const Rows *rows, int64_t chunk_rows,
                                                                         int64_t b, int64_t r, int count,
                                                                         const uint8_t *unit, int kind, float *acc) {
    const int64_t first = b * chunk_rows + r;
    __m256i dots[AVX2_ROW_GROUP][2];
#pragma GCC unroll 8
    for (int i = 0; i < count; i++) dots[i][0] = dots[i][1] = _mm256_setzero_si256();
    if (kind == Q4)
        avx2_q4_dots(rows->xq + first * BLOCK, count, unit, dots);
    else
        avx2_q8_dots(rows->xq + first * BLOCK, rows->offsets + first, count, unit, dots);
    const uint16_t *halves = (const uint16_t *)(unit + codes_bytes(kind));
    __m256 d[2], m[2];
    for (int h = 0; h < 2; h++) {
        d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(halves + 8 * h)));
        m[h] = kind == Q4 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(halves + COLUMNS + 8 * h)))
                          : _mm256_setzero_ps();
    }
#pragma GCC unroll 8
    for (int i = 0; i < count; i++)
        for (int h = 0; h < 2; h++)
            avx2_finish(dots[i][h], d[h], m[h], rows->scales[first + i], rows->sums[first + i], kind,
                        acc + (r + i) * COLUMNS + 8 * h);
}

#define AVX2_ROWS_CASE(n)                                                                           \
    case n:                                                                                         \
        avx2_rows_against_unit(rows, count, b, r, n, unit, kind, acc);                              \
        break;

/* One unit (block b of a tile) against every row of the chunk. */
static inline __attribute__((always_inline)) void avx2_unit(const Rows *rows, int64_t count, int64_t b,
                                                            const uint8_t *unit, int kind, float *acc) {
    const int64_t group = kind == Q4 ? AVX2_Q4_ROWS : AVX2_Q8_ROWS;
    for (int64_t r = 0; r < count; r += group) {
        int64_t left_rows = count - r;
        switch (left_rows < group ? left_rows : group) {
            AVX2_ROWS_CASE(1)
#if AVX2_ROW_GROUP >= 2
            AVX2_ROWS_CASE(2)
#endif
#if AVX2_ROW_GROUP >= 3
            AVX2_ROWS_CASE(3)
#endif
#if AVX2_ROW_GROUP >= 4
            AVX2_ROWS_CASE(4)
#endif
#if AVX2_ROW_GROUP >= 5
            AVX2_ROWS_CASE(5)
#endif
#if AVX2_ROW_GROUP >= 6
            AVX2_ROWS_CASE(6)
#endif
#if AVX2_ROW_GROUP >= 7
            AVX2_ROWS_CASE(7)
#endif
#if AVX2_ROW_GROUP >= 8
            AVX2_ROWS_CASE(8)
#endif
#if AVX2_ROW_GROUP > 8
#error "AVX2_ROW_GROUP: at most 8 cases are written out"
#endif
            default: break;
        }
    }
}

/* Both tiles, block by block (the blocks of a column in order, as the contract asks); the second is
 * skipped when it is the first (the last, odd tile: its sums are not read back). */
static inline __attribute__((always_inline)) void tiles_of_kind(const Rows *rows, int64_t count,
                                                                     const uint8_t *left, const uint8_t *right,
                                                                     int64_t blocks, int kind, float *acc_left,
                                                                     float *acc_right) {
    const int64_t bytes = unit_bytes(kind);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit_left = left + b * bytes, *unit_right = right + b * bytes;
        for (int64_t line = 0; line < bytes; line += 64) {
            _mm_prefetch((const char *)(unit_left + AVX2_PREFETCH_UNITS * bytes + line), AVX2_PREFETCH_HINT);
            _mm_prefetch((const char *)(unit_right + AVX2_PREFETCH_UNITS * bytes + line), AVX2_PREFETCH_HINT);
        }
        avx2_unit(rows, count, b, unit_left, kind, acc_left);
        if (right != left) avx2_unit(rows, count, b, unit_right, kind, acc_right);
    }
}

/* Eight float32 as bfloat16 bits in the low half of each 32-bit lane: float_to_bf16's integer steps. */
static inline __m256i avx2_bf16_bits(__m256 values) {
    const __m256i bits = _mm256_castps_si256(values);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1)))),
        16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, nan);
}

/* The first `width` (1..16) of 16 float32 sums as bfloat16, 8 at a time. */
static inline void store_bf16(const float *sums, int64_t width, uint16_t *out) {
    /* Lanes are 0..0xffff: the unsigned-saturating pack keeps them; it interleaves 64-bit groups
     * (low 0-3, high 0-3, low 4-7, high 4-7), which the permutation orders. */
    const __m256i halves = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(avx2_bf16_bits(_mm256_loadu_ps(sums)), avx2_bf16_bits(_mm256_loadu_ps(sums + 8))),
        _MM_SHUFFLE(3, 1, 2, 0));
    if (width == COLUMNS) {
        _mm256_storeu_si256((__m256i *)out, halves);
    } else {
        uint16_t all[COLUMNS];
        _mm256_storeu_si256((__m256i *)all, halves);
        memcpy(out, all, sizeof(uint16_t) * (size_t)width);
    }
}

#endif
