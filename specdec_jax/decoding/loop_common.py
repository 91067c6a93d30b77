"""Helpers shared by both decoding loops: argument checks, batch expansion, sorting, keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specdec_jax.decoding import sampling

MIN_TEMPERATURE = sampling.MIN_TEMPERATURE


def expand_batch(tree, num_decodes: int, offset: int = 0):
  """Repeats every array of `tree` `num_decodes` times along its batch axis (`offset`).

  Row b becomes rows b*num_decodes … b*num_decodes+num_decodes−1 (T5X's
  `flat_batch_beam_expand` order).
  """
  if num_decodes == 1:
    return tree
  return jax.tree_util.tree_map(lambda x: jnp.repeat(x, num_decodes, axis=offset), tree)


def per_row(value, batch: int, num_decodes: int, dtype):
  """Scalar or `[batch]` value → `[batch * num_decodes]`."""
  value = jnp.asarray(value, dtype)
  if value.ndim == 0:
    return jnp.broadcast_to(value, (batch * num_decodes,))
  if value.shape != (batch,):
    raise ValueError(f'per-row argument has shape {value.shape}; expected a scalar or '
                     f'[batch] = ({batch},).')
  return jnp.repeat(value, num_decodes)


def sort_decodes(sequences, log_probs, batch: int, num_decodes: int):
  """[B*nd, L], [B*nd] → ([B, nd, L], [B, nd]) sorted by log-prob ascending."""
  sequences = sequences.reshape(batch, num_decodes, -1)
  log_probs = log_probs.reshape(batch, num_decodes)
  order = jnp.argsort(log_probs, axis=-1)
  return (jnp.take_along_axis(sequences, order[..., None], axis=1),
          jnp.take_along_axis(log_probs, order, axis=1), order)


def prompt_lengths(inputs):
  """Number of forced prompt tokens per row: the leading run of non-zero tokens."""
  return jnp.sum(jnp.cumprod((inputs != 0).astype(jnp.int32), axis=1), axis=1)


def check_common(inputs, eos_id, num_decodes, temperature, topk, topp, max_decode_steps):
  """Checks the arguments both loops take, before anything is traced.

  Args:
    inputs: int32 `[batch, max_decode_len]` prompts (0 = free position).
    eos_id, num_decodes, max_decode_steps: as `temperature_sample`.
    temperature, topk, topp: checked by `sampling.validate_sampling_args`.
  Raises:
    ValueError: naming the first bad argument and what it must be.
  """
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


def is_per_row_keys(decode_rng) -> bool:
  """True when `decode_rng` holds one key per row (`[batch]` typed / `[batch, 2]` raw)."""
  if decode_rng is None:
    return False
  shape = jnp.shape(decode_rng)
  typed = jax.dtypes.issubdtype(jnp.asarray(decode_rng).dtype, jax.dtypes.prng_key)
  return len(shape) == (1 if typed else 2)


def row_keys(decode_rng, batch: int, num_decodes: int):
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


