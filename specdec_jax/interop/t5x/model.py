"""A T5X `models.EncoderDecoderModel` whose decoding is exact speculative sampling.

`SpeculativeEncoderDecoderModel` has the constructor and methods of T5X's
`t5x.models.EncoderDecoderModel` (`predict_batch_with_aux`, `score_batch`,
`loss_fn`, `eval_fn`, `predict_batch`, `get_initial_variables`, ...), so a T5X user
swaps it into a gin file in place of `models.EncoderDecoderModel` (see
`specdec_jax/configs/t5x/speculative_model.gin`). What changes is
`predict_batch_with_aux`: it decodes with speculative sampling (Leviathan et al. 2023,
Algorithm 1) using a small draft T5 next to the target. The output distribution is
exactly the target's (temperature / top-k / top-p sampling); at temperature 0 the
decodes are the target's greedy decodes token for token. Scoring and training use
the target only.

The draft's params live in the model's params, under `params['draft']`, as T5X
models keep extra params (t5x/contrib/calm): `get_initial_variables` returns them
with their logical axes (`params_axes['draft']`), so T5X's partitioner places and
shards them like the target's, and T5X's compiled predict step takes them as an
argument, never as constants. A T5X checkpoint of the target has no `draft`: T5X
fills it in while restoring through `specdec_jax.interop.t5x.restore.add_draft_params`
(`specdec_jax/configs/t5x/restore_draft.gin`). From Python, `params_with_draft`
builds such a tree; a params tree without `draft` is completed from the
constructor's `draft_params` when called eagerly.

When `t5x` is importable the class subclasses `t5x.models.EncoderDecoderModel`
(`specdec_jax.interop.t5x.base`). Both `module` and `draft_module` must be this package's
`specdec_jax.models.t5.Transformer` (T5X's `network.Transformer` param tree, plus the
k-token cached decoder speculative decoding needs). T5X checkpoints of T5 1.0 / 1.1
load into it unchanged.

Its pieces, beside it in `specdec_jax.interop.t5x`: losses `losses`, feature and
prompt-layout conventions `features`, vocabulary checks `vocab`, the base class `base`,
T5X `decode_fn`s `decoding`; their public names are re-exported here.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Mapping, MutableMapping, Optional, Union

import flax
import jax
import jax.numpy as jnp

from specdec_jax import generate
from specdec_jax.generate import compile_cache
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.interop.t5x.decode_fn import T5XDecodeFnMixin, check_layout
from specdec_jax.interop.t5x.draft_params import DraftParamsMixin
from specdec_jax.interop.t5x.base import HAS_T5X, Base, DecoderParams, StandaloneEncoderDecoderModel  # noqa: F401
from specdec_jax.interop.t5x.features import PACKING_KEYS, check_batch, decoder_prompt_inputs, t5x_prompt_to_ours
from specdec_jax.interop.t5x.losses import (compute_weighted_cross_entropy,  # noqa: F401
                                    cross_entropy_with_logits,
                                    loss_normalizing_factor_and_weights, sequence_scores)
from specdec_jax.interop.t5x.settings import (DECODER_PARAM_KEYS,  # noqa: F401
                                              SpeculativeOptionsMixin, check_settings)
from specdec_jax.interop.t5x.vocab import check_vocabularies_match  # noqa: F401

PyTree = Any
DRAFT_KEY = t5x_decoding.DRAFT_KEY  # params[DRAFT_KEY] holds the draft's params

_check_batch = check_batch
_PACKING_KEYS = PACKING_KEYS


@functools.partial(jax.jit, static_argnames=('module', 'enable_dropout'))
def _forward(module, params, encoder_input_tokens, decoder_input_tokens,
             decoder_target_tokens, dropout_rng, *, enable_dropout):
  rngs = {'dropout': dropout_rng} if enable_dropout else None
  return module.apply({'params': params}, encoder_input_tokens, decoder_input_tokens,
                      decoder_target_tokens, enable_dropout=enable_dropout, rngs=rngs)


def _require_t5_module(module, name: str) -> None:
  if not (hasattr(module, 'config') and hasattr(module, 'decode_step')):
    raise ValueError(
        f'{name} must be a specdec_jax.models.t5.Transformer (T5X\'s network.Transformer '
        f'param tree with a k-token cached decoder), got {type(module).__name__}. In gin, '
        'bind it to @network.Transformer() after `import specdec_jax.interop.t5x.gin_registry`.')


class SpeculativeEncoderDecoderModel(DraftParamsMixin, T5XDecodeFnMixin, SpeculativeOptionsMixin,
                                     Base):
  """T5X `EncoderDecoderModel` contract; decodes with exact speculative sampling.

  Constructor arguments (the first nine as T5X's `models.EncoderDecoderModel`):
    module: the target, a `specdec_jax.models.t5.Transformer`.
    input_vocabulary, output_vocabulary: seqio vocabularies (or objects with
      `vocab_size`, `eos_id` and `tokenizer.id_to_piece` / `decode`).
    optimizer_def: T5X's optimizer definition (T5X's `adafactor.Adafactor()` in
      `specdec_jax/configs/t5x/adafactor.gin`), used by T5X's trainer; None without T5X.
    decode_fn: None (default) decodes with speculative sampling. Otherwise a T5X
      `decode_fn` (T5X's `DecodeFnCallable`: prompt in T5X's layout `[0, p1, …]`),
      called exactly as T5X's `EncoderDecoderModel` calls it, e.g.
      `specdec_jax.interop.t5x.decoding.temperature_sample` (target alone, a baseline) or
      `...decoding.speculative_sample` (gin names `specdec_jax.t5x_decoding.temperature_sample`,
      `specdec_jax.t5x_decoding.speculative_sample`); aux then has only `scores`.
    feature_converter_cls: default `seqio.EncDecFeatureConverter`.
    label_smoothing, z_loss, loss_normalizing_factor: training loss, as T5X.
  Keyword-only:
    draft_module: the draft, a `specdec_jax.models.t5.Transformer` (its embedding
      may be padded to another size than the target's).
    draft_params: the draft's params tree, a T5X checkpoint path (str / PathLike,
      loaded on first eager use with `checkpoints.load_t5x_checkpoint(path,
      config=draft_module.config, dtype=draft_params_dtype)`), or None (then params
      passed to the methods must hold `draft`). Used when `params` lack `draft`.
    gamma: γ ≥ 1, draft tokens per round (static: a new value compiles anew).
    temperature: default sampling temperature (0 = greedy = target's argmax).
    topk, topp: default standardization (at most one non-zero; 0 = off).
    eos_id: default `output_vocabulary.eos_id` (1 when that is None).
    draft_vocabulary: the draft's vocabulary, compared with the target's output
      (and input) vocabulary id by id; default `output_vocabulary` (no check).
    default_decoder_params: T5X's `DecoderParams(return_all_decodes, num_decodes)`.
    rescale_log_probs: scores under the standardized distribution (T5X default).
    draft_params_dtype: optional dtype the loaded draft checkpoint is cast to.
    draft_policy: the draft length per round (`specdec_jax.decoding.policies.DraftPolicy`, a
      policy name, or None: γ every round); gin: `@specdec_jax.DraftPolicy()`.
    verification: 'token' (Algorithm 1, default) or 'block' (block verification, Sun et
      al. ICLR 2025: exact, at least as many tokens per target call; gin:
      `models.SpeculativeEncoderDecoderModel.verification = 'block'`).
    drafter: 'model' (default: the draft model), 'lookup' (n-gram lookup in the encoder
      input and the text so far), 'lookup+model', 'bigram' / 'unigram' (a table,
      `ngram_table`); with 'lookup' or a table `draft_module` may be None (a T5X user
      with only the large checkpoint). gin: `models.SpeculativeEncoderDecoderModel.drafter = 'lookup'`.
    ngram_table: a table file (`specdec_jax.drafters.tables`) for 'bigram' / 'unigram',
      loaded at construction.
    lenience: l in (0, 1] (paper Appendix A.5); 1 (default) is exact, l < 1 is NOT.
    compilation_cache: JAX's persistent compilation cache, turned on at construction
      (`specdec_jax.generate.compile_cache.enable`): None (default: a folder already set in
      `jax.config`, e.g. by T5X, else `$SPECDEC_COMPILATION_CACHE`, else
      `~/.cache/specdec_jax/jax_compilation_cache`), a folder, or False (no cache).

  Raises (at construction, before anything compiles):
    ValueError: a module that is not our T5 `Transformer`; γ < 1; an unknown draft_policy; bad
      temperature / topk / topp; draft and target vocabularies that differ
      (size, EOS id or any piece); a vocabulary larger than a module's embedding;
      a draft params tree that does not fit `draft_module.config`; a `decode_fn`
      that takes our prompt layout (`specdec_jax.decoding.temperature_sample`).
  """

  def __init__(self, module, input_vocabulary, output_vocabulary, optimizer_def,
               decode_fn: Optional[Callable] = None, feature_converter_cls=None,
               label_smoothing: float = 0.0, z_loss: float = 0.0,
               loss_normalizing_factor=None, *, draft_module=None,
               draft_params: Union[PyTree, str, os.PathLike, None] = None, gamma: int = 4,
               temperature: float = 0.0, topk: int = 0, topp: float = 0.0,
               eos_id: Optional[int] = None, draft_vocabulary=None,
               default_decoder_params: Optional[DecoderParams] = None,
               rescale_log_probs: bool = True, draft_params_dtype=None, draft_policy=None,
               compilation_cache: Union[None, bool, str, os.PathLike] = None,
               verification: str = 'token', drafter='model',
               ngram_table: Union[None, str, os.PathLike] = None, lenience: float = 1.0):
    check_layout(decode_fn)
    settings = check_settings(
        module, draft_module, require_module=_require_t5_module, drafter=drafter,
        gamma=gamma, draft_policy=draft_policy, temperature=temperature, topk=topk, topp=topp,
        verification=verification, lenience=lenience, ngram_table=ngram_table, eos_id=eos_id,
        compilation_cache=compilation_cache, decode_fn=decode_fn,
        output_vocabulary=output_vocabulary, draft_vocabulary=draft_vocabulary,
        input_vocabulary=input_vocabulary)
    super().__init__(module=module, input_vocabulary=input_vocabulary,
                     output_vocabulary=output_vocabulary, optimizer_def=optimizer_def,
                     decode_fn=decode_fn, feature_converter_cls=feature_converter_cls,
                     label_smoothing=label_smoothing, z_loss=z_loss,
                     loss_normalizing_factor=loss_normalizing_factor,
                     default_decoder_params=default_decoder_params)
    self.draft_module = draft_module
    self.draft_vocabulary = draft_vocabulary if draft_vocabulary is not None else output_vocabulary
    self._init_settings(settings, verification=verification, temperature=temperature,
                        topk=topk, topp=topp, rescale_log_probs=rescale_log_probs)
    self._init_draft_params(draft_params, draft_params_dtype)
    self.compilation_cache_dir = compile_cache.enable(compilation_cache)

  # ---------------------------------------------------------------- variables / logits

  def get_initial_variables(self, rng: jax.Array, input_shapes: Mapping[str, Any],
                            input_types: Optional[Mapping[str, Any]] = None):
    """Randomly initialised target and draft variables (T5X `get_initial_variables`).

    Args:
      rng: PRNG key (the target uses it as T5X does; the draft `fold_in(rng, 1)`).
      input_shapes: `encoder_input_tokens` and `decoder_input_tokens` shapes
        (`[batch, len]`); packing features are not supported.
      input_types: optional dtypes of those features (default int32).
    Returns:
      `{'params': ..., 'params_axes': ...}` (plain dicts): float32 params in T5X's
      tree with the draft's under `params['draft']`, and their logical axis names
      (`flax.linen.partitioning.AxisMetadata`, the draft's under
      `params_axes['draft']`), from which T5X's partitioner derives every param's
      sharding.
    Raises:
      ValueError: a missing shape or packing features.
    """
    input_types = {} if input_types is None else input_types
    for key in ('encoder_input_tokens', 'decoder_input_tokens'):
      if key not in input_shapes:
        raise ValueError(f'input_shapes lacks {key!r} (got {sorted(input_shapes)}).')
    packed = [k for k in PACKING_KEYS if k in input_shapes]
    if packed:
      raise ValueError(f'Packed examples ({packed}) are not supported by this T5; use a '
                       'feature converter with pack=False.')
    enc = jnp.ones(input_shapes['encoder_input_tokens'],
                   input_types.get('encoder_input_tokens', jnp.int32))
    dec = jnp.ones(input_shapes['decoder_input_tokens'],
                   input_types.get('decoder_input_tokens', jnp.int32))
    variables = flax.core.unfreeze(self.module.init(rng, enc, dec, dec, enable_dropout=False))
    if self.draft_module is None:  # a model-free drafter: the target alone
      return variables
    draft = flax.core.unfreeze(self.draft_module.init(jax.random.fold_in(rng, 1), enc, dec,
                                                      dec, enable_dropout=False))
    variables['params'][DRAFT_KEY] = draft['params']
    variables['params_axes'][DRAFT_KEY] = draft['params_axes']
    return variables

  def _compute_logits(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                      dropout_rng: Optional[jax.Array] = None, mutable=False,
                      other_variables: Optional[PyTree] = None):
    """Target logits float32 `[batch, dec_len, vocab_size]` (T5X `_compute_logits`).

    `params['draft']`, if present, is not used (its gradient is zero).

    Raises:
      ValueError: packed batches (segment ids / positions) or missing features.
    """
    check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens',
                        'decoder_target_tokens'))
    params, _ = t5x_decoding.split_draft_params(params)
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
    check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens',
                        'decoder_target_tokens'))
    targets = batch['decoder_target_tokens']
    weights = batch.get('decoder_loss_weights')
    weights = targets > 0 if weights is None else weights
    return sequence_scores(self._compute_logits(params, batch), targets, weights,
                           return_intermediates)

  # ---------------------------------------------------------------- decoding

  def predict_batch_with_aux(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                             rng: Optional[jax.Array] = None,
                             decoder_params: Optional[MutableMapping[str, Any]] = None,
                             return_all_decodes: Optional[bool] = None,
                             num_decodes: Optional[int] = None,
                             prompt_with_targets: bool = False):
    """Decodes a batch with speculative sampling (T5X `predict_batch_with_aux`).

    Args:
      params: the params tree, target and `draft` (as T5X's train state holds it;
        see `params_with_draft`); target-only params are completed from the
        constructor's `draft_params` when not traced (see `split_params`).
      batch: `encoder_input_tokens` int `[batch, enc_len]` (0 = padding) and
        `decoder_input_tokens` int `[batch, max_decode_len]` (only its shape is used
        unless `prompt_with_targets`); other features are ignored.
      rng: PRNG key for sampling (as `decoder_params['decode_rng']`; default
        `PRNGKey(0)`). At temperature 0 the result does not depend on it.
      decoder_params: overrides of `temperature` (scalar or `[batch]`), `topk`,
        `topp`, `max_decode_steps`, `decode_rng`, `eos_id`, `gamma`,
        `rescale_log_probs` (with a `decode_fn`: any argument it takes).
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
      (no `decode_fn`) aux also holds, per decode (same shape as `scores`):
      `target_calls` (int32, target calls = rounds), `drafted` (int32, draft tokens
      proposed), `accepted` (int32, draft tokens accepted) and `alpha` (float32,
      estimated acceptance rate α = E[Σ_x min(p, q)], NaN when nothing was scored).
    Raises:
      ValueError (before compiling): missing features or bad shapes, unknown
        decoder_params keys, `rng` and `decode_rng` both given, γ < 1, bad
        temperature / topk / topp / num_decodes / max_decode_steps, traced params
        without `draft`.
      FileNotFoundError / ValueError: a draft checkpoint path that cannot be loaded.
    """
    if return_all_decodes is None:
      return_all_decodes = self._default_decoder_params.return_all_decodes
    if num_decodes is None:
      num_decodes = self._default_decoder_params.num_decodes
    check_batch(batch, ('encoder_input_tokens', 'decoder_input_tokens'), packing_ok=True)
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
    if self.decode_fn is not None:
      decodes, scores = self._decode_with_fn(params, encoder_input_tokens,
                                             decoder_input_tokens, rng, decoder_params,
                                             num_decodes, prompt_with_targets)
      aux = {'scores': scores}
    else:
      opts = self._decoding_options(decoder_params, rng)
      prompt = None
      if prompt_with_targets:  # T5X's prompt, in our layout (no leading BOS)
        prompt = t5x_prompt_to_ours(decoder_prompt_inputs(decoder_input_tokens,
                                                          opts['eos_id'], True))
      if generate.needs_draft_model(self.drafter):
        target_params, draft_params = self.split_params(params)
      else:
        target_params, draft_params = t5x_decoding.split_draft_params(params)
      decodes, scores, stats = generate.t5_speculative_generate(
          self.module, target_params, self.draft_module, draft_params, encoder_input_tokens,
          int(jnp.shape(decoder_input_tokens)[1]), opts['gamma'], eos_id=opts['eos_id'],
          temperature=opts['temperature'], topk=opts['topk'], topp=opts['topp'],
          num_decodes=num_decodes, decode_rng=opts['decode_rng'], decoder_prompt=prompt,
          max_decode_steps=opts['max_decode_steps'], real_vocab_size=self._real_vocab_size(),
          rescale_log_probs=opts['rescale_log_probs'], draft_policy=self.draft_policy,
          verification=self.verification, drafter=self.drafter,
          ngram_table=self.ngram_table, lenience=self.lenience)
      aux = {'scores': scores, 'target_calls': stats.target_calls, 'drafted': stats.drafted,
             'accepted': stats.accepted, 'alpha': stats.alpha}
    if return_all_decodes:
      return decodes, aux
    return decodes[:, -1, :], {k: v[:, -1] for k, v in aux.items()}
