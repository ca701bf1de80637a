/* y = x · Wᵀ for bfloat16 activations and GGUF block weights (Q4_0, Q4_1, Q8_0), read as stored.
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
 * A unit's codes are loaded once for every row of a chunk of x, so at 32 rows the kernel does
 * the multiply-adds of a dense matmul over a quarter of the bytes, and at one row it is as fast as
 * memory gives the codes. Output columns are spread over OpenMP threads; every column's sum runs
 * in the same order whatever the batch, its row's place in it and the thread count, so a row's
 * result does not depend on its batch-mates.
 *
 * Built without AVX-512 BF16 and VNNI (another CPU), the same layout runs through portable C with
 * the same integers and float steps (and with -DTERCET_PORTABLE, for tests); tercet then uses
 * torch's kernels instead (see tercet_block_matmul_vectorized).
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
/* Rows of x whose integer sums live in registers at once, against two tiles' 16 code registers
 * (measured against 5 and 6, which spill). */
#define ROW_GROUP 4
/* Rows handled per pass over the weights: their float32 sums and quantized blocks stay in L1. */
#define ROW_CHUNK 64
/* Units ahead of the one being multiplied whose bytes are prefetched (past a tile's end: the next
 * tile's), into L2 (PREFETCH_HINT). On Zen 4, one thread, one row, a Q4_1 matrix from memory: 1.8 ms
 * at 8 units into L1 (T0), 1.0-1.05 ms at 32-64 into L2 (T1): into L1, the lines came too late to
 * hide the memory's latency and too early to stay; 0.62-0.65x with two threads, unchanged at 32 rows. */
#define PREFETCH_UNITS 64
#define PREFETCH_HINT _MM_HINT_T1

enum { Q4 = 0, Q8 = 1 };

static int64_t codes_bytes(int kind) { return kind == Q4 ? 256 : 512; }

static int64_t unit_bytes(int kind) { return codes_bytes(kind) + (kind == Q4 ? 4 : 2) * COLUMNS; }

int tercet_block_matmul_vectorized(void) { return VECTORIZED; }

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

/* One block of 32 inputs: both builds compute the same xq, sx (a float product rounded half to even)
 * and sums. */
#if VECTORIZED
static void quantize_block(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    __m512 low = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)values)), 16));
    __m512 high = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(values + 16))), 16));
    float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
    __m512 inverse = _mm512_set1_ps(largest > 0.0f ? 127.0f / largest : 0.0f);
    __m512i q_low = _mm512_cvtps_epi32(_mm512_mul_ps(low, inverse));
    __m512i q_high = _mm512_cvtps_epi32(_mm512_mul_ps(high, inverse));
    _mm_storeu_si128((__m128i *)out, _mm512_cvtsepi32_epi8(q_low));
    _mm_storeu_si128((__m128i *)(out + 16), _mm512_cvtsepi32_epi8(q_high));
    int32_t codes = _mm512_reduce_add_epi32(_mm512_add_epi32(q_low, q_high));
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}
#else
static void quantize_block(const uint16_t *values, int8_t *out, float *scale, float *sum, int32_t *offset) {
    float largest = 0.0f;
    for (int k = 0; k < BLOCK; k++) {
        float magnitude = fabsf(bf16_to_float(values[k]));
        largest = magnitude > largest ? magnitude : largest;
    }
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    int32_t codes = 0;
    for (int k = 0; k < BLOCK; k++) {
        out[k] = (int8_t)lrintf(bf16_to_float(values[k]) * inverse);
        codes += out[k];
    }
    *scale = largest / 127.0f;
    *sum = *scale * (float)codes;
    *offset = 128 * codes;
}
#endif

static void prepare_rows(const uint16_t *x, int64_t x_stride, int64_t count, int64_t blocks, Rows *rows) {
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t r = 0; r < count; r++) {
            int64_t at = b * count + r;
            quantize_block(x + r * x_stride + b * BLOCK, rows->xq + at * BLOCK, rows->scales + at, rows->sums + at,
                           rows->offsets + at);
        }
}

/* The portable path: the same integer sums and the same float steps as the vectorized one, so the
 * same results. */
#if !VECTORIZED
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
#endif

#if VECTORIZED
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

/* One instance per kind, so that every test of the kind above is decided at compile time. */
static void tiles_q4(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right, int64_t blocks,
                     float *acc_left, float *acc_right) {
    tiles_of_kind(rows, count, left, right, blocks, Q4, acc_left, acc_right);
}

static void tiles_q8(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right, int64_t blocks,
                     float *acc_left, float *acc_right) {
    tiles_of_kind(rows, count, left, right, blocks, Q8, acc_left, acc_right);
}
#endif

static void free_rows(Rows *rows) {
    free(rows->xq);
    free(rows->scales);
    free(rows->sums);
    free(rows->offsets);
}

static int allocate_rows(int64_t count, int64_t k, Rows *rows) {
    int64_t most = count < ROW_CHUNK ? count : ROW_CHUNK, blocks = k / BLOCK;
    rows->xq = malloc((size_t)(most * k + 64));
    rows->scales = malloc(sizeof(float) * (size_t)(most * blocks + 1));
    rows->sums = malloc(sizeof(float) * (size_t)(most * blocks + 1));
    rows->offsets = malloc(sizeof(int32_t) * (size_t)(most * blocks + 1));
    if (rows->xq && rows->scales && rows->sums && rows->offsets) return 0;
    free_rows(rows);
    return 1;
}

/* The tiles `left` and `right` (the same tile when it is the last, odd one) into acc. */
static void multiply_tiles(const Rows *rows, int64_t count, const uint8_t *left, const uint8_t *right,
                           int64_t blocks, int kind, float *acc_left, float *acc_right) {
#if VECTORIZED
    if (kind == Q8)
        tiles_q8(rows, count, left, right, blocks, acc_left, acc_right);
    else
        tiles_q4(rows, count, left, right, blocks, acc_left, acc_right);
#else
    tile_portable(rows, count, left, blocks, kind, acc_left);
    if (right != left) tile_portable(rows, count, right, blocks, kind, acc_right);
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
        prepare_rows(x + first * x_stride, x_stride, count, blocks, &prepared);
#pragma omp parallel for schedule(static)
        for (int64_t pair = 0; pair < (tiles + 1) / 2; pair++) {
            float acc[2][COLUMNS * ROW_CHUNK];
            memset(acc, 0, sizeof acc);
            int64_t left = 2 * pair, right = left + 1 < tiles ? left + 1 : left;
            multiply_tiles(&prepared, count, units + left * blocks * bytes, units + right * blocks * bytes, blocks,
                           kind, acc[0], acc[1]);
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
