/* ember — the CPU kernel of SDPA (contract in tensor/ops.h): plain loops in
 * double over any strides, one query row at a time. It is the reference the
 * CUDA (cuDNN) kernel is tested against and what gradcheck differentiates;
 * em_scaled_dot_product_attention never dispatches it on the CPU (there it
 * composes recorded ops, unchanged), so its speed does not matter. */
#include "tensor/cpu/cpu.h"

#include <float.h>
#include <math.h>

/* torch.finfo(dt).min, as op_grad.c's composed path fills masked scores. */
static double lowest(em_dtype dt)
{
    switch (dt) {
    case EM_F64: return -DBL_MAX;
    case EM_F16: return -65504.0;
    case EM_BF16: return -3.3895313892515355e38;
    default: return -FLT_MAX;
    }
}

static double at4(const em_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const char *base = (const char *)t->storage->data;
    int64_t off = t->offset + a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
    return em__load(base + off * (int64_t)em_dtype_size(t->dtype), t->dtype);
}

int em_cpu_SDPA(const em_kargs *k)
{
    const em_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2], *lens = k->in[3];
    em_tensor *out = k->out[0], *lse = k->out[1];
    int64_t B = q->shape[0], H = q->shape[1], Sq = q->shape[2], D = q->shape[3], Sk = kk->shape[2];
    double scale = k->f[0], low = lowest(q->dtype);
    size_t osz = em_dtype_size(out->dtype);
    double *s = em__malloc(sizeof(double) * (size_t)(Sk ? Sk : 1));
    if (!s) return EM_ERR_OOM;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = Sk;
        if (lens) {
            const char *lp = (const char *)lens->storage->data;
            len = (int64_t)em__load(lp + (lens->offset + b * lens->stride[0]) * (int64_t)em_dtype_size(lens->dtype),
                                    lens->dtype);
        }
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++) {
                double mx = -INFINITY, tot = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += at4(q, b, h, i, d) * at4(kk, b, h, j, d);
                    s[j] = j < len ? dot * scale : low;
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < Sk; j++) tot += (s[j] = exp(s[j] - mx));
                int64_t row = (b * H + h) * Sq + i;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Sk; j++) acc += s[j] * at4(v, b, h, j, d);
                    em__store((char *)out->storage->data + (out->offset + row * D + d) * (int64_t)osz, out->dtype,
                              acc / tot);
                }
                ((float *)lse->storage->data)[lse->offset + row] = (float)(mx + log(tot));
            }
    }
    em__free(s);
    return EM_OK;
}
