"""Jitted entry points that run the decoders on our T5 for a batch of encoder inputs.

`t5_generate` is the stock-T5X baseline (encode once, then `temperature_sample`);
`t5_speculative_generate` encodes with both models and runs `speculative_sample`.
Each is one `jax.jit` whose compilation is cached per (models, shapes, γ, static
sampling flags); params, tokens, keys and temperature are traced arguments, so
changing them does not recompile.
"""

from __future__ import annotations

import functools
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decoding
from specdec_jax.decoding import accept
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.generate import xla_options
from specdec_jax.models import t5


def cache_length(max_decode_len: int, gamma: int) -> int:
  """Decoder positions each cache of a speculative decode holds: max(max_decode_len, γ + 1).

  Every row's cache writes beyond `max_decode_len` are dropped (they are never read),
  but one verify call consumes γ + 1 tokens, so the cache must hold at least that many
  positions; with this length any valid (max_decode_len, γ) decodes.
  """
  return max(max_decode_len, gamma + 1)


def _check_tokens(encoder_input_tokens, max_decode_len):
  if not isinstance(max_decode_len, int) or max_decode_len < 1:
    raise ValueError(f'max_decode_len must be an int >= 1, got {max_decode_len!r}.')
  if jnp.ndim(encoder_input_tokens) != 2:
    raise ValueError('encoder_input_tokens must be [batch, enc_len] int, got shape '
                     f'{jnp.shape(encoder_input_tokens)}.')


@xla_options.jit(static_argnames=(
    'model', 'max_decode_len', 'eos_id', 'num_decodes', 'topk', 'topp', 'static_temperature',
    'max_decode_steps', 'rescale_log_probs', 'prompt_free', 'per_row_greedy', 'sharding_plan',
    'sampler'))
def _generate(model, params, encoder_input_tokens, decoder_prompt, decode_rng, temperature,
              *, topp, max_decode_len, eos_id, num_decodes, topk, static_temperature,
              max_decode_steps, rescale_log_probs, prompt_free=False, per_row_greedy=True,
              sharding_plan=None, sampler='gumbel'):
  cache = t5.encode_and_init_cache(model, params, encoder_input_tokens, max_decode_len)
  if sharding_plan is not None:
    cache = sharding_plan.constrain_cache(cache)
  return decoding.temperature_sample(
      decoder_prompt, cache,
      decoding.tokens_to_logits_from_step_fn(t5.make_step_fn(model, params)), eos_id,
      decode_rng=decode_rng, num_decodes=num_decodes,
      temperature=static_temperature if static_temperature is not None else temperature,
      topk=topk, topp=topp, max_decode_steps=max_decode_steps,
      rescale_log_probs=rescale_log_probs, prompt_free=prompt_free,
      per_row_greedy=per_row_greedy, sampler=sampler)


def _per_row_greedy(temperature) -> bool:
  """False when the (concrete) temperature is above the greedy threshold for every row."""
  if isinstance(temperature, jax.core.Tracer):
    return True
  return not bool(np.all(np.asarray(temperature, np.float64) > decoding.MIN_TEMPERATURE))


def _static_temperature(temperature):
  """Greedy as a static Python 0.0 (skips sampling code, like T5X's lax.cond branch)."""
  if isinstance(temperature, (int, float)) and temperature <= decoding.MIN_TEMPERATURE:
    return 0.0
  return None


def _prompt(encoder_input_tokens, max_decode_len, decoder_prompt):
  """`decoder_prompt` (or zeros) as int32 `[batch, max_decode_len]`; ValueError otherwise."""
  batch = jnp.shape(encoder_input_tokens)[0]
  if decoder_prompt is None:
    return jnp.zeros((batch, max_decode_len), jnp.int32)
  if jnp.shape(decoder_prompt) != (batch, max_decode_len):
    raise ValueError(f'decoder_prompt has shape {jnp.shape(decoder_prompt)} but must be '
                     f'[batch, max_decode_len] = ({batch}, {max_decode_len}): pad the forced '
                     'prefix with 0s to max_decode_len, one row per encoder input row.')
  return jnp.asarray(decoder_prompt, jnp.int32)


def _warn_host_params(**trees) -> None:
  """Warns (RuntimeWarning, once per call site) about params held as numpy arrays.

  A jitted call transfers every numpy argument to the device on every call: to an
  accelerator always; on the CPU it aliases 64-byte-aligned data and copies the rest,
  and checkpoint readers' arrays are mostly unaligned. For the demo pair (146 MB of
  float32 params) that cost 4-15 ms per call on a 2-core CPU, up to a quarter of a
  sentence's speculative decode (`scripts/probe_host_params.py`). With a
  `sharding_plan` numpy params are placed on the mesh on every call as well. Put them
  on the device once instead (`jax.device_put`, or restore them into the plan's
  shardings: `checkpoints.load_t5x_checkpoint(..., shardings=plan.param_shardings(cfg))`).
  """
  for name, tree in trees.items():
    if any(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(tree)):
      warnings.warn(f'{name} holds numpy arrays, which are transferred to the device on '
                    f'every call (milliseconds per call for a large model); put them there '
                    f'once: {name} = jax.device_put({name}) (with a sharding_plan: load them '
                    f'with shardings=plan.param_shardings(config)).', RuntimeWarning,
                    stacklevel=3)


def _check_topk(topk, model) -> int:
  """topk as a Python int in [0, vocab_size]; ValueError naming it otherwise."""
  topk = sampling.check_int('topk (0 = off)', topk, 0)
  if topk > model.config.vocab_size:
    raise ValueError(f'topk={topk} exceeds the vocabulary size {model.config.vocab_size}; '
                     'use a smaller topk (0 = off).')
  return topk


def t5_generate(model: t5.Transformer, params, encoder_input_tokens, max_decode_len: int,
                *, eos_id: int = 1, temperature=0.0, topk: int = 0, topp: float = 0.0,
                num_decodes: int = 1, decode_rng=None, decoder_prompt=None,
                max_decode_steps: Optional[int] = None, rescale_log_probs: bool = True,
                sharding_plan=None, sampler: str = 'gumbel'):
  """Baseline decoding: encoder once, then one target call per token (T5X's loop).

  Args:
    model, params: the T5 `Transformer` and its params, as device arrays
      (`jax.device_put` them once: numpy leaves are transferred to the device on
      every call, and a RuntimeWarning says so).
    encoder_input_tokens: int32 `[batch, enc_len]` (0 = padding).
    max_decode_len: decoded length (static).
    decoder_prompt: optional int32 `[batch, max_decode_len]` forced prefix tokens.
    sharding_plan: optional `specdec_jax.sharding.ShardingPlan`: decode on its mesh
      (params placed from their logical axes, the batch padded to the data axis and
      split over it, caches pinned to `('batch', 'heads', …)`); the outputs are then
      host numpy arrays of the real rows, gathered from all processes
      (`specdec_jax.sharding.decode`).
    Other arguments as `decoding.temperature_sample` (note topk defaults to 0 here).
  Returns:
    `(decodes [batch, num_decodes, max_decode_len], log_probs [batch, num_decodes])`.
  """
  _check_tokens(encoder_input_tokens, max_decode_len)
  topk = _check_topk(topk, model)
  decoding._check_common(_prompt(encoder_input_tokens, max_decode_len, decoder_prompt),
                         eos_id, num_decodes, temperature, topk, topp, max_decode_steps)
  sampling.check_sampler(sampler)
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  static = dict(topp=float(topp), max_decode_len=max_decode_len, eos_id=eos_id, sampler=sampler,
                num_decodes=num_decodes, topk=topk,
                static_temperature=_static_temperature(temperature),
                max_decode_steps=max_decode_steps, rescale_log_probs=rescale_log_probs,
                prompt_free=decoder_prompt is None, per_row_greedy=_per_row_greedy(temperature))
  prompt = _prompt(encoder_input_tokens, max_decode_len, decoder_prompt)
  _warn_host_params(params=params)
  if sharding_plan is not None:
    from specdec_jax.sharding import decode as sharded  # pylint: disable=g-import-not-at-top
    return sharded.generate(_generate, sharding_plan, model, params, encoder_input_tokens,
                            prompt, decode_rng, temperature, static)
  return _generate(model, params, jnp.asarray(encoder_input_tokens, jnp.int32), prompt,
                   decode_rng, jnp.asarray(temperature, jnp.float32), **static)


@xla_options.jit(static_argnames=(
    'target_model', 'draft_model', 'max_decode_len', 'gamma', 'eos_id', 'num_decodes',
    'topk', 'topp', 'static_temperature', 'max_decode_steps', 'real_vocab_size',
    'rescale_log_probs', 'prompt_free', 'per_row_greedy', 'draft_policy', 'sharding_plan',
    'verification', 'drafter', 'lenience'))
def _speculative_generate(target_model, target_params, draft_model, draft_params,
                          encoder_input_tokens, draft_encoder_input_tokens, decoder_prompt,
                          decode_rng, temperature, *, topp, max_decode_len, gamma, eos_id,
                          num_decodes, topk, static_temperature, max_decode_steps,
                          real_vocab_size, rescale_log_probs, prompt_free=False,
                          per_row_greedy=True, draft_policy=None, sharding_plan=None,
                          verification='token', drafter=None, lenience=1.0,
                          lookup_source=None, ngram_table=None):
  length = cache_length(max_decode_len, gamma)
  target_cache = t5.encode_and_init_cache(target_model, target_params,
                                          encoder_input_tokens, length)
  if sharding_plan is not None:
    target_cache = sharding_plan.constrain_cache(target_cache, 'target')
  draft_cache = draft_step = None
  if drafter is None or isinstance(drafter, drafters_lib.LookupThenModel):
    draft_cache = t5.encode_and_init_cache(draft_model, draft_params,
                                           draft_encoder_input_tokens, length)
    if sharding_plan is not None:
      draft_cache = sharding_plan.constrain_cache(draft_cache, 'draft')
    draft_step = t5.make_step_fn(draft_model, draft_params)
  source = encoder_input_tokens if lookup_source is None else lookup_source
  loop_drafter, state = loop_drafter_and_state(drafter, draft_step, draft_cache, source,
                                               ngram_table, draft_policy)
  return decoding.speculative_sample(
      decoder_prompt, target_cache, t5.make_step_fn(target_model, target_params),
      state, draft_step, eos_id, gamma,
      vocab_size=target_model.config.vocab_size, decode_rng=decode_rng,
      num_decodes=num_decodes,
      temperature=static_temperature if static_temperature is not None else temperature,
      topk=topk, topp=topp, max_decode_steps=max_decode_steps,
      real_vocab_size=real_vocab_size, rescale_log_probs=rescale_log_probs,
      prompt_free=prompt_free, per_row_greedy=per_row_greedy, draft_policy=draft_policy,
      verification=verification, drafter=loop_drafter, lenience=lenience)


def loop_drafter_and_state(drafter, draft_step, draft_cache, source, ngram_table, draft_policy,
                           initial_index=None):
  """The drafter `speculative_sample` runs and its initial state, inside the jitted call.

  Args:
    drafter: the resolved spec (`resolve_drafter`): None (the draft model) or a drafter.
    draft_step, draft_cache: the draft model's step function and cache (None without it).
    source: int32 `[batch, S]` the lookup searches besides the text so far.
    ngram_table: a table drafter's `(ids, log_probs)`.
    draft_policy: `policies.DraftPolicy` (the model part of 'lookup+model' follows it).
    initial_index: optional `[batch]` prompt lengths already in the draft cache.
  Returns:
    `(loop drafter or None, state)` (None: `speculative_sample`'s default model drafter
    on `state` = the draft cache).
  """
  if isinstance(drafter, drafters_lib.LookupDrafter):
    return drafter, source
  if isinstance(drafter, drafters_lib.NgramTableDrafter):
    return drafter, ngram_table
  if isinstance(drafter, drafters_lib.LookupThenModel):
    loop_drafter = drafters_lib.LookupThenModel(drafter.lookup, drafters_lib.ModelDrafter(
        draft_step, draft_policy if draft_policy.adaptive else None))
    return loop_drafter, (source, draft_cache,
                          loop_drafter.initial_valid(source.shape[0], initial_index))
  return None, draft_cache


def resolve_drafter(drafter, lookup_max_ngram: int = 4, lookup_min_ngram: int = 1):
  """A drafter setting → the static drafter spec `_speculative_generate` compiles for.

  Args:
    drafter: 'model' (or None: the draft model), 'lookup', 'lookup+model', 'bigram',
      'unigram', or a `decoding.drafters` object (`LookupDrafter`, `NgramTableDrafter`,
      `LookupThenModel`).
    lookup_max_ngram, lookup_min_ngram: the lookup's n-gram lengths (for the names).
  Returns:
    None for the draft model, else a hashable drafter object (a `LookupThenModel`'s model
    part is a placeholder, rebuilt with the draft's step function under jit).
  Raises:
    ValueError: an unknown name (the message lists the choices) or bad n-gram lengths.
  """
  if drafter is None or drafter == 'model':
    return None
  if isinstance(drafter, (drafters_lib.LookupDrafter, drafters_lib.NgramTableDrafter)):
    return drafter
  if isinstance(drafter, drafters_lib.LookupThenModel):
    return drafters_lib.LookupThenModel(drafter.lookup, _MODEL_PLACEHOLDER)
  if drafter in ('bigram', 'unigram'):
    return drafters_lib.NgramTableDrafter(order=2 if drafter == 'bigram' else 1)
  if drafter in ('lookup', 'lookup+model'):
    lookup = drafters_lib.LookupDrafter(max_ngram=lookup_max_ngram, min_ngram=lookup_min_ngram)
    return (lookup if drafter == 'lookup'
            else drafters_lib.LookupThenModel(lookup, _MODEL_PLACEHOLDER))
  raise ValueError(f'drafter must be one of {drafters_lib.DRAFTERS} or a '
                   f'specdec_jax.decoding.drafters object, got {drafter!r}.')


_MODEL_PLACEHOLDER = drafters_lib.ModelDrafter(step_fn=None)


def drafter_name(spec) -> str:
  """'model', 'lookup', 'lookup+model', 'bigram' or 'unigram' for a resolved spec."""
  if spec is None:
    return 'model'
  if isinstance(spec, drafters_lib.NgramTableDrafter):
    return 'bigram' if spec.order == 2 else 'unigram'
  return spec.name


def needs_draft_model(drafter) -> bool:
  """Whether a drafter setting uses the draft model ('model', 'lookup+model')."""
  spec = resolve_drafter(drafter)
  return spec is None or isinstance(spec, drafters_lib.LookupThenModel)


def t5_speculative_generate(target_model: t5.Transformer, target_params,
                            draft_model: t5.Transformer, draft_params, encoder_input_tokens,
                            max_decode_len: int, gamma: int, *, eos_id: int = 1,
                            temperature=0.0, topk: int = 0, topp: float = 0.0,
                            num_decodes: int = 1, decode_rng=None, decoder_prompt=None,
                            max_decode_steps: Optional[int] = None,
                            real_vocab_size: Optional[int] = None,
                            draft_encoder_input_tokens=None,
                            rescale_log_probs: bool = True, draft_policy=None,
                            sharding_plan=None, verification: str = 'token',
                            drafter='model', ngram_table=None, lookup_source=None,
                            lenience: float = 1.0):
  """Speculative decoding of a T5 target with a T5 draft or a model-free drafter
  (paper Algorithm 1).

  Args:
    target_model, target_params, draft_model, draft_params: the two T5s; they must
      share token ids (their embeddings may be padded to different sizes). Params as
      device arrays, as in `t5_generate` (numpy ones move every call: warned).
    encoder_input_tokens: int32 `[batch, enc_len]` for the target (and the draft,
      unless `draft_encoder_input_tokens` is given).
    max_decode_len: decoded length (static); both caches get
      `cache_length(max_decode_len, gamma)` positions.
    gamma: γ, draft tokens per round (static); with an adaptive `draft_policy`, the
      most tokens a row drafts in a round (γ_max).
    draft_policy: `policies.DraftPolicy`, a policy name or None (constant γ); see
      `speculative.speculative_sample`.
    verification: 'token' (Algorithm 1) or 'block' (block verification, Sun et al.
      ICLR 2025); see `speculative.speculative_sample` (static: each compiles its own).
    drafter: what proposes the drafts (`resolve_drafter`): 'model' (default, the draft
      model), 'lookup' (n-gram lookup in `lookup_source` and the text so far),
      'lookup+model' (lookup where it matches, else the draft model), 'bigram' /
      'unigram' (a table, `ngram_table`), or a `decoding.drafters` object. Drafters
      without the model take `draft_model = draft_params = None`. Static.
    ngram_table: `(ids [rows, k] int32, log_probs [rows, k] float32)` for a table
      drafter (`specdec_jax.drafters.tables.load`).
    lookup_source: int32 `[batch, S]` the lookup searches besides the text so far;
      default `encoder_input_tokens` (copying from the input).
    lenience: l in (0, 1], paper Appendix A.5; 1 (default) is exact, l < 1 is NOT
      (see `speculative.speculative_sample`). Static.
    sharding_plan: optional `specdec_jax.sharding.ShardingPlan`, as in `t5_generate`;
      the draft is replicated or sharded like the target (`ShardingPlan.draft`). Every
      row keeps the key it has on one device, so outputs do not depend on the mesh.
    Other arguments as `decoding.speculative_sample`.
  Returns:
    `(decodes [batch, num_decodes, max_decode_len], log_probs [batch, num_decodes],
    decoding.SpeculativeStats)`.
  Raises:
    ValueError: as `speculative_sample`, before compiling.
  """
  _check_tokens(encoder_input_tokens, max_decode_len)
  topk = _check_topk(topk, target_model)
  prompt = _prompt(encoder_input_tokens, max_decode_len, decoder_prompt)
  decoding._check_common(prompt, eos_id, num_decodes, temperature, topk, topp,
                         max_decode_steps)
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  accept.check_verification(verification)
  lenience = accept.check_lenience(lenience, verification)
  spec = resolve_drafter(drafter)
  uses_model, ngram_table, lookup_source = check_drafter_args(
      spec, target_model, draft_model, draft_params, ngram_table, lookup_source,
      jnp.shape(encoder_input_tokens)[0], 'encoder_input_tokens', real_vocab_size)
  if lookup_source is not None and sharding_plan is not None:
    raise ValueError('lookup_source with a sharding_plan is not supported; the lookup '
                     'searches encoder_input_tokens by default.')
  draft_tokens = (encoder_input_tokens if draft_encoder_input_tokens is None
                  else draft_encoder_input_tokens)
  if jnp.ndim(draft_tokens) != 2 or jnp.shape(draft_tokens)[0] != jnp.shape(
      encoder_input_tokens)[0]:
    raise ValueError(f'draft_encoder_input_tokens has shape {jnp.shape(draft_tokens)}; it must '
                     f'be [batch, enc_len] with the same batch ({jnp.shape(encoder_input_tokens)[0]}) '
                     'as encoder_input_tokens.')
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  if draft_encoder_input_tokens is None:
    draft_encoder_input_tokens = encoder_input_tokens
  static = dict(topp=float(topp), max_decode_len=max_decode_len, gamma=gamma, eos_id=eos_id,
                num_decodes=num_decodes, topk=topk,
                static_temperature=_static_temperature(temperature),
                max_decode_steps=max_decode_steps, real_vocab_size=real_vocab_size,
                rescale_log_probs=rescale_log_probs, prompt_free=decoder_prompt is None,
                per_row_greedy=_per_row_greedy(temperature),
                draft_policy=policies.as_policy(draft_policy), verification=verification,
                drafter=spec, lenience=lenience)
  if not uses_model:
    draft_model = draft_params = None
  _warn_host_params(target_params=target_params, draft_params=draft_params)
  traced = dict(lookup_source=lookup_source, ngram_table=ngram_table)
  if sharding_plan is not None:
    from specdec_jax.sharding import decode as sharded  # pylint: disable=g-import-not-at-top
    return sharded.speculative_generate(
        _speculative_generate, sharding_plan, target_model, target_params, draft_model,
        draft_params, encoder_input_tokens, draft_encoder_input_tokens, prompt, decode_rng,
        temperature, static, traced)
  return _speculative_generate(
      target_model, target_params, draft_model, draft_params,
      jnp.asarray(encoder_input_tokens, jnp.int32),
      jnp.asarray(draft_encoder_input_tokens, jnp.int32), prompt, decode_rng,
      jnp.asarray(temperature, jnp.float32), **static, **traced)


def check_drafter_args(spec, target_model, draft_model, draft_params, ngram_table,
                       lookup_source, batch: int, batch_name: str, real_vocab_size=None):
  """The drafter-related arguments of a speculative entry point, checked before compiling.

  Args:
    spec: `resolve_drafter`'s result; the others as `t5_speculative_generate`'s
      (`batch` rows of `batch_name`, what `lookup_source` must match).
  Returns:
    `(uses_model, ngram_table as device arrays or None, lookup_source int32 or None)`.
  Raises:
    ValueError: a drafter that needs the draft model without one, a table missing or
      given for a drafter without one, a lookup_source of the wrong shape or for a
      drafter without lookup, a model whose vocabulary is smaller than real_vocab_size.
  """
  uses_model = spec is None or isinstance(spec, drafters_lib.LookupThenModel)
  if uses_model and (draft_model is None or draft_params is None):
    raise ValueError(f"drafter={drafter_name(spec)!r} needs draft_model and draft_params; "
                     "pass them, or use drafter='lookup' / 'bigram' without a draft model.")
  if isinstance(spec, drafters_lib.NgramTableDrafter):
    ngram_table = _check_table(ngram_table, spec, target_model)
  elif ngram_table is not None:
    raise ValueError(f'ngram_table is given but drafter={drafter_name(spec)!r} uses none; '
                     "use drafter='bigram' or 'unigram', or drop ngram_table.")
  if lookup_source is not None:
    if spec is None or isinstance(spec, drafters_lib.NgramTableDrafter):
      raise ValueError('lookup_source is given but the drafter does no lookup; use '
                       "drafter='lookup' or 'lookup+model'.")
    if jnp.ndim(lookup_source) != 2 or jnp.shape(lookup_source)[0] != batch:
      raise ValueError(f'lookup_source has shape {jnp.shape(lookup_source)}; it must be '
                       f'[batch, S] int with the batch of {batch_name}.')
    lookup_source = jnp.asarray(lookup_source, jnp.int32)
  if real_vocab_size is not None:
    for name, m in (('target_model', target_model), ('draft_model', draft_model)):
      if m is not None and m.config.vocab_size < real_vocab_size:
        raise ValueError(
            f'{name} has vocab_size {m.config.vocab_size} < real_vocab_size '
            f'{real_vocab_size}: the two models do not share the same token ids; use a '
            'draft trained with the target\'s vocabulary.')
  return uses_model, ngram_table, lookup_source


def _check_table(table, spec, target_model):
  """`(ids, log_probs)` as device arrays, checked against the target's vocabulary."""
  if table is None:
    raise ValueError(f"drafter={drafter_name(spec)!r} needs ngram_table=(ids, log_probs); "
                     'load one with specdec_jax.drafters.tables.load(path).')
  try:
    ids, log_probs = table[0], table[1]
  except (TypeError, IndexError, KeyError):
    raise ValueError('ngram_table must be a pair (ids [rows, k] int32, log_probs [rows, k] '
                     'float32).') from None
  rows = 1 if spec.order == 1 else None
  if (jnp.ndim(ids) != 2 or jnp.shape(ids) != jnp.shape(log_probs)
      or (rows and jnp.shape(ids)[0] != rows)):
    raise ValueError(f'ngram_table has ids {jnp.shape(ids)} and log_probs '
                     f'{jnp.shape(log_probs)}; a {drafter_name(spec)} table needs equal '
                     '[rows, k] shapes' + (' with one row.' if rows else '.'))
  if isinstance(ids, jax.Array):  # already on the device (checked when it was loaded)
    return ids.astype(jnp.int32), jnp.asarray(log_probs, jnp.float32)
  ids = np.asarray(ids)
  vocab = target_model.config.vocab_size
  if ids.size and (ids.min() < 0 or ids.max() >= vocab):
    raise ValueError(f'ngram_table ids lie outside the target vocabulary [0, {vocab}).')
  return jnp.asarray(ids, jnp.int32), jnp.asarray(log_probs, jnp.float32)
