/* The ISA text form: disassemble(assemble(x)) == x, canonical printing, and assembler
 * errors at FILE:LINE:COL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"

static const char *k_prog =
    "; tpusim program (text form: docs/isa.md)\n"
    ".program chip=\"v5e\" hbm_footprint=8192 hbm_peak=8192 vmem_peak=16384\n"
    ".op name=\"dot.1\" kind=\"dot\" flops=2048 padded_flops=4194304 bytes=96 padded_bytes=12288 m=8 k=16 n=8 b=1 tiles=3   ; op 0\n"
    ".hbm name=\"a\" offset=0 bytes=4096   ; h0\n"
    ".hbm name=\"w \\\"q\\\"\" offset=4096 bytes=4096   ; h1\n"
    ".vmem op=0 offset=0 slot_bytes=4096 slots=2   ; v0\n"
    ".vmem op=0 offset=8192 slot_bytes=4096 slots=2   ; v1\n"
    "     0  kernel op=0\n"
    "     1  dma.in dst=v0[0] hbm=h0 bytes=4096 op=0 prefetch=1\n"
    "     2  loop trips=2 op=0\n"
    "     3    dma.in dst=v0[i+1] hbm=h0 bytes=4096 op=0\n"
    "     4    matmul src=v0[i],v0[i] dst=v1[i/3] m=8 k=16 n=8 b=1 mxus=4 passes=6 dtype=f32 what=\"dot\" op=0\n"
    "     5    dma.out src=v1[i/3+1] hbm=h1 bytes=4096 op=0 when=3:2\n"
    "     6    dma.out src=v1[i/3+1] bytes=4096 op=0 when=3:2 onchip=1\n"
    "     7  end op=0\n"
    "     8  cond trips=2 what=\"c\"\n"
    "     9  case trips=0\n"
    "    10    sync\n"
    "    11  case trips=1\n"
    "    12    wait at=4\n"
    "    13    dma.hbm hbm=h0 hbm2=h1 bytes=4096\n"
    "    14  endcond\n"
    "    15  xlu vregs=4 ops=2 what=\"transpose\"\n"
    "    16  eup vregs=4 ops=1 what=\"exponential\"\n"
    "    17  vpu vregs=4 ops=3 what=\"add\"\n";

static void roundtrip(void) {
  tpu_program *p = NULL;
  tpu_diag d;
  CHECK(tpu_program_parse("p.s", k_prog, strlen(k_prog), &p, &d) == TPU_OK);
  if (!p) return;
  char *t = tpu_program_text(p);
  CHECK_EQ_STR(t, k_prog);
  CHECK_EQ_INT(p->ninsns, 18);
  CHECK(p->insns[6].onchip == 1 && p->insns[6].hbm < 0 && !p->insns[5].onchip);
  CHECK_EQ_INT(p->insns[4].passes, 6);
  CHECK_EQ_INT(p->insns[4].dst.div, 3);
  CHECK_EQ_INT(p->insns[5].src[0].off, 1);
  CHECK_EQ_INT(p->insns[5].pmod, 3);
  CHECK_EQ_STR(p->hbm[1].name, "w \"q\"");
  CHECK_EQ_INT(p->ops[0].tiles, 3);
  tpu_free(t);
  /* Sloppy spacing and comments assemble to the same canonical text. */
  const char *loose =
      ".program chip=\"x\"\n.op name=\"o\" kind=\"k\" flops=1e3 padded_flops=1000 bytes=0 padded_bytes=0\n"
      "  ; a comment\n\nkernel   op=0   ; trailing\n  vpu vregs=2 ops=1 op=0\n";
  tpu_program *q = NULL;
  CHECK(tpu_program_parse("q.s", loose, strlen(loose), &q, &d) == TPU_OK);
  if (q) {
    char *t1 = tpu_program_text(q);
    tpu_program *r = NULL;
    CHECK(tpu_program_parse("r.s", t1, strlen(t1), &r, &d) == TPU_OK);
    char *t2 = r ? tpu_program_text(r) : NULL;
    CHECK_EQ_STR(t1, t2);
    CHECK(strstr(t1, "     1  vpu vregs=2 ops=1 op=0\n") != NULL);
    tpu_free(t1);
    tpu_free(t2);
    tpu_program_free(r);
  }
  tpu_program_free(q);
  tpu_program_free(p);
}

static void expect_error(const char *text, const char *where, const char *what) {
  tpu_program *p = NULL;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status st = tpu_program_parse("e.s", text, strlen(text), &p, &d);
  CHECK(st == TPU_ERR_PARSE);
  CHECK(p == NULL);
  char buf[1200];
  tpu_diag_format(&d, buf, sizeof buf);
  if (!strstr(buf, where) || !strstr(buf, what)) fprintf(stderr, "  got: %s\n", buf);
  CHECK(strstr(buf, where) != NULL);
  CHECK(strstr(buf, what) != NULL);
  tpu_program_free(p);
}

static void errors(void) {
  expect_error("kernel\nfrobnicate op=0\n", "e.s:2:1:", "unknown instruction 'frobnicate'");
  expect_error("vpu vregs=x\n", "e.s:1:11:", "expected an integer");
  expect_error("vpu color=3\n", "e.s:1:5:", "unknown key 'color'");
  expect_error("dma.in dst=v0[0]\n", "e.s:1:12:", "no such VMEM buffer");
  expect_error("kernel op=0\n", "e.s:1:", "undeclared op");
  expect_error("loop trips=3\nvpu vregs=1 ops=1\n", "e.s", "unclosed loop");
  expect_error("end\n", "e.s", "end without loop");
  expect_error("vpu vregs=1\n.op name=\"a\" kind=\"b\"\n", "e.s:2:1:", "after the first instruction");
  expect_error("     5  sync\n", "e.s:1:6:", "index does not match");
  expect_error(".op name=\"a\n", "e.s:1:10:", "unterminated string");
  expect_error("matmul m=1 k=1 n=1 b=1 passes=1\n", "e.s", "matmul needs positive");
  expect_error("vpu vregs=1 ops=1 onchip=1\n", "e.s", "onchip=1: only on dma.in or dma.out");
}

/* Every one-character mutation of a valid program either assembles (and then times or
 * fails cleanly) or fails with a parse error: never a crash (run under ASan/UBSan). */
static void mutations(void) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &chip, &d) == TPU_OK);
  size_t n = strlen(k_prog);
  char *buf = malloc(n + 1);
  const char subst[] = {'9', '-', 'x', ' ', '\n', '"', '0', '['};
  int parsed = 0, failed = 0;
  for (size_t i = 0; buf && i < n; i++)
    for (size_t k = 0; k < sizeof subst; k++) {
      memcpy(buf, k_prog, n + 1);
      if (buf[i] == subst[k]) continue;
      buf[i] = subst[k];
      tpu_program *p = NULL;
      tpu_status st = tpu_program_parse("m.s", buf, n, &p, &d);
      if (st == TPU_OK) {
        parsed++;
        tpu_timeline tl;
        if (tpu_timing_run(p, &chip, 1, &tl, &d) == TPU_OK) tpu_timeline_free(&tl);
        tpu_program_free(p);
      } else {
        failed++;
        CHECK(p == NULL);
        CHECK(st == TPU_ERR_PARSE || st == TPU_ERR_NOMEM);
      }
    }
  free(buf);
  CHECK(parsed > 0);
  CHECK(failed > 0);
}

int main(void) {
  roundtrip();
  errors();
  mutations();
  CHECK_DONE();
}
