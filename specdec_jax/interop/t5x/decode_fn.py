"""Calling a T5X `decode_fn` from the model class exactly as T5X's model calls it.

`T5XDecodeFnMixin` gives `SpeculativeEncoderDecoderModel` the decode path of T5X's
`EncoderDecoderModel.predict_batch_with_aux` (t5x/models.py) for a user-set
`decode_fn`: encode once, build the decode cache (`_compute_kv_cache`), wrap the
one-token decoder as `functools.partial(self._compute_logits_from_slice,
params=..., encoded_inputs=..., raw_inputs=..., max_decode_length=...)` and call
`decode_fn(inputs=<T5X-layout prompt>, cache=..., tokens_to_logits=...,
num_decodes=..., cache_offset=0, eos_id=..., **decoder_params)`, all in one jit.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.decoding import baseline
from specdec_jax.decoding import policies
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.models import t5
from specdec_jax.interop.t5x.features import decoder_prompt_inputs


@functools.partial(jax.jit, static_argnames=('model', 'num_decodes', 'static_kwargs'))
def _jitted_decode_fn(model, params, arrays, dynamic_kwargs, *, num_decodes, static_kwargs):
  return model._call_decode_fn(params, *arrays, num_decodes,  # pylint: disable=protected-access
                               {**dict(static_kwargs), **dynamic_kwargs})


def run_decode_fn(model, params, arrays: tuple, kwargs: dict, num_decodes: int):
  """`model._call_decode_fn(params, *arrays, num_decodes, kwargs)` in one jit (both
  families): `kwargs` values that `is_static` go in as static arguments, the rest traced."""
  static = {k: v for k, v in kwargs.items() if is_static(v)}
  dynamic = {k: v for k, v in kwargs.items() if k not in static}
  return _jitted_decode_fn(model, params, arrays, dynamic, num_decodes=num_decodes,
                           static_kwargs=tuple(sorted(static.items())))


def unwrapped(fn):
  """The function under gin's configurable wrapper / functools.partial layers."""
  while True:
    if isinstance(fn, functools.partial):
      fn = fn.func
    elif hasattr(fn, '__wrapped__'):
      fn = fn.__wrapped__
    else:
      return fn


def is_static(value) -> bool:
  """Whether a `decoder_params` value goes into the jit as a static argument: Python
  scalars, strings, draft policies and functions (e.g. a `logit_callback_fn`, which the
  decode_fn then accepts or refuses by name), not arrays."""
  return value is None or callable(value) or isinstance(
      value, (bool, int, float, str, np.integer, np.floating, policies.DraftPolicy))


def check_layout(decode_fn) -> None:
  """Refuses `specdec_jax.decoding.temperature_sample` as a model's `decode_fn`.

  Raises:
    ValueError: it takes prompts without T5X's leading BOS; the message names the
      T5X-layout function to bind instead.
  """
  if decode_fn is not None and unwrapped(decode_fn) is baseline.temperature_sample:
    raise ValueError(
        'decode_fn=specdec_jax.decoding.temperature_sample takes prompts without T5X\'s '
        'leading BOS; a model\'s decode_fn gets T5X\'s layout. Use '
        'specdec_jax.interop.t5x.decoding.temperature_sample (gin: '
        '@specdec_jax.t5x_decoding.temperature_sample).')


def decode_fn_kwargs(model, decoder_params, rng) -> dict:
  """T5X's `decoder_params` handling, plus `model`'s sampling defaults (both families).

  As T5X: `rng` becomes `decode_rng` (both given is an error) and `eos_id` defaults
  to the output vocabulary's. The model's `temperature`, `topk`, `topp`, `gamma`,
  `rescale_log_probs`, `draft_policy`, `verification`, `drafter`, `ngram_table` and
  `lenience` are passed too where the `decode_fn` takes them and
  neither `decoder_params` nor a `functools.partial` around it sets them.
  """
  kwargs = dict(decoder_params or {})
  if rng is not None:
    if kwargs.get('decode_rng') is not None:
      raise ValueError(f'Got an RNG both from the `rng` argument ({rng}) and '
                       f"decoder_params['decode_rng'] ({kwargs['decode_rng']}); pass one "
                       'or the other.')
    kwargs['decode_rng'] = rng
  kwargs.setdefault('eos_id', model.eos_id)
  params = inspect.signature(model.decode_fn).parameters
  takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
  bound = set()
  fn = model.decode_fn
  while isinstance(fn, functools.partial):
    bound |= set(fn.keywords)
    fn = fn.func
  for name in ('temperature', 'topk', 'topp', 'gamma', 'rescale_log_probs', 'draft_policy',
               'verification', 'drafter', 'ngram_table', 'lenience'):
    if name in params and name not in kwargs and name not in bound:
      kwargs[name] = getattr(model, name)
  fixed = {'inputs', 'cache', 'tokens_to_logits', 'num_decodes', 'cache_offset'}
  unknown = sorted(k for k in kwargs if k in fixed or (k not in params and not takes_any))
  if unknown:
    raise ValueError(f'decoder_params {unknown} are not arguments the decode_fn '
                     f'{model.decode_fn!r} takes (or are set by predict_batch_with_aux).')
  for key in ('eos_id', 'max_decode_steps'):
    if isinstance(kwargs.get(key), np.integer):
      kwargs[key] = int(kwargs[key])
  return kwargs


class T5XDecodeFnMixin:
  """T5X's `decode_fn` calling convention (needs `module`, `decode_fn`, `eos_id`,
  `split_params`, ...)."""


  def _decode_fn_kwargs(self, decoder_params, rng) -> dict:
    return decode_fn_kwargs(self, decoder_params, rng)

  def _decode_with_fn(self, params, encoder_input_tokens, decoder_input_tokens, rng,
                      decoder_params, num_decodes, prompt_with_targets):
    kwargs = self._decode_fn_kwargs(decoder_params, rng)
    if unwrapped(self.decode_fn) is t5x_decoding.speculative_sample:
      # The draft goes in as an argument: params['draft'], else the constructor's
      # (split_params refuses that inside a trace, where it would be a constant).
      target_params, draft_params = self.split_params(params)
      params = {**target_params, t5x_decoding.DRAFT_KEY: draft_params}
    prompt = decoder_prompt_inputs(decoder_input_tokens, kwargs['eos_id'], prompt_with_targets)
    return run_decode_fn(self, params, (jnp.asarray(encoder_input_tokens, jnp.int32), prompt),
                         kwargs, num_decodes)

  def _call_decode_fn(self, params, encoder_input_tokens, prompt, num_decodes, kwargs):
    """T5X `EncoderDecoderModel.predict_batch_with_aux`'s decode_fn call, on our cache."""
    target_params, _ = t5x_decoding.split_draft_params(params)
    encoded = self.module.apply({'params': target_params}, encoder_input_tokens,
                                enable_dropout=False, method=t5.Transformer.encode)
    cache, _ = self._compute_kv_cache(params, encoded, encoder_input_tokens, prompt)
    expand = lambda x: jnp.repeat(x, num_decodes, axis=0)
    tokens_ids_to_logits = functools.partial(
        self._compute_logits_from_slice, params=params, encoded_inputs=expand(encoded),
        raw_inputs=expand(encoder_input_tokens), max_decode_length=prompt.shape[1])
    return self.decode_fn(inputs=prompt, cache=cache, tokens_to_logits=tokens_ids_to_logits,
                          num_decodes=num_decodes, cache_offset=0, **kwargs)

  def _compute_kv_cache(self, params, encoded_inputs, encoder_input_tokens,
                        decoder_input_tokens, prefill_decoder_prompt: bool = False):
    """Our decode cache for `decoder_input_tokens.shape[1]` positions; no prefill.

    Returns `(t5.DecoderCache, None)` like T5X's `_compute_kv_cache` without prefill
    (the prompt is forced token by token instead).
    """
    del prefill_decoder_prompt
    target_params, _ = t5x_decoding.split_draft_params(params)
    cache = self.module.apply({'params': target_params}, encoded_inputs, encoder_input_tokens,
                              decoder_input_tokens.shape[1], method=t5.Transformer.init_cache)
    return cache, None

  def _compute_logits_from_slice(self, decoding_state, params, encoded_inputs, raw_inputs,
                                 max_decode_length: int):
    """One decoder token per row: `(logits [B', vocab], new cache)` (T5X's signature).

    `encoded_inputs` / `raw_inputs` are unused (the cache holds the cross-attention
    keys/values) but kept: `t5x_decoding.speculative_sample` reads them.
    """
    del encoded_inputs, raw_inputs, max_decode_length
    target_params, _ = t5x_decoding.split_draft_params(params)
    logits, cache = self.module.apply(
        {'params': target_params}, decoding_state.cur_token, decoding_state.cur_index,
        decoding_state.cache, method=t5.Transformer.decode_step)
    return logits[:, 0], cache
