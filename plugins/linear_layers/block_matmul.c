/* y = x · Wᵀ for bfloat16 activations and GGUF block weights (Q4_0, Q4_1, Q8_0), read as stored.
 *
 * The weights are repacked once at load (block_matmul.py) into units of 16 output
 * columns × one block of 32 inputs: the codes in the order the kernel consumes them, then
 * the 16 columns' d (and m) as float16, exactly as the file stores them. Nothing else is
 * kept: a Q4_1 weight costs 0.625 bytes, as in the file.
 *
 * Each unit's codes are widened in registers to bfloat16 pairs and multiplied with
 * AVX-512 BF16's pair dot product, 16 columns per register, accumulating in float32:
 *
 * - 4-bit codes q become the bfloat16 number 128 + q by OR-ing 0x4300 into the nibble
 *   (128..255 are exact in bfloat16). Then, with s = Σ x over the block,
 *   Σ (d q + m) x = d Σ (128 + q) x + (m − 128 d) s.
 * - 8-bit codes run as integers: each block of a row of x is quantized to int8 (xq, with
 *   sx = max |x| / 127), the codes are stored as u = q + 128, and AVX-512 VNNI's byte dot
 *   product sums four u·xq a lane. Then Σ d q x ≈ d sx (Σ u xq − 128 Σ xq), the integer
 *   sum exact. Widening 8-bit codes to bfloat16 took 7 instructions a register, which made
 *   the Q8_0 LM head at one row twice as slow a weight as the 4-bit layers; this takes none.
 *   The quantization of x costs up to max |x| / 254 an element (as llama.cpp's q8_0 does).
 *
 * A 4-bit unit's codes are widened once for every row of x, so the cost of widening shrinks as
 * the batch grows, while the bytes read stay those of the file: at one row the kernel is
 * as fast as memory gives the codes, at 32 rows it does the same multiply-adds as a dense
 * bfloat16 matmul over a quarter of the bytes. Output columns are spread over OpenMP
 * threads; every column's sum runs in the same order whatever the batch, its row's
 * place in it and the thread count, so a row's result does not depend on its batch-mates.
 *
 * Built without AVX-512 BF16 (another CPU), the same layout runs through portable C with
 * the same formulas (and with -DTERCET_PORTABLE, for tests); tercet then uses torch's kernels
 * instead (see tercet_block_matmul_vectorized).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tercet_bfloat16.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && !defined(TERCET_PORTABLE)
#include <immintrin.h>
#define VECTORIZED 1
#else
#define VECTORIZED 0
#endif

#define COLUMNS 16
#define BLOCK 32
/* Rows of x whose accumulators live in registers at once: 5 rows × 2 units + 16 widened
 * code registers fill most of AVX-512's 32 (measured against 4 and 6: 6 spills more,
 * 4 hides less of the dot product's latency). */
#define ROW_GROUP 5
/* Rows handled per pass over the weights: their float32 sums and x's block sums stay in L1. */
#define ROW_CHUNK 64
/* Units ahead of the one being multiplied whose bytes are prefetched (past a tile's end: the next
 * tile's); measured against 2, 4 and 16 on the default model at one row. */
#define PREFETCH_UNITS 8

enum { Q4 = 0, Q8 = 1 };

static int64_t unit_bytes(int kind) {
    return kind == Q4 ? 256 + 2 * 2 * COLUMNS : 512 + 2 * COLUMNS;
}

int tercet_block_matmul_vectorized(void) { return VECTORIZED; }

static inline float half_to_float(uint16_t half) {
    uint32_t sign = (uint32_t)(half & 0x8000u) << 16, exponent = (half >> 10) & 0x1f, mantissa = half & 0x3ffu;
    uint32_t bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exponent = 127 - 15 + 1;
            while (!(mantissa & 0x400u)) { mantissa <<= 1; exponent--; }
            bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* The code of column c at input k (0..31) of a unit, as the layout stores it. Q4: register
 * j = k / 2 holds lane 2c + k % 2, registers 4g..4g+3 as the four nibbles of 16-bit lanes. Q8:
 * register k / 4 holds q + 128 at byte 4c + k % 4 (four inputs of a column a 32-bit lane). */
static inline int code_at(const uint8_t *unit, int kind, int c, int k) {
    if (kind == Q8) return (int)unit[(k / 4) * 64 + c * 4 + k % 4] - 128;
    int j = k / 2, lane = c * 2 + k % 2;
    const uint8_t *word = unit + (j / 4) * 64 + lane * 2;
    int value = word[0] | word[1] << 8;
    return (value >> (4 * (j % 4))) & 0x0f;
}

/* One unit of a 4-bit tile: 4 groups of 64 bytes; group G holds, in the 16-bit lane of column c
 * and input parity p, the codes of inputs 8G + 2t + p (t = 0..3) as its four nibbles. */
static void pack_q4_unit(const uint8_t *codes, int64_t k, int64_t columns, uint8_t *unit) {
    uint16_t *words = (uint16_t *)unit;
    for (int group = 0; group < 4; group++)
        for (int c = 0; c < COLUMNS; c++)
            for (int parity = 0; parity < 2; parity++) {
                uint16_t word = 0;
                if (c < columns) {
                    const uint8_t *row = codes + c * k + 8 * group + parity;
                    word = (uint16_t)((row[0] & 0x0f) | (row[2] & 0x0f) << 4 | (row[4] & 0x0f) << 8 |
                                      (row[6] & 0x0f) << 12);
                }
                words[group * 32 + c * 2 + parity] = word;
            }
}

/* One unit of a Q8 tile: register g holds inputs 4g..4g+3 of column c at bytes 4c..4c+3, as q + 128. */
static void pack_q8_unit(const uint8_t *codes, int64_t k, int64_t columns, uint8_t *unit) {
    for (int g = 0; g < 8; g++)
        for (int c = 0; c < COLUMNS; c++)
            for (int i = 0; i < 4; i++)
                unit[g * 64 + c * 4 + i] = c < columns ? (uint8_t)(codes[c * k + 4 * g + i] ^ 0x80) : 0x80;
}

/* Lay an [n, k] weight out as units ([ceil(n / 16), k / 32] units of unit_bytes(kind)): the codes
 * (uint8 0..15 for Q4, int8 for Q8, one per weight, [n, k]), then the 16 columns' d and, for Q4,
 * m (float16 [n, k / 32] each; `m` is NULL for Q8). Columns past n are zero codes and scales. */
void tercet_block_pack(const uint8_t *codes, const uint16_t *d, const uint16_t *m, int64_t n, int64_t k, int kind,
                       uint8_t *units) {
    int64_t blocks = k / BLOCK, tiles = (n + COLUMNS - 1) / COLUMNS, bytes = unit_bytes(kind);
    int64_t codes_bytes = kind == Q4 ? 256 : 512;
#pragma omp parallel for schedule(static)
    for (int64_t tile = 0; tile < tiles; tile++) {
        int64_t first = tile * COLUMNS, columns = n - first < COLUMNS ? n - first : COLUMNS;
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *unit = units + (tile * blocks + b) * bytes;
            const uint8_t *block_codes = codes + first * k + b * BLOCK;
            if (kind == Q4)
                pack_q4_unit(block_codes, k, columns, unit);
            else
                pack_q8_unit(block_codes, k, columns, unit);
            uint16_t *scales = (uint16_t *)(unit + codes_bytes);
            for (int64_t c = 0; c < COLUMNS; c++) {
                scales[c] = c < columns ? d[(first + c) * blocks + b] : 0;
                if (kind == Q4) scales[COLUMNS + c] = c < columns ? m[(first + c) * blocks + b] : 0;
            }
        }
    }
}

/* Σ over each block of each row of x (float32): the Q4 formula's s. */
static void block_sums(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t blocks, float *sums) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++) {
            float total = 0.0f;
            for (int k = 0; k < BLOCK; k++) total += bf16_to_float(x[r * x_stride + b * BLOCK + k]);
            sums[r * blocks + b] = total;
        }
}

/* Each block of each row of x as int8 for the Q8 codes: xq = round(x / sx) with sx = max |x| / 127,
 * block-major ([block][row][32], as `blocked` is), with sx and Σ xq per [row][block]. Both builds
 * quantize here, so they multiply the same integers. */
static void quantize_rows(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t blocks, int8_t *xq,
                          float *scales, int32_t *sums) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++) {
            const uint16_t *values = x + r * x_stride + b * BLOCK;
            float largest = 0.0f;
            for (int k = 0; k < BLOCK; k++) {
                float magnitude = fabsf(bf16_to_float(values[k]));
                largest = magnitude > largest ? magnitude : largest;
            }
            float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
            int8_t *out = xq + (b * rows + r) * BLOCK;
            int32_t total = 0;
            for (int k = 0; k < BLOCK; k++) {
                out[k] = (int8_t)lrintf(bf16_to_float(values[k]) * inverse);
                total += out[k];
            }
            scales[r * blocks + b] = largest / 127.0f;
            sums[r * blocks + b] = total;
        }
}

/* The portable path: the same sums as the vectorized one, pair by pair in one chain, in float32
 * (the vectorized dot product rounds and flushes subnormals its own way: close, not equal). */
#if !VECTORIZED
static void tile_portable(const uint16_t *x, int64_t x_stride, int64_t rows, const uint8_t *units, int64_t blocks,
                          int kind, const float *sums, float *acc) {
    int64_t bytes = unit_bytes(kind);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit = units + b * bytes;
        const uint16_t *halves = (const uint16_t *)(unit + (kind == Q4 ? 256 : 512));
        for (int c = 0; c < COLUMNS; c++) {
            float d = half_to_float(halves[c]);
            float shifted_min = kind == Q4 ? half_to_float(halves[COLUMNS + c]) - 128.0f * d : 0.0f;
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t *xr = x + r * x_stride + b * BLOCK;
                float total = 0.0f;
                for (int k = 0; k < BLOCK; k += 2) {
                    int offset = kind == Q4 ? 128 : 0;
                    total += (float)(code_at(unit, kind, c, k + 1) + offset) * bf16_to_float(xr[k + 1]);
                    total += (float)(code_at(unit, kind, c, k) + offset) * bf16_to_float(xr[k]);
                }
                float *out = acc + r * COLUMNS + c;
                if (kind == Q4) *out += shifted_min * sums[r * blocks + b];
                *out += d * total;
            }
        }
    }
}


/* Q8 units against the quantized rows (see quantize_rows): the integer sums, then d sx once a block. */
static void tile_q8_portable(const int8_t *xq, int64_t rows, const uint8_t *units, int64_t blocks,
                             const float *scales, float *acc) {
    int64_t bytes = unit_bytes(Q8);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit = units + b * bytes;
        const uint16_t *halves = (const uint16_t *)(unit + 512);
        for (int c = 0; c < COLUMNS; c++) {
            float d = half_to_float(halves[c]);
            for (int64_t r = 0; r < rows; r++) {
                const int8_t *xr = xq + (b * rows + r) * BLOCK;
                int32_t dot = 0;
                for (int k = 0; k < BLOCK; k++) dot += code_at(unit, Q8, c, k) * xr[k];
                acc[r * COLUMNS + c] = fmaf(d * scales[r * blocks + b], (float)dot, acc[r * COLUMNS + c]);
            }
        }
    }
}
#endif

#if VECTORIZED
/* Half a 4-bit unit's codes (inputs 16 half .. 16 half + 15) widened into 8 registers: register j
 * holds inputs 16 half + 2j and + 2j + 1 of the 16 columns. Each 16-bit lane of a 64-byte load
 * holds four registers' nibbles, and (lane & 0xf) | 0x4300 is one ternary-logic op. */
static inline __attribute__((always_inline)) void widen_half(const uint8_t *unit, int half, __m512i codes[8]) {
    {
        const __m512i nibble = _mm512_set1_epi16(0x0f), bias = _mm512_set1_epi16(0x4300);
#pragma GCC unroll 2
        for (int group = 0; group < 2; group++) {
            __m512i lanes = _mm512_loadu_si512((const void *)(unit + (2 * half + group) * 64));
            codes[4 * group] = _mm512_ternarylogic_epi32(lanes, nibble, bias, 0xEA); /* (a & b) | c */
            codes[4 * group + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lanes, 4), nibble, bias, 0xEA);
            codes[4 * group + 2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lanes, 8), nibble, bias, 0xEA);
            codes[4 * group + 3] = _mm512_or_si512(_mm512_srli_epi16(lanes, 12), bias);
        }
    }
}

/* A unit's scales: d, and for Q4 the shifted min m - 128 d. */
typedef struct { __m512 d, shifted_min; } Scales;

static inline __attribute__((always_inline)) Scales scales_of(const uint8_t *unit, int kind) {
    Scales out;
    if (kind == Q4) {
        out.d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + 256)));
        __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + 256 + 2 * COLUMNS)));
        out.shifted_min = _mm512_fnmadd_ps(_mm512_set1_ps(128.0f), out.d, m);
    } else {
        out.d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + 512)));
        out.shifted_min = _mm512_setzero_ps();
    }
    return out;
}

static inline __attribute__((always_inline)) void finish_row(__m512 total, Scales scales, float sum, int kind,
                                                             float *acc) {
    __m512 out = _mm512_loadu_ps(acc);
    if (kind == Q4) out = _mm512_fmadd_ps(scales.shifted_min, _mm512_set1_ps(sum), out);
    _mm512_storeu_ps(acc, _mm512_fmadd_ps(scales.d, total, out));
}

/* ``count`` (1..ROW_GROUP, a constant once inlined) rows against two units side by side
 * (32 columns): each broadcast pair of x feeds both. Every row sums its pairs in one chain,
 * in the same order whatever ``count`` is: a row's result does not depend on its batch. */
static inline __attribute__((always_inline)) void rows_against_units(
    const uint16_t *x, int count, const uint8_t *left, const uint8_t *right,
    const float *sums, int64_t sums_stride, int kind, float *acc_left, float *acc_right) {
    __m512 partial_left[ROW_GROUP], partial_right[ROW_GROUP];
#pragma GCC unroll 5
    for (int i = 0; i < count; i++) partial_left[i] = partial_right[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
        __m512i codes_left[8], codes_right[8];
        widen_half(left, half, codes_left);
        widen_half(right, half, codes_right);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
#pragma GCC unroll 5
            for (int i = 0; i < count; i++) {
                int32_t pair;
                memcpy(&pair, x + i * BLOCK + 2 * (8 * half + j), 4);
                __m512bh both = (__m512bh)_mm512_set1_epi32(pair);
                partial_left[i] = _mm512_dpbf16_ps(partial_left[i], (__m512bh)codes_left[j], both);
                partial_right[i] = _mm512_dpbf16_ps(partial_right[i], (__m512bh)codes_right[j], both);
            }
    }
    Scales scales_left = scales_of(left, kind), scales_right = scales_of(right, kind);
#pragma GCC unroll 5
    for (int i = 0; i < count; i++) {
        finish_row(partial_left[i], scales_left, sums[i * sums_stride], kind, acc_left + i * COLUMNS);
        finish_row(partial_right[i], scales_right, sums[i * sums_stride], kind, acc_right + i * COLUMNS);
    }
}

#define ROWS_CASE(n) \
    case n: rows_against_units(xr, n, left + b * bytes, right + b * bytes, sums + r * blocks + b, \
                               blocks, kind, acc_left + r * COLUMNS, acc_right + r * COLUMNS); break;

static inline __attribute__((always_inline)) void tiles_of_kind(
    const uint16_t *x, int64_t rows, const uint8_t *left, const uint8_t *right, int64_t blocks,
    int kind, const float *sums, float *acc_left, float *acc_right) {
    int64_t bytes = unit_bytes(kind);
    for (int64_t b = 0; b < blocks; b++) {
        /* Ask for the units PREFETCH_UNITS ahead of both tiles: at one row the kernel is waiting on
         * memory, and the hardware prefetcher starts late on every new layer's short streams. */
        for (int64_t line = 0; line < bytes; line += 64) {
            _mm_prefetch((const char *)(left + (b + PREFETCH_UNITS) * bytes + line), _MM_HINT_T0);
            _mm_prefetch((const char *)(right + (b + PREFETCH_UNITS) * bytes + line), _MM_HINT_T0);
        }
        for (int64_t r = 0; r < rows; r += ROW_GROUP) {
            const uint16_t *xr = x + (b * rows + r) * BLOCK;
            int64_t left_rows = rows - r;
            switch (left_rows < ROW_GROUP ? left_rows : ROW_GROUP) {
                ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5)
                default: break;
            }
        }
    }
}

/* Two 4-bit tiles of 16 columns (``right`` may be ``left`` again, its sums then thrown away). */
static void tiles_vectorized(const uint16_t *x, int64_t rows, const uint8_t *left, const uint8_t *right,
                             int64_t blocks, const float *sums, float *acc_left, float *acc_right) {
    tiles_of_kind(x, rows, left, right, blocks, Q4, sums, acc_left, acc_right);
}

/* Two Q8 tiles against the quantized rows: per block, the 16 code registers are loaded once and
 * every row's four-input byte dot products (VNNI) are summed as integers, exactly. */
static void tiles_q8_vectorized(const int8_t *xq, int64_t rows, const uint8_t *left, const uint8_t *right,
                                int64_t blocks, const float *scales, const int32_t *sums, float *acc_left,
                                float *acc_right) {
    const int64_t bytes = unit_bytes(Q8);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit_left = left + b * bytes, *unit_right = right + b * bytes;
        for (int64_t line = 0; line < bytes; line += 64) {
            _mm_prefetch((const char *)(unit_left + PREFETCH_UNITS * bytes + line), _MM_HINT_T0);
            _mm_prefetch((const char *)(unit_right + PREFETCH_UNITS * bytes + line), _MM_HINT_T0);
        }
        __m512i codes_left[8], codes_right[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            codes_left[g] = _mm512_loadu_si512((const void *)(unit_left + g * 64));
            codes_right[g] = _mm512_loadu_si512((const void *)(unit_right + g * 64));
        }
        const __m512 d_left = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit_left + 512)));
        const __m512 d_right = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit_right + 512)));
        for (int64_t r = 0; r < rows; r++) {
            const int8_t *xr = xq + (b * rows + r) * BLOCK;
            __m512i dot_left = _mm512_setzero_si512(), dot_right = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t four;
                memcpy(&four, xr + 4 * g, 4);
                const __m512i inputs = _mm512_set1_epi32(four);
                dot_left = _mm512_dpbusd_epi32(dot_left, codes_left[g], inputs);
                dot_right = _mm512_dpbusd_epi32(dot_right, codes_right[g], inputs);
            }
            /* Σ (q + 128) xq - 128 Σ xq = Σ q xq */
            const __m512i offset = _mm512_set1_epi32(128 * sums[r * blocks + b]);
            const __m512 sx = _mm512_set1_ps(scales[r * blocks + b]);
            float *out_left = acc_left + r * COLUMNS, *out_right = acc_right + r * COLUMNS;
            _mm512_storeu_ps(out_left, _mm512_fmadd_ps(_mm512_mul_ps(d_left, sx),
                                                       _mm512_cvtepi32_ps(_mm512_sub_epi32(dot_left, offset)),
                                                       _mm512_loadu_ps(out_left)));
            _mm512_storeu_ps(out_right, _mm512_fmadd_ps(_mm512_mul_ps(d_right, sx),
                                                        _mm512_cvtepi32_ps(_mm512_sub_epi32(dot_right, offset)),
                                                        _mm512_loadu_ps(out_right)));
        }
    }
}
#endif

/* One chunk of rows of x made ready for the tiles: Q4 reads them block-major (`blocked`) with
 * each block's Σ x (`sums`); Q8 reads them quantized (`xq`, with sx in `sums`, Σ xq in `int_sums`). */
typedef struct {
    float *sums;
    uint16_t *blocked;
    int8_t *xq;
    int32_t *int_sums;
} Rows;

static void free_rows(Rows *prepared) {
    free(prepared->sums);
    free(prepared->blocked);
    free(prepared->xq);
    free(prepared->int_sums);
}

static int allocate_rows(int64_t rows, int64_t k, Rows *prepared) {
    int64_t most = rows < ROW_CHUNK ? rows : ROW_CHUNK, blocks = k / BLOCK;
    prepared->sums = malloc(sizeof(float) * (size_t)(most * blocks + 1));
    prepared->blocked = malloc(sizeof(uint16_t) * (size_t)(most * k + 1));
    prepared->xq = malloc((size_t)(most * k + 1));
    prepared->int_sums = malloc(sizeof(int32_t) * (size_t)(most * blocks + 1));
    if (prepared->sums && prepared->blocked && prepared->xq && prepared->int_sums) return 0;
    free_rows(prepared);
    return 1;
}

static void prepare_rows(const uint16_t *xc, int64_t x_stride, int64_t count, int64_t blocks, int kind,
                         Rows *prepared) {
    if (kind == Q8) {
        quantize_rows(xc, x_stride, count, blocks, prepared->xq, prepared->sums, prepared->int_sums);
        return;
    }
    block_sums(xc, x_stride, count, blocks, prepared->sums);
    /* Block-major, so that a group of rows of one block is one run of memory. */
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t r = 0; r < count; r++)
            memcpy(prepared->blocked + (b * count + r) * BLOCK, xc + r * x_stride + b * BLOCK,
                   BLOCK * sizeof(uint16_t));
}

/* The tiles `left` and `right` (the same tile when it is the last, odd one) into acc. */
static void multiply_tiles(const uint16_t *xc, int64_t x_stride, int64_t count, const uint8_t *left,
                           const uint8_t *right, int64_t blocks, int kind, const Rows *prepared, float *acc_left,
                           float *acc_right) {
#if VECTORIZED
    (void)xc;
    (void)x_stride;
    if (kind == Q8)
        tiles_q8_vectorized(prepared->xq, count, left, right, blocks, prepared->sums, prepared->int_sums, acc_left,
                            acc_right);
    else
        tiles_vectorized(prepared->blocked, count, left, right, blocks, prepared->sums, acc_left, acc_right);
#else
    for (int side = 0; side < (right != left ? 2 : 1); side++) {
        const uint8_t *units = side ? right : left;
        float *acc = side ? acc_right : acc_left;
        if (kind == Q8)
            tile_q8_portable(prepared->xq, count, units, blocks, prepared->sums, acc);
        else
            tile_portable(xc, x_stride, count, units, blocks, kind, prepared->sums, acc);
    }
#endif
}

/* x: [rows, K] bfloat16 with row stride x_stride; units: [ceil(N / 16), K / 32] units of the
 * layout; y: [rows, N] bfloat16 with row stride y_stride. Returns 0, or 1 when out of memory. */
int tercet_block_matmul(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units,
                        int kind, int64_t n, uint16_t *y, int64_t y_stride) {
    int64_t blocks = k / BLOCK, tiles = (n + COLUMNS - 1) / COLUMNS, bytes = unit_bytes(kind);
    Rows prepared;
    if (allocate_rows(rows, k, &prepared)) return 1;
    for (int64_t first = 0; first < rows; first += ROW_CHUNK) {
        int64_t count = rows - first < ROW_CHUNK ? rows - first : ROW_CHUNK;
        const uint16_t *xc = x + first * x_stride;
        prepare_rows(xc, x_stride, count, blocks, kind, &prepared);
#pragma omp parallel for schedule(static)
        for (int64_t pair = 0; pair < (tiles + 1) / 2; pair++) {
            float acc[2][COLUMNS * ROW_CHUNK];
            memset(acc, 0, sizeof acc);
            int64_t left = 2 * pair, right = left + 1 < tiles ? left + 1 : left;
            multiply_tiles(xc, x_stride, count, units + left * blocks * bytes, units + right * blocks * bytes, blocks,
                           kind, &prepared, acc[0], acc[1]);
            for (int64_t side = 0; side < (right != left ? 2 : 1); side++) {
                int64_t tile = left + side, width = n - tile * COLUMNS < COLUMNS ? n - tile * COLUMNS : COLUMNS;
                for (int64_t r = 0; r < count; r++)
                    for (int64_t c = 0; c < width; c++)
                        y[(first + r) * y_stride + tile * COLUMNS + c] = float_to_bf16(acc[side][r * COLUMNS + c]);
            }
        }
    }
    free_rows(&prepared);
    return 0;
}
