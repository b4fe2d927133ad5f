"""gen_attention.py: part of class Step of the planner's step generator (gen.py), attention's core:
q, k and v split from qkv, the heads' reshapes, the causal mask, the scores and softmax
(dot-product), flash attention's forward and backward over key/value blocks (as fusions or the
Pallas kernels' custom calls, tools/plan/flash.py) and the attention gradients' outputs.
Methods of Step (gen.Step inherits AttentionMixin); helpers from gentext.py, never from gen."""
import flash
import norms
from gentext import ty, dims, Gen


class AttentionMixin:
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
