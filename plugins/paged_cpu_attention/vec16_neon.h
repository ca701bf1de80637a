/*
 * vec16 on NEON (aarch64): 16 float32 lanes in four registers of 4 (0-3, 4-7, 8-11, 12-15), with
 * x86's semantics where the two differ (max with NaN, truncation). Included by vec16.h.
 */
#ifndef TERCET_VEC16_NEON_H
#define TERCET_VEC16_NEON_H

#include <arm_neon.h>

/* Into L2, as _mm_prefetch's T1 hint asks on x86. */
#define PREFETCH_L2(address) __builtin_prefetch((address), 0, 2)

typedef struct {
    float32x4_t q[4];
} vec16;

VECTOR_INLINE vec16 broadcast16(float value) {
    const float32x4_t v = vdupq_n_f32(value);
    return (vec16){{v, v, v, v}};
}
VECTOR_INLINE vec16 zero16(void) { return broadcast16(0.0f); }
VECTOR_INLINE vec16 loadu16(const float *from) {
    return (vec16){{vld1q_f32(from), vld1q_f32(from + 4), vld1q_f32(from + 8), vld1q_f32(from + 12)}};
}
VECTOR_INLINE void storeu16(float *to, vec16 v) {
    for (int i = 0; i < 4; i++) vst1q_f32(to + 4 * i, v.q[i]);
}
#define NEON_LANEWISE(name, operation)                                                                 \
    VECTOR_INLINE vec16 name(vec16 a, vec16 b) {                                                         \
        vec16 out;                                                                                       \
        for (int i = 0; i < 4; i++) out.q[i] = operation(a.q[i], b.q[i]);                                \
        return out;                                                                                      \
    }
NEON_LANEWISE(add16, vaddq_f32)
NEON_LANEWISE(sub16, vsubq_f32)
NEON_LANEWISE(mul16, vmulq_f32)
VECTOR_INLINE vec16 fma16(vec16 a, vec16 b, vec16 c) {
    vec16 out;
    for (int i = 0; i < 4; i++) out.q[i] = vfmaq_f32(c.q[i], a.q[i], b.q[i]);
    return out;
}
/* a > b ? a : b, as x86's max (b where either is NaN; NEON's own max would give the NaN). */
VECTOR_INLINE vec16 max16(vec16 a, vec16 b) {
    vec16 out;
    for (int i = 0; i < 4; i++) out.q[i] = vbslq_f32(vcgtq_f32(a.q[i], b.q[i]), a.q[i], b.q[i]);
    return out;
}
/* x < limit ? a : b, lane by lane. */
VECTOR_INLINE vec16 select_below16(vec16 x, vec16 limit, vec16 a, vec16 b) {
    vec16 out;
    for (int i = 0; i < 4; i++) out.q[i] = vbslq_f32(vcltq_f32(x.q[i], limit.q[i]), a.q[i], b.q[i]);
    return out;
}
/* 2^n for whole numbers n (-126 to 127): truncated to an integer as x86's vcvttps2dq does. */
VECTOR_INLINE vec16 pow2_16(vec16 n) {
    vec16 out;
    for (int i = 0; i < 4; i++)
        out.q[i] = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n.q[i]), vdupq_n_s32(127)), 23));
    return out;
}

/* 16 values at `offset` of a bfloat16 or float32 array, as float32. */
VECTOR_INLINE vec16 load16(const void *base, int dtype, int64_t offset) {
    if (dtype == DTYPE_BFLOAT16) {
        const uint16_t *from = (const uint16_t *)base + offset;
        vec16 out;
        for (int i = 0; i < 2; i++) {
            const uint16x8_t raw = vld1q_u16(from + 8 * i);
            out.q[2 * i] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(raw), 16));
            out.q[2 * i + 1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(raw), 16));
        }
        return out;
    }
    return loadu16((const float *)base + offset);
}

/* Lane i of the result: (t[0][i] + t[2][i]) + (t[1][i] + t[3][i]) after t = the 4 × 4 transpose of
 * f[0..3]: each f's four lanes summed as lane i + lane i + 2, then + 1. */
VECTOR_INLINE float32x4_t sum_four_each(const float32x4_t f[4]) {
    const float32x4x2_t low = vtrnq_f32(f[0], f[1]), high = vtrnq_f32(f[2], f[3]);
    const float32x4_t t0 = vcombine_f32(vget_low_f32(low.val[0]), vget_low_f32(high.val[0]));
    const float32x4_t t1 = vcombine_f32(vget_low_f32(low.val[1]), vget_low_f32(high.val[1]));
    const float32x4_t t2 = vcombine_f32(vget_high_f32(low.val[0]), vget_high_f32(high.val[0]));
    const float32x4_t t3 = vcombine_f32(vget_high_f32(low.val[1]), vget_high_f32(high.val[1]));
    return vaddq_f32(vaddq_f32(t0, t2), vaddq_f32(t1, t3));
}

/* sum_each of the AVX-512 path, on quarters: the same additions of the same lanes (lane i plus lane
 * i + 8, then + 4, + 2, + 1 for each vector). */
VECTOR_INLINE vec16 sum_each(vec16 v[16]) {
    vec16 out;
    for (int quarter = 0; quarter < 4; quarter++) {
        float32x4_t four[4];
        for (int k = 0; k < 4; k++) {
            const vec16 *x = &v[4 * quarter + k];
            four[k] = vaddq_f32(vaddq_f32(x->q[0], x->q[2]), vaddq_f32(x->q[1], x->q[3]));
        }
        out.q[quarter] = sum_four_each(four);
    }
    return out;
}


/* 16 int8 values at `offset`, as float32. */
VECTOR_INLINE vec16 load16_int8(const void *base, int64_t offset) {
    const int8x16_t raw = vld1q_s8((const int8_t *)base + offset);
    const int16x8_t low = vmovl_s8(vget_low_s8(raw)), high = vmovl_s8(vget_high_s8(raw));
    return (vec16){{vcvtq_f32_s32(vmovl_s16(vget_low_s16(low))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(low))),
                    vcvtq_f32_s32(vmovl_s16(vget_low_s16(high))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(high)))}};
}

/* 8 e4m3 values (widened to 16 bits) as the float16s of their values / 256 (see vec16_avx512.h). */
VECTOR_INLINE float16x8_t e4m3_as_half(uint16x8_t wide) {
    const uint16x8_t sign = vshlq_n_u16(vandq_u16(wide, vdupq_n_u16(0x80)), 8);
    return vreinterpretq_f16_u16(vorrq_u16(sign, vshlq_n_u16(vandq_u16(wide, vdupq_n_u16(0x7f)), 7)));
}

/* 16 e4m3 values at `offset`, each / 256. */
VECTOR_INLINE vec16 load16_e4m3(const void *base, int64_t offset) {
    const uint8x16_t raw = vld1q_u8((const uint8_t *)base + offset);
    const float16x8_t low = e4m3_as_half(vmovl_u8(vget_low_u8(raw))), high = e4m3_as_half(vmovl_u8(vget_high_u8(raw)));
    return (vec16){{vcvt_f32_f16(vget_low_f16(low)), vcvt_high_f32_f16(low), vcvt_f32_f16(vget_low_f16(high)),
                    vcvt_high_f32_f16(high)}};
}

#endif
