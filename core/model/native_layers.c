/* A Llama decoder's layers in one call, for a model whose every step already runs in C.
 *
 * Built twice (tercet_activation.h): for bfloat16 models, and with -DTERCET_FLOAT32_ACTIVATIONS
 * for the few-row steps of float32 models (their linear layers' few-rows kernel, paged_cpu's
 * attention over a float32 cache, and the float32 build of cpu_fused_ops.c).
 *
 * When the linear layers, the attention backend and the norms, SiLU·mul and rotary of a
 * bfloat16 model on a CPU are all C functions (the block kernel, paged_cpu, cpu_fused_ops.c),
 * a step from Python is about 30 small calls a layer, each paying for the interpreter, the
 * module machinery, torch's dispatch of the views and empties between them and ctypes. Here
 * the same functions are called in the same order with the same arguments, from a loop over
 * the layers: the output is the same bit for bit, without the per-call cost.
 *
 * The runner knows none of those functions: each comes as a pointer, with its own data
 * (a layer's packed weights, the cache's buffers), in the program built by native_layers.py.
 *
 * A step that serves LoRA adapters stays in the one call: after each projection, each segment
 * of rows sharing an adapter gets its delta added here (what the torch LoRA backend adds, in
 * the same bfloat16 roundings), so adapters cost their two small products and no detour.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "tercet_activation.h"

typedef int (*matmul_function)(const activation_t *x, int64_t x_stride, int64_t rows, int64_t k, const void *weights,
                               int kind, int64_t n, activation_t *y, int64_t y_stride);
typedef void (*norm_function)(activation_t *hidden, int64_t hidden_stride, const activation_t *addend,
                              int64_t addend_stride, const activation_t *weight, float eps, int64_t rows, int64_t width,
                              activation_t *out, int64_t out_stride);
typedef void (*silu_mul_function)(const activation_t *gate_up, int64_t gate_up_stride, int64_t rows, int64_t width,
                                  activation_t *out, int64_t out_stride);
typedef void (*rotary_function)(activation_t *x, int64_t x_stride, int64_t rows, int64_t heads, int64_t head_dim,
                                const int64_t *positions, const activation_t *cos_table,
                                const activation_t *signed_sin_table);
typedef int (*attention_function)(const void *q, int64_t q_token_stride, const void *k_new, int64_t k_token_stride,
                                  const void *v_new, int64_t v_token_stride, int act_dtype, void *k_cache,
                                  void *v_cache, void *k_scales, void *v_scales, int cache_dtype,
                                  const int64_t *req_to_token, int64_t table_width,
                                  const int64_t *rows, const int64_t *seq_lens, const int64_t *out_cache_loc,
                                  void *out, int batch, int num_heads, int num_kv_heads, int head_dim, float scale,
                                  int split_keys);

/* One linear layer: its function and what it multiplies by. */
typedef struct {
    matmul_function function;
    const void *weights;
    int64_t kind, out_features, in_features;
} Matmul;

typedef struct {
    const activation_t *input_norm, *post_attention_norm;
    Matmul qkv, o, gate_up, down;
    void *k_cache, *v_cache;
    void *k_scales, *v_scales; /* a quantized cache's row scales; else NULL */
} Layer;

typedef struct {
    norm_function norm;
    silu_mul_function silu_mul;
    rotary_function rotary;
    attention_function attention;
    const activation_t *cos_table, *signed_sin_table;
    const Layer *layers;
    int64_t num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim, split_keys, cache_dtype;
    float eps, scale;
} Program;

/* LoRA adapters (see tercet.lora.backend): a projection's delta for rows x is, per part,
 * ((x @ A^T)[:, rank_start:rank_stop] @ B^T) added into the part's columns, the scale folded
 * into B. A and B come transposed (A^T is [in, rank], B^T [part rank, out], bfloat16, each
 * contiguous) so that both products run along contiguous rows. */
typedef struct {
    const uint16_t *b_t;
    int64_t column, rank_start, rank_stop, out_features;
} LoraPart;

/* One projection of one layer under one adapter; rank 0: the adapter leaves it alone. */
typedef struct {
    const uint16_t *a_t;
    int64_t rank, num_parts;
    LoraPart parts[3];
} LoraProjection;

enum { QKV = 0, O = 1, GATE_UP = 2, DOWN = 3 };

typedef struct {
    LoraProjection projections[4];  /* QKV, O, GATE_UP, DOWN */
} LoraLayer;

/* Rows [start, stop) of the step, all of one adapter: its projections, layer by layer. */
typedef struct {
    int64_t start, stop;
    const LoraLayer *layers;
} LoraSegment;

/* The per-step inputs of the attention, as the backend prepared them, and the step's adapters. */
typedef struct {
    const int64_t *positions, *req_to_token, *rows, *seq_lens, *out_cache_loc;
    int64_t table_width;
    const LoraSegment *segments;
    int64_t num_segments, max_rank;
} Step;

/* The LoRA products run on blocks of ROW_BLOCK rows by tiles of TILE columns (see tile()). */
enum { ROW_BLOCK = 8, TILE = 16 };

enum { FAILED_MATMUL = 10, FAILED_ATTENTION = 20, OUT_OF_MEMORY = 30 };

static int multiply(const Matmul *layer, const activation_t *x, int64_t x_stride, int64_t rows, activation_t *y) {
    return layer->function(x, x_stride, rows, layer->in_features, layer->weights, (int)layer->kind,
                           layer->out_features, y, layer->out_features);
}

/* Scratch for one step of `rows` tokens: each intermediate of a layer, reused by every layer;
 * and, for a step with adapters, each thread's sums and shrunk rows. */
typedef struct {
    activation_t *normed, *qkv, *attended, *projected, *gate_up, *activated;
    float *lora;  /* per thread: ROW_BLOCK rows of sums (lora_widest wide), then of shrunk rows */
    uint16_t *zeros;  /* a row of zeros for the missing rows of a block */
    int64_t lora_widest, lora_per_thread;
} Scratch;

static void free_scratch(Scratch *s) {
    free(s->normed); free(s->qkv); free(s->attended); free(s->projected); free(s->gate_up); free(s->activated);
    free(s->lora); free(s->zeros);
}

static int allocate_scratch(const Program *p, const Step *step, int64_t rows, Scratch *s) {
    int64_t q_size = p->num_heads * p->head_dim, kv_size = p->num_kv_heads * p->head_dim;
    int64_t widest = q_size + 2 * kv_size > 2 * p->intermediate_size ? q_size + 2 * kv_size : 2 * p->intermediate_size;
    if (step->max_rank > widest) widest = step->max_rank;
    int64_t deepest = p->intermediate_size > q_size ? p->intermediate_size : q_size;
    if (p->hidden_size > deepest) deepest = p->hidden_size;
    if (step->max_rank > deepest) deepest = step->max_rank;
    s->lora_widest = widest;
    /* sums, then the shrunk rows (bfloat16, in float slots: room to spare) */
    s->lora_per_thread = step->num_segments ? ROW_BLOCK * (widest + step->max_rank) : 0;
    s->normed = malloc(sizeof(activation_t) * rows * p->hidden_size);
    s->qkv = malloc(sizeof(activation_t) * rows * (q_size + 2 * kv_size));
    s->attended = malloc(sizeof(activation_t) * rows * q_size);
    s->projected = malloc(sizeof(activation_t) * rows * p->hidden_size);
    s->gate_up = malloc(sizeof(activation_t) * rows * 2 * p->intermediate_size);
    s->activated = malloc(sizeof(activation_t) * rows * p->intermediate_size);
    s->lora = malloc(sizeof(float) * (omp_get_max_threads() * s->lora_per_thread + 1));
    s->zeros = calloc(deepest + 1, sizeof(uint16_t));
    if (s->normed && s->qkv && s->attended && s->projected && s->gate_up && s->activated && s->lora && s->zeros)
        return 0;
    free_scratch(s);
    return OUT_OF_MEMORY;
}

/* LoRA deltas: bfloat16 only. A float32 model's steps are never handed adapters (the runner's
 * Python side runs them layer by layer instead). */
#ifndef TERCET_FLOAT32_ACTIVATIONS
/* The products of a LoRA delta run in tiles of ROW_BLOCK rows by TILE columns over bfloat16
 * rows (missing rows of a block read a row of zeros): a tile's sums stay in registers over the
 * whole inner dimension, and each row of w is read once for all the tile's rows. */

#if defined(__AVX512BF16__)
#include <immintrin.h>

/* Lanes 2c and 2c+1 of a pair of w's rows (i, i+1) are column c of each: the operand of VDPBF16PS,
 * which adds x[i] w[i][c] + x[i+1] w[i+1][c] to lane c. */
static inline __m512bh interleaved(__m256i first, __m256i second) {
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
    return (__m512bh)_mm512_permutexvar_epi16(order, both);
}

/* A full-width tile: sums[r][0:TILE) = x[r] @ w[:, 0:TILE) for r < rows. */
static void tile(const uint16_t *const *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n, float *sums) {
    __m512 acc[ROW_BLOCK];
    for (int r = 0; r < ROW_BLOCK; r++) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < k; i += 2) {
        __m512bh pair = interleaved(_mm256_loadu_si256((const __m256i *)(w + i * n)),
                                    _mm256_loadu_si256((const __m256i *)(w + (i + 1) * n)));
        for (int r = 0; r < ROW_BLOCK; r++) {
            uint32_t both;
            memcpy(&both, x[r] + i, sizeof both);
            acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32((int)both), pair);
        }
    }
    if (i < k) {  /* an odd k: the last row of w, paired with zeros */
        __m512bh pair = interleaved(_mm256_loadu_si256((const __m256i *)(w + i * n)), _mm256_setzero_si256());
        for (int r = 0; r < ROW_BLOCK; r++)
            acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32((int)x[r][i]), pair);
    }
    for (int64_t r = 0; r < rows; r++) _mm512_storeu_ps(sums + r * n, acc[r]);
}
#else
static void tile(const uint16_t *const *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n, float *sums) {
    float acc[ROW_BLOCK][TILE] = {{0}};
    for (int64_t i = 0; i < k; i++)
        for (int r = 0; r < ROW_BLOCK; r++) {
            float x_ri = bf16_to_float(x[r][i]);
            for (int t = 0; t < TILE; t++) acc[r][t] += x_ri * bf16_to_float(w[i * n + t]);
        }
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < TILE; t++) sums[r * n + t] = acc[r][t];
}
#endif

/* The last columns, fewer than a tile: the same sums one by one. */
static void edge_tile(const uint16_t *const *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n, int64_t width,
                      float *sums) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < width; t++) {
            float sum = 0.0f;
            for (int64_t i = 0; i < k; i++) sum += bf16_to_float(x[r][i]) * bf16_to_float(w[i * n + t]);
            sums[r * n + t] = sum;
        }
}

/* sums[r][0..n) = x[r] @ w for r < rows: x the ROW_BLOCK rows (bfloat16, k long), w bfloat16
 * [k, n] contiguous. */
static void multiply_transposed(const uint16_t *const *x, int64_t rows, int64_t k, const uint16_t *w, int64_t n,
                                float *sums) {
    for (int64_t c0 = 0; c0 < n; c0 += TILE) {
        if (n - c0 >= TILE)
            tile(x, rows, k, w + c0, n, sums + c0);
        else
            edge_tile(x, rows, k, w + c0, n, n - c0, sums + c0);
    }
}

/* float_to_bf16 without a branch (the same value, NaN included), so that the loops over a
 * delta's columns vectorize. */
static inline uint16_t round_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u), quiet = bits | 0x00400000u;
    return (uint16_t)(((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded) >> 16);
}

/* y[0:rows] += the projection's delta for x's rows (at most ROW_BLOCK), rounded as torch's
 * bfloat16 ops round them: the shrunk rows to bfloat16, each part's delta to bfloat16, then the
 * sum. `zeros` is a row of zeros at least k and the rank long; `shrunk` holds ROW_BLOCK * rank
 * bfloat16s, `sums` ROW_BLOCK * max(rank, the widest part) floats. */
static void add_block_delta(const LoraProjection *lora, const uint16_t *x, int64_t x_stride, int64_t k,
                            int64_t rows, uint16_t *y, int64_t y_stride, const uint16_t *zeros, uint16_t *shrunk,
                            float *sums) {
    int64_t rank = lora->rank;
    const uint16_t *inputs[ROW_BLOCK], *middles[ROW_BLOCK];
    for (int64_t r = 0; r < ROW_BLOCK; r++) inputs[r] = r < rows ? x + r * x_stride : zeros;
    multiply_transposed(inputs, rows, k, lora->a_t, rank, sums);
    for (int64_t i = 0; i < rows * rank; i++) shrunk[i] = round_to_bf16(sums[i]);
    for (int64_t j = 0; j < lora->num_parts; j++) {
        const LoraPart *part = &lora->parts[j];
        int64_t n = part->out_features;
        for (int64_t r = 0; r < ROW_BLOCK; r++) middles[r] = (r < rows ? shrunk + r * rank : zeros) + part->rank_start;
        multiply_transposed(middles, rows, part->rank_stop - part->rank_start, part->b_t, n, sums);
        for (int64_t r = 0; r < rows; r++) {
            uint16_t *out = y + r * y_stride + part->column;
            const float *delta = sums + r * n;
            for (int64_t c = 0; c < n; c++)
                out[c] = round_to_bf16(bf16_to_float(out[c]) + bf16_to_float(round_to_bf16(delta[c])));
        }
    }
}

static int64_t blocks_of(const LoraSegment *segment, int64_t layer, int which) {
    if (segment->layers[layer].projections[which].rank == 0) return 0;
    return (segment->stop - segment->start + ROW_BLOCK - 1) / ROW_BLOCK;
}

/* Every segment's delta of projection `which` of layer `layer` (x is its input, y its output),
 * in blocks of ROW_BLOCK rows shared among the threads, each with its own scratch. */
static void add_deltas(const Step *step, int64_t layer, int which, const uint16_t *x, int64_t x_stride, int64_t k,
                       uint16_t *y, int64_t y_stride, Scratch *s) {
    int64_t tasks = 0;
    for (int64_t i = 0; i < step->num_segments; i++) tasks += blocks_of(&step->segments[i], layer, which);
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (int64_t task = 0; task < tasks; task++) {
        int64_t segment = 0, block = task;
        while (block >= blocks_of(&step->segments[segment], layer, which))
            block -= blocks_of(&step->segments[segment++], layer, which);
        const LoraSegment *run = &step->segments[segment];
        int64_t start = run->start + block * ROW_BLOCK;
        int64_t rows = run->stop - start < ROW_BLOCK ? run->stop - start : ROW_BLOCK;
        float *sums = s->lora + omp_get_thread_num() * s->lora_per_thread;
        add_block_delta(&run->layers[layer].projections[which], x + start * x_stride, x_stride, k, rows,
                        y + start * y_stride, y_stride, s->zeros, (uint16_t *)(sums + ROW_BLOCK * s->lora_widest),
                        sums);
    }
}
#else
static void add_deltas(const Step *step, int64_t layer, int which, const activation_t *x, int64_t x_stride, int64_t k,
                       activation_t *y, int64_t y_stride, Scratch *s) {
    (void)step; (void)layer; (void)which; (void)x; (void)x_stride; (void)k; (void)y; (void)y_stride; (void)s;
}
#endif

static int attention_block(const Program *p, int64_t index, const Step *step, activation_t *hidden, int64_t rows,
                           Scratch *s) {
    const Layer *layer = &p->layers[index];
    int64_t q_size = p->num_heads * p->head_dim, kv_size = p->num_kv_heads * p->head_dim;
    int64_t qkv_width = q_size + 2 * kv_size, H = p->hidden_size;
    p->norm(hidden, H, NULL, 0, layer->input_norm, p->eps, rows, H, s->normed, H);
    if (multiply(&layer->qkv, s->normed, H, rows, s->qkv)) return FAILED_MATMUL;
    add_deltas(step, index, QKV, s->normed, H, H, s->qkv, qkv_width, s);
    p->rotary(s->qkv, qkv_width, rows, p->num_heads + p->num_kv_heads, p->head_dim, step->positions, p->cos_table,
              p->signed_sin_table);
    if (p->attention(s->qkv, qkv_width, s->qkv + q_size, qkv_width, s->qkv + q_size + kv_size, qkv_width,
                     ACTIVATION_DTYPE_CODE, layer->k_cache, layer->v_cache, layer->k_scales,
                     layer->v_scales, (int)p->cache_dtype, step->req_to_token,
                     step->table_width, step->rows, step->seq_lens, step->out_cache_loc, s->attended, (int)rows,
                     (int)p->num_heads, (int)p->num_kv_heads, (int)p->head_dim, p->scale, (int)p->split_keys))
        return FAILED_ATTENTION;
    if (multiply(&layer->o, s->attended, q_size, rows, s->projected)) return FAILED_MATMUL;
    add_deltas(step, index, O, s->attended, q_size, q_size, s->projected, H, s);
    return 0;
}

/* hidden += attention's output; normed = RMSNorm(hidden); gate_up; SiLU·mul; down; hidden += down. */
static int mlp_block(const Program *p, int64_t index, const Step *step, activation_t *hidden, int64_t rows,
                     Scratch *s) {
    const Layer *layer = &p->layers[index];
    int64_t H = p->hidden_size, I = p->intermediate_size;
    p->norm(hidden, H, s->projected, H, layer->post_attention_norm, p->eps, rows, H, s->normed, H);
    if (multiply(&layer->gate_up, s->normed, H, rows, s->gate_up)) return FAILED_MATMUL;
    add_deltas(step, index, GATE_UP, s->normed, H, H, s->gate_up, 2 * I, s);
    p->silu_mul(s->gate_up, 2 * I, rows, I, s->activated, I);
    if (multiply(&layer->down, s->activated, I, rows, s->projected)) return FAILED_MATMUL;
    add_deltas(step, index, DOWN, s->activated, I, I, s->projected, H, s);
    for (int64_t i = 0; i < rows * H; i++)
        hidden[i] = store_activation(load_activation(hidden[i]) + load_activation(s->projected[i]));
    return 0;
}

/* Every layer of `program` over `hidden` ([rows, hidden_size] activations, contiguous, updated in
 * place), with the step's adapters' deltas added after each projection they adapt. Returns 0, or
 * a code: FAILED_MATMUL, FAILED_ATTENTION or OUT_OF_MEMORY (the step is lost either way). */
int tercet_run_layers(const Program *program, const Step *step, activation_t *hidden, int64_t rows) {
    if (rows <= 0) return 0;
    Scratch scratch;
    if (allocate_scratch(program, step, rows, &scratch)) return OUT_OF_MEMORY;
    int failed = 0;
    for (int64_t i = 0; i < program->num_layers && !failed; i++) {
        failed = attention_block(program, i, step, hidden, rows, &scratch);
        if (!failed) failed = mlp_block(program, i, step, hidden, rows, &scratch);
    }
    free_scratch(&scratch);
    return failed;
}
