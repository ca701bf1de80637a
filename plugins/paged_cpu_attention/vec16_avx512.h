/*
 * vec16 on AVX-512: 16 float32 lanes in one register. Included by vec16.h.
 */
#ifndef TERCET_VEC16_AVX512_H
#define TERCET_VEC16_AVX512_H

#include <immintrin.h>
#include <string.h>

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

#if defined(__AVX512BF16__)
/* bfloat16 dot products (AVX512-BF16's vdpbf16ps: 32 multiply-adds an instruction, twice float32's),
 * which the kernels use for a bfloat16 cache whose head size is a multiple of 32 (decode_attention.c).
 * Levels without them keep float32 multiply-adds: their bits differ from these. */
#define BF16_DOTS 1

/* 16 lanes of two bfloat16 each: the pair's first in the low half, its second in the high half. */
typedef __m512i pairs16;

/* acc + a's pairs times b's, lane by lane (one instruction; its rounding is the hardware's own, the same
 * wherever a lane's inputs are the same). */
VECTOR_INLINE vec16 dot_pairs16(vec16 acc, pairs16 a, pairs16 b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
/* dot_pairs16 against the pair at `from` (two bfloat16 values side by side) in every lane, read by the
 * instruction itself (an embedded broadcast, which GCC does not fold from the intrinsics; a broadcast
 * of its own took a shuffle: 0.68x the time of a 2,048-token prompt's attention against 0.75x). */
VECTOR_INLINE vec16 dot_broadcast_pair16(vec16 acc, pairs16 a, const uint16_t *from) {
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const uint32_t *)from));
    return acc;
}
/* 32 bfloat16 values at `from` as they lie: lane i holds values 2i and 2i + 1. */
VECTOR_INLINE pairs16 load_pairs16(const uint16_t *from) { return _mm512_loadu_si512((const void *)from); }
VECTOR_INLINE void store_pairs16(uint16_t *to, pairs16 v) { _mm512_storeu_si512((void *)to, v); }
/* 16 bfloat16 values at `from` (a row's 16), for interleave16. */
typedef __m256i bf16x16;
VECTOR_INLINE bf16x16 load_bf16x16(const uint16_t *from) { return _mm256_loadu_si256((const __m256i *)from); }
VECTOR_INLINE bf16x16 zero_bf16x16(void) { return _mm256_setzero_si256(); }
/* first and second side by side: lane i is (first[i], second[i]). */
VECTOR_INLINE pairs16 interleave16(bf16x16 first, bf16x16 second) {
    const __m512i index = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                           37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    return _mm512_permutex2var_epi16(_mm512_castsi256_si512(first), index, _mm512_castsi256_si512(second));
}
VECTOR_INLINE void store_bf16x16(uint16_t *to, bf16x16 v) { _mm256_storeu_si256((__m256i *)to, v); }
/* 16 float32 values rounded to bfloat16 (to nearest even). */
VECTOR_INLINE bf16x16 round_bf16x16(vec16 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
/* 32 float32 values (first, then next) rounded to bfloat16, in their order: lane i holds values 2i, 2i + 1. */
VECTOR_INLINE pairs16 round_pairs16(vec16 first, vec16 next) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(round_bf16x16(first)), round_bf16x16(next), 1);
}
/* first and second rounded to bfloat16, side by side: lane i is (first[i], second[i]). */
VECTOR_INLINE pairs16 pair_lanes16(vec16 first, vec16 second) {
    return interleave16(round_bf16x16(first), round_bf16x16(second));
}
#endif

#endif
