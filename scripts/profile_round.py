"""Per-phase timing of one speculative round on the demo pair (B=1, T=0, 48 tokens).

  python scripts/profile_round.py      (from the repository root)

Compares, per round: the real draft, a stub draft that costs nothing (isolates the
target verify call plus the loop's bookkeeping), and the target as its own draft; and
the baseline's cost per token. Medians of 5 runs, compilation excluded. Used for the
cost breakdown in the benchmark issue; see BENCHMARKS.md.
"""
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from specdec_jax import decoding, checkpoints
from specdec_jax.models import t5
from specdec_jax import train as tl
A='specdec_jax/assets/demo_ende'
pair=json.load(open(A+'/pair.json'))
tc=tl.config_from_dict(pair['target_config']); dc=tl.config_from_dict(pair['draft_config'])
tp=checkpoints.load_t5x_checkpoint(A+'/target',config=tc,dtype=jnp.float32)
dp=checkpoints.load_t5x_checkpoint(A+'/draft',config=dc,dtype=jnp.float32)
tm,dm=t5.Transformer(tc),t5.Transformer(dc)
enc=jnp.array([[100,200,300,400,500,600,700,1]+[0]*8]); L=48
def run(kind,gamma):
  @jax.jit
  def f(tp,dp,enc):
    c=t5.encode_and_init_cache(tm,tp,enc,L)
    ts=t5.make_step_fn(tm,tp)
    if kind=='base':
      return decoding.temperature_sample(jnp.zeros((1,L),jnp.int32),c,decoding.tokens_to_logits_from_step_fn(ts),eos_id=-5,temperature=0.0)[0]
    d=t5.encode_and_init_cache(dm,dp,enc,L); ds=t5.make_step_fn(dm,dp)
    if kind=='freedraft':
      def ds(tok,lens,cache): return jnp.zeros(tok.shape+(8192,)),cache
    if kind=='selfdraft':
      d,ds=c,ts
    out,_,st=decoding.speculative_sample(jnp.zeros((1,L),jnp.int32),c,ts,d,ds,eos_id=-5,gamma=gamma,vocab_size=8192,temperature=0.0)
    return out, st.target_calls
  r=f(tp,dp,enc); jax.block_until_ready(r)
  ts=[]
  for _ in range(5):
    t=time.perf_counter(); jax.block_until_ready(f(tp,dp,enc)); ts.append(time.perf_counter()-t)
  calls = None if kind=='base' else int(r[1][0,0])
  return np.median(ts), calls
b,_=run('base',0); print('base per token ms', 1000*b/L)
for kind in ['draft','freedraft','selfdraft']:
  for g in [2,4]:
    t,calls=run(kind,g); print(kind,g,'per round ms',1000*t/calls,'rounds',calls, 'speedup', b/t)
