"""Jitted entry points that run the decoders on a decoder-only model for a batch of prompts.

`decoder_only_generate` is the baseline (T5X's `DecoderOnlyModel.predict_batch_with_aux`
with `temperature_sample`: prefill the prompt in one pass, decode from `initial_index`,
remove the prefix); `decoder_only_speculative_generate` prefills target and draft with
the same prompt and runs `speculative_sample` from the same index. Each is one `jax.jit`
whose compilation is cached per (models, shapes, γ, static flags), as in `generate.t5`;
on one device, or with `sharding_plan=` on a `(data, model)` mesh as the T5 decoders
(`specdec_jax.sharding.decode`: prompts and per-row keys split over `data`, params and
cache heads over `model`; the same outputs as on one device).

Prompts are int32 `[batch, P]`, right-padded with 0 (a row may be empty: unconditional
generation). Internally a row is laid out as T5X lays out its decode inputs,
`[BOS=0, x_1 … x_m, 0 …]` of length P + 1 + max_decode_len, so the loops' sequences,
`initial_index = m` and the returned tokens are T5X's; the outputs are the generated
tokens only (T5X's `remove_prefix`).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decoding
from specdec_jax.decoding import accept
from specdec_jax.decoding import drafters as drafters_lib
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.generate import common
from specdec_jax.generate import xla_options
from specdec_jax.models import decoder_only


def check_prompts(prompts, max_decode_len, max_length=None) -> np.ndarray:
  """`prompts` as host int32 `[batch, P]`, checked before anything compiles (traced
  prompts, inside a caller's jit, are returned as they are after the shape checks).

  Raises:
    ValueError: naming the argument: not 2-D, negative ids, a 0 inside a prompt (0 is
      padding and must only follow the prompt), a bad `max_decode_len`, or a
      `max_length` not above the prompts' width.
  """
  if not isinstance(max_decode_len, int) or max_decode_len < 1:
    raise ValueError(f'max_decode_len (tokens generated after the prompt) must be an int '
                     f'>= 1, got {max_decode_len!r}.')
  if jnp.ndim(prompts) != 2 or 0 in jnp.shape(prompts):
    raise ValueError(f'prompts must be [batch, P] int (right-padded with 0) with batch >= 1 '
                     f'and P >= 1, got shape {jnp.shape(prompts)}.')
  if max_length is not None and (not isinstance(max_length, int)
                                 or max_length <= jnp.shape(prompts)[1]):
    raise ValueError(f'max_length must be an int above the prompts\' width '
                     f'{jnp.shape(prompts)[1]} (T5X: the feature length, BOS included), got '
                     f'{max_length!r}.')
  if isinstance(prompts, jax.core.Tracer):  # inside a caller's jit (T5X's predict step)
    return prompts
  arr = np.asarray(prompts)
  if arr.size and arr.min() < 0:
    raise ValueError('prompts hold negative token ids; ids are in [0, vocab_size).')
  nonzero = arr != 0
  # A 0 followed by a non-zero id in the same row: padding inside the prompt.
  if arr.shape[1] > 1 and np.any(~nonzero[:, :-1] & nonzero[:, 1:]):
    raise ValueError('prompts have a 0 inside a prompt; 0 is padding: right-pad each '
                     'prompt with 0s and use no 0 id inside it.')
  return arr.astype(np.int32)


def _check_host_prompts(prompts) -> None:
  """ValueError for traced prompts with a `sharding_plan` (the sharded run pads and
  places host arrays; inside a caller's jit, shard the inputs there instead)."""
  if isinstance(prompts, jax.core.Tracer):
    raise ValueError('sharding_plan needs host prompts (a numpy / jax array, not traced '
                     'inside a jit); inside your own jit, pass no sharding_plan and give '
                     'the jit in_shardings instead.')


def layout(prompts, max_decode_len: int, max_length: Optional[int] = None):
  """T5X's decode layout of right-padded prompts.

  Args:
    prompts: int32 `[batch, P]` (0 = padding after each prompt).
    max_decode_len: tokens generated after each prompt (static).
    max_length: optional T5X length (static): the loops' sequences hold `max_length`
      positions (prompt and generated tokens together), instead of P + max_decode_len.
  Returns:
    `(prefill_inputs [batch, P + 1], loop_inputs [batch, W])`, W = max_length or
    P + max_decode_len: the prefill region `[0, x_1 … x_m, 0 …]` (T5X's
    `decoder_input_tokens * decoder_causal_attention`), and the loops' forced-prompt
    array (our convention: no leading BOS; the loops prepend it).
  """
  prompts = jnp.asarray(prompts, jnp.int32)
  batch, p_len = prompts.shape
  prefill_inputs = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), prompts], axis=1)
  width = p_len + max_decode_len if max_length is None else max_length
  loop_inputs = jnp.concatenate(
      [prompts, jnp.zeros((batch, width - p_len), jnp.int32)], axis=1)
  return prefill_inputs, loop_inputs


def remove_prefix(decodes, prefix_lengths, length: int):
  """T5X's `remove_prefix`: `decodes [batch, nd, L]` shifted left by each row's prefix
  length, cut to `length` (static) → `[batch, nd, length]`."""
  idx = prefix_lengths[:, None, None] + jnp.arange(length)[None, None, :]
  idx = jnp.broadcast_to(idx, decodes.shape[:2] + (length,))
  out = jnp.take_along_axis(decodes, jnp.minimum(idx, decodes.shape[-1] - 1), axis=-1)
  return jnp.where(idx < decodes.shape[-1], out, 0)  # shifted-in positions are 0


@xla_options.jit(static_argnames=(
    'model', 'max_decode_len', 'eos_id', 'num_decodes', 'topk', 'topp', 'static_temperature',
    'rescale_log_probs', 'per_row_greedy', 'sampler', 'inputs_bidirectional_attention',
    'max_length', 'suppress_ids', 'sharding_plan'))
def _generate(model, params, prompts, decode_rng, temperature, *, topp, max_decode_len,
              eos_id, num_decodes, topk, static_temperature, rescale_log_probs,
              per_row_greedy=True, sampler='gumbel', inputs_bidirectional_attention=False,
              max_length=None, suppress_ids=(), sharding_plan=None):
  prefill_inputs, loop_inputs = layout(prompts, max_decode_len, max_length)
  total = loop_inputs.shape[1]
  cache, m = decoder_only.prefill_cache(
      model, params, prefill_inputs, total,
      inputs_bidirectional_attention=inputs_bidirectional_attention)
  if sharding_plan is not None:
    cache = sharding_plan.constrain_cache(cache)
  decodes, log_probs = decoding.temperature_sample(
      loop_inputs, cache,
      decoding.tokens_to_logits_from_step_fn(decoder_only.make_step_fn(model, params)),
      eos_id, decode_rng=decode_rng, num_decodes=num_decodes,
      temperature=static_temperature if static_temperature is not None else temperature,
      topk=topk, topp=topp, initial_index=m, max_decode_steps=max_decode_len,
      rescale_log_probs=rescale_log_probs, prompt_free=True, per_row_greedy=per_row_greedy,
      sampler=sampler, suppress_ids=suppress_ids)
  return remove_prefix(decodes, m, max_length or max_decode_len), log_probs


def decoder_only_generate(model: decoder_only.DecoderOnlyTransformer, params, prompts,
                          max_decode_len: int, *, eos_id: int = 1, temperature=0.0,
                          topk: int = 0, topp: float = 0.0, num_decodes: int = 1,
                          decode_rng=None, rescale_log_probs: bool = True,
                          inputs_bidirectional_attention: bool = False,
                          sampler: str = 'gumbel', max_length: Optional[int] = None,
                          suppress_ids=(), sharding_plan=None):
  """Baseline decoding of a decoder-only model: prefill, then one call per token.

  T5X's `DecoderOnlyModel.predict_batch_with_aux` with `decoding.temperature_sample`:
  the same tokens at T = 0, and with the 'gumbel' sampler the same samples for the
  same `decode_rng`.

  Args:
    model, params: the `DecoderOnlyTransformer` and its params (device arrays).
    prompts: int32 `[batch, P]`, right-padded with 0 (`check_prompts`).
    max_decode_len: tokens generated after each prompt (static; T5X's
      `max_decode_steps`, counted after the prompt).
    inputs_bidirectional_attention: prefix-LM prefill (T5X's
      `DecoderOnlyModel(inputs_bidirectional_attention=True)`).
    max_length: optional, T5X's layout (static): a row's prompt and generated tokens
      share `max_length` positions (T5X's `max_decode_length`, the feature length), so a
      row with m prompt tokens generates at most min(max_length − m, max_decode_len)
      tokens, and the decodes have `max_length` positions; it must exceed P.
    sharding_plan: optional `specdec_jax.sharding.ShardingPlan`: decode on its mesh, as
      `t5_generate` does (params placed from their T5X logical axes, the prompts padded
      to the data axis and split over it, prefill and caches per data shard, cache heads
      over `model`); the outputs are then host numpy arrays of the real rows, the same
      as on one device (`specdec_jax.sharding.decode`).
    Other arguments as `decoding.temperature_sample` (topk defaults to 0 here).
  Returns:
    `(decodes [batch, num_decodes, max_decode_len or max_length] int32 (generated
    tokens only, 0 after EOS), log_probs [batch, num_decodes] float32)`, sorted by
    log-prob ascending.
  Raises:
    ValueError: before compiling, for bad prompts or sampling arguments.
  """
  prompts = check_prompts(prompts, max_decode_len, max_length)
  common.check_token_ids(prompts, 'prompts', model.config.vocab_size)
  topk = common.check_topk(topk, model)
  decoding._check_common(jnp.zeros((1, 1), jnp.int32), eos_id, num_decodes, temperature,
                         topk, topp, None)
  sampling.check_sampler(sampler)
  suppress_ids = sampling.check_suppress_ids(suppress_ids, model.config.vocab_size, eos_id)
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  common.warn_host_params(params=params)
  common.warn_bf16_on_cpu(params=params)
  static = dict(topp=float(topp), max_decode_len=max_decode_len, eos_id=eos_id,
                num_decodes=num_decodes, topk=topk,
                static_temperature=common.static_temperature(temperature),
                rescale_log_probs=rescale_log_probs,
                per_row_greedy=common.per_row_greedy(temperature), sampler=sampler,
                inputs_bidirectional_attention=bool(inputs_bidirectional_attention),
                max_length=max_length, suppress_ids=suppress_ids)
  if sharding_plan is not None:
    _check_host_prompts(prompts)
    from specdec_jax.sharding import decode as sharded  # pylint: disable=g-import-not-at-top
    return sharded.decoder_only_generate(_generate, sharding_plan, model, params, prompts,
                                         decode_rng, temperature, static)
  return _generate(model, params, jnp.asarray(prompts), decode_rng,
                   jnp.asarray(temperature, jnp.float32), **static)


@xla_options.jit(static_argnames=(
    'target_model', 'draft_model', 'max_decode_len', 'gamma', 'eos_id', 'num_decodes',
    'topk', 'topp', 'static_temperature', 'real_vocab_size', 'rescale_log_probs',
    'per_row_greedy', 'draft_policy', 'verification', 'drafter', 'lenience',
    'inputs_bidirectional_attention', 'max_length', 'suppress_ids', 'sharding_plan'))
def _speculative_generate(target_model, target_params, draft_model, draft_params, prompts,
                          decode_rng, temperature, *, topp, max_decode_len, gamma, eos_id,
                          num_decodes, topk, static_temperature, real_vocab_size,
                          rescale_log_probs, per_row_greedy=True, draft_policy=None,
                          verification='token', drafter=None, lenience=1.0,
                          inputs_bidirectional_attention=False, max_length=None,
                          lookup_source=None, ngram_table=None, suppress_ids=(),
                          sharding_plan=None):
  prefill_inputs, loop_inputs = layout(prompts, max_decode_len, max_length)
  length = common.cache_length(loop_inputs.shape[1], gamma)
  target_cache, m = decoder_only.prefill_cache(
      target_model, target_params, prefill_inputs, length,
      inputs_bidirectional_attention=inputs_bidirectional_attention)
  if sharding_plan is not None:
    target_cache = sharding_plan.constrain_cache(target_cache, 'target')
  draft_cache = draft_step = None
  if drafter is None or isinstance(drafter, drafters_lib.LookupThenModel):
    draft_cache, _ = decoder_only.prefill_cache(
        draft_model, draft_params, prefill_inputs, length,
        inputs_bidirectional_attention=inputs_bidirectional_attention)
    if sharding_plan is not None:
      draft_cache = sharding_plan.constrain_cache(draft_cache, 'draft')
    draft_step = decoder_only.make_step_fn(draft_model, draft_params)
  # The lookup searches the committed text, which holds the prompt; a source of padding
  # adds nothing unless the caller gives one.
  source = (jnp.zeros((prompts.shape[0], 1), jnp.int32) if lookup_source is None
            else lookup_source)
  loop_drafter, state = common.loop_drafter_and_state(
      drafter, draft_step, draft_cache, source, ngram_table, draft_policy, initial_index=m)
  decodes, log_probs, stats = decoding.speculative_sample(
      loop_inputs, target_cache, decoder_only.make_step_fn(target_model, target_params),
      state, draft_step, eos_id, gamma, vocab_size=target_model.config.vocab_size,
      decode_rng=decode_rng, num_decodes=num_decodes,
      temperature=static_temperature if static_temperature is not None else temperature,
      topk=topk, topp=topp, max_decode_steps=max_decode_len,
      real_vocab_size=real_vocab_size, rescale_log_probs=rescale_log_probs,
      prompt_free=True, per_row_greedy=per_row_greedy, draft_policy=draft_policy,
      verification=verification, drafter=loop_drafter, lenience=lenience, initial_index=m,
      suppress_ids=suppress_ids)
  stats = stats.replace(tokens=stats.tokens - m[:, None])  # generated tokens only
  return remove_prefix(decodes, m, max_length or max_decode_len), log_probs, stats


def decoder_only_speculative_generate(
    target_model: decoder_only.DecoderOnlyTransformer, target_params,
    draft_model: Optional[decoder_only.DecoderOnlyTransformer], draft_params, prompts,
    max_decode_len: int, gamma: int, *, eos_id: int = 1, temperature=0.0, topk: int = 0,
    topp: float = 0.0, num_decodes: int = 1, decode_rng=None,
    real_vocab_size: Optional[int] = None, rescale_log_probs: bool = True,
    draft_policy=None, verification: str = 'token', drafter='model', ngram_table=None,
    lookup_source=None, lenience: float = 1.0,
    inputs_bidirectional_attention: bool = False, max_length: Optional[int] = None,
    suppress_ids=(), sharding_plan=None):
  """Speculative decoding of a decoder-only target (paper Algorithm 1), both models
  prefilled with the same prompt in one pass each.

  Exact like `t5_speculative_generate`: at T = 0 the tokens of `decoder_only_generate`,
  otherwise each output distributed as the target's standardized distribution.

  Args:
    target_model, target_params, draft_model, draft_params: two `DecoderOnlyTransformer`s
      sharing token ids (the draft may be None for a model-free `drafter`).
    prompts: int32 `[batch, P]`, right-padded with 0; per-row lengths may differ.
    max_decode_len: tokens generated after each prompt (static).
    gamma: γ, draft tokens per round (static).
    drafter: 'model', 'lookup' (n-gram lookup in the prompt and the text so far, plus
      `lookup_source` when given), 'lookup+model', 'bigram' / 'unigram' (`ngram_table`),
      or a `decoding.drafters` object (`generate.resolve_drafter`).
    inputs_bidirectional_attention: prefix-LM prefill for both models.
    max_length: optional T5X layout, as in `decoder_only_generate`.
    suppress_ids: token ids the models may not emit (e.g. sentinels, the unknown piece):
      their logits are set to NEG_INF before standardization in the target and the
      draft model alike (`decoding.speculative_sample`); default none, as T5X.
    sharding_plan: optional `specdec_jax.sharding.ShardingPlan`, as in
      `decoder_only_generate`; the draft is replicated or sharded like the target
      (`ShardingPlan.draft`). Every row keeps the key it has on one device, so outputs
      do not depend on the mesh. `lookup_source` is not supported with it.
    Other arguments as `t5_speculative_generate`.
  Returns:
    `(decodes [batch, num_decodes, max_decode_len] int32 (generated tokens only),
    log_probs [batch, num_decodes], decoding.SpeculativeStats)`; `stats.tokens` counts
    generated tokens (the prompt excluded).
  Raises:
    ValueError: before compiling, as `t5_speculative_generate`.
  """
  prompts = check_prompts(prompts, max_decode_len, max_length)
  common.check_token_ids(prompts, 'prompts', target_model.config.vocab_size, 'the target')
  topk = common.check_topk(topk, target_model)
  decoding._check_common(jnp.zeros((1, 1), jnp.int32), eos_id, num_decodes, temperature,
                         topk, topp, None)
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  accept.check_verification(verification)
  lenience = accept.check_lenience(lenience, verification)
  suppress_ids = sampling.check_suppress_ids(suppress_ids, target_model.config.vocab_size,
                                            eos_id)
  spec = common.resolve_drafter(drafter)
  uses_model, ngram_table, lookup_source = common.check_drafter_args(
      spec, target_model, draft_model, draft_params, ngram_table, lookup_source,
      prompts.shape[0], 'prompts', real_vocab_size)
  if lookup_source is not None and sharding_plan is not None:
    raise ValueError('lookup_source with a sharding_plan is not supported; the lookup '
                     'searches the prompt and the text so far by default.')
  if not uses_model:
    draft_model = draft_params = None
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  common.warn_host_params(target_params=target_params, draft_params=draft_params)
  common.warn_bf16_on_cpu(target_params=target_params, draft_params=draft_params)
  static = dict(
      topp=float(topp), max_decode_len=max_decode_len, gamma=gamma, eos_id=eos_id,
      num_decodes=num_decodes, topk=topk,
      static_temperature=common.static_temperature(temperature),
      real_vocab_size=real_vocab_size, rescale_log_probs=rescale_log_probs,
      per_row_greedy=common.per_row_greedy(temperature),
      draft_policy=policies.as_policy(draft_policy), verification=verification,
      drafter=spec, lenience=lenience,
      inputs_bidirectional_attention=bool(inputs_bidirectional_attention),
      max_length=max_length, suppress_ids=suppress_ids)
  traced = dict(lookup_source=lookup_source, ngram_table=ngram_table)
  if sharding_plan is not None:
    _check_host_prompts(prompts)
    from specdec_jax.sharding import decode as sharded  # pylint: disable=g-import-not-at-top
    return sharded.decoder_only_speculative_generate(
        _speculative_generate, sharding_plan, target_model, target_params, draft_model,
        draft_params, prompts, decode_rng, temperature, static, traced)
  return _speculative_generate(
      target_model, target_params, draft_model, draft_params, jnp.asarray(prompts),
      decode_rng, jnp.asarray(temperature, jnp.float32), **static, **traced)
