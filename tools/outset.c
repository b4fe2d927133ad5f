/* A run's results as one set: written into a temporary folder beside the target, then
 * swapped into place at once, so DIR holds a complete earlier set or the complete new one,
 * never a mix (docs/errors.md "Results"). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE /* a C library without renameat2 (musl before 1.2.5): the system call */
#include <sys/syscall.h>
#define RENAME_EXCHANGE (1 << 1)
static int renameat2(int ofd, const char *from, int nfd, const char *to, unsigned flags) {
#ifdef SYS_renameat2
  return (int)syscall(SYS_renameat2, ofd, from, nfd, to, flags);
#else
  (void)ofd, (void)from, (void)nfd, (void)to, (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}
#endif

#include "base/alloc.h"
#include "cli.h"

#define TMP_TAG ".tpusim-" /* .BASE.tpusim-PID-XXXXXX */

/* A result set's own names: N.npy (and devD/ folders of them with --per-device). */
static int is_result_name(const char *n, int top) {
  const char *p = n;
  if (top && !strncmp(p, "dev", 3)) {
    p += 3;
    if (!*p) return 0;
    while (*p >= '0' && *p <= '9') p++;
    return *p == 0 ? 2 : 0;
  }
  if (*p < '0' || *p > '9') return 0;
  while (*p >= '0' && *p <= '9') p++;
  return !strcmp(p, ".npy");
}

/* 1 if `dir` holds only what a run writes (an empty folder included). */
static int only_results(const char *dir, int top) {
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  int ok = 1;
  struct dirent *e;
  while (ok && (e = readdir(dp))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    int k = is_result_name(e->d_name, top);
    char sub[4096 + 512];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    struct stat st;
    if (!k || lstat(sub, &st) != 0) ok = 0;
    else if (k == 2) ok = S_ISDIR(st.st_mode) && only_results(sub, 0);
    else ok = S_ISREG(st.st_mode);
  }
  closedir(dp);
  return ok;
}

/* Removes a folder of results (two levels at most) or a file; best effort. */
static void remove_tree(const char *path) {
  DIR *dp = opendir(path);
  if (!dp) {
    unlink(path);
    return;
  }
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[4096 + 512];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    struct stat st;
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(sub);
    else unlink(sub);
  }
  closedir(dp);
  rmdir(path);
}

/* The parent folder and last name of `dir` (trailing slashes dropped); 0 if it has none. */
static int split_path(const char *dir, char *parent, size_t np, char *base, size_t nb) {
  char buf[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof buf) return 0;
  memcpy(buf, dir, n + 1);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
  char *slash = strrchr(buf, '/');
  const char *b = slash ? slash + 1 : buf;
  if (!*b || !strcmp(b, ".") || !strcmp(b, "..")) return 0;
  if (snprintf(base, nb, "%s", b) >= (int)nb) return 0;
  if (!slash) snprintf(parent, np, ".");
  else if (slash == buf) snprintf(parent, np, "/");
  else {
    *slash = 0;
    if (snprintf(parent, np, "%s", buf) >= (int)np) return 0;
  }
  return 1;
}

int tpu_outset_check(const char *dir, int argi) {
  char parent[4096], base[1024];
  if (!split_path(dir, parent, sizeof parent, base, sizeof base))
    return tpu_cli_arg_error(argi, 1, "-o takes a folder to hold the results, not '%s'", dir);
  struct stat st;
  if (lstat(dir, &st) != 0) return 0; /* created at the end */
  if (!S_ISDIR(st.st_mode))
    return tpu_cli_arg_error(argi, 1, "'%s' exists and is not a folder; -o takes a folder for the results", dir);
  if (!only_results(dir, 1))
    return tpu_cli_arg_error(argi, 1,
                             "'%s' holds files that are not tpusim results (N.npy, devD/); -o replaces the folder "
                             "as a whole, so give a new or empty one",
                             dir);
  return 0;
}

/* Removes temporary folders of `base` left by runs that were killed (their process is gone). */
static void sweep_stale(const char *parent, const char *base) {
  DIR *dp = opendir(parent);
  if (!dp) return;
  char prefix[1100];
  snprintf(prefix, sizeof prefix, ".%s" TMP_TAG, base);
  size_t np = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(dp))) {
    if (strncmp(e->d_name, prefix, np)) continue;
    long pid = strtol(e->d_name + np, NULL, 10);
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
      char sub[4096 + 512];
      snprintf(sub, sizeof sub, "%s/%s", parent, e->d_name);
      remove_tree(sub);
    }
  }
  closedir(dp);
}

/* A fresh temporary folder beside `dir`; NULL with errno set on failure. */
static char *make_temp(const char *dir) {
  char parent[4096], base[1024];
  if (!split_path(dir, parent, sizeof parent, base, sizeof base)) {
    errno = EINVAL;
    return NULL;
  }
  sweep_stale(parent, base);
  size_t n = strlen(parent) + strlen(base) + 64;
  char *tmp = tpu_malloc(n);
  if (!tmp) {
    errno = ENOMEM;
    return NULL;
  }
  snprintf(tmp, n, "%s/.%s" TMP_TAG "%ld-XXXXXX", parent, base, (long)getpid());
  if (!mkdtemp(tmp)) {
    int e = errno;
    tpu_free(tmp);
    errno = e;
    return NULL;
  }
  mode_t mask = umask(0); /* a result folder gets mkdir's usual mode, not mkdtemp's 0700 */
  umask(mask);
  chmod(tmp, 0777 & ~mask);
  return tmp;
}

/* mkdir -p of the folder that will hold `dir`. */
static int make_parents(const char *dir) {
  char parent[4096], base[1024];
  if (!split_path(dir, parent, sizeof parent, base, sizeof base)) {
    errno = EINVAL;
    return -1;
  }
  for (char *p = parent + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(parent, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(parent, 0777) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

tpu_status tpu_outset_begin(tpu_outset *o, const char *dir, tpu_diag *d) {
  o->dir = dir;
  o->tmp = NULL;
  if (make_parents(dir) != 0 || !(o->tmp = make_temp(dir)))
    return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(dir, 0, 0), "cannot create the output folder: %s", strerror(errno));
  return TPU_OK;
}

void tpu_outset_abort(tpu_outset *o) {
  if (o->tmp) remove_tree(o->tmp);
  tpu_free(o->tmp);
  o->tmp = NULL;
}

tpu_status tpu_outset_commit(tpu_outset *o, tpu_diag *d) {
  struct stat st;
  int e = 0;
  if (lstat(o->dir, &st) != 0) { /* nothing there yet */
    if (rename(o->tmp, o->dir) != 0) e = errno;
  } else if (!S_ISDIR(st.st_mode) || !only_results(o->dir, 1)) {
    e = EEXIST; /* something else appeared there during the run: leave it alone */
  } else if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->dir, RENAME_EXCHANGE) != 0) {
    /* no atomic exchange on this file system: the old set aside, then the new one in */
    char *old = make_temp(o->dir);
    if (!old || rename(o->dir, old) != 0 || rename(o->tmp, o->dir) != 0) e = errno ? errno : EIO;
    if (old) {
      remove_tree(old);
      tpu_free(old);
    }
  }
  /* o->tmp now holds the earlier set (exchanged), nothing (renamed), or the new set (failed) */
  tpu_outset_abort(o);
  if (e) return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(o->dir, 0, 0), "cannot put the results in place: %s", strerror(e));
  return TPU_OK;
}

/* 1 if the folder has no entries. */
static int is_empty(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dp)))
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(dp);
  return n == 0;
}

void tpu_outset_discard(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || is_empty(dir) || !only_results(dir, 1)) return;
  char *old = make_temp(dir);
  if (!old) return;
  if (rename(dir, old) == 0) remove_tree(old); /* DIR disappears at once */
  else rmdir(old);
  tpu_free(old);
}
