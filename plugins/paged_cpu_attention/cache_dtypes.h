/*
 * The element types of the activations and the KV cache, as the Python side codes them (backend.py's
 * DTYPE_CODES). int8 and e4m3 are the quantized caches: each row (one token, one KV head) has a float16
 * scale beside it (quantized_rows.h).
 */
#ifndef TERCET_CACHE_DTYPES_H
#define TERCET_CACHE_DTYPES_H

enum { DTYPE_FLOAT32 = 0, DTYPE_BFLOAT16 = 1, DTYPE_INT8 = 2, DTYPE_FP8_E4M3 = 3 };

static inline int is_quantized(int dtype) { return dtype == DTYPE_INT8 || dtype == DTYPE_FP8_E4M3; }

/* Bytes of one element of a cache of `dtype`. */
static inline int element_bytes(int dtype) {
    return dtype == DTYPE_FLOAT32 ? 4 : dtype == DTYPE_BFLOAT16 ? 2 : 1;
}

#endif
