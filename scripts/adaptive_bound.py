r"""How much can any adaptive draft length gain over the best fixed γ? An oracle bound.

  python scripts/adaptive_bound.py --costs=out/benchmark_r5/results.json --num=20 \
      --output=out/adaptive_bound/bound.json

At temperature 0 a speculative round's outcome is deterministic: along the target's
greedy output y, position i is accepted exactly when the draft's argmax after the
prefix y_<i equals y_i (the draft only ever sees committed tokens, which are the
target's). So the rounds of any draft-length policy at batch 1 follow from those
agreement bits alone, and the script replays them:

* `fixed γ`: each round drafts γ, accepts the run of agreeing positions (at most γ) and
  emits one more token (the correction or the bonus), as `decoding.speculative_sample`;
* `heuristic`: `policies.next_budget`'s schedule (start at γ_max, +2 after a fully
  accepted round, −1 otherwise);
* `oracle`: a dynamic programme that knows every future agreement bit and picks each
  round's draft length in [1, γ_max] to minimise the sentence's total cost — no causal
  policy (confidence, Theorem 3.8 optimum, learned) can do better under the cost model.

Costs come from a benchmark run on the same machine (`results.json`'s `step_costs` at
batch 1: c, v(γ), the loop's own work per round a(γ) and per baseline step, both
encoders), in units of one target step; a sentence of N tokens costs
enc_target + enc_draft + Σ_rounds (g·c + v(g) + a(g)) speculatively and
enc_target + N·(1 + a_base) by the baseline (`benchmark.costs.predict`). `vs_best_fixed`
compares whole sentences (encoders included, as tokens/s does); `loop_vs_best_fixed`
the decoding loop alone.
The replayed round counts for fixed γ are checked against the benchmark's measured
`target_calls` on the same sentences when it has them (`rounds_check`).

At temperature 1 the outcome is random; the script reports the same oracle bound for
i.i.d. acceptance at the measured α (`iid_bound`), which is a guide only.

Writes one JSON file (temp file + rename) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from specdec_jax.util import atomic  # noqa: E402
from specdec_jax.train import data as data_lib  # noqa: E402
from specdec_jax.train import evaluation  # noqa: E402
from specdec_jax.train import run_files  # noqa: E402
from specdec_jax.text import vocabulary  # noqa: E402
from specdec_jax.text.vocabulary import EOS_ID  # noqa: E402

PAIR = pathlib.Path(__file__).resolve().parent.parent / 'specdec_jax/assets/demo_ende'


# ------------------------------------------------------------------ replay (pure NumPy)

def runs_of_agreement(bits: np.ndarray) -> np.ndarray:
  """`run[p]`: agreeing positions in a row from p on (bits: bool `[N]`), int `[N + 1]`."""
  run = np.zeros(len(bits) + 1, np.int64)
  for p in range(len(bits) - 1, -1, -1):
    run[p] = run[p + 1] + 1 if bits[p] else 0
  return run


def round_cost(g: int, units: dict) -> float:
  """Cost of a round that drafts g tokens: g·c + v(g) + a(g), target-step units."""
  return g * units['c'] + units['v'][g] + units['a_spec'][g]


def replay_fixed(bits: np.ndarray, gamma: int) -> list[int]:
  """Draft lengths of the rounds a fixed γ runs over one sentence's agreement bits."""
  run, n, p, rounds = runs_of_agreement(bits), len(bits), 0, []
  while p < n:
    rounds.append(gamma)
    p += min(run[p], gamma) + 1
  return rounds


def replay_heuristic(bits: np.ndarray, gamma_max: int) -> list[int]:
  """Draft lengths under `policies.next_budget`'s heuristic (start γ_max, +2 / −1)."""
  run, n, p, g, rounds = runs_of_agreement(bits), len(bits), 0, gamma_max, []
  while p < n:
    rounds.append(g)
    accepted = min(run[p], g)
    p += accepted + 1
    g = min(g + 2, gamma_max) if accepted >= g else max(g - 1, 1)
  return rounds


def replay_oracle(bits: np.ndarray, gamma_max: int, units: dict) -> list[int]:
  """The cost-minimising draft lengths knowing every agreement bit (dynamic programme)."""
  run, n = runs_of_agreement(bits), len(bits)
  best = np.zeros(n + 1)
  choice = np.zeros(n + 1, np.int64)
  for p in range(n - 1, -1, -1):
    options = [(round_cost(g, units) + best[min(p + min(run[p], g) + 1, n)], g)
               for g in range(1, gamma_max + 1)]
    best[p], choice[p] = min(options)
  rounds, p = [], 0
  while p < n:
    g = int(choice[p])
    rounds.append(g)
    p += min(run[p], g) + 1
  return rounds


def iid_bound(alpha: float, gamma_max: int, units: dict, horizon: int = 200) -> dict:
  """Tokens per unit time of each fixed γ and of the oracle under i.i.d. acceptance α."""
  k = np.arange(horizon)
  pk = alpha ** k * (1 - alpha)  # P(run of exactly k agreeing drafts)
  fixed = {}
  for g in range(1, gamma_max + 1):
    fixed[g] = float(np.sum(pk * (np.minimum(k, g) + 1)) / round_cost(g, units))
  oracle_tokens = np.sum(pk * (np.minimum(k, gamma_max) + 1))
  # The oracle drafts exactly the run (at least 1, at most γ_max): same tokens, less cost.
  oracle_cost = np.sum(pk * np.array([round_cost(int(min(max(x, 1), gamma_max)), units)
                                      for x in k]))
  oracle = float(oracle_tokens / oracle_cost)
  best = max(fixed, key=fixed.get)
  return dict(alpha=alpha, fixed_tokens_per_unit=fixed, best_fixed_gamma=best,
              oracle_tokens_per_unit=oracle, oracle_vs_best_fixed=oracle / fixed[best],
              encoders_excluded=True)


# ------------------------------------------------------------------ costs and models

def load_units(results_path: pathlib.Path, temperature: float, gamma_max: int) -> dict:
  """Batch-1 costs of a benchmark run in target-step units (c, v, a_spec, a_base, encoders)."""
  r = json.loads(results_path.read_text())
  sc = r['step_costs']['1']
  t1 = sc['target_step_s']['1']
  over = sc['overheads']['0' if temperature == 0 else '1']
  missing = [g for g in range(1, gamma_max + 1) if str(g) not in sc['v']]
  if missing:
    raise ValueError(f'--gamma_max={gamma_max}: {results_path} has no v(γ) for γ = {missing}; '
                     'use a benchmark run that measured every γ up to it.')
  return dict(c=sc['c'], v={g: sc['v'][str(g)] for g in range(1, gamma_max + 1)},
              a_spec={g: over['spec_round_s'][str(g)] / t1 for g in range(1, gamma_max + 1)},
              a_base=over['base_step_s'] / t1,
              enc_target={int(k): x['target_s'] / t1 for k, x in sc['encoder'].items()},
              enc_draft={int(k): x['draft_s'] / t1 for k, x in sc['encoder'].items()})


def measured_rounds(results_path: pathlib.Path, num: int, temperature: float, split: str,
                    max_decode_len: int) -> dict:
  """`{γ: target_calls}` of the benchmark's batch-1 fixed-γ rows, when that run decoded the
  same sentences (the first `num` of `split`) to the same length; else `{}`."""
  r = json.loads(results_path.read_text())
  datasets = r.get('settings', {}).get('datasets', [])
  if (len(datasets) != 1 or not str(datasets[0].get('path', '')).startswith(split)
      or r['settings'].get('max_decode_len') != max_decode_len):
    return {}
  return {s['gamma']: s['target_calls'] for s in r['settings_results']
          if s['batch_size'] == 1 and s['temperature'] == temperature
          and s['sentences'] == num}


def load_model(path: pathlib.Path):
  """(`t5.Transformer` with dropout off, float32 params) of an exported model dir."""
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
  config, params = run_files.load_run(path)  # float32, on the device
  return t5.Transformer(config.replace(dropout_rate=0.0)), params


def agreement_bits(target, tparams, draft, dparams, inputs, max_decode_len: int):
  """Per sentence: bool `[N]` (N tokens of the target's greedy output, EOS included),
  whether the draft's argmax after the target's prefix equals the target's token;
  and float `[N]` β = Σ_x min(p, q) at temperature 1 (`evaluation.agreement_per_position`)."""
  out: list = [None] * len(inputs)
  for idx, decodes in evaluation.decode_batches(target, tparams, inputs, batch_size=1,
                                                max_decode_len=max_decode_len,
                                                input_buckets=(32, 64)):
    i = idx[0]
    row = list(decodes[0])
    n = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
    tgt = np.zeros((1, max_decode_len), np.int32)
    tgt[0, :n] = row[:n]
    enc = data_lib.pad_batch([inputs[i]], 32 if len(inputs[i]) <= 32 else 64)
    agree, beta = evaluation.agreement_per_position(target, tparams, draft, dparams, enc, tgt)
    out[i] = (agree[0, :n], beta[0, :n])
  return out


# ------------------------------------------------------------------ main

def summarise(name, rounds_per_sentence, lengths, enc_target, enc_draft, units) -> dict:
  """Totals of one policy over the sentences: rounds, cost units, predicted speedup.

  `enc_target`, `enc_draft`: per sentence, the encoder costs (target-step units).
  """
  loop = sum(sum(round_cost(g, units) for g in r) for r in rounds_per_sentence)
  spec = loop + sum(enc_target) + sum(enc_draft)
  base = sum(e + n * (1.0 + units['a_base']) for e, n in zip(enc_target, lengths))
  n_rounds = sum(len(r) for r in rounds_per_sentence)
  drafted = sum(sum(r) for r in rounds_per_sentence)
  return dict(policy=name, rounds=n_rounds, mean_draft_length=drafted / max(n_rounds, 1),
              speculative_units=spec, loop_units=loop, baseline_units=base,
              predicted_speedup=base / spec)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--costs', required=True, help="a benchmark's results.json (batch-1 costs)")
  p.add_argument('--pair_dir', default=str(PAIR))
  p.add_argument('--split', default='ende/multi30k/test_2016_flickr')
  p.add_argument('--num', type=int, default=20)
  p.add_argument('--gamma_max', type=int, default=5)
  p.add_argument('--max_decode_len', type=int, default=64)
  p.add_argument('--output', default='out/adaptive_bound/bound.json')
  args = p.parse_args(argv)
  costs = pathlib.Path(args.costs)
  if not costs.is_file():
    p.error(f'--costs={args.costs}: no such file; pass a benchmark results.json.')
  if args.num < 1 or args.gamma_max < 1:
    p.error('--num and --gamma_max must be >= 1.')
  try:
    units = load_units(costs, 0.0, args.gamma_max)
  except (KeyError, ValueError) as e:
    p.error(f'--costs={args.costs}: {e}')

  pair = pathlib.Path(args.pair_dir)
  processor = vocabulary.load_processor(str(pair / 'vocab/ende8k.model'))
  src, _ = data_lib.read_parallel(args.split, limit=args.num)
  inputs = data_lib.encode_inputs(processor, src)
  target, tparams = load_model(pair / 'target')
  draft, dparams = load_model(pair / 'draft')
  per_sentence = agreement_bits(target, tparams, draft, dparams, inputs, args.max_decode_len)
  lengths = [len(b) for b, _ in per_sentence]
  bucket = [32 if len(x) <= 32 else 64 for x in inputs]
  enc = ([units['enc_target'][b] for b in bucket], [units['enc_draft'][b] for b in bucket])

  rows = []
  for g in range(1, args.gamma_max + 1):
    rows.append(summarise(f'fixed γ={g}', [replay_fixed(b, g) for b, _ in per_sentence],
                          lengths, *enc, units) | dict(gamma=g))
  best = max(rows, key=lambda r: r['predicted_speedup'])
  rows.append(summarise('heuristic', [replay_heuristic(b, args.gamma_max)
                                      for b, _ in per_sentence], lengths, *enc, units))
  rows.append(summarise('oracle', [replay_oracle(b, args.gamma_max, units)
                                   for b, _ in per_sentence], lengths, *enc, units))
  for r in rows:
    r['vs_best_fixed'] = r['predicted_speedup'] / best['predicted_speedup']
    r['loop_vs_best_fixed'] = best['loop_units'] / r['loop_units']  # encoders left out

  alpha_t0 = float(np.mean(np.concatenate([b for b, _ in per_sentence])))
  alpha_t1 = float(np.mean(np.concatenate([x for _, x in per_sentence])))
  units_t1 = load_units(costs, 1.0, args.gamma_max)
  measured = measured_rounds(costs, args.num, 0.0, args.split, args.max_decode_len)
  check = {r['gamma']: dict(replayed=r['rounds'], measured=measured[r['gamma']])
           for r in rows if r.get('gamma') in measured}
  result = dict(
      command=' '.join(['python', 'scripts/adaptive_bound.py'] + list(argv or sys.argv[1:])),
      costs_from=str(costs), sentences=args.num, tokens=int(sum(lengths)),
      gamma_max=args.gamma_max, units=units, t0_agreement=alpha_t0, t1_beta=alpha_t1,
      t0_replay=rows, rounds_check=check,
      iid_bound={'t0': iid_bound(alpha_t0, args.gamma_max, units),
                 't1': iid_bound(alpha_t1, args.gamma_max, units_t1)})
  out = pathlib.Path(args.output)
  out.parent.mkdir(parents=True, exist_ok=True)
  atomic.write_text(out, json.dumps(result, indent=2, default=float))

  print(f'{args.num} sentences, {sum(lengths)} tokens, agreement (α at T=0) {alpha_t0:.3f}, '
        f'mean β (α at T=1) {alpha_t1:.3f}')
  print(f'{"policy":<12} {"rounds":>6} {"draft len":>9} {"speedup":>8} {"vs best fixed":>13} '
        f'{"(loop only)":>11}')
  for r in rows:
    print(f'{r["policy"]:<12} {r["rounds"]:>6} {r["mean_draft_length"]:>9.2f} '
          f'{r["predicted_speedup"]:>8.3f} {r["vs_best_fixed"]:>13.3f} '
          f'{r["loop_vs_best_fixed"]:>11.3f}')
  print('rounds replayed vs measured (fixed γ, batch 1, T=0):', check or 'no matching run')
  if any(c['replayed'] != c['measured'] for c in check.values()):
    print('WARNING: the replay does not match the benchmark run; its bound is not reliable.')
  for t, b in result['iid_bound'].items():
    print(f'i.i.d. bound {t}: α {b["alpha"]:.3f}, oracle / best fixed (γ={b["best_fixed_gamma"]})'
          f' = {b["oracle_vs_best_fixed"]:.3f} (encoders excluded)')
  print(f'wrote {out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
