"""Reading and writing T5X checkpoints; importing and exporting Hugging Face T5.

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
own backend for non-local paths. Writing supports local paths only.

Hugging Face T5 (`T5ForConditionalGeneration`) folders are mapped to and from the
T5X param tree by `import_hf_t5` / `export_hf_t5`; `t5_config_from_hf` maps the
config.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import time
import uuid
import warnings
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

PyTree = Any

T5X_CHECKPOINT_VERSION = 3  # T5X `checkpoints.VERSION`.
_MSGPACK_FILE = 'checkpoint'
_STATE_DIR = 'state'
_PLACEHOLDER = 'PLACEHOLDER://'
_STEP_DIR_RE = re.compile(r'checkpoint_(\d+)')
_BARE_STEP_DIR_RE = re.compile(r'\d+')  # Orbax's default step folders (e.g. T5X's tiny_orbax/1).
_CHUNK_BYTES = 64 * 1024 * 1024  # Largest zarr chunk written (T5X also aims at 64 MiB).

__all__ = [
    'load_t5x_checkpoint', 'read_t5x_arrays', 'save_t5x_checkpoint',
    'save_orbax_checkpoint', 'find_checkpoint', 'import_hf_t5', 'load_hf_t5',
    'export_hf_t5', 't5_config_from_hf', 'hf_config_dict',
]


# ----------------------------------------------------------------------------
# Locations: local paths or TensorStore kvstore URLs.
# ----------------------------------------------------------------------------

def _is_url(path: str) -> bool:
  return '://' in path


def _join(base: str, *names: str) -> str:
  if _is_url(base):
    return '/'.join([base.rstrip('/')] + [n.strip('/') for n in names])
  return os.path.join(base, *names)


def _parent(path: str) -> str:
  if _is_url(path):
    return path.rstrip('/').rsplit('/', 1)[0]
  return os.path.dirname(os.path.abspath(path))


def _basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1] if _is_url(path) else os.path.basename(
      os.path.normpath(path))


def _kvstore(url_dir: str):
  import tensorstore as ts
  return ts.KvStore.open(url_dir.rstrip('/') + '/').result()


def _is_file(path: str) -> bool:
  if not _is_url(path):
    return os.path.isfile(path)
  parent, name = path.rstrip('/').rsplit('/', 1)
  return _kvstore(parent).read(name).result().state == 'value'


def _children(path: str) -> list[str] | None:
  """Names directly inside `path`, or None when it is not a directory."""
  if not _is_url(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else None
  keys = _kvstore(path).list().result()
  if not keys:
    return None
  return sorted({k.decode().split('/', 1)[0] for k in keys})


def _read_bytes(path: str) -> bytes:
  if not _is_url(path):
    with open(path, 'rb') as f:
      return f.read()
  parent, name = path.rstrip('/').rsplit('/', 1)
  result = _kvstore(parent).read(name).result()
  if result.state != 'value':
    raise FileNotFoundError(f'{path} does not exist.')
  return bytes(result.value)


# ----------------------------------------------------------------------------
# Finding the checkpoint.
# ----------------------------------------------------------------------------

_EXPECTED = ('a T5X checkpoint: a checkpoint_<step>/ directory holding a `checkpoint` msgpack '
             'file (legacy layout) or a `state/` Orbax directory, a msgpack checkpoint file '
             'itself, an Orbax `state/` directory, or a directory of checkpoint_<step>/ '
             'folders')


def _step_dirs(path: str) -> dict[int, str]:
  names = _children(path) or []
  out = {}
  for name in names:  # `checkpoint_<step>` wins over a bare `<step>`.
    if _BARE_STEP_DIR_RE.fullmatch(name):
      out.setdefault(int(name), _join(path, name))
  for name in names:
    m = _STEP_DIR_RE.fullmatch(name)
    if m:
      out[int(m.group(1))] = _join(path, name)
  return out


def _classify(path: str) -> tuple[str, str] | None:
  """('msgpack', file) or ('orbax', state_dir) for a checkpoint at `path`, else None."""
  if _is_file(path):
    return 'msgpack', path
  names = _children(path)
  if names is None:
    return None
  if '_METADATA' in names:
    return 'orbax', path
  if _MSGPACK_FILE in names and _is_file(_join(path, _MSGPACK_FILE)):
    return 'msgpack', _join(path, _MSGPACK_FILE)
  if _STATE_DIR in names:
    inner = _classify(_join(path, _STATE_DIR))
    if inner is not None:
      return inner
  return None


def find_checkpoint(path: str | os.PathLike, restore_step: int | None = None
                    ) -> tuple[str, str]:
  """Locates a T5X checkpoint (mirrors `t5x.checkpoints.find_checkpoint`, both layouts).

  Args:
    path: a model directory holding `checkpoint_<step>/` folders, one such
      folder, its `checkpoint` msgpack file, its Orbax `state/` folder, or a
      single msgpack file.
    restore_step: which `checkpoint_<step>` to use under a model directory
      (default: the highest step).
  Returns:
    `(kind, location)`: `('msgpack', path of the msgpack file)` for the legacy
    and early-Orbax layouts, or `('orbax', path of the state directory)`.
  Raises:
    FileNotFoundError: nothing at `path`, no checkpoint in it, or no
      `checkpoint_<restore_step>` (the message lists the steps found).
    ValueError: `restore_step` contradicts a `checkpoint_<step>` path.
  """
  path = os.fspath(path)
  if not _is_url(path) and not os.path.exists(path):
    raise FileNotFoundError(f'No such file or directory: {path!r}; expected {_EXPECTED}.')
  steps = {} if _is_file(path) else _step_dirs(path)
  if steps and _classify(path) is None:
    if restore_step is None:
      restore_step = max(steps)
    if restore_step not in steps:
      raise FileNotFoundError(
          f'No checkpoint_{restore_step} under {path!r}; steps found: {sorted(steps)}.')
    path = steps[restore_step]
  elif restore_step is not None:
    m = _STEP_DIR_RE.fullmatch(_basename(path))
    if m and int(m.group(1)) != restore_step:
      raise ValueError(f'restore_step={restore_step} but {path!r} is the checkpoint of step '
                       f'{m.group(1)}; pass the model directory to choose a step.')
  found = _classify(path)
  if found is None:
    raise FileNotFoundError(f'No T5X checkpoint at {path!r}; expected {_EXPECTED}.')
  return found


# ----------------------------------------------------------------------------
# Legacy (msgpack + TensorStore) reading.
# ----------------------------------------------------------------------------

def _is_ts_spec(x) -> bool:
  return isinstance(x, dict) and 'driver' in x and ('kvstore' in x or 'path' in x)


def _is_leaf(x) -> bool:
  return not isinstance(x, dict) or _is_ts_spec(x)


def _state_dict_of(contents: Mapping[str, Any], where: str) -> Mapping[str, Any]:
  """The `{'target', 'state'}` dict of a msgpack checkpoint (any T5X version)."""
  if not isinstance(contents, dict):
    raise ValueError(f'{where} is not a T5X checkpoint (its msgpack holds a '
                     f'{type(contents).__name__}, not a dict).')
  if 'version' in contents and 'optimizer' in contents:
    return contents['optimizer']
  if '_optimizer' in contents:  # T5X's early Orbax layout.
    return contents['_optimizer']
  if 'target' in contents:  # version 0: the state dict itself.
    return contents
  raise ValueError(f'{where} is not a T5X checkpoint: top-level keys {sorted(contents)} '
                   "hold neither 'optimizer', '_optimizer' nor 'target'.")


def _select(tree, subtree: str | None, where: str):
  if not subtree:
    return tree
  node = tree
  for part in subtree.strip('/').split('/'):
    if not isinstance(node, dict) or _is_ts_spec(node) or part not in node:
      keys = sorted(node) if isinstance(node, dict) and not _is_ts_spec(node) else []
      raise KeyError(f'{where} has no {subtree!r} (at {part!r}; keys there: {keys}).')
    node = node[part]
  return node


def _flatten(tree, prefix=()):
  """[(path tuple, leaf)] with dict leaves being TS specs; empty dicts kept as leaves."""
  if _is_leaf(tree):
    return [(prefix, tree)]
  if not tree:
    return [(prefix, {})]
  out = []
  for key in sorted(tree):
    out.extend(_flatten(tree[key], prefix + (key,)))
  return out


def _unflatten(items):
  root: dict = {}
  for path, value in items:
    if not path:
      return value
    node = root
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return root


def _resolve_kvstore(spec: dict, ckpt_dir: str) -> dict:
  """A copy of a T5X TensorStore spec with its relative path made absolute."""
  spec = json.loads(json.dumps(spec, default=_json_default))
  kvstore = spec.get('kvstore')
  if isinstance(kvstore, str):  # Already a URL.
    return spec
  kvstore = dict(kvstore or {})
  rel = kvstore.pop('path', None)
  if rel is None:  # tensorstore < 0.1.14 kept `path` at the top level.
    rel = spec.pop('path', '')
  else:
    spec.pop('path', None)
  if _is_url(ckpt_dir):
    spec['kvstore'] = _join(ckpt_dir, rel).rstrip('/') + '/'
  else:
    spec['kvstore'] = {'driver': 'file', 'path': os.path.join(ckpt_dir, rel)}
  return spec


def _json_default(x):
  if isinstance(x, np.ndarray):
    return x.tolist()
  if isinstance(x, np.generic):
    return x.item()
  raise TypeError(f'not JSON serialisable: {type(x).__name__}')


def _sniff_compressor(data: bytes) -> dict | None:
  if data[:4] == b'\x28\xb5\x2f\xfd':
    return {'id': 'zstd'}
  if data[:2] == b'\x1f\x8b':
    return {'id': 'gzip'}
  if len(data) >= 2 and data[0] == 0x78 and (data[0] * 256 + data[1]) % 31 == 0:
    return {'id': 'zlib'}
  if data[:3] == b'BZh':
    return {'id': 'bz2'}
  return None


def _placeholder_spec(name: str, ckpt_dir: str, hint) -> tuple[dict, bool]:
  """TensorStore spec for an early-Orbax `PLACEHOLDER://name` leaf.

  Returns (spec, assume_metadata). Without a `.zarray` file beside the chunks,
  `hint` (shape/dtype, optionally chunks/compressor) supplies the metadata.
  """
  folder = _join(ckpt_dir, name)
  kvstore = ((folder.rstrip('/') + '/') if _is_url(ckpt_dir)
             else {'driver': 'file', 'path': folder})
  names = _children(folder)
  if names is None:
    raise FileNotFoundError(f'Array {name!r} of the checkpoint in {ckpt_dir!r} has no folder '
                            f'{folder!r}.')
  if '.zarray' in names:
    return {'driver': 'zarr', 'kvstore': kvstore}, False
  if hint is None:
    raise ValueError(
        f'Array {name!r} in {ckpt_dir!r} has no zarr metadata (.zarray is missing); pass '
        f'array_metadata={{{name!r}: {{"shape": ..., "dtype": ...}}}} to read it.')
  shape, dtype, chunks, compressor = _hint_fields(hint)
  chunk_keys = [n for n in names if not n.startswith('.')]
  if chunks is None:
    if len(chunk_keys) > 1:
      raise ValueError(f'Array {name!r} has {len(chunk_keys)} chunks and no .zarray; give its '
                       '"chunks" in array_metadata.')
    chunks = list(shape)
  if compressor is None and chunk_keys:
    compressor = _sniff_compressor(_read_bytes(_join(folder, chunk_keys[0]))[:8])
  metadata = {'shape': list(shape), 'chunks': list(chunks), 'compressor': compressor}
  return {'driver': 'zarr', 'dtype': np.dtype(dtype).name, 'kvstore': kvstore,
          'metadata': metadata}, True


def _hint_fields(hint):
  if isinstance(hint, Mapping):
    return (tuple(hint['shape']), hint['dtype'], hint.get('chunks'), hint.get('compressor'))
  return tuple(hint.shape), hint.dtype, None, None


def _lookup_hint(array_metadata, name: str):
  if not array_metadata:
    return None
  for key in (name, name.replace('.', '/'), name.lstrip('_')):
    if key in array_metadata:
      return array_metadata[key]
  return None


def _open_ts(spec: dict, assume_metadata: bool):
  import tensorstore as ts
  if assume_metadata:
    return ts.open(spec, open=True, assume_metadata=True)
  return ts.open(spec, open=True, read=True)


def _read_msgpack_leaves(msgpack_path: str, subtree: str | None, array_metadata=None,
                         dtype=None, config: T5Config | None = None) -> PyTree:
  """Reads one subtree of a msgpack checkpoint; TensorStore leaves outside it stay unread."""
  from flax import serialization
  ckpt_dir = _parent(msgpack_path)
  contents = serialization.msgpack_restore(_read_bytes(msgpack_path))
  state = _state_dict_of(contents, msgpack_path)
  node = _select(state, subtree, msgpack_path)
  items = _flatten(node)

  # 1. Open every TensorStore leaf (metadata only), concurrently.
  opened: dict[int, Any] = {}
  pending = {}
  for i, (path, leaf) in enumerate(items):
    if _is_ts_spec(leaf):
      spec = _resolve_kvstore(leaf, ckpt_dir)
      meta = spec.get('metadata') or {}
      # Like T5X, let the stored .zarray decide chunks/compressor when it exists.
      light = dict(spec, metadata={k: v for k, v in meta.items()
                                   if k not in ('chunks', 'compressor')})
      pending[i] = (spec, _open_ts(light, False))
    elif isinstance(leaf, str) and leaf.startswith(_PLACEHOLDER):
      name = leaf[len(_PLACEHOLDER):]
      spec, assume = _placeholder_spec(name, ckpt_dir, _lookup_hint(array_metadata, name))
      pending[i] = (None, _open_ts(spec, assume))
  for i, (spec, future) in pending.items():
    try:
      opened[i] = future.result()
    except ValueError as e:
      if spec is None or 'NOT_FOUND' not in str(e) or 'metadata' not in str(e).lower():
        raise
      # No .zarray beside the chunks (as in T5X's own testdata): the spec's
      # metadata is complete for what T5X writes, so assume it.
      opened[i] = _open_ts(spec, True).result()

  # 2. Validate shapes before reading any data.
  if config is not None:
    shapes = []
    for i, (path, leaf) in enumerate(items):
      if i in opened:
        shapes.append((path, jax.ShapeDtypeStruct(tuple(opened[i].shape),
                                                  opened[i].dtype.numpy_dtype)))
      else:
        shapes.append((path, leaf))
    t5.check_params(_unflatten(shapes), config)

  # 3. Read.
  reads = {i: store.read() for i, store in opened.items()}
  out = []
  for i, (path, leaf) in enumerate(items):
    value = np.asarray(reads[i].result()) if i in reads else leaf
    if dtype is not None and _is_float(value):
      value = np.asarray(value).astype(dtype)
    out.append((path, value))
  return _unflatten(out)


def _is_float(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.floating)


# ----------------------------------------------------------------------------
# Orbax reading.
# ----------------------------------------------------------------------------

_ORBAX_ARRAY_TYPES = ('np.ndarray', 'jax.Array')
_ORBAX_EMPTY = {'Dict': dict, 'List': list, 'Tuple': tuple, 'None': lambda: None}


def _orbax_entries(state_dir: str, parts: list[str]):
  """[(relative path, value type)] of the leaves under `parts`, from `_METADATA`.

  Reads only the JSON tree description: orbax's own `metadata()` would open
  every array (optimizer state included).
  """
  meta = json.loads(_read_bytes(_join(state_dir, '_METADATA')))
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


def _read_orbax(state_dir: str, subtree: str | None, dtype=None,
                config: T5Config | None = None) -> PyTree:
  """Restores one subtree of an Orbax state directory (orbax partial restore).

  Only the arrays under `subtree` are opened; they come back as numpy arrays.
  """
  import orbax.checkpoint as ocp
  from etils import epath
  parts = subtree.strip('/').split('/') if subtree else []
  entries = _orbax_entries(state_dir, parts)
  empties, item, args = [], [], []
  for path, value_meta in entries:
    kind = value_meta.get('value_type')
    if value_meta.get('skip_deserialize') or kind in _ORBAX_EMPTY:
      empties.append((path, _ORBAX_EMPTY.get(kind, dict)()))
      continue
    item.append((path, 0))
    args.append((path, ocp.RestoreArgs(restore_type=np.ndarray)
                 if kind in _ORBAX_ARRAY_TYPES else ocp.RestoreArgs()))
  if any(not p for p, _ in item):
    raise ValueError(f'{subtree!r} is a single array; name its parent subtree instead.')

  def nest(x):
    for part in reversed(parts):
      x = {part: x}
    return x

  restored = {}
  if item:
    checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    restored = checkpointer.restore(
        epath.Path(state_dir),
        args=ocp.args.PyTreeRestore(item=nest(_unflatten(item)),
                                    restore_args=nest(_unflatten(args)), partial_restore=True))
    for part in parts:
      restored = restored[part]
  leaves = _flatten(restored) if item else []
  result = _unflatten(leaves + empties)
  if config is not None:
    t5.check_params(result, config)
  if dtype is not None:
    result = jax.tree.map(lambda x: x.astype(dtype) if _is_float(x) else x, result)
  return result


# ----------------------------------------------------------------------------
# Public reading API.
# ----------------------------------------------------------------------------

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
    KeyError: the checkpoint has no `subtree`.
    ValueError: not a T5X checkpoint, or missing zarr metadata with no hint.
  """
  kind, location = find_checkpoint(path, restore_step)
  if kind == 'orbax':
    return _read_orbax(location, subtree, dtype=dtype)
  return _read_msgpack_leaves(location, subtree, array_metadata, dtype=dtype)


def load_t5x_checkpoint(path: str | os.PathLike, config: T5Config | None = None,
                        dtype=None, shardings=None, restore_step: int | None = None
                        ) -> PyTree:
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
    config: if given, the tree and every shape are checked against
      `Transformer(config)` before any array data is read.
    dtype: optional dtype (e.g. `jnp.bfloat16`) floating params are cast to.
    shardings: optional `jax.sharding.Sharding`, or a tree of them matching the
      params; the host arrays read are then placed with `jax.device_put`.
    restore_step: which step to load under a model directory.
  Returns:
    The params as a nested dict like `t5.init_params` gives: numpy arrays
    (float32 as stored unless `dtype`), or `jax.Array`s when `shardings` is given.
  Raises:
    FileNotFoundError: nothing at `path` (the message names it and what was
      expected), no checkpoint there, or no `checkpoint_<restore_step>`.
    ValueError: not a T5X checkpoint, it lacks `target`, or (with `config`) the
      first param that is missing, unexpected or of another shape, with both shapes.
  """
  kind, location = find_checkpoint(path, restore_step)
  try:
    if kind == 'orbax':
      params = _read_orbax(location, 'target', dtype=dtype, config=config)
    else:
      params = _read_msgpack_leaves(location, 'target', dtype=dtype, config=config)
  except KeyError as e:
    raise ValueError(f'The checkpoint at {location!r} holds no params (`target`): {e}') from e
  if shardings is not None:
    params = jax.device_put(params, shardings)
  return params


# ----------------------------------------------------------------------------
# Writing.
# ----------------------------------------------------------------------------

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


def _to_host(x, dtype=None):
  x = np.asarray(jax.device_get(x))
  if dtype is not None and jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(dtype)
  return x


def save_t5x_checkpoint(params: PyTree, directory: str | os.PathLike, step: int = 0,
                        dtype=None, *, param_states: PyTree | None = None,
                        use_tensorstore: bool = True, overwrite: bool = False) -> str:
  """Writes params as a T5X legacy checkpoint `<directory>/checkpoint_<step>/`.

  Mirrors `t5x.checkpoints.Checkpointer.save`: the msgpack file `checkpoint`
  holds `{'version': 3, 'optimizer': {'target': ..., 'state': {'step': int32,
  'param_states': ...}}}`. With `use_tensorstore` (default) every array of rank
  ≥ 1 is written as a zarr array (gzip, chunks ≤ 64 MiB) in a folder
  `target.<dotted.param.path>/` beside it and the msgpack holds its TensorStore
  spec with a relative `file` kvstore path, as T5X does; otherwise all arrays
  are inlined in the msgpack (like T5X's `test_t5_tiny.checkpoint_0`). Scalars
  are always inlined. The directory is written under a temporary name and
  renamed when complete.

  Args:
    params: nested dict of arrays (any array type; fetched to host).
    directory: local model directory (created if needed).
    step: training step, stored in `state/step` and the folder name.
    dtype: optional dtype floating params are cast to (e.g. `jnp.bfloat16`).
    param_states: optional optimizer state tree stored as `state/param_states`
      (default `{}`; this package only needs the params).
    use_tensorstore: write arrays as TensorStore zarr folders (else inline).
    overwrite: replace an existing `checkpoint_<step>` (else FileExistsError).
  Returns:
    The path of the written `checkpoint_<step>` directory.
  Raises:
    FileExistsError: `checkpoint_<step>` exists and `overwrite` is False.
  """
  import tensorstore as ts
  from flax import serialization
  directory = os.fspath(directory)
  if _is_url(directory):
    raise ValueError(f'save_t5x_checkpoint writes local paths only, got {directory!r}.')
  os.makedirs(directory, exist_ok=True)
  final = os.path.join(directory, f'checkpoint_{int(step)}')
  if os.path.exists(final) and not overwrite:
    raise FileExistsError(f'{final} exists; pass overwrite=True to replace it.')
  tmp = f'{final}.tmp-{int(time.time())}-{uuid.uuid4().hex[:8]}'
  os.makedirs(tmp)
  try:
    state = {'target': jax.tree.map(lambda x: _to_host(x, dtype), params),
             'state': {'step': np.int32(step),
                       'param_states': jax.tree.map(_to_host, param_states)
                       if param_states is not None else {}}}
    if use_tensorstore:
      writes = []

      def to_spec(path, x):
        if not isinstance(x, np.ndarray) or x.ndim == 0:
          return x
        name = _dotted(path)
        spec = {'driver': 'zarr', 'dtype': jnp.dtype(x.dtype).name,
                'kvstore': {'driver': 'file', 'path': name},
                'metadata': {'shape': list(x.shape),
                             'chunks': _chunk_shape(x.shape, x.dtype.itemsize),
                             'compressor': {'id': 'gzip'}}}
        store = ts.open(_resolve_kvstore(spec, tmp), create=True, open=True).result()
        writes.append(store.write(x))
        return spec

      state = jax.tree_util.tree_map_with_path(to_spec, state)
      for w in writes:
        w.result()
    contents = {'version': T5X_CHECKPOINT_VERSION, 'optimizer': state}
    with open(os.path.join(tmp, _MSGPACK_FILE), 'wb') as f:
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
  `{'target': params, 'state': {'step': int32, 'param_states': ...}}`. Orbax
  writes to a temporary folder and renames it when complete.

  Args:
    params: nested dict of arrays.
    directory: local model directory (created if needed).
    step: training step (folder name and `state/step`).
    dtype: optional dtype floating params are cast to.
    optimizer_state: optional tree stored as `state/param_states` (default `{}`).
    use_ocdbt: OCDBT storage (T5X's choice); False writes one zarr folder per array.
    overwrite: replace an existing `checkpoint_<step>` (else FileExistsError).
  Returns:
    The path of the written `checkpoint_<step>` directory.
  Raises:
    FileExistsError: `checkpoint_<step>` exists and `overwrite` is False.
  """
  import orbax.checkpoint as ocp
  directory = os.path.abspath(os.fspath(directory))
  final = os.path.join(directory, f'checkpoint_{int(step)}')
  if os.path.exists(final):
    if not overwrite:
      raise FileExistsError(f'{final} exists; pass overwrite=True to replace it.')
    shutil.rmtree(final)
  state = {'target': jax.tree.map(lambda x: _to_host(x, dtype), params),
           'state': {'step': np.asarray(step, np.int32),
                     'param_states': jax.tree.map(_to_host, optimizer_state)
                     if optimizer_state is not None else {}}}
  manager = ocp.CheckpointManager(
      directory,
      item_handlers={_STATE_DIR: ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt)},
      options=ocp.CheckpointManagerOptions(step_prefix='checkpoint', create=True))
  try:
    manager.save(int(step), args=ocp.args.Composite(**{_STATE_DIR: ocp.args.PyTreeSave(state)}),
                 force=True)
    manager.wait_until_finished()
  finally:
    manager.close()
  return final


# ----------------------------------------------------------------------------
# Hugging Face T5.
# ----------------------------------------------------------------------------

_HF_ACTS = {  # HF feed_forward_proj -> T5Config.mlp_activations (numerics identical).
    'relu': ('relu',),
    'gated-gelu': ('gelu', 'linear'),  # HF maps gated-gelu to gelu_new (tanh approx.).
    'gated-gelu_new': ('gelu', 'linear'),
    'gelu_new': ('gelu',),
    'gated-relu': ('relu', 'linear'),
    'gated-silu': ('silu', 'linear'),
    'silu': ('silu',),
}
_ACTS_HF = {('relu',): 'relu', ('gelu', 'linear'): 'gated-gelu', ('gelu',): 'gelu_new',
            ('relu', 'linear'): 'gated-relu', ('silu', 'linear'): 'gated-silu',
            ('silu',): 'silu', ('swish', 'linear'): 'gated-silu', ('swish',): 'silu'}


def _hf_config_as_dict(config_json) -> dict:
  if isinstance(config_json, Mapping):
    return dict(config_json)
  if hasattr(config_json, 'to_dict'):
    d = config_json.to_dict()
    # transformers 5.x keeps the untied request as an attribute only.
    if hasattr(config_json, 'scale_decoder_outputs'):
      d['scale_decoder_outputs'] = config_json.scale_decoder_outputs
    return d
  path = os.fspath(config_json)
  if os.path.isdir(path):
    path = os.path.join(path, 'config.json')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'No Hugging Face config at {path!r} (expected config.json).')
  with open(path) as f:
    return json.load(f)


def _hf_tied(cfg: Mapping[str, Any]) -> bool:
  """Whether an HF T5 config ties (and scales) the output layer.

  transformers < 5 writes `tie_word_embeddings: false` for T5 1.1; transformers 5.x
  writes `tie_word_embeddings: true, scale_decoder_outputs: false`.
  """
  if cfg.get('scale_decoder_outputs') is False:
    return False
  return cfg.get('tie_word_embeddings', True) is not False


def t5_config_from_hf(config_json, **overrides) -> T5Config:
  """Maps a Hugging Face `T5Config` to ours (inverse of `hf_config_dict`).

  Args:
    config_json: a dict, a path to `config.json` or to its folder, or a
      `transformers.T5Config`.
    **overrides: T5Config fields to set (e.g. `dtype=jnp.bfloat16`).
  Returns:
    A `T5Config` with vocab_size, emb_dim (d_model), num_heads, head_dim (d_kv),
    mlp_dim (d_ff), num_encoder_layers (num_layers), num_decoder_layers,
    mlp_activations (from feed_forward_proj: 'relu' → ('relu',), 'gated-gelu' →
    ('gelu', 'linear')), logits_via_embedding (tied output layer: T5 1.0),
    dropout_rate and the relative-attention bucket settings.
  Raises:
    FileNotFoundError: no config.json at the path.
    ValueError: an activation or layer-norm epsilon this model cannot reproduce.
  """
  cfg = _hf_config_as_dict(config_json)
  proj = cfg.get('feed_forward_proj', 'relu')
  if proj not in _HF_ACTS:
    raise ValueError(f'feed_forward_proj={proj!r} is not supported (exact-erf gelu differs '
                     f'from T5X\'s tanh gelu); supported: {sorted(_HF_ACTS)}.')
  eps = cfg.get('layer_norm_epsilon', 1e-6)
  if abs(eps - 1e-6) > 1e-12:
    raise ValueError(f'layer_norm_epsilon={eps} but this T5 implementation uses 1e-6.')
  num_layers = cfg.get('num_layers', 6)
  fields = dict(
      vocab_size=int(cfg.get('vocab_size', 32128)), emb_dim=int(cfg.get('d_model', 512)),
      num_heads=int(cfg.get('num_heads', 8)), head_dim=int(cfg.get('d_kv', 64)),
      mlp_dim=int(cfg.get('d_ff', 2048)), num_encoder_layers=int(num_layers),
      num_decoder_layers=int(cfg.get('num_decoder_layers') or num_layers),
      mlp_activations=_HF_ACTS[proj], logits_via_embedding=_hf_tied(cfg),
      dropout_rate=float(cfg.get('dropout_rate', 0.1)),
      relative_attention_num_buckets=int(cfg.get('relative_attention_num_buckets', 32)),
      relative_attention_max_distance=int(cfg.get('relative_attention_max_distance', 128)))
  fields.update(overrides)
  return T5Config(**fields)


def hf_config_dict(config: T5Config) -> dict:
  """The HF `config.json` dict of a `T5ForConditionalGeneration` equal to `config`.

  Raises:
    ValueError: `config.mlp_activations` has no HF equivalent.
  """
  acts = tuple(config.mlp_activations)
  if acts not in _ACTS_HF:
    raise ValueError(f'mlp_activations={acts} has no Hugging Face T5 equivalent; '
                     f'supported: {sorted(_ACTS_HF)}.')
  tied = bool(config.logits_via_embedding)
  return {
      'architectures': ['T5ForConditionalGeneration'], 'model_type': 't5',
      'vocab_size': config.vocab_size, 'd_model': config.emb_dim, 'd_kv': config.head_dim,
      'd_ff': config.mlp_dim, 'num_layers': config.num_encoder_layers,
      'num_decoder_layers': config.num_decoder_layers, 'num_heads': config.num_heads,
      'relative_attention_num_buckets': config.relative_attention_num_buckets,
      'relative_attention_max_distance': config.relative_attention_max_distance,
      'dropout_rate': float(config.dropout_rate), 'layer_norm_epsilon': 1e-6,
      'initializer_factor': 1.0, 'feed_forward_proj': _ACTS_HF[acts],
      'is_encoder_decoder': True, 'use_cache': True, 'pad_token_id': 0,
      'eos_token_id': 1, 'decoder_start_token_id': 0,
      # transformers < 5 reads tie_word_embeddings; 5.x reads both (see NOTES).
      'tie_word_embeddings': tied, 'scale_decoder_outputs': tied,
  }


# --- safetensors (own minimal reader/writer: numpy, incl. bfloat16, no torch) ---

_ST_DTYPES = {'F64': np.float64, 'F32': np.float32, 'F16': np.float16,
              'BF16': jnp.bfloat16, 'I64': np.int64, 'I32': np.int32, 'I16': np.int16,
              'I8': np.int8, 'U8': np.uint8, 'BOOL': np.bool_}


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  data = np.memmap(path, dtype=np.uint8, mode='r')
  (header_len,) = struct.unpack('<Q', bytes(data[:8]))
  header = json.loads(bytes(data[8:8 + header_len]))
  base = 8 + header_len
  out = {}
  for name, info in header.items():
    if name == '__metadata__':
      continue
    if info['dtype'] not in _ST_DTYPES:
      raise ValueError(f'{path}: tensor {name} has unsupported dtype {info["dtype"]}.')
    start, end = info['data_offsets']
    dt = np.dtype(_ST_DTYPES[info['dtype']])
    out[name] = np.frombuffer(data, dtype=dt, count=(end - start) // dt.itemsize,
                              offset=base + start).reshape(info['shape'])
  return out


def _write_safetensors(tensors: Mapping[str, np.ndarray], path: str) -> None:
  names = {np.dtype(v): k for k, v in _ST_DTYPES.items()}
  header, offset, blobs = {}, 0, []
  for name in sorted(tensors):
    arr = np.ascontiguousarray(tensors[name])
    blob = arr.tobytes()
    header[name] = {'dtype': names[arr.dtype], 'shape': list(arr.shape),
                    'data_offsets': [offset, offset + len(blob)]}
    offset += len(blob)
    blobs.append(blob)
  header['__metadata__'] = {'format': 'pt'}
  raw = json.dumps(header, separators=(',', ':')).encode()
  raw += b' ' * (-len(raw) % 8)
  with open(path, 'wb') as f:
    f.write(struct.pack('<Q', len(raw)))
    f.write(raw)
    for blob in blobs:
      f.write(blob)


def _load_torch_bin(path: str) -> dict[str, np.ndarray]:
  import torch
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: _to_numpy(v) for k, v in state.items()}


def _to_numpy(v) -> np.ndarray:
  if hasattr(v, 'detach'):  # torch.Tensor
    v = v.detach().cpu()
    if v.is_floating_point():
      v = v.float()
    return v.numpy()
  return np.asarray(v)


def _load_hf_folder(folder: str) -> dict[str, np.ndarray]:
  candidates = ('model.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin',
                'pytorch_model.bin.index.json')
  for name in candidates:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
      continue
    if name.endswith('.index.json'):
      with open(path) as f:
        files = sorted(set(json.load(f)['weight_map'].values()))
      state = {}
      for shard in files:
        shard_path = os.path.join(folder, shard)
        state.update(_read_safetensors(shard_path) if shard.endswith('.safetensors')
                     else _load_torch_bin(shard_path))
      return state
    return _read_safetensors(path) if name.endswith('.safetensors') else _load_torch_bin(path)
  raise FileNotFoundError(f'No Hugging Face weights in {folder!r}; expected one of '
                          f'{list(candidates)}.')


def _infer_config(state: Mapping[str, np.ndarray]) -> T5Config:
  """A T5Config from HF weight shapes alone (T5 1.0 if `wi`, T5 1.1 if `wi_0`/`wi_1`)."""
  shared = state['shared.weight']
  vocab, d_model = shared.shape
  rel = state['encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight']
  buckets, heads = rel.shape
  q = state['encoder.block.0.layer.0.SelfAttention.q.weight']
  count = lambda stack: 1 + max(int(k.split('.')[2]) for k in state
                                if k.startswith(f'{stack}.block.'))
  gated = 'encoder.block.0.layer.1.DenseReluDense.wi_0.weight' in state
  wi = state['encoder.block.0.layer.1.DenseReluDense.' + ('wi_0' if gated else 'wi') + '.weight']
  lm_head = state.get('lm_head.weight')
  tied = lm_head is None or np.array_equal(np.asarray(lm_head), np.asarray(shared))
  return T5Config(vocab_size=vocab, emb_dim=d_model, num_heads=heads, head_dim=q.shape[0] // heads,
                  mlp_dim=wi.shape[0], num_encoder_layers=count('encoder'),
                  num_decoder_layers=count('decoder'),
                  mlp_activations=('gelu', 'linear') if gated else ('relu',),
                  logits_via_embedding=tied, relative_attention_num_buckets=buckets)


def _hf_layout(config: T5Config):
  """[(hf name, our path tuple, transpose)] for every param of `config`."""
  gated = len(config.mlp_activations) > 1
  wis = ([('wi_0', 'wi_0'), ('wi_1', 'wi_1')] if gated else [('wi', 'wi')]) + [('wo', 'wo')]
  out = [('shared.weight', ('token_embedder', 'embedding'), False)]
  for stack, n, ours in (('encoder', config.num_encoder_layers, 'encoder'),
                         ('decoder', config.num_decoder_layers, 'decoder')):
    out.append((f'{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight',
                (ours, 'relpos_bias', 'rel_embedding'), True))
    out.append((f'{stack}.final_layer_norm.weight', (ours, f'{ours}_norm', 'scale'), False))
    for i in range(n):
      hf = f'{stack}.block.{i}.layer'
      me = (ours, f'layers_{i}')
      if stack == 'encoder':
        blocks = [('0', 'SelfAttention', 'attention', 'pre_attention_layer_norm')]
        mlp_idx, mlp_norm = '1', 'pre_mlp_layer_norm'
      else:
        blocks = [('0', 'SelfAttention', 'self_attention', 'pre_self_attention_layer_norm'),
                  ('1', 'EncDecAttention', 'encoder_decoder_attention',
                   'pre_cross_attention_layer_norm')]
        mlp_idx, mlp_norm = '2', 'pre_mlp_layer_norm'
      for idx, hf_attn, attn, norm in blocks:
        for proj, our_proj in (('q', 'query'), ('k', 'key'), ('v', 'value'), ('o', 'out')):
          out.append((f'{hf}.{idx}.{hf_attn}.{proj}.weight', me + (attn, our_proj, 'kernel'),
                      True))
        out.append((f'{hf}.{idx}.layer_norm.weight', me + (norm, 'scale'), False))
      for hf_w, our_w in wis:
        out.append((f'{hf}.{mlp_idx}.DenseReluDense.{hf_w}.weight',
                    me + ('mlp', our_w, 'kernel'), True))
      out.append((f'{hf}.{mlp_idx}.layer_norm.weight', me + (mlp_norm, 'scale'), False))
  if not config.logits_via_embedding:
    out.append(('lm_head.weight', ('decoder', 'logits_dense', 'kernel'), True))
  return out


_HF_IGNORED = re.compile(r'(encoder|decoder)\.embed_tokens\.weight|'
                         r'decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias'
                         r'\.weight')


def import_hf_t5(path_or_state_dict, config=None, dtype=jnp.float32) -> PyTree:
  """Maps a Hugging Face T5 checkpoint to this package's (T5X's) param tree.

  The inverse of `export_hf_t5` (cf. T5X's `checkpoint_importer`, which maps
  Mesh-TF checkpoints the same way): Linear weights `[out, in]` become kernels
  `[in, out]`; `relative_attention_bias [buckets, heads]` (HF keeps it in block 0
  of each stack) becomes `relpos_bias/rel_embedding [heads, buckets]`;
  `shared` is `token_embedder/embedding`; for an untied model (T5 1.1)
  `lm_head [vocab, d_model]` becomes `decoder/logits_dense/kernel [d_model, vocab]`.

  Args:
    path_or_state_dict: an HF model folder (`model.safetensors`, sharded
      safetensors with `model.safetensors.index.json`, or `pytorch_model.bin`;
      `config.json` beside it), or a state dict name → torch tensor / array.
    config: our `T5Config`, or an HF config (dict, `transformers.T5Config`, path
      to config.json). Default: the folder's config.json, else inferred from the
      weight shapes (gated → gated-gelu, tied iff `lm_head` is absent or equals
      `shared`).
    dtype: dtype of the returned arrays (float32 by default; params are float32
      in this package).
  Returns:
    Params (nested dict of numpy arrays) that `t5.check_params(params, config)`
    accepts.
  Raises:
    FileNotFoundError: a folder without weights or config.
    ValueError: a missing or unused weight, a shape the config does not expect,
      or an `lm_head` that differs from `shared` under a tied config.
  Note:
    An untied config with no `lm_head` weight (what transformers 5.x saves when
    it tied the head of a T5 1.1 built from a config) maps `shared` to
    `logits_dense`, reproducing what transformers computes (unscaled, tied).
  """
  folder = None
  if isinstance(path_or_state_dict, (str, os.PathLike)):
    folder = os.fspath(path_or_state_dict)
    if not os.path.isdir(folder):
      raise FileNotFoundError(f'No Hugging Face T5 folder at {folder!r} (expected a folder '
                              'with model.safetensors or pytorch_model.bin and config.json).')
    state = _load_hf_folder(folder)
  else:
    state = {k: _to_numpy(v) for k, v in dict(path_or_state_dict).items()}
  if 'shared.weight' not in state and 'encoder.embed_tokens.weight' in state:
    state['shared.weight'] = state['encoder.embed_tokens.weight']

  if config is None:
    config = (t5_config_from_hf(folder) if folder is not None
              and os.path.isfile(os.path.join(folder, 'config.json')) else _infer_config(state))
  elif not isinstance(config, T5Config):
    config = t5_config_from_hf(config)

  if 'lm_head.weight' not in state and not config.logits_via_embedding:
    warnings.warn('Untied T5 config but the checkpoint has no lm_head.weight: using the '
                  'shared embedding as decoder/logits_dense (what transformers 5.x does).')
    state['lm_head.weight'] = state['shared.weight']
  if config.logits_via_embedding and 'lm_head.weight' in state and not np.array_equal(
      np.asarray(state['lm_head.weight']), np.asarray(state['shared.weight'])):
    raise ValueError('The config ties the output layer (T5 1.0, logits_via_embedding=True) but '
                     'the checkpoint has an lm_head.weight that differs from shared.weight; '
                     'use an untied (T5 1.1) config.')

  used = {'lm_head.weight'}
  items = []
  for hf_name, path, transpose in _hf_layout(config):
    if hf_name not in state:
      raise ValueError(f'The Hugging Face checkpoint lacks {hf_name} (needed for '
                       f'{"/".join(path)}); does the config match the weights?')
    used.add(hf_name)
    value = np.asarray(state[hf_name])
    if transpose:
      value = value.T
    items.append((path, np.ascontiguousarray(value.astype(dtype))))
  unused = sorted(k for k in state if k not in used and not _HF_IGNORED.fullmatch(k))
  if unused:
    raise ValueError(f'The Hugging Face checkpoint has weights this T5Config does not use, '
                     f'e.g. {unused[0]} {tuple(np.shape(state[unused[0]]))}; check '
                     'num_layers / feed_forward_proj.')
  params = _unflatten(items)
  t5.check_params(params, config)
  return params


def load_hf_t5(folder: str | os.PathLike, dtype=jnp.float32, **config_overrides
               ) -> tuple[PyTree, T5Config]:
  """`(params, config)` of an HF T5 folder (`import_hf_t5` + `t5_config_from_hf`)."""
  config = t5_config_from_hf(folder, **config_overrides)
  return import_hf_t5(folder, config, dtype=dtype), config


def export_hf_t5(params: PyTree, config: T5Config, out_dir: str | os.PathLike,
                 dtype=np.float32) -> str:
  """Writes params as a folder `T5ForConditionalGeneration.from_pretrained` loads.

  Inverse of `import_hf_t5`: `model.safetensors` (HF names, Linear weights
  `[out, in]`, `shared.weight`, plus `lm_head.weight` for untied configs) and
  `config.json` (`hf_config_dict(config)`, with `decoder_start_token_id` 0 for
  generation). The HF model's logits equal `Transformer(config)`'s.

  Args:
    params: params of `Transformer(config)`.
    config: their config.
    out_dir: folder to write (created; existing files of the same names replaced).
    dtype: dtype of the stored weights (float32 default; `jnp.bfloat16` works).
  Returns:
    `out_dir` as a string.
  Raises:
    ValueError: params do not match `config`, or activations HF lacks.
  """
  t5.check_params(params, config)
  hf_cfg = hf_config_dict(config)
  flat = {tuple(str(getattr(k, 'key', k)) for k in p): v
          for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  tensors = {}
  for hf_name, path, transpose in _hf_layout(config):
    value = np.asarray(jax.device_get(flat[path]))
    if transpose:
      value = value.T
    tensors[hf_name] = np.ascontiguousarray(value.astype(dtype))
  out_dir = os.fspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  hf_cfg['torch_dtype'] = hf_cfg['dtype'] = jnp.dtype(dtype).name
  _write_safetensors(tensors, os.path.join(out_dir, 'model.safetensors'))
  with open(os.path.join(out_dir, 'config.json'), 'w') as f:
    json.dump(hf_cfg, f, indent=2, sort_keys=True)
  with open(os.path.join(out_dir, 'generation_config.json'), 'w') as f:
    json.dump({'decoder_start_token_id': 0, 'eos_token_id': 1, 'pad_token_id': 0}, f, indent=2)
  return out_dir
