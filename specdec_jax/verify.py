"""Verify phase: the target scores all γ drafts in one (γ+1)-token cached call."""

from __future__ import annotations

import jax.numpy as jnp


def verify_block(step_fn, cache, sequences, n, draft_tokens):
  """Runs the target once on (d_n, x_1, …, x_γ) at positions n … n+γ of each row.

  The target's cache is valid for positions < n (the last committed input d_n was
  not consumed yet). Slots written for rejected drafts lie beyond the row's new
  length and are overwritten in a later round, never read.

  Args:
    step_fn: the target's k-token cached call.
    cache: the target's cache.
    sequences: int32 `[batch, max_len + 1]` decoder inputs.
    n: int32 `[batch]` committed tokens per row.
    draft_tokens: int32 `[batch, gamma]`.
  Returns:
    `(logits [batch, gamma + 1, vocab] float32, cache)`: logits[:, i] is the target's
    prediction for position n + i + 1 (p_{i+1} in the paper's numbering).
  """
  last = jnp.take_along_axis(sequences, n[:, None], axis=1)
  tokens = jnp.concatenate([last, draft_tokens], axis=1)
  logits, cache = step_fn(tokens, n, cache)
  return logits.astype(jnp.float32), cache
