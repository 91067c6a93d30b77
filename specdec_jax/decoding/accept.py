"""The accept/resample rule of speculative sampling (Leviathan et al. 2023, Algorithm 1).

Pure functions on arrays. For a row with draft tokens x_1..x_γ sampled from the
draft's standardized distributions q_1..q_γ and the target's standardized
distributions p_1..p_{γ+1} at the same positions:

* draft token i is accepted with probability min(1, p_i(x_i) / q_i(x_i));
* at the first rejection j the next token is sampled from the residual
  norm(max(0, p_j − q_j)) (paper §2.3, Theorem 3.5: the emitted token then has
  distribution exactly p_j);
* if every drafted token is accepted, a bonus token is sampled from p_{γ+1}.

Greedy rows (one-hot p and q) reduce to "accept while x_i = argmax p_i, then emit
argmax p_j", and their result never depends on the random numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specdec_jax.decoding import sampling


def residual_distribution(p, q):
  """norm(max(0, p − q)) over the last axis (paper §2.3).

  Args:
    p, q: float `[..., vocab]` probability vectors.
  Returns:
    `[..., vocab]` probabilities. Where p ≤ q everywhere (possible only through
    rounding, as a rejection then has probability 0) it returns p.
  """
  r = jnp.maximum(p - q, 0.0)
  total = jnp.sum(r, axis=-1, keepdims=True)
  return jnp.where(total > 0, r / jnp.where(total > 0, total, 1.0), p)


def acceptance_probability(p, q):
  """β = Σ_x min(p(x), q(x)): the probability a draft from q is accepted (paper Def. 3.1)."""
  return jnp.sum(jnp.minimum(p, q), axis=-1)


def greedy_accept(draft_tokens, target_tokens, n_drafted):
  """Algorithm 1 at temperature 0, on token ids only (no vocab-sized arrays).

  With one-hot p and q, draft i is accepted iff x_i = argmax p_i (min(1, p/q) is 1
  or 0) and the next token is argmax p at the first rejection, or the bonus argmax.

  Args:
    draft_tokens: int32 `[batch, gamma]`.
    target_tokens: int32 `[batch, gamma + 1]`, the target's argmax at each position
      (forced prompt tokens already substituted).
    n_drafted: int32 `[batch]` in [0, gamma], as in `accept_and_resample`.
  Returns:
    `(n_accepted [batch] int32, next_token [batch] int32)`, identical to
    `accept_and_resample` with one-hot p and q and greedy rows.
  """
  gamma = draft_tokens.shape[1]
  ok = (draft_tokens == target_tokens[:, :gamma]) & (
      jnp.arange(gamma)[None, :] < n_drafted[:, None])
  n_accepted = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1)
  next_token = jnp.take_along_axis(target_tokens, n_accepted[:, None], axis=1)[:, 0]
  return n_accepted.astype(jnp.int32), next_token.astype(jnp.int32)


def accept_and_resample(draft_tokens, q, p, n_drafted, greedy, coins, resample_u):
  """Applies Algorithm 1's acceptance test and draws the next token, per row.

  Args:
    draft_tokens: int32 `[batch, gamma]`, x_i sampled from q_i.
    q: float32 `[batch, gamma, vocab]`, the draft's standardized distributions.
    p: float32 `[batch, gamma + 1, vocab]`, the target's standardized distributions.
    n_drafted: int32 `[batch]` in [0, gamma]: drafts beyond it are not considered
      (γ shrunk near the length budget); after n_drafted accepted drafts the next
      token is a bonus sample from p at that position.
    greedy: bool `[batch]`: temperature 0 rows (accept iff x_i = argmax p_i), or the
      Python value True when every row is greedy (then no random numbers are drawn),
      or False when no row is (then no argmax of p is taken).
    coins: float32 `[batch, gamma]` uniforms in [0, 1), one per draft (unused when
      `greedy` is True).
    resample_u: float32 `[batch, 2]` uniforms in [0, 1) for the residual / bonus
      sample (`sampling.inverse_cdf`; unused when `greedy` is True).
  Returns:
    `(n_accepted [batch] int32, next_token [batch] int32)`.
  """
  gamma = draft_tokens.shape[1]
  p_draft = p[:, :gamma]
  p_x = jnp.take_along_axis(p_draft, draft_tokens[..., None], axis=-1)[..., 0]
  q_x = jnp.take_along_axis(q, draft_tokens[..., None], axis=-1)[..., 0]
  all_greedy, none_greedy = greedy is True, greedy is False
  if all_greedy:
    ok = draft_tokens == sampling.argmax(p_draft)
  else:
    ok = coins * q_x < p_x  # u < p/q without dividing by q.
    if not none_greedy:
      ok = jnp.where(greedy[:, None], draft_tokens == sampling.argmax(p_draft), ok)
  ok &= jnp.arange(gamma)[None, :] < n_drafted[:, None]
  n_accepted = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1)

  p_next = jnp.take_along_axis(p, n_accepted[:, None, None], axis=1)[:, 0]
  if all_greedy:
    return n_accepted.astype(jnp.int32), sampling.argmax(p_next)
  # q at the first rejection (unused, and clipped into range, when nothing was rejected).
  q_next = jnp.take_along_axis(q, jnp.minimum(n_accepted, gamma - 1)[:, None, None],
                               axis=1)[:, 0]
  rejected = n_accepted < n_drafted
  dist = jnp.where(rejected[:, None], residual_distribution(p_next, q_next), p_next)
  sampled = sampling.inverse_cdf(resample_u, dist)
  if none_greedy:
    return n_accepted.astype(jnp.int32), sampled
  return n_accepted.astype(jnp.int32), jnp.where(greedy, sampling.argmax(p_next), sampled)
