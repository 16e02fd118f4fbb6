/* ember — COPY of a transposed layout into a contiguous tensor, in tiles.
 *
 * em_contiguous(em_transpose(x, 0, 1)) and the like: the output is contiguous,
 * and the input reads the output's last dim with a stride S (a row length of
 * x). Walked element by element (COPY's iterator), each output row reads one
 * element per input row, one cache line each; with a power-of-two S (rows of
 * 1024 or 2048) those lines fall into a few cache sets and evict one another:
 * [2048,1024] f32 took 7 ms (8 MB, about 1 GB/s) where [1000,1000] took 0.27.
 * Tiles of TILE x TILE elements read TILE lines and use them whole.
 *
 * The pattern: out contiguous; in[0]'s stride along out's last dim d is not 1;
 * another dim b has in[0] stride 1. For each index of the other dims, the
 * [shape[d], shape[b]] block of the input (rows along d, lds = that stride) is
 * transposed into the output's [shape[b], shape[d]] block (ldd = out's stride
 * along b). Same dtype: elements move as bit patterns (f32's full 16 x 16
 * blocks through registers, transpose.h); another dtype: each tile row is
 * gathered as the input's dtype and converted with em__convert_n, the same
 * conversion as the element-wise path. Returns false, nothing written, when
 * the pattern does not hold (the caller walks elements as before).
 */
#include "tensor/cpu/cpu.h"
#include "tensor/cpu/transpose.h"

#include <string.h>

enum { TILE = 32, PAR_ELEMS = 1 << 16 };

/* One tile: rows r0..r0+nr of the source block (along d), columns c0..c0+nc
 * (along b), into the destination block's rows c (along b), columns r. */
static void tile(char *dst, int64_t ldd, const char *src, int64_t lds, size_t es, em_dtype ddt, em_dtype sdt,
                 int64_t nr, int64_t nc)
{
    if (ddt == sdt && es == 4 && nr == TILE && nc == TILE) {
#if defined(__AVX512F__)
        for (int64_t r = 0; r < TILE; r += 16)
            for (int64_t c = 0; c < TILE; c += 16)
                transpose16_f32((float *)dst + c * ldd + r, ldd, (const float *)src + r * lds + c, lds);
        return;
#endif
    }
    _Alignas(64) char row[TILE * 8];
    size_t ds = em_dtype_size(ddt);
    for (int64_t c = 0; c < nc; c++) {
        char *out = ddt == sdt ? dst + (size_t)(c * ldd) * ds : row;
#define GATHER_T(T)                                                                              \
    for (int64_t r = 0; r < nr; r++) ((T *)out)[r] = ((const T *)src)[r * lds + c];
        switch (es) {
        case 1: GATHER_T(uint8_t) break;
        case 2: GATHER_T(uint16_t) break;
        case 4: GATHER_T(uint32_t) break;
        default: GATHER_T(uint64_t) break;
        }
#undef GATHER_T
        if (ddt != sdt) em__convert_n(dst + (size_t)(c * ldd) * ds, ddt, row, sdt, nr);
    }
}

bool em__copy_transposed(const em_kargs *k)
{
    const em_tensor *o = k->out[0], *x = k->in[0];
    int nd = o->ndim, d = nd - 1, b = -1;
    if (nd < 2 || x->ndim != nd || !em_is_contiguous(o)) return false;
    if (x->stride[d] <= 1 || o->shape[d] < TILE) return false;
    for (int i = 0; i < nd; i++) {
        if (x->stride[i] < 0) return false;
        if (i != d && x->stride[i] == 1 && o->shape[i] >= TILE && b < 0) b = i;
    }
    if (b < 0) return false;
    int64_t rows = o->shape[d], cols = o->shape[b], lds = x->stride[d], ldd = o->stride[b];
    int64_t outer = em_numel(o) / (rows * cols);
    int64_t tr = (rows + TILE - 1) / TILE, tc = (cols + TILE - 1) / TILE, tiles = outer * tr * tc;
    size_t es = em_dtype_size(x->dtype), ds = em_dtype_size(o->dtype);
    const char *xs = (const char *)x->storage->data + (size_t)x->offset * es;
    char *os = (char *)o->storage->data + (size_t)o->offset * ds;
    int nt = em_numel(o) >= PAR_ELEMS ? em_num_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t q = t / (tr * tc), rc = t % (tr * tc), r0 = rc / tc * TILE, c0 = rc % tc * TILE;
        /* offsets of outer block q: its index over the dims other than b and d */
        int64_t xo = 0, oo = 0, rest = q;
        for (int i = nd - 1; i >= 0; i--) {
            if (i == b || i == d) continue;
            int64_t idx = rest % o->shape[i];
            rest /= o->shape[i];
            xo += idx * x->stride[i];
            oo += idx * o->stride[i];
        }
        int64_t nr = rows - r0 < TILE ? rows - r0 : TILE, nc = cols - c0 < TILE ? cols - c0 : TILE;
        tile(os + (size_t)(oo + c0 * ldd + r0) * ds, ldd, xs + (size_t)(xo + r0 * lds + c0) * es, lds, es, o->dtype,
             x->dtype, nr, nc);
    }
    return true;
}
