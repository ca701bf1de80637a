/* y = x · Wᵀ for bfloat16 or float32 activations and GGUF block weights (Q4_0, Q4_1, Q8_0), read as
 * stored.
 *
 * The weights are repacked once at load (block_matmul.py) into units of 16 output
 * columns × one block of 32 inputs: the codes in the order the kernel consumes them, then
 * the 16 columns' d (and m) as float16, exactly as the file stores them. Nothing else is
 * kept: a Q4_1 weight costs 0.625 bytes, as in the file.
 *
 * Every block of a row of x is quantized to int8 first (xq = round(x / sx), sx = max |x| / 127,
 * as llama.cpp's q8_0 / q8_1 activations are), and a unit's codes meet xq in AVX-512 VNNI's
 * byte dot product, which sums four unsigned-code × signed-input products into each 32-bit lane:
 * 64 multiply-adds an instruction, twice as many as bfloat16's pair dot product, with no
 * widening of the codes beyond splitting the nibbles. The integer sums are exact; then a
 * block adds, per row and column,
 *
 * - 4-bit (d q + m): d sx Σ q xq + m sx Σ xq. Taking the min's Σ x from xq too keeps the error that
 *   the quantization of x brings at d (q − q̄) a weight, centred, instead of d q (measured: 95% top-1
 *   agreement with the dequantized model against 90% with the exact Σ x);
 * - 8-bit (d q, stored as u = q + 128 for the unsigned operand): d sx (Σ u xq − 128 Σ xq).
 *
 * The quantization of x moves each input by at most max |x| / 254 of its block.
 *
 * bfloat16 rows (tercet_block_matmul) and float32 rows (tercet_block_matmul_f32) take one path: a
 * block of either is quantized by the same float32 steps (a bfloat16 widened exactly first, so a
 * bfloat16 row and its float32 widening give the same xq, sx and sums), the tiles are the same, and
 * only the last step differs: the float32 sums rounded to bfloat16, or stored as they are.
 *
 * A unit's codes are loaded once for every row of a chunk of x, so at 32 rows the kernel does
 * the multiply-adds of a dense matmul over a quarter of the bytes, and at one row it is as fast as
 * memory gives the codes. Output columns are spread over OpenMP threads; every column's sum runs
 * in the same order whatever the batch, its row's place in it and the thread count, so a row's
 * result does not depend on its batch-mates.
 *
 * On a CPU with AMX (and a kernel that grants it), calls of AMX_ROWS rows or more (prompts) take the
 * same integer sums from AMX's tile product instead (16 rows × 16 columns × one block an instruction)
 * and finish them with the same float steps: the results are the same bits as VNNI's, so which path
 * a call takes never shows in its output (the batch invariance above holds across the two). The
 * float steps a block, not the products, bound that path: about 0.82x VNNI's time from 128 rows.
 *
 * The integer sums and float steps have one definition, the portable C path's (tile_portable,
 * quantize_floats, store_bf16 under "portable" below), and every instruction-set level computes exactly
 * its bits, for either dtype: the level a library was built for never shows in its output. The levels,
 * the first that the compiler's target gives (-DTERCET_PORTABLE forces the portable one on any CPU, for
 * tests):
 *
 * - AVX-512 (BF16, BW and VNNI: Zen 4, Sapphire Rapids), in this file, and AMX beside it for prompts;
 * - AVX2 with FMA and F16C (x86-64-v3), block_matmul_avx2.h: 256-bit, u8 × s8 pair products, or
 *   vpdpbusd where the build has AVX-VNNI or AVX-512 VNNI without BF16 (the avxvnni and avx512vnni levels);
 * - NEON (AArch64), block_matmul_neon.h;
 * - portable C, on any other CPU: there tercet uses torch's kernels instead (see
 *   tercet_block_matmul_vectorized).
 */
/* syscall() for AMX's permission, under -std=c11. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tercet_bfloat16.h"

/* The instruction-set level this library was built for (tercet_block_matmul_level). */
#define LEVEL_PORTABLE 0
#define LEVEL_AVX2 1
#define LEVEL_AVX512 2
#define LEVEL_NEON 3

#if defined(TERCET_PORTABLE)
#define LEVEL LEVEL_PORTABLE
#elif defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define LEVEL LEVEL_AVX512
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LEVEL LEVEL_AVX2
#elif defined(__ARM_NEON)
#define LEVEL LEVEL_NEON
#else
#define LEVEL LEVEL_PORTABLE
#endif

#if LEVEL == LEVEL_AVX512
#include <immintrin.h>
#endif
#define VECTORIZED (LEVEL != LEVEL_PORTABLE)

/* AMX's integer sums are finished by the AVX-512 path's float steps: only in its build. */
#if LEVEL == LEVEL_AVX512 && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_BUILT 1
#else
#define AMX_BUILT 0
#endif

#define COLUMNS 16
#define BLOCK 32
/* Rows handled per pass over the weights: their float32 sums and quantized blocks stay in L1. */
#define ROW_CHUNK 64
/* Calls of this many rows or more take AMX's integer sums where there is AMX. Measured over the default
 * model's decoder layers on the Xeon of docs/benchmarks.md (benchmarks/linear_kernels.py): AMX's time
 * over VNNI's 1.3x at 16 and 24 rows (a group of 16 rows mostly padding), even at 32, 0.96x at 48,
 * 0.86x at 64, 0.83x at 128, 0.82x at 512. */
#define AMX_ROWS 48

enum { Q4 = 0, Q8 = 1 };

static int64_t codes_bytes(int kind) { return kind == Q4 ? 256 : 512; }

static int64_t unit_bytes(int kind) { return codes_bytes(kind) + (kind == Q4 ? 4 : 2) * COLUMNS; }

/* Nonzero where the kernel is built for a vectorized level (AVX-512, AVX2 or NEON): tercet uses it
 * there, and torch's kernels on the portable build. */
int tercet_block_matmul_vectorized(void) { return VECTORIZED; }

/* The level this library was built for: 0 portable, 1 AVX2, 2 AVX-512, 3 NEON (for logs and tests). */
int tercet_block_matmul_level(void) { return LEVEL; }

/* The code of column c at input k (0..31) of a unit, as the layout stores it: register g = k / 4
 * holds the four inputs 4g..4g+3 of column c at bytes 4c..4c+3. Q8 stores them as q + 128, one a
 * byte; Q4 stores registers g and g + 4 in one: g's codes in the low nibbles, g + 4's in the high. */
static inline int code_at(const uint8_t *unit, int kind, int c, int k) {
    int g = k / 4, i = k % 4;
    if (kind == Q8) return (int)unit[g * 64 + c * 4 + i] - 128;
    int byte = unit[(g % 4) * 64 + c * 4 + i];
    return g < 4 ? byte & 0x0f : byte >> 4;
}

static void pack_q4_unit(const uint8_t *codes, int64_t k, int64_t columns, uint8_t *unit) {
    for (int g = 0; g < 4; g++)
        for (int c = 0; c < COLUMNS; c++)
            for (int i = 0; i < 4; i++) {
                const uint8_t *row = codes + c * k;
                unit[g * 64 + c * 4 + i] =
                    c < columns ? (uint8_t)((row[4 * g + i] & 0x0f) | (row[16 + 4 * g + i] & 0x0f) << 4) : 0;
            }
}

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
            uint16_t *scales = (uint16_t *)(unit + codes_bytes(kind));
            for (int64_t c = 0; c < COLUMNS; c++) {
                scales[c] = c < columns ? d[(first + c) * blocks + b] : 0;
                if (kind == Q4) scales[COLUMNS + c] = c < columns ? m[(first + c) * blocks + b] : 0;
            }
        }
    }
}

/* A chunk of rows of x quantized for the tiles, block-major so that a group of rows of one block is
 * one run of memory: xq [block][row][32], and per [block][row] sx, sx Σ xq (Q4's min term) and
 * 128 Σ xq (Q8's offset). */
typedef struct {
    int8_t *xq;
    float *scales;
    float *sums;
    int32_t *offsets;
} Rows;

/* 127 / max |x| for a block's quantization, or 0 where max |x| is 0 or so small that the quotient overflows
 * (below about 3.7e-37): such a block is all zeros on every level, rather than each ISA's own answer to a
 * conversion of infinity. */
static inline float block_inverse(float largest) {
    const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    return inverse <= FLT_MAX ? inverse : 0.0f;
}

/* What a level's header (or section, for AVX-512) defines, each computing exactly the bits of the
 * portable path below, whatever the rows, their count and the thread count:
 *
 * - static void quantize_block_bf16(const uint16_t *values, int8_t *out, float *scale, float *sum,
 *                                   int32_t *offset);
 *   static void quantize_block_f32(const float *values, the same);
 *   one block of 32 inputs, bfloat16 (widened exactly to float32 first) or float32, both through one
 *   quantization of 32 float32 values: sx = max |x| / 127 (a float division), xq = x · (127 / max |x|)
 *   (see block_inverse) as a float32 product rounded to nearest even (lrintf), −127..127, into
 *   out[0..31]; *scale = sx, *sum = sx · (float)Σ xq, *offset = 128 Σ xq (Σ xq exact, in int32).
 * - static inline void tiles_of_kind(const Rows *rows, int64_t count, const uint8_t *left,
 *                                   const uint8_t *right, int64_t blocks, int kind, float *acc_left,
 *                                   float *acc_right);
 *   (inlined into one instance per kind, tiles_q4 and tiles_q8, below the levels) the `count`
 *   (1..ROW_CHUNK) rows of `rows` (block-major, see Rows) against the units of tile `left`
 *   (`blocks` units in a run) into acc_left, and of tile `right` into acc_right (acc_* are [count][16]
 *   float32, row r at r * COLUMNS; `right` may be `left`, when it is the last, odd tile: acc_right is
 *   then not read back). For each block b in order 0, 1, ..., each row r and column c, with the
 *   exact integer dot = Σ q xq over the block (q the column's signed code: 0..15 for Q4, −128..127
 *   for Q8, see code_at), d and m the unit's float16 scales widened exactly:
 *       acc = fmaf((float)dot, d * sx, acc);          (d * sx rounded to float first)
 *       acc = fmaf(m, sx Σ xq, acc);                   (Q4 only: rows->sums)
 *   with no other rounding (no contraction of d * sx into the fma, no reassociation across blocks).
 * - static inline void store_bf16(const float *sums, int64_t width, uint16_t *out);
 *   out[c] = float_to_bf16(sums[c]) for c < width (1..16), as tercet_bfloat16.h rounds (ties to even,
 *   a NaN stays a quiet NaN); sums[0..15] may all be read, out[width..15] is not written. (float32
 *   output is stored by store_f32, below the levels: a copy, the same on every level.)
 *
 * A header may use what precedes this comment (COLUMNS, BLOCK, ROW_CHUNK, Q4/Q8, codes_bytes,
 * unit_bytes, code_at, Rows, block_inverse) and defines nothing else that this file defines. */
#if LEVEL == LEVEL_AVX512
/* Rows of x whose integer sums live in registers at once, against two tiles' 16 code registers
 * (measured against 5 and 6, which spill). */
#define ROW_GROUP 4
/* Units ahead of the one being multiplied whose bytes are prefetched (past a tile's end: the next
 * tile's), into L2 (PREFETCH_HINT). On Zen 4, one thread, one row, a Q4_1 matrix from memory: 1.8 ms
 * at 8 units into L1 (T0), 1.0-1.05 ms at 32-64 into L2 (T1): into L1, the lines came too late to
 * hide the memory's latency and too early to stay; 0.62-0.65x with two threads, unchanged at 32 rows. */
#define PREFETCH_UNITS 64
#define PREFETCH_HINT _MM_HINT_T1

/* One block of 32 float32 inputs (see the contract above): 32 at once, as two halves of 16. */
static inline __attribute__((always_inline)) void quantize_floats(__m512 low, __m512 high, int8_t *out, float *scale,
                                                                  float *sum, int32_t *offset) {
    float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
    __m512 inverse = _mm512_set1_ps(block_inverse(largest));
    __m512i q_low = _mm512_cvtps_epi32(_mm512_mul_ps(low, inverse));
    __m512i q_high = _mm512_cvtps_epi32(_mm512_mul_ps(high, inverse));
    _mm_storeu_si128((__m128i *)out, _mm512_cvtsepi32_epi8(q_low));
    _mm_storeu_si128((__m128i *)(out + 16), _mm512_cvtsepi32_epi8(q_high));
    int32_t codes = _mm512_reduce_add_epi32(_mm512_add_epi32(q_low, q_high));
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}

/* Sixteen bfloat16 as float32 (exact: a bfloat16 is a float32's top half). */
static inline __m512 widen_bf16(const uint16_t *values) {
    const __m512i widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)values));
    return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}

static void quantize_block_bf16(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    quantize_floats(widen_bf16(values), widen_bf16(values + 16), out, scale, sum, offset);
}

static void quantize_block_f32(const float *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    quantize_floats(_mm512_loadu_ps(values), _mm512_loadu_ps(values + 16), out, scale, sum, offset);
}

/* A unit's codes as the 8 registers VNNI takes (see code_at); a 4-bit load splits into two. */
static inline __attribute__((always_inline)) void load_codes(const uint8_t *unit, int kind, __m512i codes[8]) {
    if (kind == Q8) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) codes[g] = _mm512_loadu_si512((const void *)(unit + g * 64));
        return;
    }
    const __m512i nibble = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i both = _mm512_loadu_si512((const void *)(unit + g * 64));
        codes[g] = _mm512_and_si512(both, nibble);
        codes[g + 4] = _mm512_and_si512(_mm512_srli_epi16(both, 4), nibble);
    }
}

/* One row's integer sums of a block into its float32 sums (see the formulas at the top). */
static inline __attribute__((always_inline)) void finish_row(__m512i dot, const uint8_t *unit, int kind,
                                                             const Rows *rows, int64_t at, float *acc) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + codes_bytes(kind))));
    if (kind == Q8) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(rows->offsets[at]));
    __m512 out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(rows->scales[at])),
                                 _mm512_loadu_ps(acc));
    if (kind == Q4) {
        const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + 256 + 2 * COLUMNS)));
        out = _mm512_fmadd_ps(m, _mm512_set1_ps(rows->sums[at]), out);
    }
    _mm512_storeu_ps(acc, out);
}

/* ``count`` (1..ROW_GROUP, a constant once inlined) rows of block b, starting at row r, against two
 * tiles' units side by side (32 columns): each broadcast four inputs feed both. */
static inline __attribute__((always_inline)) void rows_against_units(
    const Rows *rows, int64_t chunk_rows, int64_t b, int64_t r, int count, const __m512i left[8],
    const __m512i right[8], const uint8_t *unit_left, const uint8_t *unit_right, int kind, float *acc_left,
    float *acc_right) {
    __m512i dots_left[ROW_GROUP], dots_right[ROW_GROUP];
    const int8_t *xq = rows->xq + (b * chunk_rows + r) * BLOCK;
#pragma GCC unroll 4
    for (int i = 0; i < count; i++) dots_left[i] = dots_right[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
#pragma GCC unroll 4
        for (int i = 0; i < count; i++) {
            int32_t four;
            memcpy(&four, xq + i * BLOCK + 4 * g, 4);
            const __m512i inputs = _mm512_set1_epi32(four);
            dots_left[i] = _mm512_dpbusd_epi32(dots_left[i], left[g], inputs);
            dots_right[i] = _mm512_dpbusd_epi32(dots_right[i], right[g], inputs);
        }
#pragma GCC unroll 4
    for (int i = 0; i < count; i++) {
        int64_t at = b * chunk_rows + r + i;
        finish_row(dots_left[i], unit_left, kind, rows, at, acc_left + (r + i) * COLUMNS);
        finish_row(dots_right[i], unit_right, kind, rows, at, acc_right + (r + i) * COLUMNS);
    }
}

#define ROWS_CASE(n) \
    case n: rows_against_units(rows, count, b, r, n, codes_left, codes_right, unit_left, unit_right, kind, \
                               acc_left, acc_right); break;

static inline __attribute__((always_inline)) void tiles_of_kind(
    const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right, int64_t blocks, int kind,
    float *acc_left, float *acc_right) {
    const int64_t bytes = unit_bytes(kind);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit_left = left + b * bytes, *unit_right = right + b * bytes;
        /* Ask for the units PREFETCH_UNITS ahead of both tiles: at one row the kernel is waiting on
         * memory, and the hardware prefetcher starts late on every new layer's short streams. */
        for (int64_t line = 0; line < bytes; line += 64) {
            _mm_prefetch((const char *)(unit_left + PREFETCH_UNITS * bytes + line), PREFETCH_HINT);
            _mm_prefetch((const char *)(unit_right + PREFETCH_UNITS * bytes + line), PREFETCH_HINT);
        }
        __m512i codes_left[8], codes_right[8];
        load_codes(unit_left, kind, codes_left);
        load_codes(unit_right, kind, codes_right);
        for (int64_t r = 0; r < count; r += ROW_GROUP) {
            int64_t left_rows = count - r;
            switch (left_rows < ROW_GROUP ? left_rows : ROW_GROUP) {
                ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4)
                default: break;
            }
        }
    }
}

/* The first `width` (1..16) of 16 float32 sums as bfloat16, as float_to_bf16 does, 16 at a time. */
static inline void store_bf16(const float *sums, int64_t width, uint16_t *out) {
    const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(sums));
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    __m512i rounded = _mm512_add_epi32(
        bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                               _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1))));
    rounded = _mm512_mask_or_epi32(_mm512_srli_epi32(rounded, 16), nan, _mm512_srli_epi32(bits, 16),
                                   _mm512_set1_epi32(0x40));
    const __m256i halves = _mm512_cvtepi32_epi16(rounded);
    if (width == COLUMNS)
        _mm256_storeu_si256((__m256i *)out, halves);
    else
        _mm256_mask_storeu_epi16(out, (__mmask16)((1u << width) - 1), halves);
}

#elif LEVEL == LEVEL_AVX2
#include "block_matmul_avx2.h"

#elif LEVEL == LEVEL_NEON
/* The NEON level (AArch64, Advanced SIMD). Its header meets the contract above: quantize_block_bf16,
 * quantize_block_f32, tiles_of_kind and store_bf16, the bits of the portable path (lrintf's
 * rounding is vcvtnq_s32_f32's; the fmas must be vfmaq_f32's, fused, never a multiply then an add; F16
 * scales widened with vcvt_f32_f16, which is exact). */
#include "block_matmul_neon.h"

#else
/* The portable path: the definition of every level's bits. */
static void quantize_floats(const float *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    float largest = 0.0f;
    for (int k = 0; k < BLOCK; k++) {
        float magnitude = fabsf(values[k]);
        largest = magnitude > largest ? magnitude : largest;
    }
    float inverse = block_inverse(largest);
    int32_t codes = 0;
    for (int k = 0; k < BLOCK; k++) {
        out[k] = (int8_t)lrintf(values[k] * inverse);
        codes += out[k];
    }
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}

static void quantize_block_bf16(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    float widened[BLOCK];
    for (int k = 0; k < BLOCK; k++) widened[k] = bf16_to_float(values[k]);
    quantize_floats(widened, out, scale, sum, offset);
}

static void quantize_block_f32(const float *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    quantize_floats(values, out, scale, sum, offset);
}

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

static void tile_portable(const Rows *rows, int64_t count, const uint8_t *units, int64_t blocks, int kind,
                          float *acc) {
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit = units + b * unit_bytes(kind);
        const uint16_t *halves = (const uint16_t *)(unit + codes_bytes(kind));
        for (int c = 0; c < COLUMNS; c++) {
            float d = half_to_float(halves[c]);
            for (int64_t r = 0; r < count; r++) {
                int64_t at = b * count + r;
                const int8_t *xr = rows->xq + at * BLOCK;
                int32_t dot = 0;
                for (int k = 0; k < BLOCK; k++) dot += code_at(unit, kind, c, k) * xr[k];
                float *out = acc + r * COLUMNS + c;
                *out = fmaf((float)dot, d * rows->scales[at], *out);
                if (kind == Q4) *out = fmaf(half_to_float(halves[COLUMNS + c]), rows->sums[at], *out);
            }
        }
    }
}

static inline void tiles_of_kind(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right,
                                 int64_t blocks, int kind, float *acc_left, float *acc_right) {
    tile_portable(rows, count, left, blocks, kind, acc_left);
    if (right != left) tile_portable(rows, count, right, blocks, kind, acc_right);
}

/* The first `width` (1..16) of 16 float32 sums as bfloat16, as float_to_bf16 rounds them. */
static inline void store_bf16(const float *sums, int64_t width, uint16_t *out) {
    for (int64_t c = 0; c < width; c++) out[c] = float_to_bf16(sums[c]);
}
#endif

/* One instance per kind of the level's tiles_of_kind, so that every test of the kind in it is decided
 * at compile time. */
static void tiles_q4(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right, int64_t blocks,
                     float *acc_left, float *acc_right) {
    tiles_of_kind(rows, count, left, right, blocks, Q4, acc_left, acc_right);
}

static void tiles_q8(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right, int64_t blocks,
                     float *acc_left, float *acc_right) {
    tiles_of_kind(rows, count, left, right, blocks, Q8, acc_left, acc_right);
}

/* The first `width` (1..16) of 16 float32 sums as y's float32: as they are, on every level. */
static inline void store_f32(const float *sums, int64_t width, float *out) {
    memcpy(out, sums, sizeof(float) * (size_t)width);
}

/* The dtype of a call's x and y (the same for both). */
enum { DTYPE_BF16 = 0, DTYPE_F32 = 1 };

/* `elements` elements of `dtype` past `base`. */
static inline const void *past(const void *base, int dtype, int64_t elements) {
    return (const char *)base + elements * (dtype == DTYPE_F32 ? 4 : 2);
}

/* Block b of row r of a chunk of `count` rows (x, of `dtype`, from the chunk's first row), quantized into
 * its block-major place. */
static inline void prepare_row_block(const void *x, int64_t x_stride, int dtype, int64_t count, int64_t r, int64_t b,
                                     Rows *rows) {
    int64_t at = b * count + r;
    const void *values = past(x, dtype, r * x_stride + b * BLOCK);
    if (dtype == DTYPE_F32)
        quantize_block_f32(values, rows->xq + at * BLOCK, rows->scales + at, rows->sums + at, rows->offsets + at);
    else
        quantize_block_bf16(values, rows->xq + at * BLOCK, rows->scales + at, rows->sums + at, rows->offsets + at);
}

static void prepare_rows(const void *x, int64_t x_stride, int dtype, int64_t count, int64_t blocks, Rows *rows) {
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t r = 0; r < count; r++) prepare_row_block(x, x_stride, dtype, count, r, b, rows);
}


#if AMX_BUILT
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t columns_bytes[16];
    uint8_t rows[16];
} TileConfig;

static void configure_tiles(void);

static sigjmp_buf probe_return;

static void probe_faulted(int signal_number) {
    (void)signal_number;
    siglongjmp(probe_return, 1);
}

/* Whether tile instructions run here: a VM can advertise AMX and still fault on it (SIGILL), so the
 * first use is tried with SIGILL caught for the while. */
static int tiles_run(void) {
    struct sigaction on_fault, previous;
    memset(&on_fault, 0, sizeof on_fault);
    on_fault.sa_handler = probe_faulted;
    sigemptyset(&on_fault.sa_mask);
    if (sigaction(SIGILL, &on_fault, &previous)) return 0;
    volatile int ran = 0;
    if (!sigsetjmp(probe_return, 1)) {
        configure_tiles();
        _tile_zero(0);
        _tile_release();
        ran = 1;
    }
    sigaction(SIGILL, &previous, NULL);
    return ran;
}

/* Linux hands out AMX's tile state only to a process that asks for it (once; its threads share it). */
static int amx_granted(void) {
    static int granted = -1;
    if (granted < 0)
        granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 && tiles_run();
    return granted;
}

/* Tiles 0-1: int32 sums of 16 rows × 16 columns, one block's, in turn; 4-5: those rows' 32 quantized
 * inputs of the block; 6-7: the unit's codes, 8 rows of 4 inputs × 16 columns: the unit's own layout
 * (see code_at), so Q8's codes load as stored. */
static void configure_tiles(void) {
    TileConfig config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int tile = 0; tile < 2; tile++) config.rows[tile] = 16, config.columns_bytes[tile] = 64;
    for (int tile = 4; tile < 6; tile++) config.rows[tile] = 16, config.columns_bytes[tile] = BLOCK;
    for (int tile = 6; tile < 8; tile++) config.rows[tile] = 8, config.columns_bytes[tile] = 64;
    _tile_loadconfig(&config);
}

/* A tile's codes as tile rows, every block's, at `codes` + b * *stride: Q8's as stored in the units;
 * Q4's split into their nibbles (registers g and g + 4) into `split` (blocks × 512 bytes). */
static inline __attribute__((always_inline)) const uint8_t *tile_codes(const uint8_t *units, int64_t blocks, int kind,
                                                                      uint8_t *split, int64_t *stride) {
    *stride = unit_bytes(kind);
    if (kind == Q8) return units;
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *unit = units + b * unit_bytes(kind);
        for (int64_t line = 0; line < unit_bytes(kind); line += 64)
            _mm_prefetch((const char *)(unit + PREFETCH_UNITS * unit_bytes(kind) + line), PREFETCH_HINT);
        for (int g = 0; g < 4; g++) {
            __m512i both = _mm512_loadu_si512((const void *)(unit + g * 64));
            _mm512_store_si512((void *)(split + b * 512 + g * 64), _mm512_and_si512(both, nibble));
            _mm512_store_si512((void *)(split + b * 512 + (g + 4) * 64),
                               _mm512_and_si512(_mm512_srli_epi16(both, 4), nibble));
        }
    }
    *stride = 512;
    return split;
}

/* Block b's integer sums of 16 rows (stored from a tile) into their float32 sums, held in registers:
 * the same float steps as finish_row. */
static inline __attribute__((always_inline)) void finish_rows(const int32_t *dots, const uint8_t *unit, int kind,
                                                             const Rows *rows, int64_t at, __m512 sum[16]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + codes_bytes(kind))));
    const __m512 m = kind == Q4 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(unit + 256 + 2 * COLUMNS)))
                                : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        __m512i dot = _mm512_load_si512((const void *)(dots + i * COLUMNS));
        if (kind == Q8) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(rows->offsets[at + i]));
        sum[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(rows->scales[at + i])),
                                 sum[i]);
        if (kind == Q4) sum[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(rows->sums[at + i]), sum[i]);
    }
}

/* Tile product of block b for 16 rows from r into tile `c` (a constant), its inputs through tiles a, w. */
#define TILE_PRODUCT(c, a, w, b)                                                   \
    do {                                                                           \
        _tile_zero(c);                                                             \
        _tile_loadd(a, rows->xq + ((b) * count + r) * BLOCK, BLOCK);               \
        _tile_loadd(w, codes + (b) * stride, 64);                                  \
        _tile_dpbsud(c, a, w);                                                     \
    } while (0)

/* One tile of 16 columns against `count` rows, 16 rows at a time, each group's float32 sums in
 * registers across the blocks while AMX computes the next block's integer sums (tiles 0 and 1 in
 * turn). Rows past `count` in the last group are computed from whatever follows and never stored. */
static inline __attribute__((always_inline)) void amx_tile_of_kind(const Rows *rows, int64_t count,
                                                                  const uint8_t *units, int64_t blocks, int kind,
                                                                  uint8_t *split, float *acc) {
    const int64_t bytes = unit_bytes(kind);
    int64_t stride;
    const uint8_t *codes = tile_codes(units, blocks, kind, split, &stride);
    int32_t dots[2][16 * COLUMNS] __attribute__((aligned(64)));
    for (int64_t r = 0; r < count; r += 16) {
        __m512 sum[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) sum[i] = _mm512_setzero_ps();
        TILE_PRODUCT(0, 4, 6, 0);
        /* Store block b's sums, start b + 1's product, then finish b while the product runs. */
        for (int64_t b = 0; b < blocks; b += 2) {
            _tile_stored(0, dots[0], 64);
            if (b + 1 < blocks) TILE_PRODUCT(1, 5, 7, b + 1);
            finish_rows(dots[0], units + b * bytes, kind, rows, b * count + r, sum);
            if (b + 1 < blocks) {
                _tile_stored(1, dots[1], 64);
                if (b + 2 < blocks) TILE_PRODUCT(0, 4, 6, b + 2);
                finish_rows(dots[1], units + (b + 1) * bytes, kind, rows, (b + 1) * count + r, sum);
            }
        }
        int64_t group = count - r < 16 ? count - r : 16;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            if (i < group) _mm512_storeu_ps(acc + (r + i) * COLUMNS, sum[i]);
    }
}

static void amx_tile_q4(const Rows *rows, int64_t count, const uint8_t *units, int64_t blocks, uint8_t *split,
                        float *acc) {
    amx_tile_of_kind(rows, count, units, blocks, Q4, split, acc);
}

static void amx_tile_q8(const Rows *rows, int64_t count, const uint8_t *units, int64_t blocks, uint8_t *split,
                        float *acc) {
    amx_tile_of_kind(rows, count, units, blocks, Q8, split, acc);
}
#endif

/* 1 where AMX's tile product is built in and Linux grants it to this process. */
int tercet_block_matmul_amx(void) {
#if AMX_BUILT
    return amx_granted();
#else
    return 0;
#endif
}

static void free_rows(Rows *rows) {
    free(rows->xq);
    free(rows->scales);
    free(rows->sums);
    free(rows->offsets);
}

static int allocate_rows(int64_t count, int64_t k, Rows *rows) {
    int64_t most = count < ROW_CHUNK ? count : ROW_CHUNK, blocks = k / BLOCK;
    /* AMX reads a block's rows 16 at a time: past the last block's last row, up to 15 rows more. */
    rows->xq = malloc((size_t)(most * k + 16 * BLOCK + 64));
    rows->scales = malloc(sizeof(float) * (size_t)(most * blocks + 16));
    rows->sums = malloc(sizeof(float) * (size_t)(most * blocks + 16));
    rows->offsets = malloc(sizeof(int32_t) * (size_t)(most * blocks + 16));
    if (rows->xq && rows->scales && rows->sums && rows->offsets) return 0;
    free_rows(rows);
    return 1;
}

/* The tiles `left` and `right` (the same tile when it is the last, odd one) into acc. */
static void multiply_tiles(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right,
                           int64_t blocks, int kind, float *acc_left, float *acc_right) {
    if (kind == Q8)
        tiles_q8(rows, count, left, right, blocks, acc_left, acc_right);
    else
        tiles_q4(rows, count, left, right, blocks, acc_left, acc_right);
}

/* A pair of tiles' float32 sums (acc) as y's rows from `first`, in y's dtype. */
static void store_pair(const float acc[2][COLUMNS * ROW_CHUNK], int64_t count, int64_t left, int64_t right, int64_t n,
                       void *y, int64_t y_stride, int dtype, int64_t first) {
    for (int64_t side = 0; side < (right != left ? 2 : 1); side++) {
        int64_t tile = left + side, width = n - tile * COLUMNS < COLUMNS ? n - tile * COLUMNS : COLUMNS;
        for (int64_t r = 0; r < count; r++) {
            void *out = (void *)past(y, dtype, (first + r) * y_stride + tile * COLUMNS);
            if (dtype == DTYPE_F32)
                store_f32(acc[side] + r * COLUMNS, width, out);
            else
                store_bf16(acc[side] + r * COLUMNS, width, out);
        }
    }
}

#if AMX_BUILT
/* The chunks of rows through AMX's integer sums: as the VNNI path below, with the rows quantized over
 * the threads (the work of a large call) and each thread's tile state configured and given back. */
static int amx_chunks(const void *x, int64_t x_stride, int64_t rows, int64_t blocks, const uint8_t *units, int kind,
                      int64_t n, void *y, int64_t y_stride, int dtype, Rows *prepared) {
    int64_t tiles = (n + COLUMNS - 1) / COLUMNS, bytes = unit_bytes(kind);
    int failed = 0;
#pragma omp parallel
    {
        configure_tiles();
        /* A tile's Q4 codes split into nibbles, every block's (see tile_codes). */
        uint8_t *split = kind == Q4 ? aligned_alloc(64, (size_t)(blocks * 512)) : NULL;
        if (kind == Q4 && !split) {
#pragma omp atomic write
            failed = 1;
        }
        for (int64_t first = 0; first < rows; first += ROW_CHUNK) {
            int64_t count = rows - first < ROW_CHUNK ? rows - first : ROW_CHUNK;
            /* Read x row by row (the order memory gives it fastest); written block-major. */
#pragma omp for schedule(static)
            for (int64_t row_block = 0; row_block < count * blocks; row_block++)
                prepare_row_block(past(x, dtype, first * x_stride), x_stride, dtype, count, row_block / blocks,
                                  row_block % blocks, prepared);
#pragma omp for schedule(static)
            for (int64_t pair = 0; pair < (tiles + 1) / 2; pair++) {
                if (kind == Q4 && !split) continue;
                float acc[2][COLUMNS * ROW_CHUNK];
                int64_t left = 2 * pair, right = left + 1 < tiles ? left + 1 : left;
                for (int side = 0; side < (right != left ? 2 : 1); side++)
                    (kind == Q8 ? amx_tile_q8 : amx_tile_q4)(prepared, count, units + (left + side) * blocks * bytes,
                                                            blocks, split, acc[side]);
                store_pair((const float(*)[COLUMNS * ROW_CHUNK])acc, count, left, right, n, y, y_stride, dtype,
                           first);
            }
        }
        free(split);
        _tile_release();
    }
    return failed;
}
#endif

/* x ([rows, k], x_stride apart) times the units into y ([rows, n], y_stride apart), both of `dtype`, the
 * integer sums from AMX (use_amx = 1, where tercet_block_matmul_amx() says it is here) or from VNNI (0). */
/* The shapes a caller in C can get wrong (the Python layer checks them too): refused, never read past. */
static int shapes_fit(int64_t rows, int64_t k, int64_t n, int kind, int64_t x_stride, int64_t y_stride) {
    const int strides_fit = rows <= 1 || (x_stride >= k && y_stride >= n);
    return rows >= 0 && k > 0 && k % BLOCK == 0 && n > 0 && (kind == Q4 || kind == Q8) && strides_fit;
}

static int block_matmul(const void *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units, int kind,
                        int64_t n, void *y, int64_t y_stride, int dtype, int use_amx) {
    if (!shapes_fit(rows, k, n, kind, x_stride, y_stride)) return 2;
    int64_t blocks = k / BLOCK, tiles = (n + COLUMNS - 1) / COLUMNS, bytes = unit_bytes(kind);
    Rows prepared;
    if (allocate_rows(rows, k, &prepared)) return 1;
#if AMX_BUILT
    if (use_amx && tercet_block_matmul_amx()) {
        int failed = amx_chunks(x, x_stride, rows, blocks, units, kind, n, y, y_stride, dtype, &prepared);
        free_rows(&prepared);
        return failed;
    }
#else
    (void)use_amx;
#endif
    for (int64_t first = 0; first < rows; first += ROW_CHUNK) {
        int64_t count = rows - first < ROW_CHUNK ? rows - first : ROW_CHUNK;
        prepare_rows(past(x, dtype, first * x_stride), x_stride, dtype, count, blocks, &prepared);
#pragma omp parallel for schedule(static)
        for (int64_t pair = 0; pair < (tiles + 1) / 2; pair++) {
            float acc[2][COLUMNS * ROW_CHUNK];
            memset(acc, 0, sizeof acc);
            int64_t left = 2 * pair, right = left + 1 < tiles ? left + 1 : left;
            multiply_tiles(&prepared, count, units + left * blocks * bytes, units + right * blocks * bytes, blocks,
                           kind, acc[0], acc[1]);
            store_pair((const float(*)[COLUMNS * ROW_CHUNK])acc, count, left, right, n, y, y_stride, dtype, first);
        }
    }
    free_rows(&prepared);
    return 0;
}

/* As tercet_block_matmul, with the integer sums from AMX (use_amx = 1, where tercet_block_matmul_amx()
 * says it is here) or from VNNI (0), whatever the rows: the tests' and benchmarks' way to hold the two
 * paths side by side. */
int tercet_block_matmul_on(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units,
                           int kind, int64_t n, uint16_t *y, int64_t y_stride, int use_amx) {
    return block_matmul(x, x_stride, rows, k, units, kind, n, y, y_stride, DTYPE_BF16, use_amx);
}

/* x: [rows, K] bfloat16 with row stride x_stride; units: [ceil(N / 16), K / 32] units of the
 * layout; y: [rows, N] bfloat16 with row stride y_stride. Returns 0, 1 when out of memory, or 2 for shapes
 * that do not fit (K not a positive multiple of 32, N not positive, an unknown kind, strides shorter
 * than a row). */
int tercet_block_matmul(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units,
                        int kind, int64_t n, uint16_t *y, int64_t y_stride) {
    return block_matmul(x, x_stride, rows, k, units, kind, n, y, y_stride, DTYPE_BF16, rows >= AMX_ROWS);
}

/* tercet_block_matmul_on over float32 rows: x and y float32, the sums stored as they are. */
int tercet_block_matmul_f32_on(const float *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units,
                               int kind, int64_t n, float *y, int64_t y_stride, int use_amx) {
    return block_matmul(x, x_stride, rows, k, units, kind, n, y, y_stride, DTYPE_F32, use_amx);
}

/* tercet_block_matmul over float32 rows: x [rows, K] float32 (row stride x_stride), y [rows, N] float32
 * (row stride y_stride), the same blocks of x quantized (a float32 row widened from bfloat16 gives the
 * bfloat16 row's xq) and the same float32 sums as the bfloat16 call, stored without rounding: rounded to
 * bfloat16 they are its y. The signature of a float32 model's one-call layer runner (native_layers.c). */
int tercet_block_matmul_f32(const float *x, int64_t x_stride, int64_t rows, int64_t k, const uint8_t *units, int kind,
                            int64_t n, float *y, int64_t y_stride) {
    return block_matmul(x, x_stride, rows, k, units, kind, n, y, y_stride, DTYPE_F32, rows >= AMX_ROWS);
}
