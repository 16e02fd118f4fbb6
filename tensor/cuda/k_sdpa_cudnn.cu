/* ember — fused scaled dot-product attention through cuDNN's backend graph API
 * (the C API of cudnn_graph.h; cudnn_frontend is not used): the CUDA kernel of
 * op SDPA and of its backward, op SDPA_BWD (contracts in tensor/ops.h).
 *
 * Each direction is a one-node operation graph of cuDNN's unified SDPA
 * operation (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR, cuDNN 9.x):
 *   forward:  Q, K, V [B,H,S,D] -> O [B,H,Sq,D] and Stats [B,H,Sq,1] f32, the
 *             logsumexp of the scaled scores, saved for backward;
 *   backward: Q, K, V, O, Stats, dO -> dQ, dK, dV.
 * The scale is a by-value f32 tensor. Key padding uses cuDNN's sequence
 * lengths: SEQ_LEN_KV[b] = lens[b] (keys at j >= lens[b] are excluded) and
 * SEQ_LEN_Q[b] = Sq (every query row is computed, as the composed path
 * computes the padded query rows too). Sequence lengths, not a bias tensor:
 * ember's masks are bool key-padding masks, which op_grad.c turns into
 * lengths when each row is a prefix of ones (right padding, every tokenizer
 * batch here); any other mask, and rows with no key at all (HF gives those
 * uniform weights, cuDNN would not), never reach this file.
 *
 * Taken: f16/bf16, q/k/v with unit stride on D and 16-byte aligned rows, D a
 * multiple of 8 and at most 128, lens i32 contiguous or NULL. Anything else,
 * and any cuDNN failure while building a plan (no engine for the shape, an
 * older cuDNN without the unified SDPA op), returns EM_ERR_UNSUPPORTED with no
 * error set and no output written; a failed build is remembered for its key,
 * and under EMBER_VERBOSE=1 the first one is reported on stderr once. Dropout
 * never comes here: ember's Philox dropout masks must stay bit-identical to
 * the CPU's, so attention with dropout composes ops (op_grad.c).
 *
 * Plans are cached per (direction, device, B, H, Sq, Sk, D, dtype, padded,
 * q/k/v/o/dO strides): a steady training loop builds each graph once. The
 * workspace comes from ember's caching allocator per call, in stream order,
 * on the device's compute stream. One cuDNN handle per device.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <cudnn.h>

#include <atomic>
#include <map>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tuple>
#include <vector>

using namespace emcu;

namespace {

/* ---- plan cache ---------------------------------------------------------------- */
struct Key {
    int bwd, dev, dtype, padded;
    int64_t B, H, Sq, Sk, D;
    int64_t strides[5][4];   /* q, k, v, o, dO (dO only for bwd) */
    bool operator<(const Key &o) const { return memcmp(this, &o, sizeof *this) < 0; }
};

struct Plan {
    bool ok = false;
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspace = 0;
    /* every descriptor the plan was made from, kept for the plan's lifetime */
    std::vector<cudnnBackendDescriptor_t> keep;
};

struct Dev {
    std::mutex mu;
    cudnnHandle_t h = nullptr;
    std::map<Key, Plan> plans;
};
Dev devs[EM_CUDA_MAX_DEVICES];
std::atomic<int64_t> n_builds{0}, n_hits{0};

/* The uids of the graphs' tensors. */
enum : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_SEQ_Q, U_SEQ_KV, U_DQ, U_DK, U_DV, U_DO };

/* A failed cuDNN call while building: the status and the call, for the one
 * verbose line. */
struct Why {
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    const char *call = "";
};
#define DNN(...)                                              \
    do {                                                      \
        cudnnStatus_t dnn_s_ = (__VA_ARGS__);                 \
        if (dnn_s_ != CUDNN_STATUS_SUCCESS) {                 \
            why->s = dnn_s_, why->call = #__VA_ARGS__;        \
            return false;                                     \
        }                                                     \
    } while (0)

bool make(std::vector<cudnnBackendDescriptor_t> &keep, cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d,
          Why *why)
{
    *d = nullptr;
    DNN(cudnnBackendCreateDescriptor(t, d));
    keep.push_back(*d);
    return true;
}

bool set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
         const void *v, Why *why)
{
    DNN(cudnnBackendSetAttribute(d, a, t, n, v));
    return true;
}

/* A 4-d tensor descriptor (by_value: a host scalar, the scale). */
bool tensor(std::vector<cudnnBackendDescriptor_t> &keep, cudnnBackendDescriptor_t *d, int64_t uid,
            cudnnDataType_t dt, const int64_t *dims, const int64_t *strides, bool by_value, Why *why)
{
    int64_t align = 16;
    bool virt = false;
    if (!make(keep, CUDNN_BACKEND_TENSOR_DESCRIPTOR, d, why)) return false;
    if (!set(*d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, why) ||
        !set(*d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, why) ||
        !set(*d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, why) ||
        !set(*d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, why) ||
        !set(*d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, why) ||
        !set(*d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, why))
        return false;
    if (by_value && !set(*d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, why)) return false;
    DNN(cudnnBackendFinalize(*d));
    return true;
}

/* Graph of one op -> the first engine config of the heuristics (mode A, then
 * the fallback list) that finalizes into a plan. */
bool plan_for(cudnnHandle_t h, cudnnBackendDescriptor_t op, Plan *p, Why *why)
{
    cudnnBackendDescriptor_t graph, heur;
    if (!make(p->keep, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph, why) ||
        !set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, why) ||
        !set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, why))
        return false;
    DNN(cudnnBackendFinalize(graph));
    const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (cudnnBackendHeurMode_t mode : modes) {
        if (!make(p->keep, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur, why) ||
            !set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, why) ||
            !set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, why))
            return false;
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue;
        enum { N_CFG = 8 };
        cudnnBackendDescriptor_t cfg[N_CFG];
        for (int i = 0; i < N_CFG; i++)
            if (!make(p->keep, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i], why)) return false;
        int64_t n = 0;
        cudnnStatus_t s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                   N_CFG, &n, cfg);
        if (s != CUDNN_STATUS_SUCCESS) {
            why->s = s, why->call = "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)";
            continue;
        }
        for (int64_t i = 0; i < n && i < N_CFG; i++) {
            cudnnBackendDescriptor_t plan;
            if (!make(p->keep, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan, why) ||
                !set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, why) ||
                !set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i], why))
                return false;
            s = cudnnBackendFinalize(plan);
            if (s != CUDNN_STATUS_SUCCESS) {
                why->s = s, why->call = "cudnnBackendFinalize(execution plan)";
                continue;
            }
            int64_t ws = 0, got = 0;
            DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                         &ws));
            p->plan = plan;
            p->workspace = ws;
            return true;
        }
    }
    if (why->s == CUDNN_STATUS_SUCCESS) why->s = CUDNN_STATUS_NOT_SUPPORTED, why->call = "engine heuristics (no engine)";
    return false;
}

void contiguous(const int64_t *dims, int64_t *st)
{
    st[3] = 1;
    for (int d = 2; d >= 0; d--) st[d] = st[d + 1] * dims[d + 1];
}

/* Builds the forward (bwd false) or backward graph's plan for the tensors of a call. */
bool build(cudnnHandle_t h, const Key &key, Plan *p, Why *why)
{
    cudnnDataType_t dt = key.dtype == EM_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    int64_t qd[4] = {key.B, key.H, key.Sq, key.D}, kd[4] = {key.B, key.H, key.Sk, key.D};
    int64_t sd[4] = {key.B, key.H, key.Sq, 1}, ss[4], one[4] = {1, 1, 1, 1}, ld[4] = {key.B, 1, 1, 1};
    contiguous(sd, ss);
    cudnnBackendDescriptor_t q, k, v, o, stats, scale, seq_q = nullptr, seq_kv = nullptr, op;
    if (!tensor(p->keep, &q, U_Q, dt, qd, key.strides[0], false, why) ||
        !tensor(p->keep, &k, U_K, dt, kd, key.strides[1], false, why) ||
        !tensor(p->keep, &v, U_V, dt, kd, key.strides[2], false, why) ||
        !tensor(p->keep, &o, U_O, dt, qd, key.strides[3], false, why) ||
        !tensor(p->keep, &stats, U_STATS, CUDNN_DATA_FLOAT, sd, ss, false, why) ||
        !tensor(p->keep, &scale, U_SCALE, CUDNN_DATA_FLOAT, one, one, true, why))
        return false;
    if (key.padded && (!tensor(p->keep, &seq_q, U_SEQ_Q, CUDNN_DATA_INT32, ld, one, false, why) ||
                       !tensor(p->keep, &seq_kv, U_SEQ_KV, CUDNN_DATA_INT32, ld, one, false, why)))
        return false;
    const cudnnBackendAttributeType_t D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (!key.bwd) {
        if (!make(p->keep, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &op, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, D, 1, &q, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, D, 1, &k, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, D, 1, &v, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, D, 1, &o, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, D, 1, &stats, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, D, 1, &scale, why))
            return false;
        if (key.padded && (!set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, D, 1, &seq_q, why) ||
                           !set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, D, 1, &seq_kv, why)))
            return false;
    } else {
        cudnnBackendDescriptor_t dq, dk, dv, dout;
        int64_t cq[4], ck[4];
        contiguous(qd, cq);
        contiguous(kd, ck);
        if (!tensor(p->keep, &dq, U_DQ, dt, qd, cq, false, why) || !tensor(p->keep, &dk, U_DK, dt, kd, ck, false, why) ||
            !tensor(p->keep, &dv, U_DV, dt, kd, ck, false, why) ||
            !tensor(p->keep, &dout, U_DO, dt, qd, key.strides[4], false, why))
            return false;
        if (!make(p->keep, CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, &op, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, D, 1, &q, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, D, 1, &k, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, D, 1, &v, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, D, 1, &o, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, D, 1, &stats, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, D, 1, &scale, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, D, 1, &dq, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, D, 1, &dk, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, D, 1, &dv, why) ||
            !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, D, 1, &dout, why))
            return false;
        if (key.padded && (!set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC, D, 1, &seq_q, why) ||
                           !set(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC, D, 1, &seq_kv, why)))
            return false;
    }
    DNN(cudnnBackendFinalize(op));
    return plan_for(h, op, p, why);
}

void verbose_once(const Key &key, const Why &why)
{
    static std::atomic<bool> said{false};
    const char *e = getenv("EMBER_VERBOSE");
    if (!e || strcmp(e, "1") != 0 || said.exchange(true)) return;
    fprintf(stderr,
            "ember: sdpa: cuDNN fused attention %s unavailable for B=%lld H=%lld Sq=%lld Sk=%lld D=%lld %s%s "
            "(%s: %s); using the composed path\n",
            key.bwd ? "backward" : "forward", (long long)key.B, (long long)key.H, (long long)key.Sq,
            (long long)key.Sk, (long long)key.D, key.dtype == EM_BF16 ? "bf16" : "f16", key.padded ? " padded" : "",
            why.call, cudnnGetErrorString(why.s));
}

/* Whether t can be handed to cuDNN as it lies: unit stride on D, the other
 * strides multiples of 8 elements, 16-byte aligned start. */
bool fits(const em_tensor *t)
{
    if (t->stride[3] != 1) return false;
    for (int d = 0; d < 3; d++)
        if (t->stride[d] % 8 && t->shape[d] > 1) return false;
    uintptr_t p = (uintptr_t)t->storage->data + (uintptr_t)(t->offset * 2);
    return p % 16 == 0;
}

__global__ void fill_i32(int32_t *p, int n, int32_t v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

void *ptr(const em_tensor *t) { return (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype); }

/* Finds or builds the plan of key, then runs it with the uids/pointers given
 * (the scale and the sequence lengths are added here). EM_ERR_UNSUPPORTED for
 * a key cuDNN cannot take. */
em_status run(const Key &key, int n, const int64_t *uids, void *const *ptrs, float scale, const em_tensor *lens)
{
    int dev = key.dev;
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    Dev &D = devs[dev];
    Plan *p;
    {
        std::lock_guard<std::mutex> lk(D.mu);
        if (!D.h) {
            cudnnStatus_t st = cudnnCreate(&D.h);
            if (st != CUDNN_STATUS_SUCCESS) {
                D.h = nullptr;
                verbose_once(key, Why{st, "cudnnCreate"});
                return EM_ERR_UNSUPPORTED;
            }
        }
        auto it = D.plans.find(key);
        if (it == D.plans.end()) {
            Plan fresh;
            Why why;
            fresh.ok = build(D.h, key, &fresh, &why);
            n_builds++;
            if (!fresh.ok) {
                for (auto d : fresh.keep) (void)cudnnBackendDestroyDescriptor(d);
                fresh.keep.clear();
                fresh.plan = nullptr;
                verbose_once(key, why);
            }
            it = D.plans.emplace(key, std::move(fresh)).first;
        } else {
            n_hits++;
        }
        p = &it->second;   /* map nodes are stable; entries are never erased */
    }
    if (!p->ok) return EM_ERR_UNSUPPORTED;
    Scratch ws, seq;
    EM_TRY(ws.get((size_t)p->workspace, dev));
    std::vector<int64_t> u(uids, uids + n);
    std::vector<void *> a(ptrs, ptrs + n);
    u.push_back(U_SCALE);
    a.push_back(&scale);
    if (key.padded) {
        EM_TRY(seq.get(sizeof(int32_t) * (size_t)key.B, dev));
        fill_i32<<<(unsigned)((key.B + 255) / 256), 256, 0, s>>>(seq.as<int32_t>(), (int)key.B, (int32_t)key.Sq);
        EM_CU_LAUNCHED();
        u.push_back(U_SEQ_Q);
        a.push_back(seq.p);
        u.push_back(U_SEQ_KV);
        a.push_back(ptr(lens));
    }
    /* one handle per device, used under the lock (the stream is set per call) */
    std::lock_guard<std::mutex> lk(D.mu);
    cudnnBackendDescriptor_t vp = nullptr;
    cudnnStatus_t st = cudnnSetStream(D.h, s);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)u.size(),
                                      u.data());
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                      (int64_t)a.size(), a.data());
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws.p);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(D.h, p->plan, vp);
    if (vp) (void)cudnnBackendDestroyDescriptor(vp);
    if (st != CUDNN_STATUS_SUCCESS) {
        /* remember the shape as unsupported; the caller composes it */
        p->ok = false;
        verbose_once(key, Why{st, "cudnnBackendExecute"});
        return EM_ERR_UNSUPPORTED;
    }
    return EM_OK;
}

/* The key of a call, or false when the call is not one cuDNN's engine takes. */
bool key_of(Key *key, bool bwd, const em_tensor *q, const em_tensor *k, const em_tensor *v, const em_tensor *o,
            const em_tensor *dout, const em_tensor *lens)
{
    memset(key, 0, sizeof *key);   /* padding bytes too: the key compares with memcmp */
    if (q->dtype != EM_F16 && q->dtype != EM_BF16) return false;
    if (q->shape[3] % 8 || q->shape[3] > 128 || q->shape[3] == 0) return false;
    if (q->shape[2] == 0 || k->shape[2] == 0) return false;
    const em_tensor *ts[5] = {q, k, v, o, dout};
    for (int i = 0; i < (bwd ? 5 : 4); i++) {
        if (!fits(ts[i])) return false;
        memcpy(key->strides[i], ts[i]->stride, sizeof key->strides[i]);
    }
    if (lens && (lens->dtype != EM_I32 || (lens->stride[0] != 1 && lens->shape[0] > 1))) return false;
    key->bwd = bwd;
    key->dev = q->device.index;
    key->dtype = q->dtype;
    key->padded = lens != nullptr;
    key->B = q->shape[0], key->H = q->shape[1], key->Sq = q->shape[2], key->Sk = k->shape[2], key->D = q->shape[3];
    return true;
}

}   // namespace

/* op SDPA: in q, k, v, lens; f[0] scale, f[1] dropout (declined) -> out[0] O (contiguous), out[1] Stats. */
extern "C" int em_cuda_SDPA(const em_kargs *k)
{
    Key key;
    if (k->f[1] != 0.0 || k->i[2] || k->in[4])   /* dropout (Philox masks), padding queries, packed rows: composed */
        return EM_ERR_UNSUPPORTED;
    if (!key_of(&key, false, k->in[0], k->in[1], k->in[2], k->out[0], nullptr, k->in[3])) return EM_ERR_UNSUPPORTED;
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS};
    void *const ptrs[] = {ptr(k->in[0]), ptr(k->in[1]), ptr(k->in[2]), ptr(k->out[0]), ptr(k->out[1])};
    return run(key, 5, uids, ptrs, (float)k->f[0], k->in[3]);
}

/* in[0..6] = q, k, v, lens, out, lse, dout -> out[0..2] = dq, dk, dv */
extern "C" int em_cuda_SDPA_BWD(const em_kargs *ka)
{
    em_tensor *q = ka->in[0], *k = ka->in[1], *v = ka->in[2], *lens = ka->in[3], *out = ka->in[4];
    em_tensor *lse = ka->in[5], *dout = ka->in[6], *dq = ka->out[0], *dk = ka->out[1], *dv = ka->out[2];
    const double scale = ka->f[0], dropout_p = ka->f[1];
    const bool pad_queries = ka->i[2] != 0;
    Key key;
    if (dropout_p != 0.0 || pad_queries || ka->in[7]) return EM_ERR_UNSUPPORTED;   /* the forward never takes them */
    if (!key_of(&key, true, q, k, v, out, dout, lens) || !em_is_contiguous(dq) || !em_is_contiguous(dk) ||
        !em_is_contiguous(dv) || !em_is_contiguous(lse))
        return EM_ERR_UNSUPPORTED;
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV};
    void *const ptrs[] = {ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), ptr(dout), ptr(dq), ptr(dk), ptr(dv)};
    return run(key, 9, uids, ptrs, (float)scale, lens);
}

/* For tests: plans built and cache hits so far (all devices, both directions). */
extern "C" void em__cuda_sdpa_plan_stats(int64_t *builds, int64_t *hits)
{
    *builds = n_builds.load();
    *hits = n_hits.load();
}
