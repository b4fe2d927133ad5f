#!/usr/bin/env python3
"""pod_transformer.py: a transformer training step as the per-chip SPMD program of a pod,
written directly as HLO text (no JAX needed), for timing pods of any size.

The model is decoder-only with multi-head attention and a tanh MLP, trained with FSDP over
`dp` chips and Megatron tensor parallelism over `tp` chips (chip id = d * tp + t):
  per layer, forward: all-gather of each weight shard over dp (weights whose first
  dimension does not divide by dp are replicated instead, their gradients all-reduced), QKV / attention / output
  projection, all-reduce over tp, MLP up / down, all-reduce over tp;
  backward: two matmuls per forward matmul (activation and weight gradients), the
  all-reduces of the activation gradients over tp, and a reduce-scatter of every weight
  gradient over dp.
The layers run as one while loop (XLA's scan) with a known trip count.

  python3 bench/pod_transformer.py --layers 118 --d-model 18432 --heads 48 --head-dim 256 \\
      --ffn 73728 --seq 2048 --batch 2048 --dp 512 --tp 12 -o palm540b_6144.hlo

(PaLM 540B's shape [Chowdhery et al. 2022, Table 1]: 118 layers, d_model 18432, 48 heads of
256, feed-forward 4 x d_model = 73728, sequence 2048, batch 2048; PaLM used multi-query
attention and SwiGLU, which this generator does not model.)"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64, help="global batch (sequences)")
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("-o", "--out", default="-")
    a = ap.parse_args()
    L, D, H, hd, F, S, B, dp, tp = (a.layers, a.d_model, a.heads, a.head_dim, a.ffn, a.seq, a.batch, a.dp, a.tp)
    for what, n, m in (("batch", B, dp), ("heads", H, tp), ("ffn", F, tp)):
        if n % m:
            sys.exit(f"error: {what} {n} does not divide by {m}")
    N = dp * tp
    b = B // dp             # sequences per chip
    T = b * S               # tokens per chip
    h = H // tp             # heads per chip
    A = h * hd              # attention width per chip
    f = F // tp             # MLP width per chip
    Dd = D // dp            # FSDP shard of the model dimension
    # dp groups hold the chips of one tp rank; tp groups the chips of one dp rank.
    g_tp = f"[{dp},{tp}]<=[{N}]"
    g_dp = f"[{tp},{dp}]<=[{dp},{tp}]T(1,0)"
    bf = "bf16"
    # Weights per chip (FSDP shards on dimension 0 where it divides by dp; else replicated
    # with gradients all-reduced over dp): wqkv [D, 3A], wo [A, D], w1 [D, f], w2 [f, D].
    wshapes = {"wqkv": (D, 3 * A), "wo": (A, D), "w1": (D, f), "w2": (f, D)}
    wshard = {k: (v[0] // dp if v[0] % dp == 0 else v[0], v[1]) for k, v in wshapes.items()}
    state = ["s32[]", f"{bf}[{T},{D}]"] + [f"{bf}[{wshard[k][0]},{wshard[k][1]}]" for k in wshapes]
    st = "(" + ", ".join(state) + ")"
    out = []
    w = out.append
    w(f"HloModule transformer_{L}x{D}_dp{dp}_tp{tp}, num_partitions={N}")
    w("")
    w("add_bf16 {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT r = bf16[] add(a, b)\n}")
    w("max_bf16 {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT r = bf16[] maximum(a, b)\n}")
    w("")
    w(f"cond {{\n  s = {st} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
      f"  n = s32[] constant({L})\n  ROOT c = pred[] compare(i, n), direction=LT\n}}")
    w("")
    body = []
    e = body.append
    e(f"  s = {st} parameter(0)")
    e("  i = s32[] get-tuple-element(s), index=0")
    e(f"  x = {bf}[{T},{D}] get-tuple-element(s), index=1")
    names = list(wshapes)
    for k, nm in enumerate(names):
        r, c = wshard[nm]
        e(f"  {nm}.s = {bf}[{r},{c}] get-tuple-element(s), index={k + 2}")
        R, C = wshapes[nm]
        if r != R:  # FSDP: gather the full weight over dp
            e(f"  {nm} = {bf}[{R},{C}] all-gather({nm}.s), channel_id={k + 1}, replica_groups={g_dp}, "
              f"dimensions={{0}}, use_global_device_ids=true")
        else:
            e(f"  {nm} = {bf}[{R},{C}] copy({nm}.s)")
    ch = [100]

    def chan():
        ch[0] += 1
        return ch[0]

    def dot(name, lhs, rhs, m, k, n, lc=1, rc=0):
        e(f"  {name} = {bf}[{m},{n}] dot({lhs}, {rhs}), lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{{rc}}}")

    def allreduce_tp(name, x, m, n):
        if tp == 1:
            e(f"  {name} = {bf}[{m},{n}] copy({x})")
        else:
            e(f"  {name} = {bf}[{m},{n}] all-reduce({x}), channel_id={chan()}, replica_groups={g_tp}, "
              f"use_global_device_ids=true, to_apply=add_bf16")

    # Forward.
    dot("qkv", "x", "wqkv", T, D, 3 * A)
    e(f"  q = {bf}[{T},{A}] slice(qkv), slice={{[0:{T}], [0:{A}]}}")
    e(f"  kk = {bf}[{T},{A}] slice(qkv), slice={{[0:{T}], [{A}:{2 * A}]}}")
    e(f"  v = {bf}[{T},{A}] slice(qkv), slice={{[0:{T}], [{2 * A}:{3 * A}]}}")
    for nm in ("q", "kk", "v"):
        e(f"  {nm}4 = {bf}[{b},{S},{h},{hd}] reshape({nm})")
    e(f"  sc = {bf}[{b},{h},{S},{S}] dot(q4, kk4), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{3}}")
    e(f"  ninf = {bf}[] constant(-inf)")
    e(f"  mx = {bf}[{b},{h},{S}] reduce(sc, ninf), dimensions={{3}}, to_apply=max_bf16")
    e(f"  mxb = {bf}[{b},{h},{S},{S}] broadcast(mx), dimensions={{0,1,2}}")
    e(f"  sh = {bf}[{b},{h},{S},{S}] subtract(sc, mxb)")
    e(f"  ex = {bf}[{b},{h},{S},{S}] exponential(sh)")
    e(f"  zero = {bf}[] constant(0)")
    e(f"  sm = {bf}[{b},{h},{S}] reduce(ex, zero), dimensions={{3}}, to_apply=add_bf16")
    e(f"  smb = {bf}[{b},{h},{S},{S}] broadcast(sm), dimensions={{0,1,2}}")
    e(f"  p = {bf}[{b},{h},{S},{S}] divide(ex, smb)")
    e(f"  ctx4 = {bf}[{b},{h},{S},{hd}] dot(p, v4), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}")
    e(f"  ctxt = {bf}[{b},{S},{h},{hd}] transpose(ctx4), dimensions={{0,2,1,3}}")
    e(f"  ctx = {bf}[{T},{A}] reshape(ctxt)")
    dot("o.p", "ctx", "wo", T, A, D)
    allreduce_tp("o", "o.p", T, D)
    e(f"  x1 = {bf}[{T},{D}] add(x, o)")
    dot("up", "x1", "w1", T, D, f)
    e(f"  act = {bf}[{T},{f}] tanh(up)")
    dot("dn.p", "act", "w2", T, f, D)
    allreduce_tp("dn", "dn.p", T, D)
    e(f"  y = {bf}[{T},{D}] add(x1, dn)")
    # Backward (the output gradient stands in as y): dx = dy W^T, dW = x^T dy.
    dot("g.act", "y", "w2", T, D, f, lc=1, rc=1)
    dot("g.w2", "act", "y", f, T, D, lc=0, rc=0)
    dot("g.x1p", "g.act", "w1", T, f, D, lc=1, rc=1)
    allreduce_tp("g.x1", "g.x1p", T, D)
    dot("g.w1", "x1", "g.act", D, T, f, lc=0, rc=0)
    dot("g.ctx", "g.x1", "wo", T, D, A, lc=1, rc=1)
    dot("g.wo", "ctx", "g.x1", A, T, D, lc=0, rc=0)
    e(f"  g.p = {bf}[{b},{h},{S},{S}] dot(g.ctx, g.ctx), lhs_batch_dims={{}}, lhs_contracting_dims={{}}, "
      f"rhs_batch_dims={{}}, rhs_contracting_dims={{}}" if False else
      f"  g.ctx4 = {bf}[{b},{S},{h},{hd}] reshape(g.ctx)")
    e(f"  g.sc = {bf}[{b},{h},{S},{S}] dot(g.ctx4, v4), lhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{3}}")
    e(f"  g.v4 = {bf}[{b},{h},{S},{hd}] dot(p, g.ctx4), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{2}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}")
    e(f"  g.q4 = {bf}[{b},{h},{S},{hd}] dot(g.sc, kk4), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}")
    e(f"  g.k4 = {bf}[{b},{h},{S},{hd}] dot(g.sc, q4), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{2}}, "
      f"rhs_batch_dims={{0,2}}, rhs_contracting_dims={{1}}")
    e(f"  g.qkv4 = {bf}[{b},{h},{S},{3 * hd}] concatenate(g.q4, g.k4, g.v4), dimensions={{3}}")
    e(f"  g.qkvt = {bf}[{b},{S},{h},{3 * hd}] transpose(g.qkv4), dimensions={{0,2,1,3}}")
    e(f"  g.qkv = {bf}[{T},{3 * A}] reshape(g.qkvt)")
    dot("g.xp", "g.qkv", "wqkv", T, 3 * A, D, lc=1, rc=1)
    allreduce_tp("g.x", "g.xp", T, D)
    dot("g.wqkv", "x", "g.qkv", D, T, 3 * A, lc=0, rc=0)
    # Weight gradients: reduce-scatter over dp back to the FSDP shards; the optimizer update.
    upd = []
    for k, nm in enumerate(names):
        r, c = wshard[nm]
        R, C = wshapes[nm]
        if r != R:
            e(f"  g.{nm}.s = {bf}[{r},{c}] reduce-scatter(g.{nm}), channel_id={chan()}, replica_groups={g_dp}, "
              f"dimensions={{0}}, use_global_device_ids=true, to_apply=add_bf16")
        elif dp > 1:  # weights too small to shard over dp: plain data parallelism
            e(f"  g.{nm}.s = {bf}[{r},{c}] all-reduce(g.{nm}), channel_id={chan()}, replica_groups={g_dp}, "
              f"use_global_device_ids=true, to_apply=add_bf16")
        else:
            e(f"  g.{nm}.s = {bf}[{r},{c}] copy(g.{nm})")
        e(f"  lr.{nm} = {bf}[{r},{c}] constant({{...}})" if False else f"  n.{nm} = {bf}[{r},{c}] subtract({nm}.s, g.{nm}.s)")
        upd.append(f"n.{nm}")
    e("  one = s32[] constant(1)")
    e("  i1 = s32[] add(i, one)")
    e(f"  nx = {bf}[{T},{D}] add(y, g.x)")
    e(f"  ROOT r = {st} tuple(i1, nx, {', '.join(upd)})")
    w("body {\n" + "\n".join(body) + "\n}")
    w("")
    ent = []
    ent.append(f"  x0 = {bf}[{T},{D}] parameter(0)")
    for k, nm in enumerate(names):
        r, c = wshard[nm]
        ent.append(f"  p.{nm} = {bf}[{r},{c}] parameter({k + 1})")
    ent.append("  z = s32[] constant(0)")
    ent.append(f"  init = {st} tuple(z, x0, {', '.join('p.' + n for n in names)})")
    ent.append(f"  loop = {st} while(init), condition=cond, body=body, "
               f"backend_config={{\"known_trip_count\":{{\"n\":\"{L}\"}}}}")
    ent.append(f"  ROOT out = {bf}[{T},{D}] get-tuple-element(loop), index=1")
    w("ENTRY step {\n" + "\n".join(ent) + "\n}")
    text = "\n".join(out) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
