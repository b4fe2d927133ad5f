/* Collective groups read from their attributes: how many devices a collective joins, so a
 * one-chip run can tell an identity (groups of one) from communication it cannot model. */
#include "ir/collective.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *attr_text(const tpu_attr *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(a[i].name, name)) return a[i].value;
  return NULL;
}

int64_t tpu_module_device_count(const tpu_module *m) {
  int64_t n = 1;
  const char *names[2] = {"replica_count", "num_partitions"};
  for (int k = 0; k < 2; k++) {
    const char *v = attr_text(m->attrs, m->nattrs, names[k]);
    long long x = v ? strtoll(v, NULL, 10) : 1;
    if (x > 1) n *= x;
  }
  return n;
}

static const char *skip(const char *p) {
  while (*p == ' ' || *p == '\n' || *p == '\t') p++;
  return p;
}

/* Explicit groups "{{0,1},{2,3}}": the largest group and the count of pairs (x, y) with
 * x != y when each group is read as a source-target pair. Returns 0 if malformed. */
static int read_groups(const char *p, int64_t *largest, int64_t *cross_pairs) {
  *largest = 0;
  *cross_pairs = 0;
  p = skip(p);
  if (*p++ != '{') return 0;
  for (;;) {
    p = skip(p);
    if (*p == '}') return 1;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != '{') return 0;
    int64_t n = 0, first = -1;
    int cross = 0;
    for (;;) {
      p = skip(p);
      if (*p == '}') {
        p++;
        break;
      }
      if (*p == ',') {
        p++;
        continue;
      }
      if (!isdigit((unsigned char)*p)) return 0;
      char *end;
      long long v = strtoll(p, &end, 10);
      p = end;
      if (n == 0) first = v;
      else if (v != first) cross = 1;
      n++;
    }
    if (n > *largest) *largest = n;
    *cross_pairs += cross;
  }
}

tpu_status tpu_collective_devices(const tpu_instr *in, int64_t *devices, tpu_diag *d) {
  *devices = 1;
  const tpu_module *m = in->parent ? in->parent->module : NULL;
  int64_t all = m ? tpu_module_device_count(m) : 1;
  if (in->op == TPU_OP_COLLECTIVE_PERMUTE) {
    const char *v = attr_text(in->attrs, in->nattrs, "source_target_pairs");
    int64_t largest, cross;
    if (!v) return TPU_OK;
    if (!read_groups(v, &largest, &cross))
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "cannot read source_target_pairs of '%s'", tpu_instr_user_name(in));
    *devices = cross ? 2 : 1;
    return TPU_OK;
  }
  const char *v = attr_text(in->attrs, in->nattrs, "replica_groups");
  if (!v) {
    *devices = all;
    return TPU_OK;
  }
  v = skip(v);
  if (*v == '[') { /* iota form [groups,size]<=[...]: the group size is the second number */
    char *end;
    long long g = strtoll(v + 1, &end, 10);
    end = (char *)skip(end);
    long long size = *end == ',' ? strtoll(end + 1, NULL, 10) : 0;
    if (g <= 0 || size <= 0)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "cannot read replica_groups of '%s'", tpu_instr_user_name(in));
    *devices = size;
    return TPU_OK;
  }
  if (!strncmp(v, "mesh", 4)) { /* mesh-axes form: communication unless every named axis is 1 */
    *devices = all;
    return TPU_OK;
  }
  int64_t largest, cross;
  if (!read_groups(v, &largest, &cross))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "cannot read replica_groups of '%s'", tpu_instr_user_name(in));
  *devices = largest == 0 ? all : largest; /* {} is one group of every device */
  return TPU_OK;
}

tpu_status tpu_collective_check_one_device(const tpu_instr *in, tpu_diag *d) {
  int64_t n;
  TPU_TRY(tpu_collective_devices(in, &n, d));
  if (n <= 1) return TPU_OK;
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                  "%s '%s' communicates across %lld devices; tpusim runs one chip and does not model "
                  "collectives yet (only groups of one device run, as the identity)",
                  tpu_op_name(in->op), tpu_instr_user_name(in), (long long)n);
}
