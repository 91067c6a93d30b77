"""Measured costs of every phase of decoding, and the cost model built from them.

All costs are measured on the machine and in the process of the benchmark, each in
its own compiled program, and expressed in units of one target 1-token decoder
step (`t1`):

* `c`: a draft 1-token step (paper §3.3);
* `v(γ)`: a target (γ+1)-token step (the verify call; the paper assumes 1);
* `enc_target`, `enc_draft`: one `encode_and_init_cache` call of each model on the
  batch (encoder + cross-attention K/V), per padded input length;
* `a_spec(γ)`: everything in a speculative round that is not a model call (drafting
  arithmetic, argmax / sampling over the vocabulary, the accept/resample rule,
  commit, loop bookkeeping), measured by running `speculative_sample` itself with
  model calls that cost (almost) nothing; `a_base` likewise per baseline step.

The cost model (`predict`) then gives, per batch of rows that emit N_r tokens:

  baseline    = enc_target + max_r N_r · (1 + a_base)
  speculative = enc_target + enc_draft + R · (γ·c + v(γ) + a_spec(γ)),
  R = max_r N_r / E(α, γ),   E(α, γ) = (1 − α^(γ+1)) / (1 − α)

(E is the expected number of tokens per round, paper Eq. (1); a batch runs until its
longest row is done, hence the max). With R replaced by the rounds the loop really
ran, the same formula isolates the engine's own overhead from the variance of α.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from typing import Optional, Sequence

import numpy as np

LOOP_STEPS = 16  # cached calls per timed lax.fori_loop in `step_costs`


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
  """E(α, γ) = (1 − α^(γ+1)) / (1 − α): tokens per round (paper Eq. 1); γ+1 at α = 1."""
  if alpha is None or not math.isfinite(alpha):
    return float('nan')
  if alpha >= 1.0:
    return gamma + 1.0
  return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float, v: float = 1.0) -> float:
  """(1 − α^(γ+1)) / ((1 − α)(γc + v)); v = 1 is the paper's Theorem 3.8."""
  return expected_tokens_per_round(alpha, gamma) / (gamma * c + v)


def _median_time(fn, iters: int) -> float:
  import jax  # pylint: disable=g-import-not-at-top
  jax.block_until_ready(fn())
  ts = []
  for _ in range(iters):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts)


def _cache_length(max_decode_len: int, gammas: Sequence[int]) -> int:
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  return generate.cache_length(max_decode_len, max(gammas))


@functools.lru_cache(maxsize=32)
def _cache_fn(model, length: int, bidirectional: bool):
  """One jitted `(params, tokens) -> (cache, lengths)` per (model, length, mode)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import decoder_only  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
  if hasattr(model, 'encode'):
    return jax.jit(lambda p, x: (t5.encode_and_init_cache(model, p, x, length),
                                 jnp.zeros((x.shape[0],), jnp.int32)))

  def prefill(p, x):
    region = jnp.concatenate([jnp.zeros((x.shape[0], 1), jnp.int32), x], axis=1)
    return decoder_only.prefill_cache(model, p, region, length,
                                      inputs_bidirectional_attention=bidirectional)
  return jax.jit(prefill)


def prepare_cache(model, params, tokens, length: int, bidirectional: bool = False):
  """`(cache, lengths)`: the decode cache of `length` slots for a batch of inputs, as the
  decoders prepare it: encoded (T5: encoder + cross K/V, lengths 0) or prefilled with the
  inputs as prompts (decoder-only: lengths = the prompt lengths), in one jitted call."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return _cache_fn(model, length, bool(bidirectional))(params, jnp.asarray(tokens, jnp.int32))


def _step_fn(model, params):
  from specdec_jax.models import decoder_only  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
  return (t5.make_step_fn if hasattr(model, 'encode') else decoder_only.make_step_fn)(
      model, params)


def step_costs(models, tokens, max_decode_len, gammas, iters: int,
               bidirectional: bool = False) -> dict:
  """Seconds per cached call, measured inside a compiled loop, and the ratios c and v.

  Each (model, k) gets one jitted `lax.fori_loop` of `LOOP_STEPS` k-token calls that
  feed each call's argmax back as the next input (as decoding does), on a warm cache
  of the length the decoders use; a call's time is the loop's median time over
  `iters` runs / LOOP_STEPS. In a loop, like inside the decoders' `while_loop`,
  per-dispatch overhead is amortized.

  Args:
    models: `benchmark.Models` (target/draft model and params).
    tokens: int32 `[batch, enc_len]` encoder inputs (their batch and length are used), or
      a decoder-only model's prompts (the steps then run after the prefilled prompts).
    max_decode_len: the decode length (sets the cache length).
    gammas: the γ values whose verify width γ+1 is timed.
    iters: timed runs per loop.
    bidirectional: decoder-only pairs: prefix-LM prefill.
  Returns:
    dict with target_step_s {k: s}, draft_step_s, c = draft / target 1-token call
    (paper §3.3) and v {γ: target (γ+1)-token call / target 1-token call}.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax.decoding import sampling  # pylint: disable=g-import-not-at-top
  decoder_only = not hasattr(models.target_model, 'encode')
  length = _cache_length(max_decode_len + (tokens.shape[1] if decoder_only else 0), gammas)

  def timings(model, params, ks):
    cache, start = prepare_cache(model, params, tokens, length, bidirectional)
    b = tokens.shape[0]
    out = {}
    for k in ks:
      lengths = (jnp.minimum(start + 8, length - k) if decoder_only else
                 jnp.full((b,), max(0, min(8, length - k)), jnp.int32))

      @jax.jit
      def loop(p, c, k=k, lengths=lengths):
        step = _step_fn(model, p)

        def body(_, carry):
          c, tok = carry
          logits, c = step(jnp.broadcast_to(tok[:, None], (b, k)), lengths, c)
          return c, sampling.argmax(logits[:, -1])
        return jax.lax.fori_loop(0, LOOP_STEPS, body, (c, jnp.ones((b,), jnp.int32)))[1]

      out[k] = _median_time(lambda: loop(params, cache), iters) / LOOP_STEPS  # pylint: disable=cell-var-from-loop
    return out

  target = timings(models.target_model, models.target_params,
                   sorted({1} | {g + 1 for g in gammas}))
  # A pair without a draft model (model-free drafters only): c = 0.
  draft = ({1: 0.0} if models.draft_model is None
           else timings(models.draft_model, models.draft_params, [1]))
  t1 = target[1]
  return dict(target_step_s={str(k): v for k, v in target.items()},
              draft_step_s=draft[1],
              c=draft[1] / t1,
              v={str(g): target[g + 1] / t1 for g in gammas})


def encoder_costs(models, tokens, max_decode_len: int, gammas, iters: int,
                  bidirectional: bool = False) -> dict:
  """Seconds of one cache preparation of each model on `tokens` [batch, len]: T5's
  `encode_and_init_cache`, or a decoder-only model's prompt prefill (`prepare_cache`)."""
  decoder_only = not hasattr(models.target_model, 'encode')
  length = _cache_length(max_decode_len + (tokens.shape[1] if decoder_only else 0), gammas)
  out = {}
  for role in ('target', 'draft'):
    model, params = getattr(models, f'{role}_model'), getattr(models, f'{role}_params')
    if model is None:  # no draft model: nothing to encode
      out[f'{role}_s'] = 0.0
      continue
    out[f'{role}_s'] = _median_time(
        lambda m=model, p=params: prepare_cache(m, p, tokens, length, bidirectional), iters)
  return out


def _null_step(vocab_size: int, eos_id: int):
  """A k-token 'model' whose call is one small fused op: logits that never pick EOS.

  The logits depend on the input tokens (so XLA cannot hoist them) and make the
  argmax the next id after the input, cycling over ids ≥ 3 — drafts and target agree,
  every draft is accepted, and the loop runs a known number of rounds.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ids = jnp.arange(vocab_size, dtype=jnp.int32)

  def step(tokens, lengths, cache):
    del lengths
    nxt = 3 + (tokens[..., None] - 2) % (vocab_size - 3)
    logits = jnp.where(ids == nxt, 10.0, 0.0) - jnp.where(ids == eos_id, 100.0, 0.0)
    return logits.astype(jnp.float32), cache
  return step


def loop_overheads(batch: int, vocab_size: int, max_decode_len: int, gammas, temperature,
                   iters: int, eos_id: int = 1, baseline_sampler: str = 'gumbel') -> dict:
  """Seconds per round / per step of the decoders' own work, with (nearly) free models.

  Runs `decoding.speculative_sample` (every γ) and `decoding.temperature_sample` with
  `_null_step` models at the benchmark's batch, vocabulary, length and temperature,
  so the time left is the loops' own: argmax or sampling over the vocabulary, the
  accept/resample rule, commit and bookkeeping. The baseline samples with
  `baseline_sampler` (`decoding.temperature_sample`'s `sampler`).

  Returns:
    dict with spec_round_s {γ: s per round} and base_step_s (s per step).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax import decoding  # pylint: disable=g-import-not-at-top
  from specdec_jax.generate import xla_options
  step = _null_step(vocab_size, eos_id)
  prompt = jnp.zeros((batch, max_decode_len), jnp.int32)
  cache = jnp.zeros((batch,), jnp.float32)
  greedy = temperature <= decoding.MIN_TEMPERATURE
  temp = 0.0 if greedy else jnp.float32(temperature)
  key = jax.random.PRNGKey(0)
  out = {'spec_round_s': {}}
  for g in gammas:
    fn = xla_options.jit(lambda t, g=g: decoding.speculative_sample(
        prompt, cache, step, cache, step, eos_id, g, vocab_size, decode_rng=key,
        temperature=0.0 if greedy else t, topk=0, prompt_free=True,
        per_row_greedy=False)[2].target_calls)
    rounds = int(np.max(np.asarray(fn(temp))))
    out['spec_round_s'][str(g)] = _median_time(lambda fn=fn: fn(temp), iters) / max(rounds, 1)
  tokens_to_logits = decoding.tokens_to_logits_from_step_fn(step)
  base = xla_options.jit(lambda t: decoding.temperature_sample(
      prompt, cache, tokens_to_logits, eos_id, decode_rng=key,
      temperature=0.0 if greedy else t, topk=0, prompt_free=True, per_row_greedy=False,
      sampler=baseline_sampler)[0])
  out['base_step_s'] = _median_time(lambda: base(temp), iters) / max_decode_len
  return out


def predict(lengths_per_batch: Sequence[Sequence[int]], *, gamma: int,
            alpha: Optional[float], units: dict, rounds_per_batch=None) -> dict:
  """The cost model, in target-step units, summed over batches.

  Args:
    lengths_per_batch: per batch, the tokens each row emitted (EOS included), padding rows
      too (they keep the loop running).
    gamma: γ.
    alpha: the measured α (ignored when `rounds_per_batch` is given).
    units: dict with c, v (this γ's), enc_target, enc_draft (per batch, in t1 units,
      lists aligned with the batches), a_spec, a_base (t1 units).
    rounds_per_batch: the rounds each batch's loop ran (max over its rows), to
      replace the α-based estimate.
  Returns:
    dict with baseline_units, speculative_units, rounds, phases (speculative units
    per phase: encode_target, encode_draft, draft, verify, overhead).
  """
  e = expected_tokens_per_round(alpha, gamma) if rounds_per_batch is None else None
  base = spec = 0.0
  phases = dict(encode_target=0.0, encode_draft=0.0, draft=0.0, verify=0.0, overhead=0.0)
  total_rounds = 0.0
  for i, lengths in enumerate(lengths_per_batch):
    longest = max(lengths) if len(lengths) else 0
    rounds = (longest / e) if rounds_per_batch is None else rounds_per_batch[i]
    total_rounds += rounds
    et, ed = units['enc_target'][i], units['enc_draft'][i]
    base += et + longest * (1.0 + units['a_base'])
    phases['encode_target'] += et
    phases['encode_draft'] += ed
    phases['draft'] += rounds * gamma * units['c']
    phases['verify'] += rounds * units['v']
    phases['overhead'] += rounds * units['a_spec']
  spec = sum(phases.values())
  return dict(baseline_units=base, speculative_units=spec, rounds=total_rounds,
              phases=phases)


def best_gamma(predicted: dict) -> Optional[int]:
  """The γ with the largest predicted speedup in `{γ: speedup}` (None if all NaN)."""
  finite = {g: s for g, s in predicted.items() if s is not None and math.isfinite(s)}
  return max(finite, key=finite.get) if finite else None
