"""gen_weights.py: part of class Step of the planner's step generator (gen.py), FSDP weights and
windowed loops: the collective-permute rings and their loops, the windowed (ring) matmuls, each
layer's weight all-gathers over fsdp (with the next layer's prefetch) and its gradients'
reduce-scatters.
Methods of Step (gen.Step inherits WeightsMixin); helpers from gentext.py, never from gen."""
from gentext import ty, _ring_pairs, _tp_pairs, Gen


class WeightsMixin:
    def ring_state(self, g, out, cd, members):
        """A windowed-einsum loop's initial state, named {out}.in: its step counter (0), then each
        (value, shape) of members, in type cd. Returns the name and the state's types."""
        g.e(f"{out}.zi = s32[] constant(0)")
        state = ["s32[]"] + [ty(cd, sh) for _, sh in members]
        g.e(f"{out}.in = ({', '.join(state)}) tuple({out}.zi, {', '.join(v for v, _ in members)})")
        return f"{out}.in", state

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

    def embedding_grad(self, g, ids, gx):
        """gse: the embedding's gradient, the token gradients gx scatter-added into the rows the
        token ids ids read (zeros elsewhere), reduce-scattered as the embedding's shard."""
        cd = self.cd
        g.e(f"ze = {cd}[] constant(0)")
        self.bcast(g, "zemb", "ze", self.gw["emb"][0], ())
        g.e(f"gembf = {ty(cd, self.gw['emb'][0])} scatter(zemb, {ids}, {gx}), update_window_dims={{1}}, "
            f"inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add_{cd}")
        self.scatter_g(g, "gse", "gembf", *self.gw["emb"])

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
