"""The k-token decode cache: its layout (`DecoderCache`) and its per-row writes.

`Transformer.decode_step` (models/t5.py) writes k positions per row at
`lengths[b] … lengths[b]+k−1` by overwriting; query i of row b reads keys at positions
`≤ lengths[b] + i` only, so slots left by rejected drafts are never read
(`shared/DESIGN.md`, cache invariants).
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np


class _SelfKVSizes:
  """`max_length` and `batch_size` of a cache whose `self_k` leaves are `[B, H, L, D]`."""

  @property
  def max_length(self) -> int:
    """Number of positions the cache holds (static)."""
    return self.self_k[0].shape[2]

  @property
  def batch_size(self) -> int:
    """Rows of the cache (static)."""
    return self.self_k[0].shape[0]


@flax.struct.dataclass
class DecoderCache(_SelfKVSizes):
  """Per-input decoder state, batch-major in every leaf.

  Attributes:
    self_k, self_v: tuple over decoder layers of `[batch, heads, max_length, head_dim]`
      self-attention keys/values (slot t holds decoder position t).
    cross_k, cross_v: tuple over decoder layers of `[batch, heads, enc_len, head_dim]`
      cross-attention keys/values, computed once from the encoder output.
    Heads-major layouts let XLA run the attention dots on the cache as it is stored,
    with no per-step transpose.
    cross_bias: `[batch, 1, 1, enc_len]` additive mask bias for encoder padding.
  """
  self_k: tuple
  self_v: tuple
  cross_k: tuple
  cross_v: tuple
  cross_bias: jax.Array



@flax.struct.dataclass
class SelfAttentionCache(_SelfKVSizes):
  """A decoder-only model's cache (`models/decoder_only.py`), batch-major in every leaf.

  Attributes:
    self_k, self_v: tuple over layers of `[batch, heads, max_length, head_dim]`
      self-attention keys/values (slot t holds position t), as `DecoderCache`'s.
  """
  self_k: tuple
  self_v: tuple



def write_rows(cache, new, lengths):
  """Overwrites `cache[b, :, lengths[b] + i] = new[b, i]`; out-of-range slots are dropped.

  cache `[B, H, L, D]`, new `[B, k, H, D]`, lengths `[B]` int32. Returns the updated
  cache as `[B * H, L, D]`: one scatter on the 3-D view, which XLA performs in place
  on the loop-carried buffer and which the attention dots read directly (on the 4-D
  array XLA:CPU would copy the whole cache every step).
  """
  batch, heads, length, head_dim = cache.shape
  k = new.shape[1]
  flat = cache.reshape(batch * heads, length, head_dim)
  new = jnp.swapaxes(new.astype(cache.dtype), 1, 2).reshape(batch * heads, k, head_dim)
  pos = jnp.repeat(lengths, heads)[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]
  rows = jnp.arange(batch * heads, dtype=jnp.int32)[:, None]
  return flat.at[rows, pos].set(new, mode='drop')


def check_step(k: int, lengths, max_length: int) -> None:
  """The checks of a k-token cached call before it is traced (both families' `decode_step`).

  Raises:
    ValueError: k exceeds the cache, or (when `lengths` is concrete) a row's
      `lengths + k` passes the cache end.
  """
  if k > max_length:
    raise ValueError(f'decoder_tokens has k={k} tokens per row but the cache holds only '
                     f'{max_length} positions; build it with a larger max_length.')
  if not isinstance(lengths, jax.core.Tracer):
    longest = int(np.max(np.asarray(lengths))) + k
    if longest > max_length:
      raise ValueError(f'lengths + k reaches {longest} but the cache holds '
                       f'{max_length} positions: k={k} is beyond the remaining '
                       'cache; build it with a larger max_length or pass fewer tokens.')


def flat_heads(x):
  """`[B, H, L, D]` → `[B * H, L, D]` (a free reshape)."""
  return x.reshape((-1,) + x.shape[2:])
