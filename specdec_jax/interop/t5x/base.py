"""The base classes of the T5X model classes: T5X's own models, or stand-ins.

When `t5x` is importable, `Base` is `t5x.models.EncoderDecoderModel` and
`DecoderOnlyBase` is `t5x.models.DecoderOnlyModel` (T5X's trainer then uses T5X's own
`loss_fn` and clu metrics on top of our `_compute_logits`); otherwise they are
`StandaloneEncoderDecoderModel` and `StandaloneDecoderOnlyModel`, the slices of T5X's
interface the model classes need, whose `loss_fn` returns plain arrays as metrics.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp

from specdec_jax.interop.t5x import features as t5x_features
from specdec_jax.interop.t5x.losses import (compute_weighted_cross_entropy,
                                    loss_normalizing_factor_and_weights, sequence_scores)

PyTree = Any

try:  # T5X is optional: subclass its model when it is installed.
  from t5x import models as _t5x_models  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
  _t5x_models = None

HAS_T5X = _t5x_models is not None

DecoderParams = t5x_features.DecoderParams
if HAS_T5X:  # pragma: no cover - depends on the environment
  DecoderParams = _t5x_models.DecoderParams  # pylint: disable=invalid-name


class StandaloneEncoderDecoderModel:
  """The slice of T5X's `BaseTransformerModel` / `EncoderDecoderModel` used without T5X.

  Holds the module, vocabularies, optimizer definition and loss settings and
  implements `loss_fn`, `eval_fn` and `predict_batch` on top of the subclass's
  `_compute_logits` and `predict_batch_with_aux`. `loss_fn` returns plain scalar
  arrays as metrics (T5X returns clu metrics).
  """

  FEATURE_CONVERTER_CLS = t5x_features.FeatureConverterDescriptor()

  def __init__(self, module, input_vocabulary, output_vocabulary, optimizer_def,
               decode_fn=None, feature_converter_cls=None, label_smoothing: float = 0.0,
               z_loss: float = 0.0, loss_normalizing_factor=None,
               default_decoder_params: Optional[DecoderParams] = None):
    if feature_converter_cls is not None:
      self.FEATURE_CONVERTER_CLS = feature_converter_cls  # pylint: disable=invalid-name
    self._default_decoder_params = default_decoder_params or DecoderParams()
    self.module = module
    self._input_vocabulary = input_vocabulary
    self._output_vocabulary = output_vocabulary
    self._decode_fn = decode_fn
    self._label_smoothing = label_smoothing
    self._z_loss = z_loss
    self._loss_normalizing_factor = loss_normalizing_factor
    self.optimizer_def = optimizer_def

  @property
  def input_vocabulary(self):
    return self._input_vocabulary

  @property
  def output_vocabulary(self):
    return self._output_vocabulary

  @property
  def decode_fn(self):
    return self._decode_fn

  def loss_fn(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
              dropout_rng: Optional[jax.Array]):
    """Training loss: summed label-smoothed cross-entropy plus z-loss (T5X semantics).

    Args:
      params: the target's params.
      batch: `encoder_input_tokens`, `decoder_input_tokens`, `decoder_target_tokens`
        (all int `[batch, len]`), optionally `decoder_loss_weights` (default:
        `decoder_target_tokens > 0`).
      dropout_rng: PRNG key enabling dropout, or None (deterministic).
    Returns:
      `(loss, metrics)`: `loss` a float32 scalar (sum over tokens, divided by
      `loss_normalizing_factor` when set); `metrics` a dict of float32 scalars
      `loss`, `z_loss`, `cross_ent_loss`, `weight_sum`, `accuracy`,
      `loss_per_nonpadding_target_token`.
    Raises:
      ValueError: a packed batch (segment ids / positions), or missing features.
    """
    logits = self._compute_logits(params, batch, dropout_rng)
    factor, weights = loss_normalizing_factor_and_weights(self._loss_normalizing_factor, batch)
    targets = batch['decoder_target_tokens']
    loss, z_loss, weight_sum = compute_weighted_cross_entropy(
        logits, targets, weights, label_smoothing=self._label_smoothing, z_loss=self._z_loss,
        loss_normalizing_factor=factor)
    mask = jnp.asarray(targets > 0, jnp.float32)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32) * mask
    nonpadding = jnp.maximum(jnp.sum(mask), 1.0)
    metrics = {'loss': loss, 'z_loss': z_loss, 'cross_ent_loss': loss - z_loss,
               'weight_sum': weight_sum, 'accuracy': jnp.sum(correct) / nonpadding,
               'loss_per_nonpadding_target_token': loss / nonpadding}
    return loss, metrics

  def eval_fn(self, params: PyTree, batch: Mapping[str, jnp.ndarray]):
    """`loss_fn` without dropout."""
    return self.loss_fn(params=params, batch=batch, dropout_rng=None)

  def predict_batch(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                    rng: Optional[jax.Array] = None):
    """`predict_batch_with_aux(...)[0]`."""
    return self.predict_batch_with_aux(params=params, batch=batch, rng=rng)[0]


class StandaloneDecoderOnlyModel(StandaloneEncoderDecoderModel):
  """The slice of T5X's `DecoderOnlyModel` used without T5X (t5x/models.py): one
  vocabulary, seqio's `DecoderFeatureConverter`, `inputs_bidirectional_attention`, and
  `score_batch` on top of the subclass's `_compute_logits`."""

  FEATURE_CONVERTER_CLS = t5x_features.FeatureConverterDescriptor('DecoderFeatureConverter')

  def __init__(self, module, vocabulary, optimizer_def, decode_fn=None,
               inputs_bidirectional_attention: bool = False, feature_converter_cls=None,
               label_smoothing: float = 0.0, z_loss: float = 0.0,
               loss_normalizing_factor=None):
    self._inputs_bidirectional_attention = inputs_bidirectional_attention
    super().__init__(module, vocabulary, vocabulary, optimizer_def, decode_fn=decode_fn,
                     feature_converter_cls=feature_converter_cls,
                     label_smoothing=label_smoothing, z_loss=z_loss,
                     loss_normalizing_factor=loss_normalizing_factor)

  def _get_decoder_causal_attention(self, batch):
    """`batch['decoder_causal_attention']` in prefix-LM mode, else None (T5X's method).

    Raises:
      ValueError: prefix-LM mode and the batch lacks the feature.
    """
    if self._inputs_bidirectional_attention:
      if 'decoder_causal_attention' not in batch:
        raise ValueError('`inputs_bidirectional_attention` mode requires '
                         '"decoder_causal_attention" feature in the batch')
      return batch['decoder_causal_attention']
    return None

  def score_batch(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                  return_intermediates: bool = False):
    """Σ_t decoder_loss_weights · log p(target_t) per row, float32 `[batch]` (T5X's
    `DecoderOnlyModel.score_batch`: weights from the batch, so a prefix LM's inputs do
    not count); with `return_intermediates`, also T5X's intermediates dict."""
    return sequence_scores(self._compute_logits(params, batch), batch['decoder_target_tokens'],
                           batch['decoder_loss_weights'], return_intermediates)


Base = _t5x_models.EncoderDecoderModel if HAS_T5X else StandaloneEncoderDecoderModel
DecoderOnlyBase = _t5x_models.DecoderOnlyModel if HAS_T5X else StandaloneDecoderOnlyModel
