/* The on-disk cache of the CLI (as XLA's persistent compilation cache): what compiling and
 * timing a program produced, kept in a folder between processes, found by a key that holds
 * the program text and every setting that changes the result. */
#ifndef TPU_API_DISKCACHE_H
#define TPU_API_DISKCACHE_H

#include <stddef.h>
#include <stdint.h>

/* The folder and its size bound. dir NULL: the cache is off. */
typedef struct tpu_dcache {
  char *dir;          /* owned */
  int64_t max_bytes;  /* entries past it are removed, least recently used first (0: no bound) */
  int log;            /* $TPUSIM_CACHE_LOG: each lookup and store is a line on stderr */
} tpu_dcache;

/* One stored part of an entry (a printed section, a file's bytes). */
typedef struct tpu_dcache_part {
  unsigned char *data; /* tpu_dcache_get: owned by the caller (tpu_free); put: read only */
  size_t len;
} tpu_dcache_part;

/* The format of an entry file; a file of another version is a miss (rewritten by the next
 * store), not an error. */
#define TPU_DCACHE_FORMAT 1

/* Opens the cache: the folder `dir` (a --cache-dir flag) or else $TPUSIM_CACHE_DIR or else
 * $XDG_CACHE_HOME/tpusim or else $HOME/.cache/tpusim; off when `off` (--no-cache) or
 * $TPUSIM_CACHE is 0 or off. Its size bound is $TPUSIM_CACHE_MAX_MB (MiB, default 1024;
 * 0: none). A folder
 * that cannot be created turns the cache off, with a warning on stderr when it was given
 * (flag or environment). $TPUSIM_CACHE_LOG=1 prints "tpusim: cache hit|miss|stored FILE" per
 * lookup and store on stderr. Never fails. */
void tpu_dcache_open(tpu_dcache *c, const char *dir, int off);
void tpu_dcache_close(tpu_dcache *c);

/* The identity of this build, for keys: the GNU build id of the binary holding this code
 * (a changed source gives a new one), else the version and the binary's size and time. */
const char *tpu_dcache_build_id(void);

/* The environment's settings that change a compiled program or its timing, for keys: every
 * TPUSIM_* variable (the rule switches TPUSIM_NO_*, the experiments) but the caches' own
 * (TPUSIM_CACHE, TPUSIM_CACHE_DIR, TPUSIM_CACHE_MAX_MB, TPUSIM_CACHE_LOG,
 * TPUSIM_CACHE_ENTRIES), as "NAME=VALUE\n" lines in byte order, read at each call (a process
 * may change its environment between runs). Caller frees (tpu_free); "" when there are none;
 * NULL when out of memory. */
char *tpu_dcache_env_settings(void);

/* Looks `key` up. A hit returns 1 with nparts parts (each owned by the caller). A miss
 * returns 0; so does a corrupt entry (bad header, lengths or checksum), after a warning on
 * stderr and removing it, so that the run rebuilds it. */
int tpu_dcache_get(const tpu_dcache *c, const void *key, size_t keylen, int nparts, tpu_dcache_part *out);

/* Stores an entry: written to a temporary file in the folder and renamed into place, so a
 * reader sees a whole entry or none, and concurrent writers of one key leave one of their
 * (identical) entries. Then trims the folder to its bound. Best effort: returns 0 when it
 * was not stored (the folder's error, or an entry larger than half the bound). */
int tpu_dcache_put(const tpu_dcache *c, const void *key, size_t keylen, int nparts, const tpu_dcache_part *parts);

/* A 64-bit hash of n bytes (not cryptographic; keys are also compared whole). */
uint64_t tpu_dcache_hash(const void *p, size_t n, uint64_t seed);

#endif
