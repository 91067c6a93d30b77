r"""Roofline of the verify call's matmuls on this CPU: is v(γ+1) ≤ 1.15 a kernel question?

    python scripts/bench_roofline.py [--output=out/roofline.json]   (repo root, alone; ~2 min)

A (γ+1)-token verify call costs v(γ+1) one-token steps (BENCHMARKS.md). At the demo target's
size the MLP is the largest part of both (profile_round.py). This times the v3 demo target's
decoder MLP weights alone — 6 layers of gated-gelu-shaped products [M, 384] × [384, 1536] ×2
and [M, 1536] × [1536, 384], 10.6M float32 weights (42 MB, more than the 32 MiB L3) — as a
chain of M-row products inside one compiled `lax.fori_loop` (as in decoding), and reports for
each M:
  - ms per chain, and v(M) = ms(M) / ms(1);
  - the weight bytes read per second (a memory-bound chain reads them once per call: at the
    one-row rate, v would be 1.0);
  - GFLOP/s, against the peak of a large square matmul on the same cores.
Then cross-attention's query and output projections (6 layers of two [384, 384] products)
at M = 1 and 4; the model's own cross-attention (`attend_cached`, 6 layers, 32 encoder
positions) whole and without its projections; and the MLP chain at M = 1 and 4 with the
products written other ways (weights as the
left operand, `Precision.HIGHEST`), to see whether XLA:CPU picks a better kernel for one.
The same chain in bfloat16: `scripts/probe_bf16.py`.

Each time is the median of 9 runs (compilation excluded), per chain. Writes a JSON file
(`--output`) and prints a markdown table. Heavy: run it with nothing else on the cores.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.util import atomic  # noqa: E402

import bench_kernels  # noqa: E402  (scripts/, this script's folder: the shared timer)

EMBED, MLP, LAYERS, ITERS = 384, 1536, 6, 20

# [M, in] x [in, out] written three ways.
PRODUCTS = {
    'x @ w': lambda x, w: x @ w,
    'weights as lhs: dot_general(w, x)ᵀ': lambda x, w: jax.lax.dot_general(
        w, x, (((0,), (1,)), ((), ()))).T,
    'x @ w, Precision.HIGHEST': lambda x, w: jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST),
}


def _median_seconds(fn, *args, reps: int = 9) -> float:
  return bench_kernels.median_seconds(fn, *args, reps=reps)


def _chain(product):
  """Six gated-MLP-shaped blocks (three weights each) or, for two-weight layers, six
  attention-projection-shaped blocks (query then output, as cross-attention's)."""
  def run(layers, x):
    def body(_, h):
      for layer in layers:
        if len(layer) == 3:
          w0, w1, wo = layer
          h = h + product(product(h, w0) * product(h, w1), wo)
        else:
          wq, wo = layer
          h = h + product(product(h, wq), wo)
      return h
    return jax.lax.fori_loop(0, ITERS, body, x)
  return jax.jit(run)


def _cross_attention(rng, heads=6, head_dim=64, enc_len=32) -> dict:
  """The model's own cross-attention (`layers.MultiHeadDotProductAttention.attend_cached`,
  the v3 target's 6 heads x 64, 32 encoder positions, batch 1), 6 layers in a loop, at 1 and
  4 query tokens: whole (projections included) and its core alone (scores, softmax,
  weighted sum: the projections left out). ms per 6 layers."""
  from specdec_jax.models import layers  # pylint: disable=import-outside-toplevel
  mod = layers.MultiHeadDotProductAttention(num_heads=heads, head_dim=head_dim,
                                            out_features=EMBED)
  x0 = jnp.full((1, 1, EMBED), 0.01, jnp.float32)
  bias = jnp.zeros((1, 1, 1, enc_len), jnp.float32)
  params = [mod.init(jax.random.PRNGKey(i), x0, jnp.ones((1, enc_len, EMBED)), bias)['params']
            for i in range(LAYERS)]
  kv = [tuple(jnp.asarray(rng.standard_normal((heads, enc_len, head_dim)), jnp.float32)
              for _ in range(2)) for _ in range(LAYERS)]

  def whole(params, kv, x):
    def body(_, h):
      for p, (k, v) in zip(params, kv):
        h = h + mod.apply({'params': p}, h, k, v, bias, method=mod.attend_cached)
      return h
    return jax.lax.fori_loop(0, ITERS, body, x)

  def core(params, kv, x):
    del params
    def body(_, h):
      for k, v in kv:
        q_len = h.shape[1]
        query = jnp.swapaxes(h.reshape(1, q_len, heads, head_dim), 1, 2)
        w = jnp.einsum('nqd,nkd->nqk', query.reshape(heads, q_len, head_dim), k)
        w = w + jnp.broadcast_to(bias, (1, heads, q_len, enc_len)).reshape(w.shape)
        o = jnp.einsum('nqk,nkd->nqd', jax.nn.softmax(w), v)
        h = h + jnp.swapaxes(o.reshape(1, heads, q_len, head_dim), 1, 2).reshape(h.shape)
      return h
    return jax.lax.fori_loop(0, ITERS, body, x)

  out = {}
  for name, fn in (('whole', whole), ('core', core)):
    fn = jax.jit(fn)
    ms = {m: _median_seconds(fn, params, kv, jnp.full((1, m, EMBED), 0.01, jnp.float32))
             / ITERS * 1e3 for m in (1, 4)}
    out[name] = {'m1_ms': ms[1], 'm4_ms': ms[4], 'v4': ms[4] / ms[1]}
  return out


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output', default='out/roofline.json', help='JSON results file')
  args = parser.parse_args(argv)
  rng = np.random.default_rng(0)
  layers = []
  for _ in range(LAYERS):
    layers.append([jnp.asarray(rng.standard_normal(shape) * 0.05, jnp.float32)
                   for shape in ((EMBED, MLP), (EMBED, MLP), (MLP, EMBED))])
  weights = sum(w.size for layer in layers for w in layer)
  from specdec_jax.benchmark import runner  # the CPU's model, caches and matmul ISA flags
  result = {'weights': weights, 'weight_MB': weights * 4 / 1e6, 'devices': str(jax.devices()),
            'cpu': runner.cpu_info()}
  for n in (1024, 2048):
    a = jnp.ones((n, n), jnp.float32)
    result[f'peak_gflops_{n}'] = 2 * n ** 3 / _median_seconds(jax.jit(jnp.matmul), a, a) / 1e9
  chain = _chain(PRODUCTS['x @ w'])
  rows = {}
  for m in (1, 2, 3, 4, 5, 8, 16):
    x = jnp.full((m, EMBED), 0.01, jnp.float32)
    s = _median_seconds(chain, layers, x) / ITERS
    rows[m] = {'ms': s * 1e3, 'weight_GB_per_s': weights * 4 / s / 1e9,
               'gflops': 2 * m * weights / s / 1e9}
  for m in rows:
    rows[m]['v'] = rows[m]['ms'] / rows[1]['ms']
  result['chain'] = rows
  # Cross-attention's two projections per layer: 6 x ([384, 384], [384, 384]), 1.8M weights
  # (7 MB, L3-resident), whose verify-call share scaled worst in profile_round.py (2.5x).
  proj = [[jnp.asarray(rng.standard_normal((EMBED, EMBED)) * 0.05, jnp.float32)
           for _ in range(2)] for _ in range(LAYERS)]
  ms = {m: _median_seconds(chain, proj, jnp.full((m, EMBED), 0.01, jnp.float32)) / ITERS * 1e3
        for m in (1, 4)}
  result['attention_projections'] = {'m1_ms': ms[1], 'm4_ms': ms[4], 'v4': ms[4] / ms[1]}
  result['cross_attention'] = _cross_attention(rng)
  result['products'] = {}
  for name, product in PRODUCTS.items():
    fn = _chain(product)
    ms = {m: _median_seconds(fn, layers, jnp.full((m, EMBED), 0.01, jnp.float32)) / ITERS * 1e3
          for m in (1, 4)}
    result['products'][name] = {'m1_ms': ms[1], 'm4_ms': ms[4], 'v4': ms[4] / ms[1]}
  result['xla_flags'] = os.environ.get('XLA_FLAGS', '')
  atomic.write_text(args.output, json.dumps(result, indent=1))
  peak = max(result['peak_gflops_1024'], result['peak_gflops_2048'])
  print(f'peak (square matmul): {peak:.0f} GFLOP/s; MLP chain {result["weight_MB"]:.0f} MB')
  print('| M | ms | v(M) | weights GB/s | GFLOP/s | % of peak |\n|---|---|---|---|---|---|')
  for m, r in rows.items():
    print(f'| {m} | {r["ms"]:.3f} | {r["v"]:.2f} | {r["weight_GB_per_s"]:.1f} | '
          f'{r["gflops"]:.0f} | {100 * r["gflops"] / peak:.0f} % |')
  print('\n| product | M = 1 ms | M = 4 ms | v(4) |\n|---|---|---|---|')
  for name, r in result['products'].items():
    print(f'| {name} | {r["m1_ms"]:.3f} | {r["m4_ms"]:.3f} | {r["v4"]:.2f} |')
  r = result['attention_projections']
  print(f'\nattention projections (6 x 2 [384, 384]): M = 1 {r["m1_ms"]:.3f} ms, '
        f'M = 4 {r["m4_ms"]:.3f} ms, v(4) {r["v4"]:.2f}')
  for name, r in result['cross_attention'].items():
    print(f'cross-attention {name} (6 layers): M = 1 {r["m1_ms"]:.3f} ms, '
          f'M = 4 {r["m4_ms"]:.3f} ms, v(4) {r["v4"]:.2f}')
  print(f'wrote {args.output}')
  return result


if __name__ == '__main__':
  main()
