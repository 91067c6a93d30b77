"""T5 building blocks in flax.linen with T5X's param names, shapes and logical axes.

Numerics follow T5X's `t5x/examples/t5/layers.py` dtype for dtype: RMS layer norm
(ε = 1e-6, statistics in float32, output in `dtype`), no 1/√d scaling of attention
logits (it is folded into the query initialisation), attention logits and softmax
in the activation `dtype` (float32 only with `float32_logits`), tanh-approximated
gelu, 2-D kernels, float32 params cast to the activation `dtype` at use, and the
tied output layer (`Embed.attend`) in float32 as T5X's `network.Transformer` sets it. Every param is created with
`flax.linen.partitioning.param_with_axes`, so its logical axis names land in the
`params_axes` collection exactly as in T5X.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import flax.linen as nn
from flax.linen import partitioning
import jax
import jax.numpy as jnp
import numpy as np

param_with_axes = partitioning.param_with_axes
Initializer = Callable[..., jax.Array]

NEG_INF_BIAS = -1e10  # T5X's attention-mask bias (where the dtype holds it; see mask_to_bias).

default_kernel_init = nn.initializers.variance_scaling(1.0, 'fan_in', 'truncated_normal')


class DenseGeneral(nn.Module):
  """Dense layer over the last axes with a 2-D `[in, out]` kernel (T5X layout).

  Input `[..., *in_shape]` → output `[..., *features]`; the kernel param is stored
  flattened as `[prod(in_shape), prod(features)]` like T5X, and reshaped at use.
  """
  features: int | Sequence[int]
  axis: int | Sequence[int] = -1
  dtype: Any = jnp.float32
  kernel_init: Initializer = default_kernel_init
  kernel_axes: tuple[str, ...] = ()

  @nn.compact
  def __call__(self, inputs):
    features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
    axis = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
    axis = tuple(a % inputs.ndim for a in axis)
    in_shape = tuple(inputs.shape[a] for a in axis)
    kernel = param_with_axes('kernel', self.kernel_init,
                             (int(np.prod(in_shape)), int(np.prod(features))),
                             jnp.float32, axes=self.kernel_axes)
    kernel = jnp.reshape(jnp.asarray(kernel, self.dtype), in_shape + features)
    inputs = jnp.asarray(inputs, self.dtype)
    contract = (axis, tuple(range(len(axis))))
    return jax.lax.dot_general(inputs, kernel, (contract, ((), ())))


class Embed(nn.Module):
  """Token embedding `[vocab, embed]`; `attend` gives logits against it.

  `dtype` is the dtype of the looked-up embeddings; `attend_dtype` that of the
  embedding matrix in `attend` (default float32, the value T5X's
  `network.Transformer` gives its `token_embedder` "for logit training stability";
  None = `dtype`).
  """
  num_embeddings: int
  features: int
  dtype: Any = jnp.float32
  attend_dtype: Any = jnp.float32

  def setup(self):
    self.embedding = param_with_axes(
        'embedding', nn.initializers.normal(stddev=1.0),
        (self.num_embeddings, self.features), jnp.float32, axes=('vocab', 'embed'))

  def __call__(self, tokens):
    """tokens `[...]` int → embeddings `[..., features]` in `dtype`."""
    return jnp.take(jnp.asarray(self.embedding, self.dtype), tokens, axis=0)

  def attend(self, query):
    """query `[..., features]` → logits `[..., num_embeddings]` (T5X `Embed.attend`).

    The query is not cast: a bfloat16 query against the float32 matrix gives float32
    logits (JAX type promotion), exactly as in T5X.
    """
    dtype = self.attend_dtype if self.attend_dtype is not None else self.dtype
    return jnp.dot(query, jnp.asarray(self.embedding, dtype).T)


class LayerNorm(nn.Module):
  """T5 RMS norm without mean subtraction or bias: `x / rms(x) * scale`."""
  epsilon: float = 1e-6
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    x = jnp.asarray(x, jnp.float32)
    scale = param_with_axes('scale', nn.initializers.ones, (x.shape[-1],),
                            jnp.float32, axes=('embed',))
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    y = jnp.asarray(x * jax.lax.rsqrt(var + self.epsilon), self.dtype)
    return y * jnp.asarray(scale, self.dtype)


_ACTIVATIONS = {'relu': nn.relu, 'gelu': functools.partial(nn.gelu, approximate=True),
                'linear': lambda x: x, 'silu': nn.silu, 'swish': nn.silu}


class MlpBlock(nn.Module):
  """T5 feed-forward block: `wo(prod_i act_i(wi_i(x)))` (single `wi` when one act)."""
  intermediate_dim: int
  activations: Sequence[str]
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs, deterministic: bool = True):
    acts = []
    for idx, act in enumerate(self.activations):
      if act not in _ACTIVATIONS:
        raise ValueError(f'Unknown mlp activation {act!r}; known: {sorted(_ACTIVATIONS)}.')
      name = 'wi' if len(self.activations) == 1 else f'wi_{idx}'
      x = DenseGeneral(self.intermediate_dim, dtype=self.dtype,
                       kernel_axes=('embed', 'mlp'), name=name)(inputs)
      acts.append(_ACTIVATIONS[act](x))
    x = functools.reduce(jnp.multiply, acts)
    x = nn.Dropout(self.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
    return DenseGeneral(inputs.shape[-1], dtype=self.dtype,
                        kernel_axes=('mlp', 'embed'), name='wo')(x)


def relative_position_bucket(relative_position, bidirectional: bool,
                             num_buckets: int = 32, max_distance: int = 128):
  """Maps `key_pos - query_pos` (int array, any shape) to T5 bucket ids (same shape).

  Exact buckets for small distances, log-spaced buckets up to `max_distance`
  (Raffel et al. 2020 §2.1; T5X `RelativePositionBiases._relative_position_bucket`).
  Works on traced arrays, so per-row positions can be bucketed inside jit.
  """
  ret = 0
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    ret = ret + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  val_if_large = max_exact + (
      jnp.log(n.astype(jnp.float32) / max_exact + jnp.finfo(jnp.float32).eps) /
      np.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(jnp.int32)
  val_if_large = jnp.minimum(val_if_large, num_buckets - 1)
  return ret + jnp.where(is_small, n, val_if_large)


class RelativePositionBiases(nn.Module):
  """One relative-position table per stack: param `rel_embedding [heads, buckets]`."""
  num_buckets: int
  max_distance: int
  num_heads: int
  dtype: Any = jnp.float32

  def setup(self):
    self.rel_embedding = param_with_axes(
        'rel_embedding', nn.initializers.variance_scaling(1.0, 'fan_avg', 'uniform'),
        (self.num_heads, self.num_buckets), jnp.float32, axes=('heads', 'relpos_buckets'))

  def __call__(self, query_positions, key_positions, bidirectional: bool):
    """Biases for arbitrary positions.

    Args:
      query_positions: int `[batch, q]` (or `[1, q]`), absolute query positions.
      key_positions: int `[k]`, absolute key positions.
      bidirectional: True in the encoder, False in the decoder.
    Returns:
      `[batch, heads, q, k]` biases in `dtype`.
    """
    rel = key_positions[None, None, :] - query_positions[:, :, None]
    buckets = relative_position_bucket(rel, bidirectional, self.num_buckets,
                                       self.max_distance)
    values = jnp.take(jnp.asarray(self.rel_embedding, self.dtype), buckets, axis=1)
    return jnp.transpose(values, (1, 0, 2, 3))


def dot_product_attention(query, key, value, bias, dtype=jnp.float32,
                          float32_logits=False, dropout_rng=None, dropout_rate=0.0,
                          deterministic=True):
  """T5 attention without 1/√d scaling (T5X `layers.dot_product_attention`).

  Dtypes as T5X: the logits `q·k` and the softmax are computed in the dtype of
  query/key (the activation dtype, e.g. bfloat16; float32 when `float32_logits`),
  the weights are then cast to `dtype` and applied to `value` as it is. Attention
  dropout is shared across query positions (T5X broadcasts it along q).

  Args:
    query: `[batch, q, heads, head_dim]`.
    key, value: `[batch, k, heads, head_dim]`.
    bias: broadcastable to `[batch, heads, q, k]` (mask bias + position bias).
  Returns:
    `[batch, q, heads, head_dim]` in `dtype` (for `value` of dtype `dtype`).
  """
  if float32_logits:
    query = query.astype(jnp.float32)
    key = key.astype(jnp.float32)
  weights = jnp.einsum('bqhd,bkhd->bhqk', query, key)
  weights = weights + bias.astype(weights.dtype)
  weights = jax.nn.softmax(weights).astype(dtype)
  if not deterministic and dropout_rate > 0.0:
    keep_prob = 1.0 - dropout_rate
    shape = list(weights.shape)
    shape[-2] = 1
    keep = jnp.broadcast_to(jax.random.bernoulli(dropout_rng, keep_prob, shape),
                            weights.shape)
    weights = weights * (keep.astype(weights.dtype) / jnp.asarray(keep_prob, dtype))
  return jnp.einsum('bhqk,bkhd->bqhd', weights, value)


def mask_bias_value(dtype) -> float:
  """The additive bias of a masked position in `dtype`: finite in every float dtype.

  T5X's −1e10 where `dtype` holds it (float32, bfloat16: bit-identical to T5X), else
  half the dtype's most negative finite value (float16: −32752; −1e10 would round to
  −inf there, and a fully masked row — a padded query position — would give
  softmax(−inf, …, −inf) = NaN, which then reaches every position through the
  attention's weighted sum). Half, so that adding relative-position biases and
  attention logits to it cannot overflow to −inf either; exp() of it is still 0.
  """
  return max(NEG_INF_BIAS, float(jnp.finfo(dtype).min) / 2)


def mask_to_bias(mask, dtype=jnp.float32):
  """Boolean mask (True = attend) → additive bias `dtype` (0, or `mask_bias_value(dtype)`)."""
  return jnp.where(mask, jnp.asarray(0.0, dtype), jnp.asarray(mask_bias_value(dtype), dtype))


class MultiHeadDotProductAttention(nn.Module):
  """Multi-head attention with T5X's params `query/key/value/out` (2-D kernels).

  Exposes its projections so the decoder can fill and read a cache itself.
  """
  num_heads: int
  head_dim: int
  out_features: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.0
  float32_logits: bool = False

  def setup(self):
    depth_scaling = np.sqrt(self.head_dim).astype(np.float32)

    def query_init(*args):
      return default_attn_init(*args) / depth_scaling

    default_attn_init = nn.initializers.variance_scaling(1.0, 'fan_in', 'normal')
    proj = functools.partial(DenseGeneral, features=(self.num_heads, self.head_dim),
                             axis=-1, dtype=self.dtype, kernel_axes=('embed', 'joined_kv'))
    self.query = proj(kernel_init=query_init)
    self.key = proj(kernel_init=default_attn_init)
    self.value = proj(kernel_init=default_attn_init)
    self.out = DenseGeneral(features=self.out_features, axis=(-2, -1), dtype=self.dtype,
                            kernel_init=default_attn_init, kernel_axes=('joined_kv', 'embed'))

  def project_kv(self, inputs_kv):
    """`[batch, k, embed]` → keys and values `[batch, k, heads, head_dim]`."""
    return self.key(inputs_kv), self.value(inputs_kv)

  def attend(self, inputs_q, key, value, bias, deterministic=True):
    """Queries from `inputs_q [batch, q, embed]` against given keys/values → `[batch, q, embed]`."""
    query = self.query(inputs_q)
    dropout_rng = None
    if not deterministic and self.dropout_rate > 0.0:
      dropout_rng = self.make_rng('dropout')
    x = dot_product_attention(query, key, value, bias, dtype=self.dtype,
                              float32_logits=self.float32_logits,
                              dropout_rng=dropout_rng, dropout_rate=self.dropout_rate,
                              deterministic=deterministic)
    return self.out(x)

  def __call__(self, inputs_q, inputs_kv, bias, deterministic=True):
    key, value = self.project_kv(inputs_kv)
    return self.attend(inputs_q, key, value, bias, deterministic)

  def attend_cached(self, inputs_q, key, value, bias):
    """Decoding attention against a heads-major cache (no dropout).

    Args:
      inputs_q: `[batch, q, embed]`.
      key, value: `[batch * heads, length, head_dim]`, the decode cache's layout
        seen as 3-D (`DecoderCache` stores `[batch, heads, length, head_dim]`): the
        attention dots read it as stored, with no per-call transpose or copy.
      bias: broadcastable to `[batch, heads, q, length]`.
    Returns:
      `[batch, q, embed]`: the same function as `attend` on `[batch, length, heads,
      head_dim]` keys/values, with the same dtype at every step (logits and softmax
      in the activation dtype, float32 with `float32_logits`; T5X's cached decoding
      attention). In bfloat16 the result of a k-query call can differ from k
      one-query calls by bfloat16 rounding (XLA may block the dots differently per
      shape); see README "bfloat16 numerics".
    """
    query = self.query(inputs_q)  # [b, q, h, d]
    batch, q_len, heads, head_dim = query.shape
    query = jnp.swapaxes(query, 1, 2).reshape(batch * heads, q_len, head_dim)
    if self.float32_logits:
      query, key = query.astype(jnp.float32), key.astype(jnp.float32)
    weights = jnp.einsum('nqd,nkd->nqk', query, key)
    bias = jnp.broadcast_to(bias, (batch, heads, q_len, key.shape[1]))
    weights = weights + bias.reshape(weights.shape).astype(weights.dtype)
    weights = jax.nn.softmax(weights).astype(self.dtype)
    out = jnp.einsum('nqk,nkd->nqd', weights, value)
    out = jnp.swapaxes(out.reshape(batch, heads, q_len, head_dim), 1, 2)
    return self.out(out)
