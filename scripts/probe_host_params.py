r"""Numpy vs device-resident params: what a decode call pays to copy its params.

    python scripts/probe_host_params.py [--sentences 20] [--gamma 4] [--rounds 2]
        [--output out/probe_host_params.json]       (repo root, alone; about 1 minute)

A jitted call moves every numpy argument to the device on every call: on the CPU it
aliases an array whose data is 64-byte aligned and copies any other. The arrays
`checkpoints.load_t5x_checkpoint` returns are mostly not aligned (tensorstore reads and
the float32 cast: 107 and 109 of the demo target's 126 arrays in two loads here; the
JSON records this run's count), and the benchmark and the
decode job passed them so, copying the demo pair's params (float32: 134 MB target,
12 MB draft) on every decode call until 2026-12-06. This decodes the first N
Multi30K test_2016 sentences at batch 1, greedily, with the baseline
(`generate.t5_generate`) and speculative decoding (`generate.t5_speculative_generate`, γ)
four ways in one process, interleaved over `--rounds` rounds: params as the loader's
numpy arrays or as `jax.device_put` arrays, for each method. Reports the median over 3 passes of the ms
per sentence and the speedups, prints them and writes a JSON file (atomically).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax import checkpoints, decode, generate  # noqa: E402
from specdec_jax.util import atomic
from specdec_jax.benchmark import job as benchmark
from specdec_jax.text import inputs as inputs_lib  # noqa: E402


def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--sentences', type=int, default=20)
  ap.add_argument('--gamma', type=int, default=4)
  ap.add_argument('--rounds', type=int, default=2)
  ap.add_argument('--output', default='out/probe_host_params.json')
  a = ap.parse_args(argv)
  pair, vocab, m = benchmark.load_pair(decode.DEMO_PAIR, None, None, None, None, None, 100,
                                       'float32')  # device arrays (load_pair puts them there)
  host = {role: checkpoints.load_t5x_checkpoint(getattr(pair, f'{role}_checkpoint'),
                                                getattr(pair, f'{role}_config'), dtype='float32')
          for role in ('target', 'draft')}  # numpy, as loaded (not views of device buffers,
                                            # which are aligned and would be aliased)
  unaligned = sum(x.ctypes.data % 64 != 0 for x in jax.tree.leaves(host['target']))
  dev = {'target': m.target_params, 'draft': m.draft_params}
  records = benchmark.read_sentences(benchmark.DEFAULT_DATASETS[0][1], a.sentences)
  examples = inputs_lib.tokenize(records, vocab, prefix=decode.TRANSLATE_PREFIX,
                                 max_input_len=64)
  batches = [jnp.asarray(b.tokens) for b in inputs_lib.batches(examples, 1, 64, (32, 64))]
  key = jax.random.PRNGKey(0)

  def base(p, x):
    return generate.t5_generate(m.target_model, p['target'], x, 64, temperature=0.0,
                                decode_rng=key)

  def spec(p, x):
    return generate.t5_speculative_generate(
        m.target_model, p['target'], m.draft_model, p['draft'], x, 64, a.gamma,
        temperature=0.0, decode_rng=key, real_vocab_size=vocab.vocab_size)

  def ms_per_sentence(fn, params):
    for x in batches:  # compile every shape, untimed
      jax.block_until_ready(fn(params, x))
    passes = []
    for _ in range(3):
      t0 = time.perf_counter()
      for x in batches:
        jax.block_until_ready(fn(params, x))
      passes.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(passes) / len(batches)

  rounds = []
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)  # the numpy-params warning, expected here
    for r in range(a.rounds):
      row = {f'{name} {kind}': ms_per_sentence(fn, params)
             for kind, params in (('numpy', host), ('device', dev))
             for name, fn in (('baseline', base), ('speculative', spec))}
      row['speedup numpy'] = row['baseline numpy'] / row['speculative numpy']
      row['speedup device'] = row['baseline device'] / row['speculative device']
      rounds.append(row)
      print(f'round {r}: ' + ', '.join(f'{k} {v:.2f}' for k, v in row.items()))
  res = dict(command='python scripts/probe_host_params.py ' + ' '.join(argv or sys.argv[1:]),
             settings=vars(a), sentences=len(batches), ms_per_sentence_rounds=rounds,
             target_arrays_not_64_byte_aligned=f'{unaligned} of '
                                               f'{len(jax.tree.leaves(host["target"]))}',
             machine=benchmark.machine())
  atomic.write_text(a.output, json.dumps(res, indent=1))
  print(f'wrote {a.output}')
  return res


if __name__ == '__main__':
  main()
