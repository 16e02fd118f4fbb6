/* ember — distributed/accelerate/: internals of the Accelerator, shared by accelerator.c
 * (prepare, the accumulation logic, the steps, collectives, helpers) and
 * accelerator_state.c (save_state / load_state). Not installed. */
#ifndef EMBER_ACCELERATOR_INTERNAL_H
#define EMBER_ACCELERATOR_INTERNAL_H

#include "distributed/accelerate/accelerator.h"
#include "tensor/numeric.h"
#include "tensor/support.h"

/* At most this many objects of each kind can be prepared (misuse beyond). */
#define EM__ACC_MAX 16

typedef struct em__acc_model {
    em_module *m;
    em_ddp *ddp;            /* owned; NULL in a world of one */
} em__acc_model;

typedef struct em__acc_opt {
    em_optimizer *opt;
    bool skipped;           /* its last step was skipped by the GradScaler */
    bool unscaled;          /* unscaled since the last scaler update (clipping did it) */
    bool stepped;           /* stepped (or skipped) since the last scaler update */
    int64_t steps;          /* real steps so far */
    bool saw_backward;      /* em_accelerator_backward ran since its last step */
    bool check_zeroed;      /* stepped: the next backward checks its gradients were zeroed */
} em__acc_opt;

/* One-time warnings for the common mistakes (bits of em_accelerator.warned). */
enum {
    EM__ACC_WARN_DIRECT_BACKWARD = 1 << 0,
    EM__ACC_WARN_PREPARE_MODEL = 1 << 1,
    EM__ACC_WARN_PREPARE_OPTIMIZER = 1 << 2,
    EM__ACC_WARN_PREPARE_LOADER = 1 << 3,
    EM__ACC_WARN_PREPARE_SCHEDULER = 1 << 4,
    EM__ACC_WARN_NO_ZERO_GRAD = 1 << 5,
    EM__ACC_WARN_NO_AUTOCAST = 1 << 6,
};

typedef struct em__acc_loader {
    em_dataloader *dl;
    em_loader_state seen;   /* its position when the accelerator last looked */
    uint64_t tick;          /* when it last advanced (higher: more recent) */
    bool scope_open;        /* em_accelerator_next opened a batch scope ...  */
    int scope_depth;        /* ... on top of this depth                       */
    bool trains;            /* a backward ran on its batches: max_steps ends its loops */
} em__acc_loader;

struct em_accelerator {
    em_mixed_precision mp;          /* resolved: never EM_MP_DEFAULT */
    int K;                          /* gradient_accumulation_steps */
    bool split_batches;
    em_tok_flag even_batches;
    char *project_dir;              /* owned; NULL when not given */
    bool auto_naming;
    int total_limit;
    bool ignore_mismatched_config;  /* load_state reports fingerprint mismatches instead of refusing */
    em_ddp_opts ddp_opts;

    em_process_group *pg;           /* borrowed: the caller's, or the process-wide world */
    int rank, world, local_rank;
    em_device device;
    em_grad_scaler *scaler;         /* owned; fp16 only */
    bool scaler_pending;            /* an optimizer stepped since the last scaler update */

    em__acc_model models[EM__ACC_MAX];
    em__acc_opt opts[EM__ACC_MAX];
    em__acc_loader loaders[EM__ACC_MAX];
    em_scheduler *scheds[EM__ACC_MAX];
    int n_models, n_opts, n_loaders, n_scheds;
    uint64_t tick;

    /* gradient state */
    int64_t step;                   /* micro-steps so far */
    bool sync;                      /* the current micro-step ends its window */
    int window_len, window_pos;     /* the current window: its length, micro-steps done (1-based) */
    bool in_block;                  /* inside EM_ACCUMULATE */
    em_module *block_model;         /* its model (NULL: all) */
    int64_t iteration;              /* the next automatic checkpoint number */
    unsigned warned;                /* EM__ACC_WARN_* already printed */
    const em_tokenizer *tokenizer;  /* saved by save_model beside the model (borrowed) */
    int64_t autocast_regions0;      /* em_autocast_stats().regions when the accelerator was made */
    int64_t max_steps;              /* opts.max_steps: 0 = no limit */
    bool trigger;                   /* set_trigger since the last check_trigger */
};

/* The prepared loader that is iterating now (see em_accelerator_next), or -1.
 * Looks at every prepared loader's position and records who advanced. */
int em__acc_active_loader(em_accelerator *acc);
/* Records every prepared loader's position as seen (after load_state). */
void em__acc_snapshot_loaders(em_accelerator *acc);
/* Performs the GradScaler update that optimizer steps left pending. */
void em__acc_flush_scaler(em_accelerator *acc);
/* Every rank's status agreed on: the first failure anywhere wins (the
 * failing rank keeps its own message; the others get one naming that rank's
 * status). A world of one returns st. */
em_status em__acc_agree(em_accelerator *acc, em_status st, const char *what);

/* checkpoint_manifest.c: manifest.json (CRC-32C of every file, the run's
 * fingerprint) written into a complete save_state folder by the main process,
 * and verified (on every rank) before load_state changes anything. */
em_status em__acc_manifest_write(em_accelerator *acc, const char *dir);
em_status em__acc_manifest_verify(em_accelerator *acc, const char *dir);
/* "model.safetensors" for i = 0, "model_<i>.safetensors" after (Accelerate's naming). */
static inline void em__acc_indexed_name(char *out, size_t cap, const char *stem, int i, const char *ext)
{
    if (i == 0) snprintf(out, cap, "%s.%s", stem, ext);
    else snprintf(out, cap, "%s_%d.%s", stem, i, ext);
}

#endif
