"""T5X's training losses for the encoder-decoder model class (no T5X import needed).

Mirrors `t5x/losses.py` (`cross_entropy_with_logits`, `compute_weighted_cross_entropy`)
and the loss-normalizing-factor rules of `t5x/models.py`; used by
`specdec_jax.interop.t5x.model.StandaloneEncoderDecoderModel.loss_fn` when T5X is not installed
(with T5X installed, T5X's own `loss_fn` runs on top of our `_compute_logits`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def cross_entropy_with_logits(logits, targets, z_loss: float = 0.0):
  """Per-token `-Σ targets · log_softmax(logits)` plus `z_loss · log(Z)²` (T5X semantics).

  Args:
    logits: float `[..., vocab]`.
    targets: float `[..., vocab]` soft (or one-hot) targets.
    z_loss: coefficient of the auxiliary log-partition penalty.
  Returns:
    `(loss, z_loss_term)`, both float32 `[...]`; `loss` already includes the z-loss.
  """
  logits = logits.astype(jnp.float32)
  log_z = jax.scipy.special.logsumexp(logits, axis=-1)
  loss = -jnp.sum(targets * (logits - log_z[..., None]), axis=-1)
  z_term = z_loss * jnp.square(log_z)
  return loss + z_term, z_term


def compute_weighted_cross_entropy(logits, targets, weights=None, label_smoothing: float = 0.0,
                                   z_loss: float = 0.0, loss_normalizing_factor=None):
  """Summed, weighted, label-smoothed cross-entropy (T5X `losses.compute_weighted_cross_entropy`).

  The label-smoothing entropy constant is subtracted, so a perfect prediction of the
  smoothed targets has loss 0 at every smoothing level.

  Args:
    logits: float `[batch, length, vocab]`.
    targets: int `[batch, length]`.
    weights: optional float `[batch, length]` (None = every position counts).
    label_smoothing: mass spread uniformly over the other `vocab − 1` ids.
    z_loss: coefficient of `log(Z)²`.
    loss_normalizing_factor: optional number the sums are divided by.
  Returns:
    `(loss, z_loss, weight_sum)` scalars (`loss` includes `z_loss`).
  Raises:
    ValueError: logits not of rank `targets.ndim + 1`.
  """
  if logits.ndim != targets.ndim + 1:
    raise ValueError(f'logits {logits.shape} must have one more axis than targets '
                     f'{targets.shape}.')
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / max(vocab - 1, 1)
  constant = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
  soft = jax.nn.one_hot(targets, vocab, dtype=jnp.float32) * (confidence - low) + low
  loss, z_term = cross_entropy_with_logits(logits, soft, z_loss)
  loss = loss - constant
  weight_sum = jnp.asarray(np.prod(targets.shape), jnp.float32)
  if weights is not None:
    weights = jnp.asarray(weights, jnp.float32)
    loss, z_term, weight_sum = loss * weights, z_term * weights, jnp.sum(weights)
  if loss_normalizing_factor is not None:
    loss, z_term = loss / loss_normalizing_factor, z_term / loss_normalizing_factor
  return jnp.sum(loss), jnp.sum(z_term), weight_sum


def loss_normalizing_factor_and_weights(loss_normalizing_factor, batch):
  """Resolves T5X's special loss-normalizing factors to a number and per-token weights.

  Args:
    loss_normalizing_factor: None, a number, or one of the strings (or T5X enum
      members with these names) 'NUM_REAL_TARGET_TOKENS', 'NUM_TOTAL_TARGET_TOKENS',
      'AVERAGE_PER_SEQUENCE'.
    batch: with `decoder_target_tokens` and optionally `decoder_loss_weights`.
  Returns:
    `(factor or None, weights [batch, length] float32)`; the weights default to
    `decoder_target_tokens > 0` (T5X would count padding when no weights are given).
  Raises:
    ValueError: an unknown special factor.
  """
  targets = batch['decoder_target_tokens']
  weights = batch.get('decoder_loss_weights')
  weights = (jnp.asarray(targets > 0, jnp.float32) if weights is None
             else jnp.asarray(weights, jnp.float32))
  name = getattr(loss_normalizing_factor, 'name', loss_normalizing_factor)
  if name is None or not isinstance(name, str):
    return loss_normalizing_factor, weights
  if name == 'NUM_REAL_TARGET_TOKENS':
    return jnp.sum(weights), weights
  if name == 'NUM_TOTAL_TARGET_TOKENS':
    return float(np.prod(targets.shape)), weights
  if name == 'AVERAGE_PER_SEQUENCE':
    per_seq = jnp.sum(weights, axis=-1, keepdims=True)
    weights = jnp.where(per_seq > 0, weights / jnp.where(per_seq > 0, per_seq, 1.0), 0.0)
    return jnp.sum(weights), weights
  raise ValueError(f'Unsupported loss_normalizing_factor {loss_normalizing_factor!r}; use '
                   'None, a number, NUM_REAL_TARGET_TOKENS, NUM_TOTAL_TARGET_TOKENS or '
                   'AVERAGE_PER_SEQUENCE.')


def sequence_scores(logits, targets, weights, return_intermediates: bool = False):
  """T5X's `score_batch` from logits: Σ_t weights · log p(target_t) per row.

  Args:
    logits: `[batch, len, vocab]`; targets: int `[batch, len]`; weights: `[batch, len]`.
  Returns:
    float32 `[batch]`; with `return_intermediates`, `(scores, {'decoder':
    {'target_tokens': (targets,), 'loss_weights': (weights,), 'token_scores': (…,)}})`
    (T5X's intermediates layout).
  """
  weights = jnp.asarray(weights, jnp.float32)
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  token_scores = jnp.take_along_axis(
      log_probs, jnp.asarray(targets, jnp.int32)[..., None], axis=-1)[..., 0] * weights
  scores = jnp.sum(token_scores, axis=-1)
  if return_intermediates:
    return scores, {'decoder': {'target_tokens': (targets,), 'loss_weights': (weights,),
                                'token_scores': (token_scores,)}}
  return scores
