"""tpusim plan serve MODEL.json: which chip, slice and batch serve a dense transformer's
decode cheapest per token within a latency target.

One decode step (every sequence of the batch gets its next token) is written as the HLO each
of T chips runs under T-way tensor parallelism (Megatron: heads and MLP columns split, an
all-reduce after the attention output and after the MLP): per layer (a loop over stacked
weights, as XLA's scan gives it) the QKV projection, attention of the new token over a KV
cache of `context` tokens, the output projection, the MLP; then the LM head over the chip's
vocabulary slice. Weights are bf16 (inference), the KV cache bf16. Writing the new token's K
and V into the cache (one row per sequence and layer) and sampling are left out: small
against reading the weights and the cache. tpusim times the step (`--mode timing`); the
HBM check is tpusim's own (weights + cache + temporaries per chip)."""
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def dims(s):
    return ",".join(str(x) for x in s)


def ty(dt, s):
    return f"bf16[{dims(s)}]" if dt == "bf16" else f"{dt}[{dims(s)}]"


def decode_step(m, B, C, T):
    """HLO text of one decode step on one of T chips; None when T does not divide the model."""
    L, D, H, hd, F, V = m["layers"], m["d_model"], m["heads"], m["head_dim"], m["mlp"], m["vocab"]
    KV = m.get("kv_heads", H)
    if H % T or KV % T or F % T or V % T:
        return None
    Hl, KVl, Fl, Vl = H // T, KV // T, F // T, V // T
    glu = m.get("mlp_kind", "gelu") == "swiglu"
    rep = Hl // KVl  # query heads per KV head (grouped-query attention)
    groups = "{{" + ",".join(str(i) for i in range(T)) + "}}"
    ch = [0]

    def ar(out, x, shape):
        if T == 1:
            return f"  {out} = {ty('bf16', shape)} copy({x})"
        ch[0] += 1
        return (f"  {out} = {ty('bf16', shape)} all-reduce({x}), channel_id={ch[0]}, replica_groups={groups}, "
                f"use_global_device_ids=true, to_apply=add_bf16")

    qkv_w = (Hl + 2 * KVl) * hd
    mlp_w = 2 * Fl if glu else Fl
    st = (f"(s32[], {ty('bf16', (B, D))}, {ty('bf16', (L, D, qkv_w))}, {ty('bf16', (L, Hl * hd, D))}, "
          f"{ty('bf16', (L, D, mlp_w))}, {ty('bf16', (L, Fl, D))}, {ty('bf16', (L, B, KVl, C, hd))}, "
          f"{ty('bf16', (L, B, KVl, C, hd))})")
    body = ["body {", f"  s = {st} parameter(0)"]
    names = ["i", "x", "wqkv", "wo", "w1", "w2", "kc", "vc"]
    shapes = [None, (B, D), (L, D, qkv_w), (L, Hl * hd, D), (L, D, mlp_w), (L, Fl, D), (L, B, KVl, C, hd),
              (L, B, KVl, C, hd)]
    for k, nm in enumerate(names):
        body.append(f"  {nm} = {'s32[]' if k == 0 else ty('bf16', shapes[k])} get-tuple-element(s), index={k}")
    body.append("  zero = s32[] constant(0)")

    def take(out, stack, shape):
        z = ", ".join(["zero"] * len(shape))
        body.append(f"  {out}.s = {ty('bf16', (1,) + tuple(shape))} dynamic-slice({stack}, i, {z}), "
                    f"dynamic_slice_sizes={{1,{dims(shape)}}}")
        body.append(f"  {out} = {ty('bf16', shape)} reshape({out}.s)")

    take("Wqkv", "wqkv", (D, qkv_w))
    take("Wo", "wo", (Hl * hd, D))
    take("W1", "w1", (D, mlp_w))
    take("W2", "w2", (Fl, D))
    take("K", "kc", (B, KVl, C, hd))
    take("Vv", "vc", (B, KVl, C, hd))
    e = body.append
    e(f"  qkv = {ty('bf16', (B, qkv_w))} dot(x, Wqkv), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    e(f"  q.f = {ty('bf16', (B, Hl * hd))} slice(qkv), slice={{[0:{B}], [0:{Hl * hd}]}}")
    e(f"  q = {ty('bf16', (B, KVl, rep, hd))} reshape(q.f)")
    # scores[b, g, r, c] = q[b, g, r, :] . K[b, g, c, :] (the cache is [L, B, KV heads, C, hd]:
    # context and head_dim minor, as serving stacks keep it, so no tile padding)
    e(f"  sc = {ty('f32', (B, KVl, rep, C))} dot(q, K), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,1}}, "
      f"lhs_contracting_dims={{3}}, rhs_contracting_dims={{3}}")
    e("  ninf = f32[] constant(-inf)")
    e("  fz = f32[] constant(0)")
    e(f"  mx = {ty('f32', (B, KVl, rep))} reduce(sc, ninf), dimensions={{3}}, to_apply=max_f32")
    e(f"  mxb = {ty('f32', (B, KVl, rep, C))} broadcast(mx), dimensions={{0,1,2}}")
    e(f"  d = {ty('f32', (B, KVl, rep, C))} subtract(sc, mxb)")
    e(f"  ex = {ty('f32', (B, KVl, rep, C))} exponential(d)")
    e(f"  sm = {ty('f32', (B, KVl, rep))} reduce(ex, fz), dimensions={{3}}, to_apply=add_f32")
    e(f"  smb = {ty('f32', (B, KVl, rep, C))} broadcast(sm), dimensions={{0,1,2}}")
    e(f"  p.f = {ty('f32', (B, KVl, rep, C))} divide(ex, smb)")
    e(f"  p = {ty('bf16', (B, KVl, rep, C))} convert(p.f)")
    # ctx[b, g, r, :] = sum_c p[b, g, r, c] V[b, g, c, :]
    e(f"  cx = {ty('bf16', (B, KVl, rep, hd))} dot(p, Vv), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,1}}, "
      f"lhs_contracting_dims={{3}}, rhs_contracting_dims={{2}}")
    e(f"  cxf = {ty('bf16', (B, Hl * hd))} reshape(cx)")
    e(f"  o.p = {ty('bf16', (B, D))} dot(cxf, Wo), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    e(ar("o", "o.p", (B, D)))
    e(f"  x1 = {ty('bf16', (B, D))} add(x, o)")
    e(f"  up = {ty('bf16', (B, mlp_w))} dot(x1, W1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    if glu:
        e(f"  a = {ty('bf16', (B, Fl))} slice(up), slice={{[0:{B}], [0:{Fl}]}}")
        e(f"  gt = {ty('bf16', (B, Fl))} slice(up), slice={{[0:{B}], [{Fl}:{2 * Fl}]}}")
        e(f"  sg = {ty('bf16', (B, Fl))} logistic(a)")
        e(f"  sl = {ty('bf16', (B, Fl))} multiply(a, sg)")
        e(f"  h = {ty('bf16', (B, Fl))} multiply(sl, gt)")
    else:
        e(f"  h = {ty('bf16', (B, Fl))} tanh(up)")
    e(f"  y.p = {ty('bf16', (B, D))} dot(h, W2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    e(ar("y", "y.p", (B, D)))
    e(f"  x2 = {ty('bf16', (B, D))} add(x1, y)")
    e("  one = s32[] constant(1)")
    e("  i1 = s32[] add(i, one)")
    e(f"  ROOT r = {st} tuple(i1, x2, wqkv, wo, w1, w2, kc, vc)")
    body.append("}")
    cond = ["cond {", f"  s = {st} parameter(0)", "  i = s32[] get-tuple-element(s), index=0",
            f"  n = s32[] constant({L})", "  ROOT c = pred[] compare(i, n), direction=LT", "}"]
    red = []
    for nm, dt, op in ((("add_bf16", "bf16", "add"),) if T > 1 else ()) + (("add_f32", "f32", "add"),
                                                                             ("max_f32", "f32", "maximum")):
        red += [f"{nm} {{", f"  a = {dt}[] parameter(0)", f"  b = {dt}[] parameter(1)",
                f"  ROOT r = {dt}[] {op}(a, b)", "}"]
    entry = ["ENTRY decode {"]
    params = [("x", (B, D)), ("wqkv", (L, D, qkv_w)), ("wo", (L, Hl * hd, D)), ("w1", (L, D, mlp_w)),
              ("w2", (L, Fl, D)), ("kc", (L, B, KVl, C, hd)), ("vc", (L, B, KVl, C, hd)), ("wlm", (D, Vl))]
    for k, (nm, sh) in enumerate(params):
        entry.append(f"  {nm} = {ty('bf16', sh)} parameter({k})")
    entry += ["  i0 = s32[] constant(0)", f"  s0 = {st} tuple(i0, x, wqkv, wo, w1, w2, kc, vc)",
              f"  w = {st} while(s0), condition=cond, body=body",
              f"  xo = {ty('bf16', (B, D))} get-tuple-element(w), index=1",
              f"  ROOT logits = {ty('f32', (B, Vl))} dot(xo, wlm), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
              "}"]
    head = f"HloModule decode_B{B}_C{C}_T{T}" + (f", num_partitions={T}" if T > 1 else "")
    return "\n".join([head, ""] + red + cond + body + entry) + "\n"


def weight_bytes(m):
    L, D, H, hd, F, V = m["layers"], m["d_model"], m["heads"], m["head_dim"], m["mlp"], m["vocab"]
    KV = m.get("kv_heads", H)
    glu = m.get("mlp_kind", "gelu") == "swiglu"
    return 2 * (L * (D * (H + 2 * KV) * hd + H * hd * D + (3 if glu else 2) * D * F) + 2 * D * V)


def step_bytes(m, B, C, T):
    """What one decode step must read per chip: its share of the layers' weights and the LM
    head (the embedding table is looked up, not read whole), and its share of the KV cache."""
    H, KV = m["heads"], m.get("kv_heads", m["heads"])
    w = weight_bytes(m) - 2 * m["d_model"] * m["vocab"]  # one of the two d x V tables
    kv = 2 * m["layers"] * B * C * KV * m["head_dim"] * 2
    return (w + kv) / T


def main(argv, P, tpusim, root):
    import cmdline
    ap = cmdline.Parser(argv=argv, base=3, prog="tpusim plan serve",
                                 description="Rank chips, slices and batch sizes for serving a dense transformer's "
                                             "decode by cost per token within a latency target.")
    ap.add_argument("model", help="MODEL.json (docs/plan.md; kv_heads optional, for grouped-query attention)")
    ap.add_argument("--context", type=int, default=2048, help="tokens in each sequence's KV cache")
    ap.add_argument("--batches", default="1,8,32,64,128,256", help="batch sizes to try")
    ap.add_argument("--max-latency-ms", type=float, default=50.0, help="time per decode step (per output token)")
    ap.add_argument("--chips", default="v4,v5e,v5p,v6e")
    ap.add_argument("--max-tensor", type=int, default=16)
    ap.add_argument("--pricing", choices=["on-demand", "spot", "1y", "3y"], default="on-demand")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    a.tpusim, a.root = tpusim, root
    try:
        batches = [int(x) for x in a.batches.split(",")]
        if any(b < 1 for b in batches):
            raise ValueError
    except ValueError:
        cmdline.arg_fail(argv, 3, "--batches", f"--batches '{a.batches}': expected positive whole numbers, comma-separated")
    if a.context < 1:
        cmdline.arg_fail(argv, 3, "--context", f"--context must be at least 1, not {a.context}")
    if not (a.max_latency_ms > 0 and a.max_latency_ms < float("inf")):
        cmdline.arg_fail(argv, 3, "--max-latency-ms", f"--max-latency-ms must be a positive number, not {a.max_latency_ms}")
    for k in ("max_tensor", "jobs"):
        if getattr(a, k) < 1:
            cmdline.arg_fail(argv, 3, "--" + k.replace("_", "-"), f"--{k.replace('_', '-')} must be at least 1")
    for c in a.chips.split(","):
        try:
            P.load_chip(a.root, c)
        except P.InputError as e:
            cmdline.arg_fail(argv, 3, "--chips", str(e).replace("error: ", "", 1))
    try:
        m = P.load_model(a.model)
        chips = [P.load_chip(a.root, c) for c in a.chips.split(",")]
        prices = P.load_prices(a.root)
    except P.InputError as e:
        P.die(str(e))
    m["kv_heads"] = m.get("kv_heads", m["heads"])
    if m["heads"] % m["kv_heads"]:
        P.die(f"{a.model}:1:1: error: heads {m['heads']} is not a multiple of kv_heads {m['kv_heads']}")
    tasks = []
    for chip in chips:
        t = 1
        while t <= min(a.max_tensor, chip["max_chips"]):
            for b in batches:
                tasks.append((chip, t, b))
            t *= 2
    tmp = tempfile.mkdtemp(prefix="tpusim-serve-")
    t0 = time.perf_counter()

    def one(it):
        k, (chip, T, B) = it
        text = decode_step(m, B, a.context, T)
        row = {"chip": chip["name"], "chips": T, "slice": P.slice_name(chip, T), "batch": B}
        if text is None:
            return dict(row, status="invalid", why="the tensor size does not divide heads, MLP or vocabulary")
        path, rep = os.path.join(tmp, f"d{k}.hlo"), os.path.join(tmp, f"d{k}.json")
        open(path, "w").write(text)
        r = subprocess.run([a.tpusim, "run", path, "--mode", "timing", "--chip", chip["name"], "--quiet",
                            "--report", rep], capture_output=True, text=True)
        try:
            if r.returncode != 0:
                why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
                return dict(row, status="no-fit" if "bytes of HBM" in r.stderr else "error", why=why)
            j = json.load(open(rep))
        finally:
            for p in (path, rep):
                if os.path.exists(p):
                    os.remove(p)
        step = j["step"]["seconds"]
        price, pstat = P.price_of(prices, chip["name"], a.pricing)
        tps = B / step
        return dict(row, status="ok", step_s=step, tokens_per_s=tps, tokens_per_s_per_chip=tps / T,
                    hbm_bw_used=j["hbm"]["used_bandwidth"] / j["hbm"]["bandwidth"],
                    ici_wait=j.get("pod", {}).get("ici_wait_fraction", 0.0), price_per_chip_hour=price,
                    price_status=pstat, usd_per_mtok=None if price is None else price * T / 3600 / tps * 1e6)

    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        rows = list(ex.map(one, enumerate(tasks)))
    os.rmdir(tmp)
    host_s = time.perf_counter() - t0
    ok = [r for r in rows if r["status"] == "ok" and r["step_s"] * 1e3 <= a.max_latency_ms]
    slow = [r for r in rows if r["status"] == "ok" and r["step_s"] * 1e3 > a.max_latency_ms]
    bad = [r for r in rows if r["status"] != "ok"]
    ok.sort(key=lambda r: (r["usd_per_mtok"] if r["usd_per_mtok"] is not None else float("inf"), r["step_s"]))
    out = {"model": m, "weights_bytes": weight_bytes(m), "context": a.context, "max_latency_ms": a.max_latency_ms,
           "pricing": a.pricing, "evaluated": len(rows), "host_s": host_s, "candidates": ok, "too_slow": slow,
           "left_out": bad}
    if a.json:
        json.dump(P.finite(out), sys.stdout, indent=1, default=lambda x: None)
        sys.stdout.write("\n")
        return 0 if ok else 1
    w = sys.stdout.write
    w(f"serving {m['name']}: {weight_bytes(m) / 1e9:.3g} GB of bf16 weights, {m['layers']} layers, d_model "
      f"{m['d_model']}, {m['heads']} heads ({m['kv_heads']} KV), context {a.context:,} tokens; decode step at most "
      f"{a.max_latency_ms:g} ms\n")
    w(f"  {len(rows)} candidates timed by tpusim in {host_s:.1f} s; pricing {a.pricing}\n\n")
    w(f"{'#':>3} {'slice':<10} {'chips':>5} {'batch':>5} {'step ms':>8} {'tok/s':>9} {'tok/s/chip':>10} "
      f"{'HBM BW%':>7} {'ICI%':>5} {'$/Mtok':>8}\n")
    for i, r in enumerate(ok[:a.top] if a.top else ok):
        w(f"{i + 1:>3} {r['slice']:<10} {r['chips']:>5} {r['batch']:>5} {1e3 * r['step_s']:>8.3f} "
          f"{r['tokens_per_s']:>9.4g} {r['tokens_per_s_per_chip']:>10.4g} {100 * r['hbm_bw_used']:>7.1f} "
          f"{100 * r['ici_wait']:>5.1f} {(r['usd_per_mtok'] if r['usd_per_mtok'] is not None else float('nan')):>8.4g}\n")
    if not ok:
        w("  (no candidate fits within the latency target)\n")
    w(f"\n{len(slow)} over the latency target, {sum(1 for r in bad if r['status'] == 'no-fit')} do not fit HBM, "
      f"{sum(1 for r in bad if r['status'] == 'invalid')} do not divide the model\n")
    for r in [r for r in bad if r["status"] == "error"][:5]:
        w(f"  tpusim failed on {r['slice']} batch {r['batch']}: {r['why']}\n")
    return 0 if ok else 1
