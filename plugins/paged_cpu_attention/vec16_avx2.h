/*
 * vec16 on AVX2 with FMA: 16 float32 lanes in two registers (lanes 0-7 and 8-15). Included by vec16.h.
 */
#ifndef TERCET_VEC16_AVX2_H
#define TERCET_VEC16_AVX2_H

#include <immintrin.h>

#define PREFETCH_L2(address) _mm_prefetch((address), _MM_HINT_T1)

typedef struct {
    __m256 lo, hi; /* lanes 0-7, lanes 8-15 */
} vec16;

VECTOR_INLINE vec16 zero16(void) { return (vec16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
VECTOR_INLINE vec16 broadcast16(float value) { return (vec16){_mm256_set1_ps(value), _mm256_set1_ps(value)}; }
VECTOR_INLINE vec16 loadu16(const float *from) { return (vec16){_mm256_loadu_ps(from), _mm256_loadu_ps(from + 8)}; }
VECTOR_INLINE void storeu16(float *to, vec16 v) {
    _mm256_storeu_ps(to, v.lo);
    _mm256_storeu_ps(to + 8, v.hi);
}
VECTOR_INLINE vec16 add16(vec16 a, vec16 b) { return (vec16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
VECTOR_INLINE vec16 sub16(vec16 a, vec16 b) { return (vec16){_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
VECTOR_INLINE vec16 mul16(vec16 a, vec16 b) { return (vec16){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
VECTOR_INLINE vec16 fma16(vec16 a, vec16 b, vec16 c) {
    return (vec16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
VECTOR_INLINE vec16 max16(vec16 a, vec16 b) { return (vec16){_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
VECTOR_INLINE vec16 select_below16(vec16 x, vec16 limit, vec16 a, vec16 b) {
    return (vec16){_mm256_blendv_ps(b.lo, a.lo, _mm256_cmp_ps(x.lo, limit.lo, _CMP_LT_OQ)),
                   _mm256_blendv_ps(b.hi, a.hi, _mm256_cmp_ps(x.hi, limit.hi, _CMP_LT_OQ))};
}
VECTOR_INLINE __m256 pow2_8(__m256 n) {
    const __m256i biased = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
}
VECTOR_INLINE vec16 pow2_16(vec16 n) { return (vec16){pow2_8(n.lo), pow2_8(n.hi)}; }

/* 8 bfloat16 values as float32. */
VECTOR_INLINE __m256 widen8(const uint16_t *from) {
    __m128i raw = _mm_loadu_si128((const __m128i *)from);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

/* 16 values at `offset` of a bfloat16 or float32 array, as float32. */
VECTOR_INLINE vec16 load16(const void *base, int dtype, int64_t offset) {
    if (dtype == DTYPE_BFLOAT16) {
        const uint16_t *from = (const uint16_t *)base + offset;
        return (vec16){widen8(from), widen8(from + 8)};
    }
    return loadu16((const float *)base + offset);
}

/* 8 int8 values as float32. */
VECTOR_INLINE __m256 widen8_int8(const int8_t *from) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)from)));
}

/* 8 e4m3 values / 256 as float32 (see vec16_avx512.h's load16_e4m3). */
VECTOR_INLINE __m256 widen8_e4m3(const uint8_t *from) {
    __m128i wide = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)from));
    __m128i half = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(wide, _mm_set1_epi16(0x80)), 8),
                                _mm_slli_epi16(_mm_and_si128(wide, _mm_set1_epi16(0x7f)), 7));
    return _mm256_cvtph_ps(half);
}

/* 16 int8 values at `offset`, as float32. */
VECTOR_INLINE vec16 load16_int8(const void *base, int64_t offset) {
    const int8_t *from = (const int8_t *)base + offset;
    return (vec16){widen8_int8(from), widen8_int8(from + 8)};
}

/* 16 e4m3 values at `offset`, each / 256. */
VECTOR_INLINE vec16 load16_e4m3(const void *base, int64_t offset) {
    const uint8_t *from = (const uint8_t *)base + offset;
    return (vec16){widen8_e4m3(from), widen8_e4m3(from + 8)};
}

/* sum_each of the AVX-512 path, on halves: the same additions of the same lanes (lane i plus lane
 * i + 8, then + 4, + 2, + 1 for each vector), the keys' partial sums placed otherwise between the
 * rounds so that the last round leaves them in order. */
VECTOR_INLINE vec16 sum_each(vec16 v[16]) {
    __m256 eight[16], four[8], two[4];
    /* Lane i + lane i + 8: a vector's halves added. */
    for (int k = 0; k < 16; k++) eight[k] = _mm256_add_ps(v[k].lo, v[k].hi);
    /* Lane i + lane i + 4 of vectors k and k + 4 (k = 0-3, 8-11), as [k's 4 | k + 4's 4]. */
    for (int i = 0; i < 8; i++) {
        const int k = i / 4 * 8 + i % 4;
        four[i] = _mm256_add_ps(_mm256_permute2f128_ps(eight[k], eight[k + 4], 0x20),
                                _mm256_permute2f128_ps(eight[k], eight[k + 4], 0x31));
    }
    /* Lane i + lane i + 2 of two such: [k, k, k + 1, k + 1 | k + 4, k + 4, k + 5, k + 5] for k = 0, 2, 8, 10. */
    for (int i = 0; i < 4; i++)
        two[i] = _mm256_add_ps(_mm256_shuffle_ps(four[2 * i], four[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(four[2 * i], four[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* Lane i + lane i + 1: the adjacent pairs, vectors 0-7 in order, then 8-15. */
    return (vec16){_mm256_hadd_ps(two[0], two[1]), _mm256_hadd_ps(two[2], two[3])};
}

#endif
