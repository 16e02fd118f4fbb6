/* ember — Hugging Face checkpoint folders: from_pretrained (config.json +
 * model.safetensors or a sharded index, strict or not, with a report of
 * missing and unexpected keys) and save_pretrained (atomic files that
 * transformers loads). JSON goes through cJSON (Debian libcjson). */
#include "nn/nn_internal.h"
#include "tensor/support.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* cJSON allocates through em__malloc, as in tensor/safetensors.c and
 * data/table.c, so the fail-the-Nth-allocation switch reaches the parser. */
static void json_hooks(void) { cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = em__malloc, .free_fn = em__free}); }
static pthread_once_t json_once = PTHREAD_ONCE_INIT;



static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = em__malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Label names from id2label in id order, or NULL (absent, or not 0..n-1). */
static char **labels_from_json(const cJSON *j, int n)
{
    const cJSON *id2 = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    if (!cJSON_IsObject(id2) || cJSON_GetArraySize(id2) != n) return NULL;
    char **names = em__calloc((size_t)n, sizeof *names);
    if (!names) return NULL;
    const cJSON *it;
    bool ok = true;
    cJSON_ArrayForEach(it, id2) {
        char *end;
        long id = strtol(it->string, &end, 10);
        if (*end || id < 0 || id >= n || names[id] || !cJSON_IsString(it) || !(names[id] = em__strdup(it->valuestring)))
            ok = false;
    }
    if (!ok) {
        for (int i = 0; i < n; i++) em__free(names[i]);
        em__free(names);
        return NULL;
    }
    return names;
}

/* ---- reading files ------------------------------------------------------------------------- */


/* Parses path as a JSON object; malformed JSON names the line and column. */
static em_status read_json(const char *path, cJSON **out)
{
    char *buf;
    size_t len = 0;
    *out = NULL;
    em_status s = em__read_file(path, (size_t)64 << 20, &buf, &len);
    if (s) return s;
    const char *end = NULL;
    pthread_once(&json_once, json_hooks);
    em_clear_error();
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (!j && em_last_status() == EM_ERR_OOM) {
        s = em__fail(EM_ERR_OOM, "%s: out of memory parsing the JSON", path);
    } else if (!j) {
        size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : len;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (buf[i] == '\n') line++, col = 1;
            else col++;
        }
        s = em__fail(EM_ERR_FORMAT, "%s: malformed JSON at line %d, column %d (byte %zu, where the parser stopped)", path, line, col, off);
    } else if (!cJSON_IsObject(j)) {
        s = em__fail(EM_ERR_FORMAT, "%s: expected a JSON object at the top level", path);
        cJSON_Delete(j);
        j = NULL;
    } else {
        /* cJSON stops at the end of the first value: anything but whitespace after it is an error */
        const char *p = end ? end : buf + len;
        while (p < buf + len && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
        if (p < buf + len) {
            size_t off = (size_t)(p - buf);
            int line = 1, col = 1;
            for (size_t i = 0; i < off; i++) {
                if (buf[i] == '\n') line++, col = 1;
                else col++;
            }
            s = em__fail(EM_ERR_FORMAT, "%s: malformed JSON at line %d, column %d (byte %zu): data after the object",
                         path, line, col, off);
            cJSON_Delete(j);
            j = NULL;
        }
    }
    em__free(buf);
    *out = j;
    return s;
}

/* "\"distilbert\" or \"bert\"": the registered model types, for messages. */
static const char *known_types(const em__families *f)
{
    static _Thread_local char buf[256];
    size_t n = 0;
    for (int i = 0; i < f->n && n < sizeof buf; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"%s\"", i == 0 ? "" : i == f->n - 1 ? " or " : ", ",
                              f->archs[i]->model_type);
    return buf;
}

/* The family config.json names (model_type, else an architectures hint). */
static em_status find_arch(const em__families *f, const cJSON *j, const char *path, const em__arch **out)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && !cJSON_IsString(mt)) return em__fail(EM_ERR_FORMAT, "%s: field \"model_type\" must be a string", path);
    if (mt) {
        for (int i = 0; i < f->n; i++)
            if (!strcmp(mt->valuestring, f->archs[i]->model_type)) return *out = f->archs[i], EM_OK;
        return em__fail(EM_ERR_UNSUPPORTED, "%s: unknown model_type \"%s\" (ember knows %s)", path, mt->valuestring,
                        known_types(f));
    }
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *a;
    cJSON_ArrayForEach(a, ar) {
        if (!cJSON_IsString(a)) continue;
        for (int i = 0; i < f->n; i++)
            if (!strncmp(a->valuestring, f->archs[i]->class_prefix, strlen(f->archs[i]->class_prefix)))
                return *out = f->archs[i], EM_OK;
    }
    return em__fail(EM_ERR_FORMAT, "%s: no \"model_type\" field (expected %s)", path, known_types(f));
}

/* ---- the tensors of a checkpoint ------------------------------------------------------------- */

typedef struct ckpt {
    int n_files;
    em_safetensors **files;
    char **file_names;   /* for messages */
    int n;               /* tensors */
    char **names;        /* owned */
    int *file_of;
} ckpt;

static void ckpt_free(ckpt *c)
{
    for (int i = 0; i < c->n_files; i++) {
        em_safetensors_close(c->files[i]);
        em__free(c->file_names[i]);
    }
    for (int i = 0; i < c->n; i++) em__free(c->names[i]);
    em__free(c->files);
    em__free(c->file_names);
    em__free(c->names);
    em__free(c->file_of);
    *c = (ckpt){0};
}

static em_status ckpt_add_file(ckpt *c, const char *dir, const char *name, int *index)
{
    for (int i = 0; i < c->n_files; i++)
        if (!strcmp(c->file_names[i], name)) return *index = i, EM_OK;
    char *path = path_join(dir, name);
    em_safetensors **f = em__realloc(c->files, sizeof *f * (size_t)(c->n_files + 1));
    if (f) c->files = f;
    char **fn = em__realloc(c->file_names, sizeof *fn * (size_t)(c->n_files + 1));
    if (fn) c->file_names = fn;
    char *dup = em__strdup(name);
    if (!path || !f || !fn || !dup) {
        em__free(path);
        em__free(dup);
        return em__fail(EM_ERR_OOM, "%s: out of memory opening the checkpoint", dir);
    }
    em_status s = em_safetensors_open(path, &c->files[c->n_files]);
    em__free(path);
    if (s) {
        em__free(dup);
        return s;
    }
    c->file_names[c->n_files] = dup;
    *index = c->n_files++;
    return EM_OK;
}

static em_status ckpt_add_tensor(ckpt *c, const char *name, int file)
{
    char **nm = em__realloc(c->names, sizeof *nm * (size_t)(c->n + 1));
    if (nm) c->names = nm;
    int *fo = em__realloc(c->file_of, sizeof *fo * (size_t)(c->n + 1));
    if (fo) c->file_of = fo;
    char *dup = nm && fo ? em__strdup(name) : NULL;
    if (!dup) return em__fail(EM_ERR_OOM, "out of memory listing the checkpoint");
    c->names[c->n] = dup;
    c->file_of[c->n++] = file;
    return EM_OK;
}

static bool file_has(const em_safetensors *f, const char *name)
{
    for (int i = 0; i < em_safetensors_count(f); i++)
        if (!strcmp(em_safetensors_name(f, i), name)) return true;
    return false;
}

/* model.safetensors, else model.safetensors.index.json and its shards. */
static em_status ckpt_open(const char *dir, ckpt *c)
{
    *c = (ckpt){0};
    char *single = path_join(dir, "model.safetensors"), *index = path_join(dir, "model.safetensors.index.json");
    em_status s = single && index ? EM_OK : em__fail(EM_ERR_OOM, "out of memory");
    struct stat sb;
    if (!s && stat(single, &sb) == 0) {
        int f;
        s = ckpt_add_file(c, dir, "model.safetensors", &f);
        for (int i = 0; !s && i < em_safetensors_count(c->files[0]); i++)
            s = ckpt_add_tensor(c, em_safetensors_name(c->files[0], i), 0);
    } else if (!s && stat(index, &sb) == 0) {
        cJSON *j;
        s = read_json(index, &j);
        const cJSON *wm = s ? NULL : cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *it;
        if (!s && !cJSON_IsObject(wm))
            s = em__fail(EM_ERR_FORMAT, "%s: no \"weight_map\" object", index);
        if (!s) cJSON_ArrayForEach(it, wm) {
            if (s) break;
            if (!cJSON_IsString(it) || !*it->valuestring || it->valuestring[0] == '/' || strstr(it->valuestring, "..")) {
                s = em__fail(EM_ERR_FORMAT, "%s: weight_map entry \"%s\" must name a shard file in the folder", index,
                             it->string);
                break;
            }
            int f;
            s = ckpt_add_file(c, dir, it->valuestring, &f);
            if (!s && !file_has(c->files[f], it->string))
                s = em__fail(EM_ERR_FORMAT, "%s: weight_map says \"%s\" is in %s, which does not hold it", index,
                             it->string, it->valuestring);
            if (!s) s = ckpt_add_tensor(c, it->string, f);
        }
        cJSON_Delete(j);
    } else if (!s) {
        char *bin = path_join(dir, "pytorch_model.bin");
        bool has_bin = bin && stat(bin, &sb) == 0;
        em__free(bin);
        s = has_bin ? em__fail(EM_ERR_UNSUPPORTED, "%s: only pytorch_model.bin is there; ember reads safetensors "
                               "(convert it with transformers: model.save_pretrained(dir, safe_serialization=True))", dir)
                    : em__fail(EM_ERR_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    em__free(single);
    em__free(index);
    if (s) ckpt_free(c);
    return s;
}

/* ---- the report ------------------------------------------------------------------------------ */

static void list_free(char **l, int n)
{
    for (int i = 0; i < n; i++) em__free(l[i]);
    em__free(l);
}

void em_load_report_free(em_load_report *r)
{
    if (!r) return;
    em__free(r->model_class);
    list_free(r->missing, r->n_missing);
    list_free(r->unexpected, r->n_unexpected);
    list_free(r->mismatched, r->n_mismatched);
    *r = (em_load_report){0};
}

static bool list_push(char ***l, int *n, const char *s)
{
    char **nl = em__realloc(*l, sizeof *nl * (size_t)(*n + 1));
    if (!nl) return false;
    *l = nl;
    if (!(nl[*n] = em__strdup(s))) return false;
    (*n)++;
    return true;
}

static void print_list(FILE *f, const char *title, char **l, int n)
{
    if (!n) return;
    fprintf(f, "%s (%d):", title, n);
    for (int i = 0; i < n; i++) fprintf(f, "%s %s", i ? "," : "", l[i]);
    fputc('\n', f);
}

void em_load_report_print(const em_load_report *r, FILE *f)
{
    if (!r->n_missing && !r->n_unexpected && !r->n_mismatched) return;
    fprintf(f, "Loaded %d tensors into %s.\n", r->n_loaded, r->model_class ? r->model_class : "the model");
    print_list(f, "Newly initialized, not in the checkpoint (train before use)", r->missing, r->n_missing);
    print_list(f, "Not used, in the checkpoint but not in the model", r->unexpected, r->n_unexpected);
    print_list(f, "Newly initialized, shape differs from the checkpoint", r->mismatched, r->n_mismatched);
}

/* ---- loading ------------------------------------------------------------------------------------ */

const em__arch *em__arch_of(const em_module *m, em__head *head)
{
    if (head) *head = (em__head)m->family_head;
    return m->family;
}

/* The model's name for a checkpoint key, in buf: old "gamma"/"beta"
 * LayerNorm names renamed, the base-model prefix added or dropped. */
static const char *map_key(const char *key, const char *prefix, int prefix_mode, char *buf, size_t cap)
{
    size_t n = strlen(key), pl = strlen(prefix);
    if (n + pl + 8 >= cap) return NULL;
    if (prefix_mode > 0) snprintf(buf, cap, "%s.%s", prefix, key);                     /* add */
    else if (prefix_mode < 0 && !strncmp(key, prefix, pl) && key[pl] == '.') snprintf(buf, cap, "%s", key + pl + 1);
    else snprintf(buf, cap, "%s", key);
    size_t bl = strlen(buf);
    if (bl > 6 && !strcmp(buf + bl - 6, ".gamma")) strcpy(buf + bl - 6, ".weight");
    else if (bl > 5 && !strcmp(buf + bl - 5, ".beta")) strcpy(buf + bl - 5, ".bias");
    return buf;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Copies the checkpoint's tensors into m's parameters and persistent buffers. */
static em_status load_state(em_module *m, const em__arch *arch, em__head head, const ckpt *c, const char *dir,
                            const em_pretrained_opts *o, em_load_report *r)
{
    em_named_tensors ps = em_module_named_parameters(m), bs = em_module_named_buffers(m, false);
    int n_model = ps.n + bs.n;
    bool *loaded = em__calloc((size_t)(n_model ? n_model : 1), 1);
    const char **filled_by = em__calloc((size_t)(n_model ? n_model : 1), sizeof *filled_by);   /* the key that filled each */
    em_status s = loaded && filled_by ? EM_OK : em__fail(EM_ERR_OOM, "out of memory loading %s", dir);
    /* does the checkpoint carry the base-model prefix ("distilbert.")? */
    size_t pl = strlen(arch->prefix);
    bool ck_prefixed = false;
    for (int i = 0; i < c->n; i++)
        if (!strncmp(c->names[i], arch->prefix, pl) && c->names[i][pl] == '.') ck_prefixed = true;
    int prefix_mode = head == EM__HEAD_SEQCLS ? (ck_prefixed ? 0 : 1) : (ck_prefixed ? -1 : 0);
    char buf[1024];
    for (int i = 0; !s && i < c->n; i++) {
        const char *key = c->names[i];
        if (ends_with(key, "position_ids")) continue;   /* an old persistent buffer; HF ignores it too */
        /* a head's key seen from the base model keeps its name and is simply unexpected */
        const char *name = map_key(key, arch->prefix, prefix_mode, buf, sizeof buf);
        em_tensor *dst = NULL;
        int at = -1;
        for (int k = 0; name && k < n_model && !dst; k++) {
            em_named_tensor *nt = k < ps.n ? &ps.items[k] : &bs.items[k - ps.n];
            if (!strcmp(nt->name, name)) dst = nt->tensor, at = k;
        }
        if (!dst) {
            if (r && !list_push(&r->unexpected, &r->n_unexpected, key)) s = em__fail(EM_ERR_OOM, "out of memory");
            continue;
        }
        if (filled_by[at]) {   /* two names for one tensor (LayerNorm's gamma and weight, a key listed twice) */
            s = em__fail(EM_ERR_FORMAT, "%s: the checkpoint fills \"%s\" twice, from \"%s\" and from \"%s\"", dir,
                         name, filled_by[at], key);
            break;
        }
        filled_by[at] = key;
        em_scope_begin();
        em_tensor *src = em_safetensors_get(c->files[c->file_of[i]], key);
        if (!src) {
            s = em_last_status() ? em_last_status() : EM_ERR_IO;
        } else if (!em_dtype_is_float(src->dtype) && em_dtype_is_float(dst->dtype)) {
            s = em__fail(EM_ERR_FORMAT, "%s/%s: tensor \"%s\" has dtype %s; the model expects floating point", dir,
                         c->file_names[c->file_of[i]], key, em_dtype_name(src->dtype));
        } else if (src->ndim != dst->ndim || memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim)) {
            char a[160], b[160];
            snprintf(a, sizeof a, "%s", em__shape_str(src));
            snprintf(b, sizeof b, "%s", em__shape_str(dst));
            if (o->ignore_mismatched_sizes) {
                char line[1400];
                snprintf(line, sizeof line, "%s: checkpoint %s vs model %s", name, a, b);
                if (r && !list_push(&r->mismatched, &r->n_mismatched, line)) s = em__fail(EM_ERR_OOM, "out of memory");
            } else {
                s = em__fail(EM_ERR_INVALID, "%s/%s: tensor \"%s\" has shape %s but the model expects %s for \"%s\"%s",
                             dir, c->file_names[c->file_of[i]], key, a, b, name,
                             (ends_with(name, "classifier.weight") || ends_with(name, "classifier.bias")) &&
                                     !memcmp(src->shape + 1, dst->shape + 1, sizeof(int64_t) * (size_t)(dst->ndim - 1))
                                 ? " (another num_labels? set ignore_mismatched_sizes to re-initialize the head)"
                                 : "");
            }
        } else {
            EM_NO_GRAD { em_copy_(dst, src); }
            loaded[at] = true;
            if (r) r->n_loaded++;
        }
        em_scope_end();
    }
    for (int k = 0; !s && k < n_model; k++)
        if (!loaded[k] && r && !list_push(&r->missing, &r->n_missing, k < ps.n ? ps.items[k].name : bs.items[k - ps.n].name))
            s = em__fail(EM_ERR_OOM, "out of memory");
    /* HF's _init_weights on the parameters the checkpoint did not fill (a new head, a
     * re-sized one), in registration order; the rest were never initialized at all */
    if (!s) {
        em_tensor **missing = em__malloc(sizeof *missing * (size_t)(ps.n ? ps.n : 1));
        int n_missing = 0;
        for (int k = 0; missing && k < ps.n; k++)
            if (!loaded[k]) missing[n_missing++] = ps.items[k].tensor;
        if (!missing) s = em__fail(EM_ERR_OOM, "out of memory");
        else em__hf_init_only(m, arch->init_std(arch->config_of(m)), missing, n_missing);
        em__free(missing);
    }
    if (!s && o->strict) {
        int n_missing = 0, n_unexpected = 0;
        const char *first_missing = NULL, *first_unexpected = NULL;
        for (int k = 0; k < n_model; k++)
            if (!loaded[k] && !n_missing++) first_missing = k < ps.n ? ps.items[k].name : bs.items[k - ps.n].name;
        for (int i = 0; i < c->n; i++) {
            const char *name = map_key(c->names[i], arch->prefix, prefix_mode, buf, sizeof buf);
            bool found = ends_with(c->names[i], "position_ids");
            for (int k = 0; name && k < n_model && !found; k++)
                found = !strcmp(k < ps.n ? ps.items[k].name : bs.items[k - ps.n].name, name);
            if (!found && !n_unexpected++) first_unexpected = c->names[i];
        }
        if (n_missing || n_unexpected)
            s = em__fail(EM_ERR_INVALID, "%s: strict loading into %s failed: %d missing keys%s%s%s, %d unexpected keys%s%s%s",
                         dir, arch->class_name[head], n_missing, first_missing ? " (first: " : "",
                         first_missing ? first_missing : "", first_missing ? ")" : "", n_unexpected,
                         first_unexpected ? " (first: " : "", first_unexpected ? first_unexpected : "",
                         first_unexpected ? ")" : "");
    }
    em__free(loaded);
    em__free(filled_by);
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    return s;
}

/* The family of a sequence classifier (and its label state in *v), or NULL. */
static const em__arch *seqcls_arch(const em_module *m, em__seqcls_view *v)
{
    em__head head;
    const em__arch *a = m ? em__arch_of(m, &head) : NULL;
    if (!a || head != EM__HEAD_SEQCLS) return NULL;
    if (v) a->seqcls_view((em_module *)m, v);
    return a;
}

static char ***labels_slot(em_module *m, int **n)
{
    em__seqcls_view v;
    if (!seqcls_arch(m, &v)) return NULL;
    *n = v.num_labels;
    return v.id2label;
}

/* The model a config describes must fit before anything is allocated: its
 * f32 parameter bytes (counted in double, so no size can wrap) against the
 * machine's memory, or EMBER_MAX_MODEL_BYTES when set. A config with
 * vocab_size 2^40 or a million layers is refused naming the file and the
 * fields, instead of crashing or allocating for minutes. */
static em_status check_model_size(const em__arch *arch, const void *cfg, int num_labels, const char *path)
{
    em__arch_size z;
    arch->size(cfg, num_labels, &z);
    double emb = z.emb, layer = z.layer, L = z.layers, head = z.head;
    double params = emb + L * layer + head, bytes = 4 * params;
    double limit = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    const char *limit_name = "the memory of this machine";
    const char *e = getenv("EMBER_MAX_MODEL_BYTES");
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end || !(v > 0)) return em__fail(EM_ERR_INVALID, "EMBER_MAX_MODEL_BYTES='%s' is not a positive number", e);
        limit = v, limit_name = "EMBER_MAX_MODEL_BYTES";
    }
    if (bytes <= limit) return EM_OK;
    char part[160];
    if (emb >= L * layer) snprintf(part, sizeof part, z.emb_fields, z.vocab, z.hidden);
    else snprintf(part, sizeof part, z.layer_fields, L, layer, z.hidden, z.intermediate);
    return em__fail(EM_ERR_INVALID,
                    "%s: the model this config describes has %.3g parameters (%.3g GB in f32), more than %s (%.3g GB); "
                    "the largest part: %s. Check those fields (or set EMBER_MAX_MODEL_BYTES)",
                    path, params, bytes / 1e9, limit_name, limit / 1e9, part);
}

/* The shared loader (nn_internal.h). */
em_status em__from_pretrained(const em__families *families, const char *dir, const em_pretrained_opts *opts,
                              const em__arch *want_arch,
                                 em__head head, em_module **out, em_load_report *report)
{
    em_pretrained_opts o = opts ? *opts : (em_pretrained_opts){0};
    *out = NULL;
    if (report) *report = (em_load_report){0};
    if (!dir) {
        em__misuse("em_*_from_pretrained", "dir is NULL");
        return EM_ERR_INVALID;
    }
    if (o.num_labels < 0) {
        em__misuse("em_*_from_pretrained", "num_labels must be >= 0 (0: from config.json), got %d", o.num_labels);
        return EM_ERR_INVALID;
    }
    char *cfg_path = path_join(dir, "config.json");
    if (!cfg_path) return em__fail(EM_ERR_OOM, "out of memory");
    cJSON *j = NULL;
    const em__arch *arch = NULL;
    void *cfg = NULL;
    em_module *m = NULL;
    ckpt c = {0};
    em_load_report r = {0};
    em_status s = read_json(cfg_path, &j);
    if (!s) s = find_arch(families, j, cfg_path, &arch);
    if (!s && want_arch && arch != want_arch)
        s = em__fail(EM_ERR_INVALID, "%s: model_type is \"%s\", not \"%s\" (em_seqcls_from_pretrained loads either)",
                     cfg_path, arch->model_type, want_arch->model_type);
    if (!s && !(cfg = em__calloc(1, arch->config_size))) s = em__fail(EM_ERR_OOM, "out of memory");
    if (!s) s = arch->parse(j, cfg_path, cfg);
    int cfg_labels = 0;
    if (!s) {   /* num_labels: the family says where its config keeps it */
        int *nl = arch->config_labels(cfg);
        cfg_labels = *nl;
        if (o.num_labels) *nl = o.num_labels;
    }
    if (!s) s = check_model_size(arch, cfg, o.num_labels ? o.num_labels : cfg_labels, cfg_path);
    if (!s) s = ckpt_open(dir, &c);
    /* built uninitialized: the checkpoint fills it, then only what it lacked is initialized */
    if (!s && !(m = em__arch_build(arch, cfg, head, false))) s = em_last_status() ? em_last_status() : EM_ERR_OOM;
    if (!s && report && !(r.model_class = em__strdup(arch->class_name[head]))) s = em__fail(EM_ERR_OOM, "out of memory");
    if (!s) s = load_state(m, arch, head, &c, dir, &o, report ? &r : NULL);
    if (!s && head == EM__HEAD_SEQCLS && (!o.num_labels || o.num_labels == cfg_labels)) {
        int *n;
        char ***slot = labels_slot(m, &n);
        if (slot) *slot = labels_from_json(j, *n);
    }
    if (!s && em_module_flatten(m) != EM_OK) s = em__fail(EM_ERR_OOM, "out of memory flattening the parameters");
    cJSON_Delete(j);
    em__free(cfg);
    em__free(cfg_path);
    ckpt_free(&c);
    if (s) {
        em_module_free(m);
        em_load_report_free(&r);
        return s;
    }
    em_module_train(m, false);   /* eval mode, as transformers' from_pretrained returns it */
    if (report) *report = r;
    *out = m;
    return EM_OK;
}

/* ---- sequence classifiers, either family ------------------------------------------------------------ */

em_seqcls_output em_seqcls_forward(em_module *m, const em_seqcls_inputs *in)
{
    const em__arch *a = seqcls_arch(m, NULL);
    if (!a) {
        em__misuse("em_seqcls_forward", "module of type %s is not a sequence classifier", m ? m->type : "NULL");
        return (em_seqcls_output){0};
    }
    return a->seqcls_forward(m, in);
}

int em_seqcls_num_labels(const em_module *m)
{
    int *n = NULL;
    return labels_slot((em_module *)m, &n) ? *n : 0;
}

em_seqcls_info em_seqcls_get_info(const em_module *m)
{
    em__seqcls_view v;
    const em__arch *a = seqcls_arch(m, &v);
    if (!a) return (em_seqcls_info){0};
    int64_t reserved = a->positions_reserved ? a->positions_reserved(a->config_of(m)) : 0;
    return (em_seqcls_info){.vocab_size = v.vocab_size, .max_position_embeddings = v.max_position_embeddings,
                            .max_length = v.max_position_embeddings - reserved, .num_labels = *v.num_labels,
                            .id2label = (const char *const *)*v.id2label};
}

bool em_seqcls_is_head_param(const char *name)
{
    static const char *const heads[] = {"classifier.", "pre_classifier.", "bert.pooler.", "pooler."};
    for (size_t i = 0; name && i < sizeof heads / sizeof *heads; i++)
        if (!strncmp(name, heads[i], strlen(heads[i]))) return true;
    return false;
}

void em_seqcls_set_labels(em_module *m, int n, const char *const *names)
{
    int *nl = NULL;
    char ***slot = labels_slot(m, &nl);
    if (!slot || n != *nl || !names) {
        em__misuse("em_seqcls_set_labels", "expected a sequence classifier and %d names, got %s and %d names",
                   nl ? *nl : 0, m->type, n);
        return;
    }
    char **l = em__calloc((size_t)n, sizeof *l);
    bool ok = l != NULL;
    for (int i = 0; ok && i < n; i++) ok = names[i] && (l[i] = em__strdup(names[i]));
    if (!ok) {   /* OOM: keep the old names */
        if (l) list_free(l, n);
        return;
    }
    if (*slot) list_free(*slot, n);
    *slot = l;
}

/* ---- saving ---------------------------------------------------------------------------------------- */

static int cmp_items(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* json.dumps(sort_keys=True), as transformers writes config.json. */
static bool sort_object(cJSON *obj)
{
    int n = cJSON_GetArraySize(obj);
    if (n < 2) return true;
    cJSON **items = em__malloc(sizeof *items * (size_t)n);
    if (!items) return false;
    int i = 0;
    for (cJSON *it = obj->child; it; it = it->next) items[i++] = it;
    qsort(items, (size_t)n, sizeof *items, cmp_items);
    for (i = 0; i < n; i++) {
        items[i]->prev = i ? items[i - 1] : items[n - 1];   /* cJSON: child->prev is the last item */
        items[i]->next = i + 1 < n ? items[i + 1] : NULL;
    }
    obj->child = items[0];
    em__free(items);
    return true;
}

static cJSON *config_json(const em_module *m, const em__arch *a, em__head head)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *arr = cJSON_AddArrayToObject(j, "architectures");
    bool ok = arr && cJSON_AddItemToArray(arr, cJSON_CreateString(a->class_name[head])) &&
              cJSON_AddStringToObject(j, "model_type", a->model_type) && cJSON_AddStringToObject(j, "dtype", "float32") &&
              a->write(j, m);
    em__seqcls_view v;
    char ***slot = ok && seqcls_arch(m, &v) ? v.id2label : NULL;
    int *n = slot ? v.num_labels : NULL;
    if (slot) {
        cJSON *id2 = cJSON_AddObjectToObject(j, "id2label"), *l2 = cJSON_AddObjectToObject(j, "label2id");
        ok = id2 && l2;
        for (int i = 0; ok && i < *n; i++) {
            char key[24], def[32];
            snprintf(key, sizeof key, "%d", i);
            snprintf(def, sizeof def, "LABEL_%d", i);
            const char *name = *slot ? (*slot)[i] : def;
            ok = cJSON_AddStringToObject(id2, key, name) &&
                 (cJSON_GetObjectItemCaseSensitive(l2, name) || cJSON_AddNumberToObject(l2, name, i));
        }
        ok = ok && sort_object(l2);
        const em_problem_type pt = *v.problem_type;
        if (ok && pt != EM_PROBLEM_AUTO) ok = cJSON_AddStringToObject(j, "problem_type", em__problem_names[pt]) != NULL;
    }
    if (ok) ok = sort_object(j);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* Writes text to path through a temporary file, fsync and rename. */
static em_status write_atomic(const char *path, const char *text)
{
    size_t n = strlen(path) + 32;
    char *tmp = em__malloc(n);
    if (!tmp) return em__fail(EM_ERR_OOM, "out of memory");
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    em_status s = EM_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        s = em__fail(EM_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        size_t len = strlen(text), off = 0;
        while (off < len) {
            ssize_t w = write(fd, text + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                s = em__fail(EM_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
                break;
            }
            off += (size_t)w;
        }
        if (!s && fsync(fd) != 0) s = em__fail(EM_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
        if (close(fd) != 0 && !s) s = em__fail(EM_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        if (!s && rename(tmp, path) != 0) s = em__fail(EM_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
        if (s) unlink(tmp);
    }
    em__free(tmp);
    return s;
}

/* cJSON_Print indents with tabs; transformers uses two spaces (tabs never
 * appear inside printed strings: cJSON escapes them). */
static char *two_space_indent(const char *src)
{
    size_t n = 0;
    for (const char *p = src; *p; p++) n += *p == '\t' ? 2 : 1;
    char *out = em__malloc(n + 2);
    if (!out) return NULL;
    char *o = out;
    for (const char *p = src; *p; p++) {
        if (*p == '\t' && p > src && p[-1] == ':') *o++ = ' ';
        else if (*p == '\t') *o++ = ' ', *o++ = ' ';
        else *o++ = *p;
    }
    *o++ = '\n';
    *o = 0;
    return out;
}

static int proc_rank = 0, proc_world = 1;
void em__nn_set_process(int rank, int world) { proc_rank = rank, proc_world = world; }

char *em__model_config_string(const em_module *m)
{
    em__head head;
    const em__arch *a = m ? em__arch_of(m, &head) : NULL;
    cJSON *j = a ? config_json(m, a, head) : NULL;
    /* problem_type is set by the first loss (as in transformers): state, not configuration */
    if (j) cJSON_DeleteItemFromObjectCaseSensitive(j, "problem_type");
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

em_status em_save_pretrained(const em_module *m, const char *dir)
{
    /* Every rank writing the same checkpoint does world times the I/O and
     * races on the final renames (each file still lands whole, from one
     * rank). It still writes: a rank may mean to save to its own folder. */
    static bool warned_rank;
    if (proc_world > 1 && proc_rank != 0)
        em__warn_once(&warned_rank, "em_save_pretrained",
                      "called on rank %d of %d: every rank is writing the checkpoint; save from the main process "
                      "only: em_accelerator_save_model(acc, model, dir), or guard the call with "
                      "if (em_accelerator_is_main_process(acc))", proc_rank, proc_world);
    em__head head;
    const em__arch *a = m && dir ? em__arch_of(m, &head) : NULL;
    if (!a) {
        em__misuse("em_save_pretrained", "expected a model of a registered family built by ember and a folder, got %s",
                   m ? m->type : "NULL");
        return EM_ERR_INVALID;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return em__fail(EM_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(errno));
    em_status s = EM_OK;
    /* the tensors: parameters, then persistent buffers, on the CPU */
    em_named_tensors ps = em_module_named_parameters(m), bs = em_module_named_buffers(m, false);
    int n = ps.n + bs.n;
    const char **names = em__calloc((size_t)(n ? n : 1), sizeof *names);
    em_tensor **ts = em__calloc((size_t)(n ? n : 1), sizeof *ts);
    char *st_path = path_join(dir, "model.safetensors"), *cfg_path = path_join(dir, "config.json");
    if (!names || !ts || !st_path || !cfg_path) s = em__fail(EM_ERR_OOM, "out of memory saving %s", dir);
    em_scope_begin();
    for (int i = 0; !s && i < n; i++) {
        em_named_tensor *nt = i < ps.n ? &ps.items[i] : &bs.items[i - ps.n];
        names[i] = nt->name;
        ts[i] = em_detach(nt->tensor);
        if (ts[i] && ts[i]->device.type != EM_DEVICE_CPU) ts[i] = em_to(ts[i], EM_CPU);
        if (!ts[i]) s = em_last_status() ? em_last_status() : EM_ERR_OOM;
    }
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (!s) s = em_safetensors_save_checked(st_path, n, names, ts, 1, mk, mv);
    em_scope_end();
    if (!s) {
        pthread_once(&json_once, json_hooks);
        cJSON *j = config_json(m, a, head);
        char *text = j ? cJSON_Print(j) : NULL, *pretty = text ? two_space_indent(text) : NULL;
        s = pretty ? write_atomic(cfg_path, pretty) : em__fail(EM_ERR_OOM, "out of memory writing %s", cfg_path);
        em__free(pretty);
        if (text) cJSON_free(text);
        cJSON_Delete(j);
    }
    em__free(names);
    em__free(ts);
    em__free(st_path);
    em__free(cfg_path);
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    return s;
}
