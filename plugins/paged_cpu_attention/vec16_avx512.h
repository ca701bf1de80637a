/*
 * vec16 on AVX-512: 16 float32 lanes in one register. Included by vec16.h.
 */
#ifndef TERCET_VEC16_AVX512_H
#define TERCET_VEC16_AVX512_H

#include <immintrin.h>

#define PREFETCH_L2(address) _mm_prefetch((address), _MM_HINT_T1)

typedef __m512 vec16;

VECTOR_INLINE vec16 zero16(void) { return _mm512_setzero_ps(); }
VECTOR_INLINE vec16 broadcast16(float value) { return _mm512_set1_ps(value); }
VECTOR_INLINE vec16 loadu16(const float *from) { return _mm512_loadu_ps(from); }
VECTOR_INLINE void storeu16(float *to, vec16 v) { _mm512_storeu_ps(to, v); }
VECTOR_INLINE vec16 add16(vec16 a, vec16 b) { return _mm512_add_ps(a, b); }
VECTOR_INLINE vec16 sub16(vec16 a, vec16 b) { return _mm512_sub_ps(a, b); }
VECTOR_INLINE vec16 mul16(vec16 a, vec16 b) { return _mm512_mul_ps(a, b); }
VECTOR_INLINE vec16 fma16(vec16 a, vec16 b, vec16 c) { return _mm512_fmadd_ps(a, b, c); }
/* a > b ? a : b, lane by lane (b where either is NaN). */
VECTOR_INLINE vec16 max16(vec16 a, vec16 b) { return _mm512_max_ps(a, b); }
/* x < limit ? a : b, lane by lane. */
VECTOR_INLINE vec16 select_below16(vec16 x, vec16 limit, vec16 a, vec16 b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, limit, _CMP_LT_OQ), b, a);
}
/* 2^n for whole numbers n (-126 to 127): the float whose bits are (n + 127) << 23. */
VECTOR_INLINE vec16 pow2_16(vec16 n) {
    const __m512i biased = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
}

/* 16 values at `offset` of a bfloat16 or float32 array, as float32. */
VECTOR_INLINE vec16 load16(const void *base, int dtype, int64_t offset) {
    if (dtype == DTYPE_BFLOAT16) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + offset));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    return _mm512_loadu_ps((const float *)base + offset);
}

/* 16 int8 values at `offset`, as float32. */
VECTOR_INLINE vec16 load16_int8(const void *base, int64_t offset) {
    __m128i raw = _mm_loadu_si128((const __m128i *)((const int8_t *)base + offset));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw));
}

/* 16 e4m3 values at `offset`, each / 256 (exactly): its sign, exponent and mantissa bits moved to a
 * float16's places make a float16 of that value (the exponent biases differ by 8), widened by F16C. */
VECTOR_INLINE vec16 load16_e4m3(const void *base, int64_t offset) {
    __m256i wide = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)((const uint8_t *)base + offset)));
    __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x80)), 8),
                                   _mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x7f)), 7));
    return _mm512_cvtph_ps(half);
}

/* The lanes of (a, b) that lo picks plus those hi picks: one round of sum_each. */
VECTOR_INLINE __m512 add_picked(__m512 a, __m512 b, __m512i lo, __m512i hi) {
    return _mm512_add_ps(_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b));
}

/* The sums of 16 vectors as one vector (lane j: the sum of vector j's lanes), in place. Each round
 * pairs the vectors and halves the partial sums each holds (16, 8, 4, 2, then 1 a key, the keys in
 * order): 15 additions for the 16 keys, where reducing each vector alone takes 4 each and as many
 * shuffles. A vector's lanes are folded in halves: lane i plus lane i + 8, then + 4, + 2, + 1. */
VECTOR_INLINE vec16 sum_each(vec16 v[16]) {
    const __m512i lo16 = _mm512_set_epi32(23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i hi16 = _mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
    const __m512i lo8 = _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i hi8 = _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20, 15, 14, 13, 12, 7, 6, 5, 4);
    const __m512i lo4 = _mm512_set_epi32(29, 28, 25, 24, 21, 20, 17, 16, 13, 12, 9, 8, 5, 4, 1, 0);
    const __m512i hi4 = _mm512_set_epi32(31, 30, 27, 26, 23, 22, 19, 18, 15, 14, 11, 10, 7, 6, 3, 2);
    const __m512i lo2 = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i hi2 = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int i = 0; i < 8; i++) v[i] = add_picked(v[2 * i], v[2 * i + 1], lo16, hi16);
    for (int i = 0; i < 4; i++) v[i] = add_picked(v[2 * i], v[2 * i + 1], lo8, hi8);
    for (int i = 0; i < 2; i++) v[i] = add_picked(v[2 * i], v[2 * i + 1], lo4, hi4);
    return add_picked(v[0], v[1], lo2, hi2);
}


#endif
