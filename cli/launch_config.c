/* ember — launch configuration: YAML I/O (libyaml) and resolution. */
#include "launch_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

static const setting TEMPLATE[CFG_COUNT] = {
    [CFG_DISTRIBUTED_TYPE] = {"distributed_type", "EMBER_DISTRIBUTED_TYPE", "NO", "NO, MULTI_CPU or MULTI_GPU"},
    [CFG_NUM_PROCESSES] = {"num_processes", "EMBER_NUM_PROCESSES", "1", "processes in total, across machines"},
    [CFG_NUM_MACHINES] = {"num_machines", "EMBER_NUM_MACHINES", "1", "machines taking part"},
    [CFG_MACHINE_RANK] = {"machine_rank", "EMBER_MACHINE_RANK", "0", "this machine's index"},
    [CFG_HOSTFILE] = {"hostfile", "EMBER_HOSTFILE", "", "mpirun hostfile for several machines"},
    [CFG_MIXED_PRECISION] = {"mixed_precision", "EMBER_MIXED_PRECISION", "no", "no, bf16 or fp16"},
    [CFG_GRAD_ACCUM] = {"gradient_accumulation_steps", "EMBER_GRADIENT_ACCUMULATION_STEPS", "1", "micro-steps per optimizer step"},
    [CFG_USE_CPU] = {"use_cpu", "EMBER_USE_CPU", "false", "run on the CPU even when GPUs are present"},
    [CFG_THREADS] = {"num_cpu_threads_per_process", "EM_NUM_THREADS", "", "threads per process (default: cores / local processes)"},
};

void launch_config_init(launch_config *c)
{
    memcpy(c->s, TEMPLATE, sizeof TEMPLATE);
}

void launch_config_free(launch_config *c)
{
    for (int i = 0; i < CFG_COUNT; i++) free(c->s[i].value);
}

int launch_config_find(const char *key)
{
    for (int i = 0; i < CFG_COUNT; i++)
        if (!strcmp(TEMPLATE[i].key, key)) return i;
    return -1;
}

/* A count from 0 (or 1) to 2^20, digits only: anything longer would wrap in
 * the int it becomes (launch.c), and no job has more processes or machines. */
static bool is_uint(const char *v, bool allow_zero)
{
    if (!*v || strlen(v) > 7) return false;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9') return false;
    long n = atol(v);
    return n <= LAUNCH_MAX_COUNT && (allow_zero || n > 0);
}

/* Well-formed UTF-8 (no overlong forms, no surrogates): libyaml refuses to
 * write anything else, and a value it refused once took the emitter down. */
static bool utf8_ok(const char *v)
{
    const unsigned char *p = (const unsigned char *)v;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0 || (n == 1 && *p < 0xC2) || (n == 3 && *p > 0xF4)) return false;
        unsigned cp = n ? *p & (0x3F >> n) : *p;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        p += n + 1;
    }
    return true;
}

static bool valid(int id, const char *v)
{
    if (!utf8_ok(v)) return false;
    switch (id) {
    case CFG_DISTRIBUTED_TYPE: return !strcmp(v, "NO") || !strcmp(v, "MULTI_CPU") || !strcmp(v, "MULTI_GPU");
    case CFG_NUM_PROCESSES: case CFG_NUM_MACHINES: case CFG_GRAD_ACCUM: return is_uint(v, false);
    case CFG_MACHINE_RANK: return is_uint(v, true);
    case CFG_THREADS: return !*v || is_uint(v, false);
    case CFG_MIXED_PRECISION: return !strcmp(v, "no") || !strcmp(v, "bf16") || !strcmp(v, "fp16");
    case CFG_USE_CPU: return !strcmp(v, "true") || !strcmp(v, "false");
    default: return true;
    }
}

bool launch_config_set(launch_config *c, const char *key, const char *value, value_source src, const char *where)
{
    int id = launch_config_find(key);
    if (id < 0) {
        fprintf(stderr, "%s: unknown setting '%s'\n", where, key);
        return false;
    }
    if (!valid(id, value)) {
        fprintf(stderr, "%s: invalid value '%s' for %s (%s)\n", where, value, key, TEMPLATE[id].help);
        return false;
    }
    if (c->s[id].value && c->s[id].src > src) return true;   /* a stronger source already set it */
    free(c->s[id].value);
    c->s[id].value = strdup(value);
    c->s[id].src = src;
    return true;
}

void launch_config_apply_env(launch_config *c)
{
    for (int i = 0; i < CFG_COUNT; i++) {
        const char *v = getenv(TEMPLATE[i].env);
        if (v && *v) {
            char where[96];
            snprintf(where, sizeof where, "environment %s", TEMPLATE[i].env);
            if (!launch_config_set(c, TEMPLATE[i].key, v, SRC_ENV, where)) exit(2);
        }
    }
}

const char *launch_config_get(const launch_config *c, int id)
{
    return c->s[id].value ? c->s[id].value : c->s[id].def;
}

const char *launch_config_default_path(char *buf, size_t cap)
{
    const char *e = getenv("EMBER_CONFIG_FILE");
    if (e && *e) {
        snprintf(buf, cap, "%s", e);
        return buf;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(buf, cap, "%s/ember/default_config.yaml", xdg);
    else snprintf(buf, cap, "%s/.cache/ember/default_config.yaml", home && *home ? home : ".");
    return buf;
}

bool launch_config_load(launch_config *c, const char *path, bool optional)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* a FIFO must not block the open */
    if (fd < 0) {
        if (optional && errno == ENOENT) return true;
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fprintf(stderr, "%s: cannot stat: %s\n", path, strerror(errno));
        close(fd);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: not a regular file%s\n", path, S_ISDIR(st.st_mode) ? " (a directory)" : "");
        close(fd);
        return false;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        close(fd);
        return false;
    }
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    bool ok = true, in_map = false, done = false;
    char *key = NULL;
    while (ok && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            fprintf(stderr, "%s:%zu:%zu: YAML error: %s\n", path, p.problem_mark.line + 1, p.problem_mark.column + 1,
                    p.problem ? p.problem : "syntax error");
            ok = false;
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "%s:%zu", path, ev.start_mark.line + 1);
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_MAPPING_START_EVENT:
            if (in_map) { fprintf(stderr, "%s: nested mappings are not supported\n", where); ok = false; }
            in_map = true;
            break;
        case YAML_SEQUENCE_START_EVENT:
            fprintf(stderr, "%s: lists are not supported here\n", where);
            ok = false;
            break;
        case YAML_ALIAS_EVENT:   /* skipping it would pair the next key with this one */
            fprintf(stderr, "%s: aliases (*name) are not supported here\n", where);
            ok = false;
            break;
        case YAML_MAPPING_END_EVENT:
            if (key) { fprintf(stderr, "%s: '%s' has no value\n", where, key); ok = false; }
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (in_map) { fprintf(stderr, "%s: one document (one mapping of settings) only\n", where); ok = false; }
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (!in_map) { fprintf(stderr, "%s: expected a mapping of settings\n", where); ok = false; }
            else if (!key) key = strdup(v);
            else {
                ok = launch_config_set(c, key, v, SRC_CONFIG, where);
                free(key);
                key = NULL;
            }
            break;
        }
        default: break;
        }
        yaml_event_delete(&ev);
    }
    free(key);
    yaml_parser_delete(&p);
    fclose(f);
    return ok;
}

static int emit(yaml_emitter_t *e, yaml_event_t *ev) { return yaml_emitter_emit(e, ev); }

bool launch_config_save(const launch_config *c, const char *path)
{
    char dir[4096], tmp[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        for (char *q = dir + 1; *q; q++)   /* mkdir -p */
            if (*q == '/') { *q = 0; mkdir(dir, 0755); *q = '/'; }
        mkdir(dir, 0755);
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot write: %s\n", tmp, strerror(errno));
        return false;
    }
    yaml_emitter_t e;
    yaml_event_t ev;
    yaml_emitter_initialize(&e);
    yaml_emitter_set_output_file(&e, f);
    int ok = 1;
    ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && emit(&e, &ev);
    ok = ok && yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && emit(&e, &ev);
    ok = ok && yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) && emit(&e, &ev);
    for (int i = 0; i < CFG_COUNT && ok; i++) {
        if (!c->s[i].value) continue;
        /* an event libyaml refuses to make (a value that is not UTF-8; set() refuses those
         * first) must not be emitted: the emitter would free the previous one again */
        ok = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)c->s[i].key, -1, 1, 1,
                                          YAML_PLAIN_SCALAR_STYLE) && emit(&e, &ev);
        ok = ok && yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)c->s[i].value, -1, 1, 1,
                                                YAML_ANY_SCALAR_STYLE) && emit(&e, &ev);
    }
    ok = ok && yaml_mapping_end_event_initialize(&ev) && emit(&e, &ev);
    ok = ok && yaml_document_end_event_initialize(&ev, 1) && emit(&e, &ev);
    ok = ok && yaml_stream_end_event_initialize(&ev) && emit(&e, &ev);
    yaml_emitter_delete(&e);
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write the configuration: %s\n", path, strerror(errno));
        unlink(tmp);
        return false;
    }
    return true;
}

/* The table a run will see. Two rows say what really decides them: distributed_type,
 * when nobody set it, follows the process count (as Accelerate's launcher derives it);
 * mixed_precision is what EMBER_MIXED_PRECISION tells an Accelerator made with
 * EM_MP_DEFAULT, and a program that passes its own (seqcls's --mixed_precision, or
 * em_accelerator_opts.mixed_precision) wins over it, as Accelerator(mixed_precision=)
 * wins over the config in Accelerate. */
void launch_config_print(const launch_config *c, FILE *f)
{
    static const char *src[] = {"default", "config file", "environment", "flag"};
    fprintf(f, "%-30s %-12s %s\n", "setting", "from", "value");
    long np = atol(launch_config_get(c, CFG_NUM_PROCESSES)), machines = atol(launch_config_get(c, CFG_NUM_MACHINES));
    for (int i = 0; i < CFG_COUNT; i++) {
        const char *v = launch_config_get(c, i), *from = src[c->s[i].value ? c->s[i].src : SRC_DEFAULT];
        char shown[160];
        snprintf(shown, sizeof shown, "%s", *v ? v : "(auto)");
        if (i == CFG_DISTRIBUTED_TYPE && !c->s[i].value) {
            from = "derived";
            snprintf(shown, sizeof shown, "%s", np * (machines > 0 ? machines : 1) > 1 ? "MULTI_CPU (MULTI_GPU when the program uses CUDA)" : "NO");
        } else if (i == CFG_MIXED_PRECISION) {
            snprintf(shown, sizeof shown, "%s (a program that sets its own wins)", *v ? v : "no");
        }
        fprintf(f, "%-30s %-12s %s\n", c->s[i].key, from, shown);
    }
}
