"""The baseline: T5X-style `temperature_sample`, one target call per token.

Mirrors `t5x.decoding.temperature_sample` (semantics, arguments, outputs) in one
`lax.while_loop` over per-row state; the model is called through T5X's one-token
`tokens_to_logits(DecodingState) -> (logits [B', V], cache)`, and
`tokens_to_logits_from_step_fn` adapts a k-token `step_fn` to it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp

from specdec_jax.decoding import loop_common
from specdec_jax.decoding import sampling

MIN_TEMPERATURE = sampling.MIN_TEMPERATURE


@flax.struct.dataclass
class DecodingState:
  """What T5X passes to `tokens_to_logits` (mirrors `t5x.decoding.DecodingState`).

  Attributes:
    cur_index: int32 `[batch]`, position of `cur_token` (tokens already in the cache).
    sequences: int32 `[batch, max_decode_len]` tokens so far (prompt + generated).
    cur_token: int32 `[batch, 1]`, the decoder input to consume now.
    cache: the model's cache.
  """
  cur_index: jax.Array
  sequences: jax.Array
  cur_token: jax.Array
  cache: Any


def tokens_to_logits_from_step_fn(step_fn):
  """Adapts a k-token `step_fn` to T5X's `tokens_to_logits(DecodingState)` (k = 1)."""
  def tokens_to_logits(state: DecodingState):
    logits, cache = step_fn(state.cur_token, state.cur_index, state.cache)
    return logits[:, 0], cache
  return tokens_to_logits


@flax.struct.dataclass
class _SamplingLoopState:
  cur_index: jax.Array  # [B] position of cur_token
  sequences: jax.Array  # [B, L + 1], index 0 = start token 0
  cache: Any
  cur_token: jax.Array  # [B, 1]
  ended: jax.Array  # [B]
  rng: jax.Array
  log_prob: jax.Array  # [B]


def temperature_sample(inputs, cache, tokens_to_logits: Callable, eos_id: int,
                       decode_rng=None, num_decodes: int = 1, temperature=1.0,
                       topk: int = 1, topp=0.0, cache_offset: int = 0,
                       initial_index=None, max_decode_steps: Optional[int] = None,
                       rescale_log_probs: bool = True, prompt_free: bool = False,
                       per_row_greedy: bool = True, sampler: str = 'gumbel',
                       suppress_ids=()):
  """Temperature sampling, one token per step (mirrors T5X `decoding.temperature_sample`).

  Args:
    inputs: int32 `[batch, max_decode_len]`; non-zero leading tokens are forced
      prompt tokens (kept, not counted in the log-probs), zeros are sampled.
    cache: the model's cache for `batch` rows (expanded here for `num_decodes`).
    tokens_to_logits: `fn(DecodingState) -> (logits [B', vocab], new_cache)`.
    eos_id: end-of-sequence id; a row ends once it samples it (positions after are 0).
    decode_rng: one PRNG key (default `PRNGKey(0)`), drawn from as T5X does (one stream
      for the whole batch: a row's samples depend on the batch it is in); or one key per
      row (`[batch]` typed, or `[batch, 2]` raw uint32), as `speculative_sample` takes:
      then row r's samples depend only on its key (step t draws with
      `fold_in(key_r, t)`), whatever the batch size or the row's position.
    num_decodes: samples per input.
    temperature: scalar or `[batch]`; ≤ 1e-4 is greedy (argmax, log-prob 0 when
      `rescale_log_probs`).
    topk: keep the k most likely tokens (T5X's default 1 is greedy; 0 = off).
    topp: nucleus mass (0 = off). At most one of topk/topp may be non-zero.
    cache_offset: batch axis of the cache arrays (non-zero for scanned layers).
    initial_index: optional int32 `[batch]` start position per row (the cache
      already holds the prompt up to it), as in T5X.
    max_decode_steps: at most this many tokens are generated after the prompt.
    rescale_log_probs: log-probs under the standardized (temperature/top-k/top-p)
      distribution rather than the raw logits.
    prompt_free: static promise that `inputs` holds no forced token at or after each
      row's start (all zeros; or, with `initial_index`, zeros after the prompt): the
      loop then skips reading forced tokens (a speed option; `generate` sets it).
    per_row_greedy: static; False promises that no row's temperature is ≤ 1e-4 when
      `temperature` is an array (skips the per-row greedy branch).
    sampler: how a token is drawn from the standardized distribution (static):
      'gumbel' (default) is `jax.random.categorical`, T5X's own, so the same
      `decode_rng` gives the same samples as `t5x.decoding.temperature_sample`;
      'inverse_cdf' (`sampling.inverse_cdf`, the sampler of `speculative_sample`)
      draws from the same distribution with two uniforms per row instead of one
      Gumbel variate per vocabulary id (faster on CPU; other samples).
    suppress_ids: token ids the model may not emit: their logits are set to NEG_INF
      before standardization (`sampling.suppress`). Default: none, as T5X.
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32, log_probs [batch, num_decodes]
    float32)`, sorted by log-prob ascending along `num_decodes`.
  Raises:
    ValueError: before compiling, for topk and topp both set, a negative temperature,
      bad num_decodes / max_decode_steps / eos_id, an unknown sampler, or suppress_ids
      that are not token ids.
  """
  loop_common.check_common(inputs, eos_id, num_decodes, temperature, topk, topp, max_decode_steps)
  sampling.check_sampler(sampler)
  tokens_to_logits = sampling.suppressing(tokens_to_logits,
                                          sampling.check_suppress_ids(suppress_ids))
  batch, max_decode_len = inputs.shape
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  row_keys = None  # per-row keys: `[flat]`, each row its own stream
  if loop_common.is_per_row_keys(decode_rng):
    row_keys = loop_common.row_keys(decode_rng, batch, num_decodes)
  static_greedy = sampling.is_static_greedy(temperature)
  if isinstance(temperature, (int, float)) and not static_greedy:
    per_row_greedy = False  # one temperature > 1e-4 for every row
  inputs = loop_common.expand_batch(jnp.asarray(inputs, jnp.int32), num_decodes)
  cache = loop_common.expand_batch(cache, num_decodes, cache_offset)
  flat = batch * num_decodes
  temp = None if static_greedy else loop_common.per_row(temperature, batch, num_decodes, jnp.float32)
  sequences0 = jnp.concatenate([jnp.zeros((flat, 1), jnp.int32), inputs], axis=1)
  if initial_index is None:
    index0 = jnp.zeros((flat,), jnp.int32)
  else:
    index0 = loop_common.per_row(initial_index, batch, num_decodes, jnp.int32)
  limit = jnp.full((flat,), max_decode_len, jnp.int32)
  if max_decode_steps is not None:
    limit = jnp.minimum(limit, loop_common.prompt_lengths(inputs) + max_decode_steps)

  uniforms = None
  if sampler == 'inverse_cdf' and not static_greedy:
    # Every step's uniforms in one PRNG call before the loop (a threefry call is a loop
    # of its own on CPU), indexed by position: [flat, max_decode_len + 1, 2].
    if row_keys is None:
      uniforms = jax.random.uniform(decode_rng, (flat, max_decode_len + 1, 2))
    else:
      uniforms = jax.vmap(lambda k: jax.random.uniform(k, (max_decode_len + 1, 2)))(row_keys)

  def cond_fn(state):
    return ~jnp.all(state.ended)

  def body_fn(state):
    rng, sample_rng = jax.random.split(state.rng)
    logits, new_cache = tokens_to_logits(DecodingState(
        cur_index=state.cur_index, sequences=state.sequences[:, 1:],
        cur_token=state.cur_token, cache=state.cache))
    logits = logits.astype(jnp.float32)
    greedy_token = sampling.argmax(logits) if static_greedy or per_row_greedy else None
    if static_greedy:
      token = greedy_token
      std = None
    else:
      std = sampling.standardize(logits, temp, topk, topp, may_be_greedy=per_row_greedy)
      if sampler == 'gumbel' and row_keys is None:
        token = sampling.categorical(sample_rng, std)  # = jax.random.categorical
      elif sampler == 'gumbel':
        step_keys = jax.vmap(jax.random.fold_in)(row_keys, state.cur_index)
        token = sampling.sample_rows(step_keys, std)
      else:
        u = jnp.take_along_axis(
            uniforms, jnp.minimum(state.cur_index, max_decode_len)[:, None, None], axis=1)[:, 0]
        token = sampling.inverse_cdf(u, sampling.probs_from_logits(std))
      if per_row_greedy:
        token = jnp.where(temp <= MIN_TEMPERATURE, greedy_token, token)
    if static_greedy and rescale_log_probs:
      token_lp = jnp.zeros((flat,), jnp.float32)  # log 1 under the one-hot distribution.
    else:
      log_probs = jax.nn.log_softmax(std if rescale_log_probs else logits)
      token_lp = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]

    next_index = state.cur_index + 1
    if prompt_free:
      in_prompt = jnp.zeros_like(state.ended)
    else:
      forced = jnp.take_along_axis(state.sequences, next_index[:, None], axis=1)[:, 0]
      in_prompt = forced != 0
      token = jnp.where(in_prompt, forced, token)
    active = ~state.ended
    token = jnp.where(active, token, 0)
    log_prob = state.log_prob + jnp.where(active & ~in_prompt, token_lp, 0.0)
    pos_mask = jax.nn.one_hot(next_index, max_decode_len + 1, dtype=jnp.bool_) & active[:, None]
    sequences = jnp.where(pos_mask, token[:, None], state.sequences)
    ended = (state.ended | ((token == eos_id) & ~in_prompt & active) |
             (next_index >= limit))
    return _SamplingLoopState(cur_index=next_index, sequences=sequences, cache=new_cache,
                              cur_token=token[:, None], ended=ended, rng=rng,
                              log_prob=log_prob)

  cur_token0 = jnp.take_along_axis(sequences0, index0[:, None], axis=1)
  state0 = _SamplingLoopState(cur_index=index0, sequences=sequences0, cache=cache,
                              cur_token=cur_token0, ended=index0 >= limit,
                              rng=decode_rng if row_keys is None else jax.random.PRNGKey(0),
                              log_prob=jnp.zeros((flat,), jnp.float32))
  final = jax.lax.while_loop(cond_fn, body_fn, state0)
  decodes, log_probs, _ = loop_common.sort_decodes(final.sequences[:, 1:], final.log_prob, batch,
                                        num_decodes)
  return decodes, log_probs
