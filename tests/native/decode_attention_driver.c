/* Runs the paged decode attention kernel (decode_attention.c, compiled in whole) on cases from files,
 * for tests/native/test_aarch64_attention.py: built for an aarch64 level and run under qemu-aarch64,
 * or for x86 to check the driver against the kernel's library.
 *
 * Usage: decode_attention_driver OUT_DIR CASE...
 * A case file: 10 little-endian int64 (batch, num_heads, num_kv_heads, head_dim, split_keys, act_dtype,
 * cache_dtype, slots, table_rows, table_width), one float32 scale, then q, k_new and v_new
 * ([batch, heads, head_dim] in act_dtype), k_cache and v_cache ([slots, num_kv_heads, head_dim] in
 * cache_dtype), for an int8 or e4m3 cache its k_scales and v_scales ([slots, num_kv_heads] float16),
 * req_to_token ([table_rows, table_width] int64), rows, seq_lens and out_cache_loc ([batch] int64). For
 * each case it writes OUT_DIR/NAME.out: the output, then both caches (and scales) after the call.
 * It first prints "vector 1" where the kernel's vector path was built, else "vector 0". */
#include "decode_attention.c"

#include <stdio.h>

typedef struct {
    int64_t batch, num_heads, num_kv_heads, head_dim, split_keys, act_dtype, cache_dtype, slots, table_rows,
        table_width;
    float scale;
} Header;


static void *read_part(FILE *file, size_t bytes) {
    void *part = malloc(bytes ? bytes : 1);
    if (part == NULL || fread(part, 1, bytes, file) != bytes) {
        fprintf(stderr, "a case file is shorter than its header says\n");
        exit(2);
    }
    return part;
}

static int run_case(const char *out_dir, const char *path) {
    FILE *file = fopen(path, "rb");
    Header h;
    if (file == NULL || fread(&h, sizeof(int64_t), 10, file) != 10 || fread(&h.scale, 4, 1, file) != 1) return 1;
    const size_t act = (size_t)element_bytes((int)h.act_dtype), cache = (size_t)element_bytes((int)h.cache_dtype);
    const size_t q_bytes = (size_t)(h.batch * h.num_heads * h.head_dim) * act;
    const size_t new_bytes = (size_t)(h.batch * h.num_kv_heads * h.head_dim) * act;
    const size_t cache_bytes = (size_t)(h.slots * h.num_kv_heads * h.head_dim) * cache;
    void *q = read_part(file, q_bytes), *k_new = read_part(file, new_bytes), *v_new = read_part(file, new_bytes);
    void *k_cache = read_part(file, cache_bytes), *v_cache = read_part(file, cache_bytes);
    const size_t scale_bytes = is_quantized((int)h.cache_dtype) ? sizeof(uint16_t) * (size_t)(h.slots * h.num_kv_heads) : 0;
    void *k_scales = read_part(file, scale_bytes), *v_scales = read_part(file, scale_bytes);
    int64_t *table = read_part(file, sizeof(int64_t) * (size_t)(h.table_rows * h.table_width));
    int64_t *rows = read_part(file, sizeof(int64_t) * (size_t)h.batch);
    int64_t *seq_lens = read_part(file, sizeof(int64_t) * (size_t)h.batch);
    int64_t *out_cache_loc = read_part(file, sizeof(int64_t) * (size_t)h.batch);
    fclose(file);
    void *out = malloc(q_bytes);
    int status = tercet_paged_decode_attention(
        q, h.num_heads * h.head_dim, k_new, h.num_kv_heads * h.head_dim, v_new, h.num_kv_heads * h.head_dim,
        (int)h.act_dtype, k_cache, v_cache, k_scales, v_scales, (int)h.cache_dtype, table, h.table_width, rows,
        seq_lens, out_cache_loc, out, (int)h.batch, (int)h.num_heads, (int)h.num_kv_heads, (int)h.head_dim, h.scale, (int)h.split_keys);
    if (status != 0) return 10 + status;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char target[4096];
    snprintf(target, sizeof target, "%s/%s.out", out_dir, name);
    FILE *written = fopen(target, "wb");
    if (written == NULL || fwrite(out, 1, q_bytes, written) != q_bytes ||
        fwrite(k_cache, 1, cache_bytes, written) != cache_bytes ||
        fwrite(v_cache, 1, cache_bytes, written) != cache_bytes ||
        fwrite(k_scales, 1, scale_bytes, written) != scale_bytes ||
        fwrite(v_scales, 1, scale_bytes, written) != scale_bytes)
        return 3;
    fclose(written);
    free(q), free(k_new), free(v_new), free(k_cache), free(v_cache), free(k_scales), free(v_scales), free(table), free(rows), free(seq_lens);
    free(out_cache_loc), free(out);
    return 0;
}

int main(int argc, char **argv) {
#if defined(VECTOR_PATH)
    printf("vector 1\n");
#else
    printf("vector 0\n");
#endif
    for (int i = 2; i < argc; i++) {
        int status = run_case(argv[1], argv[i]);
        if (status != 0) {
            fprintf(stderr, "%s: failed with %d\n", argv[i], status);
            return status;
        }
    }
    return 0;
}
