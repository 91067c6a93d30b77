"""Micro-benchmarks behind two claims in BENCHMARKS.md (XLA:CPU, this machine).

    python scripts/bench_kernels.py          (from the repository root; about a minute)

1. argmax / categorical over an 8k vocabulary: `jnp.argmax` (XLA's variadic reduce)
   against `sampling.argmax` (max, then the smallest index attaining it), and
   `jax.random.categorical` against `sampling.categorical` (same Gumbel noise), and
   `sampling.inverse_cdf` (two uniforms per row, from the probabilities).
2. The cost of a k-token call relative to a 1-token call for a chain of matrix
   products with the shapes a demo-target decoder step reads: 4 layers of [k, 256] ×
   [256, 256] ×6 (self-attention q, k, v, o; cross-attention q, o), [256, 1024] ×2 and
   [1024, 256], then [256, 8192]: 6.8M float32 weights (27 MB). Reported as v(k).
3. The same for the v3 demo target's decoder shapes (6 layers of [k, 384] × [384, 384] ×6,
   gated-gelu MLP [384, 1536] ×2 and [1536, 384], then [384, 8192]: 20.8M weights, 83 MB),
   each product as one k-row matmul (`dot`) or as k one-row matmuls (`rows`): whether the
   matmuls alone explain the verify call's cost v(γ) (docs/benchmarks/history.md, r9).

Each figure is the median of 7 timed runs of a compiled `lax.fori_loop` (per-call
dispatch amortized), compilation excluded. Prints a markdown table.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.decoding import sampling

VOCAB = 8192


def median_seconds(fn, *args, reps: int = 7) -> float:
  """Median wall seconds of `reps` calls of `fn(*args)` after one warm-up (compile) call.

  Shared with `bench_roofline.py` (which uses `reps=9`).
  """
  jax.block_until_ready(fn(*args))
  runs = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    runs.append(time.perf_counter() - t0)
  return float(np.median(runs))


def _time(fn, *args, iters: int) -> float:
  """Seconds per loop iteration (median of 7 runs of a compiled loop of `iters`)."""
  return median_seconds(fn, *args, reps=7) / iters


def vocab_ops(rows: int) -> dict:
  x = jnp.asarray(np.random.default_rng(0).standard_normal((rows, VOCAB)), jnp.float32)
  ops = {
      'jnp.argmax': lambda k, v: jnp.argmax(v, axis=-1),
      'sampling.argmax': lambda k, v: sampling.argmax(v),
      'jax.random.categorical': jax.random.categorical,
      'sampling.categorical': sampling.categorical,
      # from the probabilities, as the speculative loop has them (softmax not timed)
      'sampling.inverse_cdf': lambda k, v: sampling.inverse_cdf(
          jax.random.uniform(k, v.shape[:-1] + (2,)), v),
  }
  probs = jax.nn.softmax(x)
  out = {}
  for name, op in ops.items():
    arg = probs if name == 'sampling.inverse_cdf' else x

    @jax.jit
    def loop(v, op=op):
      def body(i, acc):
        key = jax.random.fold_in(jax.random.PRNGKey(0), i)
        return acc + op(key, v + acc[0].astype(jnp.float32) * 0).astype(jnp.int32).sum()
      return jax.lax.fori_loop(0, 100, body, jnp.zeros((1,), jnp.int32))
    out[name] = _time(loop, arg, iters=100)
  return out


def chain_ratios(ks=(1, 2, 4, 6, 8)) -> dict:
  rng = np.random.default_rng(0)
  shapes = []
  for _ in range(4):
    shapes += [(256, 256)] * 6 + [(256, 1024), (256, 1024), (1024, 256)]
  shapes.append((256, VOCAB))
  ws = [jnp.asarray(rng.standard_normal(s) * 0.05, jnp.float32) for s in shapes]

  @jax.jit
  def loop(ws, x):
    def body(_, x):
      h, gate = x, []
      for w in ws[:-1]:
        if w.shape == (256, 256):
          h = h + jnp.tanh(h @ w)
        elif w.shape == (256, 1024):
          gate.append(h @ w)
        else:
          h, gate = h + (gate[0] * gate[1]) @ w, []
      return x + (h @ ws[-1])[:, :256] * 1e-6
    return jax.lax.fori_loop(0, 20, body, x)

  times = {k: _time(loop, ws, jnp.ones((k, 256), jnp.float32), iters=20) for k in ks}
  return {k: (t, t / times[ks[0]]) for k, t in times.items()}


def v3_decoder_ratios(ks=(1, 2, 3, 4, 5), rows: bool = False) -> dict:
  """v(k) of a k-token pass through the v3 target decoder's weight shapes (item 3)."""
  e, f = 384, 1536
  rng = np.random.default_rng(0)
  shapes = []
  for _ in range(6):
    shapes += [(e, e)] * 6 + [(e, f), (e, f), (f, e)]
  shapes.append((e, VOCAB))
  ws = [jnp.asarray(rng.standard_normal(s) * 0.05, jnp.float32) for s in shapes]

  def mm(h, w):
    if not rows or h.shape[0] == 1:
      return h @ w
    return jnp.concatenate([h[i:i + 1] @ w for i in range(h.shape[0])], axis=0)

  @jax.jit
  def loop(ws, x):
    def body(_, x):
      h, gate = x, []
      for w in ws[:-1]:
        if w.shape == (e, e):
          h = h + jnp.tanh(mm(h, w))
        elif w.shape == (e, f):
          gate.append(mm(h, w))
        else:
          h, gate = h + mm(jax.nn.gelu(gate[0]) * gate[1], w), []
      return x + mm(h, ws[-1])[:, :e] * 1e-6
    return jax.lax.fori_loop(0, 20, body, x)

  times = {k: _time(loop, ws, jnp.ones((k, e), jnp.float32), iters=20) for k in ks}
  return {k: (t, t / times[ks[0]]) for k, t in times.items()}


def main() -> int:
  print('| op over [rows, 8192] float32 | rows | µs per call |\n|---|---|---|')
  for rows in (1, 4):
    for name, t in vocab_ops(rows).items():
      print(f'| {name} | {rows} | {t * 1e6:.1f} |')
  print('\n| k (tokens per call) | ms per call | v(k) = t(k) / t(1) |\n|---|---|---|')
  for k, (t, ratio) in chain_ratios().items():
    print(f'| {k} | {t * 1e3:.2f} | {ratio:.2f} |')
  print('\n| v3 target decoder shapes: k | one k-row matmul: ms | v(k) | k one-row matmuls: ms '
        '| v(k) |\n|---|---|---|---|---|')
  dot, split = v3_decoder_ratios(), v3_decoder_ratios(rows=True)
  for k in dot:
    print(f'| {k} | {dot[k][0] * 1e3:.2f} | {dot[k][1]:.2f} | {split[k][0] * 1e3:.2f} '
          f'| {split[k][1]:.2f} |')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
