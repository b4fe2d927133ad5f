"""gen_pipeline.py: part of class Step of the planner's step generator (gen.py), pipeline
parallelism: the rings of stages (collective-permute pairs), each chip's stage id, the GPipe /
circular pipeline's loop body and its per-iteration helpers (a repeat's weight rows, the last
stage's output).
Methods of Step (gen.Step inherits PipelineMixin); helpers from gentext.py, never from gen."""
from gentext import ty, dims, Gen


class PipelineMixin:
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
        names, shapes = self.unpack_loop_state(g, mst_t, M, Lw, lws, gws)
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
        self.embedding_grad(g, "idf", "gx0")
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
