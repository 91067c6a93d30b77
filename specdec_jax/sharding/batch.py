"""Host side of a sharded decode: pad the batch to the data axis, build global arrays,
gather the outputs.

Every process passes the same full host batch (the decode job reads the same input
file everywhere); `global_array` hands each device only its own rows
(`jax.make_array_from_callback`), so each process feeds its slice of the global
batch. Outputs come back as host numpy arrays on every process
(`multihost_utils.process_allgather`), cut to the real rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.decoding import loop_common


def padded_batch(batch: int, data_size: int) -> int:
  """`batch` rounded up to a multiple of `data_size` (rows per data shard must be equal)."""
  return -(-batch // data_size) * data_size


def pad_rows(x, rows: int):
  """`x [batch, ...]` → `[rows, ...]` by repeating its first row (padding rows decode
  like row 0 and are dropped afterwards)."""
  x = np.asarray(x)
  if x.shape[0] == rows:
    return x
  return np.concatenate([x, np.repeat(x[:1], rows - x.shape[0], axis=0)], axis=0)


def global_array(host, sharding) -> jax.Array:
  """A `jax.Array` with `sharding` whose shards are sliced from the host array `host`
  (each device receives only its part; works across processes)."""
  host = np.asarray(host)
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def row_keys(decode_rng, batch: int):
  """`[batch]` raw row keys (uint32 `[batch, 2]`), exactly as the single-device loop derives
  them (`loop_common.row_keys`), so padding the batch does not change any row's key."""
  keys = loop_common.row_keys(decode_rng, batch, 1)
  if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
    keys = jax.random.key_data(keys)
  return np.asarray(keys)


def temperatures(temperature, batch: int):
  """Scalar temperature unchanged; `[batch]` as a host array (to be padded)."""
  if jnp.ndim(temperature) == 0:
    return temperature
  return np.asarray(temperature, np.float32)


def gather(tree, batch: int):
  """Every `jax.Array` leaf of `tree` as a host numpy array of its first `batch` rows,
  gathered from all processes."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    tree = multihost_utils.process_allgather(tree, tiled=True)
  return jax.tree.map(lambda x: np.asarray(x)[:batch], tree)


def place(tree, shardings):
  """Host (numpy) or single-device params → global arrays with `shardings`, leaf by leaf.

  Arrays that already carry the wanted sharding are kept as they are.
  """
  def put(x, s):
    if isinstance(x, jax.Array) and x.sharding == s:
      return x
    if isinstance(x, jax.Array) and x.is_fully_addressable and jax.process_count() == 1:
      return jax.device_put(x, s)
    return global_array(x, s)
  return jax.tree.map(put, tree, shardings)
