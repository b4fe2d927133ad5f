/* The CLI's on-disk cache: one file per entry, named by the hash of its key, holding the
 * whole key (compared on every hit) and the stored parts behind a checksum. */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include "api/diskcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "tpusim/tpusim.h"

static const char k_magic[8] = {'T', 'P', 'U', 'S', 'I', 'M', 'C', '\n'};
#define SUFFIX ".tpc"
#define MAX_PARTS 16
#define DEFAULT_MAX_MB 1024

/* ---------------------------------------------------------------- hashing */

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Four independent lanes over 32-byte blocks (xxHash64's round), so that the multiplies of
 * one block overlap instead of waiting on each other: a warm run hashes its key (the program
 * text, the chip's digest) three times and the chip struct twice, 0.2 ms of a 65 KB program's
 * run in one serial chain. The tail and the length go through the serial step. */
uint64_t tpu_dcache_hash(const void *p, size_t n, uint64_t seed) {
  const uint64_t P1 = 0x9e3779b185ebca87ull, P2 = 0xc2b2ae3d27d4eb4full;
  const unsigned char *b = p;
  uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull) ^ (uint64_t)n;
  size_t i = 0;
  if (n >= 32) {
    uint64_t v[4] = {h + P1 + P2, h + P2, h, h - P1};
    for (; i + 32 <= n; i += 32)
      for (int j = 0; j < 4; j++) {
        uint64_t w;
        memcpy(&w, b + i + 8 * (size_t)j, 8);
        v[j] = rotl(v[j] + w * P2, 31) * P1;
      }
    h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int j = 0; j < 4; j++) h = (h ^ mix(v[j])) * 0x100000001b3ull;
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ mix(w)) * 0x100000001b3ull;
    h = rotl(h, 31);
  }
  uint64_t w = 0;
  memcpy(&w, b + i, n - i);
  h = (h ^ mix(w ^ 0xa5)) * 0x100000001b3ull;
  return mix(h);
}

/* ---------------------------------------------------------------- the build's identity */

typedef struct {
  const void *addr; /* an address inside this code */
  char id[96];
  const char *file;
} find_build;

static int on_object(struct dl_phdr_info *info, size_t size, void *user) {
  find_build *fb = user;
  uintptr_t a = (uintptr_t)fb->addr;
  int inside = 0;
  for (int i = 0; i < info->dlpi_phnum && !inside; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    inside = ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz;
  }
  if (!inside) return 0;
  fb->file = info->dlpi_name;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const unsigned char *q = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = q + ph->p_memsz;
    while (q + 12 <= end) {
      uint32_t nsz, dsz, type;
      memcpy(&nsz, q, 4);
      memcpy(&dsz, q + 4, 4);
      memcpy(&type, q + 8, 4);
      const unsigned char *name = q + 12, *desc = name + ((nsz + 3) & ~3u);
      if (desc + dsz > end) break;
      if (type == 3 /* NT_GNU_BUILD_ID */ && nsz == 4 && !memcmp(name, "GNU", 4) && dsz > 0 && dsz <= 40) {
        for (uint32_t k = 0; k < dsz; k++) snprintf(fb->id + 2 * k, 3, "%02x", desc[k]);
        return 1;
      }
      q = desc + ((dsz + 3) & ~3u);
    }
  }
  return 1;
}

const char *tpu_dcache_build_id(void) {
  static char id[160];
  if (id[0]) return id;
  find_build fb;
  memset(&fb, 0, sizeof fb);
  fb.addr = (const void *)&tpu_dcache_build_id;
  dl_iterate_phdr(on_object, &fb);
  if (fb.id[0]) {
    snprintf(id, sizeof id, "%s build %s", tpu_version(), fb.id);
  } else { /* no build id: the binary's size and modification time */
    const char *file = fb.file && fb.file[0] ? fb.file : "/proc/self/exe";
    struct stat st;
    if (stat(file, &st) != 0) memset(&st, 0, sizeof st);
    snprintf(id, sizeof id, "%s file %lld %lld.%09ld", tpu_version(), (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  }
  return id;
}

extern char **environ;

static int is_cache_var(const char *e) {
  static const char *const own[] = {"TPUSIM_CACHE=", "TPUSIM_CACHE_DIR=", "TPUSIM_CACHE_MAX_MB=", "TPUSIM_CACHE_LOG=",
                                    "TPUSIM_CACHE_ENTRIES="};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (!strncmp(e, own[i], strlen(own[i]))) return 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

char *tpu_dcache_env_settings(void) {
  size_t n = 0, bytes = 1;
  for (char **e = environ; e && *e; e++)
    if (!strncmp(*e, "TPUSIM_", 7) && !is_cache_var(*e)) n++, bytes += strlen(*e) + 1;
  const char **v = tpu_malloc((n ? n : 1) * sizeof *v);
  char *out = tpu_malloc(bytes);
  if (!v || !out) {
    tpu_free(v);
    tpu_free(out);
    return NULL;
  }
  size_t k = 0;
  for (char **e = environ; e && *e && k < n; e++)
    if (!strncmp(*e, "TPUSIM_", 7) && !is_cache_var(*e)) v[k++] = *e;
  qsort(v, k, sizeof *v, cmp_str);
  char *q = out;
  for (size_t i = 0; i < k; i++) {
    size_t l = strlen(v[i]);
    memcpy(q, v[i], l);
    q += l;
    *q++ = '\n';
  }
  *q = 0;
  tpu_free(v);
  return out;
}

/* ---------------------------------------------------------------- the folder */

static int mkdir_p(const char *dir) {
  char *p = tpu_malloc(strlen(dir) + 1);
  if (!p) return -1;
  strcpy(p, dir);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        tpu_free(p);
        return -1;
      }
      *s = '/';
    }
  int rc = mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
  struct stat st;
  if (rc == 0 && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) rc = -1;
  tpu_free(p);
  return rc;
}

void tpu_dcache_open(tpu_dcache *c, const char *dir, int off) {
  memset(c, 0, sizeof *c);
  const char *sw = getenv("TPUSIM_CACHE");
  if (off || (sw && (!strcmp(sw, "0") || !strcmp(sw, "off")))) return;
  const char *env = getenv("TPUSIM_CACHE_DIR");
  int given = 1;
  char buf[4096];
  if (dir && *dir) {
    snprintf(buf, sizeof buf, "%s", dir);
  } else if (env && *env) {
    snprintf(buf, sizeof buf, "%s", env);
  } else {
    given = 0;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(buf, sizeof buf, "%s/tpusim", xdg);
    else if (home && home[0] == '/') snprintf(buf, sizeof buf, "%s/.cache/tpusim", home);
    else return;
  }
  if (mkdir_p(buf) != 0) {
    if (given) fprintf(stderr, "tpusim: warning: cache folder %s: %s; running without the cache\n", buf, strerror(errno));
    return;
  }
  c->dir = tpu_malloc(strlen(buf) + 1);
  if (!c->dir) return;
  strcpy(c->dir, buf);
  const char *mb = getenv("TPUSIM_CACHE_MAX_MB");
  char *end;
  double v = mb && *mb ? strtod(mb, &end) : -1;
  c->max_bytes = (int64_t)((mb && *mb && !*end && v >= 0 && v < 1e9 ? v : DEFAULT_MAX_MB) * 1048576.0);
  const char *log = getenv("TPUSIM_CACHE_LOG");
  c->log = log && *log && strcmp(log, "0");
}

void tpu_dcache_close(tpu_dcache *c) {
  tpu_free(c->dir);
  c->dir = NULL;
}

/* DIR/<32 hex digits>.tpc */
static char *entry_path(const tpu_dcache *c, const void *key, size_t keylen) {
  size_t n = strlen(c->dir) + 48;
  char *p = tpu_malloc(n);
  if (p)
    snprintf(p, n, "%s/%016llx%016llx" SUFFIX, c->dir, (unsigned long long)tpu_dcache_hash(key, keylen, 1),
             (unsigned long long)tpu_dcache_hash(key, keylen, 2));
  return p;
}

/* ---------------------------------------------------------------- entries */

/* Header: magic[8], u32 format, u32 nparts, u64 keylen, u64 checksum, u64 len[nparts];
 * then the key and the parts. The checksum covers the lengths, the key and the parts. */
#define HEAD 32

static uint64_t entry_checksum(const unsigned char *lens, size_t nlens, const unsigned char *body, size_t nbody) {
  return tpu_dcache_hash(lens, nlens, 7) ^ mix(tpu_dcache_hash(body, nbody, 8));
}

static void warn_corrupt(const char *path, const char *why) {
  fprintf(stderr, "tpusim: warning: cache entry %s is corrupt (%s); it is removed and rebuilt\n", path, why);
  unlink(path);
}

static unsigned char *read_all(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  unsigned char *buf = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0) {
    size_t n = (size_t)st.st_size, got = 0;
    buf = tpu_malloc(n ? n : 1);
    while (buf && got < n) {
      ssize_t r = read(fd, buf + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (buf && got != n) {
      tpu_free(buf);
      buf = NULL;
    }
    *len = n;
  }
  close(fd);
  return buf;
}

int tpu_dcache_get(const tpu_dcache *c, const void *key, size_t keylen, int nparts, tpu_dcache_part *out) {
  for (int i = 0; i < nparts; i++) out[i].data = NULL, out[i].len = 0;
  if (!c->dir || nparts < 0 || nparts > MAX_PARTS) return 0;
  char *path = entry_path(c, key, keylen);
  if (!path) return 0;
  size_t n = 0;
  unsigned char *buf = read_all(path, &n);
  int hit = 0;
  if (!buf) goto out;
  uint32_t fmt, np;
  uint64_t kl, sum, lens[MAX_PARTS];
  if (n < HEAD || memcmp(buf, k_magic, 8)) {
    warn_corrupt(path, "not a tpusim cache entry");
    goto out;
  }
  memcpy(&fmt, buf + 8, 4);
  if (fmt != TPU_DCACHE_FORMAT) goto out; /* another version's entry: a miss */
  memcpy(&np, buf + 12, 4);
  memcpy(&kl, buf + 16, 8);
  memcpy(&sum, buf + 24, 8);
  if (np != (uint32_t)nparts || n < HEAD + 8 * (size_t)np) {
    warn_corrupt(path, "bad header");
    goto out;
  }
  memcpy(lens, buf + HEAD, 8 * (size_t)np);
  uint64_t total = HEAD + 8 * (uint64_t)np + kl;
  for (uint32_t i = 0; i < np && total <= n; i++) total += lens[i] <= n ? lens[i] : (uint64_t)n + 1;
  if (kl > n || total != n) {
    warn_corrupt(path, "bad lengths");
    goto out;
  }
  const unsigned char *body = buf + HEAD + 8 * (size_t)np;
  if (entry_checksum(buf + HEAD, 8 * (size_t)np, body, n - HEAD - 8 * (size_t)np) != sum) {
    warn_corrupt(path, "bad checksum");
    goto out;
  }
  if (kl != keylen || memcmp(body, key, keylen)) goto out; /* another key with the same hash */
  const unsigned char *q = body + kl;
  hit = 1;
  for (int i = 0; i < nparts && hit; i++) {
    out[i].data = tpu_malloc(lens[i] + 1);
    if (!out[i].data) {
      hit = 0;
      break;
    }
    memcpy(out[i].data, q, lens[i]);
    out[i].data[lens[i]] = 0;
    out[i].len = lens[i];
    q += lens[i];
  }
  if (!hit)
    for (int i = 0; i < nparts; i++) {
      tpu_free(out[i].data);
      out[i].data = NULL;
      out[i].len = 0;
    }
  else
    utimensat(AT_FDCWD, path, NULL, 0); /* recently used: kept longest when trimming */
out:
  if (c->log) fprintf(stderr, "tpusim: cache %s %s\n", hit ? "hit" : "miss", path);
  tpu_free(buf);
  tpu_free(path);
  return hit;
}

typedef struct {
  char name[64];
  int64_t size;
  struct timespec mtime;
} dir_entry;
_Static_assert(32 + sizeof SUFFIX <= sizeof ((dir_entry *)0)->name, "a cache entry's name fits dir_entry.name");

static int older_first(const void *a, const void *b) {
  const dir_entry *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Removes the least recently used entries until the folder holds at most max_bytes, and
 * temporary files an interrupted writer left more than an hour ago. */
static void trim(const tpu_dcache *c) {
  DIR *dp = opendir(c->dir);
  if (!dp) return;
  dir_entry *v = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  char full[4200];
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(dp))) {
    size_t len = strlen(e->d_name);
    int entry = len == 32 + strlen(SUFFIX) && !strcmp(e->d_name + 32, SUFFIX);
    int tmp = len > 32 + strlen(SUFFIX) && strstr(e->d_name, SUFFIX ".tmp.") == e->d_name + 32;
    if (!entry && !tmp) continue;
    snprintf(full, sizeof full, "%s/%s", c->dir, e->d_name);
    struct stat st;
    if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (tmp) {
      if (now - st.st_mtim.tv_sec > 3600) unlink(full);
      continue;
    }
    if (n == cap) {
      size_t nc = cap ? 2 * cap : 64;
      dir_entry *nv = tpu_realloc(v, nc * sizeof *nv);
      if (!nv) break;
      v = nv;
      cap = nc;
    }
    /* an entry's name is 32 hex digits and the suffix, which fits (checked below) */
    memcpy(v[n].name, e->d_name, len + 1);
    v[n].size = (int64_t)st.st_size;
    v[n].mtime = st.st_mtim;
    total += v[n].size;
    n++;
  }
  closedir(dp);
  if (total > c->max_bytes && n) {
    qsort(v, n, sizeof *v, older_first);
    for (size_t i = 0; i < n && total > c->max_bytes; i++) {
      snprintf(full, sizeof full, "%s/%s", c->dir, v[i].name);
      if (unlink(full) == 0 || errno == ENOENT) total -= v[i].size;
    }
  }
  tpu_free(v);
}

int tpu_dcache_put(const tpu_dcache *c, const void *key, size_t keylen, int nparts, const tpu_dcache_part *parts) {
  if (!c->dir || nparts < 0 || nparts > MAX_PARTS) return 0;
  uint64_t lens[MAX_PARTS];
  size_t body = keylen;
  for (int i = 0; i < nparts; i++) {
    lens[i] = parts[i].len;
    body += parts[i].len;
  }
  size_t size = HEAD + 8 * (size_t)nparts + body;
  if (c->max_bytes > 0 && (int64_t)size > c->max_bytes / 2) return 0;
  unsigned char *buf = tpu_malloc(size);
  char *path = entry_path(c, key, keylen);
  int ok = 0;
  if (buf && path) {
    uint32_t fmt = TPU_DCACHE_FORMAT, np = (uint32_t)nparts;
    uint64_t kl = keylen;
    memcpy(buf, k_magic, 8);
    memcpy(buf + 8, &fmt, 4);
    memcpy(buf + 12, &np, 4);
    memcpy(buf + 16, &kl, 8);
    memcpy(buf + HEAD, lens, 8 * (size_t)nparts);
    unsigned char *q = buf + HEAD + 8 * (size_t)nparts;
    if (keylen) memcpy(q, key, keylen);
    q += keylen;
    for (int i = 0; i < nparts; i++) {
      if (parts[i].len) memcpy(q, parts[i].data, parts[i].len);
      q += parts[i].len;
    }
    uint64_t sum = entry_checksum(buf + HEAD, 8 * (size_t)nparts, buf + HEAD + 8 * (size_t)nparts, body);
    memcpy(buf + 24, &sum, 8);
    char *tmp;
    FILE *f;
    tpu_diag d;
    if (tpu_file_begin(path, &tmp, &f, &d) == TPU_OK) {
      int w = fwrite(buf, 1, size, f) == size;
      ok = tpu_file_commit(path, tmp, f, w, &d) == TPU_OK;
    }
  }
  if (c->log) fprintf(stderr, "tpusim: cache %s %s\n", ok ? "stored" : "not stored", path ? path : "");
  tpu_free(buf);
  tpu_free(path);
  if (ok && c->max_bytes > 0) trim(c);
  return ok;
}
