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

#if defined(__AVX512F__) && !defined(TERCET_PORTABLE)
#include <immintrin.h>
#define VECTORIZED 1
#else
#define VECTORIZED 0
#endif

int tercet_few_rows_f32_vectorized(void) { return VECTORIZED; }

#if VECTORIZED
/* `outs` consecutive outputs (their W rows from w) for `rows` rows of x; both are constants once
 * inlined, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void outputs_of(const float *x, int64_t x_stride, const int rows,
                                                             int64_t k, const float *w, const int outs, float *y,
                                                             int64_t y_stride) {
    __m512 acc[4][8];
    for (int j = 0; j < outs; j++)
        for (int r = 0; r < rows; r++) acc[j][r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 weights[4];
        for (int j = 0; j < outs; j++) {
            _mm_prefetch((const char *)(w + (j + AHEAD * outs) * k + i), _MM_HINT_T1);
            weights[j] = _mm512_loadu_ps(w + j * k + i);
        }
        for (int r = 0; r < rows; r++) {
            const __m512 inputs = _mm512_loadu_ps(x + r * x_stride + i);
            for (int j = 0; j < outs; j++) acc[j][r] = _mm512_fmadd_ps(weights[j], inputs, acc[j][r]);
        }
    }
    if (i < k) {
        const __mmask16 mask = (__mmask16)((1u << (k - i)) - 1);
        __m512 weights[4];
        for (int j = 0; j < outs; j++) weights[j] = _mm512_maskz_loadu_ps(mask, w + j * k + i);
        for (int r = 0; r < rows; r++) {
            const __m512 inputs = _mm512_maskz_loadu_ps(mask, x + r * x_stride + i);
            for (int j = 0; j < outs; j++) acc[j][r] = _mm512_fmadd_ps(weights[j], inputs, acc[j][r]);
        }
    }
    for (int j = 0; j < outs; j++)
        for (int r = 0; r < rows; r++) y[r * y_stride + j] = _mm512_reduce_add_ps(acc[j][r]);
}

static inline __attribute__((always_inline)) void outputs_range(const float *x, int64_t x_stride, const int rows,
                                                                int64_t k, const float *w, int64_t first,
                                                                int64_t last, float *y, int64_t y_stride) {
    if (rows > 8) {
        /* Two passes over each pair of outputs, 8 rows and the rest: the second reads the pair's weights from L1.
         * (One pass of 16 rows against one output at a time took 1.1-1.2x as long on a Xeon with AVX-512.) */
        const int rest = rows - 8;
        int64_t o = first;
        for (; o + 2 <= last; o += 2) {
            outputs_of(x, x_stride, 8, k, w + o * k, 2, y + o, y_stride);
            outputs_of(x + 8 * x_stride, x_stride, rest, k, w + o * k, 2, y + 8 * y_stride + o, y_stride);
        }
        for (; o < last; o++) {
            outputs_of(x, x_stride, 8, k, w + o * k, 1, y + o, y_stride);
            outputs_of(x + 8 * x_stride, x_stride, rest, k, w + o * k, 1, y + 8 * y_stride + o, y_stride);
        }
        return;
    }
    /* Four outputs a group up to 4 rows, two from 5: at most 16 accumulators. */
    const int outs = rows <= 4 ? 4 : 2;
    int64_t o = first;
    for (; o + outs <= last; o += outs) outputs_of(x, x_stride, rows, k, w + o * k, outs, y + o, y_stride);
    for (; o < last; o++) outputs_of(x, x_stride, rows, k, w + o * k, 1, y + o, y_stride);
}

#define ROWS_CASE(n) case n: outputs_range(x, x_stride, n, k, w, first, last, y, y_stride); break;
#else
/* The portable path: the same products, in plain C (for CPUs without AVX-512 and for tests). */
static void outputs_range(const float *x, int64_t x_stride, int rows, int64_t k, const float *w, int64_t first,
                          int64_t last, float *y, int64_t y_stride) {
    for (int64_t o = first; o < last; o++)
        for (int r = 0; r < rows; r++) {
            float sum = 0.0f;
            for (int64_t i = 0; i < k; i++) sum += x[r * x_stride + i] * w[o * k + i];
            y[r * y_stride + o] = sum;
        }
}
#endif

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
#else
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
