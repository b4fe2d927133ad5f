/* The MPI transport of the pod executor (see mpi.h). Every exchange is the same two steps
 * in every rank: an MPI_Allgather of fixed-size headers (what each rank reached, and a
 * failure with its message), then, only when all headers agree, an MPI_Allgatherv of the
 * ranks' operands, serialized. So a failure or a divergence in one rank ends every rank
 * with the same error, never a hang. The file is built twice (CMakeLists.txt): with MPI into
 * the tpusim-mpi binary, without it (the stubs at the end) into tpusim. */
#include "pod/mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

int tpu_mpi_launched(void) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = getenv("PMI_SIZE");
  if (!v) v = getenv("PMIX_SIZE");
  return v && atoi(v) > 1;
}

#ifdef TPU_HAVE_MPI
#include <limits.h>
#include <mpi.h>

#include "base/strbuf.h"
#include "ir/collective.h"

int tpu_mpi_built(void) { return 1; }

tpu_status tpu_mpi_init(int *rank, int *nranks, tpu_diag *d) {
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "MPI_Init failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "the MPI library does not allow calls from several threads");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, nranks);
  return TPU_OK;
}

void tpu_mpi_finalize(void) { MPI_Finalize(); }

/* ---- Serialized tensors: dtype, rank or tuple size, dims, bytes ---- */

static void put(tpu_strbuf *b, const void *p, size_t n) { tpu_strbuf_append(b, p, n); }

static void put_tensor(tpu_strbuf *b, const tpu_tensor *t) {
  int32_t h[2] = {(int32_t)t->dtype, t->dtype == TPU_TUPLE ? t->ntuple : t->rank};
  put(b, h, sizeof h);
  if (t->dtype == TPU_TUPLE) {
    for (int i = 0; i < t->ntuple; i++) put_tensor(b, &t->elems[i]);
    return;
  }
  put(b, t->dims, sizeof t->dims[0] * (size_t)t->rank);
  uint64_t n = t->dtype == TPU_TOKEN ? 0 : (uint64_t)t->nbytes;
  put(b, &n, sizeof n);
  if (n) put(b, t->data, (size_t)n);
}

typedef struct {
  const char *p, *end;
} reader;

static int get(reader *r, void *out, size_t n) {
  if ((size_t)(r->end - r->p) < n) return 0;
  memcpy(out, r->p, n);
  r->p += n;
  return 1;
}

static tpu_status get_tensor(reader *r, tpu_tensor *t, int depth, tpu_diag *d) {
  memset(t, 0, sizeof *t);
  int32_t h[2];
  if (depth > 64 || !get(r, h, sizeof h)) return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "MPI: a malformed message");
  if (h[0] == TPU_TUPLE) {
    TPU_TRY(tpu_tensor_alloc_tuple(t, h[1], d));
    for (int i = 0; i < h[1]; i++) {
      tpu_status st = get_tensor(r, &t->elems[i], depth + 1, d);
      if (st != TPU_OK) {
        tpu_tensor_free(t);
        return st;
      }
    }
    return TPU_OK;
  }
  int64_t dims[TPU_MAX_RANK];
  uint64_t n;
  if (h[1] < 0 || h[1] > TPU_MAX_RANK || !get(r, dims, sizeof dims[0] * (size_t)h[1]) || !get(r, &n, sizeof n))
    return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "MPI: a malformed message");
  if (h[0] == TPU_TOKEN) {
    t->dtype = TPU_TOKEN;
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_alloc(t, (tpu_dtype)h[0], h[1], dims, d));
  if (n != t->nbytes || !get(r, t->data, (size_t)n)) {
    tpu_tensor_free(t);
    return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "MPI: a malformed message");
  }
  return TPU_OK;
}

/* ---- The transport ---- */

typedef struct {
  int64_t key;
  int32_t failed, status, line, col;
  char file[256];
  char msg[768];
} header;

typedef struct {
  int rank, nranks;
  int64_t ndev;
  header *hdrs;
  tpu_tensor *remote;            /* the other ranks' operands of the current exchange */
  int64_t nremote;
  const tpu_tensor **ptrs;       /* ops[dev] arrays pointing into remote */
} mpi_state;

static int64_t block_start(int64_t ndev, int nranks, int r) { return ndev * r / nranks; }

static void release_remote(void *user) {
  mpi_state *s = user;
  for (int64_t i = 0; i < s->nremote; i++) tpu_tensor_free(&s->remote[i]);
  tpu_free(s->remote);
  tpu_free(s->ptrs);
  s->remote = NULL;
  s->ptrs = NULL;
  s->nremote = 0;
}

/* Sends this rank's bytes and receives everyone's (recv allocated, counts/displs per rank). */
static tpu_status allgatherv(mpi_state *s, const char *mine, size_t n, char **recv, int *counts, int *displs,
                             tpu_diag *d) {
  if (n > INT_MAX) return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "MPI: over 2 GiB of operands from one rank");
  int c = (int)n;
  MPI_Allgather(&c, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int r = 0; r < s->nranks; r++) {
    displs[r] = (int)total;
    total += counts[r];
    if (total > INT_MAX) return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "MPI: over 2 GiB of operands in one exchange");
  }
  *recv = tpu_malloc((size_t)(total ? total : 1));
  if (!*recv) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory");
  MPI_Allgatherv(mine, c, MPI_BYTE, *recv, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
  return TPU_OK;
}

/* need[e] = 1 for every device whose operands one of the devices [lo, hi) reads at `in`. */
static tpu_status needs(const mpi_state *s, const tpu_instr *in, int64_t lo, int64_t hi, unsigned char *need,
                        int64_t *members, tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  memset(need, 0, (size_t)s->ndev);
  if (in->op == TPU_OP_CUSTOM_CALL) { /* a collective Pallas kernel: every process runs every device's */
    memset(need, 1, (size_t)s->ndev);
    return TPU_OK;
  }
  for (int64_t dev = lo; dev < hi; dev++) {
    if (tpu_collective_base(in->op) == TPU_OP_COLLECTIVE_PERMUTE) {
      int64_t src;
      TPU_TRY(tpu_collective_permute_source(in, replicas, partitions, dev, &src, d));
      if (src >= 0) need[src] = 1;
      continue;
    }
    int64_t n, self;
    TPU_TRY(tpu_collective_members(in, replicas, partitions, dev, members, &n, &self, d));
    for (int64_t i = 0; i < n; i++) need[members[i]] = 1;
  }
  return TPU_OK;
}

static tpu_status exchange(void *user, int64_t key, const tpu_instr *in, int failed, const tpu_diag *why,
                           const tpu_tensor *const **ops, int nops, tpu_diag *d) {
  mpi_state *s = user;
  header h;
  memset(&h, 0, sizeof h);
  h.key = key;
  h.failed = failed;
  if (failed && why) {
    h.status = why->status;
    h.line = why->line;
    h.col = why->col;
    memcpy(h.file, why->file, sizeof h.file);
    memcpy(h.msg, why->msg, sizeof h.msg);
    h.file[sizeof h.file - 1] = h.msg[sizeof h.msg - 1] = 0;
  }
  MPI_Allgather(&h, (int)sizeof h, MPI_BYTE, s->hdrs, (int)sizeof h, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < s->nranks; r++)
    if (s->hdrs[r].failed) {
      const header *x = &s->hdrs[r];
      tpu__fail(d, x->status ? (tpu_status)x->status : TPU_ERR_RUNTIME, tpu_loc_at(x->file, x->line, x->col), __FILE__,
                __LINE__, "%s%s", r == s->rank ? "" : "(another rank) ", x->msg);
      return d->status;
    }
  for (int r = 1; r < s->nranks; r++)
    if (s->hdrs[r].key != s->hdrs[0].key) {
      const char *what0 = s->hdrs[0].key == TPU_POD_KEY_END ? "the end of the program" : "a collective";
      const char *whatr = s->hdrs[r].key == TPU_POD_KEY_END ? "the end of the program" : "another collective";
      return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(),
                      "the devices diverged across ranks: rank 0 reached %s (instruction %lld of computation %lld), "
                      "rank %d %s", what0, (long long)(s->hdrs[0].key & 0xffffffff), (long long)(s->hdrs[0].key >> 32), r,
                      whatr);
    }
  if (key == TPU_POD_KEY_END) return TPU_OK;
  /* Only what the other ranks' devices read: rank q gets my devices that its devices'
   * groups (or permute sources) name; I get theirs that mine name. Both sides derive the
   * same lists from the instruction, so the counts agree. */
  int R = s->nranks;
  int64_t first = block_start(s->ndev, R, s->rank), last = block_start(s->ndev, R, s->rank + 1);
  unsigned char *mine = tpu_malloc((size_t)s->ndev), *theirs = tpu_malloc((size_t)s->ndev);
  int64_t *members = tpu_malloc(sizeof *members * (size_t)s->ndev);
  int *scount = tpu_calloc((size_t)R, sizeof *scount), *sdisp = tpu_calloc((size_t)R, sizeof *sdisp);
  int *rcount = tpu_calloc((size_t)R, sizeof *rcount), *rdisp = tpu_calloc((size_t)R, sizeof *rdisp);
  tpu_strbuf out;
  tpu_strbuf_init(&out);
  tpu_status st = mine && theirs && members && scount && sdisp && rcount && rdisp
                      ? TPU_OK
                      : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory");
  if (st == TPU_OK) st = needs(s, in, first, last, mine, members, d);
  /* What each rank needs of mine, serialized rank by rank. */
  for (int q = 0; q < R; q++) {
    sdisp[q] = (int)out.len;
    if (st != TPU_OK || q == s->rank) continue;
    int64_t qlo = block_start(s->ndev, R, q), qhi = block_start(s->ndev, R, q + 1);
    st = needs(s, in, qlo, qhi, theirs, members, d);
    for (int64_t dev = first; st == TPU_OK && dev < last; dev++)
      if (theirs[dev])
        for (int k = 0; k < nops; k++) put_tensor(&out, ops[dev][k]);
    if (out.len > INT_MAX) st = TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "MPI: over 2 GiB of operands for one rank");
    scount[q] = (int)(out.len - (size_t)sdisp[q]);
  }
  if (out.oom && st == TPU_OK) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory");
  if (st != TPU_OK) { /* take part anyway, sending nothing, so no rank hangs */
    memset(scount, 0, sizeof *scount * (size_t)R);
    memset(sdisp, 0, sizeof *sdisp * (size_t)R);
  }
  MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int q = 0; q < R; q++) {
    rdisp[q] = (int)total;
    total += rcount[q];
  }
  char *recv = total <= INT_MAX ? tpu_malloc((size_t)(total ? total : 1)) : NULL;
  if (!recv) { /* still complete the exchange (receive nothing) and report */
    memset(rcount, 0, sizeof *rcount * (size_t)R);
    if (st == TPU_OK) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory receiving operands");
  }
  MPI_Alltoallv(out.s ? out.s : "", scount, sdisp, MPI_BYTE, recv ? recv : (char *)&total, rcount, rdisp, MPI_BYTE,
                MPI_COMM_WORLD);
  tpu_strbuf_deinit(&out);
  int64_t nrem = 0;
  for (int64_t dev = 0; mine && dev < s->ndev; dev++) nrem += mine[dev] && (dev < first || dev >= last);
  nrem *= nops;
  if (st == TPU_OK) {
    s->remote = tpu_calloc((size_t)(nrem ? nrem : 1), sizeof *s->remote);
    s->ptrs = tpu_calloc((size_t)(nrem ? nrem : 1), sizeof *s->ptrs);
    if (!s->remote || !s->ptrs) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory");
  }
  for (int q = 0; st == TPU_OK && q < R; q++) {
    if (q == s->rank) continue;
    reader rd = {recv + rdisp[q], recv + rdisp[q] + rcount[q]};
    for (int64_t dev = block_start(s->ndev, R, q); st == TPU_OK && dev < block_start(s->ndev, R, q + 1); dev++) {
      if (!mine[dev]) continue;
      const tpu_tensor **arr = s->ptrs + s->nremote;
      for (int k = 0; st == TPU_OK && k < nops; k++) {
        st = get_tensor(&rd, &s->remote[s->nremote], 0, d);
        if (st == TPU_OK) arr[k] = &s->remote[s->nremote++];
      }
      ops[dev] = (const tpu_tensor *const *)arr;
    }
  }
  /* Every rank must agree on the outcome (a local failure, e.g. memory, ends them all). */
  int bad = st != TPU_OK, anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anybad && st == TPU_OK) st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "another rank failed trading operands");
  tpu_free(recv);
  tpu_free(mine);
  tpu_free(theirs);
  tpu_free(members);
  tpu_free(scount);
  tpu_free(sdisp);
  tpu_free(rcount);
  tpu_free(rdisp);
  if (st != TPU_OK) release_remote(s);
  return st;
}

static tpu_status gather(void *user, tpu_tensor *outs, tpu_diag *d) {
  mpi_state *s = user;
  int64_t first = block_start(s->ndev, s->nranks, s->rank), last = block_start(s->ndev, s->nranks, s->rank + 1);
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  for (int64_t dev = first; dev < last; dev++) put_tensor(&b, &outs[dev]);
  char *recv = NULL;
  int *counts = tpu_calloc((size_t)s->nranks, sizeof *counts), *displs = tpu_calloc((size_t)s->nranks, sizeof *displs);
  tpu_status st = counts && displs && !b.oom ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "MPI: out of memory");
  if (st == TPU_OK) st = allgatherv(s, b.s ? b.s : "", b.len, &recv, counts, displs, d);
  tpu_strbuf_deinit(&b);
  for (int r = 0; st == TPU_OK && r < s->nranks && s->rank == 0; r++) {
    if (r == s->rank) continue;
    reader rd = {recv + displs[r], recv + displs[r] + counts[r]};
    for (int64_t dev = block_start(s->ndev, s->nranks, r); st == TPU_OK && dev < block_start(s->ndev, s->nranks, r + 1);
         dev++)
      st = get_tensor(&rd, &outs[dev], 0, d);
  }
  tpu_free(recv);
  tpu_free(counts);
  tpu_free(displs);
  return st;
}

tpu_status tpu_mpi_transport_new(int64_t ndev, tpu_pod_transport *tr, tpu_diag *d) {
  memset(tr, 0, sizeof *tr);
  mpi_state *s = tpu_calloc(1, sizeof *s);
  if (!s) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  MPI_Comm_rank(MPI_COMM_WORLD, &s->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s->nranks);
  s->ndev = ndev;
  s->hdrs = tpu_calloc((size_t)s->nranks, sizeof *s->hdrs);
  if (!s->hdrs) {
    tpu_free(s);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  if (s->nranks > ndev) {
    tpu_free(s->hdrs);
    tpu_free(s);
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%d MPI ranks for a module of %lld devices: use at most one rank per device",
                    s->nranks, (long long)ndev);
  }
  tr->rank = s->rank;
  tr->nranks = s->nranks;
  tr->first = block_start(ndev, s->nranks, s->rank);
  tr->count = block_start(ndev, s->nranks, s->rank + 1) - tr->first;
  tr->exchange = exchange;
  tr->release = release_remote;
  tr->gather = gather;
  tr->user = s;
  return TPU_OK;
}

void tpu_mpi_transport_free(tpu_pod_transport *tr) {
  mpi_state *s = tr->user;
  if (s) {
    release_remote(s);
    tpu_free(s->hdrs);
    tpu_free(s);
  }
  memset(tr, 0, sizeof *tr);
}

#else /* no MPI */

int tpu_mpi_built(void) { return 0; }

tpu_status tpu_mpi_init(int *rank, int *nranks, tpu_diag *d) {
  *rank = 0;
  *nranks = 1;
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, tpu_noloc(),
                  "started under mpirun, but this tpusim was built without MPI and has no tpusim-mpi next to it "
                  "(install libopenmpi-dev and rebuild)");
}

void tpu_mpi_finalize(void) {}

tpu_status tpu_mpi_transport_new(int64_t ndev, tpu_pod_transport *tr, tpu_diag *d) {
  (void)ndev;
  memset(tr, 0, sizeof *tr);
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, tpu_noloc(), "this tpusim was built without MPI");
}

void tpu_mpi_transport_free(tpu_pod_transport *tr) { memset(tr, 0, sizeof *tr); }

#endif
