/* ember — randomness: Philox4x32-10, the CPU random kernels and the global
 * generator (DESIGN.md §2 "Randomness").
 *
 * Philox4x32-10 (Salmon et al., SC'11; the Random123 reference):
 *   round:  (c0, c1, c2, c3) -> (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0))
 *           with M0 = 0xD2511F53, M1 = 0xCD9E8D57 (32x32 -> 64-bit products);
 *   key schedule: after each round k0 += 0x9E3779B9, k1 += 0xBB67AE85;
 *   ten rounds; the output is the final counter block.
 * ember's stream: em__philox(seed, counter) uses
 *   key     = (k0, k1) = (seed & 0xffffffff, seed >> 32)
 *   counter = (c0, c1, c2, c3) = (counter & 0xffffffff, counter >> 32, 0, 0)
 * Every device implements this same function, so draws are bit-identical.
 *
 * Element e of a random tensor drawn at (seed, offset) uses the block of
 * counter offset + e/4, lane e%4 (ops.h). A draw of n elements consumes
 * ceil(n/4) counters. Per element:
 *   RAND       u = (x >> 8) * 2^-24 in [0,1) (em__u32_to_unit); the value is
 *              fmaf(high - low, u, low) computed in f32 (f64 tensors: fma in
 *              f64), then rounded to the dtype; a result that rounds up to
 *              `high` is replaced by the largest value of the dtype below it,
 *              so the range stays [low, high).
 *   RANDN      Box-Muller on lane pairs (0,1) and (2,3) of each block, in f64:
 *              r = sqrt(-2 ln((x_a + 1) * 2^-32)), t = 2 pi x_b * 2^-32,
 *              lane a gets r cos t, lane b gets r sin t (a = 0 or 2, b = a+1);
 *              value = mean + std * z rounded to the dtype. (Bit identity with
 *              CUDA holds up to the last ulp of its log/sin/cos.)
 *   BERNOULLI  true iff u < p, u as for RAND: true with probability
 *              ceil(p * 2^24) / 2^24, exactly 0 for p = 0 and 1 for p = 1.
 *
 * The global generator is process-wide and guarded by a mutex. Its seed is 0
 * until em_set_seed is called; em_set_seed also resets the offset to 0.
 * Every front-end draw reserves its counters from it, so the same seed
 * replays the same sequence of tensors, whatever the thread count.
 */
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

/* ---- Philox4x32-10 ---------------------------------------------------------- */

/* The full function: 128-bit counter, 64-bit key. Non-static so the tests can
 * check the Random123 known-answer vectors. */

void em__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c1 = (uint32_t)p1;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c3 = (uint32_t)p0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void em__philox(uint64_t seed, uint64_t counter, uint32_t out[4])
{
    const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    em__philox4x32_10(ctr, key, out);
}

/* PHILOX_BATCH consecutive blocks: x[j] = em__philox(seed, first + j). With
 * AVX-512 the 16 blocks run in parallel lanes (same arithmetic, same bits). */
#define PHILOX_BATCH 16

#if defined(__AVX512F__)
/* hi and lo 32 bits of a * m for 16 unsigned 32-bit lanes */
static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo)
{
    __m512i pe = _mm512_mul_epu32(a, m);                          /* even lanes, 64-bit */
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);   /* odd lanes */
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}
#endif

void em__philox_batch16(uint64_t seed, uint64_t first, uint32_t x[16][4])
{
#if defined(__AVX512F__)
    uint32_t lo[16], hi[16];
    for (int j = 0; j < 16; j++) {
        lo[j] = (uint32_t)(first + (uint64_t)j);
        hi[j] = (uint32_t)((first + (uint64_t)j) >> 32);
    }
    __m512i c0 = _mm512_loadu_si512(lo), c1 = _mm512_loadu_si512(hi);
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        __m512i h0, l0, h1, l1;
        mulhilo16(c0, m0, &h0, &l0);
        mulhilo16(c2, m1, &h1, &l1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32((int)k0));
        c1 = l1;
        c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32((int)k1));
        c3 = l0;
    }
    uint32_t o[4][16];
    _mm512_storeu_si512(o[0], c0);
    _mm512_storeu_si512(o[1], c1);
    _mm512_storeu_si512(o[2], c2);
    _mm512_storeu_si512(o[3], c3);
    for (int j = 0; j < 16; j++)
        for (int l = 0; l < 4; l++) x[j][l] = o[l][j];
#else
    for (int j = 0; j < PHILOX_BATCH; j++) em__philox(seed, first + (uint64_t)j, x[j]);
#endif
}

/* ---- kernels ------------------------------------------------------------------- */

/* Blocks per thread below which a draw stays on the calling thread. */
#define RNG_GRAIN 2048

/* The largest value of a 16-bit float format strictly below the pattern b. */
static uint16_t step_down16(uint16_t b)
{
    if ((b & 0x7fff) == 0) return 0x8001;           /* +-0 -> -min subnormal */
    return (b & 0x8000) ? (uint16_t)(b + 1) : (uint16_t)(b - 1);
}

typedef struct rand_ctx {
    em_dtype dt;
    double low, high;
    float lowf, rangef, highf;
} rand_ctx;

/* f64, f16, bf16 (f32 is inlined in em_cpu_RAND). */
static inline void rand_store(char *p, const rand_ctx *c, uint32_t x)
{
    float u = em__u32_to_unit(x);
    switch (c->dt) {
    case EM_F64: {
        double v = fma(c->high - c->low, (double)u, c->low);
        if (v >= c->high && c->high > c->low) v = nextafter(c->high, -INFINITY);
        memcpy(p, &v, 8);
        break;
    }
    default: {   /* f16, bf16: computed in f32, rounded once to the format */
        float v = fmaf(c->rangef, u, c->lowf);
        uint16_t h = c->dt == EM_F16 ? em__f32_to_f16(v) : em__f32_to_bf16(v);
        if (em__load(&h, c->dt) >= c->high && c->high > c->low) h = step_down16(h);
        memcpy(p, &h, 2);
        break;
    }
    }
}

int em_cpu_RAND(const em_kargs *k)
{
    em_tensor *t = k->out[0];
    uint64_t seed = (uint64_t)k->i[0], off = (uint64_t)k->i[1];
    rand_ctx c = {.dt = t->dtype, .low = k->f[0], .high = k->f[1]};
    c.lowf = (float)c.low;
    c.highf = (float)c.high;
    c.rangef = (float)(c.high - c.low);
    int64_t n = em_numel(t), nblk = (n + 3) / 4;
    size_t es = em_dtype_size(t->dtype);
    char *base = em_data_ptr(t);
    int64_t nbat = (nblk + PHILOX_BATCH - 1) / PHILOX_BATCH;
    #pragma omp parallel for schedule(static) if (nblk > RNG_GRAIN)
    for (int64_t g = 0; g < nbat; g++) {
        uint32_t x[PHILOX_BATCH][4];
        em__philox_batch16(seed, off + (uint64_t)(g * PHILOX_BATCH), x);
        int64_t e0 = 4 * PHILOX_BATCH * g, m = n - e0 < 4 * PHILOX_BATCH ? n - e0 : 4 * PHILOX_BATCH;
        if (c.dt == EM_F32) {   /* the hot case, without the per-element dtype switch */
            float *o = (float *)base + e0;
            for (int64_t l = 0; l < m; l++) {
                float v = fmaf(c.rangef, em__u32_to_unit(x[l / 4][l % 4]), c.lowf);
                o[l] = v >= c.highf && c.highf > c.lowf ? nextafterf(c.highf, -INFINITY) : v;
            }
        } else {
            for (int64_t l = 0; l < m; l++) rand_store(base + (size_t)(e0 + l) * es, &c, x[l / 4][l % 4]);
        }
    }
    return EM_OK;
}

/* Box-Muller on one lane pair; see the header comment. */
static inline void box_muller(uint32_t xa, uint32_t xb, double *za, double *zb)
{
    const double two32 = 4294967296.0, two_pi = 6.283185307179586476925286766559;
    double r = sqrt(-2.0 * log(((double)xa + 1.0) / two32));
    double t = two_pi * ((double)xb / two32);
    *za = r * cos(t);
    *zb = r * sin(t);
}

int em_cpu_RANDN(const em_kargs *k)
{
    em_tensor *t = k->out[0];
    uint64_t seed = (uint64_t)k->i[0], off = (uint64_t)k->i[1];
    double mean = k->f[0], std = k->f[1];
    em_dtype dt = t->dtype;
    int64_t n = em_numel(t), nblk = (n + 3) / 4;
    size_t es = em_dtype_size(dt);
    char *base = em_data_ptr(t);
    int64_t nbat = (nblk + PHILOX_BATCH - 1) / PHILOX_BATCH;
    #pragma omp parallel for schedule(static) if (nblk > RNG_GRAIN / 8)
    for (int64_t g = 0; g < nbat; g++) {
        uint32_t x[PHILOX_BATCH][4];
        double z[4 * PHILOX_BATCH];
        em__philox_batch16(seed, off + (uint64_t)(g * PHILOX_BATCH), x);
        int64_t e0 = 4 * PHILOX_BATCH * g, m = n - e0 < 4 * PHILOX_BATCH ? n - e0 : 4 * PHILOX_BATCH;
        for (int64_t j = 0; j < (m + 3) / 4; j++) {
            box_muller(x[j][0], x[j][1], &z[4 * j], &z[4 * j + 1]);
            box_muller(x[j][2], x[j][3], &z[4 * j + 2], &z[4 * j + 3]);
        }
        if (dt == EM_F32) {
            float *o = (float *)base + e0;
            for (int64_t l = 0; l < m; l++) o[l] = (float)(mean + std * z[l]);
        } else {
            for (int64_t l = 0; l < m; l++) em__store(base + (size_t)(e0 + l) * es, dt, mean + std * z[l]);
        }
    }
    return EM_OK;
}

int em_cpu_BERNOULLI(const em_kargs *k)
{
    em_tensor *t = k->out[0];
    uint64_t seed = (uint64_t)k->i[0], off = (uint64_t)k->i[1];
    double p = k->f[0];
    int64_t n = em_numel(t), nblk = (n + 3) / 4;
    uint8_t *o = em_data_ptr(t);
    int64_t nbat = (nblk + PHILOX_BATCH - 1) / PHILOX_BATCH;
    #pragma omp parallel for schedule(static) if (nblk > RNG_GRAIN)
    for (int64_t g = 0; g < nbat; g++) {
        uint32_t x[PHILOX_BATCH][4];
        em__philox_batch16(seed, off + (uint64_t)(g * PHILOX_BATCH), x);
        int64_t e0 = 4 * PHILOX_BATCH * g, m = n - e0 < 4 * PHILOX_BATCH ? n - e0 : 4 * PHILOX_BATCH;
        for (int64_t l = 0; l < m; l++) o[e0 + l] = (double)em__u32_to_unit(x[l / 4][l % 4]) < p;
    }
    return EM_OK;
}

/* ---- the global generator ---------------------------------------------------- */

static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;
static em_rng_state rng = {0, 0};   /* seed 0 until em_set_seed */

void em_set_seed(uint64_t seed)
{
    pthread_mutex_lock(&rng_mu);
    rng.seed = seed;
    rng.offset = 0;
    pthread_mutex_unlock(&rng_mu);
}

uint64_t em_get_seed(void)
{
    pthread_mutex_lock(&rng_mu);
    uint64_t s = rng.seed;
    pthread_mutex_unlock(&rng_mu);
    return s;
}

em_rng_state em_rng_get_state(void)
{
    pthread_mutex_lock(&rng_mu);
    em_rng_state s = rng;
    pthread_mutex_unlock(&rng_mu);
    return s;
}

void em_rng_set_state(em_rng_state s)
{
    pthread_mutex_lock(&rng_mu);
    rng = s;
    pthread_mutex_unlock(&rng_mu);
}

/* Reserves n counters; the seed and first counter come from one locked read. */
static uint64_t reserve(uint64_t n, uint64_t *seed)
{
    pthread_mutex_lock(&rng_mu);
    uint64_t first = rng.offset;
    rng.offset += n;
    if (seed) *seed = rng.seed;
    pthread_mutex_unlock(&rng_mu);
    return first;
}

uint64_t em_rng_reserve(uint64_t n) { return reserve(n, NULL); }

/* ---- front-ends ---------------------------------------------------------------- */

/* Draws into t (contiguous) from the global stream; the status of the kernel. */
static em_status draw(em_op op, em_tensor *t, double f0, double f1, bool inplace)
{
    uint64_t seed, n = (uint64_t)em_numel(t);
    uint64_t off = reserve((n + 3) / 4, &seed);
    em_kargs k = {.op = op, .out = {t}, .f = {f0, f1}, .i = {(int64_t)seed, (int64_t)off}, .inplace = inplace};
    return em__dispatch(&k);
}

static bool shape_ok(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > EM_MAX_DIMS) {
        em__misuse(op, "ndim %d is outside [0, %d]", ndim, EM_MAX_DIMS);
        return false;
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) {
            em__misuse(op, "negative size %lld in dim %d of %s", (long long)shape[d], d, em__dims_str(ndim, shape));
            return false;
        }
    return true;
}

/* A new tensor filled by op; NULL (released) on failure. */
static em_tensor *drawn(const char *name, em_op op, int ndim, const int64_t *shape, em_dtype dt, em_device dev,
                        double f0, double f1)
{
    if (!shape_ok(name, ndim, shape)) return NULL;
    em_tensor *t = em__empty(ndim, shape, dt, dev);
    if (!t) return NULL;
    if (draw(op, t, f0, f1, false) != EM_OK) {
        if (em_scope_depth() == 0) em_release(t);
        return NULL;
    }
    return t;
}

em_tensor *em_rand(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    EM_CHECK(em_dtype_is_float(dt), "em_rand", "dtype %s is not a floating type", em_dtype_name(dt));
    return drawn("em_rand", EM_OP_RAND, ndim, shape, dt, dev, 0.0, 1.0);
}

em_tensor *em_randn(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    EM_CHECK(em_dtype_is_float(dt), "em_randn", "dtype %s is not a floating type", em_dtype_name(dt));
    return drawn("em_randn", EM_OP_RANDN, ndim, shape, dt, dev, 0.0, 1.0);
}

em_tensor *em_bernoulli(int ndim, const int64_t *shape, double p, em_device dev)
{
    EM_CHECK(p >= 0.0 && p <= 1.0, "em_bernoulli", "p must be in [0, 1], got %g", p);
    return drawn("em_bernoulli", EM_OP_BERNOULLI, ndim, shape, EM_BOOL, dev, p, 0.0);
}

/* In place: a contiguous t is written directly; any other layout is drawn
 * into a contiguous temporary (element order = logical order) and copied in. */
static em_tensor *fill_inplace(const char *name, em_op op, em_tensor *t, double f0, double f1)
{
    for (int d = 0; d < t->ndim; d++)
        EM_CHECK(t->stride[d] != 0 || t->shape[d] <= 1, name,
                 "cannot write in place to %s: dim %d is expanded (stride 0)", em__shape_str(t), d);
    if (em_is_contiguous(t)) return draw(op, t, f0, f1, true) == EM_OK ? t : NULL;
    em_tensor *res = NULL;
    em_scope_begin();
    em_tensor *tmp = em__empty(t->ndim, t->shape, t->dtype, t->device);
    if (tmp && draw(op, tmp, f0, f1, false) == EM_OK) res = em_copy_(t, tmp);
    em_scope_end();
    return res;
}

em_tensor *em_uniform_(em_tensor *t, double low, double high)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(em_dtype_is_float(t->dtype), "em_uniform_", "dtype %s of %s is not a floating type",
             em_dtype_name(t->dtype), em__shape_str(t));
    EM_CHECK(isfinite(low) && isfinite(high) && low <= high, "em_uniform_",
             "expects finite low <= high, got low=%g, high=%g", low, high);
    return fill_inplace("em_uniform_", EM_OP_RAND, t, low, high);
}

em_tensor *em_normal_(em_tensor *t, double mean, double std)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(em_dtype_is_float(t->dtype), "em_normal_", "dtype %s of %s is not a floating type",
             em_dtype_name(t->dtype), em__shape_str(t));
    EM_CHECK(isfinite(mean) && isfinite(std) && std >= 0, "em_normal_",
             "expects a finite mean and std >= 0, got mean=%g, std=%g", mean, std);
    return fill_inplace("em_normal_", EM_OP_RANDN, t, mean, std);
}

/* Fisher-Yates from the top: step i (n-1 down to 1) swaps a[i] with a[j],
 * j = r mod (i+1), r = (x0 << 32 | x1) of the block at counter offset + i.
 * Uses counters [offset + 1, offset + n); the bias of the modulo is below
 * n / 2^64. Deterministic in (n, seed, offset); independent of the global
 * generator. */
em_tensor *em_randperm(int64_t n, uint64_t seed, uint64_t offset)
{
    EM_CHECK(n >= 0, "em_randperm", "n must be non-negative, got %lld", (long long)n);
    em_tensor *t = em__empty(1, &n, EM_I64, EM_CPU);
    if (!t) return NULL;
    int64_t *a = em_data_ptr(t);
    for (int64_t i = 0; i < n; i++) a[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t x[4];
        em__philox(seed, offset + (uint64_t)i, x);
        uint64_t r = ((uint64_t)x[0] << 32) | x[1];
        int64_t j = (int64_t)(r % (uint64_t)(i + 1));
        int64_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
    return t;
}
