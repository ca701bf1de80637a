/*
 * The element types of the activations and the KV cache, as the Python side codes them (backend.py's
 * DTYPE_CODES).
 */
#ifndef TERCET_CACHE_DTYPES_H
#define TERCET_CACHE_DTYPES_H

enum { DTYPE_FLOAT32 = 0, DTYPE_BFLOAT16 = 1 };

#endif
