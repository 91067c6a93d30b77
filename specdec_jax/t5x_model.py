"""A T5X `models.EncoderDecoderModel` whose decoding is exact speculative sampling.

`SpeculativeEncoderDecoderModel` has the constructor and methods of T5X's
`t5x.models.EncoderDecoderModel` (`predict_batch_with_aux`, `score_batch`,
`loss_fn`, `eval_fn`, `predict_batch`, `get_initial_variables`, ...), so a T5X user
swaps it into a gin file in place of `models.EncoderDecoderModel` (see
`configs/t5x/speculative_model.gin`). What changes is `predict_batch_with_aux`: it
decodes with speculative sampling (Leviathan et al. 2023, Algorithm 1) using a small
draft T5 next to the target. The output distribution is exactly the target's
(temperature / top-k / top-p sampling); at temperature 0 the decodes are the
target's greedy decodes token for token. Scoring and training use the target only.

When `t5x` is importable the class subclasses `t5x.models.EncoderDecoderModel`
(T5X's trainer then uses T5X's own `loss_fn` and clu metrics on top of our
`_compute_logits`); otherwise it stands alone on a small base class with the same
interface, whose `loss_fn` returns plain arrays as metrics.

Both `module` and `draft_module` must be this package's
`specdec_jax.models.t5.Transformer` (T5X's `network.Transformer` param tree, plus the
k-token cached decoder speculative decoding needs). T5X checkpoints of T5 1.0 / 1.1
load into it unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, MutableMapping, Optional, Union

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decoding, generate, sampling
from specdec_jax.models import t5

PyTree = Any

try:  # T5X is optional: subclass its model when it is installed.
  from t5x import models as _t5x_models  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
  _t5x_models = None

HAS_T5X = _t5x_models is not None

# Keys of `decoder_params` that `predict_batch_with_aux` understands.
DECODER_PARAM_KEYS = ('temperature', 'topk', 'topp', 'max_decode_steps', 'decode_rng',
                      'eos_id', 'gamma', 'rescale_log_probs')
# Packed-example features (T5X `pack=True`), which our T5 does not support.
_PACKING_KEYS = ('encoder_segment_ids', 'decoder_segment_ids', 'encoder_positions',
                 'decoder_positions')


# ------------------------------------------------------------------ losses (T5X semantics)

def cross_entropy_with_logits(logits, targets, z_loss: float = 0.0):
  """Per-token `-Σ targets · log_softmax(logits)` plus `z_loss · log(Z)²` (T5X semantics).

  Args:
    logits: float `[..., vocab]`.
    targets: float `[..., vocab]` soft (or one-hot) targets.
    z_loss: coefficient of the auxiliary log-partition penalty.
  Returns:
    `(loss, z_loss_term)`, both float32 `[...]`; `loss` already includes the z-loss.
  """
  logits = logits.astype(jnp.float32)
  log_z = jax.scipy.special.logsumexp(logits, axis=-1)
  loss = -jnp.sum(targets * (logits - log_z[..., None]), axis=-1)
  z_term = z_loss * jnp.square(log_z)
  return loss + z_term, z_term


def compute_weighted_cross_entropy(logits, targets, weights=None, label_smoothing: float = 0.0,
                                   z_loss: float = 0.0, loss_normalizing_factor=None):
  """Summed, weighted, label-smoothed cross-entropy (T5X `losses.compute_weighted_cross_entropy`).

  The label-smoothing entropy constant is subtracted, so a perfect prediction of the
  smoothed targets has loss 0 at every smoothing level.

  Args:
    logits: float `[batch, length, vocab]`.
    targets: int `[batch, length]`.
    weights: optional float `[batch, length]` (None = every position counts).
    label_smoothing: mass spread uniformly over the other `vocab − 1` ids.
    z_loss: coefficient of `log(Z)²`.
    loss_normalizing_factor: optional number the sums are divided by.
  Returns:
    `(loss, z_loss, weight_sum)` scalars (`loss` includes `z_loss`).
  Raises:
    ValueError: logits not of rank `targets.ndim + 1`.
  """
  if logits.ndim != targets.ndim + 1:
    raise ValueError(f'logits {logits.shape} must have one more axis than targets '
                     f'{targets.shape}.')
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = (1.0 - confidence) / max(vocab - 1, 1)
  constant = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
  soft = jax.nn.one_hot(targets, vocab, dtype=jnp.float32) * (confidence - low) + low
  loss, z_term = cross_entropy_with_logits(logits, soft, z_loss)
  loss = loss - constant
  weight_sum = jnp.asarray(np.prod(targets.shape), jnp.float32)
  if weights is not None:
    weights = jnp.asarray(weights, jnp.float32)
    loss, z_term, weight_sum = loss * weights, z_term * weights, jnp.sum(weights)
  if loss_normalizing_factor is not None:
    loss, z_term = loss / loss_normalizing_factor, z_term / loss_normalizing_factor
  return jnp.sum(loss), jnp.sum(z_term), weight_sum


def loss_normalizing_factor_and_weights(loss_normalizing_factor, batch):
  """Resolves T5X's special loss-normalizing factors to a number and per-token weights.

  Args:
    loss_normalizing_factor: None, a number, or one of the strings (or T5X enum
      members with these names) 'NUM_REAL_TARGET_TOKENS', 'NUM_TOTAL_TARGET_TOKENS',
      'AVERAGE_PER_SEQUENCE'.
    batch: with `decoder_target_tokens` and optionally `decoder_loss_weights`.
  Returns:
    `(factor or None, weights [batch, length] float32)`; the weights default to
    `decoder_target_tokens > 0` (T5X would count padding when no weights are given).
  Raises:
    ValueError: an unknown special factor.
  """
  targets = batch['decoder_target_tokens']
  weights = batch.get('decoder_loss_weights')
  weights = (jnp.asarray(targets > 0, jnp.float32) if weights is None
             else jnp.asarray(weights, jnp.float32))
  name = getattr(loss_normalizing_factor, 'name', loss_normalizing_factor)
  if name is None or not isinstance(name, str):
    return loss_normalizing_factor, weights
  if name == 'NUM_REAL_TARGET_TOKENS':
    return jnp.sum(weights), weights
  if name == 'NUM_TOTAL_TARGET_TOKENS':
    return float(np.prod(targets.shape)), weights
  if name == 'AVERAGE_PER_SEQUENCE':
    per_seq = jnp.sum(weights, axis=-1, keepdims=True)
    weights = jnp.where(per_seq > 0, weights / jnp.where(per_seq > 0, per_seq, 1.0), 0.0)
    return jnp.sum(weights), weights
  raise ValueError(f'Unsupported loss_normalizing_factor {loss_normalizing_factor!r}; use '
                   'None, a number, NUM_REAL_TARGET_TOKENS, NUM_TOTAL_TARGET_TOKENS or '
                   'AVERAGE_PER_SEQUENCE.')


# ------------------------------------------------------------------ standalone base class

class _FeatureConverterDescriptor:
  """`seqio.EncDecFeatureConverter`, imported on first use (seqio pulls in TensorFlow).

  On an instance it is the seqio class itself; on the class (where `inspect` and gin
  look) it is this object, which constructs the converter when called.
  """

  def __get__(self, obj, objtype=None):
    if obj is None:
      return self
    return self.resolve()

  @staticmethod
  def resolve():
    import seqio  # pylint: disable=g-import-not-at-top
    return seqio.EncDecFeatureConverter

  def __call__(self, *args, **kwargs):
    return self.resolve()(*args, **kwargs)

  def __repr__(self):
    return '<lazy seqio.EncDecFeatureConverter>'


@dataclasses.dataclass(frozen=True)
class DecoderParams:
  """Default `return_all_decodes` / `num_decodes` (T5X `models.DecoderParams`)."""
  return_all_decodes: bool = False
  num_decodes: int = 1


if HAS_T5X:  # pragma: no cover - depends on the environment
  DecoderParams = _t5x_models.DecoderParams  # noqa: F811  pylint: disable=invalid-name


class StandaloneEncoderDecoderModel:
  """The slice of T5X's `BaseTransformerModel` / `EncoderDecoderModel` used without T5X.

  Holds the module, vocabularies, optimizer definition and loss settings and
  implements `loss_fn`, `eval_fn` and `predict_batch` on top of the subclass's
  `_compute_logits` and `predict_batch_with_aux`. `loss_fn` returns plain scalar
  arrays as metrics (T5X returns clu metrics).
  """

  FEATURE_CONVERTER_CLS = _FeatureConverterDescriptor()

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


_Base = _t5x_models.EncoderDecoderModel if HAS_T5X else StandaloneEncoderDecoderModel


# ------------------------------------------------------------------ vocabulary comparison

def _pieces(vocab) -> Optional[list]:
  """Every id's piece/string, via a SentencePiece processor when there is one."""
  tok = getattr(vocab, 'tokenizer', None)
  if tok is None and hasattr(vocab, 'id_to_piece'):
    tok = vocab
  if tok is not None and hasattr(tok, 'id_to_piece'):
    size = tok.get_piece_size() if hasattr(tok, 'get_piece_size') else vocab.vocab_size
    return [tok.id_to_piece(i) for i in range(size)]
  size = getattr(vocab, 'vocab_size', None)
  if size is not None and hasattr(vocab, 'decode'):
    return [vocab.decode([i]) for i in range(size)]
  return None


def check_vocabularies_match(target_vocab, draft_vocab, what: str = 'output') -> None:
  """Raises unless the two vocabularies map every id to the same piece.

  Compares sizes, EOS ids and then the pieces id by id (SentencePiece
  `tokenizer.id_to_piece`, else `vocabulary.decode([id])`); identical serialized
  SentencePiece models (`sp_model`) short-circuit.

  Raises:
    ValueError: naming the first difference (size, EOS id, or the first id whose
      pieces differ, with both pieces), or when neither pieces nor decoding are
      available to compare.
  """
  if target_vocab is draft_vocab or target_vocab is None or draft_vocab is None:
    return
  fix = ('Speculative decoding needs the draft to share the target\'s token ids: use a '
         'draft trained with the same vocabulary.')
  size_t = getattr(target_vocab, 'vocab_size', None)
  size_d = getattr(draft_vocab, 'vocab_size', None)
  if size_t != size_d:
    raise ValueError(f'The draft vocabulary has {size_d} ids but the target\'s {what} '
                     f'vocabulary has {size_t}. {fix}')
  eos_t = getattr(target_vocab, 'eos_id', None)
  eos_d = getattr(draft_vocab, 'eos_id', None)
  if eos_t != eos_d:
    raise ValueError(f'The draft vocabulary has eos_id={eos_d} but the target\'s {what} '
                     f'vocabulary has eos_id={eos_t}. {fix}')
  try:
    sp_t, sp_d = target_vocab.sp_model, draft_vocab.sp_model
  except AttributeError:
    sp_t = sp_d = None
  if sp_t is not None and sp_t == sp_d:
    return
  pieces_t, pieces_d = _pieces(target_vocab), _pieces(draft_vocab)
  if pieces_t is None or pieces_d is None:
    raise ValueError(f'Cannot compare the draft vocabulary {draft_vocab!r} with the target\'s '
                     f'{what} vocabulary {target_vocab!r}: neither exposes pieces '
                     '(tokenizer.id_to_piece) nor decode(ids).')
  if len(pieces_t) != len(pieces_d):
    raise ValueError(f'The draft vocabulary has {len(pieces_d)} pieces but the target\'s '
                     f'{what} vocabulary has {len(pieces_t)}. {fix}')
  for i, (a, b) in enumerate(zip(pieces_t, pieces_d)):
    if a != b:
      raise ValueError(f'Vocabulary mismatch at id {i}: the target\'s {what} vocabulary has '
                       f'{a!r}, the draft vocabulary has {b!r}. {fix}')


# ------------------------------------------------------------------ jitted helpers

@functools.partial(jax.jit, static_argnames=('module', 'enable_dropout'))
def _forward(module, params, encoder_input_tokens, decoder_input_tokens,
             decoder_target_tokens, dropout_rng, *, enable_dropout):
  rngs = {'dropout': dropout_rng} if enable_dropout else None
  return module.apply({'params': params}, encoder_input_tokens, decoder_input_tokens,
                      decoder_target_tokens, enable_dropout=enable_dropout, rngs=rngs)


@functools.partial(jax.jit, static_argnames=('module', 'decode_fn', 'max_decode_len',
                                             'num_decodes', 'static_kwargs'))
def _decode_with_fn(module, params, encoder_input_tokens, prompt, decode_rng, dynamic_kwargs,
                    *, decode_fn, max_decode_len, num_decodes, static_kwargs):
  cache = t5.encode_and_init_cache(module, params, encoder_input_tokens, max_decode_len)
  tokens_to_logits = decoding.tokens_to_logits_from_step_fn(t5.make_step_fn(module, params))
  return decode_fn(inputs=prompt, cache=cache, tokens_to_logits=tokens_to_logits,
                   num_decodes=num_decodes, decode_rng=decode_rng, **dict(static_kwargs),
                   **dynamic_kwargs)


def _require_t5_module(module, name: str) -> None:
  if not (hasattr(module, 'config') and hasattr(module, 'decode_step')):
    raise ValueError(
        f'{name} must be a specdec_jax.models.t5.Transformer (T5X\'s network.Transformer '
        f'param tree with a k-token cached decoder), got {type(module).__name__}. In gin, '
        'bind it to @network.Transformer() after `import specdec_jax.gin_utils`.')


# ------------------------------------------------------------------ the model

class SpeculativeEncoderDecoderModel(_Base):
  """T5X `EncoderDecoderModel` contract; decodes with exact speculative sampling.

  Constructor arguments (the first nine as T5X's `models.EncoderDecoderModel`):
    module: the target, a `specdec_jax.models.t5.Transformer`.
    input_vocabulary, output_vocabulary: seqio vocabularies (or objects with
      `vocab_size`, `eos_id` and `tokenizer.id_to_piece` / `decode`).
    optimizer_def: stored as `self.optimizer_def` for the trainer (unused here).
    decode_fn: None (default) decodes with speculative sampling. A function with
      the signature of `specdec_jax.decoding.temperature_sample` (our cache, prompt
      inputs without the leading 0) instead decodes with the target alone, e.g.
      as a baseline; the draft is then unused and aux has only `scores`.
    feature_converter_cls: default `seqio.EncDecFeatureConverter`.
    label_smoothing, z_loss, loss_normalizing_factor: training loss, as T5X.
  Keyword-only:
    draft_module: the draft, a `specdec_jax.models.t5.Transformer` (its embedding
      may be padded to another size than the target's).
    draft_params: the draft's params tree, or a T5X checkpoint path (str /
      PathLike), loaded on first use with `checkpoints.load_t5x_checkpoint(path,
      config=draft_module.config, dtype=draft_params_dtype)`.
    gamma: γ ≥ 1, draft tokens per round (static: a new value compiles anew).
    temperature: default sampling temperature (0 = greedy = target's argmax).
    topk, topp: default standardization (at most one non-zero; 0 = off).
    eos_id: default `output_vocabulary.eos_id` (1 when that is None).
    draft_vocabulary: the draft's vocabulary, compared with the target's output
      (and input) vocabulary id by id; default `output_vocabulary` (no check).
    default_decoder_params: T5X's `DecoderParams(return_all_decodes, num_decodes)`.
    rescale_log_probs: scores under the standardized distribution (T5X default).
    draft_params_dtype: optional dtype the loaded draft checkpoint is cast to.

  Raises (at construction, before anything compiles):
    ValueError: a module that is not our T5 `Transformer`; γ < 1; bad
      temperature / topk / topp; draft and target vocabularies that differ
      (size, EOS id or any piece); a vocabulary larger than a module's embedding;
      a draft params tree that does not fit `draft_module.config`.
  """

  def __init__(self, module, input_vocabulary, output_vocabulary, optimizer_def,
               decode_fn: Optional[Callable] = None, feature_converter_cls=None,
               label_smoothing: float = 0.0, z_loss: float = 0.0,
               loss_normalizing_factor=None, *, draft_module,
               draft_params: Union[PyTree, str, os.PathLike], gamma: int = 4,
               temperature: float = 0.0, topk: int = 0, topp: float = 0.0,
               eos_id: Optional[int] = None, draft_vocabulary=None,
               default_decoder_params: Optional[DecoderParams] = None,
               rescale_log_probs: bool = True, draft_params_dtype=None):
    _require_t5_module(module, 'module')
    _require_t5_module(draft_module, 'draft_module')
    gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
    sampling.validate_sampling_args(temperature, topk, topp)
    if eos_id is None:
      eos_id = getattr(output_vocabulary, 'eos_id', None) or 1
    if not isinstance(eos_id, (int, np.integer)):
      raise ValueError(f'eos_id must be an int, got {eos_id!r}.')
    if draft_vocabulary is not None:
      check_vocabularies_match(output_vocabulary, draft_vocabulary, 'output')
      if input_vocabulary is not output_vocabulary:
        # The draft reads the same encoder_input_tokens as the target.
        check_vocabularies_match(input_vocabulary, draft_vocabulary, 'input')
    for name, mod in (('module', module), ('draft_module', draft_module)):
      for vname, vocab in (('output_vocabulary', output_vocabulary),
                           ('draft_vocabulary', draft_vocabulary)):
        size = getattr(vocab, 'vocab_size', None)
        if isinstance(size, int) and size > mod.config.vocab_size:
          raise ValueError(f'{vname} has {size} ids but {name}.config.vocab_size is only '
                           f'{mod.config.vocab_size}; use the config the checkpoint was '
                           'trained with.')

    super().__init__(module=module, input_vocabulary=input_vocabulary,
                     output_vocabulary=output_vocabulary, optimizer_def=optimizer_def,
                     decode_fn=decode_fn, feature_converter_cls=feature_converter_cls,
                     label_smoothing=label_smoothing, z_loss=z_loss,
                     loss_normalizing_factor=loss_normalizing_factor,
                     default_decoder_params=default_decoder_params)
    self.draft_module = draft_module
    self.draft_vocabulary = draft_vocabulary if draft_vocabulary is not None else output_vocabulary
    self.gamma = gamma
    self.temperature = temperature
    self.topk = topk
    self.topp = topp
    self.eos_id = int(eos_id)
    self.rescale_log_probs = rescale_log_probs
    self._draft_params_dtype = draft_params_dtype
    if isinstance(draft_params, (str, os.PathLike)):
      self._draft_checkpoint_path = os.fspath(draft_params)
      self._draft_params = None
    else:
      if draft_params is None:
        raise ValueError('draft_params must be a params tree or a T5X checkpoint path, got None.')
      if isinstance(draft_params, Mapping) and set(draft_params) == {'params'}:
        draft_params = draft_params['params']
      try:
        t5.check_params(draft_params, draft_module.config)
      except ValueError as e:
        raise ValueError(f'draft_params do not fit draft_module.config: {e}') from None
      self._draft_checkpoint_path = None
      self._draft_params = draft_params

  # ---------------------------------------------------------------- draft params

  @property
  def draft_checkpoint_path(self) -> Optional[str]:
    """The draft checkpoint path given at construction (None for a params tree)."""
    return self._draft_checkpoint_path

  @property
  def draft_params_loaded(self) -> bool:
    """Whether the draft params are in memory (a checkpoint path loads on first use)."""
    return self._draft_params is not None

  @property
  def draft_params(self) -> PyTree:
    """The draft's params; a checkpoint path given at construction is loaded now, once.

    Raises:
      FileNotFoundError / ValueError: from `checkpoints.load_t5x_checkpoint` (no
        checkpoint there, or params that do not fit `draft_module.config`).
    """
    if self._draft_params is None:
      from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
      params = checkpoints.load_t5x_checkpoint(
          self._draft_checkpoint_path, config=self.draft_module.config,
          dtype=self._draft_params_dtype)
      self._draft_params = jax.device_put(params)
    return self._draft_params

  # ---------------------------------------------------------------- variables / logits

  def get_initial_variables(self, rng: jax.Array, input_shapes: Mapping[str, Any],
                            input_types: Optional[Mapping[str, Any]] = None):
    """Randomly initialised target variables (T5X `get_initial_variables`).

    Args:
      rng: PRNG key.
      input_shapes: `encoder_input_tokens` and `decoder_input_tokens` shapes
        (`[batch, len]`); packing features are not supported.
      input_types: optional dtypes of those features (default int32).
    Returns:
      `{'params': ..., 'params_axes': ...}` (plain dicts): float32 params in T5X's
      tree and their logical axis names (`flax.linen.partitioning.AxisMetadata`).
    Raises:
      ValueError: a missing shape or packing features.
    """
    input_types = {} if input_types is None else input_types
    for key in ('encoder_input_tokens', 'decoder_input_tokens'):
      if key not in input_shapes:
        raise ValueError(f'input_shapes lacks {key!r} (got {sorted(input_shapes)}).')
    packed = [k for k in _PACKING_KEYS if k in input_shapes]
    if packed:
      raise ValueError(f'Packed examples ({packed}) are not supported by this T5; use a '
                       'feature converter with pack=False.')
    enc = jnp.ones(input_shapes['encoder_input_tokens'],
                   input_types.get('encoder_input_tokens', jnp.int32))
    dec = jnp.ones(input_shapes['decoder_input_tokens'],
                   input_types.get('decoder_input_tokens', jnp.int32))
    variables = self.module.init(rng, enc, dec, dec, enable_dropout=False)
    return flax.core.unfreeze(variables)

  def _compute_logits(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                      dropout_rng: Optional[jax.Array] = None, mutable=False,
                      other_variables: Optional[PyTree] = None):
    """Target logits float32 `[batch, dec_len, vocab_size]` (T5X `_compute_logits`).

    Raises:
      ValueError: packed batches (segment ids / positions) or missing features.
    """
    _check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens',
                         'decoder_target_tokens'))
    enable_dropout = dropout_rng is not None
    if mutable or other_variables:
      rngs = {'dropout': dropout_rng} if enable_dropout else None
      return self.module.apply(
          {'params': params, **(other_variables or {})}, batch['encoder_input_tokens'],
          batch['decoder_input_tokens'], batch['decoder_target_tokens'],
          enable_dropout=enable_dropout, rngs=rngs, mutable=mutable)
    return _forward(self.module, params, batch['encoder_input_tokens'],
                    batch['decoder_input_tokens'], batch['decoder_target_tokens'],
                    dropout_rng, enable_dropout=enable_dropout)

  # ---------------------------------------------------------------- scoring

  def score_batch(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                  return_intermediates: bool = False):
    """The target's log-likelihood of each `decoder_target_tokens` row (T5X `score_batch`).

    Args:
      params: the target's params.
      batch: `encoder_input_tokens`, `decoder_input_tokens`, `decoder_target_tokens`
        (int `[batch, len]`) and optionally `decoder_loss_weights` (default
        `decoder_target_tokens > 0`).
      return_intermediates: also return T5X-style intermediates.
    Returns:
      float32 `[batch]`: Σ_t weight_t · log p(target_t | …) (no z-loss, no label
      smoothing); with `return_intermediates`, `(scores, {'decoder': {'target_tokens':
      (tokens,), 'loss_weights': (weights,), 'token_scores': (token_scores,)}})`.
    Raises:
      ValueError: packed batches or missing features.
    """
    _check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens',
                         'decoder_target_tokens'))
    targets = batch['decoder_target_tokens']
    weights = batch.get('decoder_loss_weights')
    weights = (jnp.asarray(targets > 0, jnp.float32) if weights is None
               else jnp.asarray(weights, jnp.float32))
    logits = self._compute_logits(params, batch)
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    token_scores = jnp.take_along_axis(
        log_probs, jnp.asarray(targets, jnp.int32)[..., None], axis=-1)[..., 0] * weights
    scores = jnp.sum(token_scores, axis=-1)
    if return_intermediates:
      return scores, {'decoder': {'target_tokens': (targets,), 'loss_weights': (weights,),
                                  'token_scores': (token_scores,)}}
    return scores

  # ---------------------------------------------------------------- decoding

  def _decoding_options(self, decoder_params, rng) -> dict:
    options = dict(temperature=self.temperature, topk=self.topk, topp=self.topp,
                   max_decode_steps=None, decode_rng=None, eos_id=self.eos_id,
                   gamma=self.gamma, rescale_log_probs=self.rescale_log_probs)
    decoder_params = dict(decoder_params or {})
    unknown = sorted(set(decoder_params) - set(DECODER_PARAM_KEYS))
    if unknown:
      raise ValueError(f'Unknown decoder_params {unknown}; supported: {list(DECODER_PARAM_KEYS)}.')
    if rng is not None and decoder_params.get('decode_rng') is not None:
      raise ValueError(f'Got an RNG both from the `rng` argument ({rng}) and '
                       f"decoder_params['decode_rng'] ({decoder_params['decode_rng']}); pass "
                       'one or the other.')
    options.update(decoder_params)
    if rng is not None:
      options['decode_rng'] = rng
    if isinstance(options['max_decode_steps'], (np.integer,)):
      options['max_decode_steps'] = int(options['max_decode_steps'])
    if isinstance(options['eos_id'], np.integer):
      options['eos_id'] = int(options['eos_id'])
    options['gamma'] = sampling.check_int('gamma (γ, draft tokens per round)',
                                          options['gamma'], 1)
    return options

  def _real_vocab_size(self) -> Optional[int]:
    size = getattr(self.output_vocabulary, 'vocab_size', None)
    if isinstance(size, int) and 0 < size <= self.module.config.vocab_size:
      return size
    return None

  def predict_batch_with_aux(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                             rng: Optional[jax.Array] = None,
                             decoder_params: Optional[MutableMapping[str, Any]] = None,
                             return_all_decodes: Optional[bool] = None,
                             num_decodes: Optional[int] = None,
                             prompt_with_targets: bool = False):
    """Decodes a batch with speculative sampling (T5X `predict_batch_with_aux`).

    Args:
      params: the target's params (the draft's come from the constructor).
      batch: `encoder_input_tokens` int `[batch, enc_len]` (0 = padding) and
        `decoder_input_tokens` int `[batch, max_decode_len]` (only its shape is used
        unless `prompt_with_targets`); other features are ignored.
      rng: PRNG key for sampling (as `decoder_params['decode_rng']`; default
        `PRNGKey(0)`). At temperature 0 the result does not depend on it.
      decoder_params: overrides of `temperature` (scalar or `[batch]`), `topk`,
        `topp`, `max_decode_steps`, `decode_rng`, `eos_id`, `gamma`,
        `rescale_log_probs`.
      return_all_decodes: return all `num_decodes` samples (default from
        `default_decoder_params`, False).
      num_decodes: independent samples per example (default 1).
      prompt_with_targets: force-decode `decoder_input_tokens` after its leading 0
        (EOS ids stripped, as T5X) as a prompt; decoding continues after it.
    Returns:
      `(decodes, aux)`. With `return_all_decodes`: decodes int32 `[batch,
      num_decodes, max_decode_len]` sorted by score ascending (best last) and
      `aux['scores']` float32 `[batch, num_decodes]`; otherwise the best decode
      `[batch, max_decode_len]` and `aux['scores']` `[batch]`. Decodes hold 0 after
      EOS. Scores are the target's log-probabilities of the generated tokens (0 per
      token when greedy with `rescale_log_probs`, as T5X). With speculative decoding
      aux also holds, per decode (same shape as `scores`): `target_calls` (int32,
      target calls = rounds), `drafted` (int32, draft tokens proposed), `accepted`
      (int32, draft tokens accepted) and `alpha` (float32, estimated acceptance
      rate α = E[Σ_x min(p, q)], NaN when nothing was scored).
    Raises:
      ValueError (before compiling): missing features or bad shapes, unknown
        decoder_params keys, `rng` and `decode_rng` both given, γ < 1, bad
        temperature / topk / topp / num_decodes / max_decode_steps.
      FileNotFoundError / ValueError: a draft checkpoint path that cannot be loaded.
    """
    if return_all_decodes is None:
      return_all_decodes = self._default_decoder_params.return_all_decodes
    if num_decodes is None:
      num_decodes = self._default_decoder_params.num_decodes
    _check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens'), packing_ok=True)
    encoder_input_tokens = batch['encoder_input_tokens']
    decoder_input_tokens = batch['decoder_input_tokens']
    if jnp.ndim(encoder_input_tokens) != 2 or jnp.ndim(decoder_input_tokens) != 2:
      raise ValueError('encoder_input_tokens and decoder_input_tokens must be [batch, len], '
                       f'got shapes {jnp.shape(encoder_input_tokens)} and '
                       f'{jnp.shape(decoder_input_tokens)}.')
    if jnp.shape(encoder_input_tokens)[0] != jnp.shape(decoder_input_tokens)[0]:
      raise ValueError('encoder_input_tokens and decoder_input_tokens have different batch '
                       f'sizes: {jnp.shape(encoder_input_tokens)} vs '
                       f'{jnp.shape(decoder_input_tokens)}.')
    opts = self._decoding_options(decoder_params, rng)
    batch_size, max_decode_len = jnp.shape(decoder_input_tokens)
    if prompt_with_targets:
      # T5X strips EOS from the prompt; our prompt layout has no leading BOS 0.
      tokens = jnp.asarray(decoder_input_tokens, jnp.int32)
      tokens = tokens * (tokens != opts['eos_id'])
      prompt = jnp.concatenate([tokens[:, 1:], jnp.zeros((batch_size, 1), jnp.int32)], axis=1)
    else:
      prompt = None

    if self.decode_fn is None:
      decodes, scores, stats = generate.t5_speculative_generate(
          self.module, params, self.draft_module, self.draft_params, encoder_input_tokens,
          int(max_decode_len), opts['gamma'], eos_id=opts['eos_id'],
          temperature=opts['temperature'], topk=opts['topk'], topp=opts['topp'],
          num_decodes=num_decodes, decode_rng=opts['decode_rng'], decoder_prompt=prompt,
          max_decode_steps=opts['max_decode_steps'], real_vocab_size=self._real_vocab_size(),
          rescale_log_probs=opts['rescale_log_probs'])
      aux = {'scores': scores, 'target_calls': stats.target_calls, 'drafted': stats.drafted,
             'accepted': stats.accepted, 'alpha': stats.alpha}
    else:
      decodes, scores = self._decode_baseline(params, encoder_input_tokens, prompt, opts,
                                              int(max_decode_len), num_decodes)
      aux = {'scores': scores}

    if return_all_decodes:
      return decodes, aux
    return decodes[:, -1, :], {k: v[:, -1] for k, v in aux.items()}

  def _decode_baseline(self, params, encoder_input_tokens, prompt, opts, max_decode_len,
                       num_decodes):
    """Target-only decoding with the user's `decode_fn` (our cache conventions)."""
    encoder_input_tokens = jnp.asarray(encoder_input_tokens, jnp.int32)
    if prompt is None:
      prompt = jnp.zeros((encoder_input_tokens.shape[0], max_decode_len), jnp.int32)
    decoding._check_common(prompt, opts['eos_id'], num_decodes, opts['temperature'],  # pylint: disable=protected-access
                           opts['topk'], opts['topp'], opts['max_decode_steps'])
    temperature = opts['temperature']
    static = dict(eos_id=opts['eos_id'], topk=opts['topk'], topp=float(opts['topp']),
                  max_decode_steps=opts['max_decode_steps'],
                  rescale_log_probs=opts['rescale_log_probs'])
    dynamic = {}
    if isinstance(temperature, (int, float)):
      static['temperature'] = float(temperature)
    else:
      dynamic['temperature'] = jnp.asarray(temperature, jnp.float32)
    decode_rng = opts['decode_rng'] if opts['decode_rng'] is not None else jax.random.PRNGKey(0)
    return _decode_with_fn(self.module, params, encoder_input_tokens, prompt, decode_rng,
                           dynamic, decode_fn=self.decode_fn, max_decode_len=max_decode_len,
                           num_decodes=num_decodes, static_kwargs=tuple(sorted(static.items())))


def _check_batch(batch, keys, packing_ok: bool = False) -> None:
  missing = [k for k in keys if k not in batch]
  if missing:
    raise ValueError(f'The batch lacks {missing} (has {sorted(batch)}); T5X encoder-decoder '
                     'features are encoder_input_tokens, decoder_input_tokens, '
                     'decoder_target_tokens[, decoder_loss_weights].')
  if not packing_ok:
    packed = [k for k in _PACKING_KEYS if k in batch]
    if packed:
      raise ValueError(f'Packed examples ({packed}) are not supported by this T5; use a '
                       'feature converter with pack=False.')

