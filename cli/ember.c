/* ember — the `ember` command: one subcommand per file in cli/, each a thin
 * layer over the library (DESIGN.md §1). This file only dispatches by name. */
#include <stdio.h>
#include <string.h>

/* A subcommand gets argv[0] = its own name and returns the exit status:
 * 0 success, 1 failure, 2 bad usage (usage printed on stderr). Given --help
 * it prints its usage on stdout and returns 0. */
typedef int (*ember_cmd)(int argc, char **argv);
int ember_cmd_tokenize(int argc, char **argv);
int ember_cmd_config(int argc, char **argv);
int ember_cmd_launch(int argc, char **argv);
int ember_cmd_env(int argc, char **argv);
int ember_cmd_test(int argc, char **argv);
int ember_cmd_selftest(int argc, char **argv);

static const struct {
    const char *name;
    ember_cmd run;
    const char *summary;
} commands[] = {
    { "config", ember_cmd_config, "write the launch configuration (interactively or from flags)" },
    { "launch", ember_cmd_launch, "run a program on N processes (mpirun underneath)" },
    { "env", ember_cmd_env, "print versions, libraries and the configuration for a bug report" },
    { "test", ember_cmd_test, "run a distributed sanity check on the configured number of processes" },
    { "tokenize", ember_cmd_tokenize, "print the WordPiece ids of each line of stdin (BERT tokenizer)" },
    /* hidden (names starting with "__"): what `ember test` runs on every rank */
    { "__selftest", ember_cmd_selftest, NULL },
};
enum { N_COMMANDS = sizeof commands / sizeof *commands };

static void usage(FILE *f)
{
    fprintf(f, "usage: ember <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].summary) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "help", "this list; `ember help <command>` shows the command's options");
}

static int find(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return i;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        if (argc == 2) {
            usage(stdout);
            return 0;
        }
        int c = find(argv[2]);
        if (c < 0) {
            fprintf(stderr, "ember: unknown command '%s' (see `ember help`)\n", argv[2]);
            return 2;
        }
        char *help_argv[] = { argv[2], "--help", NULL };
        return commands[c].run(2, help_argv);
    }
    int c = find(name);
    if (c < 0) {
        fprintf(stderr, "ember: unknown command '%s' (see `ember help`)\n", name);
        return 2;
    }
    return commands[c].run(argc - 1, argv + 1);
}
