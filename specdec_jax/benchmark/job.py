"""Wall-clock benchmark: baseline T5X-style decoding vs. speculative decoding.

    python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin \
        [--gin.benchmark.quick=True] [--gin.benchmark.num_sentences=20] ...

For every (dataset, temperature, batch size) the job times `generate.t5_generate`
(the baseline) and `generate.t5_speculative_generate` for every γ in the sweep, in
the same process, on the same tokenized inputs (each batch padded to the smallest of
`input_length_buckets` or `max_input_len` that holds it; every shape is compiled
before timing):

* compilation is excluded: every program gets one warm-up call first (its time is
  reported separately as `first_call_s`, and `compile_s ≈ first_call_s − median / batches`,
  the first call being one batch);
* every timed call ends with `jax.block_until_ready`; `repeats` passes over all
  inputs are made, round-robin over the methods (so load drift hits all of them);
  times are the median of the passes, with min and max;
* speedup = speculative tokens/s / baseline tokens/s (medians): at temperature 0 both
  emit the same tokens, so it is baseline time / speculative time; at temperature > 0
  the sampled outputs differ in length, and throughput is what is compared;
* acceptance rate = Σaccepted / Σdrafted, the paper's α = Σalpha_sum / Σalpha_count,
  tokens per target call = Σtokens / Σtarget_calls (real rows only);
* the cost of every phase is measured in the same run (`benchmark/costs.py`): c, v(γ),
  both encoders per input length, and the loops' own work per round / step; the
  cost model predicts each row's speedup from them and the row's α, and
  efficiency = measured speedup / predicted speedup. The paper's Theorem 3.8
  ((1 − α^(γ+1)) / ((1 − α)(γc + 1))) is reported beside it;
* per setting, the γ the cost model predicts as best (pooled α of the setting) is
  printed next to the measured best.

At temperature 0 the two methods must produce the same tokens; the job records
the comparison (`identical_at_t0`) per setting and overall.

The peer (`hf_peer=True`, `benchmark/hf_peer.py`): Hugging Face `generate` without and
with `assistant_model=draft` on the exported pair (batch 1, greedy).

Outputs in `output_dir` (written atomically): results.json, results.md,
speedup_vs_gamma.png, tokens_per_second.png.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import shlex
import sys
import time
from typing import Optional, Sequence

import jax

from specdec_jax.util import atomic
from specdec_jax.util import gin_config
from specdec_jax import decode as decode_lib
from specdec_jax.util import flags
from specdec_jax.text import inputs as inputs_lib
from specdec_jax.util import jsonio
from specdec_jax.generate import compile_cache
from specdec_jax.benchmark import costs as costs_lib
from specdec_jax.benchmark import hf_peer as hf_peer_lib
from specdec_jax.benchmark import report
from specdec_jax.benchmark import startup as startup_lib
from specdec_jax.benchmark import rows as rows_lib
from specdec_jax.benchmark import runner as runner_lib
from specdec_jax.benchmark.costs import predicted_speedup  # noqa: F401  (re-exported)
from specdec_jax.benchmark.runner import (Models, Runner, config_dict,  # noqa: F401
                                      load_pair, machine, ratio, read_sentences, stats)

DEFAULT_DATASETS = (
    ('multi30k_test2016', 'ende/multi30k/test_2016_flickr.en.gz'),
    ('wmt_news_test', 'ende/wmt/news_test.en'),
)

QUICK = dict(num_sentences=4, gammas=(2, 4), batch_sizes=(1,), temperatures=(0.0,),
             repeats=1, hf_peer=False, step_timing_iters=10)


class BenchmarkConfigError(ValueError):
  """A `benchmark.<argument>` setting out of range (raised before any work)."""


def _positive_ints(name: str, values, allow_empty: bool = False) -> None:
  values = tuple(values) if isinstance(values, (list, tuple)) else None
  if values is None or (not values and not allow_empty) or any(
      isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in values):
    raise BenchmarkConfigError(
        f'benchmark.{name} must be a tuple of ints >= 1, e.g. '
        f'--gin.benchmark.{name}="(1, 2)"; got {values if values is not None else "a non-tuple"}.')


def check_settings(*, num_sentences, gammas, temperatures, batch_sizes, repeats,
                   step_timing_iters, max_input_len, input_length_buckets,
                   max_decode_len) -> None:
  """Raises BenchmarkConfigError naming the first bad `benchmark.<argument>`."""
  for name, value in (('num_sentences', num_sentences), ('repeats', repeats),
                      ('step_timing_iters', step_timing_iters),
                      ('max_input_len', max_input_len), ('max_decode_len', max_decode_len)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise BenchmarkConfigError(f'benchmark.{name} must be an int >= 1, got {value!r}.')
  if max_input_len < 2:
    raise BenchmarkConfigError(f'benchmark.max_input_len must be >= 2 (a token and EOS), '
                               f'got {max_input_len}.')
  _positive_ints('gammas', gammas)
  _positive_ints('batch_sizes', batch_sizes)
  _positive_ints('input_length_buckets', input_length_buckets, allow_empty=True)
  temps = tuple(temperatures) if isinstance(temperatures, (list, tuple)) else None
  if not temps or any(isinstance(t, bool) or not isinstance(t, (int, float)) or
                      not 0 <= t < float('inf') for t in temps):
    raise BenchmarkConfigError(
        'benchmark.temperatures must be a tuple of finite numbers >= 0 (0 = greedy), e.g. '
        f'--gin.benchmark.temperatures="(0.0, 1.0)"; got {temperatures!r}.')


def measure_costs(models, batches, *, max_decode_len, gammas, temperatures, iters,
                  vocab_size, eos_id, baseline_sampler='gumbel', bidirectional=False) -> dict:
  """Every phase's cost for one batch size (see `benchmark/costs.py`), in seconds
  (a decoder-only pair's 'encoder' cost is its prompt prefill)."""
  first = batches[0].tokens
  out = costs_lib.step_costs(models, first, max_decode_len, gammas, iters, bidirectional)
  shapes = {}
  for b in batches:
    shapes.setdefault(b.tokens.shape[1], b.tokens)
  out['encoder'] = {str(n): costs_lib.encoder_costs(models, tok, max_decode_len, gammas, iters,
                                                    bidirectional)
                    for n, tok in sorted(shapes.items())}
  out['overheads'] = {f'{float(t):g}': costs_lib.loop_overheads(
      first.shape[0], vocab_size, max_decode_len, gammas, float(t), iters, eos_id,
      baseline_sampler)
                      for t in temperatures}
  return out


def benchmark(output_dir: str = 'out/benchmark',
              pair_dir: Optional[str] = 'demo_ende',
              target_config=None, draft_config=None,
              target_checkpoint: Optional[str] = None,
              draft_checkpoint: Optional[str] = None,
              vocab_path: Optional[str] = None,
              extra_ids: int = 100,
              checkpoint_dtype: Optional[str] = None,
              datasets=DEFAULT_DATASETS,
              num_sentences: int = 20,
              prefix: str = decode_lib.TRANSLATE_PREFIX,
              max_input_len: int = 64,
              input_length_buckets: Sequence[int] = (32, 64),
              max_decode_len: int = 64,
              gammas: Sequence[int] = (1, 2, 3, 4, 5, 7),
              temperatures: Sequence[float] = (0.0, 1.0),
              batch_sizes: Sequence[int] = (1, 8),
              repeats: int = 3,
              seed: int = 0,
              step_timing_iters: int = 15,
              hf_peer: bool = True,
              hf_threads: Optional[int] = None,
              hf_num_assistant_tokens: Optional[int] = None,
              policies: Sequence[str] = (),
              confidence_threshold: float = 0.5,
              mesh_shape=None,
              draft_sharding: str = 'replicated',
              baseline_sampler: str = 'inverse_cdf',
              verifications: Sequence[str] = ('token',),
              topk: int = 0,
              topp: float = 0.0,
              drafters: Sequence[str] = ('model',),
              lookup_max_ngram: int = 4,
              lookup_min_ngram: int = 1,
              leniences: Sequence[float] = (1.0,),
              startup: Optional[bool] = None,
              compilation_cache=None,
              quick: bool = False) -> dict:
  """Runs the benchmark (see the module docstring); returns the results dict.

  `quick=True` overrides num_sentences=4, gammas=(2, 4), batch_sizes=(1,),
  temperatures=(0.0,), repeats=1, no HF peer, step_timing_iters=10 (the bound values
  are still checked).

  `verifications` adds, for 'block', one row per γ at every temperature > 0 with block
  verification (Sun et al., ICLR 2025) beside the token-wise rows, timed in the same
  round-robin (`verification_results`; at temperature 0 both rules give the same tokens,
  so no block rows are run there). `topk` / `topp` standardize both methods' sampling
  (the cost model's per-phase costs are measured without them).

  `drafters` (`generate.common.resolve_drafter`'s names: 'model', 'lookup', 'lookup+model',
  'bigram', 'unigram') times every γ with each drafter in the same round-robin; the
  model's rows are the main table, the others `drafter_results` (α, tokens per target
  call, speed, identical at T = 0, the cost model with c = 0 for model-free drafters).
  Table drafters read `<pair folder>/<name>.npz`. Without 'model' and 'lookup+model' no
  draft model is loaded (a target-only pair works; no start-up or HF peer then).
  `leniences` adds, at every temperature > 0, rows of the first drafter with each
  lenience l < 1 (paper Appendix A.5, Table 5): NOT exact, and marked so.

  `startup` measures start-up with JAX's persistent compilation cache cold and warm
  (`benchmark/startup.py`: two child processes on a fresh cache folder, batch 1, T = 0,
  γ = max(gammas); never on a mesh); None: on, except in quick mode. `compilation_cache` is the folder (or 'off') the
  CLI's `--compilation_cache_dir` / `--no_compilation_cache` gave, recorded in the
  results (`main` turns the cache on; the timed runs compile before timing either way).

  `policies` adds, per setting, one row per adaptive draft-length policy
  ('heuristic', 'confidence' with `confidence_threshold`, 'optimal' with the costs
  c, v(γ), a measured in this run) at γ_max = max(gammas); their rows carry
  `policy` and the mean draft length per round, and no cost-model prediction.

  `mesh_shape` `(data, model)` runs every decode (and the cost measurement) on that
  device mesh (`specdec_jax.sharding`, `draft_sharding` as the decode job's); the HF
  peer is then skipped. On CPU with simulated devices this is a functional check,
  not a speed claim.

  `baseline_sampler` is the baseline's `sampler` at temperature > 0
  (`decoding.temperature_sample`): 'inverse_cdf' by default, the sampler that
  `speculative_sample` uses, so both methods pay the same per-token sampling cost;
  'gumbel' times the baseline with T5X's own `jax.random.categorical`.

  Raises:
    BenchmarkConfigError: before loading anything, for a setting out of range (it
      names the `benchmark.<argument>` binding and the fix).
  """
  check_settings(num_sentences=num_sentences, gammas=gammas, temperatures=temperatures,
                 batch_sizes=batch_sizes, repeats=repeats,
                 step_timing_iters=step_timing_iters, max_input_len=max_input_len,
                 input_length_buckets=input_length_buckets, max_decode_len=max_decode_len)
  from specdec_jax.decoding import policies as policies_lib  # pylint: disable=g-import-not-at-top
  if not isinstance(policies, (list, tuple)) or any(
      p not in policies_lib.POLICIES[1:] for p in policies):
    raise BenchmarkConfigError(
        f'benchmark.policies must be a tuple of {policies_lib.POLICIES[1:]}, e.g. '
        f'--gin.benchmark.policies="(\'heuristic\',)"; got {policies!r}.')
  from specdec_jax.decoding import sampling  # pylint: disable=g-import-not-at-top
  if baseline_sampler not in sampling.SAMPLERS:
    raise BenchmarkConfigError(
        "benchmark.baseline_sampler must be 'inverse_cdf' (the speculative loop's sampler) "
        f"or 'gumbel' (T5X's jax.random.categorical); got {baseline_sampler!r}.")
  if not 0.0 <= confidence_threshold <= 1.0:
    raise BenchmarkConfigError(f'benchmark.confidence_threshold must be in [0, 1], got '
                               f'{confidence_threshold!r}.')
  from specdec_jax.decoding import accept  # pylint: disable=g-import-not-at-top
  if (not isinstance(verifications, (list, tuple)) or 'token' not in verifications
      or any(v not in accept.VERIFICATIONS for v in verifications)):
    raise BenchmarkConfigError(
        "benchmark.verifications must be a tuple holding 'token' and optionally 'block', e.g. "
        f"--gin.benchmark.verifications=\"('token', 'block')\"; got {verifications!r}.")
  try:
    sampling.validate_sampling_args(1.0, topk, topp)
  except ValueError as e:
    raise BenchmarkConfigError(f'benchmark.topk / topp: {e}') from e
  try:
    sampling.check_seed('benchmark.seed', seed)
  except ValueError as e:
    raise BenchmarkConfigError(str(e)) from e
  from specdec_jax.decoding import drafters as drafters_lib  # pylint: disable=g-import-not-at-top
  if (not isinstance(drafters, (list, tuple)) or not drafters
      or any(d not in drafters_lib.DRAFTERS for d in drafters)):
    raise BenchmarkConfigError(
        f'benchmark.drafters must be a non-empty tuple of {drafters_lib.DRAFTERS}, e.g. '
        f'--gin.benchmark.drafters="(\'model\', \'lookup\')"; got {drafters!r}.')
  try:
    drafters_lib.LookupDrafter(lookup_max_ngram, lookup_min_ngram)
    if not isinstance(leniences, (list, tuple)) or not leniences:
      raise ValueError(f'leniences must be a non-empty tuple, got {leniences!r}')
    for lenience in leniences:
      accept.check_lenience(lenience)
  except ValueError as e:
    raise BenchmarkConfigError(f'benchmark.{e}') from e
  drafters = tuple(drafters)
  from specdec_jax.generate import common as generate_common  # pylint: disable=g-import-not-at-top
  need_draft = 'model' in drafters or 'lookup+model' in drafters
  settings = dict(num_sentences=num_sentences, gammas=tuple(gammas),
                  batch_sizes=tuple(batch_sizes), temperatures=tuple(temperatures),
                  repeats=repeats, hf_peer=hf_peer, step_timing_iters=step_timing_iters,
                  startup=(not quick) if startup is None else bool(startup))
  if quick:
    settings.update(QUICK)
  from specdec_jax import sharding  # pylint: disable=g-import-not-at-top
  try:
    plan = sharding.plan_from(mesh_shape, draft_sharding=draft_sharding)
  except ValueError as e:
    raise BenchmarkConfigError(f'benchmark.mesh_shape / draft_sharding: {e}') from e
  if plan is not None or not need_draft:
    settings['hf_peer'] = False
    settings['startup'] = False
  s = settings
  out_dir = pathlib.Path(output_dir)
  for name in ('results.json', 'results.md'):  # before anything is loaded or timed
    try:
      atomic.destination(out_dir / name, 'the benchmark.output_dir file')
      atomic.check_writable(out_dir / name, 'the benchmark.output_dir file')
    except ValueError as e:
      raise BenchmarkConfigError(str(e)) from e
  if out_dir.exists() and not out_dir.is_dir():
    raise BenchmarkConfigError(f'benchmark.output_dir {str(out_dir)!r} is a file; name a '
                               'folder.')
  # The datasets are read before the models are loaded: a bad path fails in a second.
  if (isinstance(datasets, (str, bytes)) or not isinstance(datasets, (list, tuple))
      or not datasets or any(not isinstance(d, (list, tuple)) or len(d) != 2
                             or not all(isinstance(x, str) for x in d) for d in datasets)):
    raise BenchmarkConfigError(
        'benchmark.datasets must be a non-empty tuple of (name, path) pairs, e.g. '
        "--gin.benchmark.datasets=\"(('news', 'ende/wmt/newstest2014.en'),)\"; got "
        f'{datasets!r}.')
  records_of = [(name, path, read_sentences(path, s['num_sentences']))
                for name, path in datasets]
  out_dir.mkdir(parents=True, exist_ok=True)
  t_start = time.perf_counter()
  try:
    pair, vocab, models = load_pair(pair_dir, target_config, draft_config, target_checkpoint,
                                    draft_checkpoint, vocab_path, extra_ids, checkpoint_dtype,
                                    plan, need_draft=need_draft, topk=topk)
  except runner_lib.TopkTooLarge as e:
    raise BenchmarkConfigError(f'benchmark.topk: {e}') from e
  eos = vocab.eos_id
  decoder_only = not hasattr(models.target_model, 'encode')
  bidirectional = bool(pair.inputs_bidirectional_attention)
  if decoder_only:  # the HF peer and the cold-start child are T5-only
    settings['hf_peer'] = False
    settings['startup'] = False
  tables = {}
  for name in drafters:
    if name in ('bigram', 'unigram'):
      from specdec_jax.drafters import tables as tables_lib  # pylint: disable=g-import-not-at-top
      if pair.folder is None:
        raise BenchmarkConfigError(f'benchmark.drafters has {name!r} but the pair has no '
                                   f'folder holding {name}.npz; bind benchmark.pair_dir.')
      ids, log_probs, _ = tables_lib.load(pathlib.Path(pair.folder) / f'{name}.npz',
                                          models.target_model.config.vocab_size)
      tables[name] = jax.device_put((ids, log_probs))  # once, not per call
  data = []
  for name, path, records in records_of:
    examples = inputs_lib.tokenize(records, vocab, prefix=prefix, max_input_len=max_input_len)
    data.append((name, str(path), examples))

  results = dict(
      command=shlex.join(['python', '-m', 'specdec_jax.benchmark'] + sys.argv[1:]),
      settings=dict(s, quick=quick, max_input_len=max_input_len,
                    input_length_buckets=list(input_length_buckets),
                    max_decode_len=max_decode_len, seed=seed, prefix=prefix,
                    baseline_sampler=baseline_sampler, verifications=list(verifications),
                    topk=topk, topp=topp, drafters=list(drafters),
                    lookup_ngram=[lookup_min_ngram, lookup_max_ngram],
                    leniences=list(leniences),
                    datasets=[dict(name=n, path=p, sentences=len(e)) for n, p, e in data]),
      pair=dict(name=pair.name, target_config=config_dict(models.target_model.config),
                draft_config=(None if models.draft_model is None
                              else config_dict(models.draft_model.config)),
                target_checkpoint=pair.target_checkpoint,
                draft_checkpoint=pair.draft_checkpoint),
      machine=machine(), settings_results=[], policy_results=[], verification_results=[],
      drafter_results=[],
      step_costs={},
      compilation_cache=dict(setting=compilation_cache,
                             folder=_jax_cache_dir()),
      hf_peer=None, sharding=None if plan is None else dict(
          plan.describe(),
          target_param_bytes=sharding.per_device_bytes(models.target_params),
          draft_param_bytes=sharding.per_device_bytes(models.draft_params)))

  jax_greedy = {}
  for bs in s['batch_sizes']:
    all_batches = [b for _, _, ex in data
                   for b in inputs_lib.batches(ex, bs, max_input_len, input_length_buckets)]
    costs = measure_costs(models, all_batches, max_decode_len=max_decode_len,
                          gammas=s['gammas'], temperatures=s['temperatures'],
                          iters=s['step_timing_iters'],
                          vocab_size=models.target_model.config.vocab_size, eos_id=eos,
                          baseline_sampler=baseline_sampler, bidirectional=bidirectional)
    results['step_costs'][str(bs)] = costs
    print(f'[batch {bs}] c = {costs["c"]:.3f}, v = '
          + ', '.join(f'γ{g}:{costs["v"][str(g)]:.2f}' for g in s['gammas']), flush=True)
    for temp in s['temperatures']:
      for dname, _, examples in data:
        batches = list(inputs_lib.batches(examples, bs, max_input_len, input_length_buckets))
        common = dict(temperature=float(temp), max_decode_len=max_decode_len, eos_id=eos,
                      seed=seed, real_vocab_size=vocab.vocab_size, plan=plan, topk=topk,
                      topp=topp, inputs_bidirectional_attention=bidirectional)
        base = Runner(models, batches, method='baseline', gamma=None,
                      sampler=baseline_sampler, **common)
        specs = [Runner(models, batches, method='speculative', gamma=g, **common)
                 for g in s['gammas']] if 'model' in drafters else []
        spec_of = functools.partial(generate_common.resolve_drafter,
                                    lookup_max_ngram=lookup_max_ngram,
                                    lookup_min_ngram=lookup_min_ngram)
        others = [Runner(models, batches, method='speculative', gamma=g,
                         drafter=spec_of(d), ngram_table=tables.get(d),
                         **common)
                  for d in drafters if d != 'model' for g in s['gammas']]
        lenient = [Runner(models, batches, method='speculative', gamma=g,
                          drafter=spec_of(drafters[0]),
                          ngram_table=tables.get(drafters[0]), lenience=float(lenience),
                          **common)
                   for lenience in leniences if lenience != 1.0
                   for g in s['gammas']] if float(temp) > 0 else []
        adaptive = [Runner(models, batches, method='speculative', gamma=max(s['gammas']),
                           policy=rows_lib.policy_for(name, costs, temp, max(s['gammas']),
                                          confidence_threshold), **common)
                    for name in ([] if quick else policies)]
        blocks = [Runner(models, batches, method='speculative', gamma=g,
                         verification='block', **common)
                  for g in s['gammas']] if 'block' in verifications and float(temp) > 0 else []
        if not specs:
          adaptive = blocks = []  # policies and block rows compare against the model draft
        runners = [base] + specs + adaptive + blocks + others + lenient
        for r in runners:
          r.warm_up()
        for _ in range(s['repeats']):
          for r in runners:
            r.run_once()
        rows = [rows_lib.row(dname, bs, temp, base, spec, costs) for spec in specs]
        if rows:
          rows_lib.mark_best(rows, base, specs, costs)
        for r in others + lenient:
          row = rows_lib.drafter_row(dname, bs, temp, base, r, costs)
          results['drafter_results'].append(row)
          print(f'[{dname} T={temp} B={bs} γ={r.gamma} drafter={row["drafter"]}'
                + ('' if row['exact'] else f' lenience={row["lenience"]:g} NOT EXACT')
                + f'] speedup {row["speedup"]:.2f} (pred {row["predicted_speedup_rounds"]:.2f}) '
                f'α={row["alpha"]:.3f} tok/target call {row["tokens_per_target_call"]:.3f}'
                + ('' if row['identical'] is None else f' identical={row["identical"]}'),
                flush=True)
        for row in rows:
          row['verification'] = 'token'
        results['settings_results'].extend(rows)
        for r, token_row in zip(blocks, rows):
          row = rows_lib.without_predictions(rows_lib.row(dname, bs, temp, base, r, costs))
          row.update(verification='block',
                     token_tokens_per_target_call=token_row['tokens_per_target_call'],
                     token_speedup=token_row['speedup'],
                     token_acceptance_rate=token_row['acceptance_rate'])
          results['verification_results'].append(row)
          print(f'[{dname} T={temp} B={bs} γ={r.gamma} block] tok/target call '
                f'{row["tokens_per_target_call"]:.3f} (token {token_row["tokens_per_target_call"]:.3f}), '
                f'speedup {row["speedup"]:.2f} (token {token_row["speedup"]:.2f})', flush=True)
        for r in adaptive:
          row = rows_lib.without_predictions(rows_lib.row(dname, bs, temp, base, r, costs))
          row.update(policy=r.policy.kind, policy_settings=dataclasses.asdict(r.policy),
                     best_gamma=rows[0]['best_gamma'],
                     predicted_best_gamma=rows[0]['predicted_best_gamma'])
          results['policy_results'].append(row)
          print(f'[{dname} T={temp} B={bs} policy={r.policy.kind} γmax={r.gamma}] speedup '
                f'{row["speedup"]:.2f}, mean draft length {row["mean_draft_length"]:.2f}, '
                f'α={row["alpha"]:.3f}' + ('' if row['identical'] is None else
                                           f' identical={row["identical"]}'), flush=True)
        for row in rows:  # the model draft's rows
          print(f'[{dname} T={temp} B={bs} γ={row["gamma"]}] speedup {row["speedup"]:.2f} '
                f'(pred {row["predicted_speedup"]:.2f}, eff {row["efficiency"]:.2f}; '
                f'Thm 3.8 {row["predicted_speedup_thm38"]:.2f}) '
                f'α={row["alpha"]:.3f} acc={row["acceptance_rate"]:.3f} '
                f'tok/s {row["baseline_tokens_per_s"]:.1f} → {row["speculative_tokens_per_s"]:.1f}'
                + ('' if row['identical'] is None else f' identical={row["identical"]}'),
                flush=True)
        if rows:
          print(f'[{dname} T={temp} B={bs}] best γ measured {rows[0]["best_gamma"]}, '
                f'predicted by the cost model {rows[0]["predicted_best_gamma"]}', flush=True)
        if bs == 1 and float(temp) == 0.0:
          jax_greedy[dname] = base.outputs

  if s['startup']:
    print('[start-up] compilation cache cold, then warm (two child processes)', flush=True)
    results['startup'] = startup_lib.measure(dict(
        pair_dir=None, target_config=config_dict(models.target_model.config),
        draft_config=config_dict(models.draft_model.config),
        target_checkpoint=pair.target_checkpoint, draft_checkpoint=pair.draft_checkpoint,
        vocab_path=pair.vocab_path, extra_ids=extra_ids, checkpoint_dtype=checkpoint_dtype,
        dataset=str(data[0][1]), prefix=prefix, max_input_len=max_input_len,
        input_length_buckets=list(input_length_buckets), max_decode_len=max_decode_len,
        gamma=max(s['gammas'])))
    st = results['startup']
    if st.get('skipped'):
      print(f'warning: {st["note"]}', file=sys.stderr, flush=True)
    else:
      print('[start-up] ' + '; '.join(
          f'{k}: process {st[k]["process_wall_s"]:.1f} s, compile baseline '
          f'{st[k]["baseline"]["compile_s"]:.2f} s / speculative '
          f'{st[k]["speculative"]["compile_s"]:.2f} s' for k in ('cold', 'warm')), flush=True)
  else:
    results['startup'] = dict(skipped=True, note='start-up not measured (quick mode, a mesh, '
                              'or benchmark.startup=False).')

  if s['hf_peer']:
    try:  # A failing peer (another library's bug) must not lose this run's results.
      results["hf_peer"] = hf_peer_lib.run(
          models, [(n, e, jax_greedy.get(n)) for n, _, e in data],
          max_decode_len=max_decode_len, repeats=s['repeats'],
          threads=hf_threads or os.cpu_count(), num_assistant_tokens=hf_num_assistant_tokens,
          eos_id=eos)
    except Exception as e:  # pylint: disable=broad-except
      results['hf_peer'] = dict(skipped=True, note=f'HF peer failed: {type(e).__name__}: {e}')
      print(f'warning: {results["hf_peer"]["note"]}', file=sys.stderr, flush=True)
  else:
    results['hf_peer'] = dict(skipped=True, note='HF peer disabled (quick mode or '
                              'benchmark.hf_peer=False).')
  t0_rows = [r for r in results['settings_results'] + results['policy_results']
             + results['drafter_results'] if r['temperature'] == 0.0]
  results['identical_at_t0'] = (all(r['identical'] for r in t0_rows) if t0_rows else None)
  results['total_wall_s'] = time.perf_counter() - t_start
  atomic.write_text(out_dir / 'results.json', jsonio.dumps(results, indent=2))
  atomic.write_text(out_dir / 'results.md', report.markdown(results))
  report.plot(results, out_dir)
  print(f'wrote {out_dir}/results.json, results.md, speedup_vs_gamma.png, '
        f'tokens_per_second.png ({results["total_wall_s"]:.1f} s)', flush=True)
  return results


benchmark = gin_config.configurable(benchmark, denylist=['compilation_cache'])




def _jax_cache_dir():
  import jax  # pylint: disable=g-import-not-at-top
  return jax.config.jax_compilation_cache_dir


# ---------------------------------------------------------------------------- CLI

def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point (`flags.run_cli`): 0 success, 2 a configuration error
  (before anything is loaded), 3 the demo pair is not shipped, 130 interrupted."""
  argv = sys.argv[1:] if argv is None else argv
  f = flags.parse_gin_flags(
      argv, 'python -m specdec_jax.benchmark',
      'Wall-clock benchmark of baseline vs speculative decoding (gin-configured).',
      '--gin.benchmark.quick=True',
      examples=('python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin',
                'python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin '
                '--gin.benchmark.quick=True',
                'python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin '
                '--gin.benchmark.gammas="(1, 2, 4)" --gin.benchmark.hf_peer=False'),
      parameters=flags.parameters_help(benchmark, 'benchmark'),
      exit_status='3 the demo pair is not shipped', compilation_cache_flags=True)

  def configure():
    compile_cache.enable(f.compilation_cache, warn=flags.print_warning)
    return benchmark(compilation_cache=f.compilation_cache)

  return flags.run_cli(
      f, 'specdec_jax.benchmark',
      parse=lambda: decode_lib.parse_gin(f.gin_files, f.bindings, f.search_paths),
      configure=configure,
      config_errors=(BenchmarkConfigError, FileNotFoundError),
      exit_codes={decode_lib.DemoPairMissing: decode_lib.EXIT_DEMO_PAIR_MISSING},
      interrupted='no results written (they are written when the run completes)')

