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
          "                   [--no-windowed-einsum]\n"
          "       tpusim plan buckets LENGTHS.txt [--max-waste PCT] [--align N] [--buckets 64,128,...]\n"
          "\n"
          "Writes each candidate's per-chip training step (data x fsdp x tensor mesh, microbatches, remat),\n"
          "times it with 'tpusim run --mode timing', and ranks those that fit HBM by cost; docs/plan.md.\n"
          "Needs python3 (standard library; matplotlib optional for the SVG). TPUSIM_PLAN=FILE overrides\n"
          "the script (built in: %s).\n",
          TPU_PLAN_SCRIPT);
}

int tpu_cli_plan(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  const char *script = getenv("TPUSIM_PLAN");
  if (!script || !*script) script = TPU_PLAN_SCRIPT;
  struct stat st;
  if (stat(script, &st) != 0 || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "error: the planner script %s is missing (set TPUSIM_PLAN to tools/plan/plan.py of a tpusim tree)\n",
            script);
    return 2;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "error: cannot find this tpusim binary's path (/proc/self/exe)\n");
    return 2;
  }
  self[n] = 0;
  char **args = calloc((size_t)argc + 5, sizeof *args);
  if (!args) {
    fprintf(stderr, "error: out of memory\n");
    return 2;
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
    fprintf(stderr, "error: cannot start python3: %s\n", strerror(errno));
    free(args);
    return 2;
  }
  if (pid == 0) {
    execvp("python3", args);
    if (errno == ENOENT)
      fprintf(stderr, "error: tpusim plan needs python3, which is not on PATH (install python3, e.g. "
                      "apt-get install python3)\n");
    else
      fprintf(stderr, "error: cannot run python3: %s\n", strerror(errno));
    _exit(2);
  }
  free(args);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "error: lost the planner process: %s\n", strerror(errno));
      return 2;
    }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fprintf(stderr, "error: the planner was killed by signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 1;
}
