/*
 * float32 y = x W^T for a few rows of x, reading W once at the memory's speed.
 *
 * At 1 to 16 rows a float32 linear layer is a stream of its weights: each weight is used
 * once per row, a few multiply-adds against 4 bytes read. torch's kernels read them well
 * below the memory's speed there from a few rows on (a general product that packs W first;
 * on Zen 4 at one row too: a matrix-vector kernel on one thread). Here each thread takes runs of
 * consecutive output rows of W, so that its reads are one stream, and asks for the rows it
 * will need next into L2 while it computes. x's rows (a few KiB) stay in L1.
 *
 * For each group of outputs, every row of x keeps one vector of 16 partial sums per output;
 * the 16 are added at the end. The order of the sums depends on the shapes only, not on the
 * other rows of the call: a row's result is the same whatever rows come with it.
 *
 * Built once per machine by tercet (-O3 -march=native -fopenmp) and called through ctypes.
 */

#include <stdint.h>

#define MAX_ROWS 16
/* Output rows per chunk of work a thread takes: 64 rows of 576 floats is 144 KiB of W. */
#define CHUNK 64
/* How many groups of output rows ahead to ask for (measured on Zen 4, 2 threads, all of the
 * default model's float32 weights at 5 rows: no prefetch 32.9 ms, 8 groups ahead 19.1 ms,
 * 16 ahead 18.9 ms; at 8 rows 37.8, 20.3 and 20.5 ms. On a Xeon with AVX-512 8 ahead was best
 * too: at 8 rows 34.0 ms without, 21.2 at 8 ahead, 21.7 at 16). */
#define AHEAD 8

/* One algorithm, three builds that give the same bits: AVX-512F, AVX2 with FMA, and portable C.
 * Each row and output keeps 16 partial sums, lane l the fused multiply-adds of the inputs i with
 * i % 16 == l in the order of i, then added in one fixed order (sum_lanes). A build holds the 16
 * as PARTS vectors (AVX-512: one of 16; AVX2: two of 8, lanes 0-7 and 8-15; portable: 16 floats
 * and fmaf) and chooses how many rows and outputs it computes at once for its registers; neither
 * changes a sum. */
#if defined(__AVX512F__) && !defined(TERCET_PORTABLE)
#include <immintrin.h>
#define VECTORIZED 1
#define PARTS 1
typedef __m512 part_t;
#elif defined(__AVX2__) && defined(__FMA__) && !defined(TERCET_PORTABLE)
#include <immintrin.h>
#define VECTORIZED 2
#define PARTS 2
typedef __m256 part_t;
#else
#include <math.h>
#define VECTORIZED 0
#define PARTS 1
typedef struct { float lane[16]; } part_t;
#endif
#define PART_LANES (16 / PARTS)

#define INLINE static inline __attribute__((always_inline))

/* 1 for AVX-512F, 2 for AVX2 with FMA, 0 for the portable path (for CPUs with neither, and for tests). */
int tercet_few_rows_f32_vectorized(void) { return VECTORIZED; }

/* The helpers of a build: zero; load PART_LANES floats; load_first(p, count): p's first `count`
 * (any count: none where it is 0 or less, all from PART_LANES), zeros in the other lanes; fma_part:
 * a * b + acc in each lane, rounded once; sum_lanes: the sum of one row and output's 16 lanes.
 *
 * sum_lanes adds the 16 in one fixed tree, written out in every build (not left to a reduction
 * intrinsic, whose order is the compiler's): lane i + lane i+8 for i < 8, then i + (i+4) of those
 * for i < 4, then i + (i+2), then lane 0 + lane 1. (The order of GCC's _mm512_reduce_add_ps, which
 * the AVX-512 path used before: its results are unchanged.) */
#if VECTORIZED
INLINE void prefetch(const float *p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* keep_in_register: `load` ends in an empty asm that takes the vector in a register. Without it
 * GCC folds the load into every multiply-add that uses the vector, so a row's inputs were read
 * once per output: on Zen 4 (two loads a cycle), 1 thread, 1536x576, it took AVX-512 110 us at 3
 * rows against 63 with it, 190 against 142 at 8, 552 against 366 at 16; AVX2 at 3 rows 2 outputs
 * 8 loads for 6 multiply-adds against 5. */

/* the tree from its second step on, over its 8 lanes */
INLINE float sum8(__m256 v) {
    const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* i + (i+4) */
    const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));                          /* i + (i+2) */
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));                      /* 0 + 1 */
}
#endif

#if VECTORIZED == 1
INLINE part_t zero(void) { return _mm512_setzero_ps(); }
INLINE part_t load(const float *p) {
    part_t v = _mm512_loadu_ps(p);
    __asm__("" : "+v"(v)); /* in a register: see keep_in_register */
    return v;
}
INLINE part_t load_first(const float *p, int64_t count) {
    return _mm512_maskz_loadu_ps(count >= 16 ? 0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1), p);
}
INLINE part_t fma_part(part_t a, part_t b, part_t acc) { return _mm512_fmadd_ps(a, b, acc); }
INLINE float sum_lanes(const part_t v[1]) {
    const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[0]), 1));
    return sum8(_mm256_add_ps(_mm512_castps512_ps256(v[0]), high)); /* i + (i+8) */
}
#elif VECTORIZED == 2
INLINE part_t zero(void) { return _mm256_setzero_ps(); }
INLINE part_t load(const float *p) {
    part_t v = _mm256_loadu_ps(p);
    __asm__("" : "+x"(v)); /* in a register: see keep_in_register */
    return v;
}
INLINE part_t load_first(const float *p, int64_t count) {
    const __m256i n = _mm256_set1_epi32(count >= 8 ? 8 : count <= 0 ? 0 : (int)count);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(n, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
INLINE part_t fma_part(part_t a, part_t b, part_t acc) { return _mm256_fmadd_ps(a, b, acc); }
INLINE float sum_lanes(const part_t v[2]) { return sum8(_mm256_add_ps(v[0], v[1])); /* i + (i+8) */ }
#else
INLINE void prefetch(const float *p) { __builtin_prefetch(p, 0, 2); }
INLINE part_t zero(void) { return (part_t){{0.0f}}; }
INLINE part_t load_first(const float *p, int64_t count) {
    part_t v = {{0.0f}};
    for (int64_t l = 0; l < count && l < 16; l++) v.lane[l] = p[l];
    return v;
}
INLINE part_t load(const float *p) { return load_first(p, 16); }
INLINE part_t fma_part(part_t a, part_t b, part_t acc) {
    for (int l = 0; l < 16; l++) acc.lane[l] = fmaf(a.lane[l], b.lane[l], acc.lane[l]);
    return acc;
}
INLINE float sum_lanes(const part_t v[1]) {
    part_t t = v[0];
    for (int width = 8; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) t.lane[l] += t.lane[l + width];
    return t.lane[0];
}
#endif

/* How many rows of x and outputs a build computes at once: up to PASS_ROWS rows in one pass over
 * the weights; more, in passes of at most PASS_ROWS rows as even as can be (the later passes read
 * the weights from L1); `outs_for(pass rows)` outputs at a time. A row and output keeps PARTS
 * vectors of sums in registers: AVX-512 has 32 of 16 lanes, AVX2 16 of 8 (3 rows and 2 outputs:
 * 12 sums, 2 weights and 1 input, 5 loads for 6 multiply-adds; measured on Zen 4 against passes
 * of 4 or 6 rows and 1 output: 1536x576 at 8 rows 174 us against 213, at 16 357 against 500). */
#if VECTORIZED == 2
#define PASS_ROWS 3
INLINE int outs_for(int rows) { return rows == 1 ? 4 : rows == 2 ? 3 : 2; }
#else
/* (One pass of 16 rows against one output at a time took 1.1-1.2x as long on a Xeon with AVX-512.) */
#define PASS_ROWS 8
INLINE int outs_for(int rows) { return rows <= 4 ? 4 : 2; }
#endif

/* `outs` consecutive outputs (their W rows from w) for `rows` rows of x; both are constants once
 * inlined, so the sums stay in registers. */
/* Sixteen inputs from `at` (the first `count` of them where `tail`, zeros past them: a constant once
 * inlined, so the full blocks keep plain loads) of every row and output into their lanes' sums. */
INLINE void sixteen_inputs(const float *x, int64_t x_stride, const int rows, int64_t k, const float *w,
                           const int outs, int64_t at, int tail, int64_t count, part_t acc[4][PASS_ROWS][PARTS]) {
    for (int p = 0; p < PARTS; p++) {
        const int64_t part = at + p * PART_LANES;
        part_t weights[4];
        for (int j = 0; j < outs; j++) weights[j] = tail ? load_first(w + j * k + part, count - p * PART_LANES)
                                                         : load(w + j * k + part);
        for (int r = 0; r < rows; r++) {
            const part_t inputs = tail ? load_first(x + r * x_stride + part, count - p * PART_LANES)
                                       : load(x + r * x_stride + part);
            for (int j = 0; j < outs; j++) acc[j][r][p] = fma_part(weights[j], inputs, acc[j][r][p]);
        }
    }
}

INLINE void outputs_of(const float *x, int64_t x_stride, const int rows, int64_t k, const float *w, const int outs,
                       float *y, int64_t y_stride) {
    part_t acc[4][PASS_ROWS][PARTS];
    for (int j = 0; j < outs; j++)
        for (int r = 0; r < rows; r++)
            for (int p = 0; p < PARTS; p++) acc[j][r][p] = zero();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        for (int j = 0; j < outs; j++) prefetch(w + (j + AHEAD * outs) * k + i);
        sixteen_inputs(x, x_stride, rows, k, w, outs, i, 0, 16, acc);
    }
    /* the last k % 16 inputs: zeros in the other lanes, whose sums gain 0 * 0 */
    if (i < k) sixteen_inputs(x, x_stride, rows, k, w, outs, i, 1, k - i, acc);
    for (int j = 0; j < outs; j++)
        for (int r = 0; r < rows; r++) y[r * y_stride + j] = sum_lanes(acc[j][r]);
}

/* `outs` outputs for `rows` rows, more than PASS_ROWS: in passes of `size` rows then of size - 1 */
INLINE void passes_of(const float *x, int64_t x_stride, const int rows, int64_t k, const float *w, const int outs,
                      float *y, int64_t y_stride) {
    const int passes = (rows + PASS_ROWS - 1) / PASS_ROWS, size = (rows + passes - 1) / passes;
    const int full = rows - passes * (size - 1); /* passes of `size` rows */
    int r = 0;
    for (int pass = 0; pass < full; pass++, r += size)
        outputs_of(x + r * x_stride, x_stride, size, k, w, outs, y + r * y_stride, y_stride);
    for (int pass = full; pass < passes; pass++, r += size - 1)
        outputs_of(x + r * x_stride, x_stride, size - 1, k, w, outs, y + r * y_stride, y_stride);
}

/* outputs first..last-1 for `rows` rows */
INLINE void outputs_range(const float *x, int64_t x_stride, const int rows, int64_t k, const float *w, int64_t first,
                          int64_t last, float *y, int64_t y_stride) {
    int64_t o = first;
    if (rows > PASS_ROWS) {
        const int passes = (rows + PASS_ROWS - 1) / PASS_ROWS, outs = outs_for((rows + passes - 1) / passes);
        for (; o + outs <= last; o += outs) passes_of(x, x_stride, rows, k, w + o * k, outs, y + o, y_stride);
        for (; o < last; o++) passes_of(x, x_stride, rows, k, w + o * k, 1, y + o, y_stride);
        return;
    }
    const int outs = outs_for(rows);
    for (; o + outs <= last; o += outs) outputs_of(x, x_stride, rows, k, w + o * k, outs, y + o, y_stride);
    for (; o < last; o++) outputs_of(x, x_stride, rows, k, w + o * k, 1, y + o, y_stride);
}

#define ROWS_CASE(n) case n: outputs_range(x, x_stride, n, k, w, first, last, y, y_stride); break;

/* x: [rows, k] float32 with row stride x_stride; w: [n, k] float32, contiguous; y: [rows, n]
 * float32 with row stride y_stride. Returns 0, or 1 for a row count outside 1..MAX_ROWS. */
int tercet_few_rows_f32(const float *x, int64_t x_stride, int64_t rows, int64_t k, const float *w, int64_t n,
                        float *y, int64_t y_stride) {
    if (rows < 1 || rows > MAX_ROWS) return 1;
    const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
        const int64_t first = chunk * CHUNK, last = first + CHUNK < n ? first + CHUNK : n;
#if VECTORIZED
        switch (rows) { ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5) ROWS_CASE(6) ROWS_CASE(7)
                        ROWS_CASE(8) ROWS_CASE(9) ROWS_CASE(10) ROWS_CASE(11) ROWS_CASE(12) ROWS_CASE(13)
                        ROWS_CASE(14) ROWS_CASE(15) ROWS_CASE(16) }
#else /* one copy for any row count (the sums are the same; only the speed would gain) */
        outputs_range(x, x_stride, (int)rows, k, w, first, last, y, y_stride);
#endif
    }
    return 0;
}

/* The same product with the signature of a matmul of tercet's one-call layer runner
 * (core/model/native_layers.c, float32 build): `weights` is W, `kind` is unused. */
int tercet_few_rows_f32_matmul(const float *x, int64_t x_stride, int64_t rows, int64_t k, const void *weights,
                               int kind, int64_t n, float *y, int64_t y_stride) {
    (void)kind;
    return tercet_few_rows_f32(x, x_stride, rows, k, (const float *)weights, n, y, y_stride);
}
