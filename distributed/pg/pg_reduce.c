/* ember — elementwise reductions for the process group backends: combining
 * the same slice of every rank's data (shared-memory all-reduce) and the AVG
 * division after an MPI sum. Every rank that reduces a slice combines the
 * sources in rank order, so the result does not depend on who reduced it. */
#include "distributed/pg/pg_internal.h"

#include <string.h>

#define BLOCK 2048   /* elements per pass: the accumulator stays in L1 */

/* One typed pass per dtype: acc = src[0]; acc op= src[q]; AVG divides. */
#define DEFINE_REDUCE(NAME, T, ACC)                                                            \
    static void NAME(T *dst, T *dst2, const void *const *src, int ns, int64_t n, em_reduce_op op) \
    {                                                                                          \
        ACC acc[BLOCK];                                                                        \
        for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {                                            \
            int64_t m = n - b0 < BLOCK ? n - b0 : BLOCK;                                       \
            const T *s0 = (const T *)src[0] + b0;                                              \
            for (int64_t i = 0; i < m; i++)                                                    \
                acc[i] = (ACC)s0[i];                                                           \
            for (int q = 1; q < ns; q++) {                                                     \
                const T *s = (const T *)src[q] + b0;                                           \
                if (op == EM_RED_MAX) {                                                        \
                    for (int64_t i = 0; i < m; i++)                                            \
                        acc[i] = (ACC)s[i] > acc[i] ? (ACC)s[i] : acc[i];                      \
                } else if (op == EM_RED_MIN) {                                                 \
                    for (int64_t i = 0; i < m; i++)                                            \
                        acc[i] = (ACC)s[i] < acc[i] ? (ACC)s[i] : acc[i];                      \
                } else {                                                                       \
                    for (int64_t i = 0; i < m; i++)                                            \
                        acc[i] += (ACC)s[i];                                                   \
                }                                                                              \
            }                                                                                  \
            if (op == EM_RED_AVG)                                                              \
                for (int64_t i = 0; i < m; i++)                                                \
                    acc[i] /= (ACC)ns;                                                         \
            T *d = dst + b0;                                                                   \
            for (int64_t i = 0; i < m; i++)                                                    \
                d[i] = (T)acc[i];                                                              \
            if (dst2)                                                                          \
                memcpy(dst2 + b0, d, (size_t)m * sizeof(T));                                   \
        }                                                                                      \
    }

DEFINE_REDUCE(reduce_f64, double, double)
DEFINE_REDUCE(reduce_i64, int64_t, int64_t)
DEFINE_REDUCE(reduce_i32, int32_t, int32_t)
DEFINE_REDUCE(reduce_u8, uint8_t, uint8_t)

/* f32, with the two-rank sum (DDP's case) as one streaming loop. */
static void reduce_f32(float *dst, float *dst2, const void *const *src, int ns, int64_t n, em_reduce_op op)
{
    if (ns == 2 && (op == EM_RED_SUM || op == EM_RED_AVG)) {
        const float *a = src[0], *b = src[1];
        float scale = op == EM_RED_AVG ? 0.5f : 1.0f;   /* x/2 == x*0.5 exactly */
        if (dst2) {
            for (int64_t i = 0; i < n; i++) {
                float v = (a[i] + b[i]) * scale;
                dst[i] = v;
                dst2[i] = v;
            }
        } else {
            for (int64_t i = 0; i < n; i++)
                dst[i] = (a[i] + b[i]) * scale;
        }
        return;
    }
    float acc[BLOCK];
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
        int64_t m = n - b0 < BLOCK ? n - b0 : BLOCK;
        memcpy(acc, (const float *)src[0] + b0, (size_t)m * sizeof(float));
        for (int q = 1; q < ns; q++) {
            const float *s = (const float *)src[q] + b0;
            if (op == EM_RED_MAX)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = s[i] > acc[i] ? s[i] : acc[i];
            else if (op == EM_RED_MIN)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = s[i] < acc[i] ? s[i] : acc[i];
            else
                for (int64_t i = 0; i < m; i++)
                    acc[i] += s[i];
        }
        if (op == EM_RED_AVG)
            for (int64_t i = 0; i < m; i++)
                acc[i] /= (float)ns;
        memcpy(dst + b0, acc, (size_t)m * sizeof(float));
        if (dst2)
            memcpy(dst2 + b0, acc, (size_t)m * sizeof(float));
    }
}

/* f16/bf16: widen each source block to f32, combine, round once. */
static void reduce_half(void *dst, void *dst2, const void *const *src, int ns, int64_t n, em_dtype dt,
                        em_reduce_op op)
{
    float acc[BLOCK], tmp[BLOCK];
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
        int64_t m = n - b0 < BLOCK ? n - b0 : BLOCK;
        em__convert_n(acc, EM_F32, (const uint16_t *)src[0] + b0, dt, m);
        for (int q = 1; q < ns; q++) {
            em__convert_n(tmp, EM_F32, (const uint16_t *)src[q] + b0, dt, m);
            if (op == EM_RED_MAX)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = tmp[i] > acc[i] ? tmp[i] : acc[i];
            else if (op == EM_RED_MIN)
                for (int64_t i = 0; i < m; i++)
                    acc[i] = tmp[i] < acc[i] ? tmp[i] : acc[i];
            else
                for (int64_t i = 0; i < m; i++)
                    acc[i] += tmp[i];
        }
        if (op == EM_RED_AVG)
            for (int64_t i = 0; i < m; i++)
                acc[i] /= (float)ns;
        em__convert_n((uint16_t *)dst + b0, dt, acc, EM_F32, m);
        if (dst2)
            memcpy((uint16_t *)dst2 + b0, (uint16_t *)dst + b0, (size_t)m * 2);
    }
}

void em__pg_reduce_into(void *dst, void *dst2, const void *const *src, int n_src, int64_t n,
                        em_dtype dt, em_reduce_op op)
{
    switch (dt) {
    case EM_F32: reduce_f32(dst, dst2, src, n_src, n, op); break;
    case EM_F64: reduce_f64(dst, dst2, src, n_src, n, op); break;
    case EM_F16:
    case EM_BF16: reduce_half(dst, dst2, src, n_src, n, dt, op); break;
    case EM_I64: reduce_i64(dst, dst2, src, n_src, n, op); break;
    case EM_I32: reduce_i32(dst, dst2, src, n_src, n, op); break;
    case EM_BOOL: reduce_u8(dst, dst2, src, n_src, n, op); break;
    default: break;
    }
}

void em__pg_divide(void *p, int64_t n, em_dtype dt, int world)
{
    if (dt == EM_F32) {
        float *x = p;
        for (int64_t i = 0; i < n; i++)
            x[i] /= (float)world;
    } else if (dt == EM_F64) {
        double *x = p;
        for (int64_t i = 0; i < n; i++)
            x[i] /= (double)world;
    }
}
