"""Reading T5X's Orbax layout: `checkpoint_<step>/state/` (orbax `PyTreeCheckpointHandler`).

Only the arrays under the requested subtree are opened (orbax partial restore);
the tree is taken from the JSON `_METADATA` file, so no other array is touched.
"""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np

from specdec_jax.checkpoints import integrity
from specdec_jax.checkpoints import locations as loc
from specdec_jax.checkpoints import tree as tree_lib
from specdec_jax.checkpoints.config_check import ARRAY_OF_UNKNOWN_SHAPE, check_against_config
from specdec_jax.models.config import T5Config

PyTree = Any
ARRAY_TYPES = ('np.ndarray', 'jax.Array')
EMPTY_TYPES = {'Dict': dict, 'List': list, 'Tuple': tuple, 'None': lambda: None}


def entries(state_dir: str, parts: list[str]) -> list[tuple[tuple[str, ...], dict]]:
  """[(relative path, value metadata)] of the leaves under `parts`, from `_METADATA`.

  Reads only the JSON tree description: orbax's own `metadata()` would open
  every array (optimizer state included).
  """
  meta = json.loads(loc.read_bytes(loc.join(state_dir, '_METADATA')))
  tree = meta.get('tree_metadata') if isinstance(meta, dict) else None
  if not isinstance(tree, dict):
    raise ValueError(f'{state_dir}/_METADATA has no tree_metadata; not an orbax PyTree '
                     'checkpoint this reader knows.')
  out, top = [], set()
  for entry in tree.values():
    keys = entry['key_metadata']
    path = tuple(str(k['key']) for k in keys)
    if any(k.get('key_type') not in (2, None) for k in keys):
      raise ValueError(f'{state_dir}: non-dict node at {path}; only dict trees (as T5X '
                       'writes) are supported.')
    top.add(path[:len(parts) + 1])
    if list(path[:len(parts)]) == parts:
      out.append((path[len(parts):], entry['value_metadata']))
  if not out:
    raise KeyError(f'{state_dir} has no {"/".join(parts)!r}; it holds '
                   f'{sorted("/".join(t) for t in top)}.')
  return out


def _is_empty(value_meta: dict) -> bool:
  return bool(value_meta.get('skip_deserialize')) or value_meta.get('value_type') in EMPTY_TYPES


def read_orbax(state_dir: str, subtree: str | None, dtype=None,
               config: T5Config | None = None, sharding_of=None,
               exclude: tuple[str, ...] = ()) -> PyTree:
  """Restores one subtree of an Orbax state directory as numpy arrays.

  With `config`, the subtree's names are checked against it before any array is
  opened and the shapes once read (the `_METADATA` file holds no shapes).
  With `sharding_of` (`path tuple -> jax.sharding.Sharding`), arrays are restored
  by orbax straight into their shardings (`ArrayRestoreArgs`: each process reads
  only its shards) as `jax.Array`s, cast to `dtype` on the way.
  Children of the subtree named in `exclude` are left out (and never opened).

  Raises:
    integrity.MissingChunks: an array's chunks (or the OCDBT database) are missing,
      checked before orbax opens anything.
    integrity.DamagedCheckpoint: TensorStore fails reading a data file (deleted, cut).
  """
  import orbax.checkpoint as ocp
  from etils import epath
  parts = subtree.strip('/').split('/') if subtree else []
  found = [(path, meta) for path, meta in entries(state_dir, parts)
           if not (path and path[0] in exclude)]
  if config is not None:
    check_against_config([(path, {} if _is_empty(meta) else ARRAY_OF_UNKNOWN_SHAPE)
                          for path, meta in found], config, state_dir)
  empties, item, args = [], [], []
  for path, value_meta in found:
    kind = value_meta.get('value_type')
    if _is_empty(value_meta):
      empties.append((path, EMPTY_TYPES.get(kind, dict)()))
      continue
    item.append((path, 0))
    if sharding_of is not None and kind in ARRAY_TYPES:
      args.append((path, ocp.ArrayRestoreArgs(restore_type=jax.Array, dtype=dtype,
                                              sharding=sharding_of(path))))
    else:
      args.append((path, ocp.RestoreArgs(restore_type=np.ndarray)
                   if kind in ARRAY_TYPES else ocp.RestoreArgs()))
  if any(not p for p, _ in item):
    raise ValueError(f'{subtree!r} is a single array; name its parent subtree instead.')

  def nest(x):
    for part in reversed(parts):
      x = {part: x}
    return x

  restored = {}
  if item:
    integrity.raise_missing(
        integrity.orbax_problems(state_dir, [tuple(parts) + p for p, _ in item]),
        f'The Orbax checkpoint at {state_dir!r}')
    checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    try:
      restored = checkpointer.restore(
          epath.Path(state_dir),
          args=ocp.args.PyTreeRestore(item=nest(tree_lib.unflatten(item)),
                                      restore_args=nest(tree_lib.unflatten(args)),
                                      partial_restore=True))
    except ValueError as e:  # TensorStore's status, e.g. a deleted or cut data file
      if not any(code in str(e) for code in integrity.DAMAGE_CODES):
        raise
      raise integrity.DamagedCheckpoint(
          f'The Orbax checkpoint at {state_dir!r} is damaged: {str(e).splitlines()[0]}. Copy '
          'the checkpoint again, or load an earlier step.') from e
    for part in parts:
      restored = restored[part]
  leaves = tree_lib.flatten(restored) if item else []
  if config is not None:
    check_against_config(leaves, config, state_dir)
  result = tree_lib.unflatten(leaves + empties)
  if dtype is not None and sharding_of is None:
    result = jax.tree.map(lambda x: x.astype(dtype) if tree_lib.is_float(x) else x, result)
  return result
