/* ember config — writes the launch configuration (YAML) that `ember launch`
 * reads: interactively (one question per setting, Enter keeps the shown
 * value), or from flags (`ember config --num_processes 2 --mixed_precision bf16`:
 * those settings change, the file keeps its others), or `ember config default`.
 * A file that does not load is never rewritten. */
#include "launch_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: ember config [default] [--config_file FILE] [--SETTING VALUE ...]\n"
    "  Without settings, asks for each one on stdin; with settings, changes those and keeps\n"
    "  the file's others. Settings:\n";

static void usage(FILE *f)
{
    fputs(USAGE, f);
    launch_config c;
    launch_config_init(&c);
    for (int i = 0; i < CFG_COUNT; i++) fprintf(f, "    --%-30s %s\n", c.s[i].key, c.s[i].help);
    launch_config_free(&c);
}

int ember_cmd_config(int argc, char **argv)
{
    launch_config c;
    launch_config_init(&c);
    char path[4096];
    launch_config_default_path(path, sizeof path);
    bool by_flags = false, ok = true, just_default = false;
    for (int i = 1; i < argc && ok; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            launch_config_free(&c);
            return 0;
        } else if (!strcmp(argv[i], "default")) {
            just_default = true;
        } else if (!strcmp(argv[i], "--config_file") && i + 1 < argc) {
            snprintf(path, sizeof path, "%s", argv[++i]);
        } else if (!strncmp(argv[i], "--", 2) && i + 1 < argc) {
            ok = launch_config_set(&c, argv[i] + 2, argv[i + 1], SRC_FLAG, argv[i]);
            by_flags = true;
            i++;
        } else {
            fprintf(stderr, "ember config: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            ok = false;
        }
    }
    if (!ok) {
        launch_config_free(&c);
        return 2;
    }
    if (!by_flags && !just_default) {
        /* current values become the suggestions; a file that does not load is not
         * rewritten from what could be read of it (its other settings would go) */
        if (!launch_config_load(&c, path, true)) {
            fprintf(stderr, "ember config: %s was left as it is; mend it, or remove it and run ember config again\n",
                    path);
            launch_config_free(&c);
            return 1;
        }
        char *line = NULL;
        size_t cap = 0;
        for (int i = 0; i < CFG_COUNT && ok; i++) {
            const char *cur = launch_config_get(&c, i);
            for (;;) {
                printf("%s (%s) [%s]: ", c.s[i].key, c.s[i].help, *cur ? cur : "auto");
                fflush(stdout);
                if (getline(&line, &cap, stdin) < 0) {   /* as Accelerate's EOFError: nothing is written */
                    fprintf(stderr, "\nember config: the answers ended before the questions; %s was not written\n",
                            path);
                    ok = false;
                    break;
                }
                line[strcspn(line, "\r\n")] = 0;
                if (!line[0]) break;   /* keep */
                if (launch_config_set(&c, c.s[i].key, line, SRC_FLAG, "answer")) break;
            }
            if (ok && !c.s[i].value && *cur) launch_config_set(&c, c.s[i].key, cur, SRC_CONFIG, "default");
        }
        free(line);
        if (!ok) {
            launch_config_free(&c);
            return 1;
        }
    } else if (by_flags && !just_default) {
        /* the flags change those settings; the file keeps the others (it used to lose them) */
        if (!launch_config_load(&c, path, true)) {
            fprintf(stderr, "ember config: %s was left as it is; mend it, or remove it and run ember config again\n",
                    path);
            launch_config_free(&c);
            return 1;
        }
    } else if (just_default) {
        for (int i = 0; i < CFG_COUNT; i++)
            if (!c.s[i].value && *c.s[i].def) launch_config_set(&c, c.s[i].key, c.s[i].def, SRC_DEFAULT, "default");
    }
    ok = launch_config_save(&c, path);
    if (ok) printf("ember config: wrote %s\n", path);
    launch_config_free(&c);
    return ok ? 0 : 1;
}
