/* The small steps of a Llama layer between its matmuls, one call each, for bfloat16 on a CPU.
 *
 * torch runs each of them as several dispatched ops (RMSNorm: a cast, the norm, a cast back
 * and the weight; SiLU·mul: a split, SiLU, a multiply; rotary: a flip, two multiplies and an
 * add), about 30 per layer; at batch 1 their dispatch costs more than their arithmetic. Each
 * function here rounds where torch's bfloat16 ops round, so that the results are torch's, or
 * within one bfloat16 step where a float32 sum's order or exp's last bit differs:
 *
 * - rotary: bit for bit (elementwise products and a sum of two bfloat16, as torch does);
 * - RMSNorm: the mean of squares is summed in another order (one float32 rounding apart);
 * - SiLU: exp is a polynomial to about one float32 rounding.
 *
 * Every row is computed alone: a row's result does not depend on its batch. Rows are spread
 * over OpenMP threads only when there are enough of them to pay for waking the threads.
 *
 * Built a second time with -DTERCET_FLOAT32_ACTIVATIONS for float32 models (tercet_activation.h):
 * the same steps with no rounding between them, for the one-call runner of float32 steps.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tercet_activation.h"
#include "tercet_exp.h"

#define PARALLEL_FROM_ROWS 8

/* The sum of squares of a row, in one order whatever vector width the compiler targets, so that
 * builds for x86-64, x86-64-v3 and AVX-512 give the same bits: 16 partial sums, lane l summing the
 * squares of x[i] for i % 16 == l in the order of i, then added in a fixed tree (lane l + lane l+8,
 * then l + (l+4), l + (l+2), 0 + 1). The 16 are four vectors of 4 (GCC's vector type, at SSE's
 * width, which every x86-64 has); an `omp simd reduction` kept as many sums as one register held,
 * and the three builds differed in the last bit of the mean. (One vector of 16 kept the order too,
 * but at x86-64-v3 GCC kept it in memory: 2-3.5x as long.) */
typedef float float_x4 __attribute__((vector_size(16)));

static float sum_of_squares(const activation_t *x, int64_t width) {
    float_x4 sums[4] = {{0.0f}};
    float lane[16];
    int64_t i = 0;
#ifdef TERCET_FLOAT32_ACTIVATIONS
    for (; i + 16 <= width; i += 16)
        for (int q = 0; q < 4; q++) {
            float_x4 v;
            memcpy(&v, x + i + 4 * q, sizeof v);
            sums[q] += v * v;
        }
    memcpy(lane, sums, sizeof lane); /* sums[q][j] is lane 4q + j */
#else
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the bfloat16 pairs below are read little-endian"
#endif
    /* Two bfloat16 a 32-bit word, the even one in its low half: as floats, word << 16 and
     * word & 0xffff0000 (no shuffles, which SSE2 lacks for 16-bit lanes). */
    typedef uint32_t uint32_x4 __attribute__((vector_size(16)));
    for (; i + 16 <= width; i += 16)
        for (int h = 0; h < 2; h++) {
            uint32_x4 pairs;
            memcpy(&pairs, x + i + 8 * h, sizeof pairs);
            const uint32_x4 even_bits = pairs << 16, odd_bits = pairs & 0xffff0000u;
            float_x4 even, odd;
            memcpy(&even, &even_bits, sizeof even);
            memcpy(&odd, &odd_bits, sizeof odd);
            sums[2 * h] += even * even;
            sums[2 * h + 1] += odd * odd;
        }
    for (int h = 0; h < 2; h++) /* sums[2h][j] is lane 8h + 2j, sums[2h + 1][j] lane 8h + 2j + 1 */
        for (int j = 0; j < 4; j++) {
            lane[8 * h + 2 * j] = sums[2 * h][j];
            lane[8 * h + 2 * j + 1] = sums[2 * h + 1][j];
        }
#endif
    for (int l = 0; i + l < width; l++) {
        float value = load_activation(x[i + l]);
        lane[l] += value * value;
    }
    for (int half = 8; half >= 1; half /= 2)
        for (int l = 0; l < half; l++) lane[l] += lane[l + half];
    return lane[0];
}

static void rms_norm_row(const activation_t *x, const activation_t *weight, float eps, int64_t width,
                         activation_t *out) {
    float squares = sum_of_squares(x, width);
    float scale = 1.0f / sqrtf(squares / (float)width + eps);
#pragma omp simd
    for (int64_t i = 0; i < width; i++)
        out[i] = store_activation(load_activation(weight[i]) * round_activation(load_activation(x[i]) * scale));
}

/* hidden += addend (rounded to bfloat16, when addend is not NULL); out = RMSNorm(hidden) · weight.
 * hidden, addend and out are [rows, width] with their own row strides. */
void tercet_add_rms_norm(activation_t *hidden, int64_t hidden_stride, const activation_t *addend, int64_t addend_stride,
                         const activation_t *weight, float eps, int64_t rows, int64_t width, activation_t *out,
                         int64_t out_stride) {
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_FROM_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        activation_t *x = hidden + r * hidden_stride;
        if (addend) {
            const activation_t *a = addend + r * addend_stride;
#pragma omp simd
            for (int64_t i = 0; i < width; i++) x[i] = store_activation(load_activation(x[i]) + load_activation(a[i]));
        }
        rms_norm_row(x, weight, eps, width, out + r * out_stride);
    }
}

/* silu(g) = g / (1 + e^-g), with the exponent kept non-positive (written without branches, so
 * that the loop below vectorizes). */
static inline float silu(float g) {
    float e = exp_nonpositive(g < -g ? g : -g); /* e^-|g| */
    float numerator = g >= 0.0f ? g : g * e;
    return numerator / (1.0f + e);
}

#define SILU_CHUNK 256

/* out = SiLU(gate) · up, where each row of gate_up is [gate (width) | up (width)]. */
void tercet_silu_mul(const activation_t *gate_up, int64_t gate_up_stride, int64_t rows, int64_t width,
                     activation_t *out, int64_t out_stride) {
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_FROM_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        const activation_t *gate = gate_up + r * gate_up_stride, *up = gate + width;
        activation_t *o = out + r * out_stride;
        for (int64_t start = 0; start < width; start += SILU_CHUNK) {
            int64_t count = width - start < SILU_CHUNK ? width - start : SILU_CHUNK;
            float activated[SILU_CHUNK];
            for (int64_t i = 0; i < count; i++) activated[i] = load_activation(gate[start + i]);
#pragma omp simd
            for (int64_t i = 0; i < count; i++) activated[i] = silu(activated[i]);
            for (int64_t i = 0; i < count; i++)
                o[start + i] = store_activation(round_activation(activated[i]) * load_activation(up[start + i]));
        }
    }
}

/* Rotate, in place, the first `heads` heads (q then k) of each row of x by the rotate-half
 * convention: x · cos + swap(x) · signed_sin, with the tables' rows at each token's position. */
void tercet_rotary(activation_t *x, int64_t x_stride, int64_t rows, int64_t heads, int64_t head_dim,
                   const int64_t *positions, const activation_t *cos_table, const activation_t *signed_sin_table) {
    int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_FROM_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        const activation_t *cos = cos_table + positions[r] * head_dim;
        const activation_t *sin = signed_sin_table + positions[r] * head_dim;
        for (int64_t h = 0; h < heads; h++) {
            activation_t *v = x + r * x_stride + h * head_dim;
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                float first = load_activation(v[i]), second = load_activation(v[i + half]);
                float new_first = round_activation(first * load_activation(cos[i])) +
                                  round_activation(second * load_activation(sin[i]));
                float new_second = round_activation(second * load_activation(cos[i + half])) +
                                   round_activation(first * load_activation(sin[i + half]));
                v[i] = store_activation(new_first);
                v[i + half] = store_activation(new_second);
            }
        }
    }
}
