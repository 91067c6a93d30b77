"""Speculative sampling (Leviathan et al. 2023, Algorithm 1) in one `lax.while_loop`.

One round, per row: a drafter (`drafters.py`; by default the draft model through
`draft.draft_block`) proposes up to γ tokens, `verify.verify_block`
scores them in one (γ+1)-token target call, `accept` keeps a prefix and draws one
more token, and the commit below writes the emitted tokens and advances the row.
Rows advance by their own counts; finished rows keep computing but commit nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp

from specdec_jax.decoding import accept
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.decoding import loop_common
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.decoding import verify

MIN_TEMPERATURE = sampling.MIN_TEMPERATURE


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
  def mean_draft_length(self):
    """Mean draft length per round (drafted / target calls), per row."""
    return self.drafted / self.target_calls

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
  prev: jax.Array  # [B] decoder input d_{n-1} (0 while n = 0)
  cur: jax.Array  # [B] decoder input d_n (0 while n = 0)
  sequences: jax.Array  # [B, L + 1], index 0 = start token 0
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
  budget: jax.Array  # [B] the next round's draft length (adaptive policies)


def speculative_sample(inputs, target_cache, target_step_fn: Callable, draft_cache,
                       draft_step_fn: Callable, eos_id: int, gamma: int,
                       vocab_size: int, decode_rng=None, num_decodes: int = 1,
                       temperature=1.0, topk: int = 0, topp=0.0,
                       max_decode_steps: Optional[int] = None,
                       real_vocab_size: Optional[int] = None,
                       rescale_log_probs: bool = True, cache_offset: int = 0,
                       prompt_free: bool = False, per_row_greedy: bool = True,
                       draft_policy=None, verification: str = 'token', drafter=None,
                       lenience: float = 1.0, initial_index=None, suppress_ids=()):
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
      least max(max_decode_len, γ+1) positions (`generate.cache_length`).
    target_step_fn, draft_step_fn: k-token cached calls
      `(tokens [B, k], lengths [B], cache) -> (logits [B, k, V], cache)`.
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
    prompt_free: static promise that `inputs` holds no forced token at or after each
      row's start (all zeros; or, with `initial_index`, zeros after the prompt); the
      round then reads no forced tokens (`generate` sets it; a speed option).
    per_row_greedy: static; False promises that no row's temperature is ≤ 1e-4 when
      `temperature` is an array (skips the per-row greedy branches).
    draft_policy: how many tokens each row drafts per round, within [1, γ]: a
      `policies.DraftPolicy`, a kind name ('constant', 'heuristic', 'confidence',
      'optimal') or None (constant γ, the paper's algorithm). With an adaptive policy
      drafting stops early (a nested while_loop) and the verify call covers only the
      widest row's drafts (`verify.verify_block_adaptive`).
    verification: 'token' (default: Algorithm 1, each draft accepted or rejected in turn,
      stop at the first rejection) or 'block' (Sun et al., ICLR 2025, Algorithm 2:
      the accepted length is decided jointly from the same p and q —
      `accept.block_accept_and_resample`); both are exact, 'block' accepts at least as
      many tokens in expectation, and at temperature 0 both are the greedy rule.
    drafter: None (the draft model: `draft_step_fn` on `draft_cache`) or a drafter from
      `drafters` (`LookupDrafter`, `NgramTableDrafter`, `LookupThenModel`, or a
      `ModelDrafter`); `draft_cache` is then the drafter's state and `draft_step_fn` is
      unused. Any drafter keeps the output exact (Theorem 3.5 holds for any q).
    lenience: l in (0, 1] (paper Appendix A.5): the acceptance test uses l·q instead of
      q (accept x when u·l·q(x) < p(x)) and the residual is norm(max(0, p − l·q)).
      1 (default) is the exact rule; l < 1 accepts more drafts and is NOT exact: the
      output no longer follows the target's distribution. Token verification only; no
      effect on greedy rows.
    initial_index: optional int32 `[batch]` (T5X's argument of the same name): row b
      starts with `initial_index[b]` = m committed tokens, its forced prompt `inputs[b,
      :m]`, and both caches valid below position m (a decoder-only model's prefilled
      prompt, `models.decoder_only.prefill_cache`); its first round re-feeds x_m and
      the draft model's first call does not re-feed x_{m−1}, so a prefix-LM prompt's
      prefilled keys/values are kept. None: start at 0 (an encoder–decoder decode).
    suppress_ids: token ids neither model may emit (e.g. sentinels, the unknown piece):
      their logits are set to NEG_INF in the target's and the draft model's logits before
      standardization (`sampling.suppress`), so the output is exactly the target's
      distribution with those ids removed (and, at temperature 0, the greedy tokens of
      `temperature_sample(..., suppress_ids=)`). Default: none (T5X's behaviour).
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32,
      log_probs [batch, num_decodes] float32, stats SpeculativeStats)`.
  Raises:
    ValueError: before compiling, for γ < 1, a cache shorter than `max_decode_len`,
      topk and topp both set, a negative temperature, bad num_decodes, an unknown
      verification, a lenience outside (0, 1] or with verification='block', a
      suppress_ids entry that is not an id of the vocabulary.
  """
  accept.check_verification(verification)
  suppress_ids = sampling.check_suppress_ids(suppress_ids, vocab_size)
  target_step_fn = sampling.suppressing(target_step_fn, suppress_ids)
  lenience = accept.check_lenience(lenience, verification)
  loop_common.check_common(inputs, eos_id, num_decodes, temperature, topk, topp,
                           max_decode_steps)
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  policy = policies.as_policy(draft_policy)
  policies.check_costs(policy.verify_costs(gamma), gamma)
  if drafter is None:
    drafter = drafters_lib.ModelDrafter(draft_step_fn, policy if policy.adaptive else None)
  drafter = drafters_lib.with_suppressed_ids(drafter, suppress_ids)
  adaptive_width = policy.adaptive or drafter.adaptive_width
  batch, max_decode_len = inputs.shape
  need = max(max_decode_len, gamma + 1)  # a verify call writes γ + 1 positions
  for name, c in (('target_cache', target_cache), ('draft_cache', draft_cache)):
    length = getattr(c, 'max_length', None)
    if length is not None and length < need:
      raise ValueError(f'{name} holds {length} positions but max(max_decode_len, γ + 1) is '
                       f'{need}; build it with max_length >= {need} '
                       '(generate.cache_length(max_decode_len, gamma)).')

  static_greedy = sampling.is_static_greedy(temperature)
  if isinstance(temperature, (int, float)) and not static_greedy:
    per_row_greedy = False  # one temperature > 1e-4 for every row
  flat = batch * num_decodes
  keys = loop_common.row_keys(decode_rng, batch, num_decodes)
  inputs = loop_common.expand_batch(jnp.asarray(inputs, jnp.int32), num_decodes)
  target_cache = loop_common.expand_batch(target_cache, num_decodes, cache_offset)
  draft_cache = drafter.expand(draft_cache, num_decodes, cache_offset)
  temp = temperature if static_greedy else loop_common.per_row(temperature, batch,
                                                               num_decodes, jnp.float32)
  if static_greedy:
    greedy = True  # static: no random numbers at all
  elif per_row_greedy:
    greedy = temp <= MIN_TEMPERATURE
  else:
    greedy = False
  limit = jnp.full((flat,), max_decode_len, jnp.int32)
  if max_decode_steps is not None:
    limit = jnp.minimum(limit, loop_common.prompt_lengths(inputs) + max_decode_steps)
  steps = jnp.arange(gamma + 1, dtype=jnp.int32)
  zeros = jnp.zeros((flat,), jnp.int32)
  sequences0 = jnp.concatenate([jnp.zeros((flat, 1), jnp.int32), inputs], axis=1)
  if initial_index is None:
    n0 = None
    start_n, start_cur, start_prev = zeros, zeros, zeros
  else:
    n0 = jnp.clip(loop_common.per_row(initial_index, batch, num_decodes, jnp.int32), 0,
                  max_decode_len)
    start_n = n0
    start_cur = jnp.take_along_axis(sequences0, n0[:, None], axis=1)[:, 0]
    start_prev = jnp.take_along_axis(sequences0, jnp.maximum(n0 - 1, 0)[:, None], axis=1)[:, 0]

  uniforms = None
  if not static_greedy:
    # Every round's random numbers, drawn before the loop in one PRNG call (a threefry
    # call is a loop of its own on CPU): [flat, rounds, 3γ + 2] uniforms, per round 2
    # per draft sample, γ coins and 2 for the residual / bonus sample. A round emits
    # at least one token per active row, so there are at most max_decode_len rounds.
    uniforms = jax.vmap(lambda k: jax.random.uniform(k, (max_decode_len, 3 * gamma + 2)))(keys)

  def cond_fn(s):
    return ~jnp.all(s.done)

  def body_fn(s):
    active = ~s.done
    draft_u = coins = resample_u = None
    if not static_greedy:  # greedy rounds draw no random numbers
      u = jax.lax.dynamic_index_in_dim(uniforms, jnp.minimum(s.round, max_decode_len - 1),
                                       axis=1, keepdims=False)
      draft_u = u[:, :2 * gamma].reshape(flat, gamma, 2)
      coins, resample_u = u[:, 2 * gamma:3 * gamma], u[:, 3 * gamma:]
    n_drafted = jnp.clip(limit - s.n - 1, 0, gamma)
    if policy.adaptive:  # finished rows draft nothing, so the nested draft loop ends early
      n_drafted = jnp.where(active, jnp.minimum(n_drafted, s.budget), 0)
    if prompt_free:
      forced = None
    else:
      # The sequence entries this round can reach (index n+1+i): beyond n they hold
      # forced prompt tokens (non-zero) or 0.
      idx = s.n[:, None] + 1 + steps
      ahead = jnp.take_along_axis(s.sequences, jnp.minimum(idx, max_decode_len), axis=1)
      forced = jnp.where(idx <= max_decode_len, ahead, 0)

    # Named scopes label each phase in profiles (scripts/profile_round.py).
    draft_forced = None if forced is None else forced[:, :gamma]
    round_info = drafters_lib.Round(
        prev=s.prev, cur=s.cur, n=s.n, sequences=s.sequences, n_drafted=n_drafted,
        forced=draft_forced, uniforms=draft_u, temperature=temp, topk=topk, topp=topp,
        vocab_size=vocab_size, real_vocab_size=real_vocab_size,
        may_be_greedy=per_row_greedy, active=active, n0=n0)
    with jax.named_scope('draft'):
      draft_tokens, q, n_drafted, draft_cache = drafter.draft(s.draft_cache, round_info,
                                                              gamma)
    with jax.named_scope('verify'):
      if adaptive_width:
        width = jnp.max(jnp.where(active, n_drafted, 0)) + 1
        logits, target_cache = verify.verify_block_adaptive(
            target_step_fn, s.target_cache, s.cur, s.n, draft_tokens, width)
      else:
        logits, target_cache = verify.verify_block(target_step_fn, s.target_cache, s.cur,
                                                   s.n, draft_tokens)
    with jax.named_scope('accept'):
      if static_greedy:
        # Token ids only: p and q are one-hot, so the rule compares argmaxes and
        # β = Σ min(p, q) is 1 where the draft's token is the target's argmax.
        target_tokens = sampling.argmax(logits)
        if forced is not None:
          target_tokens = jnp.where(forced > 0, forced, target_tokens)
        n_acc, next_token = accept.greedy_accept(draft_tokens, target_tokens, n_drafted)
        beta = (draft_tokens == target_tokens[:, :gamma]).astype(jnp.float32)
        std_p = None
      else:
        std_p = sampling.standardize(logits, temp[:, None], topk, topp,
                                     may_be_greedy=per_row_greedy)
        p = sampling.probs_from_logits(std_p)
        if forced is not None:
          p = jnp.where((forced > 0)[..., None], jax.nn.one_hot(forced, p.shape[-1]), p)
        if verification == 'block' and drafter.deterministic:  # q one-hot: closed form
          n_acc, next_token = accept.block_accept_one_hot(draft_tokens, p, n_drafted, greedy,
                                                          coins, resample_u)
        elif verification == 'block':
          n_acc, next_token = accept.block_accept_and_resample(
              draft_tokens, q, p, n_drafted, greedy, coins, resample_u)
        else:
          n_acc, next_token = accept.accept_and_resample(
              draft_tokens, q, p, n_drafted, greedy, coins, resample_u, lenience=lenience)
        beta = accept.acceptance_probability(p[:, :gamma], q)

    with jax.named_scope('commit'):
      # Emitted block: accepted drafts, then the correction / bonus token; cut at EOS.
      emitted = jnp.concatenate([draft_tokens, next_token[:, None]], axis=1)
      emitted = jnp.where(steps[None] == n_acc[:, None], next_token[:, None], emitted)
      within = steps[None] <= n_acc[:, None]
      is_forced = jnp.zeros_like(within) if forced is None else forced > 0
      is_eos = within & (emitted == eos_id) & ~is_forced
      hit_eos = jnp.any(is_eos, axis=1)
      count = jnp.where(hit_eos, jnp.argmax(is_eos, axis=1) + 1, n_acc + 1)
      count = jnp.where(active, count, 0)
      keep = steps[None] < count[:, None]

      # Write emitted tokens at sequence indices n+1 … n+count; beyond, what was there
      # (forced prompt tokens or 0) stays.
      rows = jnp.arange(flat)[:, None]
      fill = jnp.zeros_like(emitted) if forced is None else forced
      sequences = s.sequences.at[rows, s.n[:, None] + 1 + steps].set(
          jnp.where(keep, emitted, fill), mode='drop')
      n_new = s.n + count
      last = jnp.take_along_axis(emitted, jnp.maximum(count - 1, 0)[:, None], axis=1)[:, 0]
      before = jnp.take_along_axis(emitted, jnp.maximum(count - 2, 0)[:, None], axis=1)[:, 0]
      cur = jnp.where(count > 0, last, s.cur)
      prev = jnp.where(count > 1, before, jnp.where(count > 0, s.cur, s.prev))

      if static_greedy and rescale_log_probs:
        token_lp = jnp.zeros(emitted.shape, jnp.float32)  # log 1 under one-hot p
      else:
        token_lp = jnp.take_along_axis(
            jax.nn.log_softmax(std_p if rescale_log_probs else logits), emitted[..., None],
            axis=-1)[..., 0]
      log_prob = s.log_prob + jnp.sum(jnp.where(keep & ~is_forced, token_lp, 0.0), axis=1)
      # α is E[β] under the target's prefixes (paper Def. 3.1, Cor. 3.6): score only the
      # positions whose prefix was accepted — up to and including the first rejection.
      # Under verification='block' the same positions are scored up to block's accepted
      # length τ (+1), whose prefixes are the emitted ones: β is the same quantity (a
      # property of p and q), but which positions get scored follows the rule, so α
      # estimates from the two rules differ a little on the same text.
      n_scored = jnp.minimum(n_acc + 1, n_drafted)
      scored = ((steps[None, :gamma] < n_scored[:, None]) & ~is_forced[:, :gamma] &
                active[:, None])
      done = s.done | (active & (hit_eos | (n_new >= limit)))
      alpha_sum = s.alpha_sum + jnp.sum(jnp.where(scored, beta, 0.0), axis=1)
      alpha_count = s.alpha_count + jnp.sum(scored, axis=1)
      draft_cache = drafter.after_round(draft_cache, round_info, n_new, n_acc)
      budget = s.budget
      if policy.adaptive:
        budget = jnp.where(active, policies.next_budget(policy, gamma, s.budget, n_drafted,
                                                        n_acc, alpha_sum, alpha_count),
                           s.budget)
    return _SpecLoopState(
        n=n_new, prev=prev, cur=cur, sequences=sequences, target_cache=target_cache,
        draft_cache=draft_cache, done=done, round=s.round + 1, log_prob=log_prob,
        target_calls=s.target_calls + active,
        drafted=s.drafted + jnp.where(active, n_drafted, 0),
        accepted=s.accepted + jnp.where(active, n_acc, 0),
        alpha_sum=alpha_sum, alpha_count=alpha_count, budget=budget)

  state0 = _SpecLoopState(
      n=start_n, prev=start_prev, cur=start_cur, sequences=sequences0,
      target_cache=target_cache, draft_cache=draft_cache, done=start_n >= limit,
      round=jnp.zeros((), jnp.int32),
      log_prob=jnp.zeros((flat,), jnp.float32), target_calls=zeros, drafted=zeros,
      accepted=zeros, alpha_sum=jnp.zeros((flat,), jnp.float32), alpha_count=zeros,
      budget=policies.initial_budget(policy, gamma, flat))
  final = jax.lax.while_loop(cond_fn, body_fn, state0)
  decodes, log_probs, order = loop_common.sort_decodes(final.sequences[:, 1:], final.log_prob,
                                                       batch, num_decodes)

  def per_decode(x):
    return jnp.take_along_axis(x.reshape(batch, num_decodes), order, axis=1)
  stats = SpeculativeStats(
      target_calls=per_decode(final.target_calls), drafted=per_decode(final.drafted),
      accepted=per_decode(final.accepted), alpha_sum=per_decode(final.alpha_sum),
      alpha_count=per_decode(final.alpha_count), tokens=per_decode(final.n))
  return decodes, log_probs, stats
