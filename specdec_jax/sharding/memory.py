"""Memory model of a sharded decode: params and KV caches per device (docs/scaling.md).

Params: each array's bytes divided by the mesh sizes of the axes its sharding splits
(`ShardingPlan.param_shardings`); under T5X's rules every matrix is split over `model`
(vocab, mlp, joined_kv) and replicated over `data`, so a target needs ≈ bytes / model
per device. KV caches (`models.cache.DecoderCache`), per model:

  self-attention  2 · layers · B · heads · S · head_dim · itemsize,  S = max(L, γ + 1)
  cross-attention 2 · layers · B · heads · E · head_dim · itemsize,  E = encoder length

with B = batch · num_decodes, split over `data` (B padded to a multiple of it) and
`heads` over `model` where it divides (the draft's too when sharded `like_target`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.sharding.batch import padded_batch


def per_device_bytes(tree) -> dict:
  """Bytes of `tree`'s `jax.Array`s: `{'total', 'max_per_device', 'per_device'}`.

  `per_device` is `{device id: bytes}` over this process's devices (each shard counted
  on the device that holds it; replicated arrays on every device).
  """
  per: dict[int, int] = {}
  total = 0
  for leaf in jax.tree.leaves(tree):
    total += int(np.prod(leaf.shape)) * leaf.dtype.itemsize
    for shard in leaf.addressable_shards:
      per[shard.device.id] = per.get(shard.device.id, 0) + shard.data.nbytes
  return {'total': total, 'max_per_device': max(per.values()) if per else 0,
          'per_device': per}


def param_bytes(plan, config, role: str = 'target', dtype=None) -> dict:
  """Predicted `{'total', 'per_device'}` param bytes of the config's model on `plan`
  (`t5.Transformer` or `DecoderOnlyTransformer`).

  `dtype`: the stored dtype (default the config's param dtype, float32).
  """
  from specdec_jax.sharding import plan as plan_lib  # pylint: disable=g-import-not-at-top
  shapes, _ = plan_lib.param_shapes_and_axes(config)
  itemsize = jnp.dtype(dtype or jnp.float32).itemsize
  total = per = 0
  for shape, sharding in zip(jax.tree.leaves(shapes),
                             jax.tree.leaves(plan.param_shardings(config, role))):
    n = math.prod(shape.shape) * itemsize
    total += n
    per += math.prod(sharding.shard_shape(shape.shape)) * itemsize
  return {'total': total, 'per_device': per}


def kv_cache_bytes(plan, config, *, batch: int, enc_len: int, max_decode_len: int,
                   gamma: int = 0, num_decodes: int = 1, role: str = 'target',
                   dtype=jnp.float32) -> dict:
  """Predicted `{'total', 'per_device'}` KV-cache bytes of one model (module docstring).

  Args:
    plan: the `ShardingPlan`.
    config: the model's `T5Config`, or a `DecoderOnlyConfig` (then `enc_len` = 0 and
      `max_decode_len` the loop's width: prompt and generated positions).
    batch, enc_len, max_decode_len: the decode's shapes; gamma: γ (0 for the baseline).
    num_decodes: samples per input (multiplies the cache's rows).
    role: 'target' or 'draft' (a replicated draft keeps every head on every device).
    dtype: the cache dtype (the model's activation dtype, `config.dtype`).
  """
  rows = padded_batch(batch, plan.data_size) * num_decodes
  heads, head_dim = config.num_heads, config.head_dim
  length = max(max_decode_len, gamma + 1)
  itemsize = jnp.dtype(dtype).itemsize
  model = plan.mesh.shape['model']
  heads_split = model if (heads % model == 0 and not (
      role == 'draft' and plan.draft == 'replicated')) else 1
  layers = getattr(config, 'num_decoder_layers', None) or config.num_layers
  per_pos = 2 * layers * heads * head_dim * itemsize
  bias = enc_len * itemsize  # cross_bias [rows, 1, 1, enc_len], per row
  total = per_pos * rows * (length + enc_len) + rows * bias
  per = (per_pos * (rows // plan.data_size) * (length + enc_len) // heads_split
         + (rows // plan.data_size) * bias)
  return {'total': total, 'per_device': per}
