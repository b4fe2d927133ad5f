"""gen.py: one chip's training step of a transformer as HLO text, for a mesh data x fsdp x tensor.

The program is what a JAX/MaxText step lowers to per chip after SPMD partitioning:
  - an outer loop over microbatches (gradient accumulation), and in it
  - the embedding (a gather from the vocabulary-parallel table, summed over the tensor axis),
  - a forward loop over the layers (XLA's scan) that saves each layer's activations into
    stacked buffers [L, ...] (with rematerialisation only the layer input; the residual
    stream is saved split over the tensor axis along d_model, as MaxText shards activation_embed
    over it, and all-gathered over it in the backward pass), FSDP all-gathers
    of each layer's weights over the fsdp axis, tensor parallelism in MaxText's form (the
    residual split over tensor, all-gathered before the matmuls that read it, windowed
    reduce-scatters after those that write it: tp_out, tp_add),
  - the LM head (vocabulary-parallel logits, a softmax over the vocabulary with all-reduces
    of the max and the sum over the tensor axis) and its gradient,
  - a backward loop over the layers in reverse: the weights gathered again, the forward
    recomputed when remat is on, two matmuls per forward matmul, attention's backward in the
    flash style (the probabilities recomputed from q, k and the saved max and sum), the
    activation gradients over tensor in the same form and a reduce-scatter of each weight
    gradient over fsdp, added to f32 accumulators;
  - after the microbatches: an all-reduce of the accumulated gradients over the data axis,
    and the optimizer (Adam: two f32 moments; SGD) on each chip's f32 parameter shards.
Device id = (data_rank * fsdp + fsdp_rank) * tensor + tensor_rank: the tensor axis is the
fastest, so its groups are neighbours on the slice's x axis.

Norms and rotary embeddings (tools/plan/norms.py): RMSNorm of the residual before the matmuls
that read it (dense layers), rotary embeddings on q and k, MaxText's 2023 QK normalisation
with "qk_norm". Not modelled: the norms' scale parameters, the final norm, dropout, the loss's
one-hot term.
MoE layers (experts > 0): experts split over the tensor axis (expert parallelism); each
chip routes its 1/tensor of the tokens with top-k copies, capacity factor 1, through two
all-to-alls over the tensor axis, and the tokens are all-gathered back over it."""
import functools
import re

import flash
import norms


# The pair lists are a few kB for thousands of chips and every windowed loop of every layer
# names one: made once per (chips, ring) for the whole search.
@functools.lru_cache(maxsize=256)
def _ring_pairs(n, d):
    return "{" + ",".join("{%d,%d}" % (j, (j + d) % n) for j in range(n)) + "}"


@functools.lru_cache(maxsize=256)
def _tp_pairs(n, t, d):
    return "{" + ",".join("{%d,%d}" % (j, j - j % t + (j % t + d) % t) for j in range(n)) + "}"


# MaxText's remat policies (its decoder's get_remat_policy): the matmul outputs each saves
# for the backward pass, named as the generator's activations — qkv (query/key/value_proj),
# ctx with the softmax's max and sum (context: the attention kernel's output and residuals),
# x1 (out_proj: the residual after attention, the projection's output plus its input), up
# (mlpwi); the MLP activation (act) is recomputed from up unless nothing is rematerialised,
# and mlpwo (the MLP's output) is not kept by the generator, which needs only the next
# layer's input. "on" is MaxText's full (only each layer's input kept), "off" keeps everything.
# The *_offloaded policies keep theirs in host memory (S(5)).
REMAT = {
    "off": ("qkv", "ctx", "x1", "up", "act"),
    "minimal_with_context": ("qkv", "ctx", "x1", "up"),
    "minimal": ("qkv", "x1", "up"),
    "save_dot_with_context_except_mlp": ("qkv", "ctx", "x1"),
    "save_dot_except_mlpwi": ("qkv", "x1"),
    "save_dot_except_mlp": ("qkv", "x1"),
    "save_qkv_proj": ("qkv",),
    "save_out_proj": ("x1",),
    "qkv_proj_offloaded": ("qkv",),
    "minimal_offloaded": ("qkv", "x1", "up"),
    "on": (),
    "full": (),
}
OFFLOADED = ("qkv_proj_offloaded", "minimal_offloaded")


def remat_name(r):
    """A candidate's remat (True/False from on/off searches, or a policy name) as a name."""
    return "on" if r is True else "off" if r is False else r


class Gen:
    def __init__(self):
        self.lines = []
        self.n = 0

    def e(self, s):
        self.lines.append("  " + s)

    def name(self, base):
        self.n += 1
        return f"{base}.{self.n}"

    def unpack(self, fields, k=0, tup="st"):
        """A get-tuple-element of tup per (name, type) in fields, from index k (a loop body's
        state); returns the next index."""
        for name, t in fields:
            self.e(f"{name} = {t} get-tuple-element({tup}), index={k}")
            k += 1
        return k


def dims(shape):
    return ",".join(str(x) for x in shape)


def ty(dt, shape):
    return f"{dt}[{dims(shape)}]"


class Step:
    """The per-chip program for model m (a dict, see plan.py) and candidate c."""

    def __init__(self, m, c):
        self.m, self.c = m, c
        self.cd = "bf16" if m["dtype"] == "bf16" else "f32"  # compute dtype
        # Slices (multi-slice data parallelism, MaxText's dcn_data_parallelism): the data
        # axis runs over every slice, slice-major (device = slice * chips per slice + ...),
        # so its gradient all-reduce spans the slices and goes over DCN (docs/pod.md).
        # Pipeline stages (MaxText's ici_pipeline_parallelism): a mesh axis between data and
        # fsdp (device = ((data_rank * stages + stage) * fsdp + fsdp_rank) * tensor +
        # tensor_rank); stage s holds layers [s L/P, (s+1) L/P) (pipeline_step below). With
        # dcn "pipeline" (MaxText's dcn_pipeline_parallelism) the slices multiply the stages
        # instead of the data axis: with data 1 in each slice the stage is slice-major too.
        K = c.get("slices", 1)
        self.dcn_pp = c.get("dcn", "data") == "pipeline" and K > 1
        R, F, T = c["data"] * (1 if self.dcn_pp else K), c["fsdp"], c["tensor"]
        self.P = Pp = c.get("pipeline", 1) * (K if self.dcn_pp else 1)
        self.R, self.F, self.T, self.N = R, F, T, R * Pp * F * T
        L, D, H, hd, ffn, V, S = (m["layers"], m["d_model"], m["heads"], m["head_dim"], m["mlp"], m["vocab"], m["seq"])
        self.Lm = L
        # Circular (interleaved) pipelines, MaxText's num_pipeline_repeats V: stage s holds
        # layers (r P + s) L/(P V) + k of every repeat r, and every microbatch goes V times
        # round the ring of stages.
        self.V = c.get("repeats", 1) if Pp > 1 else 1
        L = L // (Pp * self.V)  # the layers of one stage in one repeat: every layer loop runs over these
        self.Lw = L * self.V  # the rows of a chip's layer-weight stacks
        self.L, self.D, self.S = L, D, S
        B = m["batch_tokens"] // S
        self.b = B // (R * F)
        self.mb = c["micro"]
        self.bm = self.b // self.mb
        # The microbatch loop's trip count: the microbatches, or fewer for timing by
        # extrapolation (every iteration is the same program on the same shapes). A
        # pipeline takes every microbatch in one pass (its loop runs once).
        self.trips = c.get("trips", self.mb) if Pp == 1 else 1
        self.Tp = self.mb * self.V + Pp - 1  # a pipeline's iterations: fill, a microbatch per repeat each, drain
        self.Tm = self.bm * S
        self.h = H // T
        self.hd = hd
        self.A = self.h * hd
        # Grouped- / multi-query attention: kv_heads K and V heads split over the tensor axis
        # when it divides them; with fewer KV heads than chips (T a multiple of them) a chip's
        # query heads all share one KV head, replicated over the chips of its group; otherwise
        # every chip holds all of them. Each chip's query heads share its KV heads in groups.
        KV = m.get("kv_heads", H)
        self.kvt = KV // T if KV % T == 0 else 1 if T % KV == 0 else KV
        self.Akv = self.kvt * hd
        self.QKV = self.A + 2 * self.Akv
        self.glu = m.get("mlp_kind", "gelu") == "swiglu"
        self.E = m.get("experts", 0)
        self.K = m.get("top_k", 0)
        if self.E:
            self.Et = self.E // T
            self.f = ffn                     # each expert whole on its chip
            self.Ts = self.Tm // T           # tokens this chip routes
            self.C = self.Ts * self.K // self.E  # capacity per expert per source chip (factor 1)
        else:
            self.f = ffn // T
        self.fw = 2 * self.f if self.glu else self.f
        self.Vt = -(-V // T)
        self.Df = D // F
        self.policy = remat_name(c["remat"])
        self.keep = set(REMAT[self.policy])  # the saved activations besides each layer's input
        if self.E and self.policy not in ("on", "off", "full"):
            self.keep = set(REMAT["off"])  # MoE layers: every activation kept (named policies are dense)
        self.remat = self.keep != set(REMAT["off"])  # something is recomputed in the backward pass
        # A parallel block (MaxText's default decoder until 2024-02, PaLM's "parallel layers"):
        # attention and MLP both read the layer's input and their outputs are added to it, so
        # the tensor-parallel input is gathered once a layer, and the backward pass reads no
        # out_proj residual (no x1 to save). Dense layers only.
        self.parallel = m.get("block", "serial") == "parallel" and not self.E
        if self.parallel:
            self.keep.discard("x1")
        self.offload = self.policy in OFFLOADED
        # Attention as MaxText's flash kernel computes it (attention=flash): blocks of keys
        # and values of kv_block (512, the kernel's default block) with a running max and sum,
        # so no [S, S] scores exist; "dot_product" materialises them.
        self.flash = c.get("attention", m.get("attention", "flash")) == "flash"
        self.relu = m.get("mlp_kind", "gelu") == "relu"
        # The rest of a decoder layer's non-matmul work (tools/plan/norms.py): RMSNorm of the
        # residual before the matmuls that read it (dense layers; "norm": "none" leaves it out),
        # rotary embeddings on q and k ("position": "none" leaves them out), and MaxText's
        # 2023 normalisation of each head's q and k ("qk_norm": "qk", its decoder of 2023-04)
        # or q, k and v ("qkv", 2023-12).
        self.rms = m.get("norm", "rms") == "rms" and not self.E
        self.rope = m.get("position", "rope") == "rope"
        self.qkn = {"qk": ("q", "k"), "qkv": ("q", "k", "v")}.get(m.get("qk_norm", "none"), ())
        self.pre = {}  # split_qkv's prefix -> {q/k/v: (input, after rope, head norm's scale, shape)}
        # A decoder's attention is causal (query r sees keys up to r): the materialised form
        # masks its scores, the flash form also skips the key blocks above the diagonal, as
        # the Pallas kernel MaxText runs does ("causal": False computes every block unmasked).
        self.causal = c.get("causal", True)
        # Flash attention is written as the Pallas kernels MaxText runs: each a fusion whose
        # blocks' scores and running figures stay on chip (in VMEM), every dot of it on the
        # MXUs (src/compile/backend/tile.c tpu__fusion_xdots). "kernel": False writes the
        # blocks as separate ops instead (what libtpu's HLO import takes: bench/plan_xla.py,
        # bench/plan_memory.py), each block's scores through HBM.
        self.kernel = c.get("kernel", True) and self.flash
        self.Bk = min(S, c.get("kv_block", 512))
        if S % self.Bk:
            self.Bk = S
        # The kernels themselves (the default): the library's flash_attention pallas_calls,
        # instantiated from fixtures (tools/plan/flash.py) where one fits (the compute type and
        # head dim, causal, blocks of 512); tpusim times them through src/mosaic. "kernel":
        # "fusion" (or no fixture) writes each kernel as a fusion standing for it instead.
        self.pallas = c.get("kernel", True) is True and self.kernel and self.Bk == flash.BLOCK and flash.applies(self.cd, hd, S, self.causal)
        # Windowed einsums (docs/spmd.md): with the weights split over every chip (FSDP
        # alone) on a slice where the XLA TPU compiler runs them (plan.py: the chip's
        # windowed_einsum_min/max_chips), a dense layer's dots pass the weight blocks round a
        # ring of collective-permutes instead of gathering them, and its weight gradients
        # are summed round it instead of reduce-scattered.
        self.we = bool(c.get("windowed")) and R == 1 and Pp == 1 and T == 1 and F > 1 and F % 2 == 0 and not m.get("experts")
        self.win_w = self.win_g = False  # what the layer being emitted windows
        # The tensor-parallel reduce-scatters as windowed einsums (tp_out); "tp_windowed":
        # False keeps them reduce-scatter collectives.
        self.tp_win = c.get("tp_windowed", True)
        self.extra = []  # the loops' computations
        # Weight all-gathers pipelined across layers (XLA's collective pipelining, what
        # MaxText's async-collective flags give): layer i+1's gather runs during layer i.
        self.pf = c.get("overlap", True) and F > 1 and not self.we
        self.alloc = c.get("alloc", True)
        NN = self.N
        self.g_tp = f"[{NN // T},{T}]<=[{NN}]"
        self.g_fsdp = f"[{R * Pp * T},{F}]<=[{R * Pp},{F},{T}]T(0,2,1)"
        self.g_data = f"[{Pp * F * T},{R}]<=[{R},{Pp * F},{T}]T(1,2,0)"
        self.g_stage = f"[{R * F * T},{Pp}]<=[{R},{Pp},{F * T}]T(0,2,1)"
        self.ch = 0
        # Parameters: name -> (full per-layer shape after the tensor split, fsdp dim or None).
        D_, A, fw, f = D, self.A, self.fw, self.f
        lw = {"wqkv": ((D_, self.QKV), 0), "wo": ((A, D_), 1)}
        if self.E:
            lw["wr"] = ((D_, self.E), 0)
            lw["w1"] = ((self.Et, D_, fw), 1)
            lw["w2"] = ((self.Et, f, D_), 2)
        else:
            lw["w1"] = ((D_, fw), 0)
            lw["w2"] = ((f, D_), 1)
        self.lw = lw
        self.gw = {"emb": ((self.Vt, D_), 1), "wout": ((D_, self.Vt), 0)}

    def check(self):
        """Why this candidate cannot be built, or None."""
        m, c = self.m, self.c
        R, F, T = self.R, self.F, self.T
        B = m["batch_tokens"] // m["seq"]
        if B % (R * F):
            return f"global batch of {B} sequences does not split over data x fsdp = {R * F}"
        if self.b % self.mb:
            return f"{self.b} sequences per chip do not split into {self.mb} microbatches"
        if self.dcn_pp and self.R > 1:
            return "pipeline stages over DCN take data 1 in each slice"
        if self.Lm % (self.P * self.V):
            return f"{self.Lm} layers do not split into {self.P} pipeline stages" + \
                (f" x {self.V} repeats" if self.V > 1 else "")
        if self.V > 1 and self.mb % self.P:
            return f"{self.mb} microbatches are not a multiple of the {self.P} stages (a circular pipeline)"
        if m["heads"] % T:
            return f"{m['heads']} heads do not split over tensor {T}"
        if self.h % self.kvt:
            return f"{self.h} query heads per chip do not share {self.kvt} KV heads evenly"
        if self.D % F:
            return f"d_model {self.D} does not split over fsdp {F}"
        if self.D % T:
            return f"d_model {self.D} does not split over tensor {T}"
        if self.E:
            if self.E % T:
                return f"{self.E} experts do not split over tensor {T}"
            if self.Tm % T or (self.Ts * self.K) % self.E:
                return f"{self.Tm} tokens per microbatch do not route evenly to {self.E} experts"
        elif m["mlp"] % T:
            return f"mlp width {m['mlp']} does not split over tensor {T}"
        return None

    # --- helpers -------------------------------------------------------------------------
    def chan(self):
        self.ch += 1
        return self.ch

    def shard(self, shape, fd):
        if fd is None or self.F == 1:
            return tuple(shape)
        s = list(shape)
        s[fd] //= self.F
        return tuple(s)

    def dot(self, g, out, a, b, shape, lc, rc, lb=(), rb=()):
        bd = ""
        if lb:
            bd = f"lhs_batch_dims={{{dims(lb)}}}, rhs_batch_dims={{{dims(rb)}}}, "
        g.e(f"{out} = {ty(self.cd, shape)} dot({a}, {b}), {bd}lhs_contracting_dims={{{dims(lc)}}}, "
            f"rhs_contracting_dims={{{dims(rc)}}}")

    def ar(self, g, out, x, shape, groups, n, dt=None, comp=None):
        dt = dt or self.cd
        if n == 1:
            g.e(f"{out} = {ty(dt, shape)} copy({x})")
        else:
            comp = comp or ("add_" + dt)
            g.e(f"{out} = {ty(dt, shape)} all-reduce({x}), channel_id={self.chan()}, replica_groups={groups}, "
                f"use_global_device_ids=true, to_apply={comp}")

    def ew(self, g, out, op, shape, *args, dt=None):
        g.e(f"{out} = {ty(dt or self.cd, shape)} {op}({', '.join(args)})")

    def bcast(self, g, out, x, shape, keep, dt=None):
        g.e(f"{out} = {ty(dt or self.cd, shape)} broadcast({x}), dimensions={{{dims(keep)}}}")

    def ring_state(self, g, out, cd, members):
        """A windowed-einsum loop's initial state, named {out}.in: its step counter (0), then each
        (value, shape) of members, in type cd. Returns the name and the state's types."""
        g.e(f"{out}.zi = s32[] constant(0)")
        state = ["s32[]"] + [ty(cd, sh) for _, sh in members]
        g.e(f"{out}.in = ({', '.join(state)}) tuple({out}.zi, {', '.join(v for v, _ in members)})")
        return f"{out}.in", state

    def const(self, g, out, v, dt=None):
        g.e(f"{out} = {dt or self.cd}[] constant({v})")

    def ring_pairs(self, d):
        return _ring_pairs(self.F, d)

    def permute(self, g, out, x, shape, d, tp=False):
        g.e(f"{out} = {ty(self.cd, shape)} collective-permute({x}), channel_id={self.chan()}, "
            f"source_target_pairs={self.tp_pairs(d) if tp else self.ring_pairs(d)}")

    def tp_pairs(self, d):
        """A ring over the tensor axis (device = ... * T + tensor rank): each chip sends to the
        chip d tensor ranks on."""
        return _tp_pairs(self.N, self.T, d)

    def ring_loop(self, g, out, init, state, steps, body, tp=False):
        """A while loop of `steps` iterations over the tuple `init` of types `state` whose body
        (lines after the state's get-tuple-elements) `body` emits; returns nothing: out is
        the loop. tp: the ring is the tensor axis (me = the tensor rank, nn = T), else fsdp."""
        self.wn = getattr(self, "wn", 0) + 1
        nm = f"ring{self.wn}"
        st = "(" + ", ".join(state) + ")"
        self.extra.append(self.cond(nm + "_cond", st, steps))
        b = Gen()
        b.e(f"p = {st} parameter(0)")
        for k, t in enumerate(state):
            b.e(f"s{k} = {t} get-tuple-element(p), index={k}")
        b.e("pid = u32[] partition-id()")
        b.e(f"nn = s32[] constant({self.T if tp else self.F})")
        if tp:
            b.e("dev = s32[] convert(pid)")
            b.e("me = s32[] remainder(dev, nn)")
        else:
            b.e("me = s32[] convert(pid)")
        b.e("one = s32[] constant(1)")
        b.e("zero = s32[] constant(0)")
        root = body(b)
        b.e("i1 = s32[] add(s0, one)")
        b.e(f"ROOT r = {st} tuple(i1, {', '.join(root)})")
        self.extra.append(f"{nm}_body {{\n" + "\n".join(b.lines) + "\n}\n")
        g.e(f"{out} = {st} while({init}), condition={nm}_cond, body={nm}_body, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{steps}\"}}}}")

    def wdot(self, g, out, x, W, nm, shape, lc, rc):
        """out = x . W[nm] (a 2-D dot contracting x's dim 1): with the gathered weight, or
        when the layer windows its weights, round the ring from the chip's block W[nm] (docs/spmd.md,
        "Windowed einsum"): n/2 steps, each multiplying the block that arrived forward and the
        one that arrived back while both travel on (n + 1 block transfers in all)."""
        if not self.win_w:
            self.dot(g, out, x, W, shape, lc, rc)
            return
        cd, n = self.cd, self.F
        full, fd = self.lw[nm]
        sh = self.shard(full, fd)
        xs = (shape[0], full[rc[0]])
        blk = full[fd] // n
        split_k = fd == rc[0]
        self.permute(g, f"{out}.b0", W, sh, -1)
        self.const(g, f"{out}.z", "0")
        self.bcast(g, f"{out}.acc", f"{out}.z", shape, ())
        init, state = self.ring_state(g, out, cd, [(W, sh), (f"{out}.b0", sh), (f"{out}.acc", shape), (x, xs)])

        def body(b):
            b.e("ia0 = s32[] subtract(me, s0)")
            b.e("ia1 = s32[] add(ia0, nn)")
            b.e("ia = s32[] remainder(ia1, nn)")
            b.e("ib0 = s32[] add(me, s0)")
            b.e("ib1 = s32[] add(ib0, one)")
            b.e("ib = s32[] remainder(ib1, nn)")
            b.e(f"bl = s32[] constant({blk})")
            b.e("oa = s32[] multiply(ia, bl)")
            b.e("ob = s32[] multiply(ib, bl)")
            if split_k:  # the contraction split: add each block's product
                for t, o, w in (("a", "oa", "s1"), ("b", "ob", "s2")):
                    b.e(f"x{t} = {ty(cd, (shape[0], blk))} dynamic-slice(s4, zero, {o}), "
                        f"dynamic_slice_sizes={{{shape[0]},{blk}}}")
                    b.e(f"p{t} = {ty(cd, shape)} dot(x{t}, {w}), lhs_contracting_dims={{1}}, "
                        f"rhs_contracting_dims={{{rc[0]}}}")
                b.e(f"c1 = {ty(cd, shape)} add(s3, pa)")
                b.e(f"c2 = {ty(cd, shape)} add(c1, pb)")
            else:  # an output split: each block's product is its columns of the result
                for t, w in (("a", "s1"), ("b", "s2")):
                    b.e(f"p{t} = {ty(cd, (shape[0], blk))} dot(s4, {w}), lhs_contracting_dims={{1}}, "
                        f"rhs_contracting_dims={{{rc[0]}}}")
                b.e(f"c1 = {ty(cd, shape)} dynamic-update-slice(s3, pa, zero, oa)")
                b.e(f"c2 = {ty(cd, shape)} dynamic-update-slice(c1, pb, zero, ob)")
            self.permute(b, "na", "s1", sh, 1)
            self.permute(b, "nb", "s2", sh, -1)
            return ["na", "nb", "c2", "s4"]

        self.ring_loop(g, f"{out}.loop", init, state, n // 2, body)
        g.e(f"{out} = {ty(cd, shape)} get-tuple-element({out}.loop), index=3")

    def wgrad(self, g, out, p, ps, q, qs, nm, full=None, fd=None):
        """The gradient of weight nm, dot(p, q) contracting dim 0 of both: whole (its fsdp
        reduce-scatter follows, scatter_g), or when the layer windows its gradients this chip's
        block, summed round the ring: two sums travel, one each way, each chip adding its
        product for the block a sum is bound for; after n/2 steps the backward one moves once
        more (n + 1 block transfers)."""
        cd, n = self.cd, self.F
        if full is None:
            full, fd = self.lw[nm]
        if not self.win_g:
            self.dot(g, out, p, q, full, (0,), (0,))
            return
        sh = self.shard(full, fd)
        blk = full[fd] // n
        self.const(g, f"{out}.z", "0")
        self.bcast(g, f"{out}.s", f"{out}.z", sh, ())
        _, state = self.ring_state(g, out, cd, [(f"{out}.s", sh), (f"{out}.s", sh), (p, ps), (q, qs)])

        def body(b):
            b.e("ja0 = s32[] add(me, s0)")
            b.e("ja1 = s32[] add(ja0, one)")
            b.e("ja = s32[] remainder(ja1, nn)")
            b.e("jb0 = s32[] subtract(me, s0)")
            b.e("jb1 = s32[] add(jb0, nn)")
            b.e("jb2 = s32[] subtract(jb1, one)")
            b.e("jb = s32[] remainder(jb2, nn)")
            b.e(f"bl = s32[] constant({blk})")
            for t, j in (("a", "ja"), ("b", "jb")):
                b.e(f"o{t} = s32[] multiply({j}, bl)")
                if fd == 0:
                    b.e(f"x{t} = {ty(cd, (ps[0], blk))} dynamic-slice(s3, zero, o{t}), "
                        f"dynamic_slice_sizes={{{ps[0]},{blk}}}")
                    b.e(f"p{t} = {ty(cd, sh)} dot(x{t}, s4), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}")
                else:
                    b.e(f"x{t} = {ty(cd, (qs[0], blk))} dynamic-slice(s4, zero, o{t}), "
                        f"dynamic_slice_sizes={{{qs[0]},{blk}}}")
                    b.e(f"p{t} = {ty(cd, sh)} dot(s3, x{t}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}")
            b.e(f"ca = {ty(cd, sh)} add(s1, pa)")
            b.e(f"cb = {ty(cd, sh)} add(s2, pb)")
            self.permute(b, "na", "ca", sh, 1)
            self.permute(b, "nb", "cb", sh, -1)
            return ["na", "nb", "s3", "s4"]

        self.ring_loop(g, f"{out}.loop", f"{out}.in", state, n // 2, body)
        g.e(f"{out}.f = {ty(cd, sh)} get-tuple-element({out}.loop), index=1")
        g.e(f"{out}.bk = {ty(cd, sh)} get-tuple-element({out}.loop), index=2")
        self.permute(g, f"{out}.b", f"{out}.bk", sh, -1)
        g.e(f"{out} = {ty(cd, sh)} add({out}.f, {out}.b)")

    def gather_w(self, g, out, src, full, fd):
        """A weight shard (f32) -> the compute dtype, all-gathered over fsdp."""
        sh = self.shard(full, fd)
        g.e(f"{out}.c = {ty(self.cd, sh)} convert({src})")
        if sh == tuple(full):
            g.e(f"{out} = {ty(self.cd, full)} copy({out}.c)")
        else:
            g.e(f"{out} = {ty(self.cd, full)} all-gather({out}.c), channel_id={self.chan()}, replica_groups={self.g_fsdp}, "
                f"dimensions={{{fd}}}, use_global_device_ids=true")

    def prefetch_start(self, g, lws, idx):
        """all-gather-start of the weights of layer idx; prefetch_done finishes them."""
        for nm, (full, fd) in self.lw.items():
            sh = self.shard(full, fd)
            self.layer_slice(g, f"pf.{nm}", f"W.{nm}", lws[nm], idx, "f32")
            g.e(f"pf.{nm}.c = {ty(self.cd, sh)} convert(pf.{nm})")
            g.e(f"pf.{nm}.st = ({ty(self.cd, sh)}, {ty(self.cd, full)}) all-gather-start(pf.{nm}.c), "
                f"channel_id={self.chan()}, replica_groups={self.g_fsdp}, dimensions={{{fd}}}, use_global_device_ids=true")

    def prefetch_done(self, g):
        for nm, (full, fd) in self.lw.items():
            g.e(f"PF.{nm} = {ty(self.cd, full)} all-gather-done(pf.{nm}.st)")
        return [f"PF.{nm}" for nm in self.lw]

    def scatter_g(self, g, out, src, full, fd, windowed=False):
        """A full weight gradient (compute dtype) -> this chip's fsdp shard in f32 (windowed:
        src is already this chip's block, summed round the ring by wgrad)."""
        sh = self.shard(full, fd)
        if windowed:
            g.e(f"{out}.r = {ty(self.cd, sh)} copy({src})")
        elif sh == tuple(full):
            g.e(f"{out}.r = {ty(self.cd, sh)} copy({src})")
        else:
            g.e(f"{out}.r = {ty(self.cd, sh)} reduce-scatter({src}), channel_id={self.chan()}, "
                f"replica_groups={self.g_fsdp}, dimensions={{{fd}}}, use_global_device_ids=true, to_apply=add_{self.cd}")
        g.e(f"{out} = {ty('f32', sh)} convert({out}.r)")

    def stack_init(self, g, nm, shape, dt):
        """The forward loop's stack of saved activation nm, before the loop writes its rows:
        uninitialised (the XLA TPU compiler allocates a scan's stacked outputs with an
        AllocateBuffer custom call, no fill: the loop writes every row before the backward
        loop reads one; bench/plan_xla.py), or zeros (`alloc: false`: libtpu's import)."""
        if self.alloc:
            g.e(f"Z.{nm} = {ty(dt, shape)} custom-call(), custom_call_target=\"AllocateBuffer\"")
        else:
            g.e(f"zc.{nm} = {dt}[] constant(0)")
            self.bcast(g, f"Z.{nm}", f"zc.{nm}", shape, (), dt=dt)

    def host(self, g, nm, shape):
        """An offloading policy keeps saved activation nm's stack (just written by the last
        line) in host memory: its layout names memory space S(5), as XLA's host offload does."""
        if self.offload and nm != "x":
            lay = "{" + ",".join(str(d) for d in range(len(shape) - 1, -1, -1)) + ":S(5)}"
            t = f"[{dims(shape)}]"
            line = g.lines[-1]
            at = line.index(t) + len(t)
            g.lines[-1] = line[:at] + lay + line[at:]

    def layer_slice(self, g, out, stack, shape, idx, dt):
        """Row idx of a stacked [L, ...] buffer as shape."""
        z = ", ".join(["zero"] * len(shape))
        g.e(f"{out}.s = {ty(dt, (1,) + tuple(shape))} dynamic-slice({stack}, {idx}, {z}), "
            f"dynamic_slice_sizes={{1,{dims(shape)}}}")
        g.e(f"{out} = {ty(dt, shape)} reshape({out}.s)")

    def layer_put(self, g, out, stack, val, shape, idx, dt):
        z = ", ".join(["zero"] * len(shape))
        g.e(f"{out}.v = {ty(dt, (1,) + tuple(shape))} reshape({val})")
        g.e(f"{out} = {ty(dt, (self.L,) + tuple(shape))} dynamic-update-slice({stack}, {out}.v, {idx}, {z})")

    # --- the layer -----------------------------------------------------------------------
    def saved(self):
        """Activations the forward loop keeps per layer: name -> (shape, dtype)."""
        Tm, D, A, bm, h, S = self.Tm, self.D, self.A, self.bm, self.h, self.S
        # The residuals are kept split over the tensor axis along d_model (MaxText's
        # activation_embed -> tensor): the tokens need not divide by it.
        Dr = D // self.T
        s = {"x": ((Tm, Dr), self.cd)}
        k = self.keep
        if "qkv" in k:
            s["qkv"] = ((Tm, self.QKV), self.cd)
        if "ctx" in k:
            rd = "f32" if self.pallas else self.cd  # the library kernel's residuals are f32
            s.update({"mx": ((bm, h, S), rd), "sm": ((bm, h, S), rd), "ctx": ((Tm, A), self.cd)})
        if "x1" in k:
            s["x1"] = ((Tm, Dr), self.cd)
        if self.E and k:
            s.update({"ein": ((self.Et, self.T * self.C, D), self.cd), "up": ((self.Et, self.T * self.C, self.fw), self.cd),
                      "act": ((self.Et, self.T * self.C, self.f), self.cd)})
        elif not self.E:
            if "up" in k:
                s["up"] = ((Tm, self.fw), self.cd)
            if "act" in k:
                s["act"] = ((Tm, self.f), self.cd)
        return s

    def recompute(self, g, a, W):
        """The activations the backward pass needs that the policy did not save, recomputed
        from what it did (each layer's input at least): returns the full set."""
        if not self.remat:
            return a
        if not self.keep or self.E:  # nothing but the input: the whole forward again
            _, act = self.forward_layer(g, a["x"], W)
            return act
        Tm, D = self.Tm, self.D
        a = dict(a)
        self.ensure_norm(g, a, "x")
        if "qkv" not in a:
            self.wdot(g, "qkv", a["xn"], W["wqkv"], "wqkv", (Tm, self.QKV), (1,), (0,))
            a["qkv"] = "qkv"
        if "ctx" not in a:
            a.update(self.attn_fwd(g, a["qkv"]))
        if "x1" not in a and not self.parallel:
            self.tp_out(g, "o", a["ctx"], (Tm, self.A), W["wo"], "wo", 0)
            self.tp_add(g, "x1", a["x"], "o")
            a["x1"] = "x1"
        if not self.parallel:
            self.ensure_norm(g, a, "x1")
        if "up" not in a:
            self.wdot(g, "up", a["xn"] if self.parallel else a["x1n"], W["w1"], "w1", (Tm, self.fw), (1,), (0,))
            a["up"] = "up"
        if "act" not in a:
            self.mlp_act(g, a["up"], "act", (Tm,))
            a["act"] = "act"
        return a

    def forward_layer(self, g, x, W):
        """Emits one layer's forward on x with gathered weights W; returns (y, activations)."""
        cd, Tm, D, A, bm, h, S, hd = self.cd, self.Tm, self.D, self.A, self.bm, self.h, self.S, self.hd
        act = {"x": x}
        self.ensure_norm(g, act, "x")
        self.wdot(g, "qkv", act["xn"], W["wqkv"], "wqkv", (Tm, self.QKV), (1,), (0,))
        act["qkv"] = "qkv"
        act.update(self.attn_fwd(g, "qkv"))
        if self.parallel:
            return self.forward_parallel(g, x, W, act)
        self.tp_out(g, "o", "ctx", (Tm, A), W["wo"], "wo", 0)
        self.tp_add(g, "x1", x, "o")
        act["x1"] = "x1"
        if self.E:
            self.moe_fwd(g, "x1", W)
            act.update({"ein": "ein", "up": "up", "act": "act"})
        else:
            self.ensure_norm(g, act, "x1")
            self.wdot(g, "up", act["x1n"], W["w1"], "w1", (Tm, self.fw), (1,), (0,))
            self.mlp_act(g, "up", "act", (Tm,))
            self.tp_out(g, "dn", "act", (Tm, self.f), W["w2"], "w2", 0)
            act.update({"up": "up", "act": "act"})
            self.tp_add(g, "y", "x1.s" if self.T > 1 else "x1", "dn", split=True)
            return "y", act
        self.ew(g, "y", "add", (Tm, D), "x1", "dn")
        return "y", act

    def forward_parallel(self, g, x, W, act):
        """The rest of a parallel block's forward: the MLP on the layer input x, then
        y = x + out_proj + MLP, the two products reduce-scattered over tensor (each output is
        constrained to activation_embed in MaxText's block) and gathered once."""
        Tm, D, A = self.Tm, self.D, self.A
        self.wdot(g, "up", act["xn"], W["w1"], "w1", (Tm, self.fw), (1,), (0,))
        self.mlp_act(g, "up", "act", (Tm,))
        act.update({"up": "up", "act": "act"})
        self.tp_out_sum(g, "od", [("ctx", (Tm, A), W["wo"], "wo", 0), ("act", (Tm, self.f), W["w2"], "w2", 0)])
        self.tp_add(g, "y", x, "od")
        return "y", act

    def ensure_norm(self, g, a, nm):
        """a[nm + "n"]: the residual a[nm] as the matmuls read it, RMSNorm'd when the model has
        norms (its row scale a[nm + "n.r"] kept for the backward), else a[nm] itself; written
        once (the backward writes it where the forward's was not kept)."""
        if nm + "n" in a:
            return
        if not self.rms:
            a[nm + "n"] = a[nm]
            return
        out = g.name(nm + "n")
        a[nm + "n.r"] = norms.residual_norm(self, g, out, a[nm])
        a[nm + "n"] = out

    def norm_bwd(self, g, out, gn, a, nm):
        """The gradient of the residual a[nm] through its norm (gn that of the normalised input,
        this chip's columns): a name of the same shape as gn."""
        if not self.rms:
            return gn
        norms.residual_norm_bwd(self, g, out, gn, a[nm], a[nm + "n.r"])
        return out

    def mlp_act(self, g, up, out, lead):
        f = self.f
        if self.glu:
            n = len(lead)
            sl = ", ".join(f"[0:{x}]" for x in lead)
            g.e(f"{out}.a = {ty(self.cd, lead + (f,))} slice({up}), slice={{{sl}, [0:{f}]}}")
            g.e(f"{out}.g = {ty(self.cd, lead + (f,))} slice({up}), slice={{{sl}, [{f}:{2 * f}]}}")
            self.ew(g, f"{out}.s", "logistic", lead + (f,), f"{out}.g")
            self.ew(g, f"{out}.sg", "multiply", lead + (f,), f"{out}.g", f"{out}.s")
            self.ew(g, out, "multiply", lead + (f,), f"{out}.a", f"{out}.sg")
            del n
        elif self.relu:  # max(up, 0): MaxText's mlp_activations ["relu"]
            self.const(g, f"{out}.z", "0")
            self.bcast(g, f"{out}.zb", f"{out}.z", lead + (f,), ())
            self.ew(g, out, "maximum", lead + (f,), up, f"{out}.zb")
        else:
            self.ew(g, out, "tanh", lead + (f,), up)

    def mlp_act_bwd(self, g, gact, up, act, out, lead):
        f = self.f
        if self.glu:
            sl = ", ".join(f"[0:{x}]" for x in lead)
            g.e(f"{out}.a = {ty(self.cd, lead + (f,))} slice({up}), slice={{{sl}, [0:{f}]}}")
            g.e(f"{out}.g = {ty(self.cd, lead + (f,))} slice({up}), slice={{{sl}, [{f}:{2 * f}]}}")
            self.ew(g, f"{out}.s", "logistic", lead + (f,), f"{out}.g")
            self.ew(g, f"{out}.sg", "multiply", lead + (f,), f"{out}.g", f"{out}.s")
            self.ew(g, f"{out}.da", "multiply", lead + (f,), gact, f"{out}.sg")
            self.ew(g, f"{out}.t", "multiply", lead + (f,), gact, f"{out}.a")
            self.ew(g, f"{out}.dg", "multiply", lead + (f,), f"{out}.t", f"{out}.s")
            self.ew(g, out, "concatenate", lead + (2 * f,), f"{out}.da", f"{out}.dg")
            g.lines[-1] += f", dimensions={{{len(lead)}}}"
        elif self.relu:  # the gradient passes where up > 0
            self.const(g, f"{out}.z", "0")
            self.bcast(g, f"{out}.zb", f"{out}.z", lead + (f,), ())
            g.e(f"{out}.p = {ty('pred', lead + (f,))} compare({up}, {out}.zb), direction=GT")
            self.ew(g, out, "select", lead + (f,), f"{out}.p", gact, f"{out}.zb")
        else:
            self.ew(g, f"{out}.sq", "multiply", lead + (f,), act, act)
            self.const(g, f"{out}.one", "1")
            self.bcast(g, f"{out}.oneb", f"{out}.one", lead + (f,), ())
            self.ew(g, f"{out}.d", "subtract", lead + (f,), f"{out}.oneb", f"{out}.sq")
            self.ew(g, out, "multiply", lead + (f,), gact, f"{out}.d")

    def attn_fwd(self, g, qkv):
        """q, k, v from qkv [Tm, A + 2 Akv]; scores, softmax (its max mx and sum sm kept), ctx [Tm, A]."""
        Tm, A, bm, h, S, hd = self.Tm, self.A, self.bm, self.h, self.S, self.hd
        self.split_qkv(g, qkv, "")
        if self.flash:
            return self.flash_fwd(g)
        self.scores(g)
        g.e(f"mx = {ty(self.cd, (bm, h, S))} reduce(sc, ninf), dimensions={{3}}, to_apply=max_{self.cd}")
        self.probs(g, "mx", None)
        g.e(f"sm = {ty(self.cd, (bm, h, S))} reduce(ex, zerof), dimensions={{3}}, to_apply=add_{self.cd}")
        self.probs(g, None, "sm")
        self.dot(g, "ctx4", "p", "v4", (bm, h, S, hd), (3,), (1,), (0, 1), (0, 2))
        g.e(f"ctxt = {ty(self.cd, (bm, S, h, hd))} transpose(ctx4), dimensions={{0,2,1,3}}")
        g.e(f"ctx = {ty(self.cd, (Tm, A))} reshape(ctxt)")
        return {"mx": "mx", "sm": "sm", "ctx": "ctx"}

    def split_qkv(self, g, qkv, p):
        """q, k, v of [bm, S, h, hd] from qkv [Tm, A + 2 Akv]: K and V broadcast from the
        chip's kvt heads to its h query heads (each KV head serves h // kvt of them)."""
        cd, Tm, A, Akv, bm, h, S, hd, kv = self.cd, self.Tm, self.A, self.Akv, self.bm, self.h, self.S, self.hd, self.kvt
        lo = 0
        self.pre[p] = {}
        for nm, w in (("q", A), ("k", Akv), ("v", Akv)):
            g.e(f"{p}{nm} = {ty(cd, (Tm, w))} slice({qkv}), slice={{[0:{Tm}], [{lo}:{lo + w}]}}")
            lo += w
            sh = (bm, S, h if w == A else kv, hd)
            fin = f"{p}{nm}4" if w == A else f"{p}{nm}k"
            g.e(f"{fin if not (self.rope and nm != 'v') and nm not in self.qkn else p + nm + '0'} = {ty(cd, sh)} reshape({p}{nm})")
            self.head_ops(g, p, nm, sh, fin)
            if w != A:
                g.e(f"{p}{nm}g = {ty(cd, (bm, S, kv, h // kv, hd))} broadcast({p}{nm}k), dimensions={{0,1,2,4}}")
                g.e(f"{p}{nm}4 = {ty(cd, (bm, S, h, hd))} reshape({p}{nm}g)")

    def head_ops(self, g, p, nm, sh, fin):
        """The rotary embedding (q, k) and MaxText's 2023 head norm (q, k; v with qkv) from {p}{nm}0 to
        fin, where the model has them; what their backward needs in self.pre[p][nm]."""
        ro, hn = self.rope and nm != "v", nm in self.qkn
        if not ro and not hn:
            return
        x = f"{p}{nm}0"
        rx = x
        if ro:
            rx = fin if not hn else f"{p}{nm}ro"
            norms.rope(self, g, rx, x, sh)
        r = norms.head_norm(self, g, fin, rx, sh) if hn else None
        self.pre[p][nm] = (x, rx, r, sh)

    def head_ops_bwd(self, g, nm, gr, sh):
        """The gradient through head_ops of the backward's q, k or v (prefix "b"): gr that of
        their output (shape sh); returns that of the projection's output."""
        e = self.pre.get("b", {}).get(nm)
        if not e:
            return gr
        x, rx, r, _ = e
        if r is not None:
            norms.head_norm_bwd(self, g, f"g.{nm}hn", gr, rx, r, sh)
            gr = f"g.{nm}hn"
        if self.rope and nm != "v":
            norms.rope(self, g, f"g.{nm}ro", gr, sh, grad=True)
            gr = f"g.{nm}ro"
        return gr

    def causal_mask(self, g, out, s, sh):
        """Scores s of shape sh [bm, h, R, Bk] whose rows are the queries from a key block's
        first position on (the block's suffix): entries with column > row are masked to -inf
        (a decoder's causal mask: query r sees keys up to r), the rest kept."""
        cd, R, C = self.cd, sh[2], sh[3]
        g.e(f"{out}.r = s32[{R},{C}] iota(), iota_dimension=0")
        g.e(f"{out}.c = s32[{R},{C}] iota(), iota_dimension=1")
        g.e(f"{out}.k = pred[{R},{C}] compare({out}.r, {out}.c), direction=GE")
        g.e(f"{out}.kb = pred[{dims(sh)}] broadcast({out}.k), dimensions={{2,3}}")
        self.bcast(g, f"{out}.nb", "ninf", sh, ())
        g.e(f"{out} = {ty(cd, sh)} select({out}.kb, {s}, {out}.nb)")

    def flash_fwd(self, g):
        """Flash attention's forward (flash_fwd_blocks): as separate ops, or with "kernel" as
        one kernel (a fusion of q, k and v whose scores and running figures stay on chip, as
        the Pallas kernel keeps them in VMEM; its outputs the normalised output and the row
        max and sum); ctx [Tm, A] from it."""
        cd, Tm, A, bm, h, S, hd = self.cd, self.Tm, self.A, self.bm, self.h, self.S, self.hd
        if self.pallas:
            o4, m, l = flash.emit_fwd(self, g)
        elif self.kernel:
            qt = ty(cd, (bm, S, h, hd))
            o4, m, l = self.fused(g, "fa", [("q4", "q4", qt), ("k4", "k4", qt), ("v4", "v4", qt)],
                                  lambda b: self.flash_fwd_blocks(b),
                                  [ty(cd, (bm, h, S, hd)), ty(cd, (bm, h, S)), ty(cd, (bm, h, S))])
        else:
            o4, m, l = self.flash_fwd_blocks(g)
        g.e(f"ctxt = {ty(cd, (bm, S, h, hd))} transpose({o4}), dimensions={{0,2,1,3}}")
        g.e(f"ctx = {ty(cd, (Tm, A))} reshape(ctxt)")
        return {"mx": m, "sm": l, "ctx": "ctx"}

    def fused(self, g, tag, params, body, out_types):
        """A kernel: a fusion whose computation takes params [(name inside, operand, type)],
        runs body(gen) (which returns the names of its results) and returns out_types; its
        intermediates never reach HBM. Returns the names of its results in g."""
        self.kn = getattr(self, "kn", 0) + 1
        comp, out = f"{tag}_kernel{self.kn}", f"{tag}.k{self.kn}"
        b = Gen()
        for k, (nm, _, t) in enumerate(params):
            b.e(f"{nm} = {t} parameter({k})")
        self.common_consts(b)
        self.in_kernel = True
        res = body(b)
        self.in_kernel = False
        b.e(f"ROOT {comp}.r = ({', '.join(out_types)}) tuple({', '.join(res)})")
        self.extra.append(f"{comp} {{\n" + "\n".join(b.lines) + "\n}\n")
        g.e(f"{out} = ({', '.join(out_types)}) fusion({', '.join(a for _, a, _ in params)}), kind=kOutput, calls={comp}")
        names = []
        for k, t in enumerate(out_types):
            g.e(f"{out}.{k} = {t} get-tuple-element({out}), index={k}")
            names.append(f"{out}.{k}")
        return names

    def flash_fwd_blocks(self, g):
        """Flash attention's forward over key/value blocks of Bk: per block the scores
        [bm, h, R, Bk], the running max m and sum l rescaled, the output accumulated; ctx =
        acc / l, and the max and sum kept (mx, sm) as the materialised form keeps them. Causal
        (MaxText's decoder; the Pallas kernel skips the blocks above the diagonal): key block j
        is computed only for the queries it reaches, rows j * Bk to S (R = S - j * Bk), the
        diagonal block masked, and those rows of m, l and acc updated in place."""
        cd, Tm, A, bm, h, S, hd, Bk = self.cd, self.Tm, self.A, self.bm, self.h, self.S, self.hd, self.Bk
        m = l = acc = None
        for j in range(S // Bk):
            lo = j * Bk if self.causal else 0
            R = S - lo
            st, sh, so = (bm, h, R), (bm, h, R, Bk), (bm, h, R, hd)
            for nm in ("k", "v"):
                g.e(f"fa.{nm}{j} = {ty(cd, (bm, Bk, h, hd))} slice({nm}4), "
                    f"slice={{[0:{bm}], [{j * Bk}:{(j + 1) * Bk}], [0:{h}], [0:{hd}]}}")
            q = "q4"
            if lo:
                q = f"fa.q{j}"
                g.e(f"{q} = {ty(cd, (bm, R, h, hd))} slice(q4), slice={{[0:{bm}], [{lo}:{S}], [0:{h}], [0:{hd}]}}")
            sc = f"fa.s{j}"
            self.dot(g, sc, q, f"fa.k{j}", sh, (3,), (3,), (0, 2), (0, 2))
            if self.causal:
                self.causal_mask(g, f"fa.sm{j}", sc, sh)
                sc = f"fa.sm{j}"
            g.e(f"fa.mj{j} = {ty(cd, st)} reduce({sc}, ninf), dimensions={{3}}, to_apply=max_{cd}")
            if m is not None:  # the rows this block reaches of the running figures
                if lo:
                    for nm, v, shp in (("mo", m, st), ("lo", l, st), ("ao", acc, so)):
                        sl = f"[0:{bm}], [0:{h}], [{lo}:{S}]" + (f", [0:{hd}]" if len(shp) == 4 else "")
                        g.e(f"fa.{nm}{j} = {ty(cd, shp)} slice({v}), slice={{{sl}}}")
                    mo, lo_, ao = f"fa.mo{j}", f"fa.lo{j}", f"fa.ao{j}"
                else:
                    mo, lo_, ao = m, l, acc
            mn = f"fa.mj{j}" if m is None else f"fa.m{j}"
            if m is not None:
                self.ew(g, mn, "maximum", st, mo, f"fa.mj{j}")
            self.bcast(g, f"fa.mb{j}", mn, sh, (0, 1, 2))
            self.ew(g, f"fa.d{j}", "subtract", sh, sc, f"fa.mb{j}")
            self.ew(g, f"fa.p{j}", "exponential", sh, f"fa.d{j}")
            g.e(f"fa.r{j} = {ty(cd, st)} reduce(fa.p{j}, zerof), dimensions={{3}}, to_apply=add_{cd}")
            self.dot(g, f"fa.o{j}", f"fa.p{j}", f"fa.v{j}", so, (3,), (1,), (0, 1), (0, 2))
            if m is None:
                m, l, acc = mn, f"fa.r{j}", f"fa.o{j}"
            else:  # rescale what was summed under the old max
                self.ew(g, f"fa.cd{j}", "subtract", st, mo, mn)
                self.ew(g, f"fa.c{j}", "exponential", st, f"fa.cd{j}")
                self.ew(g, f"fa.lc{j}", "multiply", st, lo_, f"fa.c{j}")
                self.ew(g, f"fa.l{j}", "add", st, f"fa.lc{j}", f"fa.r{j}")
                self.bcast(g, f"fa.cb{j}", f"fa.c{j}", so, (0, 1, 2))
                self.ew(g, f"fa.ac{j}", "multiply", so, ao, f"fa.cb{j}")
                self.ew(g, f"fa.a{j}", "add", so, f"fa.ac{j}", f"fa.o{j}")
                if lo:  # written back into the rows it covers
                    fs, fo = (bm, h, S), (bm, h, S, hd)
                    g.e(f"fa.lz{j} = s32[] constant({lo})")
                    g.e(f"fa.M{j} = {ty(cd, fs)} dynamic-update-slice({m}, {mn}, zero, zero, fa.lz{j})")
                    g.e(f"fa.L{j} = {ty(cd, fs)} dynamic-update-slice({l}, fa.l{j}, zero, zero, fa.lz{j})")
                    g.e(f"fa.A{j} = {ty(cd, fo)} dynamic-update-slice({acc}, fa.a{j}, zero, zero, fa.lz{j}, zero)")
                    m, l, acc = f"fa.M{j}", f"fa.L{j}", f"fa.A{j}"
                else:
                    m, l, acc = mn, f"fa.l{j}", f"fa.a{j}"
            m, l, acc = self.block_barrier(g, f"fa.b{j}", ((m, (bm, h, S)), (l, (bm, h, S)), (acc, (bm, h, S, hd))))
        so = (bm, h, S, hd)
        self.bcast(g, "fa.lb", l, so, (0, 1, 2))
        self.ew(g, "ctx4", "divide", so, acc, "fa.lb")
        return "ctx4", m, l

    def block_barrier(self, g, name, vals):
        """An optimization barrier over one block's results, so the next block is computed
        after this one (the kernel's order: one block's scores live at a time); returns the
        names to read them by. Inside a kernel (a fusion) nothing: it is one kernel."""
        if getattr(self, "in_kernel", False):
            return [v for v, _ in vals]
        g.e(f"{name}.t = ({', '.join(ty(self.cd, s) for _, s in vals)}) tuple({', '.join(v for v, _ in vals)})")
        g.e(f"{name} = ({', '.join(ty(self.cd, s) for _, s in vals)}) opt-barrier({name}.t)")
        out = []
        for k, (_, s) in enumerate(vals):
            g.e(f"{name}.{k} = {ty(self.cd, s)} get-tuple-element({name}), index={k}")
            out.append(f"{name}.{k}")
        return out

    def flash_bwd(self, g, a):
        """Flash attention's backward: D = rowsum(dO · O) (standing for rowsum(dP · P)), then
        the blocks (flash_bwd_blocks) as the Pallas kernel's two kernels, each a fusion that
        recomputes the probabilities from q, k and the kept max and sum — one for the key and
        value gradients, one for the query gradient — with "kernel", else as separate ops in
        one pass."""
        cd, bm, h, S, hd = self.cd, self.bm, self.h, self.S, self.hd
        if self.pallas:
            flash.emit_bwd(self, g, a["mx"], a["sm"], a["ctx"])
            return
        g.e(f"fb.o4 = {ty(cd, (bm, S, h, hd))} reshape({a['ctx']})")
        self.ew(g, "fb.do", "multiply", (bm, S, h, hd), "g.ctx4", "fb.o4")
        g.e(f"fb.dt = {ty(cd, (bm, S, h))} reduce(fb.do, zerof), dimensions={{3}}, to_apply=add_{cd}")
        g.e(f"fb.D = {ty(cd, (bm, h, S))} transpose(fb.dt), dimensions={{0,2,1}}")
        so = (bm, h, S, hd)
        if not self.kernel:
            gq, gk, gv = self.flash_bwd_blocks(g, a["mx"], a["sm"], "qkv")
        else:
            qt, st = ty(cd, (bm, S, h, hd)), ty(cd, (bm, h, S))
            ps = [("bq4", "bq4", qt), ("bk4", "bk4", qt), ("bv4", "bv4", qt), ("g.ctx4", "g.ctx4", qt),
                  ("fb.mx", a["mx"], st), ("fb.sm", a["sm"], st), ("fb.D", "fb.D", st)]
            gk, gv = self.fused(g, "fbkv", ps, lambda b: self.flash_bwd_blocks(b, "fb.mx", "fb.sm", "kv")[1:],
                                [ty(cd, so), ty(cd, so)])
            gq, = self.fused(g, "fbq", ps, lambda b: self.flash_bwd_blocks(b, "fb.mx", "fb.sm", "q")[:1], [ty(cd, so)])
        for nm, v in (("q", gq), ("k", gk), ("v", gv)):
            if v != f"g.{nm}4":
                g.e(f"g.{nm}4 = {ty(cd, so)} copy({v})")

    def flash_bwd_blocks(self, g, mx0, sm0, want):
        """The backward's blocks: per key block j the probabilities recomputed, and what want
        names — q: the query gradient accumulated; kv: the block's key and value gradients;
        qkv: all three in one pass. Causal: key block j over the query rows it reaches (j * Bk
        to S), the diagonal block masked, those rows of the q gradient updated in place.
        Returns (gq, gk, gv) names (None for what is not computed)."""
        cd, bm, h, S, hd, Bk = self.cd, self.bm, self.h, self.S, self.hd, self.Bk
        sb = (bm, h, Bk, hd)
        wq, wkv = "q" in want, "kv" in want
        a = {"mx": mx0, "sm": sm0}
        gk, gv, gq = [], [], None
        for j in range(S // Bk):
            lo = j * Bk if self.causal else 0
            R = S - lo
            st, sh, so = (bm, h, R), (bm, h, R, Bk), (bm, h, R, hd)
            for nm in ("k", "v"):
                g.e(f"fb.{nm}{j} = {ty(cd, (bm, Bk, h, hd))} slice(b{nm}4), "
                    f"slice={{[0:{bm}], [{j * Bk}:{(j + 1) * Bk}], [0:{h}], [0:{hd}]}}")
            q, go, mx, sm, Dr = "bq4", "g.ctx4", a["mx"], a["sm"], "fb.D"
            if lo:  # the query rows this key block reaches
                q, go, mx, sm, Dr = f"fb.q{j}", f"fb.go{j}", f"fb.mx{j}", f"fb.sm{j}", f"fb.Dr{j}"
                for o, src in ((q, "bq4"), (go, "g.ctx4")):
                    g.e(f"{o} = {ty(cd, (bm, R, h, hd))} slice({src}), slice={{[0:{bm}], [{lo}:{S}], [0:{h}], [0:{hd}]}}")
                for o, src in ((mx, a["mx"]), (sm, a["sm"]), (Dr, "fb.D")):
                    g.e(f"{o} = {ty(cd, st)} slice({src}), slice={{[0:{bm}], [0:{h}], [{lo}:{S}]}}")
            sc = f"fb.s{j}"
            self.dot(g, sc, q, f"fb.k{j}", sh, (3,), (3,), (0, 2), (0, 2))
            if self.causal:
                self.causal_mask(g, f"fb.sk{j}", sc, sh)
                sc = f"fb.sk{j}"
            # the row statistics broadcast per block, each read by one op (fused into it)
            self.bcast(g, f"fb.mb{j}", mx, sh, (0, 1, 2))
            self.ew(g, f"fb.d{j}", "subtract", sh, sc, f"fb.mb{j}")
            self.ew(g, f"fb.e{j}", "exponential", sh, f"fb.d{j}")
            self.bcast(g, f"fb.lb{j}", sm, sh, (0, 1, 2))
            self.ew(g, f"fb.p{j}", "divide", sh, f"fb.e{j}", f"fb.lb{j}")
            if wkv:
                self.dot(g, f"fb.gv{j}", f"fb.p{j}", go, sb, (2,), (1,), (0, 1), (0, 2))
            self.dot(g, f"fb.gp{j}", go, f"fb.v{j}", sh, (3,), (3,), (0, 2), (0, 2))
            self.bcast(g, f"fb.Db{j}", Dr, sh, (0, 1, 2))
            self.ew(g, f"fb.gd{j}", "subtract", sh, f"fb.gp{j}", f"fb.Db{j}")
            self.ew(g, f"fb.gs{j}", "multiply", sh, f"fb.p{j}", f"fb.gd{j}")
            if wq:
                self.dot(g, f"fb.gq{j}", f"fb.gs{j}", f"fb.k{j}", so, (3,), (1,), (0, 1), (0, 2))
            if wkv:
                self.dot(g, f"fb.gk{j}", f"fb.gs{j}", q, sb, (2,), (1,), (0, 1), (0, 2))
                gk.append(f"fb.gk{j}")
                gv.append(f"fb.gv{j}")
            if not wq:
                continue
            if gq is None:
                gq = f"fb.gq{j}"
            elif lo:
                g.e(f"fb.qo{j} = {ty(cd, so)} slice({gq}), slice={{[0:{bm}], [0:{h}], [{lo}:{S}], [0:{hd}]}}")
                self.ew(g, f"fb.qa{j}", "add", so, f"fb.qo{j}", f"fb.gq{j}")
                g.e(f"fb.lz{j} = s32[] constant({lo})")
                g.e(f"fb.q{j}u = {ty(cd, (bm, h, S, hd))} dynamic-update-slice({gq}, fb.qa{j}, zero, zero, fb.lz{j}, zero)")
                gq = f"fb.q{j}u"
            else:
                self.ew(g, f"fb.qa{j}", "add", so, gq, f"fb.gq{j}")
                gq = f"fb.qa{j}"
            vals = [(gq, (bm, h, S, hd))] + ([(gk[-1], sb), (gv[-1], sb)] if wkv else [])
            got = self.block_barrier(g, f"fb.b{j}", vals)
            gq = got[0]
            if wkv:
                gk[-1], gv[-1] = got[1:]
        so = (bm, h, S, hd)
        out = [gq, None, None]
        if want == "qkv":
            g.e(f"g.q4 = {ty(cd, so)} copy({gq})")
            out[0] = "g.q4"
        for k, (nm, parts) in enumerate((("k", gk), ("v", gv))):
            if not wkv:
                continue
            if len(parts) == 1:
                out[1 + k] = parts[0]
            else:
                o = f"g.{nm}4" if want == "qkv" else f"fb.{nm}c"
                g.e(f"{o} = {ty(cd, so)} concatenate({', '.join(parts)}), dimensions={{2}}")
                out[1 + k] = o
        return tuple(out)

    def scores(self, g):
        bm, h, S = self.bm, self.h, self.S
        sh = (bm, h, S, S)
        if self.causal:
            self.dot(g, "scu", "q4", "k4", sh, (3,), (3,), (0, 2), (0, 2))
            self.causal_mask(g, "sc", "scu", sh)
        else:
            self.dot(g, "sc", "q4", "k4", sh, (3,), (3,), (0, 2), (0, 2))

    def probs(self, g, mx, sm):
        bm, h, S = self.bm, self.h, self.S
        sh = (bm, h, S, S)
        if mx:
            self.bcast(g, "mxb", mx, sh, (0, 1, 2))
            self.ew(g, "sh", "subtract", sh, "sc", "mxb")
            self.ew(g, "ex", "exponential", sh, "sh")
        if sm:
            self.bcast(g, "smb", sm, sh, (0, 1, 2))
            self.ew(g, "p", "divide", sh, "ex", "smb")

    def moe_fwd(self, g, x1, W):
        """Experts over the tensor axis: route 1/T of the tokens, top-k copies, all-to-all."""
        cd, Tm, D, T, Et, C, K, Ts = self.cd, self.Tm, self.D, self.T, self.Et, self.C, self.K, self.Ts
        n = Et * T * C
        self.dot(g, "rl", x1, W["wr"], (Tm, self.E), (1,), (0,))  # router logits
        g.e(f"rmx = {ty(cd, (Tm,))} reduce(rl, ninf), dimensions={{1}}, to_apply=max_{cd}")
        g.e(f"xs = {ty(cd, (Ts, D))} slice({x1}), slice={{[0:{Ts}], [0:{D}]}}")
        g.e(f"xk = {ty(cd, (K * Ts, D))} concatenate({', '.join(['xs'] * K)}), dimensions={{0}}")
        g.e(f"xd = {ty(cd, (T, Et * C, D))} reshape(xk)")
        self.a2a(g, "xr", "xd", (T, Et * C, D))
        g.e(f"xr4 = {ty(cd, (T, Et, C, D))} reshape(xr)")
        g.e(f"xrt = {ty(cd, (Et, T, C, D))} transpose(xr4), dimensions={{1,0,2,3}}")
        g.e(f"ein = {ty(cd, (Et, T * C, D))} reshape(xrt)")
        self.dot(g, "up", "ein", W["w1"], (Et, T * C, self.fw), (2,), (1,), (0,), (0,))
        self.mlp_act(g, "up", "act", (Et, T * C))
        self.dot(g, "eo", "act", W["w2"], (Et, T * C, D), (2,), (1,), (0,), (0,))
        g.e(f"eo4 = {ty(cd, (Et, T, C, D))} reshape(eo)")
        g.e(f"eot = {ty(cd, (T, Et, C, D))} transpose(eo4), dimensions={{1,0,2,3}}")
        g.e(f"eo3 = {ty(cd, (T, Et * C, D))} reshape(eot)")
        self.a2a(g, "yb", "eo3", (T, Et * C, D))
        g.e(f"yk = {ty(cd, (K, Ts, D))} reshape(yb)")
        g.e(f"ys = {ty(cd, (Ts, D))} reduce(yk, zerof), dimensions={{0}}, to_apply=add_{cd}")
        self.ag_tp(g, "dn", "ys", (Ts, D), (Tm, D))
        del n

    def tp_coll(self, g, out, x, shape, op, extra="", dim=0):
        """A collective over the tensor-parallel group on dimension dim (a copy when T = 1)."""
        if self.T == 1:
            g.e(f"{out} = {ty(self.cd, shape)} copy({x})")
        else:
            g.e(f"{out} = {ty(self.cd, shape)} {op}({x}), channel_id={self.chan()}, replica_groups={self.g_tp}, "
                f"dimensions={{{dim}}}, use_global_device_ids=true{extra}")

    def a2a(self, g, out, x, shape):
        self.tp_coll(g, out, x, shape, "all-to-all")

    def ag_tp(self, g, out, x, sh, full, dim=0):
        self.tp_coll(g, out, x, full, "all-gather", dim=dim)

    def rs_tp(self, g, out, x, full, sh):
        self.tp_coll(g, out, x, sh, "reduce-scatter", f", to_apply=add_{self.cd}")

    def tp_out(self, g, out, lhs, ls, W, nm, rc):
        """out [Tm, D/T]: this chip's d_model columns of lhs . W[nm] summed over the tensor axis
        (the reduce-scatter MaxText's activation_embed rule puts after a matmul that writes the
        residual; a copy of the whole product when T = 1). With an even tensor axis the XLA TPU
        compiler writes it as a windowed einsum (bench/plan_tp_probe.py, docs/plan.md): T/2
        steps, each moving two travelling sums one chip on round the tensor ring, one forward
        and one backward, while lhs is multiplied by the two weight column blocks they are
        bound for (one matmul), then adding its halves; the backward sum moves once more at
        the end (T + 1 block transfers, T/2 matmuls of two blocks, as libtpu's program has
        them)."""
        cd, T, Tm, D = self.cd, self.T, self.Tm, self.D
        Dr = D // T
        if T % 2 or not self.tp_win:
            self.wdot(g, f"{out}.p", lhs, W, nm, (Tm, D), (1,), (rc,))
            self.tp_coll(g, out, f"{out}.p", (Tm, Dr), "reduce-scatter", f", to_apply=add_{cd}", dim=1)
            return
        full = self.lw[nm][0]
        od = 1 - rc  # the weight's output (d_model) dimension
        blk = list(full)
        blk[od] = Dr
        sh = (Tm, Dr)
        self.const(g, f"{out}.z", "0")
        self.bcast(g, f"{out}.s", f"{out}.z", sh, ())
        _, state = self.ring_state(g, out, cd, [(f"{out}.s", sh), (f"{out}.s", sh), (lhs, ls), (W, full)])

        def body(b):
            # Both sums move first (the moves overlap the step's matmuls), then add: the forward
            # sum for block d is at chip d - T/2 + 1 + step, the backward one at d + T/2 - step.
            b.e(f"hh = s32[] constant({T // 2})")
            b.e("ia0 = s32[] add(me, hh)")
            b.e("ia1 = s32[] subtract(ia0, s0)")
            b.e("ia2 = s32[] add(ia1, nn)")
            b.e("ia3 = s32[] subtract(ia2, one)")
            b.e("ia = s32[] remainder(ia3, nn)")
            b.e("ib0 = s32[] add(me, hh)")
            b.e("ib1 = s32[] add(ib0, s0)")
            b.e("ib = s32[] remainder(ib1, nn)")
            b.e(f"bl = s32[] constant({Dr})")
            self.permute(b, "na", "s1", sh, 1, tp=True)
            self.permute(b, "nb", "s2", sh, -1, tp=True)
            for t in ("a", "b"):
                b.e(f"o{t} = s32[] multiply(i{t}, bl)")
                idx = ", ".join(f"o{t}" if k == od else "zero" for k in range(len(full)))
                b.e(f"w{t} = {ty(cd, blk)} dynamic-slice(s4, {idx}), dynamic_slice_sizes={{{dims(blk)}}}")
            # One matmul over both blocks (the compiler's step: one partial-matmul fusion of two
            # blocks), its halves added to the sums that arrived.
            b2 = list(blk)
            b2[od] = 2 * Dr
            b.e(f"wc = {ty(cd, b2)} concatenate(wa, wb), dimensions={{{od}}}")
            b.e(f"pc = {ty(cd, (Tm, 2 * Dr))} dot(s3, wc), lhs_contracting_dims={{1}}, rhs_contracting_dims={{{rc}}}")
            b.e(f"pa = {ty(cd, sh)} slice(pc), slice={{[0:{Tm}], [0:{Dr}]}}")
            b.e(f"pb = {ty(cd, sh)} slice(pc), slice={{[0:{Tm}], [{Dr}:{2 * Dr}]}}")
            b.e(f"ca = {ty(cd, sh)} add(na, pa)")
            b.e(f"cb = {ty(cd, sh)} add(nb, pb)")
            return ["ca", "cb", "s3", "s4"]

        self.ring_loop(g, f"{out}.loop", f"{out}.in", state, T // 2, body, tp=True)
        g.e(f"{out}.f = {ty(cd, sh)} get-tuple-element({out}.loop), index=1")
        g.e(f"{out}.bk = {ty(cd, sh)} get-tuple-element({out}.loop), index=2")
        self.permute(g, f"{out}.b", f"{out}.bk", sh, -1, tp=True)  # one chip on, to its block's chip
        g.e(f"{out} = {ty(cd, sh)} add({out}.f, {out}.b)")

    def tp_out_sum(self, g, out, parts):
        """out [Tm, D/T]: this chip's d_model columns of the sum of the products parts (each
        (lhs, ls, W, nm, rc) as tp_out's), reduced over tensor as the XLA TPU compiler reduces
        a parallel block's two branches: where the reduction stays a collective (an odd tensor
        axis, or "tp_windowed": False) the products are added first and reduce-scattered once
        (XLA's ReduceScatterReassociate; libtpu on bench/plan_xla.py maxtext_512b's program: one
        reduce-scatter of out_proj + MLP a layer); where it is a windowed einsum, each product
        gets its own ring and the results are added (libtpu compiling MaxText's parallel block
        from JAX over fsdp 4 x tensor 16 of v5p: one bidirectional ring per dot, then the add)."""
        cd, T, Tm, D = self.cd, self.T, self.Tm, self.D
        if T % 2 or not self.tp_win:
            for k, (lhs, _, W, nm, rc) in enumerate(parts):
                self.wdot(g, f"{out}.p{k}", lhs, W, nm, (Tm, D), (1,), (rc,))
            acc = f"{out}.p0"
            for k in range(1, len(parts)):
                self.ew(g, f"{out}.a{k}", "add", (Tm, D), acc, f"{out}.p{k}")
                acc = f"{out}.a{k}"
            self.tp_coll(g, out, acc, (Tm, D // T), "reduce-scatter", f", to_apply=add_{cd}", dim=1)
            return
        for k, (lhs, ls, W, nm, rc) in enumerate(parts):
            self.tp_out(g, f"{out}.r{k}", lhs, ls, W, nm, rc)
        acc = f"{out}.r0"
        for k in range(1, len(parts)):
            nxt = out if k == len(parts) - 1 else f"{out}.a{k}"
            self.ew(g, nxt, "add", (Tm, D // T), acc, f"{out}.r{k}")
            acc = nxt

    def tp_add(self, g, out, base, part, split=False):
        """The residual update out = base + part kept split over the tensor axis (MaxText's
        activation_embed): this chip's columns of base (split already, or sliced from the
        gathered whole) plus the reduce-scattered part (tp_out) as out.s, all-gathered over
        tensor into out for the matmuls that read it (a synchronous all-gather, as the compiler
        keeps it)."""
        cd, T, Tm, D = self.cd, self.T, self.Tm, self.D
        if T == 1:
            self.ew(g, out, "add", (Tm, D), base, part)
            return
        Dr = D // T
        if not split:
            g.e(f"{out}.b = {ty(cd, (Tm, Dr))} slice({base}), slice={{[0:{Tm}], [0:{Dr}]}}")
            base = f"{out}.b"
        self.ew(g, f"{out}.s", "add", (Tm, Dr), base, part)
        self.ag_tp(g, out, f"{out}.s", (Tm, Dr), (Tm, D), dim=1)

    def backward_layer(self, g, gy, a, W):
        """Gradients of one layer: returns (gx, {weight: full gradient})."""
        cd, Tm, D, A, bm, h, S, hd = self.cd, self.Tm, self.D, self.A, self.bm, self.h, self.S, self.hd
        G = {}
        if self.E:
            T, Et, C, K, Ts = self.T, self.Et, self.C, self.K, self.Ts
            n = T * C
            # d(all-gather over tp) = this chip's rows of gy.
            g.e(f"gys = {ty(cd, (Ts, D))} slice({gy}), slice={{[0:{Ts}], [0:{D}]}}")
            g.e(f"gyk = {ty(cd, (K * Ts, D))} concatenate({', '.join(['gys'] * K)}), dimensions={{0}}")
            g.e(f"gyd = {ty(cd, (T, Et * C, D))} reshape(gyk)")
            self.a2a(g, "gyr", "gyd", (T, Et * C, D))
            g.e(f"gyr4 = {ty(cd, (T, Et, C, D))} reshape(gyr)")
            g.e(f"gyt = {ty(cd, (Et, T, C, D))} transpose(gyr4), dimensions={{1,0,2,3}}")
            g.e(f"geo = {ty(cd, (Et, n, D))} reshape(gyt)")
            self.dot(g, "g.act", "geo", W["w2"], (Et, n, self.f), (2,), (2,), (0,), (0,))
            self.dot(g, "g.w2", a["act"], "geo", (Et, self.f, D), (1,), (1,), (0,), (0,))
            self.mlp_act_bwd(g, "g.act", a["up"], a["act"], "g.up", (Et, n))
            self.dot(g, "g.ein", "g.up", W["w1"], (Et, n, D), (2,), (2,), (0,), (0,))
            self.dot(g, "g.w1", a["ein"], "g.up", (Et, D, self.fw), (1,), (1,), (0,), (0,))
            g.e(f"gei4 = {ty(cd, (Et, T, C, D))} reshape(g.ein)")
            g.e(f"geit = {ty(cd, (T, Et, C, D))} transpose(gei4), dimensions={{1,0,2,3}}")
            g.e(f"gei3 = {ty(cd, (T, Et * C, D))} reshape(geit)")
            self.a2a(g, "gxb", "gei3", (T, Et * C, D))
            g.e(f"gxk = {ty(cd, (K, Ts, D))} reshape(gxb)")
            g.e(f"gxs = {ty(cd, (Ts, D))} reduce(gxk, zerof), dimensions={{0}}, to_apply=add_{cd}")
            self.ag_tp(g, "g.x1m", "gxs", (Ts, D), (Tm, D))
            # Router: its gradient from the logits (the gate's share, small).
            self.dot(g, "rlg", a["x1"], W["wr"], (Tm, self.E), (1,), (0,))  # stands in for d loss / d logits
            self.dot(g, "g.wr", a["x1"], "rlg", (D, self.E), (0,), (0,))
            self.ew(g, "g.x1", "add", (Tm, D), gy, "g.x1m")
            G.update({"w1": "g.w1", "w2": "g.w2", "wr": "g.wr"})
        else:
            a = dict(a)
            self.ensure_norm(g, a, "x")
            if not self.parallel:
                self.ensure_norm(g, a, "x1")
            self.wdot(g, "g.act", gy, W["w2"], "w2", (Tm, self.f), (1,), (1,))
            self.wgrad(g, "g.w2", a["act"], (Tm, self.f), gy, (Tm, D), "w2")
            self.mlp_act_bwd(g, "g.act", a["up"], a["act"], "g.up", (Tm,))
            if not self.parallel:
                self.tp_out(g, "g.x1a", "g.up", (Tm, self.fw), W["w1"], "w1", 1)
                self.tp_add(g, "g.x1", gy, self.norm_bwd(g, "g.x1b", "g.x1a", a, "x1"))
            self.wgrad(g, "g.w1", a["xn"] if self.parallel else a["x1n"], (Tm, D), "g.up", (Tm, self.fw), "w1")
            G.update({"w1": "g.w1", "w2": "g.w2"})
        gyo = gy if self.parallel else "g.x1"  # the attention branch's output gradient
        self.wdot(g, "g.ctx", gyo, W["wo"], "wo", (Tm, A), (1,), (1,))
        self.wgrad(g, "g.wo", a["ctx"], (Tm, A), gyo, (Tm, D), "wo")
        # Attention backward (flash style: p recomputed from q, k, the saved max and sum).
        self.split_qkv(g, a["qkv"], "b")
        if self.flash:
            g.e(f"g.ctx4 = {ty(cd, (bm, S, h, hd))} reshape(g.ctx)")
            self.flash_bwd(g, a)
        else:
            self.attn_bwd_full(g, a)
        self.attn_grads_out(g)
        if self.parallel:  # both branches' input gradients reduced and added to the residual's
            self.tp_out_sum(g, "g.xs", [("g.up", (Tm, self.fw), W["w1"], "w1", 1),
                                        ("g.qkv", (Tm, self.QKV), W["wqkv"], "wqkv", 1)])
            self.tp_add(g, "g.x", gy, self.norm_bwd(g, "g.xsb", "g.xs", a, "x"))
            self.wgrad(g, "g.wqkv", a["xn"], (Tm, D), "g.qkv", (Tm, self.QKV), "wqkv")
            G.update({"wqkv": "g.wqkv", "wo": "g.wo"})
            return "g.x", G
        self.tp_out(g, "g.xa", "g.qkv", (Tm, self.QKV), W["wqkv"], "wqkv", 1)
        gxa = self.norm_bwd(g, "g.xb", "g.xa", a, "x") if not self.E else "g.xa"
        if self.E or self.T == 1:  # g.x1 whole (the MoE layer sums its gradient whole)
            self.tp_add(g, "g.x", "g.x1", gxa)
        else:
            self.tp_add(g, "g.x", "g.x1.s", gxa, split=True)
        self.wgrad(g, "g.wqkv", a["xn"] if not self.E else a["x"], (Tm, D), "g.qkv", (Tm, self.QKV), "wqkv")
        G.update({"wqkv": "g.wqkv", "wo": "g.wo"})
        return "g.x", G

    def attn_bwd_full(self, g, a):
        """Attention's backward over the materialised [S, S] probabilities."""
        cd, bm, h, S, hd = self.cd, self.bm, self.h, self.S, self.hd
        sh = (bm, h, S, S)
        self.dot(g, "bscu" if self.causal else "bsc", "bq4", "bk4", sh, (3,), (3,), (0, 2), (0, 2))
        if self.causal:
            self.causal_mask(g, "bsc", "bscu", sh)
        self.bcast(g, "bmxb", a["mx"], sh, (0, 1, 2))
        self.ew(g, "bsh", "subtract", sh, "bsc", "bmxb")
        self.ew(g, "bex", "exponential", sh, "bsh")
        self.bcast(g, "bsmb", a["sm"], sh, (0, 1, 2))
        self.ew(g, "bp", "divide", sh, "bex", "bsmb")
        g.e(f"g.ctx4 = {ty(cd, (bm, S, h, hd))} reshape(g.ctx)")
        self.dot(g, "g.v4", "bp", "g.ctx4", (bm, h, S, hd), (2,), (1,), (0, 1), (0, 2))
        self.dot(g, "g.p", "g.ctx4", "bv4", sh, (3,), (3,), (0, 2), (0, 2))
        self.ew(g, "g.pp", "multiply", sh, "g.p", "bp")
        g.e(f"g.ps = {ty(cd, (bm, h, S))} reduce(g.pp, zerof), dimensions={{3}}, to_apply=add_{cd}")
        self.bcast(g, "g.psb", "g.ps", sh, (0, 1, 2))
        self.ew(g, "g.pd", "subtract", sh, "g.p", "g.psb")
        self.ew(g, "g.sc", "multiply", sh, "bp", "g.pd")
        self.dot(g, "g.q4", "g.sc", "bk4", (bm, h, S, hd), (3,), (1,), (0, 1), (0, 2))
        self.dot(g, "g.k4", "g.sc", "bq4", (bm, h, S, hd), (2,), (1,), (0, 1), (0, 2))

    def attn_grads_out(self, g):
        """g.q4, g.k4, g.v4 [bm, h, S, hd] to g.qkv [Tm, A + 2 Akv] (K and V summed per KV head)."""
        cd, Tm, A, bm, h, S, hd = self.cd, self.Tm, self.A, self.bm, self.h, self.S, self.hd
        kv = self.kvt
        for nm in ("q", "k", "v"):
            g.e(f"g.{nm}t = {ty(cd, (bm, S, h, hd))} transpose(g.{nm}4), dimensions={{0,2,1,3}}")
            if nm == "q" or kv == h:
                gr = self.head_ops_bwd(g, nm, f"g.{nm}t", (bm, S, h, hd))
                g.e(f"g.{nm} = {ty(cd, (Tm, A))} reshape({gr})")
            else:  # the query heads' gradients summed onto the KV head they share
                g.e(f"g.{nm}g = {ty(cd, (bm, S, kv, h // kv, hd))} reshape(g.{nm}t)")
                g.e(f"g.{nm}r = {ty(cd, (bm, S, kv, hd))} reduce(g.{nm}g, zerof), dimensions={{3}}, to_apply=add_{cd}")
                gr = self.head_ops_bwd(g, nm, f"g.{nm}r", (bm, S, kv, hd))
                g.e(f"g.{nm} = {ty(cd, (Tm, self.Akv))} reshape({gr})")
        g.e(f"g.qkv = {ty(cd, (Tm, self.QKV))} concatenate(g.q, g.k, g.v), dimensions={{1}}")

    # --- the module ----------------------------------------------------------------------
    def module(self):
        cd, L, Tm, D = self.cd, self.L, self.Tm, self.D
        self.extra = []
        out = []
        w = out.append
        w(f"HloModule plan_step, num_partitions={self.N}{self.donation()}")
        w("")
        red_at = len(out)  # the reducers go here once the uses are known
        sv = self.saved()
        lws = {k: self.shard(s, fd) for k, (s, fd) in self.lw.items()}
        # Forward loop state: i, x, saved stacks..., layer weight stacks (f32 shards).
        gl = [ty(cd, full) for full, _ in self.lw.values()] if self.pf else []  # this layer's gathered weights
        fst = ["s32[]", ty(cd, (Tm, D))] + [ty(dt, (L,) + s) for s, dt in sv.values()] + \
              [ty("f32", (L,) + s) for s in lws.values()] + gl
        fst_t = "(" + ", ".join(fst) + ")"
        w(self.cond("fcond", fst_t, L))
        g = Gen()
        g.e(f"st = {fst_t} parameter(0)")
        k = g.unpack([("i", "s32[]"), ("xin", ty(cd, (Tm, D)))] +
                     [(f"S.{nm}", ty(dt, (L,) + s)) for nm, (s, dt) in sv.items()] +
                     [(f"W.{nm}", ty("f32", (L,) + s)) for nm, s in lws.items()])
        self.common_consts(g)
        W = {}
        if self.pf:
            k = g.unpack([(f"G.{nm}", ty(cd, full)) for nm, (full, fd) in self.lw.items()], k)
            W = {nm: f"G.{nm}" for nm in self.lw}
            g.e("pone = s32[] constant(1)")
            g.e("pi1 = s32[] add(i, pone)")
            g.e(f"plast = s32[] constant({L - 1})")
            g.e("pnx = s32[] minimum(pi1, plast)")
            self.prefetch_start(g, lws, "pnx")
        else:
            for nm, (full, fd) in self.lw.items():
                self.layer_slice(g, f"ws.{nm}", f"W.{nm}", lws[nm], "i", "f32")
                if self.we:  # this chip's block, passed round the ring by each dot
                    g.e(f"wg.{nm} = {ty(cd, lws[nm])} convert(ws.{nm})")
                else:
                    self.gather_w(g, f"wg.{nm}", f"ws.{nm}", full, fd)
                W[nm] = f"wg.{nm}"
        self.win_w = self.we
        y, act = self.forward_layer(g, "xin", W)
        self.win_w = False
        news = []
        for nm, (s, dt) in sv.items():
            v = act[nm]
            if nm in ("x", "x1") and self.T > 1:  # this chip's columns of the residual
                g.e(f"{nm}.sp = {ty(dt, s)} slice({v}), slice={{[0:{s[0]}], [0:{s[1]}]}}")
                v = f"{nm}.sp"
            self.layer_put(g, f"N.{nm}", f"S.{nm}", v, s, "i", dt)
            self.host(g, nm, (L,) + s)
            news.append(f"N.{nm}")
        g.e("one = s32[] constant(1)")
        g.e("i1 = s32[] add(i, one)")
        pfd = self.prefetch_done(g) if self.pf else []
        g.e(f"ROOT r = {fst_t} tuple(i1, {y}, {', '.join(news + ['W.' + n for n in lws] + pfd)})")
        w("fbody {\n" + "\n".join(g.lines) + "\n}\n")
        # Backward loop state: i, gx, saved stacks, weight stacks, gradient accumulators (f32).
        bst = ["s32[]", ty(cd, (Tm, D))] + [ty(dt, (L,) + s) for s, dt in sv.values()] + \
              [ty("f32", (L,) + s) for s in lws.values()] + [ty("f32", (L,) + s) for s in lws.values()] + gl
        bst_t = "(" + ", ".join(bst) + ")"
        w(self.cond("bcond", bst_t, L))
        g = Gen()
        g.e(f"st = {bst_t} parameter(0)")
        k = g.unpack([("i", "s32[]"), ("gy", ty(cd, (Tm, D)))] +
                     [(f"S.{nm}", ty(dt, (L,) + s)) for nm, (s, dt) in sv.items()] +
                     [(f"W.{nm}", ty("f32", (L,) + s)) for nm, s in lws.items()] +
                     [(f"A.{nm}", ty("f32", (L,) + s)) for nm, s in lws.items()])
        self.common_consts(g)
        g.e(f"lm1 = s32[] constant({L - 1})")
        g.e("j = s32[] subtract(lm1, i)")
        W = {}
        if self.pf:
            k = g.unpack([(f"G.{nm}", ty(cd, full)) for nm, (full, fd) in self.lw.items()], k)
            W = {nm: f"G.{nm}" for nm in self.lw}
            g.e("pone = s32[] constant(1)")
            g.e("pj1 = s32[] subtract(j, pone)")
            g.e("pnx = s32[] maximum(pj1, zero)")
            self.prefetch_start(g, lws, "pnx")
        else:
            for nm, (full, fd) in self.lw.items():
                self.layer_slice(g, f"ws.{nm}", f"W.{nm}", lws[nm], "j", "f32")
                if self.we and not self.remat:  # read by one dot each: windowed
                    g.e(f"wg.{nm} = {ty(cd, lws[nm])} convert(ws.{nm})")
                else:  # with remat the forward reads it again: XLA gathers it once for both
                    self.gather_w(g, f"wg.{nm}", f"ws.{nm}", full, fd)
                W[nm] = f"wg.{nm}"
        a = {}
        for nm, (s, dt) in sv.items():
            self.layer_slice(g, f"L.{nm}", f"S.{nm}", s, "j", dt)
            a[nm] = f"L.{nm}"
            if nm in ("x", "x1") and self.T > 1:  # the residual's columns gathered back over tensor
                self.ag_tp(g, f"L.{nm}.g", f"L.{nm}", s, (self.Tm, self.D), dim=1)
                a[nm] = f"L.{nm}.g"
        a = self.recompute(g, a, W)
        self.win_w, self.win_g = self.we and not self.remat, self.we
        gx, G = self.backward_layer(g, "gy", a, W)
        self.win_w = self.win_g = False
        newa = []
        for nm, (full, fd) in self.lw.items():
            self.scatter_g(g, f"gs.{nm}", G[nm], full, fd, windowed=self.we)
            self.layer_slice(g, f"ao.{nm}", f"A.{nm}", lws[nm], "j", "f32")
            self.ew(g, f"an.{nm}", "add", lws[nm], f"ao.{nm}", f"gs.{nm}", dt="f32")
            self.layer_put(g, f"AN.{nm}", f"A.{nm}", f"an.{nm}", lws[nm], "j", "f32")
            newa.append(f"AN.{nm}")
        g.e("one = s32[] constant(1)")
        g.e("i1 = s32[] add(i, one)")
        pfd = self.prefetch_done(g) if self.pf else []
        g.e(f"ROOT r = {bst_t} tuple(i1, {gx}, {', '.join(['S.' + n for n in sv] + ['W.' + n for n in lws] + newa + pfd)})")
        w("bbody {\n" + "\n".join(g.lines) + "\n}\n")
        # Microbatch loop: i, ids [mb, Tm, 1], layer weights, globals, accumulators of both.
        gws = {k2: self.shard(s, fd) for k2, (s, fd) in self.gw.items()}
        allp = list(lws.items()) + list(gws.items())
        Lw = self.Lw
        mst = ["s32[]", ty("s32", (self.mb, Tm, 1))] + [ty("f32", (Lw,) + s) for s in lws.values()] + \
              [ty("f32", s) for s in gws.values()] + [ty("f32", (Lw,) + s) for s in lws.values()] + \
              [ty("f32", s) for s in gws.values()]
        mst_t = "(" + ", ".join(mst) + ")"
        # One microbatch (MaxText's gradient_accumulation_steps 1): no accumulation, so the
        # step is the microbatch's computation called once (XLA's WhileLoopSimplifier removes
        # a loop that runs once, and the add of the zero accumulators is gone): its gradients
        # are the backward loop's own buffers, not copied into accumulators.
        self.one = self.mb == 1 and self.P == 1
        if self.one:
            min_t = "(" + ", ".join(mst[:2 + len(lws) + len(gws)]) + ")"
            w("mbody {\n" + "\n".join(self.micro_body(min_t, lws, gws, sv, fst_t, bst_t, mst_t).lines) + "\n}\n")
        else:
            w(self.cond("mcond", mst_t, self.trips))
            mb = self.pipe_body if self.P > 1 else self.micro_body
            w("mbody {\n" + "\n".join(mb(mst_t, lws, gws, sv, fst_t, bst_t).lines) + "\n}\n")
        # Entry: the microbatch loop, the data all-reduce, the optimizer.
        g = Gen()
        g.e(f"ids = {ty('s32', (self.mb, Tm, 1))} parameter(0)")
        pi = 1
        P = {}
        for nm, s in allp:
            full = (Lw,) + s if nm in lws else s
            g.e(f"P.{nm} = {ty('f32', full)} parameter({pi})")
            pi += 1
            P[nm] = full
        mom = {}
        if self.m["optimizer"] == "adam":
            for nm, full in P.items():
                g.e(f"M.{nm} = {ty('f32', full)} parameter({pi})")
                g.e(f"V.{nm} = {ty('f32', full)} parameter({pi + 1})")
                pi += 2
                mom[nm] = full
        g.e("z = s32[] constant(0)")
        if self.one:
            g.e(f"minit = {min_t} tuple(z, ids, {', '.join('P.' + n for n in P)})")
            g.e(f"mloop = {mst_t} call(minit), to_apply=mbody")
        else:
            g.e("zf = f32[] constant(0)")
            for nm, full in P.items():
                self.bcast(g, f"Z.{nm}", "zf", full, (), dt="f32")
            g.e(f"minit = {mst_t} tuple(z, ids, {', '.join(['P.' + n for n in P] + ['Z.' + n for n in P])})")
            g.e(f"mloop = {mst_t} while(minit), condition=mcond, body=mbody, "
                f"backend_config={{\"known_trip_count\":{{\"n\":\"{self.trips}\"}}}}")
        outs = []
        for k2, (nm, full) in enumerate(P.items()):
            g.e(f"GA.{nm} = {ty('f32', full)} get-tuple-element(mloop), index={2 + len(P) + k2}")
            self.ar(g, f"GR.{nm}", f"GA.{nm}", full, self.g_data, self.R, dt="f32")
            self.optimizer(g, nm, full, outs)
        g.e(f"ROOT out = ({', '.join(t for t, _ in outs)}) tuple({', '.join(n for _, n in outs)})")
        w("ENTRY step {\n" + "\n".join(g.lines) + "\n}")
        text = "\n".join(out)
        reds = []
        for dt in sorted({cd, "f32"}):
            for op, hlo in (("add", "add"), ("max", "maximum")):
                if f"to_apply={op}_{dt}" in text:
                    reds.append(f"{op}_{dt} {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
                                f"  ROOT r = {dt}[] {hlo}(a, b)\n}}\n")
        out[red_at:red_at] = reds + self.extra
        return self.state_layouts("\n".join(out) + "\n")

    def state_layouts(self, text):
        """The train state's f32 arrays (parameters, moments, gradient accumulators: each
        chip's shards, stacked [L, ...], and a layer's [1, ...] slice of them) in the layout
        that pads least to the (8 x 128) f32 tile, as the XLA TPU compiler lays out arrays
        whose layout the program does not fix: a shard split over many chips such as
        f32[32,8192,16] is {1,2,0} (8,192 in the lanes), not 16 padded to 128 (libtpu's
        compiled MaxText 16B step on v5e-256: argument bytes 742 MB, not 1.3 GB). "layouts":
        False in the candidate writes every array row-major."""
        if not self.c.get("layouts", True):
            return text
        shapes = set()
        for full, fd in list(self.lw.values()):
            sh = self.shard(full, fd)
            shapes |= {tuple(sh), (self.L,) + tuple(sh), (1,) + tuple(sh)}
        for full, fd in self.gw.values():
            shapes.add(tuple(self.shard(full, fd)))
        lay = {}
        for sh in shapes:
            order = least_padded(sh, 8, 128)
            if order:
                lay[f"f32[{dims(sh)}]"] = f"f32[{dims(sh)}]{{{dims(order)}}}"
        if not lay:
            return text
        pat = re.compile("(" + "|".join(re.escape(k) for k in sorted(lay, key=len, reverse=True)) + r")(?!\{)")
        return pat.sub(lambda mm: lay[mm.group(1)], text)

    def donation(self):
        """The train state is donated (MaxText's jit donates it): each updated parameter and
        moment is written into its input's buffer (input_output_alias), as the outputs of
        optimizer() follow the entry's parameters (ids, parameters, then each one's moments)."""
        if not self.c.get("donate", True):
            return ""
        n = len(self.lw) + len(self.gw)
        pairs = []
        for j in range(n):
            if self.m["optimizer"] == "adam":
                pairs += [(1 + j), (1 + n + 2 * j), (2 + n + 2 * j)]
            else:
                pairs.append(1 + j)
        return ", input_output_alias={ " + ", ".join(f"{{{k}}}: ({p}, {{}}, may-alias)" for k, p in enumerate(pairs)) + " }"

    def optimizer(self, g, nm, full, outs):
        t = ty("f32", full)
        if self.m["optimizer"] == "adam":
            for c, v in (("b1", "0.9"), ("c1", "0.1"), ("b2", "0.999"), ("c2", "0.001"), ("eps", "1e-08"), ("lr", "0.0003")):
                g.e(f"{c}.{nm} = f32[] constant({v})")
                self.bcast(g, f"{c}b.{nm}", f"{c}.{nm}", full, (), dt="f32")
            e = lambda o, op, *x: g.e(f"{o} = {t} {op}({', '.join(x)})")  # noqa: E731
            e(f"m1.{nm}", "multiply", f"b1b.{nm}", f"M.{nm}")
            e(f"m2.{nm}", "multiply", f"c1b.{nm}", f"GR.{nm}")
            e(f"mn.{nm}", "add", f"m1.{nm}", f"m2.{nm}")
            e(f"gg.{nm}", "multiply", f"GR.{nm}", f"GR.{nm}")
            e(f"v1.{nm}", "multiply", f"b2b.{nm}", f"V.{nm}")
            e(f"v2.{nm}", "multiply", f"c2b.{nm}", f"gg.{nm}")
            e(f"vn.{nm}", "add", f"v1.{nm}", f"v2.{nm}")
            e(f"sq.{nm}", "sqrt", f"vn.{nm}")
            e(f"de.{nm}", "add", f"sq.{nm}", f"epsb.{nm}")
            e(f"ra.{nm}", "divide", f"mn.{nm}", f"de.{nm}")
            e(f"st.{nm}", "multiply", f"lrb.{nm}", f"ra.{nm}")
            e(f"pn.{nm}", "subtract", f"P.{nm}", f"st.{nm}")
            outs += [(t, f"pn.{nm}"), (t, f"mn.{nm}"), (t, f"vn.{nm}")]
        else:
            g.e(f"lr.{nm} = f32[] constant(0.01)")
            self.bcast(g, f"lrb.{nm}", f"lr.{nm}", full, (), dt="f32")
            g.e(f"st.{nm} = {t} multiply(lrb.{nm}, GR.{nm})")
            g.e(f"pn.{nm} = {t} subtract(P.{nm}, st.{nm})")
            outs.append((t, f"pn.{nm}"))

    def micro_body(self, mst_t, lws, gws, sv, fst_t, bst_t, out_t=None):
        """A microbatch: the loop body (state mst_t: i, ids, parameters, accumulators), or with
        out_t the called computation of a step of one microbatch (mst_t without the
        accumulators; it returns out_t, the gradients in their place)."""
        cd, L, Tm, D, Vt = self.cd, self.L, self.Tm, self.D, self.Vt
        g = Gen()
        g.e(f"st = {mst_t} parameter(0)")
        g.e("i = s32[] get-tuple-element(st), index=0")
        g.e(f"ids = {ty('s32', (self.mb, Tm, 1))} get-tuple-element(st), index=1")
        names = list(lws) + list(gws)
        shapes = {**{n: (L,) + s for n, s in lws.items()}, **gws}
        for k, nm in enumerate(names):
            g.e(f"P.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + k}")
        for k, nm in enumerate(names if out_t is None else []):
            g.e(f"A.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + len(names) + k}")
        self.common_consts(g)
        g.e(f"idm = {ty('s32', (1, Tm, 1))} dynamic-slice(ids, i, zero, zero), dynamic_slice_sizes={{1,{Tm},1}}")
        g.e(f"id = {ty('s32', (Tm, 1))} reshape(idm)")
        # Embedding: vocabulary-parallel gather, partial sums over the tensor axis.
        self.gather_w(g, "emb", "P.emb", *self.gw["emb"])
        g.e(f"x0p = {ty(cd, (Tm, D))} gather(emb, id), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
            f"start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{D}}}")
        self.ar(g, "x0", "x0p", (Tm, D), self.g_tp, self.T)
        # Forward loop.
        zs = []
        for nm, (s, dt) in sv.items():
            self.stack_init(g, nm, (L,) + s, dt)
            self.host(g, nm, (L,) + s)
            zs.append(f"Z.{nm}")
        g0 = self.first_gather(g, lws, "zero", "f0") if self.pf else []
        g.e(f"finit = {fst_t} tuple(zero, x0, {', '.join(zs + ['P.' + n for n in lws] + g0)})")
        g.e(f"floop = {fst_t} while(finit), condition=fcond, body=fbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{L}\"}}}}")
        g.e(f"hL = {ty(cd, (Tm, D))} get-tuple-element(floop), index=1")
        sk = {}
        for k, nm in enumerate(sv):
            g.e(f"SV.{nm} = {ty(sv[nm][1], (L,) + sv[nm][0])} get-tuple-element(floop), index={2 + k}")
            sk[nm] = f"SV.{nm}"
        self.lm_head(g, "hL", Tm)
        # Backward loop.
        zs = []
        for nm, s in lws.items():
            g.e(f"zb.{nm} = f32[] constant(0)")
            self.bcast(g, f"ZB.{nm}", f"zb.{nm}", (L,) + s, (), dt="f32")
            zs.append(f"ZB.{nm}")
        if self.pf:
            g.e(f"blast = s32[] constant({L - 1})")
        g0 = self.first_gather(g, lws, "blast", "b0") if self.pf else []
        g.e(f"binit = {bst_t} tuple(zero, gh, {', '.join(list(sk.values()) + ['P.' + n for n in lws] + zs + g0)})")
        g.e(f"bloop = {bst_t} while(binit), condition=bcond, body=bbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{L}\"}}}}")
        g.e(f"gx0 = {ty(cd, (Tm, D))} get-tuple-element(bloop), index=1")
        # Embedding gradient: scatter-add of the token gradients into this chip's rows.
        g.e(f"ze = {cd}[] constant(0)")
        self.bcast(g, "zemb", "ze", self.gw["emb"][0], ())
        g.e(f"gembf = {ty(cd, self.gw['emb'][0])} scatter(zemb, id, gx0), update_window_dims={{1}}, "
            f"inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add_{cd}")
        self.scatter_g(g, "gse", "gembf", *self.gw["emb"])
        news = []
        base = 2 + len(sv) + len(lws)
        for k, nm in enumerate(lws):
            g.e(f"gl.{nm} = {ty('f32', shapes[nm])} get-tuple-element(bloop), index={base + k}")
            if out_t:
                news.append(f"gl.{nm}")
                continue
            self.ew(g, f"AN.{nm}", "add", shapes[nm], f"A.{nm}", f"gl.{nm}", dt="f32")
            news.append(f"AN.{nm}")
        if out_t:
            news += ["gse", "gsw"]
        else:
            self.ew(g, "AN.emb", "add", shapes["emb"], "A.emb", "gse", dt="f32")
            self.ew(g, "AN.wout", "add", shapes["wout"], "A.wout", "gsw", dt="f32")
            news += ["AN.emb", "AN.wout"]
        g.e("one = s32[] constant(1)")
        g.e("i1 = s32[] add(i, one)")
        g.e(f"ROOT r = {out_t or mst_t} tuple(i1, ids, {', '.join(['P.' + n for n in names] + news)})")
        return g

    # --- pipeline parallelism ------------------------------------------------------------
    def stage_pairs(self, d):
        """collective-permute pairs passing to the stage d further round the ring of stages
        (every data, fsdp and tensor rank its own ring), as lax.ppermute over the stage axis."""
        FT, P = self.F * self.T, self.P
        prs = []
        for dev in range(self.N):
            p = (dev // FT) % P
            prs.append("{%d,%d}" % (dev, dev + ((p + d) % P - p) * FT))
        return "{" + ",".join(prs) + "}"

    def stage_id(self, g):
        """sid: this chip's pipeline stage, from its partition id."""
        g.e("pid = u32[] partition-id()")
        g.e("me = s32[] convert(pid)")
        g.e(f"ftn = s32[] constant({self.F * self.T})")
        g.e("me.q = s32[] divide(me, ftn)")
        g.e(f"npst = s32[] constant({self.P})")
        g.e("sid = s32[] remainder(me.q, npst)")

    def pipe_body(self, mst_t, lws, gws, sv, fst_t, bst_t):
        """Every microbatch through P stages, as a shard_map + ppermute pipeline (GPipe, what
        MaxText's ici_pipeline_parallelism with num_pipeline_microbatches runs, and JAX's
        transpose of it) compiles per chip: the embedding of all M microbatches (replicated over
        the stages); a loop of M + P - 1 iterations in which stage 0 takes microbatch
        min(t, M - 1) and every other stage what the stage before it passed, each runs its
        L/P layers (the layer loop, saving what the remat policy keeps, per iteration), the
        last stage keeps microbatch t - (P - 1), and a collective-permute passes each stage's
        output on; the outputs summed over the stages; the LM head on all microbatches; the
        transposed loop (iterations in reverse, the gradients passed back by the reversed
        permute, the weight gradients accumulated); the embedding gradient summed over the
        stages. Every stage computes in every iteration, the fill and drain on padding: the
        bubble, (P - 1) / (M + P - 1) of the loop (src/pod/pipeline.c reports it)."""
        cd, L, Tm, D, M, Pp, Tp, V = self.cd, self.L, self.Tm, self.D, self.mb, self.P, self.Tp, self.V
        Lw = self.Lw
        g = Gen()
        g.e(f"st = {mst_t} parameter(0)")
        g.e("i = s32[] get-tuple-element(st), index=0")
        g.e(f"ids = {ty('s32', (M, Tm, 1))} get-tuple-element(st), index=1")
        names = list(lws) + list(gws)
        shapes = {**{n: (Lw,) + s for n, s in lws.items()}, **gws}
        for k, nm in enumerate(names):
            g.e(f"P.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + k}")
        for k, nm in enumerate(names):
            g.e(f"A.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + len(names) + k}")
        self.common_consts(g)
        R3 = (M, Tm, D)
        g.e(f"idf = {ty('s32', (M * Tm, 1))} reshape(ids)")
        self.gather_w(g, "emb", "P.emb", *self.gw["emb"])
        g.e(f"x0p = {ty(cd, (M * Tm, D))} gather(emb, idf), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
            f"start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{D}}}")
        self.ar(g, "x0f", "x0p", (M * Tm, D), self.g_tp, self.T)
        g.e(f"x0 = {ty(cd, R3)} reshape(x0f)")
        svs = {nm: (Tp, L) + s for nm, (s, dt) in sv.items()}  # every iteration's saved stacks
        # Forward pipeline loop: it, state, inputs, outputs, saved stacks, this stage's weights.
        fs = ["s32[]", ty(cd, (Tm, D)), ty(cd, R3), ty(cd, R3)] + [ty(dt, svs[nm]) for nm, (s, dt) in sv.items()] + \
             [ty("f32", (Lw,) + s) for s in lws.values()] + ([ty(cd, R3)] if V > 1 else [])  # + the circular buffer
        fs_t = "(" + ", ".join(fs) + ")"
        self.extra.append(self.cond("pfcond", fs_t, Tp))
        b = Gen()
        b.e(f"st = {fs_t} parameter(0)")
        b.unpack([("it", "s32[]"), ("cur", ty(cd, (Tm, D))), ("xs", ty(cd, R3)), ("outs", ty(cd, R3))] +
                 [(f"SO.{nm}", ty(dt, svs[nm])) for nm, (s, dt) in sv.items()] +
                 [(f"P.{nm}", ty("f32", (Lw,) + s)) for nm, s in lws.items()] +
                 ([("buf", ty(cd, R3))] if V > 1 else []))
        self.common_consts(b)
        self.stage_id(b)
        b.e(f"mlast = s32[] constant({M - 1})")
        b.e(f"plast = s32[] constant({Pp - 1})")
        W = self.repeat_weights(b, lws, "it") if V > 1 else "P"
        b.e("mi = s32[] minimum(it, mlast)")
        b.e(f"xm.s = {ty(cd, (1, Tm, D))} dynamic-slice(xs, mi, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
        b.e(f"xm = {ty(cd, (Tm, D))} reshape(xm.s)")
        b.e("is0 = pred[] compare(sid, zero), direction=EQ")
        b.e(f"is0b = pred[{Tm},{D}] broadcast(is0), dimensions={{}}")
        if V > 1:
            # Stage 0 takes a new microbatch in the first M iterations, then the one the last
            # stage passed round M - P iterations before (kept in a buffer of M): the passed
            # value is written at (t - P) mod M, microbatch t mod M read.
            b.e(f"mM = s32[] constant({M})")
            b.e(f"mmp = s32[] constant({M - Pp})")
            b.e("wi.a = s32[] add(it, mmp)")
            b.e("wi = s32[] remainder(wi.a, mM)")
            b.e("ri = s32[] remainder(it, mM)")
            b.e(f"cur1 = {ty(cd, (1, Tm, D))} reshape(cur)")
            b.e(f"bufw = {ty(cd, R3)} dynamic-update-slice(buf, cur1, wi, zero, zero)")
            b.e(f"rd.s = {ty(cd, (1, Tm, D))} dynamic-slice(bufw, ri, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
            b.e(f"rd = {ty(cd, (Tm, D))} reshape(rd.s)")
            b.e("fresh = pred[] compare(it, mM), direction=LT")
            b.e(f"freshb = pred[{Tm},{D}] broadcast(fresh), dimensions={{}}")
            b.e(f"inp0 = {ty(cd, (Tm, D))} select(freshb, xm, rd)")
            b.e(f"inp = {ty(cd, (Tm, D))} select(is0b, inp0, cur)")
        else:
            b.e(f"inp = {ty(cd, (Tm, D))} select(is0b, xm, cur)")
        zs = []
        for nm, (s, dt) in sv.items():
            self.stack_init(b, nm, (L,) + s, dt)
            zs.append(f"Z.{nm}")
        g0 = self.first_gather(b, lws, "zero", "f0", src=W) if self.pf else []
        b.e(f"finit = {fst_t} tuple(zero, inp, {', '.join(zs + [W + '.' + n for n in lws] + g0)})")
        b.e(f"floop = {fst_t} while(finit), condition=fcond, body=fbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{L}\"}}}}")
        b.e(f"y = {ty(cd, (Tm, D))} get-tuple-element(floop), index=1")
        news = []
        for k2, (nm, (s, dt)) in enumerate(sv.items()):
            z = ", ".join(["zero"] * (len(s) + 1))
            b.e(f"SV.{nm} = {ty(dt, (L,) + s)} get-tuple-element(floop), index={2 + k2}")
            b.e(f"SV1.{nm} = {ty(dt, (1, L) + s)} reshape(SV.{nm})")
            b.e(f"SN.{nm} = {ty(dt, svs[nm])} dynamic-update-slice(SO.{nm}, SV1.{nm}, it, {z})")
            news.append(f"SN.{nm}")
        self.last_out(b, "it")
        b.e(f"y1 = {ty(cd, (1, Tm, D))} reshape(y)")
        b.e(f"ou = {ty(cd, R3)} dynamic-update-slice(outs, y1, jc, zero, zero)")
        b.e(f"putb = pred[{M},{Tm},{D}] broadcast(put), dimensions={{}}")
        b.e(f"outs2 = {ty(cd, R3)} select(putb, ou, outs)")
        b.e(f"nxt = {ty(cd, (Tm, D))} collective-permute(y), channel_id={self.chan()}, "
            f"source_target_pairs={self.stage_pairs(1)}")
        b.e("one = s32[] constant(1)")
        b.e("i1 = s32[] add(it, one)")
        b.e(f"ROOT r = {fs_t} tuple(i1, nxt, xs, outs2, {', '.join(news + ['P.' + n for n in lws] + (['bufw'] if V > 1 else []))})")
        self.extra.append("pfbody {\n" + "\n".join(b.lines) + "\n}\n")
        g.e(f"zcur = {ty(cd, (Tm, D))} broadcast(zerof), dimensions={{}}")
        g.e(f"zouts = {ty(cd, R3)} broadcast(zerof), dimensions={{}}")
        zs = []
        for nm, (s, dt) in sv.items():
            g.e(f"zo.{nm} = {dt}[] constant(0)")
            self.bcast(g, f"ZO.{nm}", f"zo.{nm}", svs[nm], (), dt=dt)
            self.host(g, nm, svs[nm])
            zs.append(f"ZO.{nm}")
        g.e(f"pfinit = {fs_t} tuple(zero, zcur, x0, zouts, {', '.join(zs + ['P.' + n for n in lws] + (['zouts'] if V > 1 else []))})")
        g.e(f"pfloop = {fs_t} while(pfinit), condition=pfcond, body=pfbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{Tp}\"}}}}")
        g.e(f"po = {ty(cd, R3)} get-tuple-element(pfloop), index=3")
        sk = []
        for k2, (nm, (s, dt)) in enumerate(sv.items()):
            g.e(f"PS.{nm} = {ty(dt, svs[nm])} get-tuple-element(pfloop), index={4 + k2}")
            sk.append(f"PS.{nm}")
        # The outputs, on the last stage only, summed over the stages (replicated for the head).
        self.ar(g, "hLm", "po", R3, self.g_stage, Pp)
        g.e(f"hL = {ty(cd, (M * Tm, D))} reshape(hLm)")
        self.lm_head(g, "hL", M * Tm)
        g.e(f"ghm = {ty(cd, R3)} reshape(gh)")
        # Backward pipeline loop: it, gradient state, head gradients, input gradients, saved
        # stacks, weights, this stage's weight-gradient accumulators.
        bs = ["s32[]", ty(cd, (Tm, D)), ty(cd, R3), ty(cd, R3)] + [ty(dt, svs[nm]) for nm, (s, dt) in sv.items()] + \
             [ty("f32", (Lw,) + s) for s in lws.values()] + [ty("f32", (Lw,) + s) for s in lws.values()] + \
             ([ty(cd, R3)] if V > 1 else [])  # + the circular buffer's gradients
        bs_t = "(" + ", ".join(bs) + ")"
        self.extra.append(self.cond("pbcond", bs_t, Tp))
        b = Gen()
        b.e(f"st = {bs_t} parameter(0)")
        b.unpack([("it", "s32[]"), ("gcur", ty(cd, (Tm, D))), ("ghs", ty(cd, R3)), ("gxs", ty(cd, R3))] +
                 [(f"SO.{nm}", ty(dt, svs[nm])) for nm, (s, dt) in sv.items()] +
                 [(f"P.{nm}", ty("f32", (Lw,) + s)) for nm, s in lws.items()] +
                 [(f"A.{nm}", ty("f32", (Lw,) + s)) for nm, s in lws.items()] +
                 ([("gbuf", ty(cd, R3))] if V > 1 else []))
        self.common_consts(b)
        self.stage_id(b)
        b.e(f"mlast = s32[] constant({M - 1})")
        b.e(f"plast = s32[] constant({Pp - 1})")
        b.e(f"tlast = s32[] constant({Tp - 1})")
        b.e("kf = s32[] subtract(tlast, it)")  # the forward iteration this one reverses
        W = self.repeat_weights(b, lws, "kf", acc=True) if V > 1 else "P"
        self.last_out(b, "kf")
        b.e(f"ghj.s = {ty(cd, (1, Tm, D))} dynamic-slice(ghs, jc, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
        b.e(f"ghj = {ty(cd, (Tm, D))} reshape(ghj.s)")
        b.e(f"zg = {ty(cd, (Tm, D))} broadcast(zerof), dimensions={{}}")
        b.e(f"putb = pred[{Tm},{D}] broadcast(put), dimensions={{}}")
        b.e(f"gfrom = {ty(cd, (Tm, D))} select(putb, ghj, zg)")
        b.e(f"gy = {ty(cd, (Tm, D))} add(gfrom, gcur)")
        sl = []
        for nm, (s, dt) in sv.items():
            z = ", ".join(["zero"] * (len(s) + 1))
            b.e(f"SL1.{nm} = {ty(dt, (1, L) + s)} dynamic-slice(SO.{nm}, kf, {z}), "
                f"dynamic_slice_sizes={{1,{L},{dims(s)}}}")
            b.e(f"SL.{nm} = {ty(dt, (L,) + s)} reshape(SL1.{nm})")
            sl.append(f"SL.{nm}")
        if self.pf:
            b.e(f"blast = s32[] constant({L - 1})")
        g0 = self.first_gather(b, lws, "blast", "b0", src=W) if self.pf else []
        Wa = "Ar" if V > 1 else "A"
        b.e(f"binit = {bst_t} tuple(zero, gy, {', '.join(sl + [W + '.' + n for n in lws] + [Wa + '.' + n for n in lws] + g0)})")
        b.e(f"bloop = {bst_t} while(binit), condition=bcond, body=bbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{L}\"}}}}")
        b.e(f"gx = {ty(cd, (Tm, D))} get-tuple-element(bloop), index=1")
        base = 2 + len(sv) + len(lws)
        an = []
        for k2, (nm, s) in enumerate(lws.items()):
            b.e(f"AN{'r' if V > 1 else ''}.{nm} = {ty('f32', (L,) + s)} get-tuple-element(bloop), index={base + k2}")
            if V > 1:  # this repeat's rows of the accumulators, put back
                z = ", ".join(["zero"] * len(s))
                b.e(f"AN.{nm} = {ty('f32', (Lw,) + s)} dynamic-update-slice(A.{nm}, ANr.{nm}, roff, {z})")
            an.append(f"AN.{nm}")
        # Stage 0: the gradient of the microbatch it took (min(kf, M - 1)).
        b.e("mi = s32[] minimum(kf, mlast)")
        b.e("is0 = pred[] compare(sid, zero), direction=EQ")
        b.e(f"gxo.s = {ty(cd, (1, Tm, D))} dynamic-slice(gxs, mi, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
        b.e(f"gx1 = {ty(cd, (1, Tm, D))} reshape(gx)")
        b.e(f"gxa = {ty(cd, (1, Tm, D))} add(gxo.s, gx1)")
        b.e(f"gxu = {ty(cd, R3)} dynamic-update-slice(gxs, gxa, mi, zero, zero)")
        b.e(f"is0t = pred[{Tm},{D}] broadcast(is0), dimensions={{}}")
        if V > 1:
            # A new microbatch's gradient goes to the embedding's, a passed one's into the
            # buffer's slot it was read from; the slot written in the forward iteration is
            # sent back to the last stage and cleared (the transposes of the read and write).
            b.e(f"mM = s32[] constant({M})")
            b.e(f"mmp = s32[] constant({M - Pp})")
            b.e("fresh = pred[] compare(kf, mM), direction=LT")
            b.e("tofx = pred[] and(is0, fresh)")
            b.e(f"is0b = pred[{M},{Tm},{D}] broadcast(tofx), dimensions={{}}")
            b.e("nfresh = pred[] not(fresh)")
            b.e("tobf = pred[] and(is0, nfresh)")
            b.e(f"tobb = pred[{M},{Tm},{D}] broadcast(tobf), dimensions={{}}")
            b.e("ri = s32[] remainder(kf, mM)")
            b.e(f"gbo.s = {ty(cd, (1, Tm, D))} dynamic-slice(gbuf, ri, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
            b.e(f"gba = {ty(cd, (1, Tm, D))} add(gbo.s, gx1)")
            b.e(f"gbu = {ty(cd, R3)} dynamic-update-slice(gbuf, gba, ri, zero, zero)")
            b.e(f"gbuf1 = {ty(cd, R3)} select(tobb, gbu, gbuf)")
            b.e("wi.a = s32[] add(kf, mmp)")
            b.e("wi = s32[] remainder(wi.a, mM)")
            b.e(f"gw.s = {ty(cd, (1, Tm, D))} dynamic-slice(gbuf1, wi, zero, zero), dynamic_slice_sizes={{1,{Tm},{D}}}")
            b.e(f"gw = {ty(cd, (Tm, D))} reshape(gw.s)")
            b.e(f"zg1 = {ty(cd, (1, Tm, D))} broadcast(zerof), dimensions={{}}")
            b.e(f"gbz = {ty(cd, R3)} dynamic-update-slice(gbuf1, zg1, wi, zero, zero)")
            b.e(f"is03 = pred[{M},{Tm},{D}] broadcast(is0), dimensions={{}}")
            b.e(f"gbuf2 = {ty(cd, R3)} select(is03, gbz, gbuf1)")
        else:
            b.e(f"is0b = pred[{M},{Tm},{D}] broadcast(is0), dimensions={{}}")
        b.e(f"gxs2 = {ty(cd, R3)} select(is0b, gxu, gxs)")
        # Stage 0 took its input from the microbatches (or the buffer), not from the stage
        # before it: it passes that stage no gradient (the transpose of the forward select).
        b.e(f"gxp = {ty(cd, (Tm, D))} select(is0t, {'gw' if V > 1 else 'zg'}, gx)")
        b.e(f"prv = {ty(cd, (Tm, D))} collective-permute(gxp), channel_id={self.chan()}, "
            f"source_target_pairs={self.stage_pairs(-1)}")
        b.e("one = s32[] constant(1)")
        b.e("i1 = s32[] add(it, one)")
        b.e(f"ROOT r = {bs_t} tuple(i1, prv, ghs, gxs2, {', '.join(['SO.' + n for n in sv] + ['P.' + n for n in lws] + an + (['gbuf2'] if V > 1 else []))})")
        self.extra.append("pbbody {\n" + "\n".join(b.lines) + "\n}\n")
        g.e(f"pbinit = {bs_t} tuple(zero, zcur, ghm, zouts, {', '.join(sk + ['P.' + n for n in lws] + ['A.' + n for n in lws] + (['zouts'] if V > 1 else []))})")
        g.e(f"pbloop = {bs_t} while(pbinit), condition=pbcond, body=pbbody, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{Tp}\"}}}}")
        g.e(f"gxl = {ty(cd, R3)} get-tuple-element(pbloop), index=3")
        # The embedding's input gradients (on stage 0) summed over the stages, scattered into its rows.
        self.ar(g, "gxr", "gxl", R3, self.g_stage, Pp)
        g.e(f"gx0 = {ty(cd, (M * Tm, D))} reshape(gxr)")
        g.e(f"ze = {cd}[] constant(0)")
        self.bcast(g, "zemb", "ze", self.gw["emb"][0], ())
        g.e(f"gembf = {ty(cd, self.gw['emb'][0])} scatter(zemb, idf, gx0), update_window_dims={{1}}, "
            f"inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add_{cd}")
        self.scatter_g(g, "gse", "gembf", *self.gw["emb"])
        news = []
        base = 4 + len(sv) + len(lws)
        for k2, nm in enumerate(lws):
            g.e(f"AN.{nm} = {ty('f32', shapes[nm])} get-tuple-element(pbloop), index={base + k2}")
            news.append(f"AN.{nm}")
        self.ew(g, "AN.emb", "add", shapes["emb"], "A.emb", "gse", dt="f32")
        self.ew(g, "AN.wout", "add", shapes["wout"], "A.wout", "gsw", dt="f32")
        news += ["AN.emb", "AN.wout"]
        g.e("one = s32[] constant(1)")
        g.e("i1 = s32[] add(i, one)")
        g.e(f"ROOT r = {mst_t} tuple(i1, ids, {', '.join(['P.' + n for n in names] + news)})")
        return g

    def repeat_weights(self, g, lws, t, acc=False):
        """A circular pipeline's stage works in iteration t on item t - stage, repeat
        clamp((t - stage) / M, 0, V - 1): that repeat's rows of its weight stacks (Pr.*) and,
        for the backward pass, of its accumulators (Ar.*). Returns the weights' prefix."""
        L = self.L
        g.e(f"jr = s32[] subtract({t}, sid)")
        g.e(f"mMr = s32[] constant({self.mb})")
        g.e("jq = s32[] divide(jr, mMr)")
        g.e(f"vlast = s32[] constant({self.V - 1})")
        g.e("rr = s32[] clamp(zero, jq, vlast)")
        g.e(f"lcn = s32[] constant({L})")
        g.e("roff = s32[] multiply(rr, lcn)")
        for nm, s in lws.items():
            z = ", ".join(["zero"] * len(s))
            for src, dst in (("P", "Pr"),) + ((("A", "Ar"),) if acc else ()):
                g.e(f"{dst}.{nm} = {ty('f32', (L,) + s)} dynamic-slice({src}.{nm}, roff, {z}), "
                    f"dynamic_slice_sizes={{{L},{dims(s)}}}")
        return "Pr"

    def last_out(self, g, t):
        """put: the last stage's output in iteration t is microbatch jc's last repeat."""
        g.e("j = s32[] subtract(%s, plast)" % t)
        if self.V > 1:
            g.e(f"vm = s32[] constant({(self.V - 1) * self.mb})")
            g.e("jv = s32[] subtract(j, vm)")
            j = "jv"
        else:
            j = "j"
        g.e(f"jc = s32[] clamp(zero, {j}, mlast)")
        g.e("isl = pred[] compare(sid, plast), direction=EQ")
        g.e(f"jok = pred[] compare({j}, zero), direction=GE")
        g.e("put = pred[] and(isl, jok)")

    def lm_head(self, g, h, rows):
        """The LM head on h [rows, D] and its gradient: gh [rows, D] (summed over tensor) and
        gsw, the vocabulary weights' gradient reduce-scattered over fsdp."""
        cd, D, Vt = self.cd, self.D, self.Vt
        # LM head: logits over this chip's vocabulary slice, softmax with all-reduces over tensor.
        self.gather_w(g, "wout", "P.wout", *self.gw["wout"])
        self.dot(g, "lg", h, "wout", (rows, Vt), (1,), (0,))
        g.e(f"lmx = {ty(cd, (rows,))} reduce(lg, ninf), dimensions={{1}}, to_apply=max_{cd}")
        self.ar(g, "gmx", "lmx", (rows,), self.g_tp, self.T, comp=f"max_{cd}")
        self.bcast(g, "gmxb", "gmx", (rows, Vt), (0,))
        self.ew(g, "lsh", "subtract", (rows, Vt), "lg", "gmxb")
        self.ew(g, "lex", "exponential", (rows, Vt), "lsh")
        g.e(f"lsm = {ty(cd, (rows,))} reduce(lex, zerof), dimensions={{1}}, to_apply=add_{cd}")
        self.ar(g, "gsm", "lsm", (rows,), self.g_tp, self.T)
        self.bcast(g, "gsmb", "gsm", (rows, Vt), (0,))
        self.ew(g, "glg", "divide", (rows, Vt), "lex", "gsmb")  # d loss / d logits (less the one-hot)
        self.dot(g, "ghp", "glg", "wout", (rows, D), (1,), (1,))
        self.ar(g, "gh", "ghp", (rows, D), self.g_tp, self.T)
        self.win_g = self.we  # wout is read by two dots (gathered once), its gradient summed round the ring
        self.wgrad(g, "gwout", h, (rows, D), "glg", (rows, Vt), "wout", *self.gw["wout"])
        self.win_g = False
        self.scatter_g(g, "gsw", "gwout", *self.gw["wout"], windowed=self.we)

    def first_gather(self, g, lws, idx, tag, src="P"):
        """The first layer's weights, gathered before its loop starts."""
        out = []
        for nm, (full, fd) in self.lw.items():
            self.layer_slice(g, f"{tag}.{nm}", f"{src}.{nm}", lws[nm], idx, "f32")
            self.gather_w(g, f"{tag}g.{nm}", f"{tag}.{nm}", full, fd)
            out.append(f"{tag}g.{nm}")
        return out

    def common_consts(self, g):
        g.e("zero = s32[] constant(0)")
        g.e(f"ninf = {self.cd}[] constant(-inf)")
        g.e(f"zerof = {self.cd}[] constant(0)")

    @staticmethod
    def cond(name, st, n):
        return (f"{name} {{\n  s = {st} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
                f"  n = s32[] constant({n})\n  ROOT c = pred[] compare(i, n), direction=LT\n}}\n")


def least_padded(shape, sub, lanes):
    """The minor-to-major order of the tiled layout of shape that pads least with (sub x
    lanes) tiles on its two most minor dimensions (of layouts that pad alike, the nearest
    row-major; tpusim's own choice for computed values, src/compile/backend/layout.c), or
    None when that is row-major."""
    r = len(shape)
    if r < 2:
        return None

    def padded(second, minor):
        n = 1
        for d, x in enumerate(shape):
            n *= -(-x // sub) * sub if d == second else -(-x // lanes) * lanes if d == minor else x
        return n
    best, bs, bm = padded(r - 2, r - 1), r - 2, r - 1
    for mi in range(r - 1, -1, -1):
        for q in range(r - 1, -1, -1):
            if q != mi and padded(q, mi) < best:
                best, bs, bm = padded(q, mi), q, mi
    if (bs, bm) == (r - 2, r - 1):
        return None
    return (bm, bs) + tuple(d for d in range(r - 1, -1, -1) if d not in (bm, bs))


def model_flops_per_token(m):
    """Training FLOPs per token as MaxText counts them: 6 x the matmul parameters (embedding
    lookup excluded, LM head included) + 12 x seq x heads x head_dim per layer (attention,
    not halved for the causal mask); MoE counts the top-k experts' MLPs."""
    D, H, hd, ffn, V, L, S = m["d_model"], m["heads"], m["head_dim"], m["mlp"], m["vocab"], m["layers"], m["seq"]
    glu = m.get("mlp_kind", "gelu") == "swiglu"
    mlp = (3 if glu else 2) * D * ffn
    if m.get("experts"):
        mlp = mlp * m["top_k"] + D * m["experts"]
    KV = m.get("kv_heads", H)
    per_layer = D * (H + 2 * KV) * hd + H * hd * D + mlp
    return 6 * (L * per_layer + D * V) + 12 * S * H * hd * L


def param_count(m):
    D, H, hd, ffn, V, L = m["d_model"], m["heads"], m["head_dim"], m["mlp"], m["vocab"], m["layers"]
    glu = m.get("mlp_kind", "gelu") == "swiglu"
    mlp = (3 if glu else 2) * D * ffn
    if m.get("experts"):
        mlp = mlp * m["experts"] + D * m["experts"]
    KV = m.get("kv_heads", H)
    return L * (D * (H + 2 * KV) * hd + H * hd * D + mlp) + 2 * D * V
