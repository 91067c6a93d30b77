"""Drafters: what proposes a round's draft tokens inside the compiled loop.

The paper's draft is any approximation model M_q (§2.3): exactness (Theorem 3.5) needs
only that each drafted token x_i is a sample from the distribution q_i that the accept
rule is given (one-hot q for a deterministic drafter). A drafter is therefore a static
(hashable) object with

    drafter.draft(state, round, gamma) -> (tokens [B, γ] int32,
                                           q [B, γ, V] float32 or None,
                                           n_drafted [B] int32, state)

where `state` is the pytree it carries through the `lax.while_loop` (a model's cache,
tables, the source tokens) and `round` (`Round`) is what the loop knows before drafting:
the committed text, the length budget, the random numbers. q is None when the decode
is statically greedy (the greedy rule compares tokens only). Entries at or beyond
`n_drafted[b]` are not drafts. The verify and accept steps do not depend on the drafter.

Drafters here:
  `ModelDrafter`       a second neural model with its own cache (the paper's M_q; the
                       code path of `draft.draft_block`, unchanged).
  `NgramTableDrafter`  unigram / bigram tables (paper Table 3): q(· | previous token) from
                       a table, standardized like the target (temperature, top-k, top-p),
                       so sampled decoding stays exact.
  `LookupDrafter`      n-gram lookup ("prompt lookup decoding", Saxena 2023; the copy
                       drafts of GEC): match the last n committed tokens (n = max_ngram …
                       min_ngram) against the source tokens and the text so far, propose
                       the continuation of the longest, then most recent, match; one-hot q.
  `LookupThenModel`    lookup where it matches, else the model draft, chosen per row per
                       round from the committed text only (so still exact).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from specdec_jax.decoding import draft as draft_lib
from specdec_jax.decoding import loop_common
from specdec_jax.decoding import sampling

DRAFTERS = ('model', 'bigram', 'unigram', 'lookup', 'lookup+model')


@dataclasses.dataclass(frozen=True)
class Round:
  """What a drafter may read in one round (built by `speculative_sample`'s loop body).

  Attributes:
    prev, cur: int32 `[B]` decoder inputs d_{n−1}, d_n (0 when n = 0).
    n: int32 `[B]` committed tokens.
    sequences: int32 `[B, L + 1]`: index 0 the start token 0, y_t at index t (t ≤ n
      committed; beyond, forced prompt tokens or 0).
    n_drafted: int32 `[B]` in [0, γ]: the most tokens each row may draft this round (the
      length budget, and the draft policy's budget when it is adaptive).
    forced: int32 `[B, γ]` or None: forced prompt tokens at n+1 … n+γ (0 = free).
    uniforms: float32 `[B, γ, 2]` or None (static greedy): two per draft sample.
    temperature: a static Python number or float32 `[B]`; topk, topp as the target's.
    vocab_size: the target's logits size; real_vocab_size: optional (ids beyond get q 0).
    may_be_greedy: static (see `sampling.standardize`).
    active: bool `[B]`, rows not finished.
    n0: int32 `[B]` or None: the committed tokens each row started with (a prefilled
      prompt's length, `speculative_sample(initial_index=)`); None = 0.
  """
  prev: Any
  cur: Any
  n: Any
  sequences: Any
  n_drafted: Any
  forced: Any
  uniforms: Any
  temperature: Any
  topk: int
  topp: Any
  vocab_size: int
  real_vocab_size: Optional[int]
  may_be_greedy: bool
  active: Any
  n0: Any = None

  @property
  def static_greedy(self) -> bool:
    return sampling.is_static_greedy(self.temperature)


def _one_hot_q(tokens, vocab_size, r: Round):
  return None if r.static_greedy else jax.nn.one_hot(tokens, vocab_size, dtype=jnp.float32)


def _apply_forced(tokens, r: Round):
  return tokens if r.forced is None else jnp.where(r.forced > 0, r.forced, tokens)


# ---------------------------------------------------------------------------- model

@dataclasses.dataclass(frozen=True)
class ModelDrafter:
  """The draft model (paper §2.3): γ single-token cached calls (`draft.draft_block`), or a
  nested loop that stops per row under an adaptive draft policy.

  State: the draft model's cache (its invariant: `draft.py`'s module docstring).
  """
  step_fn: Callable
  policy: Any = None  # policies.DraftPolicy; None = constant γ
  name = 'model'
  deterministic = False

  @property
  def adaptive_width(self) -> bool:
    return self.policy is not None and self.policy.adaptive

  def expand(self, state, num_decodes, cache_offset):
    return loop_common.expand_batch(state, num_decodes, cache_offset)

  def draft(self, state, r: Round, gamma: int):
    forced = None if r.forced is None else r.forced[:, :gamma]
    if self.adaptive_width:
      threshold = self.policy.threshold if self.policy.kind == 'confidence' else None
      tokens, q, n_drafted, state = draft_lib.draft_block_adaptive(
          self.step_fn, state, r.prev, r.cur, r.n, gamma, r.n_drafted, r.vocab_size,
          r.temperature, r.topk, r.topp, r.uniforms, forced, r.real_vocab_size,
          may_be_greedy=r.may_be_greedy, threshold=threshold, n0=r.n0)
      return tokens, q, n_drafted, state
    tokens, q, state = draft_lib.draft_block(
        self.step_fn, state, r.prev, r.cur, r.n, gamma, r.vocab_size, r.temperature, r.topk,
        r.topp, r.uniforms, forced, r.real_vocab_size, may_be_greedy=r.may_be_greedy,
        n0=r.n0)
    return tokens, q, r.n_drafted, state

  def after_round(self, state, r: Round, n_new, used):  # pylint: disable=unused-argument
    return state


# ---------------------------------------------------------------------------- n-gram tables

@dataclasses.dataclass(frozen=True)
class NgramTableDrafter:
  """Unigram or bigram table draft (paper Table 3), sampled like a model's distribution.

  State: `(ids [rows, K] int32, log_probs [rows, K] float32)`: row c lists the K most
  frequent next tokens after token c and their log-probabilities (renormalised over the
  K; ids outside get q = 0, which keeps sampling exact: q need not cover p). A bigram
  table has one row per token id (row 0: after the decoder's start token 0); a unigram
  table has one row, used whatever the context. q is standardized like the target's
  (temperature, then top-k / top-p), so at T = 0 the draft is the table's argmax.
  Write tables with `specdec_jax.drafters.tables` (not part of the core).
  """
  order: int = 2  # 1 = unigram, 2 = bigram
  name = 'bigram'
  deterministic = False
  adaptive_width = False

  def expand(self, state, num_decodes, cache_offset):  # pylint: disable=unused-argument
    return state  # shared by every row

  def draft(self, state, r: Round, gamma: int):
    ids, log_probs = state
    batch = r.n.shape[0]
    rows = ids.shape[0]
    token = r.cur
    tokens, qs = [], []
    for i in range(gamma):
      ctx = jnp.zeros_like(token) if self.order == 1 else jnp.clip(token, 0, rows - 1)
      logits = jnp.full((batch, r.vocab_size), sampling.NEG_INF, jnp.float32)
      logits = logits.at[jnp.arange(batch)[:, None], ids[ctx]].set(log_probs[ctx], mode='drop')
      if r.real_vocab_size is not None:
        logits = jnp.where(jnp.arange(r.vocab_size) < r.real_vocab_size, logits,
                           sampling.NEG_INF)
      if r.static_greedy:
        token = sampling.argmax(logits)
        q = None
      else:
        q = sampling.probs_from_logits(sampling.standardize(
            logits, r.temperature, r.topk, r.topp, may_be_greedy=r.may_be_greedy))
        token = sampling.inverse_cdf(r.uniforms[:, i], q)
      if r.forced is not None:
        token = jnp.where(r.forced[:, i] > 0, r.forced[:, i], token)
        if q is not None:
          q = jnp.where((r.forced[:, i] > 0)[:, None],
                        jax.nn.one_hot(r.forced[:, i], r.vocab_size), q)
      tokens.append(token)
      qs.append(q)
    q = None if r.static_greedy else jnp.stack(qs, axis=1)
    return jnp.stack(tokens, axis=1), q, r.n_drafted, state

  def after_round(self, state, r: Round, n_new, used):  # pylint: disable=unused-argument
    return state


# ---------------------------------------------------------------------------- n-gram lookup

def lookup_continuation(source, sequences, n, gamma: int, max_ngram: int, min_ngram: int):
  """The n-gram lookup proposal, per row, from committed tokens only.

  The haystack is the source tokens followed by the committed text y_1..y_n. The key is
  the last m committed tokens y_{n−m+1}..y_n; a match is a haystack position j whose m
  tokens ending at j equal the key, with at least one token after j in the same segment
  (source: before its padding; text: at most y_n). The longest match (m ≤ max_ngram)
  wins, then the most recent (largest j, so the text so far before the source); the
  proposal is the up to γ tokens after it, within its segment.

  Args:
    source: int32 `[B, S]`, left-aligned, 0 = padding (the encoder input, or a prompt).
    sequences: int32 `[B, L + 1]` as `Round.sequences`.
    n: int32 `[B]` committed tokens.
    gamma, max_ngram, min_ngram: static ints, 1 ≤ min_ngram ≤ max_ngram.
  Returns:
    `(tokens [B, γ] int32, count [B] int32)`: count = 0 where no n-gram of length
    ≥ min_ngram matches (the tokens are then meaningless).
  """
  batch, s_len = source.shape
  text = sequences[:, 1:]
  hay = jnp.concatenate([source, text], axis=1)  # [B, H]
  h_len = hay.shape[1]
  pos = jnp.arange(h_len)[None, :]
  src_len = jnp.sum((source != 0).astype(jnp.int32), axis=1)
  valid = jnp.where(pos < s_len, pos < src_len[:, None], pos - s_len < n[:, None])
  # key[k] = y_{n−k} (sequence index n − k), present while n − k ≥ 1.
  k_idx = n[:, None] - jnp.arange(max_ngram)[None, :]
  key = jnp.take_along_axis(sequences, jnp.maximum(k_idx, 0), axis=1)
  key_ok = k_idx >= 1
  matches = []
  for k in range(max_ngram):  # hay[j − k] == key[k]
    shifted = jnp.pad(hay, ((0, 0), (k, 0)))[:, :h_len]
    shifted_ok = jnp.pad(valid, ((0, 0), (k, 0)))[:, :h_len]
    matches.append((shifted == key[:, k:k + 1]) & shifted_ok & key_ok[:, k:k + 1])
  run = jnp.sum(jnp.cumprod(jnp.stack(matches, -1).astype(jnp.int32), axis=-1), axis=-1)
  seg_end = jnp.where(pos < s_len, src_len[:, None], s_len + n[:, None])
  has_next = pos + 1 < seg_end
  score = jnp.where((run >= min_ngram) & has_next, run * (h_len + 1) + pos, -1)
  best = jnp.argmax(score, axis=1)
  found = jnp.max(score, axis=1) >= 0
  idx = best[:, None] + 1 + jnp.arange(gamma)[None, :]
  tokens = jnp.take_along_axis(hay, jnp.minimum(idx, h_len - 1), axis=1)
  end = jnp.take_along_axis(seg_end, best[:, None], axis=1)[:, 0]
  count = jnp.where(found, jnp.clip(end - best - 1, 0, gamma), 0)
  return tokens.astype(jnp.int32), count.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class LookupDrafter:
  """N-gram lookup in the source and the text so far; deterministic (one-hot q).

  State: the source tokens int32 `[B, S]` (for an encoder–decoder model its encoder
  input; for a decoder-only model its prompt), left-aligned, 0-padded. A row without a
  match drafts nothing this round (its verify call is the one-token step). The verify
  call covers only the widest row's drafts (`verify.verify_block_adaptive`).
  """
  max_ngram: int = 4
  min_ngram: int = 1
  name = 'lookup'
  deterministic = True
  adaptive_width = True

  def __post_init__(self):
    if not (isinstance(self.min_ngram, int) and isinstance(self.max_ngram, int)
            and 1 <= self.min_ngram <= self.max_ngram):
      raise ValueError(f'lookup n-gram lengths must be ints with 1 <= min_ngram <= max_ngram, '
                       f'got min_ngram={self.min_ngram!r}, max_ngram={self.max_ngram!r}.')

  def expand(self, state, num_decodes, cache_offset):  # pylint: disable=unused-argument
    return loop_common.expand_batch(state, num_decodes, 0)

  def propose(self, source, r: Round, gamma: int):
    tokens, count = lookup_continuation(source, r.sequences, r.n, gamma, self.max_ngram,
                                        self.min_ngram)
    tokens = _apply_forced(tokens, r)
    return tokens, jnp.minimum(count, r.n_drafted)

  def draft(self, state, r: Round, gamma: int):
    tokens, n_drafted = self.propose(state, r, gamma)
    return tokens, _one_hot_q(tokens, r.vocab_size, r), n_drafted, state

  def after_round(self, state, r: Round, n_new, used):  # pylint: disable=unused-argument
    return state


# ---------------------------------------------------------------------------- combination

@dataclasses.dataclass(frozen=True)
class LookupThenModel:
  """Lookup where it matches, else the draft model, per row per round.

  The choice depends only on the committed text (whether a lookup match exists), never
  on the tokens drafted, so each row's drafts are samples from the q it reports and the
  output stays exact. When no active row needs the model in a round, the model is not
  called at all. The model's cache then lags behind the text; before the model drafts
  for a row, its cache is caught up over the tokens it missed in (γ+1)-token calls
  (re-feeding committed tokens at their own positions), so its drafts are what the
  model alone would propose.

  State: `(source [B, S], model cache, valid [B])`, valid = positions < it hold the
  committed inputs in the model's cache.
  """
  lookup: LookupDrafter
  model: ModelDrafter
  name = 'lookup+model'
  deterministic = False
  adaptive_width = True

  def expand(self, state, num_decodes, cache_offset):
    source, cache, valid = state
    return (self.lookup.expand(source, num_decodes, 0),
            self.model.expand(cache, num_decodes, cache_offset),
            loop_common.expand_batch(valid, num_decodes, 0))

  @staticmethod
  def initial_valid(batch: int, initial_index=None):
    """`valid` at the start: 0, or the prefilled prompt lengths `initial_index [batch]`."""
    if initial_index is None:
      return jnp.zeros((batch,), jnp.int32)
    return jnp.asarray(initial_index, jnp.int32).reshape((batch,))

  def _catch_up(self, cache, valid, r: Round, need, gamma: int):
    """Feeds committed inputs d_valid … d_{n−2} into the model's cache where `need`."""
    width = gamma + 1  # the widest call every cache fits (a verify call's width)
    max_pos = r.sequences.shape[1] - 1

    def cond(c):
      cache, valid = c
      return jnp.any(need & (valid < r.n - 1))

    def body(c):
      cache, valid = c
      lag = need & (valid < r.n - 1)
      start = jnp.where(lag, valid, jnp.maximum(r.n - 1, 0))
      idx = start[:, None] + jnp.arange(width)[None, :]
      tokens = jnp.take_along_axis(r.sequences, jnp.minimum(idx, max_pos), axis=1)
      _, cache = self.model.step_fn(tokens, start, cache)
      valid = jnp.where(lag, jnp.minimum(start + width, r.n + 1), valid)
      return cache, valid
    return jax.lax.while_loop(cond, body, (cache, valid))

  def draft(self, state, r: Round, gamma: int):
    source, cache, valid = state
    l_tokens, l_count = self.lookup.propose(source, r, gamma)
    use_model = (l_count == 0) & r.active & (r.n_drafted > 0)

    def with_model(cache, valid):
      cache, valid = self._catch_up(cache, valid, r, use_model, gamma)
      m_tokens, q, m_count, cache = self.model.draft(cache, r, gamma)
      return m_tokens, q, m_count, cache, valid

    def without_model(cache, valid):
      zeros = jnp.zeros_like(l_tokens)
      q = None if r.static_greedy else jnp.zeros(l_tokens.shape + (r.vocab_size,),
                                                  jnp.float32)
      return zeros, q, jnp.zeros_like(l_count), cache, valid

    m_tokens, m_q, m_count, cache, valid = jax.lax.cond(
        jnp.any(use_model), with_model, without_model, cache, valid)
    tokens = jnp.where(use_model[:, None], m_tokens, l_tokens)
    n_drafted = jnp.where(use_model, m_count, l_count)
    q = None
    if not r.static_greedy:
      q = jnp.where(use_model[:, None, None], m_q, jax.nn.one_hot(l_tokens, r.vocab_size))
    return tokens, q, n_drafted, (source, cache, jnp.where(use_model, -1 - valid, valid))

  def after_round(self, state, r: Round, n_new, used):  # pylint: disable=unused-argument
    # Rows the model drafted for (marked by a negative `valid` in `draft`) hold committed
    # inputs below n_new − 1 (the draft cache invariant); the others keep their `valid`.
    source, cache, valid = state
    return source, cache, jnp.where(valid < 0, jnp.maximum(n_new - 1, 0), valid)


def with_suppressed_ids(drafter, suppress_ids: tuple[int, ...]):
  """`drafter` whose draft model's logits have `suppress_ids` masked (`sampling.suppress`),
  as the target's are, so q puts no mass where p has none.

  Applies to the model part of `ModelDrafter` and `LookupThenModel`. A table or lookup
  drafter is returned unchanged: a suppressed id it proposes has p = 0 and is always
  rejected, so the output stays exact (Theorem 3.5 holds for any q); it only costs that
  draft.
  """
  if not suppress_ids:
    return drafter
  if isinstance(drafter, ModelDrafter):
    return dataclasses.replace(drafter,
                               step_fn=sampling.suppressing(drafter.step_fn, suppress_ids))
  if isinstance(drafter, LookupThenModel):
    return dataclasses.replace(drafter, model=with_suppressed_ids(drafter.model, suppress_ids))
  return drafter
