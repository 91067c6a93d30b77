"""Decoder-only Transformer in flax.linen with T5X's param tree, prompt prefill and a
k-token cached call.

The param tree is the one of T5X's `t5x/examples/decoder_only/network.py`
(`DecoderWrapper` → `decoder/{token_embedder, relpos_bias, layers_i, decoder_norm,
logits_dense}`), so a checkpoint T5X wrote for that network loads unchanged and ours
load in T5X. The config mirrors its `TransformerConfig` (`models.config.DecoderOnlyConfig`).

Decoding (the same contract as `models/t5.py`, so every decoder of `decoding/` runs on it):
  `prefill` writes a prompt's keys/values in one forward pass, as T5X's
    `DecoderOnlyModel._compute_kv_cache` does: the prompt region `[BOS, x_1 … x_m]` is
    run with T5X's decoder mask (`layers.make_decoder_mask`), causal or — in prefix-LM
    mode (`inputs_bidirectional_attention`) — bidirectional inside the region marked by
    `decoder_causal_attention`; positions `< m` are then valid in the cache and decoding
    starts at `initial_index = m` by re-feeding x_m (T5X's convention: the last input
    token's logits give the first output token).
  `decode_step` consumes k ≥ 1 tokens per row at per-row positions
    `lengths[b] … lengths[b]+k−1`, overwriting the cache there; query i of row b sees
    keys at positions `≤ lengths[b] + i` (`models/cache.py`).
"""

from __future__ import annotations

import functools
from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from specdec_jax.models import layers
from specdec_jax.models import params as params_lib
from specdec_jax.models.cache import SelfAttentionCache
from specdec_jax.models.cache import check_step
from specdec_jax.models.cache import write_rows as _write_rows
from specdec_jax.models.config import DecoderOnlyConfig

RELPOS_BUCKETS = 32  # fixed in T5X's decoder-only network
RELPOS_MAX_DISTANCE = 128


def make_decoder_mask(decoder_target_tokens, decoder_causal_attention=None,
                      decoder_segment_ids=None):
  """Boolean self-attention mask `[batch, 1, length, length]` (True = attend).

  T5X's `decoder_only/layers.make_decoder_mask`: causal, OR (prefix LM) both positions
  inside the region where `decoder_causal_attention == 1`; AND both positions are not
  padding (`decoder_target_tokens > 0`); AND (packing) the same segment.
  """
  length = decoder_target_tokens.shape[-1]
  idx = jnp.arange(length)
  mask = (idx[None, :] <= idx[:, None])[None, None]
  if decoder_causal_attention is not None:
    region = decoder_causal_attention > 0
    mask = mask | (region[:, None, :, None] & region[:, None, None, :])
  valid = decoder_target_tokens > 0
  mask = mask & valid[:, None, :, None] & valid[:, None, None, :]
  if decoder_segment_ids is not None:
    mask = mask & (decoder_segment_ids[:, None, :, None] == decoder_segment_ids[:, None, None, :])
  return mask


class DecoderLayer(nn.Module):
  """Pre-norm self-attention + MLP block (T5X decoder-only `DecoderLayer`)."""
  config: DecoderOnlyConfig

  def setup(self):
    cfg = self.config
    self.pre_self_attention_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.self_attention = layers.MultiHeadDotProductAttention(
        num_heads=cfg.num_heads, head_dim=cfg.head_dim, out_features=cfg.emb_dim,
        dtype=cfg.dtype, dropout_rate=cfg.dropout_rate)
    self.pre_mlp_layer_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.mlp = layers.MlpBlock(intermediate_dim=cfg.mlp_dim,
                               activations=cfg.mlp_activations,
                               dropout_rate=cfg.dropout_rate, dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))

  def _mlp(self, x, inputs, deterministic):
    x = self.dropout(x, deterministic=deterministic) + inputs
    y = self.mlp(self.pre_mlp_layer_norm(x), deterministic)
    return self.dropout(y, deterministic=deterministic) + x

  def __call__(self, inputs, bias, deterministic):
    """Full-sequence layer on `[B, L, E]`; returns (out, keys, values `[B, L, H, D]`)."""
    x = self.pre_self_attention_layer_norm(inputs)
    k, v = self.self_attention.project_kv(x)
    x = self.self_attention.attend(x, k, v, bias, deterministic)
    return self._mlp(x, inputs, deterministic), k, v

  def step(self, inputs, lengths, bias, k_cache, v_cache):
    """Cached layer on k new positions per row; returns (out, k_cache, v_cache)."""
    x = self.pre_self_attention_layer_norm(inputs)
    new_k, new_v = self.self_attention.project_kv(x)
    shape = k_cache.shape
    k_flat = _write_rows(k_cache, new_k, lengths)
    v_flat = _write_rows(v_cache, new_v, lengths)
    x = self.self_attention.attend_cached(x, k_flat, v_flat, bias)
    return self._mlp(x, inputs, True), k_flat.reshape(shape), v_flat.reshape(shape)


class Decoder(nn.Module):
  """The stack, named like T5X's `Decoder` (its params live under `decoder/`)."""
  config: DecoderOnlyConfig

  def setup(self):
    cfg = self.config
    self.relpos_bias = layers.RelativePositionBiases(
        num_buckets=RELPOS_BUCKETS, max_distance=RELPOS_MAX_DISTANCE,
        num_heads=cfg.num_heads, dtype=cfg.dtype)
    self.token_embedder = layers.Embed(num_embeddings=cfg.vocab_size, features=cfg.emb_dim,
                                       dtype=cfg.dtype)
    self.layers = [DecoderLayer(cfg) for _ in range(cfg.num_layers)]
    self.decoder_norm = layers.LayerNorm(dtype=cfg.dtype)
    self.dropout = nn.Dropout(cfg.dropout_rate, broadcast_dims=(-2,))
    if not cfg.logits_via_embedding:
      self.logits_dense = layers.DenseGeneral(
          cfg.vocab_size, dtype=jnp.float32, kernel_axes=('embed', 'vocab'))

  def _embed(self, tokens, deterministic):
    y = self.token_embedder(tokens.astype(jnp.int32))
    return self.dropout(y, deterministic=deterministic).astype(self.config.dtype)

  def _logits(self, y, deterministic):
    """Float32 logits `[..., vocab_size]` (T5X: `logits_dense` in float32, or the tied
    float32 embedding divided by √emb_dim)."""
    y = self.decoder_norm(y)
    y = self.dropout(y, deterministic=deterministic)
    if self.config.logits_via_embedding:
      return self.token_embedder.attend(y) / jnp.sqrt(y.shape[-1])
    return self.logits_dense(y)

  def _full(self, tokens, mask, deterministic):
    length = tokens.shape[1]
    positions = jnp.arange(length, dtype=jnp.int32)
    bias = (self.relpos_bias(positions[None], positions, bidirectional=False) +
            layers.mask_to_bias(mask, self.config.dtype))
    y = self._embed(tokens, deterministic)
    kv = []
    for layer in self.layers:
      y, k, v = layer(y, bias, deterministic)
      kv.append((k, v))
    return y, kv

  def __call__(self, decoder_input_tokens, decoder_target_tokens, decoder_segment_ids,
               decoder_causal_attention, deterministic):
    mask = make_decoder_mask(decoder_target_tokens, decoder_causal_attention,
                             decoder_segment_ids)
    y, _ = self._full(decoder_input_tokens, mask, deterministic)
    return self._logits(y, deterministic)

  def init_cache(self, batch: int, max_length: int) -> SelfAttentionCache:
    cfg = self.config
    shape = (batch, cfg.num_heads, max_length, cfg.head_dim)
    zeros = tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers))
    return SelfAttentionCache(self_k=zeros, self_v=zeros)

  def prefill(self, tokens, mask, cache: SelfAttentionCache) -> SelfAttentionCache:
    _, kv = self._full(tokens, mask, True)
    # Every row writes slots 0 … P − 1: one slice update at a static offset per array
    # (`[B, P, H, D]` → `[B, H, P, D]`), not a per-row scatter (XLA:CPU loops over a
    # scatter's rows; the prefill is on the critical path of every decode).
    write = lambda c, x: jax.lax.dynamic_update_slice(
        c, jnp.swapaxes(x, 1, 2).astype(c.dtype), (0, 0, 0, 0))
    new_k = tuple(write(c, k) for c, (k, _) in zip(cache.self_k, kv))
    new_v = tuple(write(c, v) for c, (_, v) in zip(cache.self_v, kv))
    return cache.replace(self_k=new_k, self_v=new_v)

  def step(self, tokens, lengths, cache: SelfAttentionCache):
    cfg = self.config
    k = tokens.shape[1]
    q_pos = lengths[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]  # [B, k]
    k_pos = jnp.arange(cache.max_length, dtype=jnp.int32)  # [L]
    visible = k_pos[None, None, :] <= q_pos[:, :, None]  # [B, k, L]
    bias = (self.relpos_bias(q_pos, k_pos, bidirectional=False) +
            layers.mask_to_bias(visible[:, None], cfg.dtype))
    y = self._embed(tokens, True)
    new_k, new_v = [], []
    for i, layer in enumerate(self.layers):
      y, kc, vc = layer.step(y, lengths, bias, cache.self_k[i], cache.self_v[i])
      new_k.append(kc)
      new_v.append(vc)
    return self._logits(y, True), cache.replace(self_k=tuple(new_k), self_v=tuple(new_v))


class DecoderOnlyTransformer(nn.Module):
  """Decoder-only LM (T5X `decoder_only.network.DecoderWrapper`) with prefill and a
  k-token cached call.

  Methods (call through `model.apply({'params': params}, ..., method=...)`):
    `__call__`: full-sequence logits, T5X's signature.
    `init_cache`: an empty `SelfAttentionCache`.
    `prefill`: the prompt's keys/values in one pass (T5X `_compute_kv_cache`).
    `decode_step`: k new tokens per row at per-row positions, with the cache.
  """
  config: DecoderOnlyConfig

  def setup(self):
    self.decoder = Decoder(self.config)

  def __call__(self, decoder_input_tokens, decoder_target_tokens, decoder_segment_ids=None,
               decoder_positions=None, decoder_causal_attention=None, *,
               enable_dropout: bool = True, decode: bool = False,
               max_decode_length: Optional[int] = None, prefill: Optional[bool] = None,
               prefill_lengths=None):
    """Logits `[batch, length, vocab_size]` float32 (T5X `Decoder.__call__`).

    Args:
      decoder_input_tokens: int `[batch, length]`, the sequence shifted right (BOS 0 first).
      decoder_target_tokens: int `[batch, length]`; 0 marks padding (masked).
      decoder_segment_ids: optional `[batch, length]` packing segments.
      decoder_positions: accepted for T5X's signature; unused there too (relative
        positions come from the array index).
      decoder_causal_attention: optional `[batch, length]`, 1 on the prefix-LM inputs
        region (bidirectional attention inside it).
    Raises:
      ValueError: `decode` or `prefill` (T5X's cache modes); use `init_cache`, `prefill`
        and `decode_step` (method=...) instead.
    """
    del decoder_positions, max_decode_length, prefill_lengths
    if decode or prefill:
      raise ValueError('decode=True / prefill=True are T5X cache modes, not supported here: '
                       'use DecoderOnlyTransformer.init_cache, .prefill and .decode_step '
                       '(k tokens per call, per-row positions).')
    return self.decoder(decoder_input_tokens, decoder_target_tokens, decoder_segment_ids,
                        decoder_causal_attention, deterministic=not enable_dropout)

  def init_cache(self, batch: int, max_length: int) -> SelfAttentionCache:
    """Zero cache `[batch, heads, max_length, head_dim]` per layer (static sizes)."""
    return self.decoder.init_cache(batch, max_length)

  def prefill(self, inputs, causal_attention_mask, cache: SelfAttentionCache,
              inputs_bidirectional_attention: bool = False) -> SelfAttentionCache:
    """Writes the prompt region's keys/values into `cache` in one forward pass.

    Mirrors T5X's `DecoderOnlyModel._compute_kv_cache`: the forward runs on `inputs`
    with `decoder_target_tokens = causal_attention_mask` (so the BOS position counts
    as a token) and, in prefix-LM mode, `decoder_causal_attention =
    causal_attention_mask`. Every slot `< P` is written; the decoders then treat only
    positions `< m` as valid (m = `prompt_lengths(inputs)`, T5X's `inputs_lengths`)
    and recompute position m (x_m) in their first step.

    Args:
      inputs: int `[batch, P]`, `[0, x_1 … x_m, 0 …]` (BOS first, 0-padded), P ≤ the
        cache length.
      causal_attention_mask: int/bool `[batch, P]`, 1 on positions 0 … m.
      cache: from `init_cache`.
      inputs_bidirectional_attention: prefix-LM mode (static).
    Raises:
      ValueError: P exceeds the cache length.
    """
    if inputs.shape[1] > cache.max_length:
      raise ValueError(f'the prompt region has {inputs.shape[1]} positions but the cache '
                       f'holds {cache.max_length}; build the cache with a larger max_length.')
    mask = make_decoder_mask(
        causal_attention_mask, causal_attention_mask if inputs_bidirectional_attention
        else None)
    return self.decoder.prefill(inputs, mask, cache)

  def decode_step(self, decoder_tokens, lengths, cache: SelfAttentionCache):
    """Consumes k tokens per row at per-row positions (the contract of
    `t5.Transformer.decode_step`).

    Args:
      decoder_tokens: int `[batch, k]`, the inputs at positions `lengths[b] …
        lengths[b] + k − 1`.
      lengths: int32 `[batch]`, positions of each row already valid in the cache.
      cache: `SelfAttentionCache`.
    Returns:
      `(logits [batch, k, vocab_size] float32, new cache)`; logits[:, i] predicts the
      token at position `lengths + i + 1`.
    Raises:
      ValueError: k exceeds the cache, or (concrete `lengths`) a row passes its end.
    """
    check_step(decoder_tokens.shape[1], lengths, cache.max_length)
    return self.decoder.step(decoder_tokens, jnp.asarray(lengths, jnp.int32), cache)


def init_params(config: DecoderOnlyConfig, rng, length: int = 8):
  """Randomly initialised params (T5X's initialisers) as a plain nested dict."""
  x = jnp.ones((1, length), jnp.int32)
  variables = DecoderOnlyTransformer(config).init({'params': rng}, x, x, enable_dropout=False)
  return flax.core.unfreeze(variables['params'])


def params_axes(config: DecoderOnlyConfig):
  """The logical axis names of every param (T5X's `params_axes`), as a params-like tree."""
  x = jnp.ones((1, 2), jnp.int32)
  variables = jax.eval_shape(lambda: DecoderOnlyTransformer(config).init(
      {'params': jax.random.PRNGKey(0)}, x, x, enable_dropout=False))
  return params_lib.unbox_axes(variables['params_axes'])


@functools.lru_cache(maxsize=64)
def param_shapes(config: DecoderOnlyConfig):
  """`{path: shape}` of the params a `DecoderOnlyTransformer(config)` expects (cached)."""
  return params_lib.shapes_of(lambda: init_params(config, jax.random.PRNGKey(0), 2))


def check_params(params, config: DecoderOnlyConfig) -> None:
  """Checks that `params` has exactly the tree and shapes the config needs.

  Raises:
    ValueError: naming the first missing, unexpected or mismatching param, with the fix.
  """
  params_lib.check_tree(params, param_shapes(config), 'DecoderOnlyConfig',
                        'logits_via_embedding / mlp_activations / num_layers')


def prompt_lengths(inputs):
  """T5X's `inputs_lengths`: the non-zero tokens after the BOS, `[batch]` int32."""
  return jnp.sum(inputs[:, 1:] != 0, axis=-1).astype(jnp.int32)


def prefill_cache(model: DecoderOnlyTransformer, params, inputs, max_length: int,
                  causal_attention_mask=None, inputs_bidirectional_attention: bool = False):
  """An empty cache of `max_length` slots, prefilled with the prompts (T5X
  `DecoderOnlyModel._compute_kv_cache`).

  Args:
    inputs: int `[batch, P]`: `[0, x_1 … x_m, 0 …]` per row (BOS first, right-padded).
    max_length: cache slots (static), ≥ P.
    causal_attention_mask: `[batch, P]`, 1 on positions 0 … m; default built from
      `inputs` (position 0 and every non-zero token).
    inputs_bidirectional_attention: prefix-LM mode.
  Returns:
    `(cache, initial_index [batch] int32)`: the cache is valid below `initial_index = m`.
  """
  inputs = jnp.asarray(inputs, jnp.int32)
  if causal_attention_mask is None:
    causal_attention_mask = (inputs != 0).at[:, 0].set(True).astype(jnp.int32)

  def fn(module, inputs, mask):
    cache = module.init_cache(inputs.shape[0], max_length)
    return module.prefill(inputs, mask, cache, inputs_bidirectional_attention)
  cache = model.apply({'params': params}, inputs, causal_attention_mask, method=fn)
  return cache, prompt_lengths(inputs)


def make_step_fn(model: DecoderOnlyTransformer, params):
  """`step_fn(tokens [B, k], lengths [B], cache) -> (logits [B, k, V], cache)`."""
  def step_fn(tokens, lengths, cache):
    return model.apply({'params': params}, tokens, lengths, cache,
                       method=DecoderOnlyTransformer.decode_step)
  return step_fn
