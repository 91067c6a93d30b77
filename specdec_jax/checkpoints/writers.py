"""Writing T5X checkpoints that T5X's own loaders read: legacy msgpack (+ zarr) and Orbax.

The state dict written is T5X's `{'target': params, 'state': {'step': int32}}`,
plus `state/param_states` only when optimizer state is given. An empty dict node
is never written: `t5x.checkpoints.load_t5x_checkpoint` reads every leaf of the
state dict as an array or a TensorStore spec and fails (`'dict' object has no
attribute 'dtype'`) on an empty node; T5X's own `InferenceState.state_dict()` has
no `param_states` either.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
import uuid
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.checkpoints import locations as loc
from specdec_jax.checkpoints.legacy import resolve_kvstore

PyTree = Any
T5X_CHECKPOINT_VERSION = 3  # T5X `checkpoints.VERSION`.
_CHUNK_BYTES = 64 * 1024 * 1024  # Largest zarr chunk written (T5X also aims at 64 MiB).


def _chunk_shape(shape, itemsize: int) -> list[int]:
  """Largest chunk that divides `shape` evenly and holds at most `_CHUNK_BYTES`."""
  chunks = list(shape)
  limit = max(1, _CHUNK_BYTES // itemsize)
  while math.prod(chunks) > limit:
    dim = max(range(len(chunks)), key=lambda d: chunks[d])
    size, current = shape[dim], chunks[dim]
    chunks[dim] = max(d for d in range(1, current) if size % d == 0)
  return chunks


def _dotted(path) -> str:
  return '.'.join(str(getattr(k, 'key', getattr(k, 'name', k))) for k in path)


def _is_array_like(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic, jax.Array, int, float, bool)) or (
      hasattr(x, 'shape') and hasattr(x, 'dtype') and hasattr(x, '__array__'))


def host_tree(tree, where: str, dtype=None, allow_none: bool = False):
  """`tree` as nested dicts of host numpy arrays (floating ones cast to `dtype`).

  Raises:
    ValueError: an empty dict node (T5X's loader cannot read one), a key that is
      not a string, or a leaf that is not an array (naming its path).
  """
  if isinstance(tree, Mapping):
    if not tree:
      raise ValueError(
          f'{where} is an empty dict: T5X\'s load_t5x_checkpoint reads every leaf of the '
          'state dict as an array and fails on an empty node; drop the empty node.')
    out = {}
    for key, value in tree.items():
      if not isinstance(key, str):
        raise ValueError(f'{where} has the key {key!r} ({type(key).__name__}); T5X state '
                         'dicts have string keys.')
      out[key] = host_tree(value, f'{where}/{key}', dtype, allow_none)
    return out
  if tree is None and allow_none:  # T5X writes None for states no optimizer touches.
    return None
  if not _is_array_like(tree):
    raise ValueError(f'{where} is a {type(tree).__name__}, not an array; T5X state dicts are '
                     'nested dicts of arrays (convert optimizer states with '
                     'flax.serialization.to_state_dict).')
  x = np.asarray(jax.device_get(tree))
  if dtype is not None and jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(dtype)
  return x


def state_dict(params: PyTree, step: int, dtype, param_states: PyTree | None,
               states_arg: str) -> dict:
  """T5X's train-state dict; `param_states` only when there are optimizer states."""
  if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
    raise ValueError(f'step must be a non-negative int, got {step!r}.')
  if not isinstance(params, Mapping):
    raise ValueError(f'params must be a nested dict of arrays, got {type(params).__name__}.')
  state = {'target': host_tree(params, 'params', dtype),
           'state': {'step': np.int32(step)}}
  if param_states is not None and not (isinstance(param_states, Mapping) and not param_states):
    state['state']['param_states'] = host_tree(param_states, states_arg, allow_none=True)
  return state


def save_t5x_checkpoint(params: PyTree, directory: str | os.PathLike, step: int = 0,
                        dtype=None, *, param_states: PyTree | None = None,
                        use_tensorstore: bool = True, overwrite: bool = False) -> str:
  """Writes params as a T5X legacy checkpoint `<directory>/checkpoint_<step>/`.

  Mirrors `t5x.checkpoints.Checkpointer.save`: the msgpack file `checkpoint`
  holds `{'version': 3, 'optimizer': {'target': ..., 'state': {'step': int32[,
  'param_states': ...]}}}`, which `t5x.checkpoints.load_t5x_checkpoint` reads.
  With `use_tensorstore` (default) every array of rank ≥ 1 is written as a zarr
  array (gzip, chunks ≤ 64 MiB) in a folder `target.<dotted.param.path>/` beside
  it and the msgpack holds its TensorStore spec (`driver`, `dtype`, relative
  `kvstore: {driver: file, path}`, `metadata: {shape, chunks, compressor}`), as
  T5X's `_get_spec` does; otherwise all arrays are inlined in the msgpack (like
  T5X's `test_t5_tiny.checkpoint_0`). Scalars are always inlined. The directory
  is written under a temporary name and renamed when complete.

  Args:
    params: nested dict of arrays (any array type; fetched to host).
    directory: local model directory (created if needed).
    step: training step (non-negative int), stored in `state/step` and the
      folder name.
    dtype: optional dtype floating params are cast to (e.g. `jnp.bfloat16`).
    param_states: optional optimizer state (nested dict of arrays; None leaves
      allowed, as T5X writes for untouched params) stored as
      `state/param_states`; omitted when None or `{}`.
    use_tensorstore: write arrays as TensorStore zarr folders (else inline).
    overwrite: replace an existing `checkpoint_<step>` (else FileExistsError).
  Returns:
    The path of the written `checkpoint_<step>` directory.
  Raises:
    FileExistsError: `checkpoint_<step>` exists and `overwrite` is False.
    ValueError: a URL `directory`, a bad `step`, or a tree with an empty dict
      node or a non-array leaf (named), before anything is written.
  """
  import tensorstore as ts
  from flax import serialization
  directory = os.fspath(directory)
  if loc.is_url(directory):
    raise ValueError(f'save_t5x_checkpoint writes local paths only, got {directory!r}.')
  state = state_dict(params, step, dtype, param_states, 'param_states')
  os.makedirs(directory, exist_ok=True)
  final = os.path.join(directory, f'checkpoint_{int(step)}')
  if os.path.exists(final) and not overwrite:
    raise FileExistsError(f'{final} exists; pass overwrite=True to replace it.')
  tmp = f'{final}.tmp-{int(time.time())}-{uuid.uuid4().hex[:8]}'
  os.makedirs(tmp)
  try:
    if use_tensorstore:
      writes = []

      def to_spec(path, x):
        if not isinstance(x, np.ndarray) or x.ndim == 0:
          return x
        spec = {'driver': 'zarr', 'dtype': jnp.dtype(x.dtype).name,
                'kvstore': {'driver': 'file', 'path': _dotted(path)},
                'metadata': {'shape': list(x.shape),
                             'chunks': _chunk_shape(x.shape, x.dtype.itemsize),
                             'compressor': {'id': 'gzip'}}}
        store = ts.open(resolve_kvstore(spec, tmp), create=True, open=True).result()
        writes.append(store.write(x))
        return spec

      state = jax.tree_util.tree_map_with_path(to_spec, state)
      for w in writes:
        w.result()
    contents = {'version': T5X_CHECKPOINT_VERSION, 'optimizer': state}
    with open(os.path.join(tmp, loc.MSGPACK_FILE), 'wb') as f:
      f.write(serialization.msgpack_serialize(contents))
      f.flush()
      os.fsync(f.fileno())
    if os.path.exists(final):
      trash = f'{tmp}.old'
      os.rename(final, trash)
      os.rename(tmp, final)
      shutil.rmtree(trash)
    else:
      os.rename(tmp, final)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return final


def save_orbax_checkpoint(params: PyTree, directory: str | os.PathLike, step: int = 0,
                          dtype=None, *, optimizer_state: PyTree | None = None,
                          use_ocdbt: bool = True, overwrite: bool = False) -> str:
  """Writes params as current T5X does: Orbax `<directory>/checkpoint_<step>/state/`.

  Mirrors `t5x.checkpoints.OrbaxCheckpointManagerInterface.save`: an orbax
  `CheckpointManager` with step prefix `checkpoint` and item `state` handled by
  `PyTreeCheckpointHandler(use_ocdbt=True)`, saving the state dict
  `{'target': params, 'state': {'step': int32[, 'param_states': ...]}}`, which
  that class's `restore` reads (for an `InferenceState`, exactly its
  `state_dict()` tree). Orbax writes into a staging folder beside the target, and
  the finished `checkpoint_<step>` is renamed into place (an existing one, with
  `overwrite`, is swapped out only then), so a failed save leaves the old checkpoint.

  Args:
    params: nested dict of arrays.
    directory: local model directory (created if needed).
    step: training step (folder name and `state/step`).
    dtype: optional dtype floating params are cast to.
    optimizer_state: optional nested dict of arrays stored as
      `state/param_states`; omitted when None or `{}`.
    use_ocdbt: OCDBT storage (T5X's choice); False writes one zarr folder per array.
    overwrite: replace an existing `checkpoint_<step>` (else FileExistsError).
  Returns:
    The path of the written `checkpoint_<step>` directory.
  Raises:
    FileExistsError: `checkpoint_<step>` exists and `overwrite` is False.
    ValueError: a bad `step`, or a tree with an empty dict node or a non-array
      leaf (named), before anything is written.
  """
  import orbax.checkpoint as ocp
  state = state_dict(params, step, dtype, optimizer_state, 'optimizer_state')
  directory = os.path.abspath(os.fspath(directory))
  final = os.path.join(directory, f'checkpoint_{int(step)}')
  if os.path.exists(final) and not overwrite:
    raise FileExistsError(f'{final} exists; pass overwrite=True to replace it.')
  os.makedirs(directory, exist_ok=True)
  staging = tempfile.mkdtemp(dir=directory, prefix=f'.checkpoint_{int(step)}.staging.')
  try:
    manager = ocp.CheckpointManager(
        staging,
        item_handlers={loc.STATE_DIR: ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt)},
        options=ocp.CheckpointManagerOptions(step_prefix='checkpoint', create=True))
    try:
      manager.save(int(step),
                   args=ocp.args.Composite(**{loc.STATE_DIR: ocp.args.PyTreeSave(state)}),
                   force=True)
      manager.wait_until_finished()
    finally:
      manager.close()
    written = os.path.join(staging, f'checkpoint_{int(step)}')
    if os.path.exists(final):
      old = os.path.join(staging, 'replaced')
      os.replace(final, old)
    os.replace(written, final)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return final
