"""Decoding loops: T5X-style `temperature_sample` and `speculative_sample`.

Both run in a single `lax.while_loop` (one compilation per shape, no host round-trip
per token) over per-row state, and take models through their cached call:

    step_fn(tokens [batch, k] int32, lengths [batch] int32, cache)
        -> (logits [batch, k, vocab], new_cache)

which consumes k decoder inputs per row at positions `lengths[b] … lengths[b]+k−1`
(`specdec_jax.models.t5.make_step_fn` builds one for our T5). `temperature_sample`
takes T5X's one-token `tokens_to_logits(DecodingState) -> (logits [B', V], cache)`
and `tokens_to_logits_from_step_fn` adapts a step_fn to it.

Conventions shared with T5X (`t5x/decoding.py`): `inputs [batch, max_decode_len]`
holds forced prompt tokens at the start of each row (0 = free), the decoder's start
token is 0, outputs are `[batch, num_decodes, max_decode_len]` with 0 after EOS, and
log-probs `[batch, num_decodes]` are sorted ascending (best decode last).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp

from specdec_jax import accept, draft, sampling, verify

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


def _expand_batch(tree, num_decodes: int, offset: int = 0):
  """Repeats every array of `tree` `num_decodes` times along its batch axis (`offset`).

  Row b becomes rows b*num_decodes … b*num_decodes+num_decodes−1 (T5X's
  `flat_batch_beam_expand` order).
  """
  if num_decodes == 1:
    return tree
  return jax.tree_util.tree_map(lambda x: jnp.repeat(x, num_decodes, axis=offset), tree)


def _per_row(value, batch: int, num_decodes: int, dtype):
  """Scalar or `[batch]` value → `[batch * num_decodes]`."""
  value = jnp.asarray(value, dtype)
  if value.ndim == 0:
    return jnp.broadcast_to(value, (batch * num_decodes,))
  if value.shape != (batch,):
    raise ValueError(f'per-row argument has shape {value.shape}; expected a scalar or '
                     f'[batch] = ({batch},).')
  return jnp.repeat(value, num_decodes)


def _sort_decodes(sequences, log_probs, batch: int, num_decodes: int):
  """[B*nd, L], [B*nd] → ([B, nd, L], [B, nd]) sorted by log-prob ascending."""
  sequences = sequences.reshape(batch, num_decodes, -1)
  log_probs = log_probs.reshape(batch, num_decodes)
  order = jnp.argsort(log_probs, axis=-1)
  return (jnp.take_along_axis(sequences, order[..., None], axis=1),
          jnp.take_along_axis(log_probs, order, axis=1), order)


def _prompt_lengths(inputs):
  """Number of forced prompt tokens per row: the leading run of non-zero tokens."""
  return jnp.sum(jnp.cumprod((inputs != 0).astype(jnp.int32), axis=1), axis=1)


def _check_common(inputs, eos_id, num_decodes, temperature, topk, topp, max_decode_steps):
  if inputs.ndim != 2:
    raise ValueError(f'inputs must be [batch, max_decode_len] int, got shape {inputs.shape}.')
  if not isinstance(num_decodes, int) or num_decodes < 1:
    raise ValueError(f'num_decodes must be an int >= 1, got {num_decodes!r}.')
  if not isinstance(eos_id, int):
    raise ValueError(f'eos_id must be an int, got {eos_id!r}.')
  if max_decode_steps is not None and (not isinstance(max_decode_steps, int)
                                       or max_decode_steps < 1):
    raise ValueError(f'max_decode_steps must be None or an int >= 1, got {max_decode_steps!r}.')
  sampling.validate_sampling_args(temperature, topk, topp)


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
                       rescale_log_probs: bool = True):
  """Temperature sampling, one token per step (mirrors T5X `decoding.temperature_sample`).

  Args:
    inputs: int32 `[batch, max_decode_len]`; non-zero leading tokens are forced
      prompt tokens (kept, not counted in the log-probs), zeros are sampled.
    cache: the model's cache for `batch` rows (expanded here for `num_decodes`).
    tokens_to_logits: `fn(DecodingState) -> (logits [B', vocab], new_cache)`.
    eos_id: end-of-sequence id; a row ends once it samples it (positions after are 0).
    decode_rng: PRNG key (default `PRNGKey(0)`).
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
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32, log_probs [batch, num_decodes]
    float32)`, sorted by log-prob ascending along `num_decodes`.
  Raises:
    ValueError: before compiling, for topk and topp both set, a negative temperature,
      bad num_decodes / max_decode_steps / eos_id.
  """
  _check_common(inputs, eos_id, num_decodes, temperature, topk, topp, max_decode_steps)
  batch, max_decode_len = inputs.shape
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  static_greedy = sampling.is_static_greedy(temperature)
  inputs = _expand_batch(jnp.asarray(inputs, jnp.int32), num_decodes)
  cache = _expand_batch(cache, num_decodes, cache_offset)
  flat = batch * num_decodes
  temp = None if static_greedy else _per_row(temperature, batch, num_decodes, jnp.float32)
  sequences0 = jnp.concatenate([jnp.zeros((flat, 1), jnp.int32), inputs], axis=1)
  if initial_index is None:
    index0 = jnp.zeros((flat,), jnp.int32)
  else:
    index0 = _per_row(initial_index, batch, num_decodes, jnp.int32)
  limit = jnp.full((flat,), max_decode_len, jnp.int32)
  if max_decode_steps is not None:
    limit = jnp.minimum(limit, _prompt_lengths(inputs) + max_decode_steps)

  def cond_fn(state):
    return ~jnp.all(state.ended)

  def body_fn(state):
    rng, sample_rng = jax.random.split(state.rng)
    logits, new_cache = tokens_to_logits(DecodingState(
        cur_index=state.cur_index, sequences=state.sequences[:, 1:],
        cur_token=state.cur_token, cache=state.cache))
    logits = logits.astype(jnp.float32)
    greedy_token = sampling.argmax(logits)
    if static_greedy:
      token = greedy_token
      std = None
    else:
      std = sampling.standardize(logits, temp, topk, topp)
      sampled = sampling.categorical(sample_rng, std)  # = jax.random.categorical
      token = jnp.where(temp <= MIN_TEMPERATURE, greedy_token, sampled)
    if static_greedy and rescale_log_probs:
      token_lp = jnp.zeros((flat,), jnp.float32)  # log 1 under the one-hot distribution.
    else:
      log_probs = jax.nn.log_softmax(std if rescale_log_probs else logits)
      token_lp = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]

    next_index = state.cur_index + 1
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
                              rng=decode_rng, log_prob=jnp.zeros((flat,), jnp.float32))
  final = jax.lax.while_loop(cond_fn, body_fn, state0)
  decodes, log_probs, _ = _sort_decodes(final.sequences[:, 1:], final.log_prob, batch,
                                        num_decodes)
  return decodes, log_probs


@flax.struct.dataclass
class SpeculativeStats:
  """Per-row statistics of a speculative decode, all `[batch, num_decodes]`.

  Attributes:
    target_calls: target (γ+1)-token calls while the row was active (= rounds).
    drafted: draft tokens proposed (γ per round, fewer near the length budget).
    accepted: draft tokens accepted by the rule (before truncation at EOS).
    alpha_sum: Σ over scored positions of β = Σ_x min(p(x), q(x)) (paper Def. 3.1). A
      drafted position is scored when its prefix was accepted (it lies at or before the
      round's first rejection), so that its prefix follows the target's distribution.
    alpha_count: number of scored positions; α ≈ alpha_sum / alpha_count (Cor. 3.6).
    tokens: tokens emitted (EOS included, forced prompt tokens included).
  """
  target_calls: jax.Array
  drafted: jax.Array
  accepted: jax.Array
  alpha_sum: jax.Array
  alpha_count: jax.Array
  tokens: jax.Array

  @property
  def alpha(self):
    """The paper's α estimate per row (NaN where nothing was scored)."""
    return self.alpha_sum / self.alpha_count

  @property
  def acceptance_rate(self):
    """Empirical fraction of drafted tokens accepted."""
    return self.accepted / self.drafted


@flax.struct.dataclass
class _SpecLoopState:
  n: jax.Array  # [B] committed tokens
  sequences: jax.Array  # [B, L + 1]
  target_cache: Any
  draft_cache: Any
  done: jax.Array  # [B]
  round: jax.Array  # scalar int32
  log_prob: jax.Array  # [B]
  target_calls: jax.Array
  drafted: jax.Array
  accepted: jax.Array
  alpha_sum: jax.Array
  alpha_count: jax.Array


def _row_keys(decode_rng, batch: int, num_decodes: int):
  """Per-row keys `[batch * num_decodes]`: a row's randomness depends only on its key.

  `decode_rng` is one key (split into `batch` row keys) or `[batch]` keys (typed, or
  raw `[batch, 2]` uint32); each row key is then split into `num_decodes` keys.
  """
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  decode_rng = jnp.asarray(decode_rng)
  typed = jax.dtypes.issubdtype(decode_rng.dtype, jax.dtypes.prng_key)
  single = decode_rng.ndim == (0 if typed else 1)
  keys = jax.random.split(decode_rng, batch) if single else decode_rng
  if keys.shape[0] != batch:
    raise ValueError(f'decode_rng holds {keys.shape[0]} row keys but the batch has {batch} '
                     'rows; pass one key or one key per row.')
  if num_decodes > 1:
    keys = jax.vmap(lambda k: jax.random.split(k, num_decodes))(keys)
    keys = keys.reshape((batch * num_decodes,) + keys.shape[2:])
  return keys


def speculative_sample(inputs, target_cache, target_step_fn: Callable, draft_cache,
                       draft_step_fn: Callable, eos_id: int, gamma: int,
                       vocab_size: int, decode_rng=None, num_decodes: int = 1,
                       temperature=1.0, topk: int = 0, topp=0.0,
                       max_decode_steps: Optional[int] = None,
                       real_vocab_size: Optional[int] = None,
                       rescale_log_probs: bool = True, cache_offset: int = 0):
  """Speculative sampling (Leviathan et al. 2023, Algorithm 1) in one `lax.while_loop`.

  Each round, per row: the draft proposes γ tokens (γ single-token cached calls; the
  first also re-feeds the previous input), the target scores them in one (γ+1)-token
  call, the accept/resample rule keeps a prefix and draws one more token. Rows advance
  by their own counts; finished rows keep computing but commit nothing.

  Exactness: at temperature 0 the output equals greedy `temperature_sample` on the
  target token for token; otherwise each output is distributed exactly as the
  target's standardized distribution (temperature, then top-k or top-p, applied to
  both p and q — paper §2.2).

  Args:
    inputs: int32 `[batch, max_decode_len]`, forced prompt tokens first (0 = free).
    target_cache, draft_cache: the models' caches for `batch` rows, each holding at
      least `max_decode_len` positions.
    target_step_fn, draft_step_fn: k-token cached calls (see module docstring).
    eos_id: a row ends after emitting it (positions after are 0).
    gamma: γ ≥ 1, draft tokens per round (static).
    vocab_size: the target's logits size; the draft's logits are padded with
      probability-0 ids or truncated to it.
    decode_rng: one key, or one key per row (`[batch]` typed / `[batch, 2]` raw); a
      row's output depends only on its own key.
    num_decodes: samples per input (sorted by log-prob ascending).
    temperature: scalar or `[batch]`; ≤ 1e-4 is greedy.
    topk, topp: standardization (at most one non-zero; 0 = off).
    max_decode_steps: at most this many tokens after the prompt.
    real_vocab_size: optional; draft ids at or beyond it get probability 0 (the
      target's distribution is used as is, to stay identical to the baseline).
    rescale_log_probs: log-probs under the target's standardized distribution
      (0 per token when greedy, as T5X) instead of its raw softmax.
    cache_offset: batch axis of the cache arrays.
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32,
      log_probs [batch, num_decodes] float32, stats SpeculativeStats)`.
  Raises:
    ValueError: before compiling, for γ < 1, a cache shorter than `max_decode_len`,
      topk and topp both set, a negative temperature, bad num_decodes.
  """
  _check_common(inputs, eos_id, num_decodes, temperature, topk, topp, max_decode_steps)
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  batch, max_decode_len = inputs.shape
  for name, c in (('target_cache', target_cache), ('draft_cache', draft_cache)):
    length = getattr(c, 'max_length', None)
    if length is not None and length < max_decode_len:
      raise ValueError(f'{name} holds {length} positions but max_decode_len is '
                       f'{max_decode_len}; build it with max_length >= {max_decode_len}.')

  static_greedy = sampling.is_static_greedy(temperature)
  flat = batch * num_decodes
  keys = _row_keys(decode_rng, batch, num_decodes)
  inputs = _expand_batch(jnp.asarray(inputs, jnp.int32), num_decodes)
  target_cache = _expand_batch(target_cache, num_decodes, cache_offset)
  draft_cache = _expand_batch(draft_cache, num_decodes, cache_offset)
  temp = temperature if static_greedy else _per_row(temperature, batch, num_decodes,
                                                    jnp.float32)
  greedy = True if static_greedy else temp <= MIN_TEMPERATURE  # True: static, no RNG
  limit = jnp.full((flat,), max_decode_len, jnp.int32)
  if max_decode_steps is not None:
    limit = jnp.minimum(limit, _prompt_lengths(inputs) + max_decode_steps)
  steps = jnp.arange(gamma + 1, dtype=jnp.int32)
  zeros = jnp.zeros((flat,), jnp.int32)

  def cond_fn(s):
    return ~jnp.all(s.done)

  def body_fn(s):
    active = ~s.done
    if not static_greedy:  # greedy rounds draw no random numbers
      # [flat, γ + 2]: γ draft samples, the coins, the residual / bonus sample.
      round_keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, s.round),
                                                       gamma + 2))(keys)
    n_drafted = jnp.clip(limit - s.n - 1, 0, gamma)
    # The sequence entries this round can reach (index n+1+i): beyond n they hold
    # forced prompt tokens (non-zero) or 0. Also what the commit keeps where it emits nothing.
    ahead = jnp.take_along_axis(s.sequences, jnp.minimum(s.n[:, None] + 1 + steps,
                                                          max_decode_len), axis=1)
    forced = jnp.where(s.n[:, None] + 1 + steps <= max_decode_len, ahead, 0)

    # Named scopes label each phase in profiles (scripts/profile_round.py).
    with jax.named_scope('draft'):
      draft_tokens, q, draft_cache = draft.draft_block(
          draft_step_fn, s.draft_cache, s.sequences, s.n, gamma, vocab_size, temp, topk,
          topp, None if static_greedy else round_keys[:, :gamma], forced[:, :gamma],
          real_vocab_size)
    with jax.named_scope('verify'):
      logits, target_cache = verify.verify_block(target_step_fn, s.target_cache,
                                                 s.sequences, s.n, draft_tokens)
    is_forced = forced > 0
    if static_greedy:
      # Token ids only: p and q are one-hot, so the rule compares argmaxes and
      # β = Σ min(p, q) is 1 where the draft's token is the target's argmax.
      target_tokens = jnp.where(is_forced, forced, sampling.argmax(logits))
      n_acc, next_token = accept.greedy_accept(draft_tokens, target_tokens, n_drafted)
      beta = (draft_tokens == target_tokens[:, :gamma]).astype(jnp.float32)
    else:
      std_p = sampling.standardize(logits, temp[:, None], topk, topp)
      p = sampling.probs_from_logits(std_p)
      p = jnp.where(is_forced[..., None], jax.nn.one_hot(forced, p.shape[-1]), p)
      n_acc, next_token = accept.accept_and_resample(
          draft_tokens, q, p, n_drafted, greedy, round_keys[:, gamma],
          round_keys[:, gamma + 1])
      beta = accept.acceptance_probability(p[:, :gamma], q)

    # Emitted block: accepted drafts, then the correction / bonus token; cut at EOS.
    emitted = jnp.concatenate([draft_tokens, jnp.zeros_like(next_token[:, None])], axis=1)
    emitted = jnp.where(steps[None] == n_acc[:, None], next_token[:, None], emitted)
    within = steps[None] <= n_acc[:, None]
    is_eos = within & (emitted == eos_id) & ~is_forced
    hit_eos = jnp.any(is_eos, axis=1)
    count = jnp.where(hit_eos, jnp.argmax(is_eos, axis=1) + 1, n_acc + 1)
    count = jnp.where(active, count, 0)
    keep = steps[None] < count[:, None]

    # Commit: write emitted tokens at sequence indices n+1 … n+count.
    rows = jnp.arange(flat)[:, None]
    sequences = s.sequences.at[rows, s.n[:, None] + 1 + steps].set(
        jnp.where(keep, emitted, ahead), mode='drop')
    n_new = s.n + count

    if static_greedy and rescale_log_probs:
      token_lp = jnp.zeros(emitted.shape, jnp.float32)  # log 1 under one-hot p
    else:
      token_lp = jnp.take_along_axis(
          jax.nn.log_softmax(std_p if rescale_log_probs else logits), emitted[..., None],
          axis=-1)[..., 0]
    log_prob = s.log_prob + jnp.sum(jnp.where(keep & ~is_forced, token_lp, 0.0), axis=1)
    # α is E[β] under the target's prefixes (paper Def. 3.1, Cor. 3.6): score only the
    # positions whose prefix was accepted — up to and including the first rejection.
    n_scored = jnp.minimum(n_acc + 1, n_drafted)
    scored = (steps[None, :gamma] < n_scored[:, None]) & ~is_forced[:, :gamma] & active[:, None]
    done = s.done | (active & (hit_eos | (n_new >= limit)))
    return _SpecLoopState(
        n=n_new, sequences=sequences, target_cache=target_cache, draft_cache=draft_cache,
        done=done, round=s.round + 1, log_prob=log_prob,
        target_calls=s.target_calls + active,
        drafted=s.drafted + jnp.where(active, n_drafted, 0),
        accepted=s.accepted + jnp.where(active, n_acc, 0),
        alpha_sum=s.alpha_sum + jnp.sum(jnp.where(scored, beta, 0.0), axis=1),
        alpha_count=s.alpha_count + jnp.sum(scored, axis=1))

  sequences0 = jnp.concatenate([jnp.zeros((flat, 1), jnp.int32), inputs], axis=1)
  state0 = _SpecLoopState(
      n=zeros, sequences=sequences0, target_cache=target_cache, draft_cache=draft_cache,
      done=limit <= 0, round=jnp.zeros((), jnp.int32),
      log_prob=jnp.zeros((flat,), jnp.float32), target_calls=zeros, drafted=zeros,
      accepted=zeros, alpha_sum=jnp.zeros((flat,), jnp.float32), alpha_count=zeros)
  final = jax.lax.while_loop(cond_fn, body_fn, state0)
  decodes, log_probs, order = _sort_decodes(final.sequences[:, 1:], final.log_prob, batch,
                                            num_decodes)

  def per_decode(x):
    return jnp.take_along_axis(x.reshape(batch, num_decodes), order, axis=1)
  stats = SpeculativeStats(
      target_calls=per_decode(final.target_calls), drafted=per_decode(final.drafted),
      accepted=per_decode(final.accepted), alpha_sum=per_decode(final.alpha_sum),
      alpha_count=per_decode(final.alpha_count), tokens=per_decode(final.n))
  return decodes, log_probs, stats
