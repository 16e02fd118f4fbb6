/* ember — running an encoder on its real tokens only (nn_internal.h, "unpadding").
 *
 * A right-padded batch [B,S] with lengths len[b] holds N = sum(len) real
 * tokens. Every per-token layer (linear, layer norm, activation, dropout,
 * residual add) gives the same values for a real token whether or not the
 * padding rows ride along, and a padding row never reaches a real one:
 * attention masks padding keys, and a sequence classifier reads only each
 * sequence's first token. So those layers run on the packed [N, D] rows, and
 * so does attention (em__sdpa_packed: each sequence's rows attend to each
 * other, with the padded batch's dropout mask; nn/attention.c). The loss and
 * every parameter gradient are those of the padded computation (a padding
 * row's gradient is exactly 0 there); only rounding differs (GEMMs of another
 * M), and the per-token dropouts draw their masks over the packed rows
 * instead of the padded ones.
 *
 * The plan is built on the host from a CPU mask. Plans and their index
 * tensors belong to the scope that is open when em__pack_plan runs.
 */
#include "nn/nn_internal.h"
#include "tensor/support.h"

#include <string.h>

bool em__pack_plan(em_tensor *mask, int64_t B, int64_t S, em__packing *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!mask || mask->ndim != 2 || mask->shape[0] != B || mask->shape[1] != S || mask->device.type != EM_DEVICE_CPU ||
        B * S == 0)
        return false;
    bool ok = true;
    int64_t *len = em__malloc(sizeof(int64_t) * (size_t)B);
    if (!len) return false;
    int64_t n = 0;
    em_scope_begin();   /* the mask as contiguous bytes (1: token), read in place */
    em_tensor *m = em_contiguous(mask->dtype == EM_BOOL ? mask : em_ne(mask, em_scalar(0, mask->dtype, EM_CPU)));
    const uint8_t *mb = m ? em_data_ptr(m) : NULL;
    ok = mb != NULL;
    for (int64_t b = 0; b < B && ok; b++) {
        const uint8_t *row = mb + b * S;
        int64_t l = 0;
        while (l < S && row[l]) l++;
        for (int64_t s = l; s < S && ok; s++) ok = !row[s];
        ok = ok && l > 0;   /* an empty row: HF's uniform attention over padding; keep the padded path */
        len[b] = l;
        n += l;
    }
    em_scope_end();
    if (!ok || n == B * S) {   /* not right padding, or nothing to save */
        em__free(len);
        return false;
    }
    int64_t *pack = em__malloc(sizeof(int64_t) * (size_t)n), *first = em__malloc(sizeof(int64_t) * (size_t)B);
    int32_t *len32 = em__malloc(sizeof(int32_t) * (size_t)B);
    if (pack && first && len32) {
        int64_t at = 0;
        for (int64_t b = 0; b < B; b++) {
            first[b] = at;
            for (int64_t s = 0; s < len[b]; s++) pack[at + s] = b * S + s;
            at += len[b];
        }
        plan->pack = em_from_data(pack, 1, (int64_t[]){n}, EM_I64);
        plan->first = em_from_data(first, 1, (int64_t[]){B}, EM_I64);
        for (int64_t b = 0; b < B; b++) len32[b] = (int32_t)len[b];
        plan->lens = em_from_data(len32, 1, (int64_t[]){B}, EM_I32);
    }
    em__free(len), em__free(pack), em__free(first), em__free(len32);
    if (!plan->pack || !plan->first || !plan->lens) {
        memset(plan, 0, sizeof *plan);
        return false;
    }
    plan->B = B, plan->S = S, plan->n = n;
    return true;
}

em_tensor *em__pack_rows(const em__packing *plan, em_tensor *x)
{
    EM_PROPAGATE_NULL(x);
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *flat = em_reshape(x, 2, (int64_t[]){plan->B * plan->S, x->shape[x->ndim - 1]});
    em_tensor *p = em_index_select(flat, 0, plan->pack);
    if (p) r = em_keep(p);
    em_scope_end();
    return r;
}
