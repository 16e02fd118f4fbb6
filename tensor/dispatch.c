/* ember — dispatch: the registered backends and the one call every op makes. */
#include "tensor/tensor_internal.h"

#include <pthread.h>

static const em_backend *backends[EM_NUM_DEVICE_TYPES] = {[EM_DEVICE_CPU] = &em__cpu_backend};
/* Lazy backends (em__register_backend_probe): the probe runs once, under the
 * lock, on the first em__backend() call for its type; `probed` is read
 * without the lock (acquire) so later calls cost one load. */
static const em_backend *(*probes[EM_NUM_DEVICE_TYPES])(void);
static bool probed[EM_NUM_DEVICE_TYPES];
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

void em__register_backend(const em_backend *b) { __atomic_store_n(&backends[b->type], b, __ATOMIC_RELEASE); }

void em__register_backend_probe(em_device_type type, const em_backend *(*probe)(void)) { probes[type] = probe; }

const em_backend *em__backend(em_device_type type)
{
    if ((unsigned)type >= EM_NUM_DEVICE_TYPES) return NULL;
    const em_backend *b = __atomic_load_n(&backends[type], __ATOMIC_ACQUIRE);
    if (b || !probes[type] || __atomic_load_n(&probed[type], __ATOMIC_ACQUIRE)) return b;
    pthread_mutex_lock(&probe_lock);
    if (!probed[type]) {
        const em_backend *p = probes[type]();
        if (p) __atomic_store_n(&backends[type], p, __ATOMIC_RELEASE);
        __atomic_store_n(&probed[type], true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&probe_lock);
    return __atomic_load_n(&backends[type], __ATOMIC_ACQUIRE);
}

int em_device_count(em_device_type type)
{
    if (type == EM_DEVICE_CPU) return 1;
    const em_backend *b = em__backend(type);
    return b && b->device_count ? b->device_count() : 0;
}

const char *em__backend_absent(em_device dev, char why[160])
{
    char b[16];
    if ((unsigned)dev.type >= EM_NUM_DEVICE_TYPES)
        snprintf(why, 160, "unknown device type %d (ember knows cpu = 0 and cuda = 1)", (int)dev.type);
    else if (!probes[dev.type] && !__atomic_load_n(&backends[dev.type], __ATOMIC_ACQUIRE))
        snprintf(why, 160, "device %s: this build of ember has no %s support (meson setup -Dcuda=enabled)",
                 em_device_str(dev, b), dev.type == EM_DEVICE_CUDA ? "CUDA" : "such");
    else
        snprintf(why, 160, "device %s: this build supports it, but the machine has no usable device "
                 "(the driver reports none; see nvidia-smi and CUDA_VISIBLE_DEVICES)", em_device_str(dev, b));
    return why;
}

em_status em__dispatch(em_kargs *k)
{
    const em_op_def *def = &em_op_table[k->op];
    em_num_threads();   /* this thread's OpenMP count follows the process's (tensor.c) */
    for (int i = 0; i < EM_KARGS_IN; i++)   /* every kernel's tensors pass here: the one entry check that sees all */
        if (k->in[i] && !em__live(k->in[i], def->name)) return EM_ERR_INVALID;
    for (int i = 0; i < k->nlist; i++)
        if (k->list[i] && !em__live(k->list[i], def->name)) return EM_ERR_INVALID;
    em_tensor *first = k->out[0] ? k->out[0] : k->in[0];
    const em_backend *be = em__backend((em_device_type)first->device.type);
    em_kernel kern = be ? be->kernels[k->op] : NULL;
    if (!kern) {
        char b[16], why[160];
        if (be) em__misuse(def->name, "no kernel for this op on %s", em_device_str(first->device, b));
        else em__misuse(def->name, "%s", em__backend_absent(first->device, why));
        return EM_ERR_UNSUPPORTED;
    }
    em_status s;
    if (__builtin_expect(em__profile_on, 0)) {
        uint64_t t0 = em__profile_now();
        s = (em_status)kern(k);
        em__profile_add(k->op, em__profile_now() - t0);
    } else {
        s = (em_status)kern(k);
    }
    if (s != EM_OK) return s;
    for (int i = 0; i < EM_KARGS_OUT; i++)
        if (k->out[i]) k->out[i]->storage->version++;
    return em__record_hook ? em__record_hook(k) : EM_OK;
}
