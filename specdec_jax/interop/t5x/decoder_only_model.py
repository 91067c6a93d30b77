"""A T5X `models.DecoderOnlyModel` whose decoding is exact speculative sampling.

`SpeculativeDecoderOnlyModel` has the constructor and methods of T5X's
`t5x.models.DecoderOnlyModel` (`predict_batch_with_aux`, `score_batch`, `loss_fn`,
`eval_fn`, `predict_batch`, `get_initial_variables`, `inputs_bidirectional_attention`),
so a T5X user swaps it into a gin file in place of `models.DecoderOnlyModel`
(`specdec_jax/configs/t5x/speculative_decoder_only.gin`). `predict_batch_with_aux`
prefills the target and a small decoder-only draft with the batch's inputs (T5X's
`_compute_kv_cache`: one forward pass each, bidirectional over the inputs in prefix-LM
mode) and decodes from `initial_index` with speculative sampling (Leviathan et al. 2023,
Algorithm 1), returning T5X's `remove_prefix`-ed decodes; the output distribution is the
target's, and at temperature 0 the decodes are T5X's greedy decodes token for token.
Scoring and training use the target only.

The draft's params live under `params['draft']`, as for `SpeculativeEncoderDecoderModel`
(`model.py`): `get_initial_variables` returns them with their logical axes, and T5X's
restore fills them in through `specdec_jax.interop.t5x.restore.add_draft_params`.

Both modules must be this package's `specdec_jax.models.decoder_only.DecoderOnlyTransformer`
(gin: `@network.DecoderWrapper()` after `import specdec_jax.interop.t5x.gin_registry`): T5X's
decoder-only param tree with the prefill and k-token cached calls speculative decoding
needs. With `decode_fn` set (e.g. `specdec_jax.interop.t5x.decoding.temperature_sample`,
the target alone: a baseline in the same class) `predict_batch_with_aux` calls it exactly as
T5X's `DecoderOnlyModel` calls its `decode_fn`: the prompt prefilled into our cache
(`_compute_kv_cache`, returning `initial_index`), a one-token `tokens_to_logits`
(`_compute_logits_from_slice`), `initial_index=`, `cache_offset=0`, then `remove_prefix`.
T5X's own `t5x.decoding` functions need T5X's flax cache collection and do not run on ours.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping, Optional, Union

import flax
import jax
import jax.numpy as jnp

from specdec_jax import generate
from specdec_jax.generate import compile_cache
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.generate import decoder_only as generate_decoder_only
from specdec_jax.interop.t5x.base import DecoderOnlyBase
from specdec_jax.interop.t5x.decode_fn import check_layout, decode_fn_kwargs, run_decode_fn, unwrapped
from specdec_jax.interop.t5x.draft_params import DraftParamsMixin
from specdec_jax.interop.t5x.settings import SpeculativeOptionsMixin, check_settings
from specdec_jax.models import decoder_only

PyTree = Any
DRAFT_KEY = t5x_decoding.DRAFT_KEY


@functools.partial(jax.jit, static_argnames=('module', 'enable_dropout', 'bidirectional'))
def _forward(module, params, decoder_input_tokens, decoder_target_tokens,
             decoder_causal_attention, decoder_segment_ids, dropout_rng, *, enable_dropout,
             bidirectional):
  rngs = {'dropout': dropout_rng} if enable_dropout else None
  return module.apply({'params': params}, decoder_input_tokens, decoder_target_tokens,
                      decoder_segment_ids=decoder_segment_ids,
                      decoder_causal_attention=decoder_causal_attention if bidirectional
                      else None, enable_dropout=enable_dropout, rngs=rngs)


def _require_decoder_only_module(module, name: str) -> None:
  if not (hasattr(module, 'config') and hasattr(module, 'prefill')
          and hasattr(module, 'decode_step')):
    raise ValueError(
        f'{name} must be a specdec_jax.models.decoder_only.DecoderOnlyTransformer (T5X\'s '
        'decoder-only param tree with prefill and a k-token cached call), got '
        f'{type(module).__name__}. In gin, bind it to @network.DecoderWrapper() after '
        '`import specdec_jax.interop.t5x.gin_registry`.')


class SpeculativeDecoderOnlyModel(DraftParamsMixin, SpeculativeOptionsMixin, DecoderOnlyBase):
  """T5X `DecoderOnlyModel` contract; decodes with exact speculative sampling.

  Constructor arguments (the first nine as T5X's `models.DecoderOnlyModel`):
    module: the target, a `DecoderOnlyTransformer`.
    vocabulary: the seqio vocabulary (inputs and targets).
    optimizer_def: T5X's optimizer definition; None without T5X.
    decode_fn: None (default) decodes with speculative sampling. Otherwise a decode_fn
      with T5X's decoder-only calling convention (`initial_index`, a one-token
      `tokens_to_logits` on the cache it is given), e.g.
      `specdec_jax.interop.t5x.decoding.temperature_sample` (gin:
      `@specdec_jax.t5x_decoding.temperature_sample`): the target alone, a baseline; aux
      then has only `scores`.
    inputs_bidirectional_attention: prefix LM: bidirectional attention over the inputs
      region (`decoder_causal_attention`), in training, scoring and the prefill.
    feature_converter_cls: default `seqio.DecoderFeatureConverter`.
    label_smoothing, z_loss, loss_normalizing_factor: training loss, as T5X.
  Keyword-only (as `SpeculativeEncoderDecoderModel`): `draft_module` (a
  `DecoderOnlyTransformer`), `draft_params` (tree or T5X checkpoint path), `gamma`,
  `temperature`, `topk`, `topp`, `eos_id`, `draft_vocabulary`, `rescale_log_probs`,
  `draft_params_dtype`, `draft_policy`, `compilation_cache`, `verification`, `drafter`
  ('model', 'lookup' — n-gram lookup in the prompt and the text so far —,
  'lookup+model', 'bigram', 'unigram'), `ngram_table`, `lenience`.

  Raises (at construction, before anything compiles):
    ValueError: a module that is not a `DecoderOnlyTransformer`; a `decode_fn` that is
      the encoder-decoder `speculative_sample` or takes our prompt layout
      (`specdec_jax.decoding.temperature_sample`); the settings
      `SpeculativeEncoderDecoderModel` checks.
  """

  def __init__(self, module, vocabulary, optimizer_def, decode_fn=None,
               inputs_bidirectional_attention: bool = False, feature_converter_cls=None,
               label_smoothing: float = 0.0, z_loss: float = 0.0,
               loss_normalizing_factor=None, *, draft_module=None,
               draft_params: Union[PyTree, str, os.PathLike, None] = None, gamma: int = 4,
               temperature: float = 0.0, topk: int = 0, topp: float = 0.0,
               eos_id: Optional[int] = None, draft_vocabulary=None,
               rescale_log_probs: bool = True, draft_params_dtype=None, draft_policy=None,
               compilation_cache: Union[None, bool, str, os.PathLike] = None,
               verification: str = 'token', drafter='model',
               ngram_table: Union[None, str, os.PathLike] = None, lenience: float = 1.0):
    if decode_fn is not None and unwrapped(decode_fn) is t5x_decoding.speculative_sample:
      raise ValueError('decode_fn=specdec_jax.t5x_decoding.speculative_sample is the '
                       'encoder-decoder speculative decode_fn; SpeculativeDecoderOnlyModel '
                       'decodes speculatively with decode_fn=None (set drafter= / gamma=).')
    check_layout(decode_fn)
    settings = check_settings(
        module, draft_module, require_module=_require_decoder_only_module, drafter=drafter,
        gamma=gamma, draft_policy=draft_policy, temperature=temperature, topk=topk, topp=topp,
        verification=verification, lenience=lenience, ngram_table=ngram_table, eos_id=eos_id,
        compilation_cache=compilation_cache, decode_fn=decode_fn,
        output_vocabulary=vocabulary, draft_vocabulary=draft_vocabulary)
    super().__init__(module=module, vocabulary=vocabulary, optimizer_def=optimizer_def,
                     decode_fn=decode_fn,
                     inputs_bidirectional_attention=bool(inputs_bidirectional_attention),
                     feature_converter_cls=feature_converter_cls,
                     label_smoothing=label_smoothing, z_loss=z_loss,
                     loss_normalizing_factor=loss_normalizing_factor)
    self.draft_module = draft_module
    self.draft_vocabulary = draft_vocabulary if draft_vocabulary is not None else vocabulary
    self._init_settings(settings, verification=verification, temperature=temperature,
                        topk=topk, topp=topp, rescale_log_probs=rescale_log_probs)
    self._init_draft_params(draft_params, draft_params_dtype)
    self.compilation_cache_dir = compile_cache.enable(compilation_cache)

  @property
  def inputs_bidirectional_attention(self) -> bool:
    return self._inputs_bidirectional_attention

  def get_initial_variables(self, rng: jax.Array, input_shapes: Mapping[str, Any],
                            input_types: Optional[Mapping[str, Any]] = None):
    """Randomly initialised target and draft variables (T5X `get_initial_variables`).

    Args:
      rng: PRNG key (the target as T5X; the draft `fold_in(rng, 1)`).
      input_shapes: `decoder_input_tokens` shape `[batch, len]`.
      input_types: optional dtype of that feature (default int32).
    Returns:
      `{'params': ..., 'params_axes': ...}` with the draft's under `'draft'`.
    Raises:
      ValueError: `decoder_input_tokens` missing from `input_shapes`.
    """
    if 'decoder_input_tokens' not in input_shapes:
      raise ValueError(f"input_shapes lacks 'decoder_input_tokens' (got {sorted(input_shapes)}).")
    dtype = (input_types or {}).get('decoder_input_tokens', jnp.int32)
    x = jnp.ones(input_shapes['decoder_input_tokens'], dtype)
    variables = flax.core.unfreeze(self.module.init(rng, x, x, enable_dropout=False))
    if self.draft_module is None:
      return variables
    draft = flax.core.unfreeze(self.draft_module.init(jax.random.fold_in(rng, 1), x, x,
                                                      enable_dropout=False))
    variables['params'][DRAFT_KEY] = draft['params']
    variables['params_axes'][DRAFT_KEY] = draft['params_axes']
    return variables

  def _compute_logits(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                      dropout_rng: Optional[jax.Array] = None, mutable=False,
                      other_variables: Optional[PyTree] = None):
    """Target logits float32 `[batch, len, vocab_size]` (T5X `DecoderOnlyModel._compute_logits`).

    Raises:
      ValueError: missing features; prefix-LM mode without `decoder_causal_attention`.
    """
    for key in ('decoder_input_tokens', 'decoder_target_tokens'):
      if key not in batch:
        raise ValueError(f'The batch lacks {key!r} (has {sorted(batch)}); T5X decoder-only '
                         'features are decoder_input_tokens, decoder_target_tokens, '
                         'decoder_causal_attention[, decoder_loss_weights].')
    params, _ = t5x_decoding.split_draft_params(params)
    causal = self._get_decoder_causal_attention(batch)
    enable_dropout = dropout_rng is not None
    if mutable or other_variables:
      rngs = {'dropout': dropout_rng} if enable_dropout else None
      return self.module.apply(
          {'params': params, **(other_variables or {})}, batch['decoder_input_tokens'],
          batch['decoder_target_tokens'],
          decoder_segment_ids=batch.get('decoder_segment_ids'),
          decoder_causal_attention=causal, enable_dropout=enable_dropout, rngs=rngs,
          mutable=mutable)
    return _forward(self.module, params, batch['decoder_input_tokens'],
                    batch['decoder_target_tokens'], causal,
                    batch.get('decoder_segment_ids'), dropout_rng,
                    enable_dropout=enable_dropout, bidirectional=causal is not None)

  def predict_batch_with_aux(self, params: PyTree, batch: Mapping[str, jnp.ndarray],
                             rng: Optional[jax.Array] = None, *,
                             return_all_decodes: bool = False, num_decodes: int = 1,
                             decoder_params: Optional[Mapping[str, Any]] = None):
    """Decodes the batch's inputs speculatively (T5X `DecoderOnlyModel.predict_batch_with_aux`).

    As T5X: the inputs are `decoder_input_tokens * decoder_causal_attention` (`[0, x_1 …
    x_m, 0 …]`), prefilled in one pass per model; decoding starts at `initial_index = m`,
    a row fills at most the feature length L with prompt and generated tokens (and at
    most `max_decode_steps` generated), and the returned decodes are the generated
    tokens, shifted to the start (`remove_prefix`).

    Args:
      params: target params with the draft's under `'draft'` (or target-only params,
        completed from the constructor's `draft_params` when not traced).
      batch: `decoder_input_tokens` and `decoder_causal_attention`, int `[batch, L]`.
      rng: sampling key (as `decoder_params['decode_rng']`).
      return_all_decodes, num_decodes: as T5X.
      decoder_params: overrides of `temperature`, `topk`, `topp`, `max_decode_steps`,
        `decode_rng`, `eos_id`, `gamma`, `rescale_log_probs`.
    Returns:
      `(decodes, aux)`: decodes int32 `[batch, L]` (best) or `[batch, num_decodes, L]`
      sorted by score ascending; aux `scores`, and per decode `target_calls`, `drafted`,
      `accepted`, `alpha` (as `SpeculativeEncoderDecoderModel`).
    Raises:
      ValueError (before compiling): missing features, as T5X; bad decoder_params.
    """
    if 'decoder_causal_attention' not in batch:
      raise ValueError('Batch does not have the right format for text generation: probably '
                       'because `task_feature_lengths` passed to the feature converter does '
                       'not have both `inputs` and `targets`.')
    inputs = (jnp.asarray(batch['decoder_input_tokens'], jnp.int32) *
              jnp.asarray(batch['decoder_causal_attention'], jnp.int32))
    length = int(jnp.shape(inputs)[1])
    if self.decode_fn is not None:
      return self._predict_with_decode_fn(params, inputs, batch['decoder_causal_attention'],
                                          rng, return_all_decodes, num_decodes,
                                          decoder_params)
    opts = self._decoding_options(decoder_params, rng)
    if generate.needs_draft_model(self.drafter):
      target_params, draft_params = self.split_params(params)
    else:
      target_params, draft_params = t5x_decoding.split_draft_params(params)
    steps = opts['max_decode_steps']
    decodes, scores, stats = generate.decoder_only_speculative_generate(
        self.module, target_params, self.draft_module, draft_params, inputs[:, 1:],
        length if steps is None else steps, opts['gamma'], eos_id=opts['eos_id'],
        temperature=opts['temperature'], topk=opts['topk'], topp=opts['topp'],
        num_decodes=num_decodes, decode_rng=opts['decode_rng'],
        real_vocab_size=self._real_vocab_size(), rescale_log_probs=opts['rescale_log_probs'],
        draft_policy=self.draft_policy, verification=self.verification, drafter=self.drafter,
        ngram_table=self.ngram_table, lenience=self.lenience,
        inputs_bidirectional_attention=self._inputs_bidirectional_attention,
        max_length=length)
    aux = {'scores': scores, 'target_calls': stats.target_calls, 'drafted': stats.drafted,
           'accepted': stats.accepted, 'alpha': stats.alpha}
    if return_all_decodes:
      return decodes, aux
    return decodes[:, -1, :], {k: v[:, -1] for k, v in aux.items()}

  # ------------------------------------------------- a user-set decode_fn, as T5X calls it

  def _compute_kv_cache(self, params: PyTree, inputs: jnp.ndarray,
                        causal_attention_mask: jnp.ndarray):
    """The prompt prefilled into our target cache (T5X `DecoderOnlyModel._compute_kv_cache`).

    Args:
      params: target params (a `'draft'` subtree is ignored).
      inputs: int `[batch, L]`, `[0, x_1 … x_m, 0 …]` per row.
      causal_attention_mask: int `[batch, L]`, 1 on positions 0 … m.
    Returns:
      `(cache, initial_index [batch] int32)`: L slots, valid below `initial_index = m`
      (as T5X: position m, the last prompt token, is fed by the decode loop).
    """
    target_params, _ = t5x_decoding.split_draft_params(params)
    return decoder_only.prefill_cache(
        self.module, target_params, inputs, int(jnp.shape(inputs)[1]),
        causal_attention_mask=jnp.asarray(causal_attention_mask, jnp.int32),
        inputs_bidirectional_attention=self._inputs_bidirectional_attention)

  def _compute_logits_from_slice(self, decoding_state, params: PyTree,
                                 max_decode_length: int):
    """One token per row: `(logits [B', vocab], new cache)` (T5X's signature), from
    `decoding_state.cur_token [B', 1]` at `decoding_state.cur_index [B']`."""
    del max_decode_length  # the cache has its slots already
    target_params, _ = t5x_decoding.split_draft_params(params)
    logits, cache = self.module.apply(
        {'params': target_params}, decoding_state.cur_token, decoding_state.cur_index,
        decoding_state.cache, method=decoder_only.DecoderOnlyTransformer.decode_step)
    return logits[:, 0], cache

  def _predict_with_decode_fn(self, params, inputs, causal_attention_mask, rng,
                              return_all_decodes, num_decodes, decoder_params):
    """T5X `DecoderOnlyModel.predict_batch_with_aux` with `self.decode_fn`, one jit."""
    kwargs = decode_fn_kwargs(self, decoder_params, rng)
    if 'initial_index' in kwargs:
      raise ValueError('decoder_params: initial_index is set by predict_batch_with_aux '
                       '(each row\'s prompt length).')
    decodes, scores = run_decode_fn(
        self, params, (inputs, jnp.asarray(causal_attention_mask, jnp.int32)), kwargs,
        num_decodes)
    if return_all_decodes:
      return decodes, {'scores': scores}
    return decodes[:, -1, :], {'scores': scores[:, -1]}

  def _call_decode_fn(self, params, inputs, causal_attention_mask, num_decodes, kwargs):
    cache, initial_index = self._compute_kv_cache(params, inputs, causal_attention_mask)
    length = inputs.shape[1]
    tokens_ids_to_logits = functools.partial(self._compute_logits_from_slice, params=params,
                                             max_decode_length=length)
    decodes, scores = self.decode_fn(
        inputs=inputs, cache=cache, tokens_to_logits=tokens_ids_to_logits,
        num_decodes=num_decodes, initial_index=initial_index, cache_offset=0, **kwargs)
    return generate_decoder_only.remove_prefix(decodes, initial_index, length), scores
