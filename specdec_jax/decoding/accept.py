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

Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding",
ICLR 2025, Algorithm 2; `block_accept_and_resample`, and `block_accept_one_hot` for
one-hot drafts) decides the accepted length from the same p and q jointly: exact too,
never fewer accepted tokens in expectation, and the greedy rule at temperature 0.
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


def check_lenience(lenience, verification: str = 'token') -> float:
  """Lenience l (paper Appendix A.5) as a float in (0, 1]; 1 is the exact rule.

  Raises:
    ValueError: l not a number in (0, 1], or l < 1 with verification='block' (block
      verification's stopping rule is defined for the exact test only).
  """
  if (isinstance(lenience, bool) or not isinstance(lenience, (int, float))
      or not 0.0 < lenience <= 1.0):
    raise ValueError(f'lenience must be a number in (0, 1] (1 = exact), got {lenience!r}.')
  if lenience < 1.0 and verification == 'block':
    raise ValueError(f"lenience={lenience} needs verification='token'; block verification "
                     'has no lenient form. Use lenience=1 with block.')
  return float(lenience)


def accept_and_resample(draft_tokens, q, p, n_drafted, greedy, coins, resample_u,
                        lenience: float = 1.0):
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
    lenience: static float l in (0, 1] (paper Appendix A.5): accept with probability
      min(1, p/(l·q)) and resample from norm(max(0, p − l·q)). l = 1 is Algorithm 1;
      l < 1 is NOT exact (more drafts are accepted than the target's distribution allows).
  Returns:
    `(n_accepted [batch] int32, next_token [batch] int32)`.
  """
  gamma = draft_tokens.shape[1]
  if lenience != 1.0:
    q = q * lenience
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


# ------------------------------------------------------------------ block verification

VERIFICATIONS = ('token', 'block')
_BIG = 1e30  # p/q for a token q gives probability 0 (never drafted; kept finite)


def check_verification(verification) -> str:
  """'token' (Algorithm 1, the paper's rule) or 'block' (Sun et al., ICLR 2025).

  Raises:
    ValueError: any other value (the message names both choices).
  """
  if verification not in VERIFICATIONS:
    raise ValueError(f"verification must be 'token' (Leviathan et al., Algorithm 1) or 'block' "
                     f"(Sun et al., ICLR 2025: block verification), got {verification!r}.")
  return verification


def _running_ratio(ratio):
  """P_0 = 1, P_i = min(1, P_{i−1} · ratio_i): `[batch, gamma]` → `[batch, gamma + 1]`."""
  out = [jnp.ones(ratio.shape[:1], ratio.dtype)]
  for i in range(ratio.shape[1]):
    out.append(jnp.minimum(out[-1] * ratio[:, i], 1.0))
  return jnp.stack(out, axis=1)


def _greedy_rule(draft_tokens, p, n_drafted):
  """Algorithm 1 at temperature 0 on full p (both rules reduce to it there)."""
  gamma = draft_tokens.shape[1]
  target_tokens = sampling.argmax(p)
  ok = (draft_tokens == target_tokens[:, :gamma]) & (
      jnp.arange(gamma)[None, :] < n_drafted[:, None])
  n_acc = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)
  return n_acc, jnp.take_along_axis(target_tokens, n_acc[:, None], axis=1)[:, 0]


def _block_finish(weights, stop_h, p, draft_tokens, n_drafted, greedy, coins, resample_u):
  """Shared end of both block forms: τ = the last position that passes, then the
  correction token from the block residual at τ (`weights[:, τ]`, unnormalised)."""
  gamma = draft_tokens.shape[1]
  steps = jnp.arange(1, gamma + 1)[None, :]
  passes = (coins < stop_h) & (steps <= n_drafted[:, None])
  n_acc = jnp.max(jnp.where(passes, steps, 0), axis=1).astype(jnp.int32)
  w = jnp.take_along_axis(weights, n_acc[:, None, None], axis=1)[:, 0]
  total = jnp.sum(w, axis=-1, keepdims=True)
  p_next = jnp.take_along_axis(p, n_acc[:, None, None], axis=1)[:, 0]
  dist = jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), p_next)
  sampled = sampling.inverse_cdf(resample_u, dist)
  if greedy is False:
    return n_acc, sampled
  g_acc, g_next = _greedy_rule(draft_tokens, p, n_drafted)
  return (jnp.where(greedy, g_acc, n_acc).astype(jnp.int32),
          jnp.where(greedy, g_next, sampled))


def block_stop_probabilities(draft_tokens, q, p, n_drafted):
  """Block verification's quantities (Sun et al. 2025, Algorithm 2), per row.

  For drafts x_1..x_m (m = n_drafted) with draft distributions q_i and target
  distributions p_i (p_{m+1} the bonus position; q_{m+1} taken as 0):
    P_0 = 1,  P_i = min(1, P_{i−1} · p_i(x_i) / q_i(x_i));
    r_i(x) = max(0, P_i · p_{i+1}(x) − q_{i+1}(x))   (the residual one position ahead);
    h_i = Σ_x r_i(x) / (Σ_x r_i(x) + 1 − P_i)        (h_m = P_m; 0 where Σ r_i = 0).
  The accepted length τ is the last i ≤ m with η_i ≤ h_i (0 if none) and the next
  token is drawn from r_τ / Σ r_τ (for τ = m that is p_{m+1}).

  Args:
    draft_tokens: int32 `[batch, gamma]`; q: float32 `[batch, gamma, vocab]`;
    p: float32 `[batch, gamma + 1, vocab]`; n_drafted: int32 `[batch]` in [0, gamma].
  Returns:
    `(weights [batch, gamma + 1, vocab]` = r_0..r_γ, `h [batch, gamma]` = h_1..h_γ,
    `P [batch, gamma + 1])`; entries beyond a row's m are meaningless.
  """
  gamma = draft_tokens.shape[1]
  p_x = jnp.take_along_axis(p[:, :gamma], draft_tokens[..., None], axis=-1)[..., 0]
  q_x = jnp.take_along_axis(q, draft_tokens[..., None], axis=-1)[..., 0]
  ratio = jnp.where(q_x > 0, p_x / jnp.where(q_x > 0, q_x, 1.0), jnp.where(p_x > 0, _BIG, 0.0))
  big_p = _running_ratio(ratio)
  q_ahead = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], axis=1)
  q_ahead = jnp.where((jnp.arange(gamma + 1)[None, :] < n_drafted[:, None])[..., None],
                      q_ahead, 0.0)
  weights = jnp.maximum(big_p[..., None] * p - q_ahead, 0.0)
  num = jnp.sum(weights[:, 1:], axis=-1)
  den = num + 1.0 - big_p[:, 1:]
  h = jnp.where(num > 0, num / jnp.where(den > 0, den, 1.0), 0.0)
  return weights, jnp.minimum(h, 1.0), big_p


def block_accept_and_resample(draft_tokens, q, p, n_drafted, greedy, coins, resample_u):
  """Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami & Suresh,
  "Block Verification Accelerates Speculative Decoding", ICLR 2025, Algorithm 2).

  The output is distributed exactly as the target's, and the expected accepted length
  is never below Algorithm 1's. Greedy rows follow the greedy rule (block verification
  reduces to it at temperature 0). See `block_stop_probabilities` for the rule.

  Args:
    draft_tokens: int32 `[batch, gamma]`, x_i sampled from q_i.
    q: float32 `[batch, gamma, vocab]`, the draft's standardized distributions.
    p: float32 `[batch, gamma + 1, vocab]`, the target's standardized distributions.
    n_drafted: int32 `[batch]` in [0, gamma]: the row's block is x_1..x_{n_drafted}.
    greedy: bool `[batch]`, or Python True (every row greedy: no random numbers) /
      False (no row greedy), as in `accept_and_resample`.
    coins: float32 `[batch, gamma]` uniforms in [0, 1): η_1..η_γ.
    resample_u: float32 `[batch, 2]` uniforms for the correction / bonus sample.
  Returns:
    `(n_accepted [batch] int32, next_token [batch] int32)`.
  """
  if greedy is True:
    return _greedy_rule(draft_tokens, p, n_drafted)
  weights, h, _ = block_stop_probabilities(draft_tokens, q, p, n_drafted)
  return _block_finish(weights, h, p, draft_tokens, n_drafted, greedy, coins, resample_u)


def block_accept_one_hot(draft_tokens, p, n_drafted, greedy, coins, resample_u):
  """Block verification for a deterministic drafter (q_i one-hot at x_i), closed form.

  With q one-hot, P_i = min(1, P_{i−1} · p_i(x_i)), Σ_x r_i(x) = P_i · (1 − p_{i+1}(x_{i+1}))
  for i < m, and r_i is P_i · p_{i+1} with x_{i+1} removed: no `[batch, gamma, vocab]`
  draft distributions are needed. Equal to `block_accept_and_resample` with
  q = one_hot(draft_tokens). For drafters that propose tokens deterministically (n-gram
  lookup, copying); the model drafter of today uses the general form.

  Args:
    draft_tokens: int32 `[batch, gamma]`; p: float32 `[batch, gamma + 1, vocab]`;
    n_drafted: int32 `[batch]`; greedy, coins `[batch, gamma]`, resample_u `[batch, 2]`:
      as in `block_accept_and_resample`.
  Returns:
    `(n_accepted [batch] int32, next_token [batch] int32)`.
  """
  if greedy is True:
    return _greedy_rule(draft_tokens, p, n_drafted)
  gamma = draft_tokens.shape[1]
  p_x = jnp.take_along_axis(p[:, :gamma], draft_tokens[..., None], axis=-1)[..., 0]
  big_p = _running_ratio(p_x)
  steps = jnp.arange(1, gamma + 1)[None, :]
  p_ahead = jnp.concatenate([p_x[:, 1:], jnp.zeros_like(p_x[:, :1])], axis=1)  # p_{i+1}(x_{i+1})
  last = steps >= n_drafted[:, None]  # i = m: nothing drafted ahead (q_{m+1} = 0)
  num = jnp.where(last, big_p[:, 1:], big_p[:, 1:] * (1.0 - p_ahead))
  den = num + 1.0 - big_p[:, 1:]
  h = jnp.minimum(jnp.where(num > 0, num / jnp.where(den > 0, den, 1.0), 0.0), 1.0)
  drafted_ahead = jnp.concatenate([draft_tokens, jnp.zeros_like(draft_tokens[:, :1])], axis=1)
  ahead_mask = jax.nn.one_hot(drafted_ahead, p.shape[-1], dtype=p.dtype) * (
      jnp.arange(gamma + 1)[None, :] < n_drafted[:, None])[..., None]
  weights = big_p[..., None] * p * (1.0 - ahead_mask)
  return _block_finish(weights, h, p, draft_tokens, n_drafted, greedy, coins, resample_u)
