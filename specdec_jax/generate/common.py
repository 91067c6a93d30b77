"""What the jitted entry points of every model family share: argument checks made before
compiling, the static flags of a sampling setting, and the drafter specs.

`generate.t5` and `generate.decoder_only` bind their family's model to the decoders; both
call these, so a setting means the same and is refused the same way for either family.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decoding
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.decoding import sampling


def cache_length(max_decode_len: int, gamma: int) -> int:
  """Decoder positions each cache of a speculative decode holds: max(max_decode_len, γ + 1).

  Every row's cache writes beyond `max_decode_len` are dropped (they are never read),
  but one verify call consumes γ + 1 tokens, so the cache must hold at least that many
  positions; with this length any valid (max_decode_len, γ) decodes.
  """
  return max(max_decode_len, gamma + 1)


def per_row_greedy(temperature) -> bool:
  """False when the (concrete) temperature is above the greedy threshold for every row."""
  if isinstance(temperature, jax.core.Tracer):
    return True
  return not bool(np.all(np.asarray(temperature, np.float64) > decoding.MIN_TEMPERATURE))


def static_temperature(temperature):
  """Greedy as a static Python 0.0 (skips sampling code, like T5X's lax.cond branch)."""
  if isinstance(temperature, (int, float)) and temperature <= decoding.MIN_TEMPERATURE:
    return 0.0
  return None


_BF16_WARNED = []


def warn_bf16_on_cpu(**trees) -> None:
  """Warns once per process (RuntimeWarning) when bfloat16 params are decoded on a CPU.

  XLA:CPU has no fast bfloat16 matmuls: the T5 demo pair stored in bfloat16 decoded 2.5×
  slower as stored than cast to float32 once at load (86.6 vs 216.8 tok/s, issue #43).
  For a float32 model the cast changes no output (bfloat16 → float32 is exact).
  """
  if _BF16_WARNED or jax.default_backend() != 'cpu':
    return
  for name, tree in trees.items():
    if any(getattr(x, 'dtype', None) == jnp.bfloat16 for x in jax.tree_util.tree_leaves(tree)):
      _BF16_WARNED.append(name)
      warnings.warn(f'{name} holds bfloat16 arrays and this decode runs on the CPU, where '
                    'bfloat16 matmuls are slow (the demo pair: 2.5x slower than float32). '
                    'Cast them once: load_t5x_checkpoint(..., dtype=jnp.float32), or '
                    "decode.checkpoint_dtype='float32' in the decode job.", RuntimeWarning,
                    stacklevel=3)
      return


def warn_host_params(**trees) -> None:
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


def check_topk(topk, model) -> int:
  """topk as a Python int in [0, vocab_size]; ValueError naming it otherwise."""
  topk = sampling.check_int('topk (0 = off)', topk, 0)
  if topk > model.config.vocab_size:
    raise ValueError(f'topk={topk} exceeds the vocabulary size {model.config.vocab_size}; '
                     'use a smaller topk (0 = off).')
  return topk


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


def check_token_ids(tokens, name: str, vocab_size: int, model_name: str = 'the model') -> None:
  """Raises ValueError unless every id of `tokens` lies in [0, vocab_size) (concrete only).

  An id outside the embedding table would be clipped by the gather (JAX's default for
  out-of-bounds indices) and decode silently as another token. Tracers (a caller's jit, as
  in T5X's predict step) and arrays spread over several processes are not checked.

  Args:
    tokens: int array of any shape, or None (nothing to check).
    name: the argument's name, for the message.
    vocab_size: the embedding rows of the model that reads `tokens`.
  """
  if tokens is None or isinstance(tokens, jax.core.Tracer) or (
      isinstance(tokens, jax.Array) and not tokens.is_fully_addressable):
    return
  arr = np.asarray(tokens)
  if not arr.size:
    return
  if not np.issubdtype(arr.dtype, np.integer):
    raise ValueError(f'{name} must hold integer token ids, got dtype {arr.dtype}.')
  low, high = int(arr.min()), int(arr.max())
  if low < 0 or high >= vocab_size:
    raise ValueError(f'{name} holds token ids in [{low}, {high}] but {model_name}\'s vocabulary '
                     f'is [0, {vocab_size}): tokenize with the model\'s vocabulary (0 is '
                     'padding).')


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
      drafter without lookup, a model whose vocabulary is smaller than real_vocab_size, a
      draft with fewer vocabulary rows than the target when real_vocab_size is not given.
  """
  uses_model = spec is None or isinstance(spec, drafters_lib.LookupThenModel)
  if uses_model and (draft_model is None or draft_params is None):
    raise ValueError(f"drafter={drafter_name(spec)!r} needs draft_model and draft_params; "
                     "pass them, or use drafter='lookup' / 'bigram' without a draft model.")
  if isinstance(spec, drafters_lib.NgramTableDrafter):
    ngram_table = check_table(ngram_table, spec, target_model)
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
  if (real_vocab_size is None and draft_model is not None
      and draft_model.config.vocab_size < target_model.config.vocab_size):
    raise ValueError(
        f'draft_model has vocab_size {draft_model.config.vocab_size} < target_model\'s '
        f'{target_model.config.vocab_size}: target ids beyond the draft\'s table would embed as '
        'garbage. Pass real_vocab_size (the ids both models share, e.g. the SentencePiece '
        'pieces + extra ids) if the target\'s extra rows are padding, or use a draft with the '
        'target\'s vocabulary.')
  if real_vocab_size is not None:
    for name, m in (('target_model', target_model), ('draft_model', draft_model)):
      if m is not None and m.config.vocab_size < real_vocab_size:
        raise ValueError(
            f'{name} has vocab_size {m.config.vocab_size} < real_vocab_size '
            f'{real_vocab_size}: the two models do not share the same token ids; use a '
            'draft trained with the target\'s vocabulary.')
  return uses_model, ngram_table, lookup_source


def check_table(table, spec, target_model):
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
