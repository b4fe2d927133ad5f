"""gen_tp.py: part of class Step of the planner's step generator (gen.py), tensor parallelism: the
collectives over the tensor axis (all-gather, reduce-scatter, all-to-all) and MaxText's windowed
forms of the matmuls that write the residual split over tensor (tp_out, tp_out_sum) and of the
sums into it (tp_add).
Methods of Step (gen.Step inherits TensorParallelMixin); helpers from gentext.py, never from gen."""
from gentext import ty, dims


class TensorParallelMixin:
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
