/*
 * A prompt's rows attended a tile at a time: up to 16 consecutive new tokens of one sequence, one per
 * vector lane, for one KV head, against one split of its keys. Included by decode_attention.c, on the
 * vector path, after softmax_block16 and block_rows.
 *
 * Each row does what the decode path (attend_block) does for it alone, so that its bits are those of
 * the row decoded alone, whatever its tile, its prompt's chunking or the prefix cache (bit for bit
 * against the decode path: tests/plugins/paged_cpu_attention/test_prompt_tiles.py):
 *   - the same key blocks from the same split starts;
 *   - a key's score from the same 16 lane-wise product chains (lane l: dimensions l, l + 16, ...),
 *     folded by sum_each's tree (l + 8, then + 4, + 2, + 1);
 *   - softmax_block16's online softmax over the row's own count of keys in the block;
 *   - the values added in key order.
 * The difference is where the lanes go. The decode path has one row, so its lanes are dimensions and a
 * score ends in a cross-lane tree (45 shuffles and adds for 16 keys) and a scalar softmax. Here the lanes
 * are the tile's rows: the 16 chains are 16 registers, the tree is 15 plain adds, and the softmax's
 * maxima, exponentials and in-order sums run for 16 rows at once. A block's keys and values are widened
 * to float32 once for all the rows.
 *
 * On bfloat16 dot products (BF16_DOTS, a bfloat16 cache) the same holds of attend_block_bf16's order: a
 * chain is a lane's pairs of dimensions, the values go two keys at a time; the keys are read as stored,
 * the values are paired once a block, and the queries are rounded once a tile.
 */
#ifndef TERCET_PROMPT_TILES_H
#define TERCET_PROMPT_TILES_H

/* Rows in one tile: one a lane. */
#define TILE_ROWS 16
/* Keys scored at once against one query head of each row, so that each load of the queries serves as
 * many keys. */
#define KEYS_AT_ONCE 4

/* The block's `count` key and value rows (their cache rows in `rows`) as float32, head_dim apart: the
 * stored values the decode path widens (a quantized row's before its factor). */
VECTOR_INLINE void widen_block(const void *k_cache, const void *v_cache, int cache_dtype, int head_dim,
                               const int64_t *rows, int count, float *keys, float *values) {
    for (int j = 0; j < count; j++)
        for (int c = 0; c < head_dim / 16; c++) {
            storeu16(keys + j * head_dim + c * 16, load_stored16(k_cache, cache_dtype, rows[j] + c * 16));
            storeu16(values + j * head_dim + c * 16, load_stored16(v_cache, cache_dtype, rows[j] + c * 16));
        }
    /* Zeros up to the next four keys, which key_chains reads (their scores are not used). */
    const int padded = (count + KEYS_AT_ONCE - 1) / KEYS_AT_ONCE * KEYS_AT_ONCE;
    memset(keys + count * head_dim, 0, sizeof(float) * (size_t)(padded - count) * head_dim);
}

/* Chain `lane` of each of the four keys: the products of dimensions lane, lane + 16, ... in that
 * order, as the decode path's lane `lane` forms them. */
VECTOR_INLINE void key_chains(const float *queries_t, int head_dim, const float *keys, int lane, vec16 *chain) {
    for (int k = 0; k < KEYS_AT_ONCE; k++) chain[k] = zero16();
    for (int c = 0; c < head_dim / 16; c++) {
        const vec16 query = loadu16(queries_t + (c * 16 + lane) * 16);
        for (int k = 0; k < KEYS_AT_ONCE; k++)
            chain[k] = fma16(query, broadcast16(keys[k * head_dim + c * 16 + lane]), chain[k]);
    }
}

/* Chains `lane` and lane + `width` of each key, as `folded` (the fold of chains lane, lane + 2 width,
 * ..., by `fold`), added: one round of sum_each's tree. Each pair is added as soon as it is formed,
 * which keeps few chains live. */
#define FOLD_ROUND(name, fold, width, QUERY_T, KEY_T)                                                     \
    VECTOR_INLINE void name(const QUERY_T *queries_t, int head_dim, const KEY_T *keys, int lane, vec16 *folded) { \
        vec16 high[KEYS_AT_ONCE];                                                                         \
        fold(queries_t, head_dim, keys, lane, folded);                                                    \
        fold(queries_t, head_dim, keys, lane + (width), high);                                            \
        for (int k = 0; k < KEYS_AT_ONCE; k++) folded[k] = add16(folded[k], high[k]);                     \
    }
FOLD_ROUND(chains_plus_8, key_chains, 8, float, float)
FOLD_ROUND(chains_plus_4, chains_plus_8, 4, float, float)
FOLD_ROUND(chains_plus_2, chains_plus_4, 2, float, float)
FOLD_ROUND(key_scores, chains_plus_2, 1, float, float)

/* softmax_block16 for 16 rows at once: `score` (the block's `count` keys, a vector of rows each)
 * becomes the weights, in place; a row sees the first `seen` (a lane each) of the keys, and its weights
 * past them are zero (`all_see`: every row sees all `count`, which needs no masks). Returns each row's
 * factor for its weighted sum (1 where its maximum stayed). */
VECTOR_INLINE vec16 softmax_rows(vec16 *score, int count, vec16 seen, int all_see, vec16 *maximum, vec16 *sum) {
    const vec16 minus_infinity = broadcast16(-INFINITY);
    vec16 block_max = *maximum, total = zero16();
    if (all_see)
        for (int j = 0; j < count; j++) block_max = max16(score[j], block_max);
    else
        for (int j = 0; j < count; j++)
            block_max = max16(select_below16(broadcast16((float)j), seen, score[j], minus_infinity), block_max);
    const vec16 rescale = select_below16(*maximum, block_max, exp16(sub16(*maximum, block_max)), broadcast16(1.0f));
    for (int j = 0; j < count; j++) {
        const vec16 weight = exp16(sub16(score[j], block_max));
        score[j] = all_see ? weight : select_below16(broadcast16((float)j), seen, weight, zero16());
        total = add16(total, score[j]);
    }
    *sum = add16(mul16(*sum, rescale), total);
    *maximum = block_max;
    return rescale;
}

/* One query head's weights (`weight`: the block's `count` keys, a vector of rows each) times the
 * block's values, added in key order into its weighted sums (`acc_t`: [head_dim][16 rows]), scaled
 * first by `rescale` (1 in the rows whose maximum stayed: the same sums). Per row and dimension, the
 * decode path's operations: acc = weight × value + acc, key after key. A row adds only the keys it sees
 * (`seen`): past the fewest any row sees, each sum keeps its old value where its row sees no more. */
VECTOR_INLINE void add_weighted_values(const vec16 *weight, vec16 rescale, int count, vec16 seen, int fewest_seen,
                                       int head_dim, const float *values, float *acc_t) {
    for (int c = 0; c < head_dim / 16; c++) {
        vec16 acc[16];
        for (int l = 0; l < 16; l++) acc[l] = mul16(loadu16(acc_t + (c * 16 + l) * 16), rescale);
        for (int j = 0; j < fewest_seen; j++)
            for (int l = 0; l < 16; l++) acc[l] = fma16(weight[j], broadcast16(values[j * head_dim + c * 16 + l]), acc[l]);
        for (int j = fewest_seen; j < count; j++)
            for (int l = 0; l < 16; l++)
                acc[l] = select_below16(broadcast16((float)j), seen,
                                        fma16(weight[j], broadcast16(values[j * head_dim + c * 16 + l]), acc[l]), acc[l]);
        for (int l = 0; l < 16; l++) storeu16(acc_t + (c * 16 + l) * 16, acc[l]);
    }
}

/* The rows of one tile and one KV head, against one split: what attend_tile_vector reads and adds into. */
typedef struct {
    const float *queries_t;  /* [group][head_dim][16 rows], scaled; zero in lanes of no row */
    uint16_t *query_pairs_t; /* for bfloat16 dot products: queries_t rounded, [group][head_dim / 2][16 rows][2] */
    float *acc_t;            /* [group][head_dim][16 rows]: the weighted sums, transposed as the queries */
    const int64_t *key_ends; /* [16]: row r sees keys before key_ends[r] (first, for no row or none) */
    float *const *partials;  /* [16]: each row's partial (maxima, sums, weighted sums), or NULL */
} TileRows;

/* How many of the block from `start` each row sees (a lane each; lanes of no row count as seeing all 16),
 * and the fewest any row sees. */
VECTOR_INLINE vec16 keys_seen(const TileRows *tile, int64_t start, int *fewest_seen) {
    float seen_by_row[16];
    *fewest_seen = 16;
    for (int r = 0; r < 16; r++) {
        const int64_t seen = tile->partials[r] == NULL ? 16 : tile->key_ends[r] - start;
        seen_by_row[r] = seen <= 0 ? 0.0f : seen < 16 ? (float)seen : 16.0f;
        if ((int)seen_by_row[r] < *fewest_seen) *fewest_seen = (int)seen_by_row[r];
    }
    return loadu16(seen_by_row);
}

/* One block's keys and values (widened) against the tile, for each query head: the scores, the softmax
 * and the weighted sums of all the rows. Lanes of no row count as seeing every key: they are never read.
 * For a quantized cache `factors` holds the keys' factors, then the values' (zero past `count`): as in
 * attend_block, they multiply the scores and the weights; NULL for another cache. */
VECTOR_INLINE void attend_tile_block(const TileRows *tile, int group, int head_dim, const float *keys,
                                     const float *values, const float *factors, int64_t start, int count,
                                     vec16 *maxima, vec16 *sums) {
    int fewest_seen;
    const vec16 seen = keys_seen(tile, start, &fewest_seen);
    vec16 weight[16 + KEYS_AT_ONCE];
    for (int g = 0; g < group; g++) {
        for (int j = 0; j < count; j += KEYS_AT_ONCE)
            key_scores(tile->queries_t + g * head_dim * 16, head_dim, keys + j * head_dim, 0, weight + j);
        if (factors != NULL)
            for (int j = 0; j < count; j++) weight[j] = mul16(weight[j], broadcast16(factors[j]));
        const vec16 rescale = softmax_rows(weight, count, seen, fewest_seen >= count, maxima + g, sums + g);
        if (factors != NULL)
            for (int j = 0; j < count; j++) weight[j] = mul16(weight[j], broadcast16(factors[16 + j]));
        add_weighted_values(weight, rescale, count, seen, fewest_seen < count ? fewest_seen : count, head_dim, values,
                            tile->acc_t + g * head_dim * 16);
    }
}

/* Each row's maxima, sums and weighted sums (lanes of the tile's vectors) into its partial. */
VECTOR_INLINE void write_partials(const TileRows *tile, int group, int head_dim, const vec16 *maxima,
                                  const vec16 *sums) {
    float lanes[2][16];
    for (int g = 0; g < group; g++) {
        storeu16(lanes[0], maxima[g]);
        storeu16(lanes[1], sums[g]);
        for (int r = 0; r < 16; r++) {
            float *partial = tile->partials[r];
            if (partial == NULL) continue;
            partial[g] = lanes[0][r];
            partial[group + g] = lanes[1][r];
            for (int d = 0; d < head_dim; d++) partial[2 * group + g * head_dim + d] = tile->acc_t[(g * head_dim + d) * 16 + r];
        }
    }
}

#if defined(BF16_DOTS)
/* key_chains on bfloat16 dot products: chain `lane` holds the pairs of dimensions 2 lane, 2 lane + 1,
 * then 32 + 2 lane, ..., as block_scores_bf16's lane `lane` does (`query_pairs_t`: the tile's
 * query_pairs_t for one query head; `keys`: the block's key rows as stored, head_dim apart). */
VECTOR_INLINE void key_chains_bf16(const uint16_t *query_pairs_t, int head_dim, const uint16_t *keys, int lane,
                                   vec16 *chain) {
    for (int k = 0; k < KEYS_AT_ONCE; k++) chain[k] = zero16();
    for (int c = 0; c < head_dim / 32; c++) {
        const pairs16 query = load_pairs16(query_pairs_t + (c * 16 + lane) * 32);
        for (int k = 0; k < KEYS_AT_ONCE; k++)
            chain[k] = dot_broadcast_pair16(chain[k], query, keys + k * head_dim + c * 32 + 2 * lane);
    }
}
FOLD_ROUND(chains_plus_8_bf16, key_chains_bf16, 8, uint16_t, uint16_t)
FOLD_ROUND(chains_plus_4_bf16, chains_plus_8_bf16, 4, uint16_t, uint16_t)
FOLD_ROUND(chains_plus_2_bf16, chains_plus_4_bf16, 2, uint16_t, uint16_t)
FOLD_ROUND(key_scores_bf16, chains_plus_2_bf16, 1, uint16_t, uint16_t)

/* add_weighted_values on bfloat16 dot products, as attend_block_bf16 adds a row's values: two keys at a
 * time in key order, the weights rounded to bfloat16 (`value_pairs`: the block's values two keys side by
 * side, [count / 2][head_dim][2]). A row adds a pair when it sees the pair's first key; where it does
 * not see the second, that key's weight is zero (the decode path's is a zero weight times a zero value:
 * the same sums, as a zero product leaves a sum that is not -0 as it is, and these never are). */
VECTOR_INLINE void add_weighted_pairs(const vec16 *weight, vec16 rescale, int count, vec16 seen, int fewest_seen,
                                      int head_dim, const uint16_t *value_pairs, float *acc_t) {
    pairs16 weight_pairs[8];
    for (int j = 0; j < count; j += 2) weight_pairs[j / 2] = pair_lanes16(weight[j], weight[j + 1]);
    for (int c = 0; c < head_dim / 16; c++) {
        vec16 acc[16];
        for (int l = 0; l < 16; l++) acc[l] = mul16(loadu16(acc_t + (c * 16 + l) * 16), rescale);
        for (int j = 0; j < count; j += 2) {
            const uint16_t *pairs = value_pairs + ((j / 2) * head_dim + c * 16) * 2;
            if (j < fewest_seen)
                for (int l = 0; l < 16; l++) acc[l] = dot_broadcast_pair16(acc[l], weight_pairs[j / 2], pairs + 2 * l);
            else
                for (int l = 0; l < 16; l++)
                    acc[l] = select_below16(broadcast16((float)j), seen,
                                            dot_broadcast_pair16(acc[l], weight_pairs[j / 2], pairs + 2 * l), acc[l]);
        }
        for (int l = 0; l < 16; l++) storeu16(acc_t + (c * 16 + l) * 16, acc[l]);
    }
}

/* attend_tile_block on bfloat16 dot products (`keys`: the block's key rows as stored, zeros up to the
 * next four; `value_pairs`: add_weighted_pairs's). */
VECTOR_INLINE void attend_tile_block_bf16(const TileRows *tile, int group, int head_dim, const uint16_t *keys,
                                          const uint16_t *value_pairs, int64_t start, int count, vec16 *maxima,
                                          vec16 *sums) {
    int fewest_seen;
    const vec16 seen = keys_seen(tile, start, &fewest_seen);
    vec16 weight[16 + KEYS_AT_ONCE];
    for (int g = 0; g < group; g++) {
        for (int j = 0; j < count; j += KEYS_AT_ONCE)
            key_scores_bf16(tile->query_pairs_t + g * head_dim * 16, head_dim, keys + j * head_dim, 0, weight + j);
        const vec16 rescale = softmax_rows(weight, count, seen, fewest_seen >= count, maxima + g, sums + g);
        if (count % 2 == 1) weight[count] = zero16();
        add_weighted_pairs(weight, rescale, count, seen, fewest_seen < count ? fewest_seen : count, head_dim,
                           value_pairs, tile->acc_t + g * head_dim * 16);
    }
}

/* attend_tile_vector for a bfloat16 cache on bfloat16 dot products: the keys copied as stored, the values
 * paired, the queries rounded once. */
VECTOR_INLINE void attend_tile_vector_bf16(const TileRows *tile, int group, int head_dim, const uint16_t *k_cache,
                                           const uint16_t *v_cache, const int64_t *slots, int num_kv_heads, int kv_head,
                                           int64_t first, int64_t last) {
    uint16_t keys[(16 + KEYS_AT_ONCE) * MAX_HEAD_DIM], value_pairs[16 * MAX_HEAD_DIM];
    vec16 maxima[MAX_GROUP], sums[MAX_GROUP];
    for (int g = 0; g < group; g++) {
        maxima[g] = broadcast16(-INFINITY);
        sums[g] = zero16();
    }
    for (int i = 0; i < group * head_dim / 2; i++)
        store_pairs16(tile->query_pairs_t + i * 32,
                      pair_lanes16(loadu16(tile->queries_t + 2 * i * 16), loadu16(tile->queries_t + (2 * i + 1) * 16)));
    memset(tile->acc_t, 0, sizeof(float) * (size_t)group * head_dim * 16);
    for (int64_t start = first; start < last; start += 16) {
        const int count = last - start < 16 ? (int)(last - start) : 16;
        const int padded = (count + KEYS_AT_ONCE - 1) / KEYS_AT_ONCE * KEYS_AT_ONCE;
        for (int j = 0; j < count; j++)
            memcpy(keys + j * head_dim, k_cache + (slots[start + j] * num_kv_heads + kv_head) * head_dim,
                   sizeof(uint16_t) * (size_t)head_dim);
        for (int j = 0; j < count; j += 2) {
            const uint16_t *value = v_cache + (slots[start + j] * num_kv_heads + kv_head) * head_dim;
            const uint16_t *next = j + 1 < count ? v_cache + (slots[start + j + 1] * num_kv_heads + kv_head) * head_dim : NULL;
            for (int c = 0; c < head_dim / 16; c++)
                store_pairs16(value_pairs + ((j / 2) * head_dim + c * 16) * 2,
                              interleave16(load_bf16x16(value + c * 16), next != NULL ? load_bf16x16(next + c * 16) : zero_bf16x16()));
        }
        memset(keys + count * head_dim, 0, sizeof(uint16_t) * (size_t)(padded - count) * head_dim);
        attend_tile_block_bf16(tile, group, head_dim, keys, value_pairs, start, count, maxima, sums);
    }
    write_partials(tile, group, head_dim, maxima, sums);
}
#endif

/* The tile's rows against keys [first, last) of one KV head (slots: its sequence's), into their partials. */
VECTOR_INLINE void attend_tile_vector(const TileRows *tile, int group, int head_dim, const void *k_cache,
                                      const void *v_cache, int cache_dtype, const uint16_t *k_scales,
                                      const uint16_t *v_scales, const int64_t *slots, int num_kv_heads, int kv_head,
                                      int64_t first, int64_t last) {
#if defined(BF16_DOTS)
    if (USES_BF16_DOTS(cache_dtype, head_dim)) {
        attend_tile_vector_bf16(tile, group, head_dim, k_cache, v_cache, slots, num_kv_heads, kv_head, first, last);
        return;
    }
#endif
    float keys[16 * MAX_HEAD_DIM], values[16 * MAX_HEAD_DIM], factors[32]; /* the keys', then the values' */
    int64_t cache_rows[16];
    vec16 maxima[MAX_GROUP], sums[MAX_GROUP];
    for (int g = 0; g < group; g++) {
        maxima[g] = broadcast16(-INFINITY);
        sums[g] = zero16();
    }
    memset(tile->acc_t, 0, sizeof(float) * (size_t)group * head_dim * 16);
    for (int64_t start = first; start < last; start += 16) {
        const int count = last - start < 16 ? (int)(last - start) : 16;
        block_rows(slots, start, count, num_kv_heads, kv_head, head_dim, cache_dtype, k_scales, v_scales, cache_rows,
                   factors, factors + 16);
        widen_block(k_cache, v_cache, cache_dtype, head_dim, cache_rows, count, keys, values);
        attend_tile_block(tile, group, head_dim, keys, values, is_quantized(cache_dtype) ? factors : NULL, start, count,
                          maxima, sums);
    }
    write_partials(tile, group, head_dim, maxima, sums);
}

#endif
