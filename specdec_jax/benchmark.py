"""Wall-clock benchmark: baseline T5X-style decoding vs. speculative decoding.

    python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin \
        [--gin.benchmark.quick=True] [--gin.benchmark.num_sentences=20] ...

For every (dataset, temperature, batch size) the job times `generate.t5_generate`
(the baseline) and `generate.t5_speculative_generate` for every γ in the sweep, in
the same process, on the same tokenized inputs (each batch padded to the smallest of
`input_length_buckets` or `max_input_len` that holds it, so that short sentences do
not pay for encoding 128 padding positions; every shape is compiled before timing):

* compilation is excluded: every program gets one warm-up call first (its time is
  reported separately as `first_call_s`, and `compile_s ≈ first_call_s − median`);
* every timed call ends with `jax.block_until_ready`; `repeats` passes over all
  inputs are made, round-robin over the methods (so load drift hits all of them);
  times are the median of the passes, with min and max;
* speedup = speculative tokens/s / baseline tokens/s (medians): at temperature 0 both
  emit the same tokens, so it is baseline time / speculative time; at temperature > 0
  the sampled outputs differ in length, and throughput is what is compared;
* acceptance rate = Σaccepted / Σdrafted, the paper's α = Σalpha_sum / Σalpha_count,
  tokens per target call = Σtokens / Σtarget_calls (real rows only);
* c = t(draft, 1-token step) / t(target, 1-token step) and
  v(γ) = t(target, (γ+1)-token step) / t(target, 1-token step), timed inside a
  compiled loop of cached calls (see `step_costs`; medians of `step_timing_iters`
  runs), so that per-call dispatch does not hide the models' real step costs;
* predicted speedup (paper Theorem 3.8) = (1 − α^(γ+1)) / ((1 − α)(γc + 1)), and
  with the verify cost (1 − α^(γ+1)) / ((1 − α)(γc + v)); efficiency = measured /
  predicted.

At temperature 0 the two methods must produce the same tokens; the job records
the comparison (`identical_at_t0`) per setting and overall.

The peer (`hf_peer=True`): the pair is exported with `hf_t5.export_hf_t5`
and Hugging Face `generate` is timed without and with `assistant_model=draft`
(batch 1, greedy, `torch.set_num_threads(hf_threads or os.cpu_count())`). It is
skipped with a note when torch / transformers are missing.

Outputs in `output_dir`: results.json, results.md, speedup_vs_gamma.png,
tokens_per_second.png.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import platform
import shlex
import statistics
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

import gin
import numpy as np

from specdec_jax import decode as decode_lib
from specdec_jax import flags
from specdec_jax import inputs as inputs_lib
from specdec_jax import paths

DEFAULT_DATASETS = (
    ('multi30k_test2016', 'ende/multi30k/test_2016_flickr.en.gz'),
    ('wmt_news_test', 'ende/wmt/news_test.en'),
)

QUICK = dict(num_sentences=4, gammas=(2, 4), batch_sizes=(1,), temperatures=(0.0,),
             repeats=1, hf_peer=False, step_timing_iters=10)


# ---------------------------------------------------------------------------- formulas

def predicted_speedup(alpha: float, gamma: int, c: float, v: float = 1.0) -> float:
  """(1 − α^(γ+1)) / ((1 − α)(γc + v)); v = 1 is the paper's Theorem 3.8."""
  if alpha is None or not math.isfinite(alpha):
    return float('nan')
  if alpha >= 1.0:
    expected = gamma + 1.0
  else:
    expected = (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
  return expected / (gamma * c + v)


def _stats(xs: Sequence[float]) -> dict:
  xs = [float(x) for x in xs]
  return dict(median=statistics.median(xs), min=min(xs), max=max(xs), n=len(xs))


def _ratio(a, b):
  return float(a) / float(b) if b else float('nan')


# ---------------------------------------------------------------------------- inputs

def read_sentences(path, n: int) -> list[inputs_lib.Record]:
  p = pathlib.Path(path)
  if not p.is_absolute() and not p.exists():
    p = paths.data_dir() / p
  return inputs_lib.read_file(p, 'text')[:n]


# ---------------------------------------------------------------------------- timing

def _timed(fn):
  import jax  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - t0, out


@dataclasses.dataclass
class Runner:
  """Runs one method over all batches of one (dataset, temperature, batch size)."""
  m: Any  # Models
  batches: list
  _: dataclasses.KW_ONLY
  method: str
  gamma: Optional[int]
  temperature: float
  max_decode_len: int
  eos_id: int
  seed: int
  real_vocab_size: Optional[int]
  times: list = dataclasses.field(default_factory=list)
  first_call_s: Optional[float] = None
  outputs: Optional[list] = None  # per example: np.ndarray tokens up to EOS
  stats: Optional[dict] = None

  def _call(self, batch, i):
    import jax  # pylint: disable=g-import-not-at-top
    from specdec_jax import generate  # pylint: disable=g-import-not-at-top
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), i)
    kw = dict(eos_id=self.eos_id, temperature=self.temperature, decode_rng=key)
    if self.method == 'baseline':
      return generate.t5_generate(self.m.target_model, self.m.target_params, batch.tokens,
                                  self.max_decode_len, **kw)
    return generate.t5_speculative_generate(
        self.m.target_model, self.m.target_params, self.m.draft_model, self.m.draft_params,
        batch.tokens, self.max_decode_len, self.gamma, real_vocab_size=self.real_vocab_size,
        **kw)

  def warm_up(self):
    """Compiles (and times) the first call; warms every other input shape untimed."""
    self.first_call_s, _ = _timed(lambda: self._call(self.batches[0], 0))
    seen = {self.batches[0].tokens.shape}
    for i, batch in enumerate(self.batches):
      if batch.tokens.shape not in seen:
        seen.add(batch.tokens.shape)
        _timed(lambda: self._call(batch, i))  # pylint: disable=cell-var-from-loop

  def run_once(self):
    import jax  # pylint: disable=g-import-not-at-top
    total = 0.0
    outputs, stats = [], {k: [] for k in ('target_calls', 'drafted', 'accepted', 'alpha_sum',
                                          'alpha_count', 'tokens')}
    for i, batch in enumerate(self.batches):
      dt, out = _timed(lambda: self._call(batch, i))  # pylint: disable=cell-var-from-loop
      total += dt
      if self.outputs is None:
        out = jax.device_get(out)
        decodes = np.asarray(out[0])[:batch.n_real, 0]
        outputs.extend(inputs_lib.tokens_until_eos(r, self.eos_id) for r in decodes)
        if self.method == 'speculative':
          for k in stats:
            stats[k].extend(np.asarray(getattr(out[2], k))[:batch.n_real, 0].tolist())
    if self.outputs is None:
      self.outputs = outputs
      self.stats = stats if self.method == 'speculative' else None
    self.times.append(total)

  @property
  def num_tokens(self) -> int:
    return int(sum(len(o) for o in self.outputs))


LOOP_STEPS = 16  # cached calls per timed lax.fori_loop in `step_costs`


def step_costs(models, tokens, max_decode_len, gammas, iters: int) -> dict:
  """Seconds per cached call, measured inside a compiled loop, and the ratios c and v.

  Each (model, k) gets one jitted `lax.fori_loop` of `LOOP_STEPS` k-token calls that
  feed each call's argmax back as the next input (as decoding does), on a warm
  cache; a call's time is the loop's median time over `iters` runs / LOOP_STEPS. In
  a loop, like inside the decoders' `while_loop`, per-dispatch overhead is amortized
  and the weights compete for the caches as they do while decoding.

  Returns:
    dict with target_step_s {k: s}, draft_step_s, c = draft / target 1-token call
    (paper §3.3) and v {γ: target (γ+1)-token call / target 1-token call}.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax import sampling  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top

  def timings(model, params, ks):
    cache = jax.jit(lambda p, x: t5.encode_and_init_cache(model, p, x, max_decode_len))(
        params, jnp.asarray(tokens))
    b = tokens.shape[0]
    out = {}
    for k in ks:
      lengths = jnp.full((b,), max(0, min(8, max_decode_len - k)), jnp.int32)

      @jax.jit
      def loop(p, c, k=k, lengths=lengths):
        step = t5.make_step_fn(model, p)

        def body(_, carry):
          c, tok = carry
          logits, c = step(jnp.broadcast_to(tok[:, None], (b, k)), lengths, c)
          return c, sampling.argmax(logits[:, -1])
        return jax.lax.fori_loop(0, LOOP_STEPS, body, (c, jnp.ones((b,), jnp.int32)))[1]

      jax.block_until_ready(loop(params, cache))
      ts = []
      for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(loop(params, cache))
        ts.append(time.perf_counter() - t0)
      out[k] = statistics.median(ts) / LOOP_STEPS
    return out

  target = timings(models.target_model, models.target_params,
                   sorted({1} | {g + 1 for g in gammas}))
  draft = timings(models.draft_model, models.draft_params, [1])
  t1 = target[1]
  return dict(target_step_s={str(k): v for k, v in target.items()},
              draft_step_s=draft[1],
              c=draft[1] / t1,
              v={str(g): target[g + 1] / t1 for g in gammas})


# ---------------------------------------------------------------------------- HF peer

def run_hf_peer(models, datasets, *, max_decode_len, repeats, threads, num_assistant_tokens,
                eos_id) -> dict:
  """Times HF `generate` without / with `assistant_model` (batch 1, greedy).

  Args:
    datasets: list of `(name, examples, jax_greedy_outputs or None)`.
  """
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    return dict(skipped=True, note=f'HF peer skipped: {e} (install torch and transformers).')
  from specdec_jax import hf_t5  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  with tempfile.TemporaryDirectory(prefix='specdec_hf_') as tmp:
    tdir = hf_t5.export_hf_t5(models.target_params, models.target_model.config,
                              os.path.join(tmp, 'target'))
    ddir = hf_t5.export_hf_t5(models.draft_params, models.draft_model.config,
                              os.path.join(tmp, 'draft'))
    cls = transformers.T5ForConditionalGeneration
    target = cls.from_pretrained(tdir).eval()
    draft = cls.from_pretrained(ddir).eval()
  if num_assistant_tokens is not None:
    draft.generation_config.num_assistant_tokens = int(num_assistant_tokens)
    draft.generation_config.num_assistant_tokens_schedule = 'constant'

  def run(inputs, assisted):
    outs = []
    total = 0.0
    for ids in inputs:
      kw = dict(max_new_tokens=max_decode_len, do_sample=False, num_beams=1,
                attention_mask=torch.ones_like(ids))
      if assisted:
        kw['assistant_model'] = draft
      t0 = time.perf_counter()
      with torch.inference_mode():
        out = target.generate(ids, **kw)
      total += time.perf_counter() - t0
      outs.append(inputs_lib.tokens_until_eos(out[0, 1:].numpy(), eos_id))
    return total, outs

  names = ('hf_baseline', 'hf_assisted')
  runs = []
  for dname, examples, jax_greedy in datasets:
    inputs = [torch.tensor([list(ex.tokens)], dtype=torch.long) for ex in examples]
    run(inputs, False)  # warm-up
    run(inputs, True)
    res = {name: dict(times=[]) for name in names}
    outs = {}
    for _ in range(repeats):
      for name in names:
        t, o = run(inputs, name == 'hf_assisted')
        res[name]['times'].append(t)
        outs[name] = o
    for name in names:
      ntok = int(sum(len(o) for o in outs[name]))
      st = _stats(res[name]['times'])
      res[name].update(time_s=st, tokens=ntok, tokens_per_s=ntok / st['median'])
    same = all(np.array_equal(a, b) for a, b in zip(outs['hf_baseline'], outs['hf_assisted']))
    same_jax = (None if jax_greedy is None else
                all(np.array_equal(a, b) for a, b in zip(outs['hf_baseline'], jax_greedy)))
    runs.append(dict(dataset=dname, sentences=len(inputs),
                     speedup=res['hf_baseline']['time_s']['median'] /
                     res['hf_assisted']['time_s']['median'],
                     identical_hf_baseline_vs_assisted=same,
                     identical_hf_vs_jax_baseline=same_jax, **res))
  return dict(skipped=False, batch_size=1, temperature=0.0, torch_threads=threads,
              torch=torch.__version__, transformers=transformers.__version__,
              num_assistant_tokens=(num_assistant_tokens if num_assistant_tokens is not None
                                    else 'HF default (heuristic schedule)'),
              runs=runs)


# ---------------------------------------------------------------------------- the job

@dataclasses.dataclass
class Models:
  target_model: Any
  target_params: Any
  draft_model: Any
  draft_params: Any


def load_pair(pair_dir, target_config, draft_config, target_checkpoint, draft_checkpoint,
              vocab_path, extra_ids, checkpoint_dtype=None):
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
  pair = decode_lib.resolve_pair(pair_dir, target_config=target_config,
                                 draft_config=draft_config,
                                 target_checkpoint=target_checkpoint,
                                 draft_checkpoint=draft_checkpoint, vocab_path=vocab_path)
  vocab = decode_lib.load_vocabulary(pair.vocab_path, extra_ids)
  loaded = {}
  for role in ('target', 'draft'):
    cfg = getattr(pair, f'{role}_config')
    params = checkpoints.load_t5x_checkpoint(getattr(pair, f'{role}_checkpoint'), cfg,
                                             dtype=decode_lib._dtype(checkpoint_dtype))  # pylint: disable=protected-access
    t5.check_params(params, cfg)
    loaded[role] = (t5.Transformer(cfg), params)
  return pair, vocab, Models(loaded['target'][0], loaded['target'][1], loaded['draft'][0],
                             loaded['draft'][1])


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
                      not t >= 0 for t in temps):
    raise BenchmarkConfigError(
        'benchmark.temperatures must be a tuple of numbers >= 0 (0 = greedy), e.g. '
        f'--gin.benchmark.temperatures="(0.0, 1.0)"; got {temperatures!r}.')


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
              quick: bool = False) -> dict:
  """Runs the benchmark (see the module docstring); returns the results dict.

  `quick=True` overrides num_sentences=4, gammas=(2, 4), batch_sizes=(1,),
  temperatures=(0.0,), repeats=1, no HF peer, step_timing_iters=10 (the bound values
  are still checked).

  Raises:
    BenchmarkConfigError: before loading anything, for a setting out of range (it
      names the `benchmark.<argument>` binding and the fix).
  """
  check_settings(num_sentences=num_sentences, gammas=gammas, temperatures=temperatures,
                 batch_sizes=batch_sizes, repeats=repeats,
                 step_timing_iters=step_timing_iters, max_input_len=max_input_len,
                 input_length_buckets=input_length_buckets, max_decode_len=max_decode_len)
  import jax  # pylint: disable=g-import-not-at-top
  settings = dict(num_sentences=num_sentences, gammas=tuple(gammas),
                  batch_sizes=tuple(batch_sizes), temperatures=tuple(temperatures),
                  repeats=repeats, hf_peer=hf_peer, step_timing_iters=step_timing_iters)
  if quick:
    settings.update(QUICK)
  s = settings
  out_dir = pathlib.Path(output_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  t_start = time.perf_counter()
  pair, vocab, models = load_pair(pair_dir, target_config, draft_config, target_checkpoint,
                                  draft_checkpoint, vocab_path, extra_ids, checkpoint_dtype)
  eos = vocab.eos_id
  data = []
  for name, path in datasets:
    records = read_sentences(path, s['num_sentences'])
    examples = inputs_lib.tokenize(records, vocab, prefix=prefix, max_input_len=max_input_len)
    data.append((name, str(path), examples))

  results = dict(
      command=shlex.join(['python', '-m', 'specdec_jax.benchmark'] + sys.argv[1:]),
      settings=dict(s, quick=quick, max_input_len=max_input_len,
                    input_length_buckets=list(input_length_buckets),
                    max_decode_len=max_decode_len, seed=seed, prefix=prefix,
                    datasets=[dict(name=n, path=p, sentences=len(e)) for n, p, e in data]),
      pair=dict(name=pair.name, target_config=_config_dict(models.target_model.config),
                draft_config=_config_dict(models.draft_model.config),
                target_checkpoint=pair.target_checkpoint,
                draft_checkpoint=pair.draft_checkpoint),
      machine=_machine(), settings_results=[], step_costs={}, hf_peer=None)

  jax_greedy = {}
  for bs in s['batch_sizes']:
    first_batch = next(inputs_lib.batches(data[0][2], bs, max_input_len,
                                          input_length_buckets)).tokens
    costs = step_costs(models, first_batch, max_decode_len, s['gammas'],
                       s['step_timing_iters'])
    results['step_costs'][str(bs)] = costs
    print(f'[batch {bs}] c = {costs["c"]:.3f}, v = '
          + ', '.join(f'γ{g}:{costs["v"][str(g)]:.2f}' for g in s['gammas']), flush=True)
    for temp in s['temperatures']:
      for dname, dpath, examples in data:
        batches = list(inputs_lib.batches(examples, bs, max_input_len, input_length_buckets))
        common = dict(temperature=float(temp), max_decode_len=max_decode_len, eos_id=eos,
                      seed=seed, real_vocab_size=vocab.vocab_size)
        base = Runner(models, batches, method='baseline', gamma=None, **common)
        specs = [Runner(models, batches, method='speculative', gamma=g, **common)
                 for g in s['gammas']]
        for r in [base] + specs:
          r.warm_up()
        for _ in range(s['repeats']):
          for r in [base] + specs:
            r.run_once()
        rows = [_row(dname, bs, temp, base, spec, costs) for spec in specs]
        best = max(rows, key=lambda x: x['speedup'])
        for row in rows:
          row['best_gamma'] = best['gamma']
        results['settings_results'].extend(rows)
        for row in rows:
          print(f'[{dname} T={temp} B={bs} γ={row["gamma"]}] speedup {row["speedup"]:.2f} '
                f'(pred {row["predicted_speedup"]:.2f}, with v {row["predicted_speedup_v"]:.2f}) '
                f'α={row["alpha"]:.3f} acc={row["acceptance_rate"]:.3f} '
                f'tok/s {row["baseline_tokens_per_s"]:.1f} → {row["speculative_tokens_per_s"]:.1f}'
                + ('' if row['identical'] is None else f' identical={row["identical"]}'),
                flush=True)
        if bs == 1 and float(temp) == 0.0:
          jax_greedy[dname] = base.outputs

  if s['hf_peer']:
    results['hf_peer'] = run_hf_peer(
        models, [(n, e, jax_greedy.get(n)) for n, _, e in data],
        max_decode_len=max_decode_len, repeats=s['repeats'],
        threads=hf_threads or os.cpu_count(), num_assistant_tokens=hf_num_assistant_tokens,
        eos_id=eos)
  else:
    results['hf_peer'] = dict(skipped=True, note='HF peer disabled (quick mode or '
                              'benchmark.hf_peer=False).')
  t0_rows = [r for r in results['settings_results'] if r['temperature'] == 0.0]
  results['identical_at_t0'] = (all(r['identical'] for r in t0_rows) if t0_rows else None)
  results['total_wall_s'] = time.perf_counter() - t_start
  (out_dir / 'results.json').write_text(json.dumps(results, indent=2, default=_json_default))
  (out_dir / 'results.md').write_text(markdown(results))
  plot(results, out_dir)
  print(f'wrote {out_dir}/results.json, results.md, speedup_vs_gamma.png, '
        f'tokens_per_second.png ({results["total_wall_s"]:.1f} s)', flush=True)
  return results


# Registered under `benchmark` only in the imported module: under `python -m` this file
# also runs as `__main__`, and two registrations would make the selector ambiguous.
if __name__ != '__main__':
  benchmark = gin.configurable(benchmark)


def _row(dname, bs, temp, base: Runner, spec: Runner, costs: dict) -> dict:
  st = spec.stats
  alpha = _ratio(sum(st['alpha_sum']), sum(st['alpha_count']))
  g = spec.gamma
  c, v = costs['c'], costs['v'][str(g)]
  bt, stt = _stats(base.times), _stats(spec.times)
  # Tokens per second, not time: at T > 0 the two methods sample outputs of different
  # lengths. At T = 0 the tokens are identical and this is bt / st.
  tokens_ratio = spec.num_tokens / base.num_tokens
  speedup = tokens_ratio * bt['median'] / stt['median']
  pred = predicted_speedup(alpha, g, c)
  pred_v = predicted_speedup(alpha, g, c, v)
  identical = None
  if float(temp) == 0.0:
    identical = (len(base.outputs) == len(spec.outputs) and
                 all(np.array_equal(a, b) for a, b in zip(base.outputs, spec.outputs)))
  return dict(
      dataset=dname, batch_size=bs, temperature=float(temp), gamma=g,
      sentences=len(base.outputs),
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
      acceptance_rate=_ratio(sum(st['accepted']), sum(st['drafted'])),
      alpha=alpha,
      tokens_per_target_call=_ratio(sum(st['tokens']), sum(st['target_calls'])),
      target_calls=int(sum(st['target_calls'])),
      c=c, v=v,
      predicted_speedup=pred, predicted_speedup_v=pred_v,
      efficiency=speedup / pred if pred else float('nan'),
      efficiency_v=speedup / pred_v if pred_v else float('nan'),
      identical=identical)


def _config_dict(cfg) -> dict:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  d = dataclasses.asdict(cfg)
  d['dtype'] = jnp.dtype(d['dtype']).name
  d['mlp_activations'] = list(d['mlp_activations'])
  return d


def _machine() -> dict:
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  m = dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
           cpu_count=os.cpu_count(), python=platform.python_version(),
           jax=jax.__version__, flax=flax.__version__,
           devices=[str(d) for d in jax.devices()])
  try:
    m['load_average_at_start'] = os.getloadavg()
  except OSError:
    pass
  for mod in ('torch', 'transformers'):
    try:
      m[mod] = __import__(mod).__version__
    except ImportError:
      m[mod] = None
  return m


def _json_default(x):
  if isinstance(x, np.ndarray):
    return x.tolist()
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, (np.floating,)):
    return float(x)
  return str(x)


# ---------------------------------------------------------------------------- reports

def _f(x, spec='.2f'):
  if x is None:
    return '–'
  if isinstance(x, float) and not math.isfinite(x):
    return 'nan'
  return format(x, spec)


def markdown(res: dict) -> str:
  s = res['settings']
  m = res['machine']
  lines = [
      '# Speculative decoding benchmark', '',
      f'Command: `{res["command"]}`', '',
      f'Pair: `{res["pair"]["name"]}` — sentences per dataset: '
      + ', '.join(f'{d["name"]} {d["sentences"]}' for d in s['datasets'])
      + f'; max_input_len {s["max_input_len"]} (batches padded to the smallest of '
      f'{s.get("input_length_buckets") or []} or max_input_len that fits), '
      f'max_decode_len {s["max_decode_len"]}, '
      f'repeats {s["repeats"]} (times: median [min–max] of the repeats, compilation excluded).',
      '',
      f'Machine: {m["cpu_count"]} CPU cores ({m["processor"]}), {m["platform"]}; load average '
      f'at start {m.get("load_average_at_start")}; jax {m["jax"]}, flax {m["flax"]}, torch '
      f'{m["torch"]}, transformers {m["transformers"]}.', '',
      f'Outputs identical between methods at temperature 0: **{res["identical_at_t0"]}**', '',
      '## Step costs', '',
      '| batch | target 1-token step (ms) | draft 1-token step (ms) | c | v(γ) |',
      '|---|---|---|---|---|']
  for bs, sc in res['step_costs'].items():
    vs = ', '.join(f'γ={g}: {_f(v)}' for g, v in sc['v'].items())
    lines.append(f'| {bs} | {_f(sc["target_step_s"]["1"] * 1e3)} | '
                 f'{_f(sc["draft_step_s"] * 1e3)} | {_f(sc["c"], ".3f")} | {vs} |')
  lines += ['', '## Speculative vs baseline', '',
            '| dataset | T | batch | γ | baseline s | speculative s | baseline tok/s | '
            'spec tok/s | speedup | accept rate | α | tok/target call | c | v | '
            'pred (Thm 3.8) | pred with v | efficiency | eff. with v | identical (T=0) | '
            'best γ |',
            '|' + '---|' * 20]
  for r in res['settings_results']:
    bt, st = r['baseline_time_s'], r['speculative_time_s']
    lines.append(
        f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} | '
        f'{_f(bt["median"], ".3f")} [{_f(bt["min"], ".3f")}–{_f(bt["max"], ".3f")}] | '
        f'{_f(st["median"], ".3f")} [{_f(st["min"], ".3f")}–{_f(st["max"], ".3f")}] | '
        f'{_f(r["baseline_tokens_per_s"], ".1f")} | {_f(r["speculative_tokens_per_s"], ".1f")} | '
        f'**{_f(r["speedup"])}** [{_f(r["speedup_min"])}–{_f(r["speedup_max"])}] | '
        f'{_f(r["acceptance_rate"], ".3f")} | {_f(r["alpha"], ".3f")} | '
        f'{_f(r["tokens_per_target_call"])} | {_f(r["c"], ".3f")} | {_f(r["v"])} | '
        f'{_f(r["predicted_speedup"])} | {_f(r["predicted_speedup_v"])} | '
        f'{_f(r["efficiency"])} | {_f(r["efficiency_v"])} | '
        f'{"–" if r["identical"] is None else r["identical"]} | {r["best_gamma"]} |')
  lines += ['', '## Compilation (first call, excluded from the timings above)', '',
            'The first call of each program on a setting\'s first batch: it includes the '
            'compilation only when that program and input shape were not compiled earlier in '
            'the run (e.g. a later dataset whose first batch has a shape seen before shows '
            'just one call).', '',
            '| dataset | T | batch | γ | baseline first call s | speculative first call s |',
            '|---|---|---|---|---|---|']
  for r in res['settings_results']:
    lines.append(f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} '
                 f'| {_f(r["baseline_first_call_s"])} | {_f(r["speculative_first_call_s"])} |')
  hf = res.get('hf_peer') or {}
  lines += ['', '## Hugging Face peer (transformers assisted generation)', '']
  if hf.get('skipped', True):
    lines.append(hf.get('note', 'skipped'))
  else:
    lines += [
        f'Batch 1, greedy, torch threads {hf["torch_threads"]}, num_assistant_tokens: '
        f'{hf["num_assistant_tokens"]}; torch {hf["torch"]}, transformers '
        f'{hf["transformers"]}. The JAX rows are the same inputs at T=0, batch 1 (best γ).',
        '', '| dataset | method | time s (median [min–max]) | tokens | tok/s | speedup vs own '
        'baseline | outputs identical to own baseline |', '|---|---|---|---|---|---|---|']
    for run in hf['runs']:
      for name in ('hf_baseline', 'hf_assisted'):
        t = run[name]['time_s']
        lines.append(
            f'| {run["dataset"]} | {name} | {_f(t["median"], ".3f")} [{_f(t["min"], ".3f")}–'
            f'{_f(t["max"], ".3f")}] | {run[name]["tokens"]} | '
            f'{_f(run[name]["tokens_per_s"], ".1f")} | '
            + ('1.00 | – |' if name == 'hf_baseline' else
               f'{_f(run["speedup"])} | {run["identical_hf_baseline_vs_assisted"]} |'))
      sel = [r for r in res['settings_results'] if r['dataset'] == run['dataset']
             and r['batch_size'] == 1 and r['temperature'] == 0.0]
      if sel:
        best = max(sel, key=lambda r: r['speedup'])
        lines.append(f'| {run["dataset"]} | jax baseline | '
                     f'{_f(best["baseline_time_s"]["median"], ".3f")} | '
                     f'{best["baseline_tokens"]} | {_f(best["baseline_tokens_per_s"], ".1f")} | '
                     f'1.00 | – |')
        lines.append(f'| {run["dataset"]} | jax speculative γ={best["gamma"]} | '
                     f'{_f(best["speculative_time_s"]["median"], ".3f")} | '
                     f'{best["speculative_tokens"]} | '
                     f'{_f(best["speculative_tokens_per_s"], ".1f")} | {_f(best["speedup"])} | '
                     f'{best["identical"]} |')
    lines += [''] + [f'HF plain vs our JAX baseline, {run["dataset"]} (T=0, batch 1): identical '
                     f'outputs = {run["identical_hf_vs_jax_baseline"]}.' for run in hf['runs']]
  lines += ['', f'Total wall time: {res["total_wall_s"]:.1f} s.', '']
  return '\n'.join(lines)


def plot(res: dict, out_dir: pathlib.Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  rows = res['settings_results']
  temps = sorted({r['temperature'] for r in rows})
  bss = sorted({r['batch_size'] for r in rows})
  dsets = list(dict.fromkeys(r['dataset'] for r in rows))
  fig, axes = plt.subplots(len(temps), len(bss), figsize=(5.5 * len(bss), 4 * len(temps)),
                           squeeze=False)
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for i, t in enumerate(temps):
    for j, bs in enumerate(bss):
      ax = axes[i][j]
      for k, d in enumerate(dsets):
        sel = sorted((r for r in rows if r['temperature'] == t and r['batch_size'] == bs
                      and r['dataset'] == d), key=lambda r: r['gamma'])
        if not sel:
          continue
        col = colors[k % len(colors)]
        g = [r['gamma'] for r in sel]
        ax.errorbar(g, [r['speedup'] for r in sel],
                    yerr=[[r['speedup'] - r['speedup_min'] for r in sel],
                          [r['speedup_max'] - r['speedup'] for r in sel]],
                    fmt='o-', color=col, label=f'{d} measured', capsize=3)
        # Theoretical curves from this setting's mean α and measured c, v.
        alpha = statistics.mean(r['alpha'] for r in sel)
        c = sel[0]['c']
        gg = np.arange(1, max(g) + 1)
        ax.plot(gg, [predicted_speedup(alpha, int(x), c) for x in gg], '--', color=col,
                label=f'{d} Thm 3.8 (α={alpha:.2f}, c={c:.2f})')
        ax.plot(g, [r['predicted_speedup_v'] for r in sel], ':', color=col,
                label=f'{d} with verify cost v')
      ax.axhline(1.0, color='gray', lw=0.8)
      ax.set_title(f'T={t:g}, batch {bs}')
      ax.set_xlabel('γ')
      ax.set_ylabel('speedup (baseline / speculative)')
      ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(out_dir / 'speedup_vs_gamma.png', dpi=110)
  plt.close(fig)

  labels, base_tps, best_tps = [], [], []
  for t in temps:
    for bs in bss:
      for d in dsets:
        sel = [r for r in rows if r['temperature'] == t and r['batch_size'] == bs
               and r['dataset'] == d]
        if not sel:
          continue
        best = max(sel, key=lambda r: r['speedup'])
        labels.append(f'{d}\nT={t:g} B={bs}\n(γ={best["gamma"]})')
        base_tps.append(best['baseline_tokens_per_s'])
        best_tps.append(best['speculative_tokens_per_s'])
  hf = res.get('hf_peer') or {}
  fig, ax = plt.subplots(figsize=(max(6, 1.8 * (len(labels) + 1)), 4.5))
  x = np.arange(len(labels))
  ax.bar(x - 0.2, base_tps, 0.4, label='JAX baseline (t5_generate)')
  ax.bar(x + 0.2, best_tps, 0.4, label='JAX speculative (best γ)')
  if not hf.get('skipped', True):
    for n, run in enumerate(hf['runs']):
      xh = len(labels)
      labels.append(f'HF {run["dataset"]}\nT=0 B=1')
      ax.bar(xh - 0.2, run['hf_baseline']['tokens_per_s'], 0.4, color='tab:gray',
             label='HF generate' if n == 0 else None)
      ax.bar(xh + 0.2, run['hf_assisted']['tokens_per_s'], 0.4, color='tab:olive',
             label='HF assisted (assistant_model=draft)' if n == 0 else None)
  ax.set_xticks(np.arange(len(labels)))
  ax.set_xticklabels(labels, fontsize=7)
  ax.set_ylabel('tokens / s')
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out_dir / 'tokens_per_second.png', dpi=110)
  plt.close(fig)


# ---------------------------------------------------------------------------- CLI

def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  f = flags.parse_gin_flags(
      argv, 'python -m specdec_jax.benchmark',
      'Wall-clock benchmark of baseline vs speculative decoding (gin-configured).',
      '--gin.benchmark.quick=True')
  try:
    decode_lib.parse_gin(f.gin_files, f.bindings, f.search_paths)
  except Exception as e:  # pylint: disable=broad-except
    print('specdec_jax.benchmark: error: invalid gin configuration: '
          f'{flags.gin_error_message(e, f.bindings)}', file=sys.stderr)
    return decode_lib.EXIT_CONFIG_ERROR
  try:
    benchmark()
  except BenchmarkConfigError as e:
    print(f'specdec_jax.benchmark: error: {e}', file=sys.stderr)
    return decode_lib.EXIT_CONFIG_ERROR
  except decode_lib.DemoPairMissing as e:
    print(f'specdec_jax.benchmark: error: {e}', file=sys.stderr)
    return decode_lib.EXIT_DEMO_PAIR_MISSING
  return 0


if __name__ == '__main__':
  from specdec_jax import benchmark as _module  # pylint: disable=g-import-not-at-top
  sys.exit(_module.main())
