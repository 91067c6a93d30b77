"""The model families behind one interface: build a model, init and check its params,
and run its full-sequence forward on a T5X feature batch, from its config's type.

`T5Config` → `t5.Transformer` (encoder–decoder); `DecoderOnlyConfig` →
`decoder_only.DecoderOnlyTransformer`. Jobs that handle both (training, evaluation) go
through here instead of branching on the family themselves.
"""

from __future__ import annotations

from specdec_jax.models import decoder_only
from specdec_jax.models import t5
from specdec_jax.models.config import family_of


def build(config):
  """The flax module of a config (`t5.Transformer` or `DecoderOnlyTransformer`)."""
  if family_of(config) == 't5':
    return t5.Transformer(config)
  return decoder_only.DecoderOnlyTransformer(config)


def init_params(config, rng):
  """Randomly initialised params of the config's family (T5X's initialisers)."""
  if family_of(config) == 't5':
    return t5.init_params(config, rng)
  return decoder_only.init_params(config, rng)


def param_shapes(config) -> dict:
  """`{keystr path: shape}` of the params the config's model has (cached per config)."""
  if family_of(config) == 't5':
    return t5.param_shapes(config)
  return decoder_only.param_shapes(config)


def check_params(params, config) -> None:
  """The family's `check_params` (ValueError naming the first mismatch)."""
  if family_of(config) == 't5':
    return t5.check_params(params, config)
  return decoder_only.check_params(params, config)


def forward(model, params, batch, *, enable_dropout: bool, rngs=None):
  """Full-sequence float32 logits `[batch, length, vocab]` of a T5X feature batch.

  Encoder–decoder: `encoder_input_tokens`, `decoder_input_tokens`,
  `decoder_target_tokens`. Decoder-only: `decoder_input_tokens`,
  `decoder_target_tokens`, and `decoder_causal_attention` when present (prefix LM: T5X's
  `DecoderOnlyModel(inputs_bidirectional_attention=True)` passes it, a causal LM does not).
  """
  if isinstance(model, t5.Transformer):
    return model.apply({'params': params}, batch['encoder_input_tokens'],
                       batch['decoder_input_tokens'], batch['decoder_target_tokens'],
                       enable_dropout=enable_dropout, rngs=rngs)
  return model.apply({'params': params}, batch['decoder_input_tokens'],
                     batch['decoder_target_tokens'],
                     decoder_causal_attention=batch.get('decoder_causal_attention'),
                     enable_dropout=enable_dropout, rngs=rngs)
