"""Model configurations and size presets of both model families.

`T5Config` carries the fields of T5X's `t5x/examples/t5/network.py::T5Config`, and
`DecoderOnlyConfig` those of `t5x/examples/decoder_only/network.py::TransformerConfig`, so
that T5X gin bindings (`network.T5Config.emb_dim = 512`,
`network.TransformerConfig.num_layers = 12`, ...) carry over unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax.numpy as jnp

# Vocabulary sizes as stored in public checkpoints (embedding rows, padded).
T5_VOCAB_SIZE = 32128  # 32,000 SentencePiece pieces + 100 sentinels, padded to 32,128.
MT5_VOCAB_SIZE = 250112
BYT5_VOCAB_SIZE = 384


@dataclasses.dataclass(frozen=True)
class T5Config:
  """Global hyperparameters of a T5 encoder-decoder (mirrors T5X's `T5Config`).

  Attributes:
    vocab_size: embedding rows (token ids are in `[0, vocab_size)`).
    dtype: activation / cache dtype (params are always stored in float32).
    emb_dim: model width d_model.
    num_heads: attention heads.
    num_encoder_layers: encoder depth.
    num_decoder_layers: decoder depth.
    head_dim: width of one head (d_kv).
    mlp_dim: hidden width of the feed-forward block (d_ff).
    mlp_activations: ('relu',) for T5 1.0, ('gelu', 'linear') for T5 1.1
      (gated-gelu, params `wi_0`/`wi_1`).
    dropout_rate: dropout probability used when `enable_dropout=True`.
    logits_via_embedding: T5 1.0 ties the output layer to the token embedding
      (and scales the decoder output by `emb_dim ** -0.5`); T5 1.1 has a separate
      `decoder/logits_dense`.
    float32_attention_logits: compute attention logits in float32.
    relative_attention_num_buckets: 32 in every public T5.
    relative_attention_max_distance: 128 in every public T5.
  """
  vocab_size: int = T5_VOCAB_SIZE
  dtype: Any = jnp.float32
  emb_dim: int = 512
  num_heads: int = 8
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  head_dim: int = 64
  mlp_dim: int = 2048
  mlp_activations: Sequence[str] = ('relu',)
  dropout_rate: float = 0.1
  logits_via_embedding: bool = False
  float32_attention_logits: bool = False
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128

  def __post_init__(self):
    # Tuples keep the config hashable (it is a static argument of jitted code).
    object.__setattr__(self, 'mlp_activations', tuple(self.mlp_activations))
    for name in ('vocab_size', 'emb_dim', 'num_heads', 'num_encoder_layers',
                 'num_decoder_layers', 'head_dim', 'mlp_dim'):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f'T5Config.{name} must be a positive int, got {value!r}.')
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ValueError(
          f'T5Config.dropout_rate must be in [0, 1), got {self.dropout_rate!r}.')

  def replace(self, **kwargs) -> 'T5Config':
    return dataclasses.replace(self, **kwargs)


def _t5_1_0(emb, heads, layers, head_dim, mlp):
  return T5Config(emb_dim=emb, num_heads=heads, num_encoder_layers=layers,
                  num_decoder_layers=layers, head_dim=head_dim, mlp_dim=mlp,
                  mlp_activations=('relu',), logits_via_embedding=True,
                  dropout_rate=0.1)


def _t5_1_1(emb, heads, layers, head_dim, mlp):
  return T5Config(emb_dim=emb, num_heads=heads, num_encoder_layers=layers,
                  num_decoder_layers=layers, head_dim=head_dim, mlp_dim=mlp,
                  mlp_activations=('gelu', 'linear'), logits_via_embedding=False,
                  dropout_rate=0.0)


# Sizes of the public checkpoints (T5X `t5x/examples/t5/t5_1_0/*.gin`, `t5_1_1/*.gin`).
PRESETS: dict[str, T5Config] = {
    't5_1_0_small': _t5_1_0(512, 8, 6, 64, 2048),
    't5_1_0_base': _t5_1_0(768, 12, 12, 64, 3072),
    't5_1_0_large': _t5_1_0(1024, 16, 24, 64, 4096),
    't5_1_0_3B': _t5_1_0(1024, 32, 24, 128, 16384),
    't5_1_0_11B': _t5_1_0(1024, 128, 24, 128, 65536),
    't5_1_1_small': _t5_1_1(512, 6, 8, 64, 1024),
    't5_1_1_base': _t5_1_1(768, 12, 12, 64, 2048),
    't5_1_1_large': _t5_1_1(1024, 16, 24, 64, 2816),
    't5_1_1_xl': _t5_1_1(2048, 32, 24, 64, 5120),
    't5_1_1_xxl': _t5_1_1(4096, 64, 24, 64, 10240),
}
# mT5 and ByT5 share the T5 1.1 architecture with other vocabularies (ByT5 also
# uses unbalanced encoder/decoder depths; only the vocabulary is preset here).
for _size in ('small', 'base', 'large', 'xl', 'xxl'):
  PRESETS[f'mt5_{_size}'] = PRESETS[f't5_1_1_{_size}'].replace(vocab_size=MT5_VOCAB_SIZE)
  PRESETS[f'byt5_{_size}'] = PRESETS[f't5_1_1_{_size}'].replace(vocab_size=BYT5_VOCAB_SIZE)


def preset(name: str, **overrides):
  """Returns the named size preset, e.g. `preset('t5_1_1_small', dtype=jnp.bfloat16)`
  (a `DecoderOnlyConfig` for the `decoder_only_*` names).

  Raises:
    KeyError: unknown name (the message lists the known ones).
  """
  if name not in PRESETS:
    raise KeyError(f'Unknown T5 preset {name!r}; known: {sorted(PRESETS)}.')
  return PRESETS[name].replace(**overrides)


@dataclasses.dataclass(frozen=True)
class DecoderOnlyConfig:
  """Hyperparameters of a decoder-only Transformer (mirrors T5X's decoder-only
  `network.TransformerConfig`, `t5x/examples/decoder_only/network.py`).

  Attributes:
    vocab_size: embedding rows (token ids are in `[0, vocab_size)`).
    dtype: activation / cache dtype (params are always stored in float32).
    emb_dim, num_heads, num_layers, head_dim, mlp_dim: widths and depth.
    mlp_activations: ('relu',), or ('gelu', 'linear') for gated-gelu (`wi_0`/`wi_1`).
    dropout_rate: dropout probability used when `enable_dropout=True`.
    logits_via_embedding: tie the output layer to `decoder/token_embedder` (scaled by
      `emb_dim ** -0.5`); otherwise a separate `decoder/logits_dense`.
  Relative-position buckets are fixed at 32 / max distance 128, as in T5X's network.
  """
  vocab_size: int = T5_VOCAB_SIZE
  dtype: Any = jnp.float32
  emb_dim: int = 512
  num_heads: int = 8
  num_layers: int = 6
  head_dim: int = 64
  mlp_dim: int = 2048
  mlp_activations: Sequence[str] = ('relu',)
  dropout_rate: float = 0.1
  logits_via_embedding: bool = False

  def __post_init__(self):
    object.__setattr__(self, 'mlp_activations', tuple(self.mlp_activations))
    for name in ('vocab_size', 'emb_dim', 'num_heads', 'num_layers', 'head_dim', 'mlp_dim'):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f'DecoderOnlyConfig.{name} must be a positive int, got {value!r}.')
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ValueError(
          f'DecoderOnlyConfig.dropout_rate must be in [0, 1), got {self.dropout_rate!r}.')

  def replace(self, **kwargs) -> 'DecoderOnlyConfig':
    return dataclasses.replace(self, **kwargs)


def _decoder_only(emb, heads, layers, head_dim, mlp):
  return DecoderOnlyConfig(emb_dim=emb, num_heads=heads, num_layers=layers, head_dim=head_dim,
                           mlp_dim=mlp, mlp_activations=('gelu', 'linear'),
                           logits_via_embedding=True, dropout_rate=0.0)


# T5X's decoder-only sizes (`t5x/examples/decoder_only/models/{base,large,xl,xxl}.gin`;
# their gins set dtype bfloat16 and the dropout rate per run).
PRESETS.update({
    'decoder_only_base': _decoder_only(768, 12, 12, 64, 2048),
    'decoder_only_large': _decoder_only(1024, 16, 24, 64, 2816),
    'decoder_only_xl': _decoder_only(2048, 32, 24, 64, 5120),
    'decoder_only_xxl': _decoder_only(4096, 64, 24, 64, 10240),
})

FAMILIES = ('t5', 'decoder_only')
ModelConfig = Any  # T5Config | DecoderOnlyConfig


def family_of(config) -> str:
  """'t5' or 'decoder_only' for a config object.

  Raises:
    TypeError: for anything else.
  """
  if isinstance(config, T5Config):
    return 't5'
  if isinstance(config, DecoderOnlyConfig):
    return 'decoder_only'
  raise TypeError(f'expected a T5Config or DecoderOnlyConfig, got {type(config).__name__}.')


def to_dict(config) -> dict[str, Any]:
  """A config as a JSON-ready dict (dtype by name, activations as a list); a
  `DecoderOnlyConfig` also gets `"family": "decoder_only"` (a T5Config's dict has no
  family key, as in every file written before the decoder-only family)."""
  d = dataclasses.asdict(config)
  d['dtype'] = jnp.dtype(config.dtype).name
  d['mlp_activations'] = list(config.mlp_activations)
  if family_of(config) == 'decoder_only':
    d = {'family': 'decoder_only', **d}
  return d


def from_dict(d: dict[str, Any], what: str = 'config'):
  """The config of a dict written by `to_dict` (or a `pair.json` / `config.json`):
  a `DecoderOnlyConfig` when `d["family"] == "decoder_only"`, else a `T5Config`.

  Raises:
    ValueError: naming `what`, for an unknown family or fields the config does not have.
  """
  d = dict(d)
  family = d.pop('family', 't5')
  if family not in FAMILIES:
    raise ValueError(f'{what}: unknown model family {family!r}; use one of {list(FAMILIES)}.')
  cls = T5Config if family == 't5' else DecoderOnlyConfig
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(d) - fields)
  if unknown:
    raise ValueError(f'{what}: unknown {cls.__name__} fields {unknown}.')
  if 'dtype' in d:
    d['dtype'] = jnp.dtype(d['dtype']).type
  if 'mlp_activations' in d:
    d['mlp_activations'] = tuple(d['mlp_activations'])
  return cls(**d)
