/*
 * Decode attention over the paged KV cache, read in place.
 *
 * One new token per sequence. For each (sequence, KV head) the new token's K
 * and V are written to its slot first, then the query heads that share that
 * KV head attend over the sequence's keys, found slot by slot through the
 * req-to-token table: no gather of pages, no float copy of the cache. Keys and
 * values stay in the cache's dtype (bfloat16, float32, or int8 or e4m3 with a scale
 * a row: quantized_rows.h) and are widened in registers; scores, softmax and the
 * weighted sum are float32.
 *
 * A sequence's keys are cut into splits of a fixed number of keys; each split
 * keeps its own running maximum, sum and weighted sum (the online softmax), and
 * the splits are joined in order. The split size does not depend on the batch
 * or the thread count, so a sequence's result is the same whatever runs beside
 * it. Work items (sequence, split, and one KV head or all of them) are spread over
 * OpenMP threads.
 *
 * A step with prompt tokens has runs of consecutive rows of one sequence: those go 16 at a time
 * through prompt_tiles.h, which gives each row the bits it would have here alone. Where the tiles alone
 * give every thread work, an item is a whole tile (every split, then its rows joined), so that a long
 * prompt's partials never go through memory; else an item is one split of a tile. The same bits either way.
 *
 * At a level with AVX512-BF16, a bfloat16 cache with head sizes that are multiples of 32 is read with
 * bfloat16 dot products (BF16_DOTS, vec16_avx512.h): the queries and the softmax's weights rounded to
 * bfloat16, the sums float32; decode and prompt rows alike. Those levels' bits differ from the others'.
 *
 * Built by tercet's native build (see build.py) for each instruction-set level:
 * AVX-512, AVX2 (with FMA) and NEON (aarch64) take the vector path below for
 * head sizes that are multiples of 16, with the same bits on all three; other
 * head sizes and the portable level take the general C loop. Called through ctypes with the
 * tensors' data pointers.
 */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tercet_bfloat16.h"
#include "tercet_exp.h"

#include "cache_dtypes.h"
#include "quantized_rows.h"

/* `width` values of `dtype` from element `offset` of `base`, widened to float32 into `out`: a cache row
 * (offset row × width) or a strided source row (q, k_new or v_new may be views into one projection). */
static inline void load_row(const void *base, int dtype, int64_t offset, int width, float *out) {
    if (dtype == DTYPE_BFLOAT16) {
        const uint16_t *row = (const uint16_t *)base + offset;
#pragma omp simd
        for (int d = 0; d < width; d++) out[d] = bf16_to_float(row[d]);
    } else {
        memcpy(out, (const float *)base + offset, sizeof(float) * (size_t)width);
    }
}

/* Cache row `row` (one token's K or V of one KV head, `width` values) as float32 into `out`. */
static inline void load_cache_row(const void *base, const uint16_t *scales, int dtype, int64_t row, int width,
                                  float *out) {
    if (is_quantized(dtype))
        dequantize_row(base, dtype, row * width, width, row_factor(scales, dtype, row), out);
    else
        load_row(base, dtype, row * width, width, out);
}

/* Row `index` of a [rows, width] array of `dtype`, from float32 `values` (bfloat16 rounded as torch does). */
static inline void store_row(void *base, int dtype, int64_t index, int width, const float *values) {
    if (dtype == DTYPE_BFLOAT16) {
        uint16_t *row = (uint16_t *)base + index * width;
        for (int d = 0; d < width; d++) row[d] = float_to_bf16(values[d]);
    } else {
        memcpy((float *)base + index * width, values, sizeof(float) * (size_t)width);
    }
}

/* Keys attended together: one vector register of scores per query head. */
#define BLOCK 16
#define MAX_HEAD_DIM 256
#define MAX_GROUP 16
/* The most query-head values (heads × head size) one work item attends for at once. */
#define MAX_ITEM_WIDTH (MAX_GROUP * MAX_HEAD_DIM)

/* Moves a head's running maximum, and its running sum with it, up to the largest of a block's
 * `count` scores (the online softmax); returns the factor the head's weighted sum must be scaled
 * by first (1 when the maximum did not move). */
static inline float raise_maximum(const float *score, int count, float *maximum, float *sum) {
    float block_max = *maximum;
#pragma omp simd reduction(max : block_max)
    for (int j = 0; j < count; j++) block_max = score[j] > block_max ? score[j] : block_max;
    float rescale = 1.0f;
    if (block_max > *maximum) {
        rescale = exp_nonpositive(*maximum - block_max);
        *sum *= rescale;
        *maximum = block_max;
    }
    return rescale;
}

/* A block's weights added in order, not as a vector reduction (whose order would be the compiler's
 * and its vector width's): the same sum on every ISA. */
static inline float sum_in_order(const float *weight) {
    float total = 0.0f;
    for (int j = 0; j < BLOCK; j++) total += weight[j];
    return total;
}

/* One block's scores of one query head become its softmax weights, in place (zero past `count`),
 * against the running maximum and sum; returns raise_maximum's factor. */
static inline float softmax_block(float *score, int count, float *maximum, float *sum) {
    const float rescale = raise_maximum(score, count, maximum, sum), block_max = *maximum;
#pragma omp simd
    for (int j = 0; j < BLOCK; j++) score[j] = j < count ? exp_nonpositive(score[j] - block_max) : 0.0f;
    *sum += sum_in_order(score);
    return rescale;
}

/* The vector path, for head sizes that are multiples of 16: the same algorithm on AVX-512, on AVX2
 * with FMA and on NEON, written over vec16 (16 float32 lanes; vec16.h, with one file per instruction
 * set: vec16_avx512.h, vec16_avx2.h, vec16_neon.h). Every lane sees the same float operations in the
 * same order on all of them, so they give the same bits (x86 against aarch64 under qemu:
 * tests/native/test_aarch64_attention.py). -DTERCET_PORTABLE leaves only the general path
 * (attend_split). */
#if !defined(TERCET_PORTABLE) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || \
                                   (defined(__aarch64__) && defined(__ARM_NEON)))
#define VECTOR_PATH 1
#include "vec16.h"

/* softmax_block with exp16: the same weights, sum and factor. */
VECTOR_INLINE float softmax_block16(float *score, int count, float *maximum, float *sum) {
    const float rescale = raise_maximum(score, count, maximum, sum);
    storeu16(score, exp16(sub16(loadu16(score), broadcast16(*maximum))));
    for (int j = count; j < BLOCK; j++) score[j] = 0.0f;
    *sum += sum_in_order(score);
    return rescale;
}

/* One block's scores (`count` keys, their cache rows in `rows`) for each of the `group` query heads
 * (`query`, scaled), BLOCK apart in `scores`; a quantized row's factor (`k_factors`, zero past `count`)
 * multiplies its key's score, the products summed over its stored values. */
VECTOR_INLINE void block_scores(const float *query, const int group, const int head_dim, const void *k_cache,
                                const int cache_dtype, const int64_t *rows, const float *k_factors, int count,
                                float *scores) {
    const int chunks = head_dim / 16;
    vec16 partials[MAX_GROUP * BLOCK]; /* each key's 16 partial sums of its score, per head */
    for (int j = 0; j < count; j++) {
        vec16 dots[MAX_GROUP];
        for (int g = 0; g < group; g++) dots[g] = zero16();
        for (int c = 0; c < chunks; c++) {
            vec16 key = load_stored16(k_cache, cache_dtype, rows[j] + c * 16);
            for (int g = 0; g < group; g++)
                dots[g] = fma16(loadu16(query + (int64_t)(g * chunks + c) * 16), key, dots[g]);
        }
        for (int g = 0; g < group; g++) partials[g * BLOCK + j] = dots[g];
    }
    for (int j = count; j < BLOCK; j++)
        for (int g = 0; g < group; g++) partials[g * BLOCK + j] = zero16();
    for (int g = 0; g < group; g++) {
        const vec16 sums_of_products = sum_each(partials + g * BLOCK);
        storeu16(scores + g * BLOCK,
                 is_quantized(cache_dtype) ? mul16(sums_of_products, loadu16(k_factors)) : sums_of_products);
    }
}

/* One block of keys (their cache rows in `rows`, and for a quantized cache their rows' factors, zero past
 * `count`) for one KV head and its `group` query heads (`query`, scaled): the scores, the softmax against
 * the running maxima and sums, and the values added into `acc` (group × head_dim / 16 vectors). Each key
 * row is read once for the scores and once for the values. A quantized row's factor multiplies its key's
 * score and its value's weight (after the softmax's sum). */
VECTOR_INLINE void attend_block(const float *query, const int group, const int head_dim, const void *k_cache,
                                const void *v_cache, const int cache_dtype, const int64_t *rows,
                                const float *k_factors, const float *v_factors, int count, float *maxima,
                                float *sums, vec16 *acc) {
    const int chunks = head_dim / 16;
    float scores[MAX_GROUP * BLOCK];
    block_scores(query, group, head_dim, k_cache, cache_dtype, rows, k_factors, count, scores);
    for (int g = 0; g < group; g++) {
        float rescale = softmax_block16(scores + g * BLOCK, count, maxima + g, sums + g);
        if (rescale != 1.0f) {
            vec16 factor = broadcast16(rescale);
            for (int c = 0; c < chunks; c++) acc[g * chunks + c] = mul16(acc[g * chunks + c], factor);
        }
        if (is_quantized(cache_dtype))
            for (int j = 0; j < count; j++) scores[g * BLOCK + j] *= v_factors[j];
    }
    for (int j = 0; j < count; j++) {
        for (int c = 0; c < chunks; c++) {
            vec16 value = load_stored16(v_cache, cache_dtype, rows[j] + c * 16);
            for (int g = 0; g < group; g++)
                acc[g * chunks + c] = fma16(broadcast16(scores[g * BLOCK + j]), value, acc[g * chunks + c]);
        }
    }
}

/* Whether a call's rows take bfloat16 dot products (vec16_avx512.h's BF16_DOTS, where the level has
 * them): a bfloat16 cache, whose keys and values are bfloat16 already, and a head size of whole pairs of
 * lanes. The queries and the softmax's weights are rounded to bfloat16 for them; the scores, the softmax
 * and the sums stay float32. */
#if defined(BF16_DOTS)
#define USES_BF16_DOTS(cache_dtype, head_dim) ((cache_dtype) == DTYPE_BFLOAT16 && (head_dim) % 32 == 0)

/* block_scores on bfloat16 dot products: lane l of a key's partial sums holds the pairs of dimensions
 * 2l, 2l + 1, then 32 + 2l, 33 + 2l, ... (`query_pairs`: each head's query rounded to bfloat16, 32
 * dimensions a vector), folded by sum_each as before. */
VECTOR_INLINE void block_scores_bf16(const pairs16 *query_pairs, const int group, const int head_dim,
                                     const uint16_t *k_cache, const int64_t *rows, int count, float *scores) {
    const int chunks = head_dim / 32;
    vec16 partials[MAX_GROUP * BLOCK];
    for (int j = 0; j < count; j++) {
        vec16 dots[MAX_GROUP];
        for (int g = 0; g < group; g++) dots[g] = zero16();
        for (int c = 0; c < chunks; c++) {
            const pairs16 key = load_pairs16(k_cache + rows[j] + c * 32);
            for (int g = 0; g < group; g++) dots[g] = dot_pairs16(dots[g], query_pairs[g * chunks + c], key);
        }
        for (int g = 0; g < group; g++) partials[g * BLOCK + j] = dots[g];
    }
    for (int j = count; j < BLOCK; j++)
        for (int g = 0; g < group; g++) partials[g * BLOCK + j] = zero16();
    for (int g = 0; g < group; g++) storeu16(scores + g * BLOCK, sum_each(partials + g * BLOCK));
}

/* attend_block on bfloat16 dot products: the scores as block_scores_bf16 forms them, the same softmax,
 * then the values two keys at a time, key order kept: lane d adds (weight j, weight j + 1) times
 * (value j, value j + 1) of dimension d, the weights rounded to bfloat16 (a key past `count` adds a zero
 * weight times a zero value). */
VECTOR_INLINE void attend_block_bf16(const pairs16 *query_pairs, const int group, const int head_dim,
                                     const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *rows, int count,
                                     float *maxima, float *sums, vec16 *acc) {
    const int chunks = head_dim / 16;
    float scores[MAX_GROUP * BLOCK];
    uint16_t weights[MAX_GROUP * BLOCK];
    block_scores_bf16(query_pairs, group, head_dim, k_cache, rows, count, scores);
    for (int g = 0; g < group; g++) {
        float rescale = softmax_block16(scores + g * BLOCK, count, maxima + g, sums + g);
        if (rescale != 1.0f) {
            vec16 factor = broadcast16(rescale);
            for (int c = 0; c < chunks; c++) acc[g * chunks + c] = mul16(acc[g * chunks + c], factor);
        }
        store_bf16x16(weights + g * BLOCK, round_bf16x16(loadu16(scores + g * BLOCK)));
    }
    for (int j = 0; j < count; j += 2) {
        for (int c = 0; c < chunks; c++) {
            const pairs16 value = interleave16(load_bf16x16(v_cache + rows[j] + c * 16),
                                               j + 1 < count ? load_bf16x16(v_cache + rows[j + 1] + c * 16)
                                                             : zero_bf16x16());
            for (int g = 0; g < group; g++)
                acc[g * chunks + c] = dot_broadcast_pair16(acc[g * chunks + c], value, weights + g * BLOCK + j);
        }
    }
}

/* Each of `heads` query heads' values (head_dim apart in `queries`) rounded to bfloat16, 32 a vector. */
VECTOR_INLINE void round_queries(const float *queries, int heads, int head_dim, pairs16 *query_pairs) {
    for (int i = 0; i < heads * head_dim / 32; i++)
        query_pairs[i] = round_pairs16(loadu16(queries + i * 32), loadu16(queries + i * 32 + 16));
}
#else
#define USES_BF16_DOTS(cache_dtype, head_dim) 0
#endif

/* The next block's rows (from `start` + BLOCK, before `last`) of `heads` KV heads from first_head, asked
 * for while this block computes. They are scattered over pages; into L2 (T1): on Zen 4, 32 rows of
 * 256-1024 tokens took 0.7-0.8x the time of asking into L1. */
VECTOR_INLINE void prefetch_next_block(const void *k_cache, const void *v_cache, int element, const int64_t *slots,
                                       int num_kv_heads, int first_head, int heads, int head_dim, int64_t start,
                                       int64_t last) {
    const int64_t next_count = last - start - BLOCK < BLOCK ? last - start - BLOCK : BLOCK;
    for (int64_t j = 0; j < next_count; j++) {
        int64_t row = (slots[start + BLOCK + j] * num_kv_heads + first_head) * head_dim * element;
        for (int64_t byte = 0; byte < (int64_t)heads * head_dim * element; byte += 64) {
            PREFETCH_L2((const char *)k_cache + row + byte);
            PREFETCH_L2((const char *)v_cache + row + byte);
        }
    }
}

/* The block's `count` cache rows of KV head `head` (offsets, in values), and for a quantized cache their
 * rows' factors (zero past `count`). */
VECTOR_INLINE void block_rows(const int64_t *slots, int64_t start, int count, int num_kv_heads, int head, int head_dim,
                              int cache_dtype, const uint16_t *k_scales, const uint16_t *v_scales, int64_t *rows,
                              float *k_factors, float *v_factors) {
    for (int j = 0; j < count; j++) {
        const int64_t row = slots[start + j] * num_kv_heads + head;
        rows[j] = row * head_dim;
        if (is_quantized(cache_dtype)) {
            k_factors[j] = row_factor(k_scales, cache_dtype, row);
            v_factors[j] = row_factor(v_scales, cache_dtype, row);
        }
    }
    for (int j = count; j < BLOCK; j++) k_factors[j] = v_factors[j] = 0.0f;
}

/* attend_split for head sizes that are multiples of 16, for `heads` KV heads from `first_head` at
 * once (their query heads one after the other in `queries`, their results per_split floats apart
 * from `partial`). A slot's rows of those heads lie side by side, so a block's keys of all of them
 * are one run of each cache: read together, the hardware streams them (measured 0.81x the time of
 * one head at a time, the same results). */
VECTOR_INLINE void attend_heads_vector(const float *queries, const int group, const int head_dim, const void *k_cache,
                                       const void *v_cache, const int cache_dtype, const uint16_t *k_scales,
                                       const uint16_t *v_scales, const int64_t *slots, int num_kv_heads,
                                       int first_head, int heads, int64_t first, int64_t last, float *partial,
                                       int64_t per_split) {
    const int chunks = head_dim / 16;
    vec16 acc[MAX_ITEM_WIDTH / 16];
    int64_t rows[BLOCK];
    float k_factors[BLOCK], v_factors[BLOCK];
    for (int i = 0; i < heads * group * chunks; i++) acc[i] = zero16();
#if defined(BF16_DOTS)
    pairs16 query_pairs[MAX_ITEM_WIDTH / 32];
    if (USES_BF16_DOTS(cache_dtype, head_dim)) round_queries(queries, heads * group, head_dim, query_pairs);
#endif
    for (int h = 0; h < heads; h++)
        for (int g = 0; g < group; g++) {
            partial[h * per_split + g] = -INFINITY;
            partial[h * per_split + group + g] = 0.0f;
        }
    for (int64_t start = first; start < last; start += BLOCK) {
        int count = last - start < BLOCK ? (int)(last - start) : BLOCK;
        prefetch_next_block(k_cache, v_cache, element_bytes(cache_dtype), slots, num_kv_heads, first_head, heads,
                            head_dim, start, last);
        for (int h = 0; h < heads; h++) {
            block_rows(slots, start, count, num_kv_heads, first_head + h, head_dim, cache_dtype, k_scales, v_scales,
                       rows, k_factors, v_factors);
            float *maxima = partial + h * per_split, *sums = maxima + group;
#if defined(BF16_DOTS)
            if (USES_BF16_DOTS(cache_dtype, head_dim)) {
                attend_block_bf16(query_pairs + h * group * head_dim / 32, group, head_dim, k_cache, v_cache, rows,
                                  count, maxima, sums, acc + h * group * chunks);
                continue;
            }
#endif
            attend_block(queries + (int64_t)h * group * head_dim, group, head_dim, k_cache, v_cache, cache_dtype, rows,
                         k_factors, v_factors, count, maxima, sums, acc + h * group * chunks);
        }
    }
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < group * chunks; i++)
            storeu16(partial + h * per_split + 2 * group + (int64_t)i * 16, acc[h * group * chunks + i]);
}

/* The body with the group size and head size known at compile time, so that the loops over
 * them unroll. Only the served model's shape is specialized (build.py passes it as
 * -DTERCET_ATTEND_GROUP and -DTERCET_ATTEND_HEAD_DIM): each specialization is a fully
 * unrolled copy of the body, and compiling all the shapes a model might have took 4.6 s of
 * a first start against about 0.4 s for one. */
#if defined(TERCET_ATTEND_GROUP) && defined(TERCET_ATTEND_HEAD_DIM)
/* CALL(DTYPE) with the cache's dtype as a compile-time constant: one unrolled copy per dtype. */
#define WITH_CACHE_DTYPE_CONSTANT(cache_dtype, CALL)                  \
    switch (cache_dtype) {                                            \
    case DTYPE_BFLOAT16: CALL(DTYPE_BFLOAT16); break;                 \
    case DTYPE_INT8: CALL(DTYPE_INT8); break;                         \
    case DTYPE_FP8_E4M3: CALL(DTYPE_FP8_E4M3); break;                 \
    default: CALL(DTYPE_FLOAT32);                                     \
    }

static void attend_specialized(const float *queries, const void *k_cache, const void *v_cache, int cache_dtype,
                               const uint16_t *k_scales, const uint16_t *v_scales, const int64_t *slots,
                               int num_kv_heads, int first_head, int heads, int64_t first, int64_t last,
                               float *partial, int64_t per_split) {
/* The body with the cache's dtype a constant too. */
#define ATTEND_AS(DTYPE)                                                                                         \
    attend_heads_vector(queries, TERCET_ATTEND_GROUP, TERCET_ATTEND_HEAD_DIM, k_cache, v_cache, DTYPE, k_scales, \
                        v_scales, slots, num_kv_heads, first_head, heads, first, last, partial, per_split)
    WITH_CACHE_DTYPE_CONSTANT(cache_dtype, ATTEND_AS);
#undef ATTEND_AS
}
#endif

#include "prompt_tiles.h"

/* attend_tile_vector, with the served shape's constants where it is the served shape (see attend_specialized). */
static void attend_tile(const TileRows *tile, int group, int head_dim, const void *k_cache, const void *v_cache,
                        int cache_dtype, const uint16_t *k_scales, const uint16_t *v_scales, const int64_t *slots,
                        int num_kv_heads, int kv_head, int64_t first, int64_t last) {
#if defined(TERCET_ATTEND_GROUP) && defined(TERCET_ATTEND_HEAD_DIM)
    if (group == TERCET_ATTEND_GROUP && head_dim == TERCET_ATTEND_HEAD_DIM) {
#define TILE_AS(DTYPE)                                                                                             \
    attend_tile_vector(tile, TERCET_ATTEND_GROUP, TERCET_ATTEND_HEAD_DIM, k_cache, v_cache, DTYPE, k_scales, v_scales, \
                       slots, num_kv_heads, kv_head, first, last)
        WITH_CACHE_DTYPE_CONSTANT(cache_dtype, TILE_AS);
#undef TILE_AS
        return;
    }
#endif
    attend_tile_vector(tile, group, head_dim, k_cache, v_cache, cache_dtype, k_scales, v_scales, slots, num_kv_heads,
                       kv_head, first, last);
}

static void attend_split_vector(const float *queries, int group, int head_dim, const void *k_cache,
                                const void *v_cache, int cache_dtype, const uint16_t *k_scales,
                                const uint16_t *v_scales, const int64_t *slots, int num_kv_heads, int first_head,
                                int heads, int64_t first, int64_t last, float *partial, int64_t per_split) {
#if defined(TERCET_ATTEND_GROUP) && defined(TERCET_ATTEND_HEAD_DIM)
    if (group == TERCET_ATTEND_GROUP && head_dim == TERCET_ATTEND_HEAD_DIM) {
        attend_specialized(queries, k_cache, v_cache, cache_dtype, k_scales, v_scales, slots, num_kv_heads, first_head,
                           heads, first, last, partial, per_split);
        return;
    }
#endif
    attend_heads_vector(queries, group, head_dim, k_cache, v_cache, cache_dtype, k_scales, v_scales, slots,
                        num_kv_heads, first_head, heads, first, last, partial, per_split);
}
#endif

/* The keys [first, last) of one sequence for one KV head and its `group` query heads:
 * the split's maximum score, sum of exponentials and weighted sum of values per head.
 * Keys go BLOCK at a time: their K rows transposed into `keys_t` ([head_dim][BLOCK]) so
 * that each head's scores are one vector per dimension, their V rows widened into `values`. */
static void attend_split(const float *queries, int group, int head_dim, const void *k_cache, const void *v_cache,
                         int cache_dtype, const uint16_t *k_scales, const uint16_t *v_scales, const int64_t *slots,
                         int num_kv_heads, int kv_head, int64_t first, int64_t last, float *maxima, float *sums,
                         float *weighted) {
    float keys[BLOCK * MAX_HEAD_DIM];
    float values[BLOCK * MAX_HEAD_DIM];
    float scores[MAX_GROUP * BLOCK];
    for (int g = 0; g < group; g++) {
        maxima[g] = -INFINITY;
        sums[g] = 0.0f;
    }
    memset(weighted, 0, sizeof(float) * (size_t)group * head_dim);
    for (int64_t start = first; start < last; start += BLOCK) {
        int count = last - start < BLOCK ? (int)(last - start) : BLOCK;
        for (int j = 0; j < count; j++) {
            int64_t cache_row = slots[start + j] * num_kv_heads + kv_head;
            load_cache_row(k_cache, k_scales, cache_dtype, cache_row, head_dim, keys + j * head_dim);
            load_cache_row(v_cache, v_scales, cache_dtype, cache_row, head_dim, values + j * head_dim);
        }
        for (int j = 0; j < count; j++) {
            const float *key = keys + j * head_dim;
            for (int g = 0; g < group; g++) {
                const float *query = queries + (int64_t)g * head_dim;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int d = 0; d < head_dim; d++) sum += query[d] * key[d];
                scores[g * BLOCK + j] = sum;
            }
        }
        for (int g = 0; g < group; g++) {
            float *score = scores + g * BLOCK;
            float *acc = weighted + (int64_t)g * head_dim;
            float rescale = softmax_block(score, count, maxima + g, sums + g);
            if (rescale != 1.0f) {
#pragma omp simd
                for (int d = 0; d < head_dim; d++) acc[d] *= rescale;
            }
            for (int j = 0; j < count; j++) {
                const float weight = score[j];
                const float *value = values + j * head_dim;
#pragma omp simd
                for (int d = 0; d < head_dim; d++) acc[d] += weight * value[d];
            }
        }
    }
}

/* One call's arguments (see tercet_paged_decode_attention below), read by its steps. */
typedef struct {
    const void *q, *k_new, *v_new;
    int64_t q_token_stride, k_token_stride, v_token_stride;
    int act_dtype, cache_dtype;
    void *k_cache, *v_cache, *out;
    uint16_t *k_scales, *v_scales; /* a quantized cache's row scales; else NULL */
    const int64_t *req_to_token, *rows, *seq_lens, *out_cache_loc;
    int64_t table_width;
    int batch, num_heads, num_kv_heads, head_dim, group, split_keys;
    float scale;
} DecodeCall;

static int shapes_fit(const DecodeCall *call) {
    const int dtypes_known = (call->act_dtype == DTYPE_FLOAT32 || call->act_dtype == DTYPE_BFLOAT16) &&
                             call->cache_dtype >= DTYPE_FLOAT32 && call->cache_dtype <= DTYPE_FP8_E4M3 &&
                             (!is_quantized(call->cache_dtype) || (call->k_scales != NULL && call->v_scales != NULL));
    return dtypes_known && call->num_kv_heads > 0 && call->num_heads % call->num_kv_heads == 0 && call->head_dim > 0 &&
           call->head_dim <= MAX_HEAD_DIM && call->num_heads / call->num_kv_heads <= MAX_GROUP && call->split_keys > 0;
}

/* The splits of every sequence, numbered one after the other: sequence b's are
 * [first_split[b], first_split[b + 1]) (batch + 1 entries; NULL if out of memory). */
static int64_t *number_splits(const DecodeCall *call) {
    int64_t *first_split = malloc(sizeof(int64_t) * (size_t)(call->batch + 1));
    if (first_split == NULL) return NULL;
    first_split[0] = 0;
    for (int b = 0; b < call->batch; b++) {
        int64_t keys = call->seq_lens[b] > 0 ? call->seq_lens[b] : 1;
        first_split[b + 1] = first_split[b] + (keys + call->split_keys - 1) / call->split_keys;
    }
    return first_split;
}

/* Cache row `row` from float32 `values`: rounded to bfloat16, or quantized with its scale. */
static void store_cache_row(void *cache, uint16_t *scales, int dtype, int64_t row, int width, const float *values) {
    if (is_quantized(dtype))
        quantize_row(values, width, dtype, (uint8_t *)cache + row * width, scales + row);
    else
        store_row(cache, dtype, row, width, values);
}

/* The new tokens' K and V into their slots: first, since every split of their sequence reads them. */
static void write_new_tokens(const DecodeCall *call) {
    const int kv_heads = call->num_kv_heads, head_dim = call->head_dim;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < call->batch; b++) {
        for (int h = 0; h < kv_heads; h++) {
            float row[head_dim];
            int64_t target = call->out_cache_loc[b] * kv_heads + h;
            load_row(call->k_new, call->act_dtype, (int64_t)b * call->k_token_stride + (int64_t)h * head_dim, head_dim,
                     row);
            store_cache_row(call->k_cache, call->k_scales, call->cache_dtype, target, head_dim, row);
            load_row(call->v_new, call->act_dtype, (int64_t)b * call->v_token_stride + (int64_t)h * head_dim, head_dim,
                     row);
            store_cache_row(call->v_cache, call->v_scales, call->cache_dtype, target, head_dim, row);
        }
    }
}

/* The KV heads of one work item: all of them when the vector path can hold them and there are splits
 * enough to keep every thread busy, else one. A head's result is the same either way. */
static int heads_per_item(const DecodeCall *call, int64_t num_splits) {
#if defined(VECTOR_PATH)
    if (call->head_dim % 16 == 0 && call->num_heads * call->head_dim <= MAX_ITEM_WIDTH &&
        num_splits >= 2 * omp_get_max_threads())
        return call->num_kv_heads;
#else
    (void)call;
    (void)num_splits;
#endif
    return 1;
}

/* Sequence b's query heads of KV heads first_head.. first_head + heads - 1, scaled, into `queries`
 * (rotated as a quantized cache's keys are: quantized_rows.h). */
static void load_queries(const DecodeCall *call, int64_t b, int first_head, int heads, float *queries) {
    const int head_dim = call->head_dim;
    for (int h = 0; h < heads * call->group; h++) {
        int64_t offset = b * call->q_token_stride + (int64_t)(first_head * call->group + h) * head_dim;
        float *query = queries + (int64_t)h * head_dim;
        load_row(call->q, call->act_dtype, offset, head_dim, query);
        for (int d = 0; d < head_dim; d++) query[d] *= call->scale;
        if (is_quantized(call->cache_dtype)) rotate_blocks_over_n(query, head_dim);
    }
}

/* One work item: split `split` of sequence b, for `heads` KV heads from first_head, into its partials. */
static void attend_item(const DecodeCall *call, int64_t b, int64_t split_of_sequence, int first_head, int heads,
                        const float *queries, float *partial, int64_t per_split) {
    const int64_t first = split_of_sequence * call->split_keys;
    const int64_t last = first + call->split_keys < call->seq_lens[b] ? first + call->split_keys : call->seq_lens[b];
    const int64_t *slots = call->req_to_token + call->rows[b] * call->table_width;
#if defined(VECTOR_PATH)
    if (call->head_dim % 16 == 0) {
        attend_split_vector(queries, call->group, call->head_dim, call->k_cache, call->v_cache, call->cache_dtype,
                            call->k_scales, call->v_scales, slots, call->num_kv_heads, first_head, heads, first, last,
                            partial, per_split);
        return;
    }
#else
    (void)heads;
    (void)per_split;
#endif
    attend_split(queries, call->group, call->head_dim, call->k_cache, call->v_cache, call->cache_dtype, call->k_scales,
                 call->v_scales, slots, call->num_kv_heads, first_head, first, last, partial, partial + call->group,
                 partial + 2 * call->group);
}

/* Every work item (a split of a sequence, for `heads` KV heads), spread over the threads; returns
 * nonzero if a thread's buffer could not be had. */
static int attend_items(const DecodeCall *call, const int64_t *first_split, int heads, float *partials,
                        int64_t per_split) {
    const int64_t num_splits = first_split[call->batch], items_per_split = call->num_kv_heads / heads;
    int failures = 0;
#pragma omp parallel reduction(+ : failures)
    {
        float *queries = malloc(sizeof(float) * (size_t)heads * call->group * call->head_dim);
        failures += queries == NULL;
        int64_t b = 0;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < num_splits * items_per_split; item++) {
            if (queries == NULL) continue;
            int64_t split = item / items_per_split;
            int first_head = (int)(item % items_per_split) * heads;
            while (first_split[b + 1] <= split) b++;
            while (first_split[b] > split) b--;
            load_queries(call, b, first_head, heads, queries);
            attend_item(call, b, split - first_split[b], first_head, heads, queries,
                        partials + (split * call->num_kv_heads + first_head) * per_split, per_split);
        }
        free(queries);
    }
    return failures;
}

#if defined(VECTOR_PATH)
/* Whether rows b and b + 1 are consecutive new tokens of one sequence. */
static int continues_run(const DecodeCall *call, int64_t b) {
    return call->rows[b + 1] == call->rows[b] && call->seq_lens[b + 1] == call->seq_lens[b] + 1;
}

/* The rows cut into tiles (runs of one sequence's consecutive new tokens, TILE_ROWS at most): tile t is
 * rows [tile_start[t], tile_start[t + 1]); returns how many (-1 if out of memory), 0 when no tile would
 * hold two rows (a decoding step: the decode path's items serve it better). */
static int64_t cut_tiles(const DecodeCall *call, int64_t **tile_start) {
    int64_t num_tiles = 0, longest = 1;
    *tile_start = malloc(sizeof(int64_t) * (size_t)(call->batch + 1));
    if (*tile_start == NULL) return -1;
    for (int64_t b = 0; b < call->batch; b++) {
        if (b == 0 || !continues_run(call, b - 1) || b - (*tile_start)[num_tiles - 1] == TILE_ROWS)
            (*tile_start)[num_tiles++] = b;
        if (b + 1 - (*tile_start)[num_tiles - 1] > longest) longest = b + 1 - (*tile_start)[num_tiles - 1];
    }
    (*tile_start)[num_tiles] = call->batch;
    return call->head_dim % 16 == 0 && longest > 1 ? num_tiles : 0;
}

/* The tile's rows' queries for one KV head, transposed into `queries_t` (zero in lanes of no row). */
static void load_tile_queries(const DecodeCall *call, int64_t first_row_of_tile, int rows, int kv_head,
                              float *queries_t) {
    const int width = call->group * call->head_dim;
    float query[MAX_ITEM_WIDTH];
    memset(queries_t, 0, sizeof(float) * (size_t)width * TILE_ROWS);
    for (int r = 0; r < rows; r++) {
        load_queries(call, first_row_of_tile + r, kv_head, 1, query);
        for (int i = 0; i < width; i++) queries_t[i * TILE_ROWS + r] = query[i];
    }
}

/* Split `split` (of its last row's) of a tile for one KV head, its rows' queries in `queries_t`
 * (load_tile_queries), which then takes their weighted sums and their queries in pairs (see TileRows).
 * Rows whose keys end before the split have none of it; each other row's partial, at row_partial[r], is
 * its own split's, as in decode. */
static void attend_tile_split(const DecodeCall *call, int64_t first_row_of_tile, int rows, int64_t split,
                              int kv_head, float *queries_t, float *const *row_partial) {
    const int64_t first = split * call->split_keys;
    const int group = call->group, head_dim = call->head_dim;
    int64_t key_ends[TILE_ROWS];
    float *row_partials[TILE_ROWS];
    for (int r = 0; r < TILE_ROWS; r++) {
        const int64_t end = r < rows ? call->seq_lens[first_row_of_tile + r] : first;
        key_ends[r] = end < first ? first : end < first + call->split_keys ? end : first + call->split_keys;
        row_partials[r] = key_ends[r] == first ? NULL : row_partial[r];
    }
    const TileRows tile = {queries_t, (uint16_t *)(queries_t + 2 * (int64_t)group * head_dim * TILE_ROWS),
                           queries_t + (int64_t)group * head_dim * TILE_ROWS, key_ends, row_partials};
    const int64_t *slots = call->req_to_token + call->rows[first_row_of_tile] * call->table_width;
    attend_tile(&tile, group, head_dim, call->k_cache, call->v_cache, call->cache_dtype, call->k_scales, call->v_scales,
                slots, call->num_kv_heads, kv_head, first, key_ends[rows - 1]);
}
#endif

/* Query head g of KV head kv_head of sequence b: its `splits` partials (the first at `partial`, each
 * `stride` floats after the one before) joined in order, written to out. */
static void join_head(const DecodeCall *call, const float *partial, int64_t stride, int64_t splits, int64_t b,
                      int kv_head, int g) {
    const int head_dim = call->head_dim, group = call->group;
    float result[head_dim];
    float maximum = -INFINITY;
    for (int64_t split = 0; split < splits; split++)
        if (partial[split * stride + g] > maximum) maximum = partial[split * stride + g];
    float total = 0.0f;
    memset(result, 0, sizeof result);
    for (int64_t split = 0; split < splits; split++) {
        const float *own = partial + split * stride;
        if (own[g] == -INFINITY) continue;
        float rescale = expf(own[g] - maximum);
        total += own[group + g] * rescale;
        const float *weighted = own + 2 * group + (int64_t)g * head_dim;
#pragma omp simd
        for (int d = 0; d < head_dim; d++) result[d] += weighted[d] * rescale;
    }
    for (int d = 0; d < head_dim; d++) result[d] /= total;
    /* A quantized cache's values are rotated: so is their weighted sum. */
    if (is_quantized(call->cache_dtype)) rotate_blocks_over_n(result, head_dim);
    store_row(call->out, call->act_dtype, b * call->num_heads + kv_head * group + g, head_dim, result);
}

/* Each sequence's splits joined, every head of it written; rows marked in `joined` (if not NULL) were
 * joined already. */
static void join_splits(const DecodeCall *call, const int64_t *first_split, const float *partials, int64_t per_split,
                        const char *joined) {
    const int kv_heads = call->num_kv_heads;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < call->batch; b++)
        for (int kv_head = 0; kv_head < kv_heads; kv_head++)
            for (int g = 0; g < call->group; g++)
                if (joined == NULL || !joined[b])
                    join_head(call, partials + (first_split[b] * kv_heads + kv_head) * per_split, kv_heads * per_split,
                              first_split[b + 1] - first_split[b], b, kv_head, g);
}

#if defined(VECTOR_PATH)
/* One split of a tile for one KV head, its rows' partials in the step's `partials`. */
static void attend_tile_item(const DecodeCall *call, const int64_t *first_split, int64_t first_row_of_tile, int rows,
                             int64_t split, int kv_head, float *queries_t, float *partials, int64_t per_split) {
    float *row_partial[TILE_ROWS];
    for (int r = 0; r < TILE_ROWS; r++) {
        const int64_t b = first_row_of_tile + r;
        row_partial[r] = r < rows && split < first_split[b + 1] - first_split[b]
                             ? partials + ((first_split[b] + split) * call->num_kv_heads + kv_head) * per_split
                             : NULL;
    }
    load_tile_queries(call, first_row_of_tile, rows, kv_head, queries_t);
    attend_tile_split(call, first_row_of_tile, rows, split, kv_head, queries_t, row_partial);
}

/* Every split of a tile for one KV head, its rows' partials in `tile_partials` (split s of row r at
 * (s × TILE_ROWS + r) × per_split), then each row's joined and written: the same partials and the same
 * join as by the step's partials, without them (an 8,000-token prompt's take about 300 MB a layer). */
static void attend_whole_tile(const DecodeCall *call, const int64_t *first_split, int64_t first_row_of_tile, int rows,
                              int kv_head, float *queries_t, float *tile_partials, int64_t per_split) {
    const int64_t last_row = first_row_of_tile + rows - 1, splits = first_split[last_row + 1] - first_split[last_row];
    float *row_partial[TILE_ROWS];
    load_tile_queries(call, first_row_of_tile, rows, kv_head, queries_t);
    for (int64_t split = 0; split < splits; split++) {
        for (int r = 0; r < TILE_ROWS; r++) row_partial[r] = tile_partials + (split * TILE_ROWS + r) * per_split;
        attend_tile_split(call, first_row_of_tile, rows, split, kv_head, queries_t, row_partial);
    }
    for (int r = 0; r < rows; r++) {
        const int64_t b = first_row_of_tile + r;
        for (int g = 0; g < call->group; g++)
            join_head(call, tile_partials + r * per_split, TILE_ROWS * per_split, first_split[b + 1] - first_split[b], b,
                      kv_head, g);
    }
}

/* How a step's tiles are spread over the threads: a work item for each split of each tile (and KV head),
 * the rows' partials in the step's; or, where the tiles alone give the threads work enough, one for each
 * whole tile, which joins its rows itself. A row's bits are the same either way. */
typedef struct {
    int whole;
    int64_t *first_item; /* [num_tiles + 1]: tile t's items are [first_item[t], first_item[t + 1]) */
    int64_t most_splits; /* the most splits of any tile */
} TileItems;

static int plan_tile_items(const DecodeCall *call, const int64_t *first_split, const int64_t *tile_start,
                           int64_t num_tiles, TileItems *plan) {
    plan->first_item = malloc(sizeof(int64_t) * (size_t)(num_tiles + 1));
    if (plan->first_item == NULL) return 1;
    plan->whole = num_tiles * call->num_kv_heads >= 4 * omp_get_max_threads();
    plan->most_splits = 1;
    plan->first_item[0] = 0;
    for (int64_t t = 0; t < num_tiles; t++) {
        const int64_t last_row = tile_start[t + 1] - 1, splits = first_split[last_row + 1] - first_split[last_row];
        if (splits > plan->most_splits) plan->most_splits = splits;
        plan->first_item[t + 1] = plan->first_item[t] + (plan->whole ? 1 : splits) * call->num_kv_heads;
    }
    return 0;
}

/* Work item `item` of the plan: tile `t`'s, from `b`. A tile of one row goes the decode path's way. */
static void attend_tile_work(const DecodeCall *call, const int64_t *first_split, const TileItems *plan, int64_t t,
                             int64_t b, int rows, int64_t item, float *queries, float *tile_partials, float *partials,
                             int64_t per_split) {
    const int kv_heads = call->num_kv_heads;
    const int64_t index = item - plan->first_item[t], splits_here = plan->whole ? first_split[b + 1] - first_split[b] : 1;
    const int kv_head = (int)(index % kv_heads);
    const int64_t first = plan->whole ? 0 : index / kv_heads;
    if (rows > 1 && plan->whole) {
        attend_whole_tile(call, first_split, b, rows, kv_head, queries, tile_partials, per_split);
    } else if (rows > 1) {
        attend_tile_item(call, first_split, b, rows, first, kv_head, queries, partials, per_split);
    } else {
        load_queries(call, b, kv_head, 1, queries);
        for (int64_t split = first; split < first + splits_here; split++)
            attend_item(call, b, split, kv_head, 1, queries,
                        partials + ((first_split[b] + split) * kv_heads + kv_head) * per_split, per_split);
    }
}

/* The rows of tiles of more than one row, which whole-tile items join themselves. */
static void mark_joined_rows(const int64_t *tile_start, int64_t num_tiles, char *joined) {
    for (int64_t t = 0; t < num_tiles; t++)
        if (tile_start[t + 1] - tile_start[t] > 1) memset(joined + tile_start[t], 1, (size_t)(tile_start[t + 1] - tile_start[t]));
}

/* Every tile's items, spread over the threads, the largest tiles (the last) first; then the rows no
 * item joined. Returns nonzero if a buffer could not be had. */
static int attend_tiles(const DecodeCall *call, const int64_t *first_split, const int64_t *tile_start,
                        int64_t num_tiles, float *partials, int64_t per_split) {
    TileItems plan;
    char *joined = calloc((size_t)call->batch, 1);
    if (joined == NULL || plan_tile_items(call, first_split, tile_start, num_tiles, &plan)) {
        free(joined);
        return 1;
    }
    if (plan.whole) mark_joined_rows(tile_start, num_tiles, joined);
    int failures = 0;
#pragma omp parallel reduction(+ : failures)
    {
        /* A tile's queries, then its weighted sums (both transposed), then its queries as bfloat16 pairs
         * (half as many bytes); a decode row's queries. A whole tile's partials. */
        float *queries = malloc(sizeof(float) * 5 * (size_t)TILE_ROWS * call->group * call->head_dim / 2);
        float *tile_partials = plan.whole ? malloc(sizeof(float) * (size_t)(plan.most_splits * TILE_ROWS * per_split)) : NULL;
        const int lacking = queries == NULL || (plan.whole && tile_partials == NULL);
        failures += lacking;
        int64_t t = num_tiles - 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t order = 0; order < plan.first_item[num_tiles]; order++) {
            const int64_t item = plan.first_item[num_tiles] - 1 - order;
            if (lacking) continue;
            while (plan.first_item[t] > item) t--;
            while (plan.first_item[t + 1] <= item) t++;
            attend_tile_work(call, first_split, &plan, t, tile_start[t], (int)(tile_start[t + 1] - tile_start[t]), item,
                             queries, tile_partials, partials, per_split);
        }
        free(queries);
        free(tile_partials);
    }
    if (failures == 0) join_splits(call, first_split, partials, per_split, joined);
    free(plan.first_item);
    free(joined);
    return failures;
}
#endif

/* Every row's splits attended and joined: by tiles where the step holds prompt rows, else by the decode
 * path's items. Returns nonzero if a buffer could not be had. */
static int attend_all(const DecodeCall *call, const int64_t *first_split, float *partials, int64_t per_split) {
#if defined(VECTOR_PATH)
    int64_t *tile_start = NULL;
    const int64_t num_tiles = cut_tiles(call, &tile_start);
    if (num_tiles != 0) {
        const int failed = num_tiles < 0 ? 1 : attend_tiles(call, first_split, tile_start, num_tiles, partials, per_split);
        free(tile_start);
        return failed;
    }
    free(tile_start);
#endif
    const int failed = attend_items(call, first_split, heads_per_item(call, first_split[call->batch]), partials, per_split);
    if (!failed) join_splits(call, first_split, partials, per_split, NULL);
    return failed;
}

/*
 * q:            [B, num_heads, head_dim] in act_dtype, token stride q_token_stride (elements), heads contiguous
 * k_new, v_new: [B, num_kv_heads, head_dim] in act_dtype, token strides k_token_stride and v_token_stride
 * k_cache, v_cache: [slots, num_kv_heads, head_dim] in cache_dtype, contiguous
 * k_scales, v_scales: [slots, num_kv_heads] float16 for an int8 or e4m3 cache (quantized_rows.h), else unused
 * req_to_token: [rows, table_width] int64; rows[b] is sequence b's row; seq_lens[b] includes the new token
 * out_cache_loc[b]: the new token's slot
 * out:          [B, num_heads * head_dim] in act_dtype, contiguous
 * Returns 0, 1 for shapes it does not take, 2 when out of memory.
 */
int tercet_paged_decode_attention(const void *q, int64_t q_token_stride, const void *k_new, int64_t k_token_stride,
                                  const void *v_new, int64_t v_token_stride, int act_dtype, void *k_cache, void *v_cache,
                                  void *k_scales, void *v_scales, int cache_dtype, const int64_t *req_to_token, int64_t table_width,
                                  const int64_t *rows, const int64_t *seq_lens, const int64_t *out_cache_loc,
                                  void *out, int batch, int num_heads, int num_kv_heads, int head_dim, float scale,
                                  int split_keys) {
    const DecodeCall call = {
        .q = q, .k_new = k_new, .v_new = v_new, .q_token_stride = q_token_stride, .k_token_stride = k_token_stride,
        .v_token_stride = v_token_stride, .act_dtype = act_dtype, .cache_dtype = cache_dtype, .k_cache = k_cache,
        .v_cache = v_cache, .k_scales = k_scales, .v_scales = v_scales, .out = out, .req_to_token = req_to_token, .rows = rows, .seq_lens = seq_lens,
        .out_cache_loc = out_cache_loc, .table_width = table_width, .batch = batch, .num_heads = num_heads,
        .num_kv_heads = num_kv_heads, .head_dim = head_dim, .split_keys = split_keys, .scale = scale,
        .group = num_kv_heads > 0 ? num_heads / num_kv_heads : 0};
    if (batch <= 0) return 0;
    if (!shapes_fit(&call)) return 1;
    int64_t *first_split = number_splits(&call);
    if (first_split == NULL) return 2;
    const int64_t per_split = (int64_t)call.group * (head_dim + 2);
    float *partials = malloc(sizeof(float) * (size_t)(first_split[batch] * num_kv_heads * per_split));
    int failed = partials == NULL;
    if (!failed) {
        write_new_tokens(&call);
        failed = attend_all(&call, first_split, partials, per_split);
    }
    free(partials);
    free(first_split);
    return failed ? 2 : 0;
}
