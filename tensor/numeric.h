/* ember — numbers element by element: dtype conversion (round to nearest
 * even) and the Philox4x32-10 generator that every device shares. For
 * kernels, and for layers that read or write raw tensor data (data's dense
 * tensors, the tests). Not installed. */
#ifndef EMBER_TENSOR_NUMERIC_H
#define EMBER_TENSOR_NUMERIC_H

#include "tensor/tensor.h"

/* ---- per-element conversion (tensor/convert.c) ----------------------------- */
double em__load(const void *p, em_dtype dt);
void em__store(void *p, em_dtype dt, double v);   /* rounds to nearest even; ints truncate toward 0 */
/* Contiguous bulk conversion of n elements (vectorized for f32<->f16/bf16). */
void em__convert_n(void *dst, em_dtype ddt, const void *src, em_dtype sdt, int64_t n);
uint16_t em__f32_to_bf16(float f);
float em__bf16_to_f32(uint16_t h);
uint16_t em__f32_to_f16(float f);
float em__f16_to_f32(uint16_t h);

/* ---- Philox4x32-10 (tensor/rng.c) ------------------------------------------
 * The four 32-bit outputs for counter `counter` under key `seed`. Identical on
 * every device: CUDA kernels implement the same function. */
void em__philox(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* 16 consecutive blocks at once: x[j] = em__philox(seed, first + j), the same
 * bits (AVX-512 lanes where available). */
void em__philox_batch16(uint64_t seed, uint64_t first, uint32_t x[16][4]);
/* The full-width generator (128-bit counter, 64-bit key), as in Random123. */
void em__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* u in [0,1) from 24 random bits: (x >> 8) * 2^-24 (exactly representable in f32). */
static inline float em__u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

#endif
