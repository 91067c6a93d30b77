"""Our decoders as T5X `decode_fn`s: T5X's calling convention and prompt layout.

T5X's `EncoderDecoderModel.predict_batch_with_aux` (t5x/models.py) calls

    decode_fn(inputs=decoder_prompt_inputs, cache=cache, tokens_to_logits=fn,
              num_decodes=n, cache_offset=0, eos_id=..., decode_rng=..., **decoder_params)

with `inputs` in the shifted-right layout `[0, p1, p2, …, 0]` (BOS 0 at position 0,
forced prompt tokens after it) and expects `(decodes [batch, n, max_decode_len],
scores [batch, n])` sorted by score ascending (t5x/decoding.py `temperature_sample`).
`specdec_jax.decoding` takes prompts without the BOS (`[p1, p2, …]`); the two
functions here convert and call it, so either can be bound as `decode_fn`:

  * `temperature_sample`: T5X's signature; runs `specdec_jax.decoding.temperature_sample`
    with the `tokens_to_logits` and cache it is given (T5X's own flax cache and
    one-token decoder, or ours).
  * `speculative_sample`: T5X's signature plus `draft_module`, `draft_params`, `gamma`
    (bind them with gin or `functools.partial`). T5X's one-token cache cannot be
    rolled back after rejected drafts, so it builds our k-token caches for the target
    and the draft and runs `specdec_jax.decoding.speculative_sample`. The target is
    read from the `tokens_to_logits` T5X builds (`functools.partial` of
    `_compute_logits_from_slice` with `params`, `encoded_inputs`, `raw_inputs`; its
    model's `module.config` has T5X's `T5Config` fields), or given explicitly.

With T5X's own `EncoderDecoderModel` the draft's params reach `decode_fn` only through
the partial, so T5X's compiled predict step holds them as constants; with
`specdec_jax.interop.t5x.model.SpeculativeEncoderDecoderModel` they are part of the params
(`params['draft']`) and stay arguments of the compiled step.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, Optional

import flax
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decoding, generate
from specdec_jax.decoding import accept
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.generate import common as generate_common
from specdec_jax.decoding import loop_common
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.models import t5
from specdec_jax.drafters import tables
from specdec_jax.models.config import T5Config
from specdec_jax.interop.t5x.features import ours_prompt_to_t5x, t5x_prompt_to_ours

DRAFT_KEY = 'draft'  # where SpeculativeEncoderDecoderModel keeps the draft in its params


# ---------------------------------------------------------------- shared argument handling

def _check_callbacks(state_callback_fn, logit_callback_fn) -> None:
  for name, fn in (('state_callback_fn', state_callback_fn),
                   ('logit_callback_fn', logit_callback_fn)):
    if fn is not None:
      raise ValueError(f'{name} is not supported by specdec_jax decoding (its loop state is '
                       'not T5X\'s SamplingLoopState); leave it None or use '
                       't5x.decoding.temperature_sample.')


def _max_steps(max_decode_steps, hard_limit, max_decode_len: int) -> Optional[int]:
  """T5X's `max_decode_steps` / `max_decode_steps_hard_limit` rules, as a Python int."""
  if max_decode_steps is None:
    return None
  if isinstance(max_decode_steps, jax.core.Tracer):
    raise ValueError('max_decode_steps must be a Python int here (a traced value would '
                     'need a recompilation-free loop bound); pass it as a static int.')
  max_decode_steps = int(max_decode_steps)
  if hard_limit is not None and hard_limit > 0:
    max_decode_steps = min(max_decode_steps, int(hard_limit))
  if max_decode_steps > max_decode_len:
    raise ValueError(f'Cannot decode more steps than the sequence length: max_decode_steps='
                     f'{max_decode_steps} > max_decode_len={max_decode_len} (as T5X).')
  return max_decode_steps


def _eos(eos_id) -> int:
  """T5X passes `output_vocabulary.eos_id` (maybe a NumPy int); ours needs an int."""
  if isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer)):
    raise ValueError(f'eos_id must be an int, got {eos_id!r}.')
  return int(eos_id)


def _check_inputs(inputs, num_decodes):
  inputs = jnp.asarray(inputs, jnp.int32)
  if inputs.ndim != 2:
    raise ValueError(f'inputs must be [batch, max_decode_len] int in T5X\'s layout '
                     f'([0, prompt…, 0…]), got shape {inputs.shape}.')
  if not isinstance(num_decodes, int) or num_decodes < 1:
    raise ValueError(f'num_decodes must be an int >= 1, got {num_decodes!r}.')
  return inputs


def expand_cache(cache, num_decodes: int, offset: int = 0, apply_to_index: bool = False):
  """Repeats every cache row `num_decodes` times along axis `offset` (T5X's expansion).

  A flax cache collection (a mapping, T5X's) is expanded as T5X's
  `cache_map(flat_batch_beam_expand, ...)`: leaves named `cache_index` (unless
  `apply_to_index`), `cached_bias` and `position_embedder_index` are left as they
  are. Any other pytree (our `t5.DecoderCache`) has every leaf expanded.
  """
  if num_decodes == 1:
    return cache
  rep = lambda x: jnp.repeat(x, num_decodes, axis=offset)
  if isinstance(cache, Mapping):
    frozen = isinstance(cache, flax.core.FrozenDict)
    flat = traverse_util.flatten_dict(flax.core.unfreeze(cache))
    skip = {'cached_bias', 'position_embedder_index'}
    if not apply_to_index:
      skip.add('cache_index')
    flat = {k: (v if k[-1] in skip else jax.tree_util.tree_map(rep, v))
            for k, v in flat.items()}
    out = traverse_util.unflatten_dict(flat)
    return flax.core.freeze(out) if frozen else out
  return jax.tree_util.tree_map(rep, cache)


def _per_row(value, batch: int, num_decodes: int):
  """A `[batch]` array repeated per decode; scalars (and None) unchanged."""
  if value is None or jnp.ndim(value) == 0:
    return value
  value = jnp.asarray(value)
  if value.shape[0] != batch:
    raise ValueError(f'per-row argument has shape {value.shape}; expected a scalar or '
                     f'[batch] = ({batch},).')
  return jnp.repeat(value, num_decodes, axis=0)


def _sort(decodes, log_probs, batch: int, num_decodes: int):
  """[B*n, 1, L], [B*n, 1] → [B, n, L], [B, n] sorted by log-prob ascending (as T5X)."""
  return loop_common.sort_decodes(decodes, log_probs, batch, num_decodes)[:2]


def _t5x_sequences(tokens_to_logits):
  """Presents `DecodingState.sequences` in T5X's layout (BOS at 0) to `tokens_to_logits`."""
  def wrapped(state):  # ours: decoder positions 1 … L
    return tokens_to_logits(state.replace(sequences=ours_prompt_to_t5x(state.sequences)))
  return wrapped


# ---------------------------------------------------------------- temperature sampling

def temperature_sample(inputs, cache, tokens_to_logits: Callable, eos_id: int,
                       decode_rng=None, num_decodes: int = 1, temperature=1.0,
                       topk: int = 1, topp=0.0, cache_offset: int = 0, initial_index=None,
                       max_decode_steps: Optional[int] = None,
                       max_decode_steps_hard_limit: Optional[int] = None,
                       rescale_log_probs: bool = True, state_callback_fn=None,
                       logit_callback_fn=None):
  """`specdec_jax.decoding.temperature_sample` with T5X's signature and prompt layout.

  Mirrors `t5x.decoding.temperature_sample` argument for argument (defaults included:
  `temperature=1.0, topk=1`, i.e. greedy unless `topk` is set to 0).

  Args:
    inputs: int `[batch, max_decode_len]` in T5X's layout: column 0 is the BOS slot
      (ignored), then forced prompt tokens, then 0s (`[0, p1, p2, …, 0]`).
    cache: the decoder cache for `batch` rows (T5X's flax cache or ours); expanded
      to `batch * num_decodes` rows here as T5X does.
    tokens_to_logits: `fn(DecodingState) -> (logits [B', vocab], new_cache)`; its
      state's `sequences` are in T5X's layout (`[B', max_decode_len]`, BOS first).
    eos_id, decode_rng, num_decodes, temperature (scalar or `[batch]`), topk, topp,
      cache_offset, initial_index (`[batch]`), max_decode_steps,
      max_decode_steps_hard_limit, rescale_log_probs: as T5X.
    state_callback_fn, logit_callback_fn: not supported (must be None).
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32, log_probs [batch,
    num_decodes] float32)`, sorted by log-prob ascending (best last), 0 after EOS:
    the same output as `specdec_jax.decoding.temperature_sample` on the prompt
    without its BOS (`interop.t5x.features.t5x_prompt_to_ours(inputs)`).
  Raises:
    ValueError (before compiling): bad shapes, callbacks given, a traced
      `max_decode_steps` or one beyond `max_decode_len`, and `decoding`'s own checks.
  """
  _check_callbacks(state_callback_fn, logit_callback_fn)
  inputs = _check_inputs(inputs, num_decodes)
  batch, max_decode_len = inputs.shape
  max_decode_steps = _max_steps(max_decode_steps, max_decode_steps_hard_limit, max_decode_len)
  ours = jnp.repeat(t5x_prompt_to_ours(inputs), num_decodes, axis=0)
  cache = expand_cache(cache, num_decodes, cache_offset, apply_to_index=initial_index is not None)
  decodes, log_probs = decoding.temperature_sample(
      ours, cache, _t5x_sequences(tokens_to_logits), _eos(eos_id), decode_rng=decode_rng,
      num_decodes=1, temperature=_per_row(temperature, batch, num_decodes), topk=topk,
      topp=topp, cache_offset=cache_offset,
      initial_index=_per_row(initial_index, batch, num_decodes),
      max_decode_steps=max_decode_steps, rescale_log_probs=rescale_log_probs)
  return _sort(decodes, log_probs, batch, num_decodes)


# ---------------------------------------------------------------- speculative sampling

@dataclasses.dataclass(frozen=True)
class _Target:
  module: t5.Transformer
  params: Any
  encoded: Any  # [batch * num_decodes, enc_len, emb] or None (encode here)
  encoder_input_tokens: Any  # [batch * num_decodes, enc_len]
  owner: Any  # the model object whose method tokens_to_logits is, or None


def as_t5_module(module) -> t5.Transformer:
  """Our `t5.Transformer` for `module`: itself, or one built from its T5X `config`.

  T5X's `network.Transformer` has the same param tree as ours and a `config` with
  `T5Config`'s fields (`vocab_size`, `dtype`, `emb_dim`, …), so its params run on
  our Transformer unchanged.

  Raises:
    ValueError: `module` has no `config`, or its config has fields ours lacks.
  """
  if isinstance(module, t5.Transformer):
    return module
  cfg = getattr(module, 'config', None)
  if isinstance(cfg, T5Config):
    return t5.Transformer(cfg)
  if cfg is None or not dataclasses.is_dataclass(cfg):
    raise ValueError(f'Cannot build a specdec_jax T5 from {type(module).__name__}: it has no '
                     'T5Config-like `config`; pass a specdec_jax.models.t5.Transformer.')
  ours = {f.name for f in dataclasses.fields(T5Config)}
  values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
  extra = sorted(set(values) - ours)
  if extra:
    raise ValueError(f'{type(module).__name__}.config has fields {extra} that '
                     'specdec_jax.models.config.T5Config lacks; only T5X\'s t5x/examples/t5 '
                     'network (T5 1.0 / 1.1) is supported.')
  return t5.Transformer(T5Config(**values))


def _target(tokens_to_logits, num_decodes, target_module, target_params,
            encoder_input_tokens) -> _Target:
  """The target model, params and encoder inputs, explicit or from T5X's partial."""
  if target_module is not None or target_params is not None:
    if target_module is None or target_params is None or encoder_input_tokens is None:
      raise ValueError('Pass target_module, target_params and encoder_input_tokens together.')
    return _Target(as_t5_module(target_module), target_params, None,
                   jnp.asarray(encoder_input_tokens, jnp.int32), None)
  kw = getattr(tokens_to_logits, 'keywords', None) or {}
  if not (isinstance(tokens_to_logits, functools.partial)
          and {'params', 'encoded_inputs', 'raw_inputs'} <= set(kw)):
    raise ValueError(
        'speculative_sample needs the target model: tokens_to_logits is not T5X\'s '
        'functools.partial(model._compute_logits_from_slice, params=..., encoded_inputs=..., '
        'raw_inputs=...) (t5x/models.py EncoderDecoderModel.predict_batch_with_aux), so pass '
        'target_module=, target_params= and encoder_input_tokens=.')
  owner = getattr(tokens_to_logits.func, '__self__', None)
  module = getattr(owner, 'module', None)
  if module is None:
    raise ValueError('tokens_to_logits is not a bound method of a model with a `module`; '
                     'pass target_module=, target_params= and encoder_input_tokens=.')
  rows = slice(None, None, num_decodes)  # T5X expanded them per decode; keep one each
  return _Target(as_t5_module(module), kw['params'], jnp.asarray(kw['encoded_inputs'])[rows],
                 jnp.asarray(kw['raw_inputs'], jnp.int32)[rows], owner)


@functools.lru_cache(maxsize=8)
def _load_draft(path: str, config: T5Config, dtype_name: Optional[str]):
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  # On the device once: numpy params would be copied to it on every decode call.
  return jax.device_put(checkpoints.load_t5x_checkpoint(path, config=config, dtype=dtype_name))


def split_draft_params(params):
  """`(target params, draft params or None)` from a params tree that may hold `draft`."""
  if isinstance(params, Mapping) and DRAFT_KEY in params:
    return {k: v for k, v in params.items() if k != DRAFT_KEY}, params[DRAFT_KEY]
  return params, None


def speculative_sample(inputs, cache, tokens_to_logits: Optional[Callable], eos_id: int,
                       decode_rng=None, num_decodes: int = 1, temperature=1.0,
                       topk: int = 1, topp=0.0, cache_offset: int = 0, initial_index=None,
                       max_decode_steps: Optional[int] = None,
                       max_decode_steps_hard_limit: Optional[int] = None,
                       rescale_log_probs: bool = True, state_callback_fn=None,
                       logit_callback_fn=None, *, draft_module=None, draft_params=None,
                       gamma: int = 4, real_vocab_size: Optional[int] = None,
                       draft_params_dtype=None, return_stats: bool = False,
                       target_module=None, target_params=None, encoder_input_tokens=None,
                       draft_policy=None, verification: str = 'token', drafter='model',
                       ngram_table=None, lenience: float = 1.0):
  """Exact speculative sampling (Leviathan et al. 2023) as a T5X `decode_fn`.

  Same arguments and outputs as `temperature_sample` (T5X's signature and prompt
  layout); the output is distributed exactly as the target's standardized
  distribution (greedy when `temperature` ≤ 1e-4 or `topk` = 1: token for token the
  target's greedy decode). `cache` is not used: T5X's cache takes one token per call
  and cannot be rolled back, so k-token caches of `cache_length(max_decode_len, γ)`
  positions are built here for the target and the draft. `initial_index` is allowed
  (the prompt is re-fed as forced tokens, giving the same output).

  Keyword-only (bind with gin / `functools.partial`):
    draft_module: the draft, a `specdec_jax.models.t5.Transformer` (default: the
      `draft_module` of the model `tokens_to_logits` belongs to, if it has one).
    draft_params: the draft's params tree or a T5X checkpoint path (loaded once per
      path); default `params['draft']` from `tokens_to_logits`, then the owning
      model's `draft_params`.
    gamma: γ ≥ 1, draft tokens per round (static).
    real_vocab_size: ids at or beyond it get draft probability 0 (padded embeddings).
    draft_params_dtype: dtype a draft checkpoint is cast to when loaded.
    return_stats: also return `decoding.SpeculativeStats` (a third output; T5X's
      `predict_batch_with_aux` expects two).
    target_module, target_params, encoder_input_tokens: the target and its encoder
      inputs `[batch, enc_len]`, for callers whose `tokens_to_logits` is not T5X's
      `functools.partial` of `_compute_logits_from_slice`.
    draft_policy: draft length per round (`specdec_jax.decoding.policies.DraftPolicy`, a
      policy name, or None = γ every round); γ is then the most per round.
    verification: 'token' (Algorithm 1) or 'block' (block verification, Sun et al. ICLR
      2025; exact, at least as many tokens per target call); see
      `specdec_jax.decoding.speculative.speculative_sample`.
    drafter: 'model' (default), 'lookup' (n-gram lookup in the encoder input and the text
      so far), 'lookup+model', 'bigram' / 'unigram' (with `ngram_table`), or a
      `specdec_jax.decoding.drafters` object; 'lookup' and the tables need no draft
      module or params (`generate.common.resolve_drafter`).
    ngram_table: a table file path or `(ids, log_probs)` for 'bigram' / 'unigram'
      (`specdec_jax.drafters.tables`).
    lenience: l in (0, 1] (paper Appendix A.5); 1 is exact, l < 1 is NOT exact.
  Returns:
    `(decodes [batch, num_decodes, max_decode_len], log_probs [batch, num_decodes])`,
    plus `stats` with `return_stats`.
  Raises:
    ValueError (before compiling): no target or draft found, `cache_offset` ≠ 0
      (scanned layers), callbacks given, γ < 1, and `temperature_sample`'s checks.
  """
  del cache  # one-token T5X cache; k-token caches are built below
  del initial_index  # a prefilled prompt is forced again from `inputs`: same output
  _check_callbacks(state_callback_fn, logit_callback_fn)
  inputs = _check_inputs(inputs, num_decodes)
  if cache_offset != 0:
    raise ValueError(f'cache_offset={cache_offset}: scanned layers are not supported; use '
                     'a network without scan_layers (T5X t5x/examples/t5).')
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  draft_policy = policies.as_policy(draft_policy)
  accept.check_verification(verification)
  lenience = accept.check_lenience(lenience, verification)
  spec = generate.resolve_drafter(drafter)
  uses_model = generate.needs_draft_model(spec)
  batch, max_decode_len = inputs.shape
  max_decode_steps = _max_steps(max_decode_steps, max_decode_steps_hard_limit, max_decode_len)
  target = _target(tokens_to_logits, num_decodes, target_module, target_params,
                   encoder_input_tokens)
  tparams, dparams = split_draft_params(target.params)
  if not uses_model:
    return _model_free(inputs, target, tparams, spec, eos_id, gamma, decode_rng, num_decodes,
                       temperature, topk, topp, max_decode_steps, real_vocab_size,
                       rescale_log_probs, draft_policy, verification, ngram_table, lenience,
                       return_stats)
  if draft_module is None:
    draft_module = getattr(target.owner, 'draft_module', None)
  if draft_module is None:
    raise ValueError('speculative_sample needs draft_module= (bind it with gin: '
                     'decode_fn = @t5x_decoding.speculative_sample, '
                     't5x_decoding.speculative_sample.draft_module = %DRAFT_MODULE).')
  draft_module = as_t5_module(draft_module)
  if draft_params is not None:
    dparams = draft_params
  elif dparams is None and hasattr(target.owner, 'split_params'):
    # Our model class: its constructor's draft (refused inside a trace: a constant).
    _, dparams = target.owner.split_params(tparams)
  if dparams is None:
    raise ValueError('speculative_sample needs draft_params= (a params tree or a T5X '
                     'checkpoint path, e.g. %DRAFT_CHECKPOINT).')
  if isinstance(dparams, (str, os.PathLike)):
    dtype = None if draft_params_dtype is None else jnp.dtype(draft_params_dtype).name
    dparams = _load_draft(os.fspath(dparams), draft_module.config, dtype)
  if target.encoder_input_tokens.shape[0] != batch:
    raise ValueError(f'encoder inputs have {target.encoder_input_tokens.shape[0]} rows but '
                     f'inputs has {batch}.')

  length = generate.cache_length(max_decode_len, gamma)
  enc = target.encoder_input_tokens
  target_cache = _target_cache(target, tparams, length)
  draft_cache = t5.encode_and_init_cache(draft_module, dparams, enc, length)
  decodes, log_probs, stats = decoding.speculative_sample(
      t5x_prompt_to_ours(inputs), target_cache, t5.make_step_fn(target.module, tparams),
      draft_cache, t5.make_step_fn(draft_module, dparams), _eos(eos_id), gamma,
      vocab_size=target.module.config.vocab_size, decode_rng=decode_rng,
      num_decodes=num_decodes, temperature=temperature, topk=topk, topp=topp,
      max_decode_steps=max_decode_steps, real_vocab_size=real_vocab_size,
      rescale_log_probs=rescale_log_probs, draft_policy=draft_policy,
      verification=verification, drafter=None if spec is None else _with_model(
          spec, draft_module, dparams, draft_policy), lenience=lenience)
  if return_stats:
    return decodes, log_probs, stats
  return decodes, log_probs


def _target_cache(target, tparams, length: int):
  """The target's k-token cache of `length` positions for its encoder inputs (re-using
  T5X's encoder outputs when the caller's `tokens_to_logits` carried them)."""
  if target.encoded is None:
    return t5.encode_and_init_cache(target.module, tparams, target.encoder_input_tokens, length)
  return target.module.apply({'params': tparams}, target.encoded, target.encoder_input_tokens,
                             length, method=t5.Transformer.init_cache)


def _with_model(spec, draft_module, dparams, draft_policy):
  """A resolved 'lookup+model' spec with the draft's real step function."""
  return drafters_lib.LookupThenModel(spec.lookup, drafters_lib.ModelDrafter(
      t5.make_step_fn(draft_module, dparams), draft_policy if draft_policy.adaptive else None))


def _model_free(inputs, target, tparams, spec, eos_id, gamma, decode_rng, num_decodes,
                temperature, topk, topp, max_decode_steps, real_vocab_size, rescale_log_probs,
                draft_policy, verification, ngram_table, lenience, return_stats):
  """`speculative_sample` with a drafter that needs no draft model (lookup, tables)."""
  _, max_decode_len = inputs.shape
  enc = target.encoder_input_tokens
  target_cache = _target_cache(target, tparams, generate.cache_length(max_decode_len, gamma))
  if isinstance(spec, drafters_lib.NgramTableDrafter):
    if isinstance(ngram_table, (str, os.PathLike)):
      ids, log_probs, _ = tables.load(ngram_table, target.module.config.vocab_size)
      ngram_table = (ids, log_probs)
    state = generate_common.check_table(ngram_table, spec, target.module)
  else:
    state = enc
  decodes, log_probs, stats = decoding.speculative_sample(
      t5x_prompt_to_ours(inputs), target_cache, t5.make_step_fn(target.module, tparams),
      state, None, _eos(eos_id), gamma, vocab_size=target.module.config.vocab_size,
      decode_rng=decode_rng, num_decodes=num_decodes, temperature=temperature, topk=topk,
      topp=topp, max_decode_steps=max_decode_steps, real_vocab_size=real_vocab_size,
      rescale_log_probs=rescale_log_probs, draft_policy=draft_policy,
      verification=verification, drafter=spec, lenience=lenience)
  if return_stats:
    return decodes, log_probs, stats
  return decodes, log_probs
