r"""Does bfloat16 lower v(γ+1) on a CPU with bfloat16 matmul units (AVX512-BF16 / AMX)?

    python scripts/probe_bf16.py [--output=out/probe_bf16.json]   (repo root, alone; ~1 min)

Two measurements (docs/benchmarks/history.md, probe 5):
  1. the v3 target decoder's MLP chain (`bench_roofline._chain`, 6 gated-gelu blocks, weights
     rounded to bfloat16-representable values) at M = 1–5 rows in four forms: float32; float32
     inputs against bfloat16-stored weights (convert in the graph; `preferred_element_type`);
     bfloat16 inputs and weights with float32 accumulation;
  2. the shipped demo pair's `benchmark.costs.step_costs` (batch 1, 32-token input, two samples)
     with float32 activations and with bfloat16 activations (params loaded as bfloat16, so
     the cast at use is free), and each bfloat16 k-token call against the float32 1-token step.
Writes JSON (`--output`); prints one line per measurement.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax import checkpoints  # noqa: E402
from specdec_jax.util import atomic
from specdec_jax.benchmark import costs, runner  # noqa: E402
from specdec_jax.models import t5  # noqa: E402
from specdec_jax.train.run_files import config_from_dict  # noqa: E402

import bench_roofline as br  # noqa: E402  (scripts/, this script's folder)


def chain_forms() -> dict:
  rng = np.random.default_rng(0)
  f32 = [[jnp.asarray(rng.standard_normal(s) * 0.05, jnp.float32).astype(jnp.bfloat16)
          .astype(jnp.float32) for s in ((384, 1536), (384, 1536), (1536, 384))]
         for _ in range(br.LAYERS)]
  bf16 = [[w.astype(jnp.bfloat16) for w in layer] for layer in f32]
  forms = {
      'float32': (f32, lambda x, w: x @ w),
      'float32 x, bfloat16 w converted in the graph': (bf16, lambda x, w: x @ w.astype(jnp.float32)),
      'float32 x, bfloat16 w, preferred_element_type': (
          bf16, lambda x, w: jax.lax.dot(x, w, preferred_element_type=jnp.float32)),
      'bfloat16 x and w, float32 accumulation': (
          bf16, lambda x, w: jax.lax.dot(x.astype(jnp.bfloat16), w,
                                         preferred_element_type=jnp.float32)),
  }
  out = {}
  for name, (weights, product) in forms.items():
    fn = br._chain(product)
    out[name] = {m: br._median_seconds(fn, weights, jnp.full((m, br.EMBED), 0.01, jnp.float32))
                 / br.ITERS * 1e3 for m in (1, 2, 3, 4, 5)}
    print(f'MLP chain, {name}: ' + ', '.join(f'M={m} {t:.3f} ms' for m, t in out[name].items()),
          flush=True)
  return out


def model_costs(root='specdec_jax/assets/demo_ende') -> dict:
  pair = json.loads(pathlib.Path(root, 'pair.json').read_text())
  tokens = np.ones((1, 32), np.int32)
  res = {}
  for name in ('float32', 'bfloat16'):
    dtype = jnp.dtype(name).type
    loaded = []
    for role in ('target', 'draft'):
      cfg = config_from_dict(pair[f'{role}_config']).replace(dtype=dtype, dropout_rate=0.0)
      loaded += [t5.Transformer(cfg), jax.device_put(  # on the device once, not per call
          checkpoints.load_t5x_checkpoint(f'{root}/{role}', config=cfg, dtype=dtype))]
    models = runner.Models(*loaded)
    res[name] = [costs.step_costs(models, tokens, 64, (1, 2, 3, 4), iters=7) for _ in range(2)]
    for r in res[name]:
      print(f'model, {name} activations: target step '
            + ', '.join(f'k={k} {s * 1e3:.2f} ms' for k, s in r['target_step_s'].items()),
            flush=True)
  t1 = float(np.median([r['target_step_s']['1'] for r in res['float32']]))
  res['bfloat16_call_per_float32_step'] = {
      k: float(np.median([r['target_step_s'][k] for r in res['bfloat16']])) / t1
      for k in ('2', '3', '4', '5')}
  print('bfloat16 k-token call / float32 1-token step:', res['bfloat16_call_per_float32_step'])
  return res


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output', default='out/probe_bf16.json')
  args = parser.parse_args(argv)
  result = {'cpu': runner.cpu_info(), 'chain_ms': chain_forms(), 'model': model_costs()}
  pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
  atomic.write_text(args.output, json.dumps(result, indent=1))
  print(f'wrote {args.output}')


if __name__ == '__main__':
  main()
