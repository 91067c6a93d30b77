"""T5X feature conventions: batch features, decoder-prompt layouts, feature converter.

T5X's `EncoderDecoderModel` reads seqio `EncDecFeatureConverter` features
(`encoder_input_tokens`, `decoder_input_tokens`, `decoder_target_tokens`,
`decoder_loss_weights`) and hands its `decode_fn` the decoder prompt in the
*shifted-right* layout of `decoder_input_tokens`: position 0 holds the BOS token 0,
positions 1… the forced prompt tokens, then 0s (`t5x/models.py`
`EncoderDecoderModel.predict_batch_with_aux`, `t5x/decoding.py temperature_sample`).
`specdec_jax.decoding` takes the prompt without that leading BOS. The two converters
here map one layout onto the other.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

# Packed-example features (T5X `pack=True`), which our T5 does not support.
PACKING_KEYS = ('encoder_segment_ids', 'decoder_segment_ids', 'encoder_positions',
                'decoder_positions')


def t5x_prompt_to_ours(inputs):
  """T5X's decode_fn prompt `[0, p1, p2, …, 0]` → ours `[p1, p2, …, 0, 0]`.

  Args:
    inputs: int `[batch, max_decode_len]` in T5X's layout; column 0 (the BOS slot) is
      ignored, as T5X's `temperature_sample` ignores it.
  Returns:
    int32 `[batch, max_decode_len]`: the same forced tokens one position to the left,
    a 0 appended (`specdec_jax.decoding` layout: index i is decoder position i + 1).
  Raises:
    ValueError: `inputs` not 2-D.
  """
  inputs = jnp.asarray(inputs, jnp.int32)
  if inputs.ndim != 2:
    raise ValueError(f'inputs must be [batch, max_decode_len] int, got shape {inputs.shape}.')
  return jnp.concatenate([inputs[:, 1:], jnp.zeros_like(inputs[:, :1])], axis=1)


def ours_prompt_to_t5x(prompt):
  """Inverse of `t5x_prompt_to_ours` for prompts whose last column is 0: ours → T5X's.

  Args:
    prompt: int `[batch, max_decode_len]`, forced tokens first (our layout).
  Returns:
    int32 `[batch, max_decode_len]`: `[0, p1, p2, …]` (the last column is dropped).
  """
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 2:
    raise ValueError(f'prompt must be [batch, max_decode_len] int, got shape {prompt.shape}.')
  return jnp.concatenate([jnp.zeros_like(prompt[:, :1]), prompt[:, :-1]], axis=1)


def decoder_prompt_inputs(decoder_input_tokens, eos_id: int, prompt_with_targets: bool):
  """The prompt T5X's `predict_batch_with_aux` passes to `decode_fn` (T5X layout).

  With `prompt_with_targets`, `decoder_input_tokens` with every EOS id zeroed (T5X
  strips EOS so decoding does not stop after the prompt); otherwise all zeros.
  """
  tokens = jnp.asarray(decoder_input_tokens, jnp.int32)
  if prompt_with_targets:
    return tokens * (tokens != eos_id)
  return jnp.zeros_like(tokens)


def check_batch(batch, keys, packing_ok: bool = False) -> None:
  """Raises ValueError unless `batch` has `keys` (and no packing features unless allowed)."""
  missing = [k for k in keys if k not in batch]
  if missing:
    raise ValueError(f'The batch lacks {missing} (has {sorted(batch)}); T5X encoder-decoder '
                     'features are encoder_input_tokens, decoder_input_tokens, '
                     'decoder_target_tokens[, decoder_loss_weights].')
  if not packing_ok:
    packed = [k for k in PACKING_KEYS if k in batch]
    if packed:
      raise ValueError(f'Packed examples ({packed}) are not supported by this T5; use a '
                       'feature converter with pack=False (T5X: '
                       'utils.DatasetConfig.pack = False).')


class FeatureConverterDescriptor:
  """A seqio feature converter class (default `seqio.EncDecFeatureConverter`; the
  decoder-only model class: `DecoderFeatureConverter`), imported on first use (seqio
  pulls in TensorFlow).

  On an instance it is the seqio class itself; on the class (where `inspect` and gin
  look) it is this object, which constructs the converter when called.
  """

  def __init__(self, name: str = 'EncDecFeatureConverter'):
    self.name = name

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return self.resolve()

  def resolve(self):
    import seqio  # pylint: disable=g-import-not-at-top
    return getattr(seqio, self.name)

  def __call__(self, *args, **kwargs):
    return self.resolve()(*args, **kwargs)

  def __repr__(self):
    return f'<lazy seqio.{self.name}>'


@dataclasses.dataclass(frozen=True)
class DecoderParams:
  """Default `return_all_decodes` / `num_decodes` (T5X `models.DecoderParams`)."""
  return_all_decodes: bool = False
  num_decodes: int = 1
