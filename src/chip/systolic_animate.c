/* Cycle-by-cycle views of the PE-level array: a text grid and a self-contained HTML page. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "chip/systolic.h"

/* Shortest readable form of a value: %.4g, with nan/inf spelled out. */
static void fmt_val(char *buf, size_t n, float v) {
  if (isnan(v))
    snprintf(buf, n, "nan");
  else if (isinf(v))
    snprintf(buf, n, v < 0 ? "-inf" : "inf");
  else
    snprintf(buf, n, "%.4g", (double)v);
}

/* Validates the request and runs the array with `probe` attached. Sizes are checked with
 * the closed form first so nothing is printed or written for a run that is too long. */
static tpu_status animate_run(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                              const float *A, const float *W, tpu_wload mode,
                              tpu_systolic_probe *probe, tpu_diag *d) {
  tpu_mxu_cycles cf;
  TPU_TRY(tpu_mxu_tile_cycles(R, C, M, K, N, mode, &cf, d));
  if (!A || !W) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "animation needs A and W");
  if (R > TPU_SYSTOLIC_ANIM_MAX_DIM || C > TPU_SYSTOLIC_ANIM_MAX_DIM)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "animation is for small arrays: %lldx%lld exceeds %dx%d", (long long)R,
                    (long long)C, TPU_SYSTOLIC_ANIM_MAX_DIM, TPU_SYSTOLIC_ANIM_MAX_DIM);
  if (cf.total + 1 > TPU_SYSTOLIC_ANIM_MAX_CYCLES)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "animation would take %lld cycles; the limit is %d", (long long)cf.total + 1,
                    TPU_SYSTOLIC_ANIM_MAX_CYCLES);
  float *out = tpu_malloc((size_t)(M * N) * sizeof *out);
  if (!out) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the animation");
  tpu_status st = tpu_systolic_run(R, C, M, K, N, mode, A, W, out, NULL, probe, d);
  tpu_free(out);
  return st;
}

/* ---- Text ---- */

#define CELL 18 /* characters per PE column */

typedef struct text_probe {
  tpu_systolic_probe base; /* first: the run hands back &base */
  FILE *f;
} text_probe;

static void cell(FILE *f, const char *fmt, ...) TPU_PRINTF(2, 3);
static void cell(FILE *f, const char *fmt, ...) {
  char buf[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(f, " %-*.*s|", CELL - 2, CELL - 2, buf);
}

static tpu_status text_cycle(tpu_systolic_probe *self, const tpu_systolic_state *s,
                             tpu_diag *d) {
  FILE *f = ((text_probe *)self)->f;
  char v[32];
  fprintf(f, "== cycle %lld ==", (long long)s->cycle);
  if (s->stream_fold >= 0)
    fprintf(f, "  stream: fold %lld of %lld (W rows %lld.., cols %lld..)",
            (long long)s->stream_fold, (long long)s->folds, (long long)s->stream_k0,
            (long long)s->stream_n0);
  if (s->latched) fprintf(f, "  latched: %d PEs", s->latched);
  if (s->load_fold >= 0)
    fprintf(f, "  load: fold %lld, row %lld/%lld %s", (long long)s->load_fold,
            (long long)s->load_rows, (long long)s->R,
            s->mode == TPU_WLOAD_DOUBLE ? "into shadow" : "into PEs");
  fprintf(f, "\n%9s|", "");
  for (int64_t c = 0; c < s->C; c++) cell(f, "col %lld", (long long)c);
  fprintf(f, "\n");
  for (int64_t r = 0; r < s->R; r++) {
    const tpu_systolic_pe *row = &s->pe[r * s->C];
    fprintf(f, "row %-3lld w|", (long long)r);
    for (int64_t c = 0; c < s->C; c++) {
      fmt_val(v, sizeof v, row[c].w);
      if (row[c].wk >= 0)
        cell(f, "%s W%d,%d", v, row[c].wk, row[c].wn);
      else
        cell(f, "-");
    }
    if (s->mode == TPU_WLOAD_DOUBLE) {
      fprintf(f, "\n        s|");
      for (int64_t c = 0; c < s->C; c++) {
        fmt_val(v, sizeof v, row[c].w_shadow);
        if (row[c].sk >= 0)
          cell(f, "%s W%d,%d", v, row[c].sk, row[c].sn);
        else
          cell(f, "-");
      }
      fprintf(f, "\n        b|");
      for (int64_t c = 0; c < s->C; c++) {
        fmt_val(v, sizeof v, row[c].wb);
        if (row[c].bf >= 0)
          cell(f, "%s ->r%d v", v, row[c].bd);
        else
          cell(f, ".");
      }
    }
    fprintf(f, "\n        a|");
    for (int64_t c = 0; c < s->C; c++) {
      fmt_val(v, sizeof v, row[c].a);
      if (row[c].am >= 0)
        cell(f, "%s m%d >", v, row[c].am);
      else
        cell(f, ".");
    }
    fprintf(f, "\n        p|");
    for (int64_t c = 0; c < s->C; c++) {
      fmt_val(v, sizeof v, row[c].psum);
      if (row[c].pm >= 0)
        cell(f, "%s m%d v", v, row[c].pm);
      else
        cell(f, ".");
    }
    fprintf(f, "\n");
  }
  fprintf(f, "out      |");
  const tpu_systolic_pe *bottom = &s->pe[(s->R - 1) * s->C];
  for (int64_t c = 0; c < s->C; c++) {
    const int64_t n = s->stream_n0 + c;
    if (s->stream_fold >= 0 && bottom[c].pm >= 0 && n < s->N) {
      fmt_val(v, sizeof v, s->out[bottom[c].pm * s->N + n]);
      cell(f, "o%d,%lld=%s", bottom[c].pm, (long long)n, v);
    } else {
      cell(f, "%s", "");
    }
  }
  fprintf(f, "\n\n");
  if (ferror(f)) return TPU_FAIL(d, TPU_ERR_IO, tpu_noloc(), "writing the animation failed");
  return TPU_OK;
}

tpu_status tpu_systolic_animate_text(FILE *f, int64_t R, int64_t C, int64_t M, int64_t K,
                                     int64_t N, const float *A, const float *W, tpu_wload mode,
                                     tpu_diag *d) {
  if (!f) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "animation needs an output stream");
  text_probe p;
  p.base.on_cycle = text_cycle;
  p.base.user = NULL;
  p.f = f;
  fprintf(f,
          "Weight-stationary %lldx%lld array, A %lldx%lld times W %lldx%lld, %s weight "
          "loading.\nw: weight in the PE (W row,col); s: shadow weight; a: activation "
          "(A row m), moves right; p: partial sum, moves down; b: weight on the load bus, bound for "
          "row r; out: accumulator o m,n.\n\n",
          (long long)R, (long long)C, (long long)M, (long long)K, (long long)K, (long long)N,
          mode == TPU_WLOAD_DOUBLE ? "double-buffered" : "serial");
  return animate_run(R, C, M, K, N, A, W, mode, &p.base, d);
}

/* ---- HTML ---- */

typedef struct buf {
  char *p;
  size_t n, cap;
  int failed;
} buf;

static void put(buf *b, const char *fmt, ...) TPU_PRINTF(2, 3);
static void put(buf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->failed = 1;
      return;
    }
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->n + (size_t)k + 1) cap *= 2;
    char *q = tpu_realloc(b->p, cap);
    if (!q) {
      b->failed = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

/* Frames kept for the page: R*C PE records per cycle; beyond this the page gets unwieldy. */
#define HTML_MAX_PE_FRAMES (1 << 19)

typedef struct html_probe {
  tpu_systolic_probe base;
  buf frames;
  int64_t pe_frames, ncycles;
} html_probe;

static tpu_status html_cycle(tpu_systolic_probe *self, const tpu_systolic_state *s,
                             tpu_diag *d) {
  html_probe *h = (html_probe *)self;
  h->pe_frames += s->R * s->C;
  if (h->pe_frames > HTML_MAX_PE_FRAMES)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "animation too large for one page (%lldx%lld array over %lld cycles)",
                    (long long)s->R, (long long)s->C, (long long)s->cycle + 1);
  buf *b = &h->frames;
  char w[32], sh[32], a[32], p[32], bus[32];
  /* {t, stream fold, k0, n0, load fold, load rows, latched, outputs done, pes} */
  put(b, "{t:%lld,sf:%lld,sk:%lld,sn:%lld,lf:%lld,lr:%lld,la:%d,od:%lld,pe:[",
      (long long)s->cycle, (long long)s->stream_fold, (long long)s->stream_k0,
      (long long)s->stream_n0, (long long)s->load_fold, (long long)s->load_rows, s->latched,
      (long long)s->outputs_done);
  for (int64_t i = 0; i < s->R * s->C; i++) {
    const tpu_systolic_pe *e = &s->pe[i];
    fmt_val(w, sizeof w, e->w);
    fmt_val(sh, sizeof sh, e->w_shadow);
    fmt_val(a, sizeof a, e->a);
    fmt_val(p, sizeof p, e->psum);
    fmt_val(bus, sizeof bus, e->wb);
    put(b, "%s[\"%s\",%d,%d,\"%s\",%d,%d,\"%s\",%d,\"%s\",%d,\"%s\",%d,%d,%d]", i ? "," : "",
        w, e->wk, e->wn, sh, e->sk, e->sn, a, e->am, p, e->pm, bus, e->bf, e->bd, e->wf);
  }
  put(b, "],out:[");
  const tpu_systolic_pe *bottom = &s->pe[(s->R - 1) * s->C];
  int first = 1;
  for (int64_t c = 0; c < s->C; c++) {
    const int64_t n = s->stream_n0 + c;
    if (s->stream_fold < 0 || bottom[c].pm < 0 || n >= s->N) continue;
    fmt_val(w, sizeof w, s->out[bottom[c].pm * s->N + n]);
    put(b, "%s[%lld,%d,%lld,\"%s\"]", first ? "" : ",", (long long)c, bottom[c].pm,
        (long long)n, w);
    first = 0;
  }
  put(b, "]},\n");
  h->ncycles = s->cycle + 1;
  if (b->failed) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the page");
  return TPU_OK;
}

/* The page's fixed parts. The script draws frame F[i] as an SVG grid. */
static const char k_html_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<title>tpusim systolic array</title>\n<style>\n"
    "body{font-family:sans-serif;margin:16px;color:#222}\n"
    "#bar button{font-size:15px;margin-right:4px}\n#slider{width:420px;vertical-align:middle}\n"
    "svg text{font-family:monospace;font-size:11px}\n.legend span{margin-right:14px}\n"
    "</style></head><body>\n";

static const char k_html_body[] =
    "<div id=\"bar\"><button id=\"prev\">&#9664; prev</button><button id=\"play\">play"
    "</button><button id=\"next\">next &#9654;</button>\n"
    "<input type=\"range\" id=\"slider\" min=\"0\" value=\"0\"> <b id=\"label\"></b></div>\n"
    "<p id=\"info\"></p>\n<svg id=\"grid\" xmlns=\"http://www.w3.org/2000/svg\"></svg>\n"
    "<p class=\"legend\"><span style=\"background:#ffe08a\">&nbsp;MAC this cycle&nbsp;</span>"
    "<span style=\"background:#cfe3ff\">&nbsp;weight shifting&nbsp;</span>"
    "<span style=\"background:#eee\">&nbsp;no weight (padding)&nbsp;</span>"
    " w: weight (W row,col) &middot; s: shadow weight &middot; bus: weight on the load bus "
    "&middot; a: activation of A row m, "
    "moves right &middot; p: partial sum, moves down</p>\n";

static const char k_html_script[] =
    "<script>\n"
    "const G=document.getElementById('grid'),S=document.getElementById('slider');\n"
    "const CW=150,CH=D.dbl?95:64,X0=110,Y0=24;let cur=0,timer=null;\n"
    "G.setAttribute('width',X0+D.C*CW+20);G.setAttribute('height',Y0+D.R*CH+60);\n"
    "S.max=F.length-1;\n"
    "function esc(s){return String(s).replace(/&/g,'&amp;').replace(/</g,'&lt;');}\n"
    "function txt(x,y,s,c){return '<text x=\"'+x+'\" y=\"'+y+'\" fill=\"'+(c||'#222')+"
    "'\">'+esc(s)+'</text>';}\n"
    "function draw(i){cur=i;S.value=i;const f=F[i];let h='';\n"
    " for(let c=0;c<D.C;c++)h+=txt(X0+c*CW+50,Y0-8,'col '+c,'#666');\n"
    " for(let r=0;r<D.R;r++){h+=txt(6,Y0+r*CH+CH/2,'row '+r,'#666');\n"
    "  const e0=f.pe[r*D.C];if(e0[7]>=0)h+=txt(50,Y0+r*CH+CH/2,e0[6]+' \\u2192','#b05a00');\n"
    "  for(let c=0;c<D.C;c++){const e=f.pe[r*D.C+c],x=X0+c*CW,y=Y0+r*CH;\n"
    "   const mac=e[1]>=0&&e[7]>=0,ld=f.lf>=0&&!D.dbl;\n"
    "   const bg=mac?'#ffe08a':(ld?'#cfe3ff':(e[1]<0?'#eee':'#fff'));\n"
    "   h+='<rect x=\"'+x+'\" y=\"'+y+'\" width=\"'+(CW-6)+'\" height=\"'+(CH-6)+"
    "'\" fill=\"'+bg+'\" stroke=\"#888\"/>';let yy=y+14;\n"
    "   h+=txt(x+5,yy,e[1]>=0?'w '+e[0]+'  W'+e[1]+','+e[2]:'w -');yy+=15;\n"
    "   if(D.dbl){h+=txt(x+5,yy,e[4]>=0?'s '+e[3]+'  W'+e[4]+','+e[5]:'s -',"
    "f.lf>=0?'#1a56b0':'#666');yy+=15;\n"
    "    h+=txt(x+5,yy,e[11]>=0?'bus '+e[10]+' \\u2193 row '+e[12]:'bus \\u00b7','#1a56b0');yy+=15;}\n"
    "   h+=txt(x+5,yy,e[7]>=0?'a '+e[6]+'  m'+e[7]+' \\u2192':'a \\u00b7','#b05a00');yy+=15;\n"
    "   h+=txt(x+5,yy,e[9]>=0?'p '+e[8]+'  m'+e[9]+' \\u2193':'p \\u00b7','#176b2c');}}\n"
    " for(const o of f.out)h+=txt(X0+o[0]*CW+5,Y0+D.R*CH+14,'\\u2193 out['+o[1]+']['+o[2]+"
    "'] = '+o[3],'#176b2c');\n"
    " G.innerHTML=h;\n"
    " document.getElementById('label').textContent='cycle '+f.t+' of '+(F.length-1);\n"
    " let info=f.sf>=0?'streaming fold '+f.sf+' of '+D.folds+' (W rows '+f.sk+'.., cols '+"
    "f.sn+'..)':'no fold streaming';\n"
    " if(f.la)info+='; '+f.la+' PEs latched their shadow weight';\n"
    " if(f.lf>=0)info+='; loading fold '+f.lf+': '+f.lr+' of '+D.R+' rows shifted '+"
    "(D.dbl?'down the load bus into column 0':'into the PEs');\n"
    " info+='; partial sums out so far: '+f.od;\n"
    " document.getElementById('info').textContent=info;}\n"
    "function step(k){draw(Math.max(0,Math.min(F.length-1,cur+k)));}\n"
    "document.getElementById('prev').onclick=()=>step(-1);\n"
    "document.getElementById('next').onclick=()=>step(1);\n"
    "S.oninput=()=>draw(+S.value);\n"
    "document.getElementById('play').onclick=function(){if(timer){clearInterval(timer);"
    "timer=null;this.textContent='play';return;}this.textContent='pause';"
    "if(cur>=F.length-1)draw(0);timer=setInterval(()=>{if(cur>=F.length-1){"
    "clearInterval(timer);timer=null;document.getElementById('play').textContent='play';"
    "return;}step(1);},600);};\n"
    "document.addEventListener('keydown',e=>{if(e.key==='ArrowRight')step(1);"
    "if(e.key==='ArrowLeft')step(-1);});\n"
    "draw(0);\n</script>\n</body></html>\n";

static tpu_status write_file(const char *path, const buf *page, tpu_diag *d) {
  char *tmp;
  FILE *f;
  TPU_TRY(tpu_file_begin(path, &tmp, &f, d));
  return tpu_file_commit(path, tmp, f, fwrite(page->p, 1, page->n, f) == page->n, d);
}

tpu_status tpu_systolic_animate_html(const char *path, int64_t R, int64_t C, int64_t M,
                                     int64_t K, int64_t N, const float *A, const float *W,
                                     tpu_wload mode, tpu_diag *d) {
  if (!path || !*path)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "animation needs an output path");
  html_probe h;
  memset(&h, 0, sizeof h);
  h.base.on_cycle = html_cycle;
  tpu_status st = animate_run(R, C, M, K, N, A, W, mode, &h.base, d);
  buf page = {0};
  if (st == TPU_OK) {
    put(&page, "%s", k_html_head);
    put(&page,
        "<h2>Weight-stationary %lld&times;%lld array: A %lld&times;%lld &times; W "
        "%lld&times;%lld, %s weight loading</h2>\n",
        (long long)R, (long long)C, (long long)M, (long long)K, (long long)K, (long long)N,
        mode == TPU_WLOAD_DOUBLE ? "double-buffered" : "serial");
    put(&page, "%s", k_html_body);
    put(&page, "<script>\nconst D={R:%lld,C:%lld,M:%lld,K:%lld,N:%lld,dbl:%d,folds:%lld};\n",
        (long long)R, (long long)C, (long long)M, (long long)K, (long long)N,
        mode == TPU_WLOAD_DOUBLE, (long long)(((K + R - 1) / R) * ((N + C - 1) / C)));
    put(&page, "const F=[\n");
    if (!page.failed && h.frames.p) put(&page, "%s", h.frames.p);
    put(&page, "];\n</script>\n%s", k_html_script);
    if (page.failed) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the page");
  }
  if (st == TPU_OK) st = write_file(path, &page, d);
  tpu_free(page.p);
  tpu_free(h.frames.p);
  return st;
}
