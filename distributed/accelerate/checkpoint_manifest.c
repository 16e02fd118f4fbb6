/* ember — checkpoint integrity: manifest.json beside the files of a
 * save_state folder, and its verification before load_state changes
 * anything.
 *
 * manifest.json (written last by the main process, once every rank's files
 * are complete, inside the temporary folder that is then renamed into place):
 *
 *   { "format": "ember.manifest/1",
 *     "files": { "model.safetensors": { "bytes": 123, "crc32c": "1a2b3c4d" }, ... },
 *     "fingerprint": { "ember_version": "0.1.0", "world_size": 2, "mixed_precision": "bf16",
 *                      "gradient_accumulation_steps": 1,
 *                      "models": [ { "type": "BertForSequenceClassification",
 *                                    "parameters": "<crc32c of name:shape;...>",
 *                                    "config": "<config.json of the model, one line>" } ] } }
 *
 * Verification: every listed file must exist with its size and CRC-32C (a
 * damaged byte anywhere is caught: EM_ERR_FORMAT naming the file), and the
 * fingerprint (precision, accumulation, each model's class and config; the
 * parameter digest is informative) must match this run (EM_ERR_INVALID naming the field), unless
 * the accelerator was made with ignore_mismatched_config, which prints what
 * it overrides. A folder without a manifest (saved by an older ember) loads
 * with a warning. CRC-32C: em__crc32c (tensor/crc32c.c). */
#include "distributed/accelerate/accelerator_internal.h"
#include "nn/nn_internal.h"

#include "ember_config.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define MANIFEST_FORMAT "ember.manifest/1"


/* The CRC and size of a whole file. */
static em_status file_crc(const char *path, uint32_t *crc, int64_t *bytes)
{
    FILE *f = em__fopen_regular(path);
    if (!f) return em__fail(errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "%s: %s", path, em__strerror(errno));
    enum { BUF = 1 << 20 };
    unsigned char *buf = em__malloc(BUF);
    if (!buf) {
        fclose(f);
        return EM_ERR_OOM;
    }
    uint32_t c = 0;
    int64_t total = 0;
    size_t k;
    while ((k = fread(buf, 1, BUF, f)) > 0) c = em__crc32c_update(c, buf, k), total += (int64_t)k;
    bool bad = ferror(f) != 0;
    fclose(f);
    em__free(buf);
    if (bad) return em__fail(EM_ERR_IO, "%s: read error", path);
    *crc = c, *bytes = total;
    return EM_OK;
}

static const char *mp_str(em_mixed_precision mp)
{
    return mp == EM_MP_BF16 ? "bf16" : mp == EM_MP_FP16 ? "fp16" : "no";
}

/* The digest of a model's parameter and buffer names and shapes. */
static uint32_t params_digest(em_module *m)
{
    em_named_tensors ps = em_module_named_parameters(m), bs = em_module_named_buffers(m, false);
    uint32_t c = 0;
    for (int i = 0; i < ps.n + bs.n; i++) {
        const em_named_tensor *t = i < ps.n ? &ps.items[i] : &bs.items[i - ps.n];
        c = em__crc32c_update(c, (const unsigned char *)t->name, strlen(t->name) + 1);
        c = em__crc32c_update(c, (const unsigned char *)t->tensor->shape, sizeof(int64_t) * (size_t)t->tensor->ndim);
        c = em__crc32c_update(c, (const unsigned char *)&t->tensor->dtype, sizeof t->tensor->dtype);
    }
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    return c;
}

/* This run's fingerprint (NULL on OOM). */
static cJSON *fingerprint(em_accelerator *acc)
{
    cJSON *fp = cJSON_CreateObject();
    bool ok = fp && cJSON_AddStringToObject(fp, "ember_version", EMBER_VERSION) &&
              cJSON_AddNumberToObject(fp, "world_size", acc->world) &&
              cJSON_AddStringToObject(fp, "mixed_precision", mp_str(acc->mp)) &&
              cJSON_AddNumberToObject(fp, "gradient_accumulation_steps", acc->K);
    cJSON *models = ok ? cJSON_AddArrayToObject(fp, "models") : NULL;
    for (int i = 0; models && i < acc->n_models; i++) {
        cJSON *o = cJSON_CreateObject();
        char hex[16];
        snprintf(hex, sizeof hex, "%08" PRIx32, params_digest(acc->models[i].m));
        char *cfg = em__model_config_string(acc->models[i].m);
        ok &= o && cJSON_AddItemToArray(models, o) && cJSON_AddStringToObject(o, "type", acc->models[i].m->type) &&
              cJSON_AddStringToObject(o, "parameters", hex) && cJSON_AddStringToObject(o, "config", cfg ? cfg : "");
        cJSON_free(cfg);
    }
    if (!ok || !models) {
        cJSON_Delete(fp);
        return NULL;
    }
    return fp;
}

em_status em__acc_manifest_write(em_accelerator *acc, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return em__fail(EM_ERR_IO, "save_state: cannot list %s: %s", dir, strerror(errno));
    cJSON *root = cJSON_CreateObject(), *files = root ? cJSON_AddObjectToObject(root, "files") : NULL;
    em_status st = root && files && cJSON_AddStringToObject(root, "format", MANIFEST_FORMAT) ? EM_OK : EM_ERR_OOM;
    char path[PATH_MAX];
    for (struct dirent *e; st == EM_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "manifest.json")) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) {
            st = em__fail(EM_ERR_INVALID, "save_state: path too long: %s", dir);
            break;
        }
        uint32_t crc = 0;
        int64_t bytes = 0;
        st = file_crc(path, &crc, &bytes);
        char hex[16];
        snprintf(hex, sizeof hex, "%08" PRIx32, crc);
        cJSON *o = st == EM_OK ? cJSON_AddObjectToObject(files, e->d_name) : NULL;
        if (st == EM_OK && !(o && cJSON_AddNumberToObject(o, "bytes", (double)bytes) &&
                             cJSON_AddStringToObject(o, "crc32c", hex)))
            st = EM_ERR_OOM;
    }
    closedir(d);
    cJSON *fp = st == EM_OK ? fingerprint(acc) : NULL;
    if (st == EM_OK && !(fp && cJSON_AddItemToObject(root, "fingerprint", fp))) {
        cJSON_Delete(fp);
        st = EM_ERR_OOM;
    }
    char *text = st == EM_OK ? cJSON_Print(root) : NULL;
    if (st == EM_OK && !text) st = EM_ERR_OOM;
    if (st == EM_OK) {
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        FILE *f = fopen(path, "wb");
        bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) st = em__fail(EM_ERR_IO, "save_state: cannot write %s: %s", path, strerror(errno));
    }
    if (st == EM_ERR_OOM) em__fail(EM_ERR_OOM, "save_state: out of memory writing the manifest");
    cJSON_free(text);
    cJSON_Delete(root);
    return st;
}

/* A fingerprint field that differs: refused, or (override) reported. */
static em_status mismatch(em_accelerator *acc, const char *path, const char *field, const char *saved,
                          const char *now)
{
    if (acc->ignore_mismatched_config) {
        if (acc->rank == 0)
            fprintf(stderr, "ember: load_state: %s: %s was %s when saved and is %s now; continuing "
                            "(ignore_mismatched_config)\n", path, field, saved, now);
        return EM_OK;
    }
    return em__fail(EM_ERR_INVALID, "load_state: %s: the checkpoint was saved with %s %s, and this run has %s: "
                    "resume with the same settings (or ignore_mismatched_config / --ignore_mismatched_config to "
                    "override)", path, field, saved, now);
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static em_status check_fingerprint(em_accelerator *acc, const char *path, const cJSON *fp)
{
    if (!cJSON_IsObject(fp)) return em__fail(EM_ERR_FORMAT, "load_state: %s: no \"fingerprint\" object", path);
    char now[64], saved[64];
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(fp, "world_size"),
                *k = cJSON_GetObjectItemCaseSensitive(fp, "gradient_accumulation_steps");
    const char *mp = str_of(fp, "mixed_precision");
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(fp, "models");
    if (!cJSON_IsNumber(ws) || !cJSON_IsNumber(k) || !mp || !cJSON_IsArray(models))
        return em__fail(EM_ERR_FORMAT, "load_state: %s: the fingerprint lacks world_size, "
                        "gradient_accumulation_steps, mixed_precision or models", path);
    em_status st = EM_OK;
    if (strcmp(mp, mp_str(acc->mp))) st = mismatch(acc, path, "mixed_precision", mp, mp_str(acc->mp));
    if (st == EM_OK && k->valuedouble != acc->K) {
        snprintf(saved, sizeof saved, "%g", k->valuedouble);
        snprintf(now, sizeof now, "%d", acc->K);
        st = mismatch(acc, path, "gradient_accumulation_steps", saved, now);
    }
    if (st == EM_OK && cJSON_GetArraySize(models) != acc->n_models)
        st = em__fail(EM_ERR_INVALID, "load_state: %s: the checkpoint holds %d models; %d were prepared", path,
                      cJSON_GetArraySize(models), acc->n_models);
    for (int i = 0; st == EM_OK && i < acc->n_models; i++) {
        const cJSON *o = cJSON_GetArrayItem(models, i);
        const char *type = str_of(o, "type"), *params = str_of(o, "parameters"), *cfg = str_of(o, "config");
        if (!type || !params || !cfg) {
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: models[%d] lacks type, parameters or config", path, i);
            break;
        }
        em_module *m = acc->models[i].m;
        char field[64], hex[16];
        snprintf(field, sizeof field, "model %d's class", i);
        if (strcmp(type, m->type)) st = mismatch(acc, path, field, type, m->type);
        /* the parameter digest is not compared: load_state's own check of every
         * tensor names the one that differs, and its shapes */
        (void)hex;
        char *mine = em__model_config_string(m);
        snprintf(field, sizeof field, "model %d's config", i);
        if (st == EM_OK && strcmp(cfg, mine ? mine : "")) st = mismatch(acc, path, field, cfg, mine ? mine : "(none)");
        cJSON_free(mine);
    }
    return st;
}

/* Every file load_state will read must be one the manifest vouches for: a
 * manifest whose list was cut short would otherwise let an edited file in. */
static em_status require_listed(const em_accelerator *acc, const cJSON *files, const char *path)
{
    char name[64];
    const struct { const char *stem; int n; } sets[] = {
        {"model", acc->n_models}, {"optimizer", acc->n_opts}, {"scheduler", acc->n_scheds}};
    const char *single[3] = {"accelerator_state.json", name, acc->scaler ? "scaler.safetensors" : NULL};
    snprintf(name, sizeof name, "random_states_%d.json", acc->rank);
    for (int i = 0; i < 3; i++)
        if (single[i] && !cJSON_GetObjectItemCaseSensitive(files, single[i]))
            return em__fail(EM_ERR_FORMAT, "load_state: %s does not list %s: the checkpoint cannot be verified",
                            path, single[i]);
    char file[64];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < sets[s].n; i++) {
            em__acc_indexed_name(file, sizeof file, sets[s].stem, i, "safetensors");
            if (!cJSON_GetObjectItemCaseSensitive(files, file))
                return em__fail(EM_ERR_FORMAT, "load_state: %s does not list %s: the checkpoint cannot be verified",
                                path, file);
        }
    return EM_OK;
}

em_status em__acc_manifest_verify(em_accelerator *acc, const char *dir)
{
    char path[PATH_MAX], file[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
        return em__fail(EM_ERR_INVALID, "load_state: path too long: %s", dir);
    FILE *f = em__fopen_regular(path);
    if (!f) {
        if (errno != ENOENT) return em__fail(EM_ERR_IO, "load_state: %s: %s", path, em__strerror(errno));
        if (acc->rank == 0)
            fprintf(stderr, "ember: load_state: %s has no manifest.json (saved by an older ember): its files "
                            "cannot be verified\n", dir);
        return EM_OK;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 && n < (64l << 20) ? em__malloc((size_t)n + 1) : NULL;
    bool ok = text && fread(text, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    if (!ok) {
        em__free(text);
        return em__fail(text || n < 0 ? EM_ERR_IO : EM_ERR_FORMAT, "load_state: cannot read %s", path);
    }
    text[n] = 0;
    cJSON *root = cJSON_Parse(text);
    em__free(text);
    em_status st = EM_OK;
    const char *fmt = root ? str_of(root, "format") : NULL;
    if (!root || !fmt || strcmp(fmt, MANIFEST_FORMAT))
        st = em__fail(EM_ERR_FORMAT, "load_state: %s is not an ember manifest (\"format\": \"%s\")", path,
                      MANIFEST_FORMAT);
    const cJSON *files = st == EM_OK ? cJSON_GetObjectItemCaseSensitive(root, "files") : NULL;
    if (st == EM_OK && !cJSON_IsObject(files))
        st = em__fail(EM_ERR_FORMAT, "load_state: %s: no \"files\" object", path);
    for (const cJSON *e = files ? files->child : NULL; st == EM_OK && e; e = e->next) {
        const char *want = str_of(e, "crc32c");
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        if (!want || !cJSON_IsNumber(bytes) || strchr(e->string, '/') || e->string[0] == '.') {
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: the entry \"%s\" is malformed", path, e->string);
            break;
        }
        if (snprintf(file, sizeof file, "%s/%s", dir, e->string) >= (int)sizeof file) {
            st = em__fail(EM_ERR_INVALID, "load_state: path too long: %s", dir);
            break;
        }
        uint32_t crc = 0;
        int64_t size = 0;
        st = file_crc(file, &crc, &size);
        if (st == EM_ERR_NOT_FOUND) st = em__fail(EM_ERR_FORMAT, "load_state: %s is missing (listed in %s)", file, path);
        char hex[16];
        snprintf(hex, sizeof hex, "%08" PRIx32, crc);
        if (st == EM_OK && size != (int64_t)bytes->valuedouble)
            st = em__fail(EM_ERR_FORMAT, "load_state: %s has %lld bytes; the manifest says %.0f: the checkpoint is "
                          "damaged", file, (long long)size, bytes->valuedouble);
        else if (st == EM_OK && strcmp(hex, want))
            st = em__fail(EM_ERR_FORMAT, "load_state: %s: CRC-32C %s, the manifest says %s: the file is damaged", file,
                          hex, want);
    }
    if (st == EM_OK) st = require_listed(acc, files, path);
    if (st == EM_OK) st = check_fingerprint(acc, path, cJSON_GetObjectItemCaseSensitive(root, "fingerprint"));
    cJSON_Delete(root);
    return st;
}
