"""The speculative-decoding settings both T5X model classes take, checked in one place.

`SpeculativeEncoderDecoderModel` (`model.py`) and `SpeculativeDecoderOnlyModel`
(`decoder_only_model.py`) accept the same keyword arguments for the draft and the
decoder (γ, drafter, draft policy, verification, lenience, sampling defaults, n-gram
table, EOS id, vocabularies). `check_settings` validates them at construction, before
anything compiles; `SpeculativeOptionsMixin` turns a call's `decoder_params` into the
options of one decode.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from specdec_jax import generate
from specdec_jax.generate import compile_cache
from specdec_jax.decoding import accept
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.drafters import tables
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.interop.t5x.decode_fn import unwrapped as _unwrapped
from specdec_jax.interop.t5x.vocab import check_vocabularies_match

# Keys of `decoder_params` that the speculative `predict_batch_with_aux` understands.
DECODER_PARAM_KEYS = ('temperature', 'topk', 'topp', 'max_decode_steps', 'decode_rng',
                      'eos_id', 'gamma', 'rescale_log_probs')


def check_settings(module, draft_module, *, require_module: Callable, drafter, gamma,
                   draft_policy, temperature, topk, topp, verification, lenience,
                   ngram_table, eos_id, output_vocabulary, draft_vocabulary,
                   input_vocabulary=None, compilation_cache=None,
                   decode_fn=None) -> dict[str, Any]:
  """Checks a model class's speculative settings; returns them normalised.

  Args:
    module, draft_module: the target and the draft (None for a model-free drafter, or
      with a `decode_fn` other than `t5x_decoding.speculative_sample`: the target alone).
    require_module: `fn(module, name)` raising ValueError unless the module is of the
      class's family.
    Others: the constructor arguments of the same names.
  Returns:
    `{'drafter': spec, 'gamma', 'draft_policy', 'lenience', 'ngram_table': (ids,
    log_probs) or None, 'eos_id': int}`.
  Raises:
    ValueError: naming the argument, as the classes document.
  """
  require_module(module, 'module')
  try:
    spec = generate.resolve_drafter(drafter)
  except ValueError as e:
    raise ValueError(f'drafter: {e}') from e
  target_alone = (decode_fn is not None and draft_module is None and
                  _unwrapped(decode_fn) is not t5x_decoding.speculative_sample)
  if (generate.needs_draft_model(spec) and not target_alone) or draft_module is not None:
    require_module(draft_module, 'draft_module')
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  try:
    draft_policy = policies.as_policy(draft_policy)
  except ValueError as e:
    raise ValueError(f'draft_policy: {e}') from e
  sampling.validate_sampling_args(temperature, topk, topp)
  accept.check_verification(verification)
  lenience = accept.check_lenience(lenience, verification)
  table = None
  if isinstance(spec, drafters_lib.NgramTableDrafter):
    if ngram_table is None:
      raise ValueError(f"drafter={drafter!r} needs ngram_table= (a table file from "
                       '`python -m specdec_jax.drafters.tables`).')
    ids, log_probs, _ = tables.load(ngram_table, module.config.vocab_size)
    table = (ids, log_probs)
  elif ngram_table is not None:
    raise ValueError(f'ngram_table is given but drafter={drafter!r} uses none.')
  if eos_id is None:
    eos_id = getattr(output_vocabulary, 'eos_id', None) or 1
  if not isinstance(eos_id, (int, np.integer)):
    raise ValueError(f'eos_id must be an int, got {eos_id!r}.')
  if draft_vocabulary is not None:
    check_vocabularies_match(output_vocabulary, draft_vocabulary, 'output')
    if input_vocabulary is not None and input_vocabulary is not output_vocabulary:
      # The draft reads the same input tokens as the target.
      check_vocabularies_match(input_vocabulary, draft_vocabulary, 'input')
  for name, mod in (('module', module), ('draft_module', draft_module)):
    if mod is None:
      continue
    for vname, vocab in (('output_vocabulary', output_vocabulary),
                         ('draft_vocabulary', draft_vocabulary)):
      size = getattr(vocab, 'vocab_size', None)
      if isinstance(size, int) and size > mod.config.vocab_size:
        raise ValueError(f'{vname} has {size} ids but {name}.config.vocab_size is only '
                         f'{mod.config.vocab_size}; use the config the checkpoint was '
                         'trained with.')
  try:
    compile_cache.resolve(compilation_cache)
  except TypeError as e:
    raise ValueError(f'compilation_cache: {e}') from e
  return {'drafter': spec, 'gamma': gamma, 'draft_policy': draft_policy,
          'lenience': lenience, 'ngram_table': table, 'eos_id': int(eos_id)}


def _check_topk_topp_sources(options: dict, decoder_params: dict) -> None:
  """Raises ValueError when one of `topk` / `topp` comes from `decoder_params` and the other,
  also non-zero, from the model's constructor (gin), naming where each came from.

  Both from the same place are left to `sampling.validate_sampling_args`' message.
  """
  topk, topp = options['topk'], options['topp']
  if not (topk and isinstance(topp, (int, float)) and topp):
    return
  if ('topk' in decoder_params) == ('topp' in decoder_params):
    return
  given, kept = ('topk', 'topp') if 'topk' in decoder_params else ('topp', 'topk')
  raise ValueError(
      f"decoder_params['{given}']={options[given]!r} conflicts with the model's {kept}="
      f'{options[kept]!r} (set by its constructor or gin): at most one of topk and topp may be '
      f"non-zero. Pass decoder_params['{kept}']=0 with it, or set the model's {kept} to 0.")


class SpeculativeOptionsMixin:
  """A decode's options from the model's defaults and a call's `decoder_params` (needs
  `temperature`, `topk`, `topp`, `eos_id`, `gamma`, `rescale_log_probs`, `module`,
  `output_vocabulary`)."""

  def _init_settings(self, settings: dict, *, verification, temperature, topk, topp,
                     rescale_log_probs) -> None:
    """Sets the model's decoding attributes from `check_settings`'s result."""
    self.gamma = settings['gamma']
    self.draft_policy = settings['draft_policy']
    self.verification = verification
    self.drafter = settings['drafter']
    self.drafter_name = generate.drafter_name(self.drafter)
    self.ngram_table = settings['ngram_table']
    self.lenience = settings['lenience']
    self.temperature = temperature
    self.topk = topk
    self.topp = topp
    self.eos_id = settings['eos_id']
    self.rescale_log_probs = rescale_log_probs

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
    _check_topk_topp_sources(options, decoder_params)
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
