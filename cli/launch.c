/* ember launch — runs a program on N processes, as `accelerate launch` runs a
 * script: flags win over the environment, which wins over the config file
 * written by `ember config`, which wins over the defaults. It prints the
 * resolved table, then execs the program (one process) or mpirun (several).
 *
 * Several machines: run `ember launch --num_machines M --hostfile FILE ...` on
 * the main machine only; mpirun starts every rank through the hostfile. */
#include "launch_config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char USAGE[] =
    "usage: ember launch [options] PROGRAM [ARGS...]\n"
    "  --config_file FILE                  read this config instead of the default one\n"
    "  --num_processes N                   processes in total (across machines)\n"
    "  --num_machines N, --machine_rank R  several machines (mpirun runs them all from rank 0)\n"
    "  --hostfile FILE                     mpirun hostfile (alias --mpirun_hostfile)\n"
    "  --mixed_precision no|bf16|fp16      exported as EMBER_MIXED_PRECISION\n"
    "  --gradient_accumulation_steps N     exported as EMBER_GRADIENT_ACCUMULATION_STEPS\n"
    "  --cpu                               run on the CPU (EMBER_USE_CPU=true)\n"
    "  --num_cpu_threads_per_process N     exported as EM_NUM_THREADS and OMP_NUM_THREADS\n"
    "  --dry_run                           print the command instead of running it\n"
    "  --quiet                             do not print the resolved settings\n"
    "(every option may also be spelled with dashes: --num-processes)\n";

static bool in_container(void)
{
    if (access("/.dockerenv", F_OK) == 0 || access("/run/.containerenv", F_OK) == 0) return true;
    FILE *f = fopen("/proc/1/cgroup", "r");
    if (!f) return false;
    char line[512];
    bool yes = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "docker") || strstr(line, "kubepods") || strstr(line, "containerd")) yes = true;
    fclose(f);
    return yes;
}

int ember_cmd_launch(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config_file", required_argument, 0, 'f'}, {"num_processes", required_argument, 0, 'n'},
        {"num_machines", required_argument, 0, 'm'}, {"machine_rank", required_argument, 0, 'r'},
        {"hostfile", required_argument, 0, 'H'}, {"mpirun_hostfile", required_argument, 0, 'H'},
        {"mixed_precision", required_argument, 0, 'p'}, {"gradient_accumulation_steps", required_argument, 0, 'g'},
        {"cpu", no_argument, 0, 'c'}, {"num_cpu_threads_per_process", required_argument, 0, 't'},
        {"dry_run", no_argument, 0, 'd'}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        /* the dashed spellings, which Accelerate accepts too */
        {"config-file", required_argument, 0, 'f'}, {"num-processes", required_argument, 0, 'n'},
        {"num-machines", required_argument, 0, 'm'}, {"machine-rank", required_argument, 0, 'r'},
        {"mpirun-hostfile", required_argument, 0, 'H'}, {"mixed-precision", required_argument, 0, 'p'},
        {"gradient-accumulation-steps", required_argument, 0, 'g'},
        {"num-cpu-threads-per-process", required_argument, 0, 't'}, {"dry-run", no_argument, 0, 'd'}, {0, 0, 0, 0},
    };
    launch_config c;
    launch_config_init(&c);
    const char *config_file = NULL;
    bool dry = false, quiet = false, ok = true;
    int opt;
    optind = 1;
    /* '+': stop at the first non-option, the program to launch */
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        const char *key = NULL;
        switch (opt) {
        case 'f': config_file = optarg; break;
        case 'n': key = "num_processes"; break;
        case 'm': key = "num_machines"; break;
        case 'r': key = "machine_rank"; break;
        case 'H': key = "hostfile"; break;
        case 'p': key = "mixed_precision"; break;
        case 'g': key = "gradient_accumulation_steps"; break;
        case 't': key = "num_cpu_threads_per_process"; break;
        case 'c': ok &= launch_config_set(&c, "use_cpu", "true", SRC_FLAG, "--cpu"); break;
        case 'd': dry = true; break;
        case 'q': quiet = true; break;
        case 'h': fputs(USAGE, stdout); launch_config_free(&c); return 0;
        default: fputs(USAGE, stderr); launch_config_free(&c); return 2;
        }
        if (key) {
            char where[64];
            snprintf(where, sizeof where, "--%s", key);
            ok &= launch_config_set(&c, key, optarg, SRC_FLAG, where);
        }
    }
    if (!ok) { launch_config_free(&c); return 2; }
    if (optind >= argc) {
        fprintf(stderr, "ember launch: no program given\n%s", USAGE);
        launch_config_free(&c);
        return 2;
    }
    launch_config_apply_env(&c);
    char path[4096];
    if (!launch_config_load(&c, config_file ? config_file : launch_config_default_path(path, sizeof path), !config_file)) {
        launch_config_free(&c);
        return 2;
    }
    int np = atoi(launch_config_get(&c, CFG_NUM_PROCESSES));
    int machines = atoi(launch_config_get(&c, CFG_NUM_MACHINES));
    const char *hostfile = launch_config_get(&c, CFG_HOSTFILE);
    if (machines > 1 && !*hostfile) {
        fprintf(stderr, "ember launch: --num_machines %d needs --hostfile (mpirun starts the ranks on every machine)\n", machines);
        launch_config_free(&c);
        return 2;
    }
    if (machines > 1 && atoi(launch_config_get(&c, CFG_MACHINE_RANK)) != 0) {
        fprintf(stderr, "ember launch: run this on the main machine (machine_rank 0) only: mpirun starts every rank "
                        "through the hostfile\n");
        launch_config_free(&c);
        return 2;
    }
    if (np < machines) {
        fprintf(stderr, "ember launch: %d processes cannot cover %d machines\n", np, machines);
        launch_config_free(&c);
        return 2;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = (np + machines - 1) / machines;
    char threads[32];
    snprintf(threads, sizeof threads, "%s", launch_config_get(&c, CFG_THREADS));
    if (!*threads) snprintf(threads, sizeof threads, "%ld", cores / local > 0 ? cores / local : 1);

    /* what every rank sees */
    const char *exports[][2] = {
        {"EMBER_MIXED_PRECISION", launch_config_get(&c, CFG_MIXED_PRECISION)},
        {"EMBER_GRADIENT_ACCUMULATION_STEPS", launch_config_get(&c, CFG_GRAD_ACCUM)},
        {"EMBER_USE_CPU", launch_config_get(&c, CFG_USE_CPU)},
        {"EM_NUM_THREADS", threads},
        {"OMP_NUM_THREADS", threads},
    };
    enum { N_EXPORTS = sizeof exports / sizeof *exports };
    for (int i = 0; i < N_EXPORTS; i++) setenv(exports[i][0], exports[i][1], 1);
    if (!quiet) {
        fprintf(stderr, "ember launch: resolved settings (flags > environment > %s > defaults)\n",
                config_file ? config_file : path);
        launch_config_print(&c, stderr);
    }

    char **args = calloc((size_t)argc + 64, sizeof *args);
    char npbuf[16];
    int n = 0;
    if (np > 1 || machines > 1) {
        snprintf(npbuf, sizeof npbuf, "%d", np);
        args[n++] = "mpirun";
        args[n++] = "-np";
        args[n++] = npbuf;
        if (geteuid() == 0) {
            args[n++] = "--allow-run-as-root";
            setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
            setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        }
        if (machines > 1) {
            args[n++] = "--hostfile";
            args[n++] = (char *)hostfile;
        } else if (np > cores) {
            args[n++] = "--oversubscribe";
        }
        args[n++] = "--bind-to";
        args[n++] = "none";   /* ember threads itself; binding would pin all threads to one core */
        if (in_container()) {  /* CMA needs ptrace rights that containers usually lack */
            args[n++] = "--mca";
            args[n++] = "btl_vader_single_copy_mechanism";
            args[n++] = "none";
        }
        for (int i = 0; i < N_EXPORTS; i++) {
            args[n++] = "-x";
            args[n++] = (char *)exports[i][0];
        }
    }
    for (int i = optind; i < argc; i++) args[n++] = argv[i];
    args[n] = NULL;
    if (dry || !quiet) {
        fprintf(dry ? stdout : stderr, "%s", dry ? "" : "ember launch: running ");
        for (int i = 0; i < n; i++) fprintf(dry ? stdout : stderr, "%s%s", i ? " " : "", args[i]);
        fputc('\n', dry ? stdout : stderr);
    }
    if (!dry) {
        fflush(NULL);
        execvp(args[0], args);   /* args point into c: freed only if exec fails */
        fprintf(stderr, "ember launch: cannot run %s: %s%s\n", args[0], strerror(errno),
                strcmp(args[0], "mpirun") ? "" : " (install OpenMPI: tools/install-deps)");
    }
    free(args);
    launch_config_free(&c);
    return dry ? 0 : 1;
}
