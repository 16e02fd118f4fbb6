/* ember — the Accelerator: prepare, per-batch scopes, gradient accumulation
 * with the short last window weighted by its real length, the optimizer and
 * scheduler steps that no-op on non-sync micro-steps, mixed precision,
 * clipping, gather_for_metrics and the process helpers (accelerator.h).
 * save_state/load_state live in accelerator_state.c.
 *
 * The window arithmetic. With an active prepared dataloader of L batches per
 * epoch on this rank, the micro-step that consumes batch i (0-based, within
 * the epoch) belongs to the window starting at s = (i / K) * K, whose length
 * is min(K, L - s); the step syncs when it is the window's last (i + 1 == s +
 * length), which is Accelerate's `end_of_dataloader || step % K == 0` with
 * the step counter reset at each epoch start, but computed from the loader's
 * position, so it also holds after a mid-epoch resume. Without an active
 * loader a plain counter cycles 1..K. */
#include "distributed/accelerate/accelerator_internal.h"
#include "distributed/ddp/ddp_internal.h"
#include "distributed/pg/pg_internal.h"
#include "distributed/tracking/tracking_internal.h"
#include "nn/nn_internal.h"
#include "optim/optim_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <unistd.h>

static void track_fp16(em_accelerator *acc, bool live);

#define ACC_CHECK(cond, op, ret, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return ret; } } while (0)

/* Prints "ember: warning: <message>" to stderr, once per accelerator per
 * kind of mistake (bit: an EM__ACC_WARN_*). */
static void acc_warn(em_accelerator *acc, unsigned bit, const char *fmt, ...)
{
    if (acc->warned & bit) return;
    acc->warned |= bit;
    va_list ap;
    va_start(ap, fmt);
    fputs("ember: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

static void warn_prepared_twice(em_accelerator *acc, unsigned bit, const char *kind)
{
    acc_warn(acc, bit,
             "em_accelerator_prepare: this %s was already prepared; preparing it again does nothing "
             "(prepare each object once)", kind);
}

/* ---- construction ------------------------------------------------------------ */
static em_status env_mixed_precision(em_mixed_precision *out)
{
    const char *e = getenv("EMBER_MIXED_PRECISION");
    *out = EM_MP_NO;
    if (!e || !*e || !strcasecmp(e, "no")) return EM_OK;
    if (!strcasecmp(e, "bf16")) *out = EM_MP_BF16;
    else if (!strcasecmp(e, "fp16")) *out = EM_MP_FP16;
    else
        return em__fail(e && !strcasecmp(e, "fp8") ? EM_ERR_UNSUPPORTED : EM_ERR_INVALID,
                        "em_accelerator_new: EMBER_MIXED_PRECISION='%s' is not one of no, bf16, fp16", e);
    return EM_OK;
}

static em_status env_int(const char *name, int *out)
{
    const char *e = getenv(name);
    if (!e || !*e) return EM_OK;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > 1 << 20)
        return em__fail(EM_ERR_INVALID, "em_accelerator_new: %s='%s' is not a positive integer", name, e);
    *out = (int)v;
    return EM_OK;
}

/* The world joined once per process, like Accelerate's PartialState
 * singleton: MPI cannot be initialized again after MPI_Finalize, so the group
 * lives until exit, shared by every accelerator made without a group. */
static em_process_group *g_world;

static void free_world(void)
{
    em_pg_free(g_world);
    g_world = NULL;
}

/* At exit (on_exit: it sees the status). A rank that exits with an error
 * while its peers may sit in a collective must not wait in MPI_Finalize for
 * them (they would wait for it until their timeout): it leaves at once,
 * without finalizing, and mpirun then stops the other ranks within a second
 * or so. A clean exit frees the world as usual. */
static void world_at_exit(int status, void *arg)
{
    (void)arg;
    if (status != 0 && g_world && em_pg_world_size(g_world) > 1) {
        fprintf(stderr, "ember: rank %d of %d exits with status %d: stopping the job\n", em_pg_rank(g_world),
                em_pg_world_size(g_world), status);
        fflush(NULL);
        _exit(status);
    }
    free_world();
}

/* This rank's device: cuda:<local rank> when a GPU is there and the CPU was
 * not asked for (opts.cpu, or EMBER_USE_CPU = true/1/yes), else the CPU.
 * A local rank without a GPU of its own is an error (NCCL takes one GPU per
 * rank), and so are several processes on GPUs in a build without NCCL. */
static em_status pick_device(em_accelerator *acc, bool cpu, em_device *out)
{
    *out = EM_CPU;
    const char *e = getenv("EMBER_USE_CPU");
    if (e && *e) {
        if (!strcasecmp(e, "true") || !strcmp(e, "1") || !strcasecmp(e, "yes")) cpu = true;
        else if (strcasecmp(e, "false") && strcmp(e, "0") && strcasecmp(e, "no"))
            return em__fail(EM_ERR_INVALID, "em_accelerator_new: EMBER_USE_CPU='%s' is not true or false", e);
    }
    int n = em_device_count(EM_DEVICE_CUDA);
    if (cpu || n == 0) return EM_OK;
    if (acc->local_rank >= n)
        return em__fail(EM_ERR_INVALID,
                        "em_accelerator_new: local rank %d has no GPU of its own (%d visible on this node; each "
                        "process needs one): run at most %d processes per node, or train on the CPU (--cpu, "
                        "EMBER_USE_CPU=true, or .cpu = true)", acc->local_rank, n, n);
    if (acc->world > 1 && !em__pg_cuda_built())
        return em__fail(EM_ERR_UNSUPPORTED,
                        "em_accelerator_new: %d processes on GPUs need NCCL, and this ember was built without it: "
                        "train on the CPU (--cpu, EMBER_USE_CPU=true, or .cpu = true)", acc->world);
    *out = EM_CUDA(acc->local_rank);
    return EM_OK;
}

static em_process_group *default_group(const em_pg_opts *opts)
{
    if (g_world) return g_world;
    if (em_pg_init(opts, &g_world) != EM_OK) return NULL;
    on_exit(world_at_exit, NULL);
    return g_world;
}

em_accelerator *em_accelerator_new(const em_accelerator_opts *opts)
{
    em_accelerator_opts o = opts ? *opts : (em_accelerator_opts){0};
    ACC_CHECK((unsigned)o.mixed_precision <= EM_MP_FP16, "em_accelerator_new", NULL,
              "mixed_precision has the unknown value %d", (int)o.mixed_precision);
    ACC_CHECK(o.gradient_accumulation_steps >= 0, "em_accelerator_new", NULL,
              "gradient_accumulation_steps is %d; it must be >= 1 (0 means the default)", o.gradient_accumulation_steps);
    ACC_CHECK(o.total_limit >= 0, "em_accelerator_new", NULL, "total_limit is %d; it must be >= 0", o.total_limit);
    ACC_CHECK(o.max_steps >= 0, "em_accelerator_new", NULL, "max_steps is %lld; it must be >= 0 (0: no limit)",
              (long long)o.max_steps);
    ACC_CHECK(o.even_batches >= -1 && o.even_batches <= 1, "em_accelerator_new", NULL,
              "even_batches is %d; use 0 (default, true), 1 (true) or -1 (false)", o.even_batches);

    em_mixed_precision mp = o.mixed_precision;
    if (mp == EM_MP_DEFAULT && env_mixed_precision(&mp) != EM_OK) return NULL;
    int K = o.gradient_accumulation_steps;
    if (K == 0) {
        K = 1;
        if (env_int("EMBER_GRADIENT_ACCUMULATION_STEPS", &K) != EM_OK) return NULL;
    }

    em_accelerator *acc = em__calloc(1, sizeof *acc);
    if (!acc) return NULL;
    acc->mp = mp;
    acc->autocast_regions0 = em_autocast_stats_get().regions;
    acc->K = K;
    acc->split_batches = o.split_batches;
    acc->even_batches = o.even_batches < 0 ? EM_TOK_OFF : EM_TOK_ON;
    acc->auto_naming = o.automatic_checkpoint_naming;
    acc->total_limit = o.total_limit;
    acc->ignore_mismatched_config = o.ignore_mismatched_config;
    acc->max_steps = o.max_steps;
    acc->ddp_opts = o.ddp;
    acc->device = EM_CPU;   /* pick_device below, once the rank is known */
    acc->sync = true;
    acc->window_len = 1;
    if (o.project_dir) {
        acc->project_dir = em__malloc(strlen(o.project_dir) + 1);
        if (!acc->project_dir) goto fail;
        strcpy(acc->project_dir, o.project_dir);
    }
    if (o.process_group) {
        acc->pg = o.process_group;
    } else {
        if (!(acc->pg = default_group(&o.pg))) goto fail;
    }
    acc->rank = em_pg_rank(acc->pg);
    acc->world = em_pg_world_size(acc->pg);
    acc->local_rank = em_pg_local_rank(acc->pg);
    if (pick_device(acc, o.cpu, &acc->device) != EM_OK) goto fail;
    em__nn_set_process(acc->rank, acc->world);
    em__tracking_main_probe = em_accelerator_is_main_process;   /* tracking asks which process writes */
    if (mp == EM_MP_FP16 && !(acc->scaler = em_grad_scaler_new(&o.scaler))) goto fail;
    if (acc->scaler) track_fp16(acc, true);
    return acc;
fail:
    em_accelerator_free(acc);
    return NULL;
}

static void close_batch_scope(em__acc_loader *l)
{
    if (!l->scope_open) return;
    while (em_scope_depth() > l->scope_depth) em_scope_end();
    l->scope_open = false;
}

void em_accelerator_free(em_accelerator *acc)
{
    if (!acc) return;
    for (int i = acc->n_loaders - 1; i >= 0; i--) close_batch_scope(&acc->loaders[i]);
    for (int i = 0; i < acc->n_models; i++) em_ddp_free(acc->models[i].ddp);
    if (acc->scaler) track_fp16(acc, false);
    em_grad_scaler_free(acc->scaler);
    if (acc->pg) em__nn_set_process(0, 1);
    em__free(acc->project_dir);
    em__free(acc);
}

void em_accelerator_free_all(em_accelerator *acc)
{
    if (!acc) return;
    em__acc_opt opts[EM__ACC_MAX];
    em__acc_loader loaders[EM__ACC_MAX];
    em__acc_model models[EM__ACC_MAX];
    em_scheduler *scheds[EM__ACC_MAX];
    int no = acc->n_opts, nl = acc->n_loaders, nm = acc->n_models, ns = acc->n_scheds;
    memcpy(opts, acc->opts, sizeof opts), memcpy(loaders, acc->loaders, sizeof loaders);
    memcpy(models, acc->models, sizeof models), memcpy(scheds, acc->scheds, sizeof scheds);
    em_accelerator_free(acc);   /* DDP companions and open batch scopes first: they point into the objects */
    for (int i = 0; i < ns; i++) em_scheduler_free(scheds[i]);
    for (int i = 0; i < no; i++) em_optimizer_free(opts[i].opt);
    for (int i = 0; i < nl; i++) em_dataloader_free(loaders[i].dl);
    for (int i = 0; i < nm; i++) em_module_free(models[i].m);
}

/* ---- the fp16 loop's scaler -----------------------------------------------------------
 * The GradScaler only scales (amp.h); scaler_step.c's wrappers hand it each
 * optimizer's gradients and step the optimizer. The accelerator also owns the "clipping before unscaling" check: clip_grad_norm (optim)
 * asks, through em__clip_scale_probe, whether a live fp16 accelerator's
 * scaler has gradients that still carry the scale. */
static em_accelerator *fp16_accs[EM__ACC_MAX];   /* the live fp16 accelerators (the loop's thread) */

static bool scale_probe(double *scale)
{
    for (int i = 0; i < EM__ACC_MAX; i++)
        if (fp16_accs[i] && em_grad_scaler_grads_scaled(fp16_accs[i]->scaler, scale)) return true;
    return false;
}

static void track_fp16(em_accelerator *acc, bool live)
{
    for (int i = 0; i < EM__ACC_MAX; i++)
        if (live ? !fp16_accs[i] : fp16_accs[i] == acc) {
            fp16_accs[i] = live ? acc : NULL;
            break;
        }
    em__clip_scale_probe = scale_probe;
}

/* ---- prepare ------------------------------------------------------------------- */
static int find_model(const em_accelerator *acc, const em_module *m)
{
    for (int i = 0; i < acc->n_models; i++)
        if (acc->models[i].m == m) return i;
    return -1;
}
static int find_opt(const em_accelerator *acc, const em_optimizer *o)
{
    for (int i = 0; i < acc->n_opts; i++)
        if (acc->opts[i].opt == o) return i;
    return -1;
}
static int find_loader(const em_accelerator *acc, const em_dataloader *dl)
{
    for (int i = 0; i < acc->n_loaders; i++)
        if (acc->loaders[i].dl == dl) return i;
    return -1;
}

static em_status prepare_model(em_accelerator *acc, em_module *m)
{
    if (find_model(acc, m) >= 0) {
        warn_prepared_twice(acc, EM__ACC_WARN_PREPARE_MODEL, "model");
        return EM_OK;
    }
    ACC_CHECK(acc->n_models < EM__ACC_MAX, "em_accelerator_prepare", EM_ERR_INVALID, "more than %d models", EM__ACC_MAX);
    em_status st = em_module_to(m, acc->device);
    if (st == EM_OK) st = em_module_flatten(m);
    em_ddp *ddp = NULL;
    if (st == EM_OK && acc->world > 1) st = em_ddp_new(m, acc->pg, &acc->ddp_opts, &ddp);
    if (st != EM_OK) return st;
    acc->models[acc->n_models++] = (em__acc_model){ .m = m, .ddp = ddp };
    return EM_OK;
}

/* Rank 0's shuffle seed, so that every rank walks the same permutation even
 * when the ranks were seeded differently. */
static em_status broadcast_seed(em_accelerator *acc, uint64_t *seed)
{
    if (acc->world == 1) return EM_OK;
    em_status st;
    em_scope_begin();
    int64_t v = (int64_t)*seed;
    em_tensor *t = em_from_data(&v, 1, (int64_t[]){1}, EM_I64);
    st = t ? em_pg_broadcast(acc->pg, t, 0) : em_last_status();
    if (st == EM_OK) *seed = (uint64_t)*(int64_t *)em_data_ptr(t);
    em_scope_end();
    return st;
}

static em_status prepare_loader(em_accelerator *acc, em_dataloader *dl)
{
    if (find_loader(acc, dl) >= 0) {
        warn_prepared_twice(acc, EM__ACC_WARN_PREPARE_LOADER, "dataloader");
        return EM_OK;
    }
    ACC_CHECK(acc->n_loaders < EM__ACC_MAX, "em_accelerator_prepare", EM_ERR_INVALID, "more than %d dataloaders",
              EM__ACC_MAX);
    em_dataloader_opts o = em_dataloader_options(dl);
    em_status st = broadcast_seed(acc, &o.seed);
    if (st != EM_OK) return st;
    bool same = o.num_processes == acc->world && o.process_index == acc->rank &&
                (acc->world == 1 || (o.split_batches == acc->split_batches && o.even_batches == acc->even_batches));
    if (!same || acc->world > 1) {
        o.num_processes = acc->world;
        o.process_index = acc->rank;
        o.split_batches = acc->split_batches;
        o.even_batches = acc->even_batches;
        if ((st = em_dataloader_reshard(dl, &o)) != EM_OK) return st;
    }
    em__acc_loader *l = &acc->loaders[acc->n_loaders++];
    *l = (em__acc_loader){ .dl = dl, .seen = em_dataloader_state(dl) };
    return EM_OK;
}

em_status em_accelerator_prepare_list(em_accelerator *acc, int n, const em_prepare_kind *kinds, void *const *objs)
{
    ACC_CHECK(acc, "em_accelerator_prepare", EM_ERR_INVALID, "the accelerator is NULL");
    ACC_CHECK(n >= 0 && (n == 0 || (kinds && objs)), "em_accelerator_prepare", EM_ERR_INVALID,
              "bad object list (n = %d)", n);
    /* two passes, as Accelerate: schedulers after the optimizers they follow */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && kinds[i] != EM_PREP_END; i++) {
            void *obj = objs[i];
            if (!obj || (kinds[i] == EM_PREP_SCHEDULER) != (pass == 1)) continue;
            em_status st = EM_OK;
            switch (kinds[i]) {
            case EM_PREP_MODEL: st = prepare_model(acc, obj); break;
            case EM_PREP_OPTIMIZER:
                if (find_opt(acc, obj) >= 0) {
                    warn_prepared_twice(acc, EM__ACC_WARN_PREPARE_OPTIMIZER, "optimizer");
                    break;
                }
                ACC_CHECK(acc->n_opts < EM__ACC_MAX, "em_accelerator_prepare", EM_ERR_INVALID, "more than %d optimizers",
                          EM__ACC_MAX);
                acc->opts[acc->n_opts++] = (em__acc_opt){ .opt = obj };
                break;
            case EM_PREP_DATALOADER: st = prepare_loader(acc, obj); break;
            case EM_PREP_SCHEDULER: {
                bool dup = false;
                for (int j = 0; j < acc->n_scheds; j++) dup |= acc->scheds[j] == obj;
                if (dup) {
                    warn_prepared_twice(acc, EM__ACC_WARN_PREPARE_SCHEDULER, "scheduler");
                    break;
                }
                ACC_CHECK(acc->n_scheds < EM__ACC_MAX, "em_accelerator_prepare", EM_ERR_INVALID,
                          "more than %d schedulers", EM__ACC_MAX);
                acc->scheds[acc->n_scheds++] = obj;
                break;
            }
            default:
                em__misuse("em_accelerator_prepare", "object %d has the unknown kind %d", i, (int)kinds[i]);
                return EM_ERR_INVALID;
            }
            if (st != EM_OK) return st;
        }
    return EM_OK;
}

/* ---- the active dataloader ------------------------------------------------------- */
static bool state_eq(em_loader_state a, em_loader_state b) { return a.epoch == b.epoch && a.batch == b.batch; }

int em__acc_active_loader(em_accelerator *acc)
{
    int best = -1;
    for (int i = 0; i < acc->n_loaders; i++) {
        em__acc_loader *l = &acc->loaders[i];
        em_loader_state s = em_dataloader_state(l->dl);
        if (!state_eq(s, l->seen)) {
            l->seen = s;
            l->tick = ++acc->tick;
        }
        /* a loader between epochs (batch 0) is not iterating */
        if (s.batch > 0 && (best < 0 || l->tick > acc->loaders[best].tick)) best = i;
    }
    return best;
}

void em__acc_snapshot_loaders(em_accelerator *acc)
{
    for (int i = 0; i < acc->n_loaders; i++) acc->loaders[i].seen = em_dataloader_state(acc->loaders[i].dl);
}

/* The batch's tensors on dev (new tensors in the current scope). */
static bool batch_to(em_batch *b, em_device dev)
{
    em_tensor **ts[6];
    for (int i = 0, n = em_batch_tensors(b, ts); i < n; i++)
        if (*ts[i] && !(*ts[i] = em_to(*ts[i], dev))) return false;
    return true;
}

bool em_accelerator_next(em_accelerator *acc, em_dataloader *dl, em_batch *out)
{
    ACC_CHECK(acc && dl && out, "em_accelerator_next", false, "%s is NULL",
              !acc ? "the accelerator" : !dl ? "the dataloader" : "out");
    int j = find_loader(acc, dl);
    ACC_CHECK(j >= 0, "em_accelerator_next", false, "the dataloader was not prepared (em_accelerator_prepare)");
    em__acc_loader *l = &acc->loaders[j];
    close_batch_scope(l);
    if (l->trains && em_accelerator_reached_max_steps(acc)) return false;   /* no scope: nothing to close */
    l->scope_depth = em_scope_depth();
    em_scope_begin();
    l->scope_open = true;
    if (!em_dataloader_next(dl, out)) {
        close_batch_scope(l);
        l->seen = em_dataloader_state(dl);
        return false;
    }
    l->seen = em_dataloader_state(dl);
    l->tick = ++acc->tick;
    if (acc->device.type != EM_DEVICE_CPU && !batch_to(out, acc->device)) {
        close_batch_scope(l);   /* the error stays set (em_last_error) */
        memset(out, 0, sizeof *out);
        return false;
    }
    return true;
}

void em_accelerator_end_loop(em_accelerator *acc, em_dataloader *dl)
{
    ACC_CHECK(acc && dl, "em_accelerator_end_loop", , "%s is NULL", !acc ? "the accelerator" : "the dataloader");
    int j = find_loader(acc, dl);
    ACC_CHECK(j >= 0, "em_accelerator_end_loop", , "the dataloader was not prepared (em_accelerator_prepare)");
    close_batch_scope(&acc->loaders[j]);
}

bool em_accelerator_reached_max_steps(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_reached_max_steps", false, "the accelerator is NULL");
    return acc->max_steps > 0 && em_accelerator_optimizer_steps(acc) >= acc->max_steps;
}

void em_accelerator_set_trigger(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_set_trigger", , "the accelerator is NULL");
    acc->trigger = true;
}

bool em_accelerator_check_trigger(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_check_trigger", false, "the accelerator is NULL");
    bool any = acc->trigger;
    if (acc->world > 1) {
        em_scope_begin();
        em_tensor *flag = em_full(EM_SHAPE(1), any ? 1.0 : 0.0, EM_F32, acc->device);
        any = !flag || em_pg_all_reduce(acc->pg, flag, EM_RED_MAX) != EM_OK || em_item(em_to(flag, EM_CPU)) > 0;
        em_scope_end();
    }
    acc->trigger = false;
    return any;
}

/* ---- accumulation --------------------------------------------------------------- */
static void set_require_sync(em_accelerator *acc, em_module *only, bool sync)
{
    for (int i = 0; i < acc->n_models; i++)
        if (acc->models[i].ddp && (!only || acc->models[i].m == only)) em_ddp_set_require_sync(acc->models[i].ddp, sync);
}

/* One micro-step: which window it is in, and whether it syncs. */
static void do_sync(em_accelerator *acc, em_module *model)
{
    int j = em__acc_active_loader(acc);
    acc->step++;
    if (j >= 0) {
        em_dataloader *dl = acc->loaders[j].dl;
        int64_t L = em_dataloader_len(dl), i = em_dataloader_state(dl).batch - 1;
        int64_t start = i / acc->K * acc->K, len = L - start < acc->K ? L - start : acc->K;
        acc->window_len = (int)len;
        acc->window_pos = (int)(i - start + 1);
        acc->sync = acc->window_pos >= acc->window_len || em_dataloader_end_of_dataloader(dl);
    } else {
        acc->window_len = acc->K;
        acc->window_pos = acc->window_pos % acc->K + 1;
        acc->sync = acc->window_pos == acc->K;
    }
    set_require_sync(acc, model, acc->sync);
}

void em_accelerator_accumulate_begin(em_accelerator *acc, em_module *model)
{
    ACC_CHECK(acc, "em_accelerator_accumulate_begin", , "the accelerator is NULL");
    ACC_CHECK(!acc->in_block, "em_accelerator_accumulate_begin", , "EM_ACCUMULATE blocks do not nest");
    ACC_CHECK(!model || find_model(acc, model) >= 0, "em_accelerator_accumulate_begin", ,
              "the model was not prepared (em_accelerator_prepare)");
    acc->in_block = true;
    acc->block_model = model;
    do_sync(acc, model);
}

void em_accelerator_accumulate_end(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_accumulate_end", , "the accelerator is NULL");
    ACC_CHECK(acc->in_block, "em_accelerator_accumulate_end", , "no EM_ACCUMULATE block is open");
    acc->in_block = false;
    set_require_sync(acc, acc->block_model, true);   /* as DDP's no_sync context restores it */
    acc->block_model = NULL;
}

bool em_accelerator_sync_gradients(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_sync_gradients", false, "the accelerator is NULL");
    return acc->sync;
}

int em_accelerator_gradient_accumulation_steps(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_gradient_accumulation_steps", 0, "the accelerator is NULL");
    return acc->K;
}

/* Whether any parameter of opt has a gradient (any: zero or not). */
static bool has_grads(em_optimizer *opt)
{
    for (int g = 0; g < em_optimizer_num_groups(opt); g++) {
        em_param_group pg = em_optimizer_group(opt, g);
        for (int k = 0; k < pg.n_params; k++)
            if (em_grad(pg.params[k])) return true;
    }
    return false;
}

/* Whether a gradient of opt holds a nonzero element: one read of every
 * contiguous CPU gradient (others are not looked at). */
static bool grads_nonzero(em_optimizer *opt)
{
    for (int g = 0; g < em_optimizer_num_groups(opt); g++) {
        em_param_group pg = em_optimizer_group(opt, g);
        for (int k = 0; k < pg.n_params; k++) {
            em_tensor *gr = em_grad(pg.params[k]);
            if (!gr || gr->device.type != EM_DEVICE_CPU || !em_is_contiguous(gr)) continue;
            int64_t n = em_numel(gr);
            const char *d = em_data_ptr(gr);
            size_t es = em_dtype_size(gr->dtype);
            if (gr->dtype == EM_F32) {
                for (int64_t i = 0; i < n; i++)
                    if (((const float *)d)[i] != 0) return true;
            } else {
                for (int64_t i = 0; i < n; i++)
                    if (em__load(d + (size_t)i * es, gr->dtype) != 0) return true;
            }
        }
    }
    return false;
}

em_status em_accelerator_backward(em_accelerator *acc, em_tensor *loss)
{
    ACC_CHECK(acc, "em_accelerator_backward", EM_ERR_INVALID, "the accelerator is NULL");
    if (!loss) return em_last_status() != EM_OK ? em_last_status() : EM_ERR_INVALID;   /* an earlier failure */
    bool implicit = !acc->in_block;
    if ((acc->mp == EM_MP_BF16 || acc->mp == EM_MP_FP16) && em_autocast_stats_get().regions == acc->autocast_regions0)
        acc_warn(acc, EM__ACC_WARN_NO_AUTOCAST,
                 "em_accelerator_backward: mixed_precision is %s, but no autocast region has run yet, so the forward "
                 "ran in f32. Wrap it: EM_AUTOCAST(acc) { out = em_seqcls_forward(model, &in); } (Accelerate wraps "
                 "model.forward inside prepare; a C function cannot be wrapped)",
                 acc->mp == EM_MP_BF16 ? "bf16" : "fp16");
    if (implicit) do_sync(acc, NULL);
    em__acc_flush_scaler(acc);   /* the scale this backward uses is the updated one */
    int active = em__acc_active_loader(acc);
    if (active >= 0) acc->loaders[active].trains = true;   /* a training loader: max_steps applies to it */
    for (int i = 0; i < acc->n_opts; i++) {
        em__acc_opt *o = &acc->opts[i];
        o->saw_backward = true;
        if (o->check_zeroed && grads_nonzero(o->opt))
            acc_warn(acc, EM__ACC_WARN_NO_ZERO_GRAD,
                     "em_accelerator_backward: the gradients of the previous optimizer step are still there, so "
                     "this backward adds to them; call em_accelerator_optimizer_zero_grad(acc, opt) after "
                     "em_accelerator_optimizer_step(acc, opt)");
        o->check_zeroed = false;
    }
    em_status st = EM_OK;
    em_scope_begin();
    em_tensor *t = loss;
    if (acc->window_len > 1) t = em_div(t, em_scalar((double)acc->window_len, loss->dtype, loss->device));
    if (t && acc->scaler) t = em_grad_scaler_scale(acc->scaler, t);
    if (t) {
        for (int i = 0; i < acc->n_models; i++)   /* the DDP timeline counts from here */
            if (acc->models[i].ddp) em__ddp_mark_backward_begin(acc->models[i].ddp);
        em_backward(t);
    } else {
        st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    }
    em_scope_end();
    if (st == EM_OK && acc->sync)
        for (int i = 0; i < acc->n_models && st == EM_OK; i++)
            if (acc->models[i].ddp && (implicit || !acc->block_model || acc->models[i].m == acc->block_model)) {
                st = em_ddp_finish_backward(acc->models[i].ddp);
                /* torch's DDP broadcasts buffers before each forward that will sync
                 * gradients; here, after the backward of one: the next forward sees
                 * rank 0's buffers just the same, and no forward without a backward
                 * (evaluation, uneven last batches) takes part in a collective */
                if (st == EM_OK) st = em_ddp_sync_buffers(acc->models[i].ddp);
            }
    if (implicit) set_require_sync(acc, NULL, true);
    return st;
}

/* ---- optimizer and scheduler steps --------------------------------------------------- */
void em__acc_flush_scaler(em_accelerator *acc)
{
    if (!acc->scaler || !acc->scaler_pending) return;
    em_grad_scaler_update(acc->scaler);
    acc->scaler_pending = false;
    for (int i = 0; i < acc->n_opts; i++) acc->opts[i].unscaled = acc->opts[i].stepped = false;
}

em_status em_accelerator_optimizer_step(em_accelerator *acc, em_optimizer *opt)
{
    ACC_CHECK(acc && opt, "em_accelerator_optimizer_step", EM_ERR_INVALID, "%s is NULL",
              acc ? "the optimizer" : "the accelerator");
    int j = find_opt(acc, opt);
    ACC_CHECK(j >= 0, "em_accelerator_optimizer_step", EM_ERR_INVALID,
              "the optimizer was not prepared (em_accelerator_prepare)");
    if (!acc->sync) return EM_OK;
    em__acc_opt *o = &acc->opts[j];
    /* gradients that no em_accelerator_backward made: em_backward was called
     * directly, which is wrong wherever the accelerator transforms the loss */
    if (!o->saw_backward && (acc->scaler || acc->K > 1 || acc->world > 1) && has_grads(opt))
        acc_warn(acc, EM__ACC_WARN_DIRECT_BACKWARD,
                 "em_accelerator_optimizer_step: the gradients were not made by em_accelerator_backward since "
                 "the last step (was em_backward called directly?); they miss the fp16 loss scaling, the "
                 "division by the accumulation window and the cross-process averaging: call "
                 "em_accelerator_backward(acc, loss) instead of em_backward(loss)");
    o->saw_backward = false;
    o->check_zeroed = true;
    em_status st;
    if (acc->scaler) {
        bool stepped = false;
        st = em_grad_scaler_step(acc->scaler, opt, &stepped);
        o->skipped = !stepped;
        o->stepped = true;
        acc->scaler_pending = true;
        /* one scaler update per sync step: now when every prepared optimizer
         * has stepped, else before the next backward (or save_state) */
        bool all = true;
        for (int i = 0; i < acc->n_opts; i++) all &= acc->opts[i].stepped;
        if (all) em__acc_flush_scaler(acc);
    } else {
        st = em_optimizer_step(opt);
        o->skipped = false;
    }
    if (st == EM_OK && !o->skipped) o->steps++;
    return st;
}

void em_accelerator_optimizer_zero_grad(em_accelerator *acc, em_optimizer *opt)
{
    ACC_CHECK(acc && opt, "em_accelerator_optimizer_zero_grad", , "%s is NULL",
              acc ? "the optimizer" : "the accelerator");
    ACC_CHECK(find_opt(acc, opt) >= 0, "em_accelerator_optimizer_zero_grad", ,
              "the optimizer was not prepared (em_accelerator_prepare)");
    if (!acc->sync) return;
    em_optimizer_zero_grad_ex(opt, false);
    /* the gradients are zero now: the next backward need not scan them for a
     * forgotten zero_grad (a full read of every gradient, each step) */
    acc->opts[find_opt(acc, opt)].check_zeroed = false;
}

void em_accelerator_scheduler_step(em_accelerator *acc, em_scheduler *sched)
{
    ACC_CHECK(acc && sched, "em_accelerator_scheduler_step", , "%s is NULL",
              acc ? "the scheduler" : "the accelerator");
    if (!acc->sync || em_accelerator_optimizer_step_was_skipped(acc)) return;
    em_scheduler_step(sched);
}

bool em_accelerator_optimizer_step_was_skipped(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_optimizer_step_was_skipped", false, "the accelerator is NULL");
    for (int i = 0; i < acc->n_opts; i++)
        if (acc->opts[i].skipped) return true;
    return false;
}

int64_t em_accelerator_optimizer_steps(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_optimizer_steps", 0, "the accelerator is NULL");
    int64_t m = 0;
    for (int i = 0; i < acc->n_opts; i++) m = acc->opts[i].steps > m ? acc->opts[i].steps : m;
    return m;
}

/* ---- mixed precision -------------------------------------------------------------------- */
void em_accelerator_autocast_begin(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_autocast_begin", , "the accelerator is NULL");
    if (acc->mp == EM_MP_BF16) em_autocast_begin(EM_BF16);
    else if (acc->mp == EM_MP_FP16) em_autocast_begin(EM_F16);
}

void em_accelerator_autocast_end(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_autocast_end", , "the accelerator is NULL");
    if (acc->mp == EM_MP_BF16 || acc->mp == EM_MP_FP16) em_autocast_end();
}

em_mixed_precision em_accelerator_mixed_precision(const em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_mixed_precision", EM_MP_NO, "the accelerator is NULL");
    return acc->mp;
}

em_grad_scaler *em_accelerator_grad_scaler(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_grad_scaler", NULL, "the accelerator is NULL");
    return acc->scaler;
}

double em_accelerator_clip_grad_norm(em_accelerator *acc, em_module *model, double max_norm)
{
    ACC_CHECK(acc, "em_accelerator_clip_grad_norm", NAN, "the accelerator is NULL");
    if (!acc->sync) return NAN;
    em__acc_flush_scaler(acc);
    for (int i = 0; acc->scaler && i < acc->n_opts; i++)
        if (!acc->opts[i].unscaled) {
            if (em_grad_scaler_unscale_(acc->scaler, acc->opts[i].opt) != EM_OK) return NAN;
            acc->opts[i].unscaled = true;
        }
    double norm = NAN;
    em_status st;
    if (model) {
        em_named_tensors ps = em_module_named_parameters(model);
        em_tensor **ts = em__malloc(sizeof(em_tensor *) * (size_t)(ps.n ? ps.n : 1));
        if (!ts) {
            em_named_tensors_free(&ps);
            return NAN;
        }
        for (int i = 0; i < ps.n; i++) ts[i] = ps.items[i].tensor;
        st = em_clip_grad_norm(ts, ps.n, max_norm, NULL, &norm);
        em__free(ts);
        em_named_tensors_free(&ps);
    } else {
        int n = 0;
        for (int i = 0; i < acc->n_opts; i++)
            for (int g = 0; g < em_optimizer_num_groups(acc->opts[i].opt); g++)
                n += em_optimizer_group(acc->opts[i].opt, g).n_params;
        em_tensor **ts = em__malloc(sizeof(em_tensor *) * (size_t)(n ? n : 1));
        if (!ts) return NAN;
        n = 0;
        for (int i = 0; i < acc->n_opts; i++)
            for (int g = 0; g < em_optimizer_num_groups(acc->opts[i].opt); g++) {
                em_param_group pg = em_optimizer_group(acc->opts[i].opt, g);
                for (int k = 0; k < pg.n_params; k++) ts[n++] = pg.params[k];
            }
        st = em_clip_grad_norm(ts, n, max_norm, NULL, &norm);
        em__free(ts);
    }
    return st == EM_OK ? norm : NAN;
}

/* ---- collectives ----------------------------------------------------------------------------- */
/* t gathered along dim 0, then its first `keep` rows (keep < 0: all), as one
 * new reference owned like an op result. */
static em_status gather_rows(em_accelerator *acc, em_tensor *t, int64_t keep, em_tensor **out)
{
    *out = NULL;
    if (!t) return em_last_status() != EM_OK ? em_last_status() : EM_ERR_INVALID;
    em_status st = EM_OK;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *c = t->ndim == 0 ? em_reshape(t, 1, (int64_t[]){1}) : t;
    if (c && acc->world > 1) {
        c = em_contiguous(c);
        if (c) st = em_pg_all_gather(acc->pg, c, &r);
    } else {
        r = c;
    }
    /* a fresh view: the result is a new reference whatever path made it */
    if (st == EM_OK && r) r = em_narrow(r, 0, 0, keep >= 0 && keep < r->shape[0] ? keep : r->shape[0]);
    if (st == EM_OK && !r) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    if (st == EM_OK) em_keep(r);
    em_scope_end();
    if (st == EM_OK) *out = r;
    return st;
}

em_status em_accelerator_gather(em_accelerator *acc, em_tensor *t, em_tensor **out)
{
    ACC_CHECK(acc && out, "em_accelerator_gather", EM_ERR_INVALID, "%s is NULL", acc ? "out" : "the accelerator");
    return gather_rows(acc, t, -1, out);
}

em_status em_accelerator_gather_for_metrics(em_accelerator *acc, int n, em_tensor *const *in, em_tensor **out)
{
    ACC_CHECK(acc && (n == 0 || (in && out)) && n >= 0, "em_accelerator_gather_for_metrics", EM_ERR_INVALID,
              "bad arguments (n = %d)", n);
    int j = em__acc_active_loader(acc);
    int64_t keep = -1;
    if (j >= 0 && em_dataloader_end_of_dataloader(acc->loaders[j].dl)) {
        int64_t rem = em_dataloader_remainder(acc->loaders[j].dl);
        if (rem > 0) keep = rem;
    }
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n; i++) {
        em_status st = gather_rows(acc, in[i], keep, &out[i]);
        if (st != EM_OK) return st;   /* earlier outputs stay owned like op results */
    }
    return EM_OK;
}

em_tensor *em_accelerator_reduce(em_accelerator *acc, em_tensor *t, em_reduce_op op)
{
    ACC_CHECK(acc, "em_accelerator_reduce", NULL, "the accelerator is NULL");
    if (!t) return NULL;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *c = em_clone(t);
    if (c && (acc->world == 1 || em_pg_all_reduce(acc->pg, c, op) == EM_OK)) r = em_keep(c);
    em_scope_end();
    return r;
}

/* ---- process helpers -------------------------------------------------------------------------- */
void em_accelerator_wait_for_everyone(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_wait_for_everyone", , "the accelerator is NULL");
    if (acc->world > 1 && em_pg_barrier(acc->pg) != EM_OK)
        fprintf(stderr, "ember: rank %d: wait_for_everyone failed: %s\n", acc->rank, em_last_error());
}

void em_accelerator_main_process_first_begin(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_main_process_first_begin", , "the accelerator is NULL");
    if (acc->rank != 0) em_accelerator_wait_for_everyone(acc);
}

void em_accelerator_main_process_first_end(em_accelerator *acc)
{
    ACC_CHECK(acc, "em_accelerator_main_process_first_end", , "the accelerator is NULL");
    if (acc->rank == 0) em_accelerator_wait_for_everyone(acc);
}

em_status em__acc_agree(em_accelerator *acc, em_status st, const char *what)
{
    if (acc->world == 1) return st;
    int64_t v = st == EM_OK ? 0 : ((int64_t)st << 16) | acc->rank;
    em_status cst;
    em_scope_begin();
    em_tensor *t = em_from_data(&v, 1, (int64_t[]){1}, EM_I64);
    cst = t ? em_pg_all_reduce(acc->pg, t, EM_RED_MAX) : em_last_status();
    if (cst == EM_OK) v = *(int64_t *)em_data_ptr(t);
    em_scope_end();
    if (cst != EM_OK) return cst;
    if (st != EM_OK || v == 0) return st;
    return em__fail((em_status)(v >> 16), "%s failed on rank %d (%s)", what, (int)(v & 0xffff),
                    em_status_name((em_status)(v >> 16)));
}

bool em_accelerator_is_main_process(const em_accelerator *acc) { return acc && acc->rank == 0; }
bool em_accelerator_is_local_main_process(const em_accelerator *acc) { return acc && acc->local_rank == 0; }
bool em_accelerator_is_last_process(const em_accelerator *acc) { return acc && acc->rank == acc->world - 1; }
int em_accelerator_process_index(const em_accelerator *acc) { return acc ? acc->rank : 0; }
int em_accelerator_local_process_index(const em_accelerator *acc) { return acc ? acc->local_rank : 0; }
int em_accelerator_num_processes(const em_accelerator *acc) { return acc ? acc->world : 1; }
em_device em_accelerator_device(const em_accelerator *acc) { return acc ? acc->device : EM_CPU; }
em_process_group *em_accelerator_process_group(em_accelerator *acc) { return acc ? acc->pg : NULL; }
int64_t em_accelerator_step(const em_accelerator *acc) { return acc ? acc->step : 0; }
int64_t em_accelerator_iteration(const em_accelerator *acc) { return acc ? acc->iteration : 0; }

em_module *em_accelerator_unwrap_model(em_accelerator *acc, em_module *model)
{
    (void)acc;
    return model;   /* DDP is a companion, never a wrapper: the model is its own unwrapped self */
}

void em_accelerator_print(em_accelerator *acc, const char *fmt, ...)
{
    if (!em_accelerator_is_local_main_process(acc)) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void em_accelerator_split_between_processes(const em_accelerator *acc, int64_t n, int64_t *begin, int64_t *end)
{
    ACC_CHECK(acc && begin && end && n >= 0, "em_accelerator_split_between_processes", ,
              "bad arguments (n = %lld)", (long long)n);
    int64_t P = acc->world, i = acc->rank, q = n / P, r = n % P;
    *begin = i * q + (i < r ? i : r);
    *end = *begin + q + (i < r);
}

em_status em_accelerator_save_model(em_accelerator *acc, em_module *model, const char *dir)
{
    ACC_CHECK(acc && model && dir, "em_accelerator_save_model", EM_ERR_INVALID, "%s is NULL",
              !acc ? "the accelerator" : !model ? "the model" : "dir");
    em_status st = EM_OK;
    if (acc->rank == 0) st = em_save_pretrained(em_accelerator_unwrap_model(acc, model), dir);
    if (acc->rank == 0 && st == EM_OK && acc->tokenizer) st = em_tokenizer_save_pretrained(acc->tokenizer, dir);
    return em__acc_agree(acc, st, "save_model");
}

void em_accelerator_set_tokenizer(em_accelerator *acc, const em_tokenizer *tok)
{
    ACC_CHECK(acc, "em_accelerator_set_tokenizer", , "the accelerator is NULL");
    acc->tokenizer = tok;
}
