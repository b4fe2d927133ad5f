/* `tpusim plan`: runs the planner script (tools/plan/plan.py) with python3, passing this
 * binary's own path so that every candidate is timed by the same tpusim. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#ifndef TPU_PLAN_SCRIPT
#define TPU_PLAN_SCRIPT "tools/plan/plan.py"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim plan MODEL.json [--chips v4,v5e,v5p,v6e] [--max-chips N] [--budget USD] [--deadline DAYS]\n"
          "                   [--pricing on-demand|spot|1y|3y] [--top N] [--json] [--svg FILE]\n"
          "                   [--failure-rate PER_CHIP_HOUR] [--checkpoint-every STEPS] [--storage-bw GB/s]\n"
          "                   [--slice N] [--data N] [--fsdp N] [--tensor N] [--micro N] [--remat off|on|both]\n"
          "                   [--no-windowed-einsum] [--xla-async auto|all|all-gather]\n"
          "       tpusim plan buckets LENGTHS.txt [--max-waste PCT] [--align N] [--buckets 64,128,...]\n"
          "\n"
          "Writes each candidate's per-chip training step (data x fsdp x tensor mesh, microbatches, remat),\n"
          "times it with 'tpusim run --mode timing', and ranks those that fit HBM by cost; docs/plan.md.\n"
          "Needs python3 (standard library; matplotlib optional for the SVG). TPUSIM_PLAN=FILE overrides\n"
          "the script (built in: %s).\n",
          TPU_PLAN_SCRIPT);
}

int tpu_cli_plan(int argc, char **argv) {
  if (argc < 2) return tpu_cli_arg_error(-1, 0, "no model given (usage: tpusim plan MODEL.json [options]; see tpusim plan --help)");
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  const char *script = getenv("TPUSIM_PLAN");
  if (!script || !*script) script = TPU_PLAN_SCRIPT;
  struct stat st;
  if (stat(script, &st) != 0 || !S_ISREG(st.st_mode)) {
    return tpu_cli_arg_error(0, 1, "the planner script %s is missing (set TPUSIM_PLAN to tools/plan/plan.py of a tpusim "
                             "tree)", script);
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    return tpu_cli_arg_error(0, 1, "cannot find this tpusim binary's path (/proc/self/exe)");
  }
  self[n] = 0;
  char **args = calloc((size_t)argc + 5, sizeof *args);
  if (!args) {
    return tpu_cli_arg_error(0, 1, "out of memory");
  }
  int k = 0;
  args[k++] = "python3";
  args[k++] = (char *)script;
  args[k++] = "--tpusim";
  args[k++] = self;
  for (int i = 1; i < argc; i++) args[k++] = argv[i];
  args[k] = NULL;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    free(args);
    return tpu_cli_arg_error(0, 1, "cannot start python3: %s", strerror(errno));
  }
  if (pid == 0) {
    execvp("python3", args);
    if (errno == ENOENT)
      tpu_cli_arg_error(0, 1, "tpusim plan needs python3, which is not on PATH (install python3, e.g. apt-get install "
                        "python3)");
    else
      tpu_cli_arg_error(0, 1, "cannot run python3: %s", strerror(errno));
    _exit(2);
  }
  free(args);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      return tpu_cli_arg_error(0, 1, "lost the planner process: %s", strerror(errno));
    }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  tpu_cli_arg_error(0, 1, "the planner was killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 1;
}
