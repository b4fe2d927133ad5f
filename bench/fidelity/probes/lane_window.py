#!/usr/bin/env python3
"""lane_window.py GEN [AxBxL,...]: a reduce-window over a whole minor row (window 2L-1, padded L-1
each side: the compiler's EmitReduceWindowLane emitter, which it also picks for one-query
attention's softmax) alone or fused with its epilogue, f32 [A,B,L] read from an HBM parameter:
max / add windows, x - max, x / sum, exp then x / sum, and the multi-output max-sub-exp-sum.
Prints each compiled kernel's estimated_cycles and emitter; the compiled programs go to
LANE_WINDOW_KEEP (default /tmp/lane_window) for tpusim. Session 31 (smallvec); data:
data/lane_window.jsonl (compiler and tpusim cycles, tpusim with the experiment
TPUSIM_EXP_RWL=1 on and off; NOT landed, see bench/fidelity/probes/README.md)."""
import os,sys,re,json
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
gen=sys.argv[1]
KEEP=os.environ.get('LANE_WINDOW_KEEP', '/tmp/lane_window'); os.makedirs(KEEP, exist_ok=True)
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
def rw(x,op,L):
  init = 0. if op=='add' else -jnp.inf
  return lax.reduce_window(x,init,lax.add if op=='add' else lax.max,(1,1,2*L-1),(1,1,1),[(0,0),(0,0),(L-1,L-1)])
V={
 'max_sub': lambda x,L: x-rw(x,'max',L),
 'add_div': lambda x,L: x/rw(x,'add',L),
 'max_only': lambda x,L: rw(x,'max',L),
 'add_only': lambda x,L: rw(x,'add',L),
 'max_sub_exp_sum': lambda x,L: (lambda e:(e, e.sum(-1)))(jnp.exp(x-rw(x,'max',L))),
 'add_div_exp': lambda x,L: (lambda e: e/rw(e,'add',L))(jnp.exp(x)),
}
shapes=[(2,12,128),(16,8,77),(64,8,128)] if len(sys.argv)<3 else [tuple(map(int,s.split('x'))) for s in sys.argv[2].split(',')]
for (a,b,L) in shapes:
 for v,fn in V.items():
  f=lambda x: fn(x,L)
  t=jax.jit(f).lower(jax.ShapeDtypeStruct((a,b,L),jnp.float32,sharding=SingleDeviceSharding(dev))).compile().as_text()
  name='%s_%s_a%d_b%d_L%d'%(gen,v,a,b,L)
  open(os.path.join(KEEP, name + '.hlo'),'w').write(t)
  ks=[(m.group(1),int(c.group(1)),(e.group(1) if e else '')) for line in t[t.rfind('\nENTRY'):].split('\n') for m,c,e in [(re.match(r"\s*(?:ROOT )?%(\S+) =",line),re.search(r'"estimated_cycles":"(\d+)"',line),re.search(r'"emitter":"(\w+)"',line))] if m and c]
  print(name,ks,flush=True)
