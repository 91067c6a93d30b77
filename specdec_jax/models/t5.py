"""T5 encoder-decoder in flax.linen with T5X's param tree and a k-token cached decoder.

The param tree is exactly the one of T5X's `t5x/examples/t5/network.py`
(`token_embedder`, `encoder/{relpos_bias,layers_i,encoder_norm}`,
`decoder/{relpos_bias,layers_i,decoder_norm,logits_dense}`), so any T5X checkpoint
of a T5 1.0 / 1.1 model loads unchanged.

What differs from T5X is the decode cache (`DecoderCache`, models/cache.py): instead of T5X's
one-token-per-call cache with one shared index and additive writes, `decode_step`
consumes k ≥ 1 tokens per row at per-row positions `lengths[b] … lengths[b]+k−1`,
*overwriting* the cache there, and lets query i of row b see only keys at positions
`≤ lengths[b] + i`. Slots beyond a row's length (left by rejected draft tokens) are
therefore never read, and "rolling back" is simply not advancing `lengths`.
"""

from __future__ import annotations

import functools

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from specdec_jax.models import layers
from specdec_jax.models import params as params_lib
from specdec_jax.models.cache import DecoderCache  # noqa: F401  (re-exported: t5.DecoderCache)
from specdec_jax.models.cache import check_step
from specdec_jax.models.cache import flat_heads as _flat_heads
from specdec_jax.models.cache import write_rows as _write_rows
from specdec_jax.models.config import T5Config


class EncoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    cfg = self.config
    self.pre_attention_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.attention = layers.MultiHeadDotProductAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, out_features=cfg.emb_dim,
        dtype=cfg.dtype, dropout_rate=cfg.dropout_rate,
        float32_logits=cfg.float32_attention_logits)
    self.pre_mlp_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.mlp = layers.MlpBlock(intermediate_dim=cfg.mlp_dim,
                               activations=cfg.mlp_activations,
                               dropout_rate=cfg.dropout_rate, dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))

  def __call__(self, inputs, bias, deterministic):
    x = self.pre_attention_layer_norm(inputs)
    x = self.attention(x, x, bias, deterministic)
    x = self.dropout(x, deterministic=deterministic) + inputs
    y = self.mlp(self.pre_mlp_layer_norm(x), deterministic)
    return self.dropout(y, deterministic=deterministic) + x


class Encoder(nn.Module):
  config: T5Config
  shared_embedding: nn.Module

  def setup(self):
    cfg = self.config
    self.relpos_bias = layers.RelativePositionBiases(
        num_buckets=cfg.relative_attention_num_buckets,
        max_distance=cfg.relative_attention_max_distance,
        num_heads=cfg.num_heads, dtype=cfg.dtype)
    self.layers = [EncoderLayer(cfg) for _ in range(cfg.num_encoder_layers)]
    self.encoder_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))

  def __call__(self, encoder_input_tokens, deterministic):
    cfg = self.config
    length = encoder_input_tokens.shape[1]
    valid = encoder_input_tokens > 0
    positions = jnp.arange(length, dtype=jnp.int32)
    bias = (self.relpos_bias(positions[None], positions, bidirectional=True) +
            layers.mask_to_bias(valid[:, None, :, None] & valid[:, None, None, :], cfg.dtype))
    x = self.shared_embedding(encoder_input_tokens.astype(jnp.int32))
    x = self.dropout(x, deterministic=deterministic)
    for layer in self.layers:
      x = layer(x, bias, deterministic)
    x = self.encoder_norm(x)
    return self.dropout(x, deterministic=deterministic)


class DecoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    cfg = self.config
    attn = lambda: layers.MultiHeadDotProductAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, out_features=cfg.emb_dim,
        dtype=cfg.dtype, dropout_rate=cfg.dropout_rate,
        float32_logits=cfg.float32_attention_logits)
    self.pre_self_attention_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.self_attention = attn()
    self.pre_cross_attention_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.encoder_decoder_attention = attn()
    self.pre_mlp_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.mlp = layers.MlpBlock(intermediate_dim=cfg.mlp_dim,
                               activations=cfg.mlp_activations,
                               dropout_rate=cfg.dropout_rate, dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))

  def _rest(self, x, inputs, cross_fn, deterministic):
    """Residual, cross-attention and MLP sub-blocks after self-attention."""
    x = self.dropout(x, deterministic=deterministic) + inputs
    y = cross_fn(self.pre_cross_attention_layer_norm(x))
    y = self.dropout(y, deterministic=deterministic) + x
    z = self.mlp(self.pre_mlp_layer_norm(y), deterministic)
    return self.dropout(z, deterministic=deterministic) + y

  def __call__(self, inputs, encoded, self_bias, cross_bias, deterministic):
    """Full-sequence layer: inputs `[B, L, E]`, encoded `[B, Le, E]`."""
    x = self.pre_self_attention_layer_norm(inputs)
    x = self.self_attention(x, x, self_bias, deterministic)
    cross = lambda h: self.encoder_decoder_attention(h, encoded, cross_bias, deterministic)
    return self._rest(x, inputs, cross, deterministic)

  def cross_kv(self, encoded):
    """Cross-attention keys/values `[batch, heads, enc_len, head_dim]` (cache layout)."""
    k, v = self.encoder_decoder_attention.project_kv(encoded)
    return jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)

  def step(self, inputs, lengths, self_bias, k_cache, v_cache, cross_k, cross_v,
           cross_bias):
    """Cached layer on k new positions per row; returns (out, k_cache, v_cache)."""
    x = self.pre_self_attention_layer_norm(inputs)
    new_k, new_v = self.self_attention.project_kv(x)
    shape = k_cache.shape
    k_flat = _write_rows(k_cache, new_k, lengths)
    v_flat = _write_rows(v_cache, new_v, lengths)
    x = self.self_attention.attend_cached(x, k_flat, v_flat, self_bias)
    k_cache, v_cache = k_flat.reshape(shape), v_flat.reshape(shape)
    cross = lambda h: self.encoder_decoder_attention.attend_cached(
        h, _flat_heads(cross_k), _flat_heads(cross_v), cross_bias)
    return self._rest(x, inputs, cross, True), k_cache, v_cache


class Decoder(nn.Module):
  config: T5Config
  shared_embedding: nn.Module

  def setup(self):
    cfg = self.config
    self.relpos_bias = layers.RelativePositionBiases(
        num_buckets=cfg.relative_attention_num_buckets,
        max_distance=cfg.relative_attention_max_distance,
        num_heads=cfg.num_heads, dtype=cfg.dtype)
    self.layers = [DecoderLayer(cfg) for _ in range(cfg.num_decoder_layers)]
    self.decoder_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))
    if not cfg.logits_via_embedding:
      self.logits_dense = layers.DenseGeneral(
          cfg.vocab_size, dtype=jnp.float32, kernel_axes=('embed', 'vocab'))

  def _logits(self, y, deterministic):
    """Float32 logits `[..., vocab_size]` for decoder outputs `y` (activation dtype).

    As T5X's `Decoder`: T5 1.1's `logits_dense` casts `y` to float32 and multiplies
    by its float32 kernel; T5 1.0's tied layer multiplies `y` by the float32
    embedding (float32 by type promotion) and divides by √emb_dim in float32.
    """
    y = self.decoder_norm(y)
    y = self.dropout(y, deterministic=deterministic)
    if self.config.logits_via_embedding:
      # T5 1.0: tied output layer, decoder output scaled by 1/sqrt(emb_dim).
      return self.shared_embedding.attend(y) / jnp.sqrt(y.shape[-1])
    return self.logits_dense(y)

  def __call__(self, encoded, encoder_input_tokens, decoder_input_tokens,
               decoder_target_tokens, deterministic):
    cfg = self.config
    length = decoder_input_tokens.shape[1]
    positions = jnp.arange(length, dtype=jnp.int32)
    causal = positions[None, :] <= positions[:, None]
    self_mask = causal[None, None]
    enc_valid = encoder_input_tokens > 0
    if decoder_target_tokens is not None:
      dec_valid = decoder_target_tokens > 0
      self_mask = self_mask & dec_valid[:, None, :, None] & dec_valid[:, None, None, :]
      cross_mask = dec_valid[:, None, :, None] & enc_valid[:, None, None, :]
    else:
      cross_mask = enc_valid[:, None, None, :]
    self_bias = (self.relpos_bias(positions[None], positions, bidirectional=False) +
                 layers.mask_to_bias(self_mask, cfg.dtype))
    cross_bias = layers.mask_to_bias(cross_mask, cfg.dtype)
    y = self.shared_embedding(decoder_input_tokens.astype(jnp.int32))
    y = self.dropout(y, deterministic=deterministic)
    for layer in self.layers:
      y = layer(y, encoded, self_bias, cross_bias, deterministic)
    return self._logits(y, deterministic)

  def init_cache(self, encoded, encoder_input_tokens, max_length):
    cfg = self.config
    batch = encoded.shape[0]
    shape = (batch, cfg.num_heads, max_length, cfg.head_dim)
    cross = [layer.cross_kv(encoded) for layer in self.layers]
    zeros = tuple(jnp.zeros(shape, cfg.dtype) for _ in self.layers)
    return DecoderCache(
        self_k=zeros, self_v=zeros,
        cross_k=tuple(c[0] for c in cross), cross_v=tuple(c[1] for c in cross),
        cross_bias=layers.mask_to_bias((encoder_input_tokens > 0)[:, None, None, :],
                                       cfg.dtype))

  def step(self, decoder_tokens, lengths, cache: DecoderCache):
    cfg = self.config
    k = decoder_tokens.shape[1]
    max_length = cache.max_length
    q_pos = lengths[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]  # [B, k]
    k_pos = jnp.arange(max_length, dtype=jnp.int32)  # [L]
    visible = k_pos[None, None, :] <= q_pos[:, :, None]  # [B, k, L]
    self_bias = (self.relpos_bias(q_pos, k_pos, bidirectional=False) +
                 layers.mask_to_bias(visible[:, None], cfg.dtype))
    y = self.shared_embedding(decoder_tokens.astype(jnp.int32))
    new_k, new_v = [], []
    for i, layer in enumerate(self.layers):
      y, kc, vc = layer.step(y, lengths, self_bias, cache.self_k[i], cache.self_v[i],
                             cache.cross_k[i], cache.cross_v[i], cache.cross_bias)
      new_k.append(kc)
      new_v.append(vc)
    logits = self._logits(y, True)
    return logits, cache.replace(self_k=tuple(new_k), self_v=tuple(new_v))


class Transformer(nn.Module):
  """T5 encoder-decoder (T5X `network.Transformer`) with a k-token cached decoder.

  Methods (call through `model.apply({'params': params}, ..., method=...)`):
    `__call__`: full-sequence logits, like T5X.
    `encode`: encoder output.
    `decode`: full-sequence decoder logits from an encoder output.
    `init_cache`: a `DecoderCache` with the cross-attention keys/values.
    `decode_step`: k new tokens per row at per-row positions, with the cache.
  """
  config: T5Config

  def setup(self):
    cfg = self.config
    self.token_embedder = layers.Embed(num_embeddings=cfg.vocab_size,
                                       features=cfg.emb_dim, dtype=cfg.dtype)
    self.encoder = Encoder(cfg, shared_embedding=self.token_embedder)
    self.decoder = Decoder(cfg, shared_embedding=self.token_embedder)

  def encode(self, encoder_input_tokens, enable_dropout: bool = True):
    """encoder_input_tokens `[batch, enc_len]` int (0 = padding) → `[batch, enc_len, emb_dim]`."""
    return self.encoder(encoder_input_tokens, deterministic=not enable_dropout)

  def decode(self, encoded, encoder_input_tokens, decoder_input_tokens,
             decoder_target_tokens=None, enable_dropout: bool = True, decode: bool = False):
    """Full-sequence decoder logits `[batch, length, vocab_size]` (T5X `Transformer.decode`).

    `decoder_input_tokens` are the targets shifted right with a leading 0;
    positions where `decoder_target_tokens == 0` are masked as padding.

    Raises:
      ValueError: `decode=True` (T5X's one-token cache); use `init_cache` and
        `decode_step` instead.
    """
    if decode:
      raise ValueError('decode=True is not supported: use Transformer.init_cache and '
                       'Transformer.decode_step (k tokens per call, per-row positions).')
    return self.decoder(encoded, encoder_input_tokens, decoder_input_tokens,
                        decoder_target_tokens, deterministic=not enable_dropout)

  def __call__(self, encoder_input_tokens, decoder_input_tokens,
               decoder_target_tokens=None, enable_dropout: bool = True):
    """Logits `[batch, dec_len, vocab_size]` in float32 (T5X `Transformer.__call__`)."""
    encoded = self.encode(encoder_input_tokens, enable_dropout)
    return self.decode(encoded, encoder_input_tokens, decoder_input_tokens,
                       decoder_target_tokens, enable_dropout)

  def init_cache(self, encoded, encoder_input_tokens, max_length: int) -> DecoderCache:
    """Empty self-attention cache of `max_length` slots plus cross-attention K/V.

    Args:
      encoded: `[batch, enc_len, emb_dim]` from `encode`.
      encoder_input_tokens: `[batch, enc_len]` (for the padding mask).
      max_length: decoder positions to hold (static).
    """
    return self.decoder.init_cache(encoded, encoder_input_tokens, max_length)

  def decode_step(self, decoder_tokens, lengths, cache: DecoderCache):
    """Consumes k decoder tokens per row at per-row positions.

    Args:
      decoder_tokens: int `[batch, k]`, the decoder inputs at positions
        `lengths[b] … lengths[b] + k − 1` (position 0 holds the start token 0).
      lengths: int32 `[batch]`, how many positions of each row are already valid
        in the cache. Slots at or beyond it may hold stale values; they are
        overwritten here and never attended to.
      cache: `DecoderCache` from `init_cache` or an earlier `decode_step`.
    Returns:
      `(logits [batch, k, vocab_size] float32, new cache)`; logits[:, i] predicts
      the token at position `lengths + i + 1`.
    Raises:
      ValueError: k exceeds the cache, or (when `lengths` is concrete) a row's
        `lengths + k` passes the cache end.
    """
    check_step(decoder_tokens.shape[1], lengths, cache.max_length)
    return self.decoder.step(decoder_tokens, jnp.asarray(lengths, jnp.int32), cache)


def init_params(config: T5Config, rng, enc_len: int = 8, dec_len: int = 8):
  """Randomly initialised params (T5X initialisers) as a plain nested dict."""
  model = Transformer(config)
  x = jnp.ones((1, enc_len), jnp.int32)
  y = jnp.ones((1, dec_len), jnp.int32)
  variables = model.init({'params': rng}, x, y, y, enable_dropout=False)
  return flax.core.unfreeze(variables['params'])


def params_axes(config: T5Config):
  """The logical axis names of every param (T5X's `params_axes` collection), unboxed.

  Returns a tree like the params whose leaves are tuples such as `('embed', 'mlp')`.
  """
  model = Transformer(config)
  x = jnp.ones((1, 2), jnp.int32)
  variables = jax.eval_shape(lambda: model.init({'params': jax.random.PRNGKey(0)}, x, x, x,
                                                enable_dropout=False))
  return unbox_axes(variables['params_axes'])


unbox_axes = params_lib.unbox_axes  # (kept here: its public name before models/params.py)


@functools.lru_cache(maxsize=64)
def param_shapes(config: T5Config):
  """`{path: shape}` of the params a `Transformer(config)` expects (no allocation, cached)."""
  return params_lib.shapes_of(lambda: init_params(config, jax.random.PRNGKey(0), 2, 2))


def check_params(params, config: T5Config) -> None:
  """Checks that `params` has exactly the tree and shapes `Transformer(config)` needs.

  Raises:
    ValueError: naming the first missing, unexpected or mismatching param and both
      shapes, with the fix (use the config the checkpoint was trained with).
  """
  params_lib.check_tree(params, param_shapes(config), 'T5Config',
                        'logits_via_embedding / mlp_activations / layers')


def encode_and_init_cache(model: Transformer, params, encoder_input_tokens,
                          max_length: int) -> DecoderCache:
  """Runs the encoder once and returns the decoder cache for `max_length` positions."""
  def fn(module, tokens):
    encoded = module.encode(tokens, enable_dropout=False)
    return module.init_cache(encoded, tokens, max_length)
  return model.apply({'params': params}, encoder_input_tokens, method=fn)


def make_step_fn(model: Transformer, params):
  """`step_fn(tokens [B, k], lengths [B], cache) -> (logits [B, k, V], cache)` for decoding."""
  def step_fn(tokens, lengths, cache):
    return model.apply({'params': params}, tokens, lengths, cache,
                       method=Transformer.decode_step)
  return step_fn
