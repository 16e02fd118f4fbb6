/* ember — config.json field readers shared by the model families
 * (nn_internal.h "JSON field readers"): an absent key leaves the value
 * alone; a present key of the wrong type or range is EM_ERR_FORMAT naming
 * the file and the key. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

#include <string.h>

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

const char *const em__problem_names[4] = {NULL, "regression", "single_label_classification",
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
            if (cJSON_IsString(p) && !strcmp(p->valuestring, em__problem_names[i])) *pt = (em_problem_type)i;
        if (*pt == EM_PROBLEM_AUTO)
            return em__fail(EM_ERR_FORMAT, "%s: field \"problem_type\" must be null, \"regression\", "
                            "\"single_label_classification\" or \"multi_label_classification\"", path);
    }
    return EM_OK;
}

