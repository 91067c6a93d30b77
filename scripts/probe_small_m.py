r"""Can the 2–5-row products of the verify call be written so that XLA:CPU reads each weight once?

    python scripts/probe_small_m.py [--output=out/probe_small_m.json] [--repeats=3]
        (repo root, alone; ~30 s)

docs/benchmarks/history.md, probe 6. The v3 target decoder's MLP chain (`bench_roofline._chain`: 6
gated-gelu blocks, 10.6M float32 weights, 42 MB) at M rows per call, with each [M, in] × [in,
out] product written three ways:
  - `x @ w`: XLA's dot (its GEMV at M = 1, YNNPACK's small-GEMM fusion at M > 1);
  - `row reduce`: weights stored transposed [out, in], product as
    `sum(wt[None] * x[:, None], -1)`, a fused multiply-reduce that streams each weight row
    once for all M rows (no packing of the weight matrix);
  - `row reduce, [out, M]`: the same with the M axis inside (`sum(wt[:, None] * x[None], -1).T`).
`x @ w` is timed at M = 1 (the baseline step's form) and 4; the reduce forms at M = 3, 4, 5.
The rounds interleave the forms so that the host's drift falls on all of them. Each time is
the median of 9 runs (compilation excluded), per chain; v(M) is against `x @ w` at M = 1 of
the same round. After the rounds, `row reduce` at M = 1 and 2 once (median of 3 runs:
XLA compiles the reduce into a much slower loop there, so the model could not use it for the
one-token step).
Writes JSON (`--output`) and prints one line per round. Heavy: nothing else on the cores.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.util import atomic  # noqa: E402
from specdec_jax.benchmark import runner  # noqa: E402

import bench_kernels  # noqa: E402  (scripts/, this script's folder: the shared timer)
import bench_roofline as br  # noqa: E402

FORMS = {  # name: (product, weights transposed?, rows timed)
    'x @ w': (lambda x, w: x @ w, False, (1, 4)),
    'row reduce': (lambda x, wt: jnp.sum(wt[None, :, :] * x[:, None, :], -1), True, (3, 4, 5)),
    'row reduce, [out, M]': (lambda x, wt: jnp.sum(wt[:, None, :] * x[None, :, :], -1).T, True,
                             (3, 4, 5)),
}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output', default='out/probe_small_m.json', help='JSON results file')
  parser.add_argument('--repeats', type=int, default=3, help='interleaved rounds (>= 1)')
  args = parser.parse_args(argv)
  if args.repeats < 1:
    parser.error(f'--repeats must be >= 1, got {args.repeats}')
  rng = np.random.default_rng(0)
  layers = [[rng.standard_normal(s).astype(np.float32) * 0.05
             for s in ((br.EMBED, br.MLP), (br.EMBED, br.MLP), (br.MLP, br.EMBED))]
            for _ in range(br.LAYERS)]
  weights = {False: [[jnp.asarray(w) for w in layer] for layer in layers],
             True: [[jnp.asarray(np.ascontiguousarray(w.T)) for w in layer] for layer in layers]}
  x = jnp.asarray(rng.standard_normal((4, br.EMBED)).astype(np.float32))
  for name, (product, transposed, _) in FORMS.items():  # each form computes x @ w
    got = product(x, weights[transposed][0][0])
    np.testing.assert_allclose(np.asarray(got), np.asarray(x @ weights[False][0][0]),
                               rtol=1e-4, atol=1e-4, err_msg=name)
  chains = {name: br._chain(product) for name, (product, _, _) in FORMS.items()}  # pylint: disable=protected-access
  rounds = []
  for r in range(args.repeats):
    ms = {}
    for name, (_, transposed, rows) in FORMS.items():
      for m in rows:
        h = jnp.full((m, br.EMBED), 0.01, jnp.float32)
        ms[f'{name} M={m}'] = bench_kernels.median_seconds(
            chains[name], weights[transposed], h, reps=9) / br.ITERS * 1e3
    base = ms['x @ w M=1']
    rounds.append({'ms': ms, 'v': {k: t / base for k, t in ms.items()}})
    print(f'round {r}: ' + ' | '.join(f'{k} {t:.3f} ms (v {t / base:.2f})'
                                        for k, t in ms.items()), flush=True)
  small = {}
  for m in (1, 2):
    h = jnp.full((m, br.EMBED), 0.01, jnp.float32)
    small[f'row reduce M={m}'] = bench_kernels.median_seconds(
        chains['row reduce'], weights[True], h, reps=3) / br.ITERS * 1e3
  print('once: ' + ' | '.join(f'{k} {t:.3f} ms' for k, t in small.items()), flush=True)
  result = {'cpu': runner.cpu_info(), 'rounds': rounds, 'row_reduce_small_m_ms': small,
            'median_v': {k: float(np.median([rd['v'][k] for rd in rounds]))
                         for k in rounds[0]['v']}}
  atomic.write_text(args.output, json.dumps(result, indent=1))
  print('median v: ' + ', '.join(f'{k} {v:.2f}' for k, v in result['median_v'].items()))
  print(f'wrote {args.output}')
  return result


if __name__ == '__main__':
  main()
