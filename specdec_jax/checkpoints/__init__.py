"""Reading and writing T5X checkpoints (Hugging Face T5 conversion: `specdec_jax.interop.hf.t5`).

Checkpoint layouts understood here (the T5X train state dict is
`{'target': params, 'state': {'step': ..., 'param_states': ...}}`):

* **T5X legacy** (`t5x.checkpoints.Checkpointer`): a directory `checkpoint_<step>/`
  holding a msgpack file `checkpoint` = `{'version': 3, 'optimizer': state_dict}`.
  Each array leaf is either inlined in the msgpack (as flax serialises numpy
  arrays) or a TensorStore spec dict (`driver: zarr`, `kvstore.path` relative to
  the checkpoint directory, `kvstore.driver` `file`/`gfile`/`gcs`) whose data lives
  in a folder beside the msgpack file. A single msgpack file (e.g. T5X's testdata
  `test_t5_tiny.checkpoint_0`) is accepted too.
* **T5X early Orbax**: the same msgpack file, holding `{'_optimizer': state_dict,
  'flax_mutables': ...}` with leaves `'PLACEHOLDER://<name>'` that point at zarr
  folders `<name>/` beside it.
* **T5X Orbax** (`t5x.checkpoints.OrbaxCheckpointManagerInterface`, what current
  T5X writes): `checkpoint_<step>/state/` written by orbax-checkpoint's
  `PyTreeCheckpointHandler` (OCDBT by default) holding the state dict.

Paths may be local or URLs TensorStore's kvstores open (`gs://…`, `file://…`) for
the legacy layouts; the Orbax layout goes through `etils.epath`, which needs its
own backend for non-local paths. Writing supports local paths only, and writes
what T5X's own loaders read (`specdec_jax.checkpoints.writers`). The pieces live
in `specdec_jax.checkpoints`; this module is the public entry point.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.checkpoints import tree as tree_lib
from specdec_jax.checkpoints.integrity import (DamagedCheckpoint, MissingChunks,
                                              TruncatedCheckpoint)
from specdec_jax.checkpoints.legacy import read_msgpack
from specdec_jax.checkpoints.find import find_checkpoint
from specdec_jax.checkpoints.orbax_read import read_orbax
from specdec_jax.checkpoints.writers import (T5X_CHECKPOINT_VERSION, save_orbax_checkpoint,
                                            save_t5x_checkpoint)
from specdec_jax.models.config import T5Config

PyTree = Any

__all__ = [
    'load_t5x_checkpoint', 'read_t5x_arrays', 'save_t5x_checkpoint',
    'save_orbax_checkpoint', 'find_checkpoint', 'T5X_CHECKPOINT_VERSION',
    'DamagedCheckpoint', 'TruncatedCheckpoint', 'MissingChunks', 'NonFiniteParams',
    'MissingSubtree',
]


def read_t5x_arrays(path: str | os.PathLike, subtree: str | None = 'target', *,
                    restore_step: int | None = None,
                    array_metadata: Mapping[str, Any] | None = None,
                    dtype=None) -> PyTree:
  """Reads one subtree of a T5X train-state checkpoint as host arrays.

  The lower-level reader behind `load_t5x_checkpoint` (cf. T5X's
  `checkpoints.load_t5x_checkpoint`, which reads everything): only the leaves
  under `subtree` are opened and read, whatever the layout.

  Args:
    path: see `find_checkpoint`.
    subtree: '/'-separated path inside the state dict `{'target': params,
      'state': {'step', 'param_states'}}`, e.g. 'target', 'state',
      'state/param_states'; None or '' for everything.
    restore_step: step to read under a model directory (default: latest).
    array_metadata: for early-Orbax `PLACEHOLDER://name` leaves whose zarr
      folder lacks its `.zarray` (as in T5X's testdata `tiny_orbax/1`): a mapping
      from `name` (e.g. '_optimizer.state.param_states.kernel', or with '/') to
      `{'shape', 'dtype'[, 'chunks', 'compressor']}` or any object with
      `.shape`/`.dtype`. Unneeded otherwise.
    dtype: optional dtype floating-point leaves are cast to.
  Returns:
    Nested dict mirroring the checkpoint's subtree: numpy arrays (inline
    scalars stay as stored, e.g. `np.int32`); an empty subtree gives `{}`.
  Raises:
    FileNotFoundError: see `find_checkpoint`; or an array's folder is missing.
    KeyError: the checkpoint has no `subtree` (e.g. 'state/param_states' of a
      checkpoint written without optimizer state).
    ValueError: not a T5X checkpoint, or missing zarr metadata with no hint.
  """
  kind, location = find_checkpoint(path, restore_step)
  if kind == 'orbax':
    return read_orbax(location, subtree, dtype=dtype)
  return read_msgpack(location, subtree, array_metadata, dtype=dtype)


def load_t5x_checkpoint(path: str | os.PathLike, config=None,
                        dtype=None, shardings=None, restore_step: int | None = None,
                        subtree: str = 'target', exclude: tuple[str, ...] = ()) -> PyTree:
  """Loads the params (`target`) of a T5X checkpoint, never reading optimizer state.

  Mirrors `t5x.checkpoints.load_t5x_checkpoint(path, step, restore_dtype=...)['target']`
  for both T5X layouts (legacy msgpack + TensorStore, and Orbax
  `checkpoint_<step>/state`), but opens only the arrays under `target`: optimizer
  state stored as TensorStore/zarr or Orbax arrays is never opened. (Arrays a
  legacy checkpoint inlines in its msgpack file are parsed with that file.)

  Args:
    path: a model directory with `checkpoint_<step>/` folders (the latest step
      is used unless `restore_step`), one such folder, its `checkpoint` msgpack
      file or `state/` folder, or a single msgpack file.
    config: if given (a `T5Config` or `DecoderOnlyConfig`), every array under `target`
      is accounted for against the params of the config's model (legacy layouts: names and shapes before any
      array data is read; Orbax: names before, shapes once read).
    dtype: optional dtype (e.g. `jnp.bfloat16`) floating params are cast to.
    shardings: optional `jax.sharding.Sharding`, or a tree of them matching the
      params (`sharding.ShardingPlan.param_shardings`): every array is then restored
      straight into its sharding, each device's shard read on its own (legacy:
      TensorStore slices; Orbax: its `ArrayRestoreArgs`), so a process reads only the
      shards its devices hold and never a full host copy.
    restore_step: which step to load under a model directory.
    subtree: the '/'-separated node to load: 'target' (T5X's params, the default), or
      e.g. 'target/draft', the draft that T5X saves for our model classes
      (`SpeculativeEncoderDecoderModel` keeps it in `params['draft']`).
    exclude: children of `subtree` to leave out, never opened (('draft',) loads a
      target whose checkpoint also holds the draft).
  Returns:
    The params as a nested dict like `t5.init_params` gives: numpy arrays
    (float32 as stored unless `dtype`), or `jax.Array`s when `shardings` is given.
    `jax.device_put` numpy params once before decoding: a jitted call transfers numpy
    arguments to the device on every call (`generate` warns).
  Raises:
    FileNotFoundError: nothing at `path` (the message names it and what was
      expected), no checkpoint there, or no `checkpoint_<restore_step>`.
    ValueError: not a T5X checkpoint, it lacks `target`, or (with `config`) the
      params do not fit: the message lists every missing param, every unexpected
      array and every shape mismatch (T5X '/' names, both shapes) with hints.
    DamagedCheckpoint (a ValueError): the files are damaged, as opposed to not fitting:
      `TruncatedCheckpoint` (the msgpack file ends early), `MissingChunks` (arrays whose
      chunks or folder are missing, which TensorStore would read as zeros),
      `NonFiniteParams` (NaN or Inf). A newest step that is incomplete is skipped for the
      newest complete one, with a warning (`find_checkpoint`).
  """
  kind, location = find_checkpoint(path, restore_step)
  sharding_of = _sharding_lookup(shardings)
  try:
    if kind == 'orbax':
      params = read_orbax(location, subtree, dtype=dtype, config=config,
                          sharding_of=sharding_of, exclude=tuple(exclude))
    else:
      params = read_msgpack(location, subtree, dtype=dtype, config=config,
                            sharding_of=sharding_of, exclude=tuple(exclude))
  except KeyError as e:
    raise MissingSubtree(f'The checkpoint at {location!r} holds no params (`{subtree}`): {e}'
                         ) from e
  try:
    check_finite(params, f'The checkpoint at {location!r}')
  except NonFiniteParams as e:
    if dtype is None or np.dtype(dtype).itemsize >= 4:
      raise
    # float16 holds |x| < 65504: finite stored values may overflow in the cast itself.
    raise NonFiniteParams(f'{e} They were cast to {np.dtype(dtype).name} at load: values '
                          'beyond its range become Inf. Load as float32 '
                          "(decode.checkpoint_dtype='float32') to tell.") from e
  return params


class MissingSubtree(ValueError):
  """The checkpoint holds no node at the requested `subtree` (e.g. no `target/draft`)."""


class NonFiniteParams(DamagedCheckpoint):
  """Params hold NaN or Inf values: the checkpoint is damaged (not mismatched)."""


def check_finite(params: PyTree, where: str) -> None:
  """Raises unless every floating param is finite (one pass over every array, once at load).

  A NaN or Inf param makes every output it touches NaN; decoding would then emit id 0 (an
  empty output) with exit status 0. Checked arrays may be numpy or (sharded) `jax.Array`s.

  Raises:
    NonFiniteParams (a ValueError): naming `where`, how many params hold non-finite values and the first of them
      ('/'-joined T5X names).
  """
  bad = []
  for path, leaf in tree_lib.flatten(params):
    if isinstance(leaf, jax.Array):
      if jnp.issubdtype(leaf.dtype, jnp.floating) and not bool(jnp.all(jnp.isfinite(leaf))):
        bad.append('/'.join(path))
    elif tree_lib.is_float(leaf) and not np.all(np.isfinite(leaf)):
      bad.append('/'.join(path))
  if bad:
    raise NonFiniteParams(f'{where} holds NaN or Inf values in {len(bad)} param(s): '
                     f'{", ".join(bad[:5])}{" …" if len(bad) > 5 else ""}. The checkpoint is '
                     'damaged, or the run that wrote it diverged; load an earlier step.')


def _sharding_lookup(shardings):
  """`path tuple -> Sharding` for one sharding or a nested-dict tree of them (None: None).

  Raises:
    ValueError: (at lookup) the tree has no sharding for a param, naming it.
  """
  if shardings is None:
    return None
  if isinstance(shardings, jax.sharding.Sharding):
    return lambda path: shardings
  flat = dict(tree_lib.flatten(shardings))

  def lookup(path):
    if path not in flat:
      raise ValueError(f'shardings has no entry for param {"/".join(path)!r}; pass a tree '
                       'matching the params (ShardingPlan.param_shardings(config)).')
    return flat[path]
  return lookup
