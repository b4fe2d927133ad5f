/* The rules' A/B switches from the environment (TPUSIM_NO_<RULE>=1 turns a compile or timing
 * rule off; docs/fidelity.md, bench/fidelity/probes). */
#ifndef TPU_BASE_ENV_H
#define TPU_BASE_ENV_H

/* 1 when the variable `name` is set to something other than "" or "0". Read at every call,
 * not once: a process may set a switch between runs, and the caches key on the environment
 * (api/diskcache.h tpu_dcache_env_settings), so a recompile must see the switch it was keyed
 * by. */
int tpu_env_flag(const char *name);

#endif
