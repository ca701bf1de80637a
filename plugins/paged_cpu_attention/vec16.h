/*
 * vec16: 16 float32 lanes, and the few operations the attention kernels are written in, one file per
 * instruction set: AVX-512 (one register), AVX2 with FMA (two), NEON (four). Every lane sees the same
 * float operations in the same order on all of them, so a kernel written over vec16 gives the same
 * bits on each (x86 against aarch64 under qemu: tests/native/test_aarch64_attention.py).
 *
 * Each file gives: zero16, broadcast16, loadu16, storeu16, add16, sub16, mul16, fma16, max16 (x86's:
 * b where either is NaN), select_below16 (x < limit ? a : b), pow2_16 (2^n for whole n, truncated as x86 converts), load16 (16 bfloat16 or
 * float32 values as float32), load16_int8 (16 int8 values as float32), load16_e4m3 (16 e4m3 values / 256
 * as float32, exactly), sum_each (16 vectors' sums as one vector, each folded as lane i + lane
 * i + 8, then + 4, + 2, + 1) and PREFETCH_L2. vec16_avx512.h also gives, where the level has AVX512-BF16,
 * BF16_DOTS and its bfloat16 pair operations (dot_pairs16 and the loads and roundings that feed it).
 */
#ifndef TERCET_VEC16_H
#define TERCET_VEC16_H

#include <stdint.h>

#define VECTOR_INLINE static inline __attribute__((always_inline))

#include "cache_dtypes.h"

#if defined(__aarch64__)
#include "vec16_neon.h"
#elif defined(__AVX512F__)
#include "vec16_avx512.h"
#else
#include "vec16_avx2.h"
#endif

/* exp_nonpositive (tercet_exp.h) on 16 lanes, operation for operation (keep the two in step), so
 * that each lane has the bits the scalar function gives. GCC vectorizes the scalar one only where it
 * can mask (AVX-512); for AVX2 it keeps the clamp a branch and the exp scalar, which took a fifth of
 * the AVX2 path's time. */
VECTOR_INLINE vec16 exp16(vec16 x) {
    x = max16(broadcast16(-87.0f), x); /* x < -87 ? -87 : x */
    const vec16 rounder = broadcast16(12582912.0f);
    const vec16 n = sub16(add16(mul16(x, broadcast16(1.44269504088896341f)), rounder), rounder);
    const vec16 r = sub16(sub16(x, mul16(n, broadcast16(0.693145751953125f))),
                          mul16(n, broadcast16(1.428606765330187045e-06f)));
    vec16 p = broadcast16(1.9875691500e-4f);
    p = add16(mul16(p, r), broadcast16(1.3981999507e-3f));
    p = add16(mul16(p, r), broadcast16(8.3334519073e-3f));
    p = add16(mul16(p, r), broadcast16(4.1665795894e-2f));
    p = add16(mul16(p, r), broadcast16(1.6666665459e-1f));
    p = add16(mul16(p, r), broadcast16(5.0000001201e-1f));
    p = add16(add16(mul16(mul16(p, r), r), r), broadcast16(1.0f));
    return mul16(p, pow2_16(n));
}

/* 16 values of a cache row of `dtype` at `offset` as they are stored, in float32: bfloat16 and float32
 * widened; int8 and e4m3 before their row's factor (quantized_rows.h), which the kernels apply to a
 * key's score and a value's weight instead: one multiply a key, not one a stored value. */
VECTOR_INLINE vec16 load_stored16(const void *base, int dtype, int64_t offset) {
    if (dtype == DTYPE_INT8) return load16_int8(base, offset);
    if (dtype == DTYPE_FP8_E4M3) return load16_e4m3(base, offset);
    return load16(base, dtype, offset);
}

#endif
