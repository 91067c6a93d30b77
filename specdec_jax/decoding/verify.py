"""Verify phase: the target scores all γ drafts in one (γ+1)-token cached call."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def verify_block(step_fn, cache, cur, n, draft_tokens):
  """Runs the target once on (d_n, x_1, …, x_γ) at positions n … n+γ of each row.

  The target's cache is valid for positions < n (the last committed input d_n was
  not consumed yet). Slots written for rejected drafts lie beyond the row's new
  length and are overwritten in a later round, never read.

  Args:
    step_fn: the target's k-token cached call.
    cache: the target's cache.
    cur: int32 `[batch]`, the last committed decoder input d_n (0 when n = 0).
    n: int32 `[batch]` committed tokens per row.
    draft_tokens: int32 `[batch, gamma]`.
  Returns:
    `(logits [batch, gamma + 1, vocab] float32, cache)`: logits[:, i] is the target's
    prediction for position n + i + 1 (p_{i+1} in the paper's numbering).
  """
  tokens = jnp.concatenate([cur[:, None], draft_tokens], axis=1)
  logits, cache = step_fn(tokens, n, cache)
  return logits.astype(jnp.float32), cache


def verify_block_adaptive(step_fn, cache, cur, n, draft_tokens, width):
  """`verify_block` on only the first `width` positions (d_n and width − 1 drafts).

  One `lax.switch` over the widths 1 … γ+1, each branch a target call of that many
  tokens, so a round that drafted fewer tokens also verifies fewer (the target call
  costs more with its width on a CPU). A batch uses its widest row's width; the other
  rows ignore the extra positions.

  Args:
    width: int32 scalar in [1, γ+1].
    Others as `verify_block`.
  Returns:
    `(logits [batch, gamma + 1, vocab] float32, cache)`; positions at or beyond
    `width` hold zeros (never read: a row's drafts and bonus lie below its width).
  """
  batch, gamma = draft_tokens.shape
  tokens = jnp.concatenate([cur[:, None], draft_tokens], axis=1)

  def branch(k):
    def call(cache):
      logits, cache = step_fn(tokens[:, :k], n, cache)
      logits = logits.astype(jnp.float32)
      pad = jnp.zeros((batch, gamma + 1 - k, logits.shape[-1]), jnp.float32)
      return jnp.concatenate([logits, pad], axis=1), cache
    return call
  return jax.lax.switch(width - 1, [branch(k) for k in range(1, gamma + 2)], cache)
