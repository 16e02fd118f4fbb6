/* ember — dispatch: the registered backends and the one call every op makes. */
#include "tensor/tensor_internal.h"

static const em_backend *backends[EM_NUM_DEVICE_TYPES] = {[EM_DEVICE_CPU] = &em__cpu_backend};

void em__register_backend(const em_backend *b) { backends[b->type] = b; }

const em_backend *em__backend(em_device_type type)
{
    return (unsigned)type < EM_NUM_DEVICE_TYPES ? backends[type] : NULL;
}

em_status em__dispatch(em_kargs *k)
{
    const em_op_def *def = &em_op_table[k->op];
    em_tensor *first = k->out[0] ? k->out[0] : k->in[0];
    const em_backend *be = em__backend((em_device_type)first->device.type);
    em_kernel kern = be ? be->kernels[k->op] : NULL;
    if (!kern) {
        char b[16];
        em__misuse(def->name, "no kernel for this op on %s", em_device_str(first->device, b));
        return EM_ERR_UNSUPPORTED;
    }
    em_status s = (em_status)kern(k);
    if (s != EM_OK) return s;
    for (int i = 0; i < EM_KARGS_OUT; i++)
        if (k->out[i]) k->out[i]->storage->version++;
    return em__record_hook ? em__record_hook(k) : EM_OK;
}
