/* ember — front-ends of the fused ops (tensor/fused.h; contracts in ops.h
 * ADAMW_STEP, UNSCALE, SDPA_BWD): check the operands once, fill em_kargs,
 * dispatch. */
#include "tensor/fused.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <string.h>

/* t is live, contiguous and like ref (numel, dtype, device); misuse otherwise. */
static bool like(em_tensor *t, em_tensor *ref, const char *op, const char *what)
{
    if (!em__live(t, op)) return false;
    if (em_is_contiguous(t) && em_numel(t) == em_numel(ref) && t->dtype == ref->dtype &&
        em_device_eq(t->device, ref->device))
        return true;
    char d0[16], d1[16];
    em__misuse(op, "%s %s %s on %s must be contiguous and match the parameter %s %s on %s", what,
               em_dtype_name(t->dtype), em__shape_str(t), em_device_str(t->device, d0), em_dtype_name(ref->dtype),
               em__shape_str(ref), em_device_str(ref->device, d1));
    return false;
}

em_status em__add_into(em_tensor *dst, em_tensor *src)
{
    em_kargs k = {.op = EM_OP_ADD, .in = {dst, src}, .out = {dst}, .inplace = true};
    return em__dispatch(&k);
}

void em__run_header(em_tensor *hdr, em_tensor *t, int64_t n)
{
    *hdr = (em_tensor){.storage = t->storage, .offset = t->offset, .ndim = 1, .shape = {n}, .stride = {1},
                       .dtype = t->dtype, .device = t->device, .refcount = 1, .magic = EM_TENSOR_LIVE};
}

em_status em__adamw_step(em_tensor *p, em_tensor *g, em_tensor *m, em_tensor *v, em_tensor *vmax,
                         const em_adamw_scalars *c)
{
    static const char op[] = "adamw_step";
    if (!p || !g || !m || !v || !c) {
        em__misuse(op, "parameter, gradient, both moments and the scalars must be given");
        return EM_ERR_INVALID;
    }
    if (!like(p, p, op, "parameter") || !like(g, p, op, "gradient") || !like(m, p, op, "exp_avg") ||
        !like(v, p, op, "exp_avg_sq") || (vmax && !like(vmax, p, op, "max_exp_avg_sq")))
        return EM_ERR_INVALID;
    if (p->dtype != EM_F32 && p->dtype != EM_F64) {
        em__misuse(op, "expected f32 or f64 parameters, got %s", em_dtype_name(p->dtype));
        return EM_ERR_INVALID;
    }
    em_kargs k = {.op = EM_OP_ADAMW_STEP, .in = {g}, .out = {p, m, v, vmax},
                  .f = {c->decay, c->w1, c->beta2, c->w2, c->bc2_sqrt, c->neg_step, c->eps, c->sign},
                  .i = {c->small, c->fma, c->l2}, .inplace = true};
    return em__dispatch(&k);
}

em_status em__unscale(em_tensor *const *t, int n, float inv, bool *found_inf)
{
    static const char op[] = "unscale";
    if (n <= 0) return EM_OK;
    if (!t || !t[0] || !found_inf) {
        em__misuse(op, "the tensors and the flag must be given (n = %d)", n);
        return EM_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        if (!t[i] || !em__live(t[i], op)) {
            if (!t[i]) em__misuse(op, "tensor %d of %d is NULL", i, n);
            return EM_ERR_INVALID;
        }
        if (!em_is_contiguous(t[i]) || (t[i]->dtype != EM_F32 && t[i]->dtype != EM_F64) ||
            !em_device_eq(t[i]->device, t[0]->device)) {
            char d0[16];
            em__misuse(op, "tensor %d (%s %s on %s) must be contiguous f32/f64 on the device of tensor 0", i,
                       em_dtype_name(t[i]->dtype), em__shape_str(t[i]), em_device_str(t[i]->device, d0));
            return EM_ERR_INVALID;
        }
    }
    em_status st = EM_OK;
    em_scope_begin();
    em_tensor *flag = em__empty(1, (const int64_t[]){1}, EM_F32, t[0]->device);
    if (!flag) st = em_last_status();
    else {
        em_kargs k = {.op = EM_OP_UNSCALE, .out = {flag}, .list = t, .nlist = n, .f = {inv}};
        st = em__dispatch(&k);
        /* on the CPU the flag is read in place: nothing can fail after the kernel */
        em_tensor *host = st != EM_OK ? NULL : flag->device.type == EM_DEVICE_CPU ? flag : em_to(flag, EM_CPU);
        if (st == EM_OK && !host) st = em_last_status();
        if (host && *(const float *)em_data_ptr(host) != 0) *found_inf = true;
    }
    em_scope_end();
    return st;
}

static em_status sdpa_backward(em_tensor *dq, em_tensor *dk, em_tensor *dv, em_tensor *q, em_tensor *k, em_tensor *v,
                               em_tensor *lens, em_tensor *starts, int64_t S, double scale, em_tensor *out,
                               em_tensor *lse, em_tensor *dout, double dropout_p, uint64_t seed, uint64_t offset,
                               bool pad_queries)
{
    static const char op[] = "sdpa_backward";
    em_tensor *outs[] = {dq, dk, dv};
    for (int i = 0; i < 3; i++)
        if (!outs[i] || !em__live(outs[i], op) || outs[i]->ndim != 4 || (outs[i]->stride[3] != 1 && outs[i]->shape[3] > 1)) {
            if (outs[i] && outs[i]->magic == EM_TENSOR_LIVE)
                em__misuse(op, "gradient %d %s must be [B,H,S,D] with D contiguous", i, em__shape_str(outs[i]));
            else if (!outs[i]) em__misuse(op, "gradient %d is NULL", i);
            return EM_ERR_INVALID;
        }
    if (!q || !k || !v || !out || !lse || !dout) {
        em__misuse(op, "q, k, v, the forward's outputs and dout must be given");
        return EM_ERR_INVALID;
    }
    if (starts && (!lens || S < 1)) {
        em__misuse(op, "packed rows need lens and the padded length S >= 1");
        return EM_ERR_INVALID;
    }
    em_kargs ka = {.op = EM_OP_SDPA_BWD, .in = {q, k, v, lens, out, lse, dout, starts}, .out = {dq, dk, dv},
                   .f = {scale, dropout_p}, .i = {(int64_t)seed, (int64_t)offset, pad_queries, starts ? S : 0}};
    return em__dispatch(&ka);
}

em_status em__sdpa_backward(em_tensor *dq, em_tensor *dk, em_tensor *dv, em_tensor *q, em_tensor *k, em_tensor *v,
                            em_tensor *lens, double scale, em_tensor *out, em_tensor *lse, em_tensor *dout,
                            double dropout_p, uint64_t seed, uint64_t offset, bool pad_queries)
{
    return sdpa_backward(dq, dk, dv, q, k, v, lens, NULL, 0, scale, out, lse, dout, dropout_p, seed, offset,
                         pad_queries);
}

em_status em__sdpa_backward_packed(em_tensor *dq, em_tensor *dk, em_tensor *dv, em_tensor *q, em_tensor *k,
                                   em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S, double scale,
                                   em_tensor *out, em_tensor *lse, em_tensor *dout, double dropout_p, uint64_t seed,
                                   uint64_t offset)
{
    if (em__sdpa_packed_composed() == 2) return EM_ERR_UNSUPPORTED;   /* a test's request */
    return sdpa_backward(dq, dk, dv, q, k, v, lens, starts, S, scale, out, lse, dout, dropout_p, seed, offset, true);
}
