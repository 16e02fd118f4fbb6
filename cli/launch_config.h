/* ember — the launch configuration shared by `ember config`, `ember launch`
 * and `ember env`: what it holds, where it is stored, and how flags,
 * environment and the config file are resolved (in that order of precedence,
 * then the defaults). */
#ifndef EMBER_CLI_LAUNCH_CONFIG_H
#define EMBER_CLI_LAUNCH_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

typedef enum { SRC_DEFAULT = 0, SRC_CONFIG, SRC_ENV, SRC_FLAG } value_source;

/* The largest process count, machine count, rank or step count taken. */
#define LAUNCH_MAX_COUNT (1 << 20)

/* One setting: its text value (NULL = unset) and where it came from. */
typedef struct setting {
    const char *key;          /* YAML key and --flag name */
    const char *env;          /* environment variable read by `ember launch` */
    const char *def;          /* default */
    const char *help;
    char *value;
    value_source src;
} setting;

enum {
    CFG_DISTRIBUTED_TYPE, CFG_NUM_PROCESSES, CFG_NUM_MACHINES, CFG_MACHINE_RANK, CFG_HOSTFILE,
    CFG_MIXED_PRECISION, CFG_GRAD_ACCUM, CFG_USE_CPU, CFG_THREADS, CFG_COUNT
};

typedef struct launch_config {
    setting s[CFG_COUNT];
} launch_config;

void launch_config_init(launch_config *c);
void launch_config_free(launch_config *c);
/* The default file: $EMBER_CONFIG_FILE, else $XDG_CACHE_HOME/ember/default_config.yaml,
 * else ~/.cache/ember/default_config.yaml. */
const char *launch_config_default_path(char *buf, size_t cap);
/* Reads a YAML mapping of the keys above. A missing file is not an error when
 * `optional`. Errors (syntax, unknown key, bad value) print "path:line: ..." on
 * stderr and return false. */
bool launch_config_load(launch_config *c, const char *path, bool optional);
/* Writes the settings that have a value, atomically (temp file + rename),
 * creating the directory. Prints the error and returns false on failure. */
bool launch_config_save(const launch_config *c, const char *path);
bool launch_config_set(launch_config *c, const char *key, const char *value, value_source src, const char *where);
void launch_config_apply_env(launch_config *c);
const char *launch_config_get(const launch_config *c, int id);   /* value or default */
void launch_config_print(const launch_config *c, FILE *f);       /* the resolved table */
int launch_config_find(const char *key);                         /* id or -1 */

#endif
