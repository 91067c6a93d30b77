"""One benchmark table row: measured speed against the per-phase cost model.

`row` turns a baseline and a speculative `Runner` of one setting into the row of
results.json (speedup, α, c, v, the cost model's prediction and efficiency, the
paper's Theorem 3.8 beside it); `mark_best` adds the measured and predicted best γ;
`policy_for` builds the `DraftPolicy` of an adaptive-policy row from the run's costs.
"""

from __future__ import annotations

import numpy as np

from specdec_jax.benchmark import costs as costs_lib
from specdec_jax.benchmark.costs import predicted_speedup
from specdec_jax.benchmark.runner import Runner, ratio, stats


def policy_for(name: str, costs: dict, temperature: float, gamma_max: int, threshold: float):
  """The DraftPolicy of a benchmark row; 'optimal' gets this run's measured costs."""
  from specdec_jax.decoding import policies as policies_lib  # pylint: disable=g-import-not-at-top
  if name == 'confidence':
    return policies_lib.DraftPolicy('confidence', threshold=threshold)
  if name == 'optimal':
    t1 = costs['target_step_s']['1']
    over = costs['overheads'][f'{float(temperature):g}']['spec_round_s']
    known = sorted((int(g), x) for g, x in costs['v'].items())
    v = tuple(float(x) for x in np.interp(np.arange(1, gamma_max + 1), [g for g, _ in known],
                                          [x for _, x in known]))  # v(γ) for γ = 1 … γ_max
    a = float(np.mean([x / t1 for x in over.values()]))
    return policies_lib.DraftPolicy('optimal', c=costs['c'], v=v, a=a)
  return policies_lib.DraftPolicy(name)


def units_for(costs: dict, batches, temperature: float, gamma: int) -> dict:
  """The cost model's inputs for one row, in units of one target step."""
  t1 = costs['target_step_s']['1']
  over = costs['overheads'][f'{float(temperature):g}']
  enc = [costs['encoder'][str(b.tokens.shape[1])] for b in batches]
  return dict(c=costs['c'], v=costs['v'][str(gamma)],
              enc_target=[e['target_s'] / t1 for e in enc],
              enc_draft=[e['draft_s'] / t1 for e in enc],
              a_spec=over['spec_round_s'][str(gamma)] / t1, a_base=over['base_step_s'] / t1)


def _predicted_speedup(base: Runner, spec: Runner, units: dict, gamma: int, alpha,
                       rounds=None) -> tuple[float, dict]:
  """Predicted tokens/s ratio from the cost model (each method with its own lengths)."""
  pb = costs_lib.predict(base.row_tokens, gamma=gamma, alpha=alpha, units=units)
  ps = costs_lib.predict(spec.row_tokens, gamma=gamma, alpha=alpha, units=units,
                         rounds_per_batch=rounds)
  speedup = ((spec.num_tokens / ps['speculative_units']) /
             (base.num_tokens / pb['baseline_units']))
  return speedup, dict(base=pb, spec=ps)


# The cost model's fields of a row: they hold for a fixed γ only.
PREDICTION_KEYS = (
    'c', 'v', 'a_spec', 'predicted_speedup', 'efficiency', 'predicted_speedup_rounds',
    'efficiency_rounds', 'predicted_speedup_thm38', 'predicted_speedup_v', 'efficiency_thm38',
    'efficiency_v', 'rounds_predicted', 'baseline_units_predicted_per_sentence',
    'speculative_units_predicted_per_sentence', 'predicted_phases_per_sentence')


def without_predictions(r: dict) -> dict:
  """`r` with every cost-model field set to NaN (an adaptive policy's row: its draft
  length varies per round, and the model is for a fixed γ)."""
  return dict(r, **{k: float('nan') for k in PREDICTION_KEYS})


def row(dname, bs, temp, base: Runner, spec: Runner, costs: dict) -> dict:
  """One results row: baseline vs speculative `spec` (fixed γ) of one setting, measured
  (times, tokens/s, speedup as the tokens/s ratio, α, statistics) and predicted (the cost
  model of `benchmark/costs.py` with this run's `costs`, Theorem 3.8), with the efficiencies."""
  st = spec.stats
  alpha = ratio(sum(st['alpha_sum']), sum(st['alpha_count']))
  g = spec.gamma
  c, v = costs['c'], costs['v'][str(g)]
  bt, stt = stats(base.times), stats(spec.times)
  # Tokens per second, not time: at T > 0 the two methods sample outputs of different
  # lengths. At T = 0 the tokens are identical and this is bt / st.
  tokens_ratio = spec.num_tokens / base.num_tokens
  speedup = tokens_ratio * bt['median'] / stt['median']
  pred_thm, pred_v = predicted_speedup(alpha, g, c), predicted_speedup(alpha, g, c, v)
  units = units_for(costs, base.batches, temp, g)
  pred, parts = _predicted_speedup(base, spec, units, g, alpha)
  pred_rounds, _ = _predicted_speedup(base, spec, units, g, alpha, rounds=spec.rounds)
  t1 = costs['target_step_s']['1']
  n = len(base.outputs)
  identical = None
  if float(temp) == 0.0:
    identical = (len(base.outputs) == len(spec.outputs) and
                 all(np.array_equal(a, b) for a, b in zip(base.outputs, spec.outputs)))
  return dict(
      dataset=dname, batch_size=bs, temperature=float(temp), gamma=g, sentences=n,
      baseline_time_s=bt, speculative_time_s=stt,
      baseline_first_call_s=base.first_call_s, speculative_first_call_s=spec.first_call_s,
      baseline_compile_s=max(0.0, base.first_call_s - bt['median'] / len(base.batches)),
      speculative_compile_s=max(0.0, spec.first_call_s - stt['median'] / len(spec.batches)),
      baseline_tokens=base.num_tokens, speculative_tokens=spec.num_tokens,
      baseline_tokens_per_s=base.num_tokens / bt['median'],
      speculative_tokens_per_s=spec.num_tokens / stt['median'],
      speedup=speedup,
      speedup_min=tokens_ratio * bt['min'] / stt['max'],
      speedup_max=tokens_ratio * bt['max'] / stt['min'],
      acceptance_rate=ratio(sum(st['accepted']), sum(st['drafted'])),
      alpha=alpha,
      tokens_per_target_call=ratio(sum(st['tokens']), sum(st['target_calls'])),
      target_calls=int(sum(st['target_calls'])),
      mean_draft_length=ratio(sum(st['drafted']), sum(st['target_calls'])),
      c=c, v=v, a_spec=units['a_spec'], a_base=units['a_base'],
      predicted_speedup=pred, efficiency=speedup / pred if pred else float('nan'),
      predicted_speedup_rounds=pred_rounds,
      efficiency_rounds=speedup / pred_rounds if pred_rounds else float('nan'),
      predicted_speedup_thm38=pred_thm, predicted_speedup_v=pred_v,
      efficiency_thm38=speedup / pred_thm if pred_thm else float('nan'),
      efficiency_v=speedup / pred_v if pred_v else float('nan'),
      rounds_measured=int(sum(spec.rounds)), rounds_predicted=parts['spec']['rounds'],
      baseline_units_per_sentence=bt['median'] / t1 / n,
      speculative_units_per_sentence=stt['median'] / t1 / n,
      baseline_units_predicted_per_sentence=parts['base']['baseline_units'] / n,
      speculative_units_predicted_per_sentence=parts['spec']['speculative_units'] / n,
      predicted_phases_per_sentence={k: x / n for k, x in parts['spec']['phases'].items()},
      identical=identical)


def drafter_row(dname, bs, temp, base: Runner, spec: Runner, costs: dict) -> dict:
  """A row of another drafter than the model (or of a lenient rule), same run as `row`.

  Model-free drafters cost no model call (c = 0, no draft encoder), and the lookup drafts
  a varying number of tokens per round (none without a match) and verifies only the
  widest row's: its prediction uses the rounds the loop really ran and v at the measured
  mean draft length (interpolated between the measured v(γ), v(0) = 1), so
  `predicted_speedup_rounds` / `efficiency_rounds` are this row's cost model.
  """
  from specdec_jax.generate import common as generate_common  # pylint: disable=g-import-not-at-top
  name = generate_common.drafter_name(generate_common.resolve_drafter(spec.drafter))
  model_free = name in ('lookup', 'bigram', 'unigram')
  if model_free:
    costs = dict(costs, c=0.0, encoder={n: dict(e, draft_s=0.0)
                                        for n, e in costs['encoder'].items()})
  r = row(dname, bs, temp, base, spec, costs)
  if name in ('lookup', 'lookup+model'):
    known = sorted([(0, 1.0)] + [(int(g), x) for g, x in costs['v'].items()])
    v_mean = float(np.interp(r['mean_draft_length'], [g for g, _ in known],
                             [x for _, x in known]))
    units = dict(units_for(costs, base.batches, temp, spec.gamma), v=v_mean)
    if name == 'lookup+model':  # the model drafts only in rounds without a match
      units['c'] = costs['c'] * r['mean_draft_length'] / spec.gamma
    pred, _ = _predicted_speedup(base, spec, units, spec.gamma, r['alpha'],
                                 rounds=spec.rounds)
    # The α-based predictions assume γ drafts every round: not this drafter's.
    r.update({k: float('nan') for k in ('predicted_speedup', 'efficiency',
                                        'predicted_speedup_thm38', 'predicted_speedup_v',
                                        'efficiency_thm38', 'efficiency_v')})
    r.update(v=v_mean, predicted_speedup_rounds=pred,
             efficiency_rounds=r['speedup'] / pred if pred else float('nan'))
  r.update(drafter=name, lenience=spec.lenience, exact=spec.lenience == 1.0,
           verification=spec.verification)
  return r


def mark_best(rows, base: Runner, specs, costs) -> None:
  """Measured best γ, and the γ the cost model predicts as best with the setting's α."""
  alpha = ratio(sum(sum(r.stats['alpha_sum']) for r in specs),
                sum(sum(r.stats['alpha_count']) for r in specs))
  predicted = {}
  for spec in specs:
    units = units_for(costs, base.batches, rows[0]['temperature'], spec.gamma)
    p = costs_lib.predict(base.row_tokens, gamma=spec.gamma, alpha=alpha, units=units)
    predicted[spec.gamma] = p['baseline_units'] / p['speculative_units']
  best = max(rows, key=lambda x: x['speedup'])['gamma']
  pbest = costs_lib.best_gamma(predicted)
  for row in rows:
    row['best_gamma'] = best
    row['predicted_best_gamma'] = pbest
    row['setting_alpha'] = alpha
    row['predicted_speedup_pooled_alpha'] = predicted[row['gamma']]
