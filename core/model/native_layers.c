/* A Llama decoder's layers in one call, for a model whose every step already runs in C.
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
 */
#include <stdint.h>
#include <stdlib.h>

#include "tercet_bfloat16.h"

typedef int (*matmul_function)(const uint16_t *x, int64_t x_stride, int64_t rows, int64_t k, const void *weights,
                               int kind, int64_t n, uint16_t *y, int64_t y_stride);
typedef void (*norm_function)(uint16_t *hidden, int64_t hidden_stride, const uint16_t *addend,
                              int64_t addend_stride, const uint16_t *weight, float eps, int64_t rows, int64_t width,
                              uint16_t *out, int64_t out_stride);
typedef void (*silu_mul_function)(const uint16_t *gate_up, int64_t gate_up_stride, int64_t rows, int64_t width,
                                  uint16_t *out, int64_t out_stride);
typedef void (*rotary_function)(uint16_t *x, int64_t x_stride, int64_t rows, int64_t heads, int64_t head_dim,
                                const int64_t *positions, const uint16_t *cos_table,
                                const uint16_t *signed_sin_table);
typedef int (*attention_function)(const void *q, int64_t q_token_stride, const void *k_new, int64_t k_token_stride,
                                  const void *v_new, int64_t v_token_stride, int act_dtype, void *k_cache,
                                  void *v_cache, int cache_dtype, const int64_t *req_to_token, int64_t table_width,
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
    const uint16_t *input_norm, *post_attention_norm;
    Matmul qkv, o, gate_up, down;
    void *k_cache, *v_cache;
} Layer;

typedef struct {
    norm_function norm;
    silu_mul_function silu_mul;
    rotary_function rotary;
    attention_function attention;
    const uint16_t *cos_table, *signed_sin_table;
    const Layer *layers;
    int64_t num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads, head_dim, split_keys, cache_dtype;
    float eps, scale;
} Program;

/* The per-step inputs of the attention, as the backend prepared them. */
typedef struct {
    const int64_t *positions, *req_to_token, *rows, *seq_lens, *out_cache_loc;
    int64_t table_width;
} Step;

enum { DTYPE_BFLOAT16 = 1, FAILED_MATMUL = 10, FAILED_ATTENTION = 20, OUT_OF_MEMORY = 30 };

static int multiply(const Matmul *layer, const uint16_t *x, int64_t x_stride, int64_t rows, uint16_t *y) {
    return layer->function(x, x_stride, rows, layer->in_features, layer->weights, (int)layer->kind,
                           layer->out_features, y, layer->out_features);
}

/* Scratch for one step of `rows` tokens: each intermediate of a layer, reused by every layer. */
typedef struct {
    uint16_t *normed, *qkv, *attended, *projected, *gate_up, *activated;
} Scratch;

static void free_scratch(Scratch *s) {
    free(s->normed); free(s->qkv); free(s->attended); free(s->projected); free(s->gate_up); free(s->activated);
}

static int allocate_scratch(const Program *p, int64_t rows, Scratch *s) {
    int64_t q_size = p->num_heads * p->head_dim, kv_size = p->num_kv_heads * p->head_dim;
    s->normed = malloc(sizeof(uint16_t) * rows * p->hidden_size);
    s->qkv = malloc(sizeof(uint16_t) * rows * (q_size + 2 * kv_size));
    s->attended = malloc(sizeof(uint16_t) * rows * q_size);
    s->projected = malloc(sizeof(uint16_t) * rows * p->hidden_size);
    s->gate_up = malloc(sizeof(uint16_t) * rows * 2 * p->intermediate_size);
    s->activated = malloc(sizeof(uint16_t) * rows * p->intermediate_size);
    if (s->normed && s->qkv && s->attended && s->projected && s->gate_up && s->activated) return 0;
    free_scratch(s);
    return OUT_OF_MEMORY;
}

/* normed = RMSNorm(hidden); qkv; rotary of q and k; attention (writing the new K/V); o. */
static int attention_block(const Program *p, const Layer *layer, const Step *step, uint16_t *hidden, int64_t rows,
                           Scratch *s) {
    int64_t q_size = p->num_heads * p->head_dim, kv_size = p->num_kv_heads * p->head_dim;
    int64_t qkv_width = q_size + 2 * kv_size, H = p->hidden_size;
    p->norm(hidden, H, NULL, 0, layer->input_norm, p->eps, rows, H, s->normed, H);
    if (multiply(&layer->qkv, s->normed, H, rows, s->qkv)) return FAILED_MATMUL;
    p->rotary(s->qkv, qkv_width, rows, p->num_heads + p->num_kv_heads, p->head_dim, step->positions, p->cos_table,
              p->signed_sin_table);
    if (p->attention(s->qkv, qkv_width, s->qkv + q_size, qkv_width, s->qkv + q_size + kv_size, qkv_width,
                     DTYPE_BFLOAT16, layer->k_cache, layer->v_cache, (int)p->cache_dtype, step->req_to_token,
                     step->table_width, step->rows, step->seq_lens, step->out_cache_loc, s->attended, (int)rows,
                     (int)p->num_heads, (int)p->num_kv_heads, (int)p->head_dim, p->scale, (int)p->split_keys))
        return FAILED_ATTENTION;
    return multiply(&layer->o, s->attended, q_size, rows, s->projected) ? FAILED_MATMUL : 0;
}

/* hidden += attention's output; normed = RMSNorm(hidden); gate_up; SiLU·mul; down; hidden += down. */
static int mlp_block(const Program *p, const Layer *layer, uint16_t *hidden, int64_t rows, Scratch *s) {
    int64_t H = p->hidden_size, I = p->intermediate_size;
    p->norm(hidden, H, s->projected, H, layer->post_attention_norm, p->eps, rows, H, s->normed, H);
    if (multiply(&layer->gate_up, s->normed, H, rows, s->gate_up)) return FAILED_MATMUL;
    p->silu_mul(s->gate_up, 2 * I, rows, I, s->activated, I);
    if (multiply(&layer->down, s->activated, I, rows, s->projected)) return FAILED_MATMUL;
    for (int64_t i = 0; i < rows * H; i++)
        hidden[i] = float_to_bf16(bf16_to_float(hidden[i]) + bf16_to_float(s->projected[i]));
    return 0;
}

/* Every layer of `program` over `hidden` ([rows, hidden_size] bfloat16, contiguous, updated in
 * place). Returns 0, or a code: FAILED_MATMUL, FAILED_ATTENTION or OUT_OF_MEMORY plus nothing
 * (the layer is not told: the step is lost either way). */
int tercet_run_layers(const Program *program, const Step *step, uint16_t *hidden, int64_t rows) {
    if (rows <= 0) return 0;
    Scratch scratch;
    if (allocate_scratch(program, rows, &scratch)) return OUT_OF_MEMORY;
    int failed = 0;
    for (int64_t i = 0; i < program->num_layers && !failed; i++) {
        const Layer *layer = &program->layers[i];
        failed = attention_block(program, layer, step, hidden, rows, &scratch);
        if (!failed) failed = mlp_block(program, layer, hidden, rows, &scratch);
    }
    free_scratch(&scratch);
    return failed;
}
