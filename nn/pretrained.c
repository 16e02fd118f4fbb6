/* ember — Hugging Face checkpoint folders: from_pretrained (config.json +
 * model.safetensors or a sharded index, strict or not, with a report of
 * missing and unexpected keys) and save_pretrained (atomic files that
 * transformers loads). JSON goes through cJSON (Debian libcjson). */
#include "nn/nn_internal.h"
#include "tensor/tensor_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const em__arch *const archs[] = {&em__distilbert_arch, &em__bert_arch};
#define N_ARCHS (int)(sizeof archs / sizeof *archs)

static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = em__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = em__malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- JSON field readers (nn_internal.h) --------------------------------------------------- */

em_status em__json_int(const cJSON *j, const char *path, const char *key, int64_t lo, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return EM_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1e300;
    if (!cJSON_IsNumber(v) || d != (double)(int64_t)d || d < (double)lo || d > 9e15)
        return em__fail(EM_ERR_FORMAT, "%s: field \"%s\" must be an integer >= %lld", path, key, (long long)lo);
    *out = (int64_t)d;
    return EM_OK;
}

em_status em__json_num(const cJSON *j, const char *path, const char *key, double lo, double hi, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return EM_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return em__fail(EM_ERR_FORMAT, "%s: field \"%s\" must be a number in [%g, %g]", path, key, lo, hi);
    *out = v->valuedouble;
    return EM_OK;
}

em_status em__json_bool(const cJSON *j, const char *path, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return EM_OK;
    if (!cJSON_IsBool(v)) return em__fail(EM_ERR_FORMAT, "%s: field \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return EM_OK;
}

em_status em__json_activation(const cJSON *j, const char *path, const char *key, em_activation *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return EM_OK;
    if (!cJSON_IsString(v)) return em__fail(EM_ERR_FORMAT, "%s: field \"%s\" must be a string", path, key);
    if (!em__activation_parse(v->valuestring, out))
        return em__fail(EM_ERR_UNSUPPORTED,
                        "%s: %s \"%s\" is not supported (gelu, relu, gelu_new, gelu_pytorch_tanh, silu, swish, tanh)",
                        path, key, v->valuestring);
    return EM_OK;
}

static const char *const problem_names[] = {NULL, "regression", "single_label_classification",
                                            "multi_label_classification"};

em_status em__json_labels(const cJSON *j, const char *path, int *num_labels, em_problem_type *pt)
{
    const cJSON *id2 = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    int64_t n = *num_labels;
    if (id2 && !cJSON_IsNull(id2)) {
        if (!cJSON_IsObject(id2) || cJSON_GetArraySize(id2) < 1)
            return em__fail(EM_ERR_FORMAT, "%s: field \"id2label\" must be a non-empty object", path);
        n = cJSON_GetArraySize(id2);
    } else {
        em_status s = em__json_int(j, path, "num_labels", 1, &n);
        if (s) return s;
    }
    if (n > 1 << 24) return em__fail(EM_ERR_FORMAT, "%s: %lld labels is too many", path, (long long)n);
    *num_labels = (int)n;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "problem_type");
    *pt = EM_PROBLEM_AUTO;
    if (p && !cJSON_IsNull(p)) {
        for (int i = 1; i < 4; i++)
            if (cJSON_IsString(p) && !strcmp(p->valuestring, problem_names[i])) *pt = (em_problem_type)i;
        if (*pt == EM_PROBLEM_AUTO)
            return em__fail(EM_ERR_FORMAT, "%s: field \"problem_type\" must be null, \"regression\", "
                            "\"single_label_classification\" or \"multi_label_classification\"", path);
    }
    return EM_OK;
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
        if (*end || id < 0 || id >= n || names[id] || !cJSON_IsString(it) || !(names[id] = str_dup(it->valuestring)))
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

/* Reads a whole (small) file; EM_ERR_NOT_FOUND when absent. */
static em_status slurp(const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return em__fail(errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    em_status s = EM_OK;
    size_t cap = 1 << 16, n = 0;
    char *b = em__malloc(cap + 1);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= (size_t)64 << 20) {
            s = em__fail(EM_ERR_FORMAT, "%s: larger than 64 MiB; not a config file", path);
            break;
        }
        char *nb = em__realloc(b, 2 * cap + 1);
        if (!nb) break;
        b = nb;
        cap *= 2;
    }
    if (!b && !s) s = em__fail(EM_ERR_OOM, "%s: out of memory reading the file", path);
    else if (!s && ferror(f)) s = em__fail(EM_ERR_IO, "%s: read error", path);
    fclose(f);
    if (s) {
        em__free(b);
        return s;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return EM_OK;
}

/* Parses path as a JSON object; malformed JSON names the line and column. */
static em_status read_json(const char *path, cJSON **out)
{
    char *buf;
    size_t len;
    *out = NULL;
    em_status s = slurp(path, &buf, &len);
    if (s) return s;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (!j) {
        size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : len;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (buf[i] == '\n') line++, col = 1;
            else col++;
        }
        s = em__fail(EM_ERR_FORMAT, "%s: malformed JSON at line %d, column %d (byte %zu)", path, line, col, off);
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

/* The family config.json names (model_type, else an architectures hint). */
static em_status find_arch(const cJSON *j, const char *path, const em__arch **out)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && !cJSON_IsString(mt)) return em__fail(EM_ERR_FORMAT, "%s: field \"model_type\" must be a string", path);
    if (mt) {
        for (int i = 0; i < N_ARCHS; i++)
            if (!strcmp(mt->valuestring, archs[i]->model_type)) return *out = archs[i], EM_OK;
        return em__fail(EM_ERR_UNSUPPORTED, "%s: unknown model_type \"%s\" (ember knows \"distilbert\" and \"bert\")",
                        path, mt->valuestring);
    }
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *a;
    cJSON_ArrayForEach(a, ar) {
        if (!cJSON_IsString(a)) continue;
        if (!strncmp(a->valuestring, "DistilBert", 10)) return *out = &em__distilbert_arch, EM_OK;
        if (!strncmp(a->valuestring, "Bert", 4)) return *out = &em__bert_arch, EM_OK;
    }
    return em__fail(EM_ERR_FORMAT, "%s: no \"model_type\" field (expected \"distilbert\" or \"bert\")", path);
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
    char *dup = str_dup(name);
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
    char *dup = nm && fo ? str_dup(name) : NULL;
    if (!dup) return em__fail(EM_ERR_OOM, "out of memory listing the checkpoint");
    c->names[c->n] = dup;
    c->file_of[c->n++] = file;
    return EM_OK;
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
            if (!s && !em_safetensors_get_info(c->files[f], it->string))
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
