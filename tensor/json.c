/* ember — one place that points cJSON at ember's allocation hooks, so the
 * fail-the-Nth switch reaches every JSON parser (safetensors headers,
 * config.json, JSONL). cJSON's hooks are process-wide; install them once.
 * A parse that fails for lack of memory leaves em_last_status() == EM_ERR_OOM
 * (em__malloc records it): clear the error before parsing to tell the cases apart. */
#include "tensor/tensor_internal.h"

#include <cjson/cJSON.h>
#include <pthread.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void install(void) { cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = em__malloc, .free_fn = em__free}); }
void em__json_init(void) { pthread_once(&once, install); }

const char *em__json_kind(const void *value)
{
    const cJSON *v = value;
    if (!v) return "missing";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    return "an invalid value";
}

size_t em__json_nul_escape(const char *p, size_t n)
{
    size_t run = 0;   /* backslashes just before p[i] */
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\') {
            run++;
            continue;
        }
        if (p[i] == 'u' && run % 2 == 1 && i + 4 < n && p[i + 1] == '0' && p[i + 2] == '0' && p[i + 3] == '0' &&
            p[i + 4] == '0')
            return i;   /* the backslash's offset is i - 1; 1-based: i */
        run = 0;
    }
    return 0;
}
