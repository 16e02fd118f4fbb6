/* ember — the Accelerator's checkpoints: save_state / load_state (layout in
 * accelerator.h), automatic checkpoint naming with total_limit.
 *
 * Atomicity: every rank writes into "<dir>.tmp-ember" (made by the main
 * process; a stale one from a crash is removed first); once every rank
 * reports success the main process moves it into place: rename(2) when dir
 * does not exist, else an atomic exchange (renameat2 RENAME_EXCHANGE) with
 * the old folder, which is then deleted. A reader therefore sees the old
 * checkpoint or the new one, never a mix. The ranks agree on the outcome of
 * each phase with one tiny all-reduce, so a failure on one rank fails the
 * call on all of them instead of leaving some waiting.
 *
 * Numbers that must survive exactly (the RNG's 64-bit seed and offset) are
 * written as decimal strings; counters fit a double exactly. */
#include "distributed/accelerate/accelerator_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define STATE_FORMAT "ember.accelerator_state/1"
#define RNG_FORMAT "ember.random_states/1"

/* ---- small file-system helpers ------------------------------------------------- */
static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -rf path; EM_OK when it is gone (or never was). */
static em_status remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return EM_OK;
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return em__fail(EM_ERR_IO, "save_state: cannot remove %s: %s", path, strerror(errno));
    return EM_OK;
}

/* mkdir -p */
static em_status make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return em__fail(EM_ERR_INVALID, "save_state: path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return em__fail(EM_ERR_IO, "save_state: cannot create %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return EM_OK;
}

static bool path_join(char *out, size_t cap, const char *dir, const char *name)
{
    return snprintf(out, cap, "%s/%s", dir, name) < (int)cap;
}
/* path_join or return EM_ERR_INVALID from the calling function. */
#define JOIN(out, dir, name) do { if (!path_join(out, sizeof out, dir, name)) \
        return em__fail(EM_ERR_INVALID, "checkpoint path too long: %s/%s", dir, name); } while (0)


static em_status write_json(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    if (!text) return em__fail(EM_ERR_OOM, "save_state: out of memory writing %s", path);
    FILE *f = fopen(path, "wb");
    em_status st = EM_OK;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0)
        st = em__fail(EM_ERR_IO, "save_state: cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && st == EM_OK) st = em__fail(EM_ERR_IO, "save_state: cannot write %s: %s", path, strerror(errno));
    free(text);
    return st;
}

static em_status read_json(const char *path, cJSON **out)
{
    *out = NULL;
    FILE *f = em__fopen_regular(path);
    if (!f)
        return em__fail(errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "load_state: cannot open %s: %s", path,
                        em__strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    em_status st = EM_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                st = em__fail(EM_ERR_OOM, "load_state: out of memory reading %s", path);
                break;
            }
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (st == EM_OK && ferror(f)) st = em__fail(EM_ERR_IO, "load_state: cannot read %s", path);
    fclose(f);
    if (st == EM_OK) {
        buf[n] = 0;
        *out = cJSON_Parse(buf);
        if (!*out) st = em__fail(EM_ERR_FORMAT, "load_state: %s is not valid JSON", path);
    }
    free(buf);
    return st;
}

/* A non-negative integer field (a JSON number that is a whole number). */
static em_status json_i64(const cJSON *o, const char *path, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return em__fail(EM_ERR_FORMAT, "load_state: %s: missing field \"%s\"", path, key);
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d < 0 || d > 9007199254740992.0 || d != (double)(int64_t)d)
        return em__fail(EM_ERR_FORMAT, "load_state: %s: field \"%s\" is not a non-negative integer", path, key);
    *out = (int64_t)d;
    return EM_OK;
}

/* A uint64 stored as a decimal string. */
static em_status json_u64(const cJSON *o, const char *path, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !*v->valuestring)
        return em__fail(EM_ERR_FORMAT, "load_state: %s: field \"%s\" is missing or not a string", path, key);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v->valuestring, &end, 10);
    if (*end || errno || v->valuestring[0] == '-')
        return em__fail(EM_ERR_FORMAT, "load_state: %s: field \"%s\" = \"%s\" is not an unsigned 64-bit integer",
                        path, key, v->valuestring);
    *out = x;
    return EM_OK;
}

static bool add_num(cJSON *o, const char *key, double v) { return cJSON_AddNumberToObject(o, key, v) != NULL; }
static bool add_u64(cJSON *o, const char *key, uint64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return cJSON_AddStringToObject(o, key, s) != NULL;
}

static const char *mp_name(em_mixed_precision mp)
{
    return mp == EM_MP_BF16 ? "bf16" : mp == EM_MP_FP16 ? "fp16" : "no";
}

/* ---- models: unwrapped parameters and persistent buffers ------------------------- */
static em_status save_module(em_module *m, const char *path)
{
    em_named_tensors ps = em_module_named_parameters(m), bs = em_module_named_buffers(m, false);
    int n = ps.n + bs.n;
    const char **names = em__malloc(sizeof(char *) * (size_t)(n ? n : 1));
    em_tensor **ts = em__malloc(sizeof(em_tensor *) * (size_t)(n ? n : 1));
    em_status st = EM_OK;
    if (!names || !ts) {
        st = EM_ERR_OOM;
    } else {
        for (int i = 0; i < ps.n; i++) names[i] = ps.items[i].name, ts[i] = ps.items[i].tensor;
        for (int i = 0; i < bs.n; i++) names[ps.n + i] = bs.items[i].name, ts[ps.n + i] = bs.items[i].tensor;
        em_scope_begin();   /* host copies of device tensors (a NULL copy fails the save with its error) */
        for (int i = 0; i < n; i++)
            if (ts[i]->device.type != EM_DEVICE_CPU) ts[i] = em_to(ts[i], EM_CPU);
        st = em_safetensors_save_checked(path, n, names, ts, 1, (const char *[]){"format"}, (const char *[]){"pt"});
        em_scope_end();
    }
    em__free(names);
    em__free(ts);
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    return st;
}

/* The index of the first NaN or infinity of a floating tensor, or -1. */
static int64_t first_nonfinite(em_tensor *t)
{
    if (t->dtype != EM_F32 && t->dtype != EM_F64 && t->dtype != EM_F16 && t->dtype != EM_BF16) return -1;
    int64_t n = em_numel(t), found = -1;
    EM_SCOPE {
        em_tensor *c = em_contiguous(t->dtype == EM_F32 ? t : em_to_dtype(t, EM_F32));
        const float *v = c ? em_data_ptr(c) : NULL;
        for (int64_t i = 0; v && i < n; i++)
            if (!isfinite(v[i])) {
                found = i;
                break;
            }
    }
    return found;
}

/* A model's checkpoint file, checked and held until every other object of the
 * checkpoint has loaded too (load_all): only then are the weights copied in, so
 * a load_state that fails anywhere leaves every model unchanged. */
typedef struct module_load {
    em_safetensors *sf;
    em_named_tensors ps, bs;
    em_tensor **src;   /* n owned references, the file's tensors in ps-then-bs order */
    int n;
} module_load;

static void module_load_free(module_load *ml)
{
    for (int i = 0; ml->src && i < ml->n; i++) em_release(ml->src[i]);
    em__free(ml->src);
    em_named_tensors_free(&ml->ps);
    em_named_tensors_free(&ml->bs);
    em_safetensors_close(ml->sf);
    *ml = (module_load){0};
}

/* Checks every tensor (names, shapes, finite values) and holds them in *ml;
 * nothing of m changes. */
static em_status load_module_check(em_module *m, const char *path, module_load *ml)
{
    *ml = (module_load){0};
    em_status st = em_safetensors_open(path, &ml->sf);
    if (st != EM_OK) return st;
    ml->ps = em_module_named_parameters(m), ml->bs = em_module_named_buffers(m, false);
    int n = ml->ps.n + ml->bs.n;
    ml->src = em__calloc((size_t)(n ? n : 1), sizeof(em_tensor *));
    ml->n = ml->src ? n : 0;
    if (!ml->src) st = EM_ERR_OOM;
    if (st == EM_OK && em_safetensors_count(ml->sf) != n)
        st = em__fail(EM_ERR_INVALID, "load_state: %s holds %d tensors; the model has %d parameters and buffers",
                      path, em_safetensors_count(ml->sf), n);
    for (int i = 0; i < n && st == EM_OK; i++) {
        em_named_tensor *nt = i < ml->ps.n ? &ml->ps.items[i] : &ml->bs.items[i - ml->ps.n];
        em_tensor *x = NULL;
        EM_SCOPE { x = em_retain(em_safetensors_get(ml->sf, nt->name)); }
        ml->src[i] = x;
        if (!x) {
            st = em__fail(em_last_status() == EM_OK ? EM_ERR_NOT_FOUND : em_last_status(),
                          "load_state: %s has no tensor \"%s\"", path, nt->name);
            break;
        }
        bool same = x->ndim == nt->tensor->ndim && x->dtype == nt->tensor->dtype;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == nt->tensor->shape[d];
        if (!same)
            st = em__fail(EM_ERR_INVALID, "load_state: %s: tensor \"%s\" is %s %s; the model's is %s %s", path,
                          nt->name, em_dtype_name(x->dtype), em__shape_str(x), em_dtype_name(nt->tensor->dtype),
                          em__shape_str(nt->tensor));
        int64_t bad = st == EM_OK ? first_nonfinite(x) : -1;
        if (bad >= 0)
            st = em__fail(EM_ERR_INVALID, "load_state: %s: tensor \"%s\" holds a non-finite value (element %lld): "
                          "refusing to resume from it", path, nt->name, (long long)bad);
    }
    if (st != EM_OK) module_load_free(ml);
    return st;
}

/* Copies the checked tensors into the model (cannot fail: same shapes and dtypes). */
static void load_module_apply(module_load *ml)
{
    bool prev = em_set_grad_enabled(false);
    for (int i = 0; i < ml->n; i++) {
        em_named_tensor *nt = i < ml->ps.n ? &ml->ps.items[i] : &ml->bs.items[i - ml->ps.n];
        em_copy_(nt->tensor, ml->src[i]);
    }
    em_set_grad_enabled(prev);
}

/* ---- automatic naming ---------------------------------------------------------------- */
/* n for a folder named exactly "checkpoint_<digits>", else -1. */
static int64_t checkpoint_number(const char *name)
{
    if (strncmp(name, "checkpoint_", 11) != 0 || !name[11]) return -1;
    int64_t v = 0;
    for (const char *p = name + 11; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The checkpoint numbers under base, sorted numerically (checkpoint_10 after
 * checkpoint_9). *nums is malloc'd (free it); *n may be 0. */
static em_status list_checkpoints(const char *base, int64_t **nums, int *n)
{
    *nums = NULL;
    *n = 0;
    DIR *d = opendir(base);
    if (!d) return errno == ENOENT ? EM_OK : em__fail(EM_ERR_IO, "cannot list %s: %s", base, strerror(errno));
    int cap = 0;
    em_status st = EM_OK;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t v = checkpoint_number(e->d_name);
        if (v < 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *p = realloc(*nums, sizeof(int64_t) * (size_t)cap);
            if (!p) {
                st = em__fail(EM_ERR_OOM, "out of memory listing %s", base);
                break;
            }
            *nums = p;
        }
        (*nums)[(*n)++] = v;
    }
    closedir(d);
    if (st == EM_OK && *n) qsort(*nums, (size_t)*n, sizeof(int64_t), cmp_i64);
    return st;
}

static em_status checkpoints_dir(const em_accelerator *acc, char *out, size_t cap, const char *op)
{
    if (!acc->auto_naming || !acc->project_dir)
        return em__fail(EM_ERR_INVALID, "%s: no directory given, and automatic checkpoint naming is off (set "
                        "automatic_checkpoint_naming and project_dir)", op);
    if (!path_join(out, cap, acc->project_dir, "checkpoints")) return em__fail(EM_ERR_INVALID, "%s: path too long", op);
    return EM_OK;
}

/* Keeps the total_limit newest checkpoints (called after a successful save). */
static em_status prune_checkpoints(em_accelerator *acc, const char *base)
{
    if (acc->total_limit <= 0) return EM_OK;
    int64_t *nums;
    int n;
    em_status st = list_checkpoints(base, &nums, &n);
    for (int i = 0; st == EM_OK && i + acc->total_limit < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/checkpoint_%" PRId64, base, nums[i]) >= (int)sizeof path) break;
        st = remove_tree(path);
    }
    free(nums);
    return st;
}

/* ---- save ------------------------------------------------------------------------------- */
static em_status write_main_files(em_accelerator *acc, const char *tmp, int64_t next_iteration)
{
    char path[PATH_MAX], name[64];
    em_status st = EM_OK;
    for (int i = 0; i < acc->n_models && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "model", i, "safetensors");
        JOIN(path, tmp, name);
        st = save_module(acc->models[i].m, path);
    }
    for (int i = 0; i < acc->n_opts && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "optimizer", i, "safetensors");
        JOIN(path, tmp, name);
        st = em_optimizer_state_save(acc->opts[i].opt, path);
    }
    for (int i = 0; i < acc->n_scheds && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "scheduler", i, "safetensors");
        JOIN(path, tmp, name);
        st = em_scheduler_state_save(acc->scheds[i], path);
    }
    if (st == EM_OK && acc->scaler) {
        JOIN(path, tmp, "scaler.safetensors");
        st = em_grad_scaler_state_save(acc->scaler, path);
    }
    if (st != EM_OK) return st;

    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "format", STATE_FORMAT) &&
              add_num(root, "world_size", acc->world) && add_num(root, "step", (double)acc->step) &&
              add_num(root, "iteration", (double)next_iteration) &&
              add_num(root, "epoch", acc->n_loaders ? (double)em_dataloader_state(acc->loaders[0].dl).epoch : 0) &&
              add_num(root, "window_pos", acc->window_pos) &&
              add_num(root, "gradient_accumulation_steps", acc->K) &&
              cJSON_AddStringToObject(root, "mixed_precision", mp_name(acc->mp)) &&
              add_num(root, "models", acc->n_models) && add_num(root, "optimizers", acc->n_opts) &&
              add_num(root, "schedulers", acc->n_scheds) && add_num(root, "dataloaders", acc->n_loaders);
    cJSON *steps = ok ? cJSON_AddArrayToObject(root, "optimizer_steps") : NULL;
    for (int i = 0; steps && i < acc->n_opts; i++) {
        cJSON *v = cJSON_CreateNumber((double)acc->opts[i].steps);
        ok &= v && cJSON_AddItemToArray(steps, v);
    }
    if (!ok || !steps) st = em__fail(EM_ERR_OOM, "save_state: out of memory");
    if (st == EM_OK) {
        st = path_join(path, sizeof path, tmp, "accelerator_state.json") ? write_json(path, root)
                                                                          : em__fail(EM_ERR_INVALID, "path too long");
    }
    cJSON_Delete(root);
    return st;
}

static em_status write_rank_file(em_accelerator *acc, const char *tmp)
{
    char path[PATH_MAX], name[64];
    em_rng_state rs = em_rng_get_state();
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "format", RNG_FORMAT) && add_num(root, "rank", acc->rank) &&
              add_u64(root, "rng_seed", rs.seed) && add_u64(root, "rng_offset", rs.offset);
    cJSON *dls = ok ? cJSON_AddArrayToObject(root, "dataloaders") : NULL;
    for (int i = 0; dls && i < acc->n_loaders; i++) {
        em_loader_state s = em_dataloader_state(acc->loaders[i].dl);
        cJSON *o = cJSON_CreateObject();
        ok &= o && cJSON_AddItemToArray(dls, o) && add_num(o, "epoch", (double)s.epoch) &&
              add_num(o, "batch", (double)s.batch);
    }
    em_status st = EM_OK;
    if (!ok || !dls) st = em__fail(EM_ERR_OOM, "save_state: out of memory");
    if (st == EM_OK) {
        snprintf(name, sizeof name, "random_states_%d.json", acc->rank);
        st = path_join(path, sizeof path, tmp, name) ? write_json(path, root)
                                                      : em__fail(EM_ERR_INVALID, "path too long");
    }
    cJSON_Delete(root);
    return st;
}

/* Moves tmp into place as dir (exchanging with an existing dir). */
static em_status publish(const char *tmp, const char *dir)
{
    if (rename(tmp, dir) == 0) return EM_OK;
    if (errno != EEXIST && errno != ENOTEMPTY)
        return em__fail(EM_ERR_IO, "save_state: cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) return remove_tree(tmp);   /* tmp: the old one */
    /* no exchange on this file system: move the old one aside first */
    char old[PATH_MAX];
    if (snprintf(old, sizeof old, "%s.old-ember", dir) >= (int)sizeof old)
        return em__fail(EM_ERR_INVALID, "save_state: path too long: %s", dir);
    em_status st = remove_tree(old);
    if (st != EM_OK) return st;
    if (rename(dir, old) != 0 || rename(tmp, dir) != 0)
        return em__fail(EM_ERR_IO, "save_state: cannot replace %s: %s", dir, strerror(errno));
    return remove_tree(old);
}

em_status em_accelerator_save_state(em_accelerator *acc, const char *dir)
{
    if (!acc) {
        em__misuse("em_accelerator_save_state", "the accelerator is NULL");
        return EM_ERR_INVALID;
    }
    em__acc_flush_scaler(acc);   /* the scale the next step will use */
    char target[PATH_MAX], base[PATH_MAX], tmp[PATH_MAX];
    em_status st = EM_OK;
    if (!dir) {
        st = checkpoints_dir(acc, base, sizeof base, "save_state");
        if (st == EM_OK && snprintf(target, sizeof target, "%s/checkpoint_%" PRId64, base, acc->iteration) >= PATH_MAX)
            st = em__fail(EM_ERR_INVALID, "save_state: path too long");
        /* a number at or above ours exists: an earlier run's checkpoints (pruning
         * would otherwise delete the one just written) */
        int64_t *nums = NULL;
        int n = 0;
        if (st == EM_OK) st = list_checkpoints(base, &nums, &n);
        if (st == EM_OK && n > 0 && nums[n - 1] >= acc->iteration)
            st = em__fail(EM_ERR_INVALID, "save_state: %s already holds checkpoint_%lld, and this run would write "
                          "checkpoint_%lld: call em_accelerator_load_state(acc, NULL) first to continue that run, or "
                          "use another project_dir", base, (long long)nums[n - 1], (long long)acc->iteration);
        free(nums);
    } else if (snprintf(target, sizeof target, "%s", dir) >= PATH_MAX) {
        st = em__fail(EM_ERR_INVALID, "save_state: path too long: %s", dir);
    }
    if (st == EM_OK) {
        size_t n = strlen(target);
        while (n > 1 && target[n - 1] == '/') target[--n] = 0;
        if (snprintf(tmp, sizeof tmp, "%s.tmp-ember", target) >= PATH_MAX)
            st = em__fail(EM_ERR_INVALID, "save_state: path too long: %s", target);
    }
    /* phase 1: the main process makes a clean temporary folder */
    if (st == EM_OK && acc->rank == 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", target);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = 0;
            st = make_dirs(parent);
        }
        if (st == EM_OK) st = remove_tree(tmp);
        if (st == EM_OK && mkdir(tmp, 0777) != 0)
            st = em__fail(EM_ERR_IO, "save_state: cannot create %s: %s", tmp, strerror(errno));
    }
    st = em__acc_agree(acc, st, "save_state (creating the folder)");
    if (st != EM_OK) return st;
    /* phase 2: everyone writes */
    int64_t next_iteration = acc->iteration + 1;
    if (acc->rank == 0) st = write_main_files(acc, tmp, next_iteration);
    if (st == EM_OK) st = write_rank_file(acc, tmp);
    st = em__acc_agree(acc, st, "save_state (writing)");
    /* every file is complete: the main process records their checksums */
    if (st == EM_OK && acc->rank == 0) st = em__acc_manifest_write(acc, tmp);
    st = em__acc_agree(acc, st, "save_state (manifest)");
    /* phase 3: the main process publishes (or cleans up) */
    if (acc->rank == 0) {
        if (st == EM_OK) st = publish(tmp, target);
        else remove_tree(tmp);
    }
    st = em__acc_agree(acc, st, "save_state (renaming into place)");
    if (st != EM_OK) return st;
    acc->iteration = next_iteration;
    if (!dir && acc->rank == 0) st = prune_checkpoints(acc, base);
    return em__acc_agree(acc, st, "save_state (total_limit)");
}

/* ---- load ------------------------------------------------------------------------------- */
static em_status check_count(const cJSON *root, const char *path, const char *key, int have)
{
    int64_t v = 0;
    em_status st = json_i64(root, path, key, &v);
    if (st == EM_OK && v != have)
        st = em__fail(EM_ERR_INVALID, "load_state: %s: the checkpoint has %lld %s; %d were prepared", path,
                      (long long)v, key, have);
    return st;
}

static em_status load_all(em_accelerator *acc, const char *dir)
{
    char path[PATH_MAX], name[64];
    cJSON *root = NULL, *rj = NULL;
    int64_t world = 0, step = 0, iteration = 0, window_pos = 0, epoch = 0;
    uint64_t seed = 0, offset = 0;
    int64_t opt_steps[EM__ACC_MAX] = {0};
    em_loader_state ls[EM__ACC_MAX] = {{0}};

    /* the files' checksums and the run's fingerprint, then the JSON: nothing
     * changes when the checkpoint is damaged or does not fit */
    em_status st = em__acc_manifest_verify(acc, dir);
    if (st != EM_OK) return st;
    JOIN(path, dir, "accelerator_state.json");
    st = read_json(path, &root);
    if (st == EM_OK) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
        if (!cJSON_IsString(f) || strcmp(f->valuestring, STATE_FORMAT) != 0)
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: format is not \"%s\"", path, STATE_FORMAT);
    }
    if (st == EM_OK) st = json_i64(root, path, "world_size", &world);
    if (st == EM_OK && world != acc->world)
        st = em__fail(EM_ERR_INVALID, "load_state: %s was saved by a world of %lld processes; this one has %d (the "
                      "data positions would not fit)", path, (long long)world, acc->world);
    if (st == EM_OK) st = json_i64(root, path, "step", &step);
    if (st == EM_OK) st = json_i64(root, path, "iteration", &iteration);
    if (st == EM_OK) st = json_i64(root, path, "epoch", &epoch);
    if (st == EM_OK) st = json_i64(root, path, "window_pos", &window_pos);
    /* counters a run can really reach (a damaged or edited file may say anything) */
    if (st == EM_OK && (step < 0 || iteration < 0))
        st = em__fail(EM_ERR_INVALID, "load_state: %s: step %lld and iteration %lld must be >= 0", path,
                      (long long)step, (long long)iteration);
    if (st == EM_OK && (window_pos < 0 || (window_pos > acc->K && !acc->ignore_mismatched_config)))   /* 1-based */
        st = em__fail(EM_ERR_INVALID, "load_state: %s: window_pos %lld does not fit gradient_accumulation_steps %d",
                      path, (long long)window_pos, acc->K);
    if (st == EM_OK) st = check_count(root, path, "models", acc->n_models);
    if (st == EM_OK) st = check_count(root, path, "optimizers", acc->n_opts);
    if (st == EM_OK) st = check_count(root, path, "schedulers", acc->n_scheds);
    if (st == EM_OK) st = check_count(root, path, "dataloaders", acc->n_loaders);
    if (st == EM_OK) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "optimizer_steps");
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != acc->n_opts)
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: optimizer_steps is not an array of %d counts", path, acc->n_opts);
        for (int i = 0; st == EM_OK && i < acc->n_opts; i++) {
            const cJSON *v = cJSON_GetArrayItem(a, i);
            if (!cJSON_IsNumber(v) || v->valuedouble < 0)
                st = em__fail(EM_ERR_FORMAT, "load_state: %s: optimizer_steps[%d] is not a count", path, i);
            else if (v->valuedouble > (double)step)   /* at most one optimizer step per micro-step */
                st = em__fail(EM_ERR_INVALID, "load_state: %s: optimizer_steps[%d] is %.0f, more than the %lld "
                              "micro-steps taken", path, i, v->valuedouble, (long long)step);
            else
                opt_steps[i] = (int64_t)v->valuedouble;
        }
    }
    if (st == EM_OK) {
        snprintf(name, sizeof name, "random_states_%d.json", acc->rank);
        st = path_join(path, sizeof path, dir, name) ? read_json(path, &rj)
                                                      : em__fail(EM_ERR_INVALID, "path too long");
    }
    if (st == EM_OK) {   /* each rank's own file: a foreign one would restore another rank's data order */
        int64_t r = -1;
        st = json_i64(rj, path, "rank", &r);
        if (st == EM_OK && r != acc->rank)
            st = em__fail(EM_ERR_INVALID, "load_state: %s says rank %lld; it is rank %d's file", path, (long long)r,
                          acc->rank);
    }
    if (st == EM_OK) st = json_u64(rj, path, "rng_seed", &seed);
    if (st == EM_OK) st = json_u64(rj, path, "rng_offset", &offset);
    if (st == EM_OK) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(rj, "dataloaders");
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != acc->n_loaders)
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: dataloaders is not an array of %d positions", path,
                          acc->n_loaders);
        for (int i = 0; st == EM_OK && i < acc->n_loaders; i++) {
            const cJSON *o = cJSON_GetArrayItem(a, i);
            st = json_i64(o, path, "epoch", &ls[i].epoch);
            if (st == EM_OK) st = json_i64(o, path, "batch", &ls[i].batch);
            if (st == EM_OK && (ls[i].epoch < 0 || ls[i].epoch >= (1 << 23) || ls[i].batch < 0))
                st = em__fail(EM_ERR_INVALID, "load_state: %s: dataloader %d stood at epoch %lld, batch %lld: not a "
                              "position a run reaches (epochs are below 2^23)", path, i, (long long)ls[i].epoch,
                              (long long)ls[i].batch);
            if (st == EM_OK && ls[i].batch > em_dataloader_len(acc->loaders[i].dl))
                st = em__fail(EM_ERR_INVALID, "load_state: %s: dataloader %d stood at batch %lld, beyond its %lld "
                              "batches per epoch", path, i, (long long)ls[i].batch,
                              (long long)em_dataloader_len(acc->loaders[i].dl));
        }
    }
    cJSON_Delete(root);
    cJSON_Delete(rj);
    if (st != EM_OK) return st;

    /* then the objects, each checked by its own loader before it changes; the
     * models' weights, checked first, are copied in last, once all else loaded */
    module_load *ml = em__calloc((size_t)(acc->n_models ? acc->n_models : 1), sizeof *ml);
    if (!ml) return EM_ERR_OOM;
    for (int i = 0; i < acc->n_models && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "model", i, "safetensors");
        if (!path_join(path, sizeof path, dir, name)) st = em__fail(EM_ERR_INVALID, "path too long");
        else st = load_module_check(acc->models[i].m, path, &ml[i]);
    }
    for (int i = 0; i < acc->n_opts && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "optimizer", i, "safetensors");
        st = path_join(path, sizeof path, dir, name) ? em_optimizer_state_load(acc->opts[i].opt, path)
                                                      : em__fail(EM_ERR_INVALID, "path too long");
    }
    for (int i = 0; i < acc->n_scheds && st == EM_OK; i++) {
        em__acc_indexed_name(name, sizeof name, "scheduler", i, "safetensors");
        st = path_join(path, sizeof path, dir, name) ? em_scheduler_state_load(acc->scheds[i], path)
                                                      : em__fail(EM_ERR_INVALID, "path too long");
    }
    if (st == EM_OK && acc->scaler) {
        st = path_join(path, sizeof path, dir, "scaler.safetensors") ? em_grad_scaler_state_load(acc->scaler, path)
                                                                     : em__fail(EM_ERR_INVALID, "path too long");
    }
    for (int i = 0; i < acc->n_loaders && st == EM_OK; i++) st = em_dataloader_load_state(acc->loaders[i].dl, ls[i]);
    for (int i = 0; i < acc->n_models; i++) {
        if (st == EM_OK) load_module_apply(&ml[i]);
        module_load_free(&ml[i]);
    }
    em__free(ml);
    if (st != EM_OK) return st;

    em_rng_set_state((em_rng_state){ .seed = seed, .offset = offset });
    acc->step = step;
    acc->iteration = iteration;
    acc->window_pos = (int)(window_pos % acc->K);
    acc->window_len = acc->K;
    acc->sync = true;
    acc->scaler_pending = false;
    for (int i = 0; i < acc->n_opts; i++) {
        em__acc_opt *o = &acc->opts[i];
        o->steps = opt_steps[i];
        o->skipped = o->unscaled = o->stepped = false;
    }
    em__acc_snapshot_loaders(acc);
    (void)epoch;   /* informative: the loaders carry their own epochs */
    return EM_OK;
}

em_status em_accelerator_load_state(em_accelerator *acc, const char *dir)
{
    if (!acc) {
        em__misuse("em_accelerator_load_state", "the accelerator is NULL");
        return EM_ERR_INVALID;
    }
    char target[PATH_MAX], base[PATH_MAX];
    em_status st = EM_OK;
    int64_t *nums = NULL;
    int n = 0;
    if (acc->auto_naming && acc->project_dir) {
        st = checkpoints_dir(acc, base, sizeof base, "load_state");
        if (st == EM_OK) st = list_checkpoints(base, &nums, &n);
    }
    if (st == EM_OK && !dir) {
        st = checkpoints_dir(acc, base, sizeof base, "load_state");
        if (st == EM_OK && n == 0)
            st = em__fail(EM_ERR_NOT_FOUND, "load_state: no checkpoint_<n> folder in %s", base);
        if (st == EM_OK && snprintf(target, sizeof target, "%s/checkpoint_%" PRId64, base, nums[n - 1]) >= PATH_MAX)
            st = em__fail(EM_ERR_INVALID, "load_state: path too long: %s", base);
    } else if (st == EM_OK && snprintf(target, sizeof target, "%s", dir) >= PATH_MAX) {
        st = em__fail(EM_ERR_INVALID, "load_state: path too long: %s", dir);
    }
    if (st == EM_OK) st = load_all(acc, target);
    /* never reuse a number: after loading an older checkpoint, continue after the newest */
    if (st == EM_OK && n > 0 && acc->iteration <= nums[n - 1]) acc->iteration = nums[n - 1] + 1;
    free(nums);
    return em__acc_agree(acc, st, "load_state");
}
