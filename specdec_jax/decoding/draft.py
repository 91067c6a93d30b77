"""Draft phase: γ tokens from the small model, one cached call at a time.

Cache bookkeeping (the draft cache invariant): at the start of a round a row has `n`
committed tokens and its decoder inputs are d_0 = 0, d_t = y_t. The draft's cache is
valid for positions < n − 1 (when all γ drafts were accepted last round the draft
never consumed the last accepted one). The first call therefore feeds the last two
inputs (d_{n−1}, d_n) at positions n−1, n — re-feeding a token at its own position
rewrites the same keys and values — and reads the logits of d_n. For n = 0 it feeds
(d_0, 0) at positions 0, 1 and reads position 0; the extra slot is overwritten later.
The two inputs come from the loop state (`prev`, `cur`), so no gather of the
sequence is needed.

A decode that starts from a prefilled prompt (`n0`, the rows' initial committed
counts: the draft's cache is then valid below n0) feeds (d_n, 0) at positions n, n+1 in
the first round instead, so the prompt's prefilled keys/values — bidirectional ones in
prefix-LM mode — are never rewritten by a causal re-feed. With n0 = 0 this is the same
call as above.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from specdec_jax.decoding import sampling

StepFn = Callable  # (tokens [B, k], lengths [B], cache) -> (logits [B, k, V], cache)


def _first_call(step_fn, cache, prev, cur, n, n0):
  """The round's first draft call (module docstring): logits `[B, V]` of d_n, cache."""
  if n0 is None:
    start = jnp.maximum(n - 1, 0)
    tokens = jnp.stack([prev, cur], axis=1)
  else:
    fresh = n == n0  # the cache is valid below n: no re-feed
    start = jnp.where(fresh, n, jnp.maximum(n - 1, 0))
    tokens = jnp.where(fresh[:, None], jnp.stack([cur, jnp.zeros_like(cur)], axis=1),
                       jnp.stack([prev, cur], axis=1))
  logits, cache = step_fn(tokens, start, cache)
  return jnp.take_along_axis(logits, (n - start)[:, None, None], axis=1)[:, 0], cache


def draft_block(step_fn: StepFn, cache, prev, cur, n, gamma: int, vocab_size: int,
                temperature, topk, topp, uniforms, forced_tokens: Optional[jax.Array] = None,
                real_vocab_size=None, may_be_greedy: bool = True, n0=None):
  """Proposes `gamma` tokens per row with the draft model.

  Args:
    step_fn: the draft's k-token cached call.
    cache: the draft's cache.
    prev, cur: int32 `[batch]`, the decoder inputs d_{n−1} and d_n (both 0 when n = 0).
    n: int32 `[batch]` committed tokens per row.
    gamma: static number of drafts.
    vocab_size: the target's vocabulary size (draft logits are padded/truncated to it).
    temperature: a static Python number (≤ 1e-4: greedy) or float32 `[batch]`.
    topk, topp: standardization, as for the target.
    uniforms: float32 `[batch, gamma, 2]` in [0, 1), two per draft sample for
      `sampling.inverse_cdf` (unused, may be None, when `temperature` is a static
      greedy value).
    forced_tokens: optional int32 `[batch, gamma]`, non-zero where the position holds a
      forced prompt token (then that token is "drafted" with q = one-hot); None when
      the decode has no prompt.
    real_vocab_size: optional; draft ids at or beyond it get probability 0.
    may_be_greedy: static; False when no row can be greedy (see `sampling.standardize`).
    n0: optional int32 `[batch]`, the committed counts the decode started from (a
      prefilled prompt; module docstring); None = 0.
  Returns:
    `(draft_tokens [batch, gamma] int32, q [batch, gamma, vocab_size] float32, cache)`;
    q is None when `temperature` is a static greedy value (argmax drafting: q would
    be one-hot, and the greedy rule only compares tokens).
  """
  static_greedy = sampling.is_static_greedy(temperature)
  propose = _proposer(vocab_size, temperature, topk, topp, uniforms, forced_tokens,
                      real_vocab_size, may_be_greedy)

  logits, cache = _first_call(step_fn, cache, prev, cur, n, n0)
  token, q, _ = propose(logits, 0)

  # γ is static and small: an unrolled Python loop. On the demo pair (CPU, γ = 4) it
  # made a round 15 % faster than a lax.scan nested in the decoding while_loop.
  tokens, qs = [token], [q]
  for i in range(1, gamma):
    logits, cache = step_fn(token[:, None], n + i, cache)
    token, q, _ = propose(logits[:, 0], i)
    tokens.append(token)
    qs.append(q)
  q = None if static_greedy else jnp.stack(qs, axis=1)
  return jnp.stack(tokens, axis=1), q, cache


def _proposer(vocab_size, temperature, topk, topp, uniforms, forced_tokens, real_vocab_size,
              may_be_greedy, want_confidence: bool = False):
  """`propose(logits [B, V], i) -> (token [B], q [B, V] or None, confidence [B] or None)`.

  confidence = the draft distribution's top probability (computed when asked): at
  temperature 0 that of softmax(logits), otherwise max q. It depends on the draft's
  distribution only, never on the sampled token.
  """
  static_greedy = sampling.is_static_greedy(temperature)

  def propose(logits, i):
    logits = sampling.match_vocab(logits, vocab_size, real_vocab_size)
    forced = None if forced_tokens is None else forced_tokens[:, i]
    if static_greedy:  # argmax only: no vocab-sized distribution is needed.
      token = sampling.argmax(logits)
      conf = None
      if want_confidence:
        conf = jnp.exp(jnp.max(logits, -1) - jax.nn.logsumexp(logits, -1))
      if forced is not None:
        token = jnp.where(forced > 0, forced, token)
        conf = None if conf is None else jnp.where(forced > 0, 1.0, conf)
      return token, None, conf
    std = sampling.standardize(logits, temperature, topk, topp, may_be_greedy=may_be_greedy)
    q = sampling.probs_from_logits(std)
    token = sampling.inverse_cdf(uniforms[:, i], q)  # no vocab-sized noise
    if forced is not None:
      token = jnp.where(forced > 0, forced, token)
      q = jnp.where((forced > 0)[:, None], jax.nn.one_hot(forced, vocab_size), q)
    return token, q, (jnp.max(q, -1) if want_confidence else None)
  return propose


def draft_block_adaptive(step_fn: StepFn, cache, prev, cur, n, gamma: int, budget,
                         vocab_size: int, temperature, topk, topp, uniforms,
                         forced_tokens: Optional[jax.Array] = None, real_vocab_size=None,
                         may_be_greedy: bool = True, threshold: Optional[float] = None,
                         n0=None):
  """Drafts up to `gamma` tokens per row, each row stopping at its own length.

  Row b drafts `budget[b]` tokens (at least 1 when budget > 0) or, with `threshold`,
  stops after the first token whose draft distribution's top probability is below
  it. The draft calls run in a nested `lax.while_loop` that ends as soon as no row
  drafts any more, so a batch whose rows all stop early makes fewer draft calls.

  Args:
    budget: int32 `[batch]` in [0, gamma], the most tokens each row may draft.
    threshold: optional confidence threshold (the `confidence` policy).
    Others as `draft_block`.
  Returns:
    `(draft_tokens [batch, gamma], q [batch, gamma, vocab] or None, drafted [batch],
    cache)`: entries at or beyond `drafted[b]` are not drafts (ignore them).
  """
  static_greedy = sampling.is_static_greedy(temperature)
  propose = _proposer(vocab_size, temperature, topk, topp, uniforms, forced_tokens,
                      real_vocab_size, may_be_greedy, want_confidence=threshold is not None)
  batch = n.shape[0]
  logits, cache = _first_call(step_fn, cache, prev, cur, n, n0)
  token, q, conf = propose(logits, 0)
  tokens = jnp.zeros((batch, gamma), jnp.int32).at[:, 0].set(token)
  qs = None if static_greedy else jnp.zeros((batch, gamma, vocab_size), q.dtype).at[:, 0].set(q)
  drafting = budget > 1  # row drafts position i = 1 next
  if threshold is not None:
    drafting &= conf >= threshold
  drafted = jnp.minimum(budget, 1)

  def cond(c):
    i, _, _, _, drafting, _, _ = c
    return (i < gamma) & jnp.any(drafting)

  def body(c):
    i, token, tokens, qs, drafting, drafted, cache = c
    logits, cache = step_fn(token[:, None], n + i, cache)
    new, q, conf = propose(logits[:, 0], i)
    tokens = jax.lax.dynamic_update_slice(tokens, new[:, None], (0, i))
    if qs is not None:
      qs = jax.lax.dynamic_update_slice(qs, q[:, None], (0, i, 0))
    drafted = jnp.where(drafting, i + 1, drafted)
    still = drafting & (i + 1 < budget)
    if threshold is not None:
      still &= conf >= threshold
    return i + 1, new, tokens, qs, still, drafted, cache

  _, _, tokens, qs, _, drafted, cache = jax.lax.while_loop(
      cond, body, (jnp.int32(1), token, tokens, qs, drafting, drafted, cache))
  return tokens, qs, drafted, cache
