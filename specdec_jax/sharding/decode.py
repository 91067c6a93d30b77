"""Sharded runs of the jitted decoders (`generate.t5_generate` / `t5_speculative_generate`
and `generate.decoder_only_generate` / `decoder_only_speculative_generate` with
`sharding_plan=`): place, pad, call the one compiled program, gather.

The whole decode is still one `jax.jit` with one `lax.while_loop` (no host round-trip
per round); GSPMD partitions it from the input shardings and the cache constraints
(`ShardingPlan.constrain_cache`). Sampling is identical to the single-device run for
the same key, whatever the mesh: the speculative loop gets the very per-row keys the
single-device loop derives (`batch.row_keys`), and the baseline's one batch key
draws the same bits for the real rows of a padded batch (JAX's partitionable
threefry, `jax_threefry_partitionable`, the default since JAX 0.5, computes each
element's bits from its own index).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from specdec_jax.decoding import loop_common
from specdec_jax.sharding import batch as batch_lib
from specdec_jax.sharding.plan import ShardingPlan


def shard_params(plan: ShardingPlan, config, params, role: str = 'target'):
  """`params` (host or device arrays) placed with `plan.param_shardings(config, role)`."""
  return batch_lib.place(params, plan.param_shardings(config, role))


def _batch_inputs(plan: ShardingPlan, arrays, temperature):
  """Pads `[batch, ...]` host arrays (and a `[batch]` temperature) to the data axis and
  places them split over it. Returns (placed arrays, placed temperature, batch)."""
  batch = np.shape(arrays[0])[0]
  rows = batch_lib.padded_batch(batch, plan.data_size)
  placed = [batch_lib.global_array(batch_lib.pad_rows(a, rows), plan.batch_sharding(np.ndim(a)))
            for a in arrays]
  temperature = batch_lib.temperatures(temperature, batch)
  if np.ndim(temperature):
    temperature = batch_lib.global_array(batch_lib.pad_rows(temperature, rows),
                                         plan.batch_sharding(1))
  else:
    temperature = jnp.asarray(temperature, jnp.float32)
  return placed, temperature, batch


def generate(jitted, plan: ShardingPlan, model, params, encoder_input_tokens, prompt,
             decode_rng, temperature, static: dict):
  """`generate.t5._generate` on `plan`'s mesh; host `(decodes, log_probs)` of the real rows."""
  params = shard_params(plan, model.config, params, 'target')
  arrays = [np.asarray(encoder_input_tokens, np.int32), np.asarray(prompt)]
  per_row = loop_common.is_per_row_keys(decode_rng)
  if per_row:  # padded and split like the rows they belong to
    arrays.append(batch_lib.row_keys(decode_rng, np.shape(encoder_input_tokens)[0]))
  placed, temperature, batch = _batch_inputs(plan, arrays, temperature)
  tokens, prompt = placed[:2]
  keys = placed[2] if per_row else jnp.asarray(decode_rng)
  out = jitted(model, params, tokens, prompt, keys, temperature, sharding_plan=plan, **static)
  return batch_lib.gather(out, batch)


def speculative_generate(jitted, plan: ShardingPlan, target_model, target_params, draft_model,
                         draft_params, encoder_input_tokens, draft_encoder_input_tokens,
                         prompt, decode_rng, temperature, static: dict, traced=None):
  """`generate.t5._speculative_generate` on `plan`'s mesh; host `(decodes, log_probs, stats)`."""
  target_params = shard_params(plan, target_model.config, target_params, 'target')
  if draft_model is not None:  # model-free drafters carry no draft model
    draft_params = shard_params(plan, draft_model.config, draft_params, 'draft')
  batch = np.shape(encoder_input_tokens)[0]
  keys = batch_lib.row_keys(decode_rng, batch)
  (tokens, draft_tokens, prompt, keys), temperature, batch = _batch_inputs(
      plan, [np.asarray(encoder_input_tokens, np.int32),
             np.asarray(draft_encoder_input_tokens, np.int32), np.asarray(prompt), keys],
      temperature)
  out = jitted(target_model, target_params, draft_model, draft_params, tokens, draft_tokens,
               prompt, keys, temperature, sharding_plan=plan, **static, **(traced or {}))
  return batch_lib.gather(out, batch)


def decoder_only_generate(jitted, plan: ShardingPlan, model, params, prompts, decode_rng,
                          temperature, static: dict):
  """`generate.decoder_only._generate` on `plan`'s mesh: the prompts (and per-row keys)
  padded to the data axis and split over it, so each data shard prefills and decodes
  its own rows; host `(decodes, log_probs)` of the real rows."""
  params = shard_params(plan, model.config, params, 'target')
  arrays = [np.asarray(prompts, np.int32)]
  per_row = loop_common.is_per_row_keys(decode_rng)
  if per_row:  # padded and split like the rows they belong to
    arrays.append(batch_lib.row_keys(decode_rng, np.shape(prompts)[0]))
  placed, temperature, batch = _batch_inputs(plan, arrays, temperature)
  keys = placed[1] if per_row else jnp.asarray(decode_rng)
  out = jitted(model, params, placed[0], keys, temperature, sharding_plan=plan, **static)
  return batch_lib.gather(out, batch)


def decoder_only_speculative_generate(jitted, plan: ShardingPlan, target_model, target_params,
                                      draft_model, draft_params, prompts, decode_rng,
                                      temperature, static: dict, traced=None):
  """`generate.decoder_only._speculative_generate` on `plan`'s mesh (prompts and the
  per-row keys padded and split over `data`); host `(decodes, log_probs, stats)`."""
  target_params = shard_params(plan, target_model.config, target_params, 'target')
  if draft_model is not None:  # model-free drafters carry no draft model
    draft_params = shard_params(plan, draft_model.config, draft_params, 'draft')
  batch = np.shape(prompts)[0]
  keys = batch_lib.row_keys(decode_rng, batch)
  (prompts, keys), temperature, batch = _batch_inputs(
      plan, [np.asarray(prompts, np.int32), keys], temperature)
  out = jitted(target_model, target_params, draft_model, draft_params, prompts, keys,
               temperature, sharding_plan=plan, **static, **(traced or {}))
  return batch_lib.gather(out, batch)
