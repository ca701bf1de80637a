/* The element type of a model's activations for C code built twice: bfloat16 (the default) or,
 * under -DTERCET_FLOAT32_ACTIVATIONS, float32 (on the include path of every NativeSource).
 *
 * Code written with activation_t, load_activation, store_activation and round_activation does,
 * in bfloat16, exactly what it did with uint16_t, bf16_to_float, float_to_bf16 and a round trip;
 * in float32 the conversions and roundings are nothing. */
#ifndef TERCET_ACTIVATION_H
#define TERCET_ACTIVATION_H

#include "tercet_bfloat16.h"

#ifdef TERCET_FLOAT32_ACTIVATIONS
typedef float activation_t;
/* The dtype codes of paged_cpu's attention kernel (decode_attention.c). */
#define ACTIVATION_DTYPE_CODE 0
static inline float load_activation(float value) { return value; }
static inline float store_activation(float value) { return value; }
#else
typedef uint16_t activation_t;
#define ACTIVATION_DTYPE_CODE 1
static inline float load_activation(uint16_t bits) { return bf16_to_float(bits); }
static inline uint16_t store_activation(float value) { return float_to_bf16(value); }
#endif

/* value rounded as a stored activation would round it */
static inline float round_activation(float value) { return load_activation(store_activation(value)); }

#endif
