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
import re

import flash
import norms
# The text helpers (gentext.py) and Step's parts by concern (gen_*.py): gen.X still names each.
from gentext import (OFFLOADED, REMAT, Gen, _ring_pairs, _tp_pairs, dims,  # noqa: F401
                     least_padded, model_flops_per_token, param_count, remat_name, ty)
from gen_attention import AttentionMixin
from gen_pipeline import PipelineMixin
from gen_tp import TensorParallelMixin
from gen_weights import WeightsMixin


class Step(AttentionMixin, TensorParallelMixin, PipelineMixin, WeightsMixin):
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

    def const(self, g, out, v, dt=None):
        g.e(f"{out} = {dt or self.cd}[] constant({v})")

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

    def unpack_loop_state(self, g, mst_t, M, Ls, lws, gws, accumulators=True):
        """A microbatch loop body's state (mst_t: i, ids of M microbatches, the parameters —
        the layer weights stacked Ls deep, then the global ones — and, with accumulators, their
        gradient accumulators in the same order) read into i, ids, P.NAME and A.NAME, then the
        common constants. Returns (names, shapes) of the parameters."""
        Tm = self.Tm
        g.e(f"st = {mst_t} parameter(0)")
        g.e("i = s32[] get-tuple-element(st), index=0")
        g.e(f"ids = {ty('s32', (M, Tm, 1))} get-tuple-element(st), index=1")
        names = list(lws) + list(gws)
        shapes = {**{n: (Ls,) + s for n, s in lws.items()}, **gws}
        for k, nm in enumerate(names):
            g.e(f"P.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + k}")
        for k, nm in enumerate(names if accumulators else []):
            g.e(f"A.{nm} = {ty('f32', shapes[nm])} get-tuple-element(st), index={2 + len(names) + k}")
        self.common_consts(g)
        return names, shapes

    def micro_body(self, mst_t, lws, gws, sv, fst_t, bst_t, out_t=None):
        """A microbatch: the loop body (state mst_t: i, ids, parameters, accumulators), or with
        out_t the called computation of a step of one microbatch (mst_t without the
        accumulators; it returns out_t, the gradients in their place)."""
        cd, L, Tm, D, Vt = self.cd, self.L, self.Tm, self.D, self.Vt
        g = Gen()
        names, shapes = self.unpack_loop_state(g, mst_t, self.mb, L, lws, gws, out_t is None)
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
        self.embedding_grad(g, "id", "gx0")
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
