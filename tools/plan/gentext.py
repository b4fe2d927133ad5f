"""gentext.py: the text helpers of the planner's step generator (gen.py): the HLO line buffer
(Gen), shapes as HLO text (dims, ty), the collective pairs' lists, MaxText's remat policies,
the least-padded layout and the model's parameter and FLOP counts. gen.py imports them back
(gen.X still names each); the Step mixins (gen_*.py) import them from here, never from gen."""
import functools


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
