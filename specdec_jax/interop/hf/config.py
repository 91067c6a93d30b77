"""Hugging Face `T5Config` (config.json) to and from this package's `T5Config`."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from specdec_jax.models.config import T5Config

_HF_ACTS = {  # HF feed_forward_proj -> T5Config.mlp_activations (numerics identical).
    'relu': ('relu',),
    'gated-gelu': ('gelu', 'linear'),  # HF maps gated-gelu to gelu_new (tanh approx.).
    'gated-gelu_new': ('gelu', 'linear'),
    'gelu_new': ('gelu',),
    'gated-relu': ('relu', 'linear'),
    'gated-silu': ('silu', 'linear'),
    'silu': ('silu',),
}
_ACTS_HF = {('relu',): 'relu', ('gelu', 'linear'): 'gated-gelu', ('gelu',): 'gelu_new',
            ('relu', 'linear'): 'gated-relu', ('silu', 'linear'): 'gated-silu',
            ('silu',): 'silu', ('swish', 'linear'): 'gated-silu', ('swish',): 'silu'}


def hf_config_as_dict(config_json) -> dict:
  if isinstance(config_json, Mapping):
    return dict(config_json)
  if hasattr(config_json, 'to_dict'):
    d = config_json.to_dict()
    # transformers 5.x keeps the untied request as an attribute only.
    if hasattr(config_json, 'scale_decoder_outputs'):
      d['scale_decoder_outputs'] = config_json.scale_decoder_outputs
    return d
  path = os.fspath(config_json)
  if os.path.isdir(path):
    path = os.path.join(path, 'config.json')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'No Hugging Face config at {path!r} (expected config.json).')
  with open(path) as f:
    return json.load(f)


def hf_tied(cfg: Mapping[str, Any]) -> bool:
  """Whether an HF T5 config ties (and scales) the output layer.

  transformers < 5 writes `tie_word_embeddings: false` for T5 1.1; transformers 5.x
  writes `tie_word_embeddings: true, scale_decoder_outputs: false`.
  """
  if cfg.get('scale_decoder_outputs') is False:
    return False
  return cfg.get('tie_word_embeddings', True) is not False


def t5_config_from_hf(config_json, **overrides) -> T5Config:
  """Maps a Hugging Face `T5Config` to ours (inverse of `hf_config_dict`).

  Args:
    config_json: a dict, a path to `config.json` or to its folder, or a
      `transformers.T5Config`.
    **overrides: T5Config fields to set (e.g. `dtype=jnp.bfloat16`).
  Returns:
    A `T5Config` with vocab_size, emb_dim (d_model), num_heads, head_dim (d_kv),
    mlp_dim (d_ff), num_encoder_layers (num_layers), num_decoder_layers,
    mlp_activations (from feed_forward_proj: 'relu' → ('relu',), 'gated-gelu' →
    ('gelu', 'linear')), logits_via_embedding (tied output layer: T5 1.0),
    dropout_rate and the relative-attention bucket settings.
  Raises:
    FileNotFoundError: no config.json at the path.
    ValueError: an activation or layer-norm epsilon this model cannot reproduce.
  """
  cfg = hf_config_as_dict(config_json)
  proj = cfg.get('feed_forward_proj', 'relu')
  if proj not in _HF_ACTS:
    raise ValueError(f'feed_forward_proj={proj!r} is not supported (exact-erf gelu differs '
                     f'from T5X\'s tanh gelu); supported: {sorted(_HF_ACTS)}.')
  eps = cfg.get('layer_norm_epsilon', 1e-6)
  if abs(eps - 1e-6) > 1e-12:
    raise ValueError(f'layer_norm_epsilon={eps} but this T5 implementation uses 1e-6.')
  num_layers = cfg.get('num_layers', 6)
  fields = dict(
      vocab_size=int(cfg.get('vocab_size', 32128)), emb_dim=int(cfg.get('d_model', 512)),
      num_heads=int(cfg.get('num_heads', 8)), head_dim=int(cfg.get('d_kv', 64)),
      mlp_dim=int(cfg.get('d_ff', 2048)), num_encoder_layers=int(num_layers),
      num_decoder_layers=int(cfg.get('num_decoder_layers') or num_layers),
      mlp_activations=_HF_ACTS[proj], logits_via_embedding=hf_tied(cfg),
      dropout_rate=float(cfg.get('dropout_rate', 0.1)),
      relative_attention_num_buckets=int(cfg.get('relative_attention_num_buckets', 32)),
      relative_attention_max_distance=int(cfg.get('relative_attention_max_distance', 128)))
  fields.update(overrides)
  return T5Config(**fields)


def hf_config_dict(config: T5Config) -> dict:
  """The HF `config.json` dict of a `T5ForConditionalGeneration` equal to `config`.

  Raises:
    ValueError: `config.mlp_activations` has no HF equivalent.
  """
  acts = tuple(config.mlp_activations)
  if acts not in _ACTS_HF:
    raise ValueError(f'mlp_activations={acts} has no Hugging Face T5 equivalent; '
                     f'supported: {sorted(_ACTS_HF)}.')
  tied = bool(config.logits_via_embedding)
  return {
      'architectures': ['T5ForConditionalGeneration'], 'model_type': 't5',
      'vocab_size': config.vocab_size, 'd_model': config.emb_dim, 'd_kv': config.head_dim,
      'd_ff': config.mlp_dim, 'num_layers': config.num_encoder_layers,
      'num_decoder_layers': config.num_decoder_layers, 'num_heads': config.num_heads,
      'relative_attention_num_buckets': config.relative_attention_num_buckets,
      'relative_attention_max_distance': config.relative_attention_max_distance,
      'dropout_rate': float(config.dropout_rate), 'layer_norm_epsilon': 1e-6,
      'initializer_factor': 1.0, 'feed_forward_proj': _ACTS_HF[acts],
      'is_encoder_decoder': True, 'use_cache': True, 'pad_token_id': 0,
      'eos_token_id': 1, 'decoder_start_token_id': 0,
      # transformers < 5 reads tie_word_embeddings; 5.x reads both (see NOTES).
      'tie_word_embeddings': tied, 'scale_decoder_outputs': tied,
  }


def hf_ties_weights(cfg: Mapping[str, Any]) -> bool:
  """Whether transformers uses the embedding as `lm_head` for this config.

  transformers 5.x always ties (it writes `tie_word_embeddings: true`, and keeps
  a T5 1.1's request as `scale_decoder_outputs: false`); transformers < 5 ties
  unless `tie_word_embeddings: false` (what it writes for T5 1.1). The HF default
  is True.
  """
  return cfg.get('tie_word_embeddings', True) is not False
