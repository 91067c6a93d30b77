"""Jitted entry points that run the decoders on our T5 for a batch of encoder inputs.

`t5_generate` is the stock-T5X baseline (encode once, then `temperature_sample`);
`t5_speculative_generate` encodes with both models and runs `speculative_sample`.
Each is one `jax.jit` whose compilation is cached per (models, shapes, γ, static
sampling flags); params, tokens, keys and temperature are traced arguments, so
changing them does not recompile.
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
from specdec_jax.generate import xla_options
from specdec_jax.generate.common import (cache_length, check_drafter_args,  # noqa: F401
                                         check_table, check_token_ids, check_topk,
                                         drafter_name,
                                         loop_drafter_and_state, needs_draft_model,
                                         per_row_greedy, resolve_drafter, static_temperature,
                                         warn_bf16_on_cpu,
                                         warn_host_params)
from specdec_jax.models import t5


def _check_tokens(encoder_input_tokens, max_decode_len):
  if not isinstance(max_decode_len, int) or max_decode_len < 1:
    raise ValueError(f'max_decode_len must be an int >= 1, got {max_decode_len!r}.')
  if jnp.ndim(encoder_input_tokens) != 2 or 0 in jnp.shape(encoder_input_tokens):
    raise ValueError('encoder_input_tokens must be [batch, enc_len] int with batch >= 1 and '
                     f'enc_len >= 1, got shape {jnp.shape(encoder_input_tokens)}.')


@xla_options.jit(static_argnames=(
    'model', 'max_decode_len', 'eos_id', 'num_decodes', 'topk', 'topp', 'static_temperature',
    'max_decode_steps', 'rescale_log_probs', 'prompt_free', 'per_row_greedy', 'sharding_plan',
    'sampler', 'suppress_ids'))
def _generate(model, params, encoder_input_tokens, decoder_prompt, decode_rng, temperature,
              *, topp, max_decode_len, eos_id, num_decodes, topk, static_temperature,
              max_decode_steps, rescale_log_probs, prompt_free=False, per_row_greedy=True,
              sharding_plan=None, sampler='gumbel', suppress_ids=()):
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
      per_row_greedy=per_row_greedy, sampler=sampler, suppress_ids=suppress_ids)


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


def t5_generate(model: t5.Transformer, params, encoder_input_tokens, max_decode_len: int,
                *, eos_id: int = 1, temperature=0.0, topk: int = 0, topp: float = 0.0,
                num_decodes: int = 1, decode_rng=None, decoder_prompt=None,
                max_decode_steps: Optional[int] = None, rescale_log_probs: bool = True,
                sharding_plan=None, sampler: str = 'gumbel', suppress_ids=()):
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
  check_token_ids(encoder_input_tokens, 'encoder_input_tokens', model.config.vocab_size)
  check_token_ids(decoder_prompt, 'decoder_prompt', model.config.vocab_size)
  topk = check_topk(topk, model)
  decoding._check_common(_prompt(encoder_input_tokens, max_decode_len, decoder_prompt),
                         eos_id, num_decodes, temperature, topk, topp, max_decode_steps)
  sampling.check_sampler(sampler)
  suppress_ids = sampling.check_suppress_ids(suppress_ids, model.config.vocab_size, eos_id)
  if decode_rng is None:
    decode_rng = jax.random.PRNGKey(0)
  static = dict(topp=float(topp), max_decode_len=max_decode_len, eos_id=eos_id, sampler=sampler,
                suppress_ids=suppress_ids,
                num_decodes=num_decodes, topk=topk,
                static_temperature=static_temperature(temperature),
                max_decode_steps=max_decode_steps, rescale_log_probs=rescale_log_probs,
                prompt_free=decoder_prompt is None, per_row_greedy=per_row_greedy(temperature))
  prompt = _prompt(encoder_input_tokens, max_decode_len, decoder_prompt)
  warn_host_params(params=params)
  warn_bf16_on_cpu(params=params)
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
    'verification', 'drafter', 'lenience', 'suppress_ids'))
def _speculative_generate(target_model, target_params, draft_model, draft_params,
                          encoder_input_tokens, draft_encoder_input_tokens, decoder_prompt,
                          decode_rng, temperature, *, topp, max_decode_len, gamma, eos_id,
                          num_decodes, topk, static_temperature, max_decode_steps,
                          real_vocab_size, rescale_log_probs, prompt_free=False,
                          per_row_greedy=True, draft_policy=None, sharding_plan=None,
                          verification='token', drafter=None, lenience=1.0,
                          lookup_source=None, ngram_table=None, suppress_ids=()):
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
      verification=verification, drafter=loop_drafter, lenience=lenience,
      suppress_ids=suppress_ids)


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
                            lenience: float = 1.0, suppress_ids=()):
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
    suppress_ids: token ids the models may not emit (e.g. sentinels, the unknown piece):
      their logits are set to NEG_INF before standardization in the target and the
      draft model alike; default none, as T5X.
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
  check_token_ids(encoder_input_tokens, 'encoder_input_tokens', target_model.config.vocab_size,
                  'the target')
  check_token_ids(decoder_prompt, 'decoder_prompt', target_model.config.vocab_size, 'the target')
  if draft_model is not None:
    check_token_ids(draft_encoder_input_tokens, 'draft_encoder_input_tokens',
                    draft_model.config.vocab_size, 'the draft')
  topk = check_topk(topk, target_model)
  prompt = _prompt(encoder_input_tokens, max_decode_len, decoder_prompt)
  decoding._check_common(prompt, eos_id, num_decodes, temperature, topk, topp,
                         max_decode_steps)
  gamma = sampling.check_int('gamma (γ, draft tokens per round)', gamma, 1)
  accept.check_verification(verification)
  lenience = accept.check_lenience(lenience, verification)
  suppress_ids = sampling.check_suppress_ids(suppress_ids, target_model.config.vocab_size,
                                            eos_id)
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
                static_temperature=static_temperature(temperature),
                max_decode_steps=max_decode_steps, real_vocab_size=real_vocab_size,
                rescale_log_probs=rescale_log_probs, prompt_free=decoder_prompt is None,
                per_row_greedy=per_row_greedy(temperature),
                draft_policy=policies.as_policy(draft_policy), verification=verification,
                drafter=spec, lenience=lenience, suppress_ids=suppress_ids)
  if not uses_model:
    draft_model = draft_params = None
  warn_host_params(target_params=target_params, draft_params=draft_params)
  warn_bf16_on_cpu(target_params=target_params, draft_params=draft_params)
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
