"""Reading T5X msgpack checkpoints: the legacy layout and T5X's early Orbax layout.

* **Legacy** (`t5x.checkpoints.Checkpointer`): a msgpack file `checkpoint` =
  `{'version': 3, 'optimizer': state_dict}` whose array leaves are inlined or are
  TensorStore spec dicts (`driver: zarr`, `kvstore.path` relative to the
  checkpoint directory) pointing at zarr folders beside it.
* **Early Orbax**: the same file holding `{'_optimizer': state_dict, ...}` with
  leaves `'PLACEHOLDER://<name>'` naming zarr folders `<name>/` beside it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import jax
import numpy as np

from specdec_jax.util import jsonio
from specdec_jax.checkpoints import integrity
from specdec_jax.checkpoints import locations as loc
from specdec_jax.checkpoints import tree as tree_lib
from specdec_jax.checkpoints.config_check import check_against_config
from specdec_jax.models.config import T5Config

PyTree = Any
PLACEHOLDER = 'PLACEHOLDER://'


def state_dict_of(contents: Mapping[str, Any], where: str) -> Mapping[str, Any]:
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


def resolve_kvstore(spec: dict, ckpt_dir: str) -> dict:
  """A copy of a T5X TensorStore spec with its relative path made absolute."""
  spec = json.loads(json.dumps(spec, default=jsonio.strict_default))
  kvstore = spec.get('kvstore')
  if isinstance(kvstore, str):  # Already a URL.
    return spec
  kvstore = dict(kvstore or {})
  rel = kvstore.pop('path', None)
  if rel is None:  # tensorstore < 0.1.14 kept `path` at the top level.
    rel = spec.pop('path', '')
  else:
    spec.pop('path', None)
  if loc.is_url(ckpt_dir):
    spec['kvstore'] = loc.join(ckpt_dir, rel).rstrip('/') + '/'
  else:
    spec['kvstore'] = {'driver': 'file', 'path': os.path.join(ckpt_dir, rel)}
  return spec


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


def _placeholder_spec(name: str, ckpt_dir: str, hint) -> tuple[dict, bool]:
  """TensorStore spec for an early-Orbax `PLACEHOLDER://name` leaf.

  Returns (spec, assume_metadata). Without a `.zarray` file beside the chunks,
  `hint` (shape/dtype, optionally chunks/compressor) supplies the metadata.
  """
  folder = loc.join(ckpt_dir, name)
  kvstore = ((folder.rstrip('/') + '/') if loc.is_url(ckpt_dir)
             else {'driver': 'file', 'path': folder})
  names = loc.children(folder)
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
    compressor = _sniff_compressor(loc.read_bytes(loc.join(folder, chunk_keys[0]))[:8])
  metadata = {'shape': list(shape), 'chunks': list(chunks), 'compressor': compressor}
  return {'driver': 'zarr', 'dtype': np.dtype(dtype).name, 'kvstore': kvstore,
          'metadata': metadata}, True


def _open_ts(spec: dict, assume_metadata: bool):
  import tensorstore as ts
  if assume_metadata:
    return ts.open(spec, open=True, assume_metadata=True)
  return ts.open(spec, open=True, read=True)


def read_msgpack(msgpack_path: str, subtree: str | None, array_metadata=None,
                 dtype=None, config: T5Config | None = None, sharding_of=None,
                 exclude: tuple[str, ...] = ()) -> PyTree:
  """Reads one subtree of a msgpack checkpoint; TensorStore leaves outside it stay unread.

  With `config`, the subtree (the params) is checked against it with every
  array's shape from its spec or `.zarray` before any array data is read.
  With `sharding_of` (`path tuple -> jax.sharding.Sharding`), each array is
  restored straight into its sharding: every device's shard is read from
  TensorStore on its own (`jax.make_array_from_callback`), so a process reads
  only the shards its devices hold and no full host copy is made.
  Children of the subtree named in `exclude` are left out (and never opened).

  Raises:
    integrity.TruncatedCheckpoint: the msgpack file ends early.
    integrity.MissingChunks: an array's chunk files or folder are missing (it would read
      as zeros), naming the params.
  """
  ckpt_dir = loc.parent(msgpack_path)
  contents = integrity.restore_msgpack(msgpack_path)
  state = state_dict_of(contents, msgpack_path)
  node = tree_lib.select(state, subtree, msgpack_path)
  items = [(path, leaf) for path, leaf in tree_lib.flatten(node)
           if not (path and path[0] in exclude)]

  # 1. Open every TensorStore leaf (metadata only), concurrently.
  opened: dict[int, Any] = {}
  pending = {}
  for i, (_, leaf) in enumerate(items):
    if tree_lib.is_ts_spec(leaf):
      spec = resolve_kvstore(leaf, ckpt_dir)
      meta = spec.get('metadata') or {}
      # Like T5X, let the stored .zarray decide chunks/compressor when it exists.
      light = dict(spec, metadata={k: v for k, v in meta.items()
                                   if k not in ('chunks', 'compressor')})
      pending[i] = (spec, _open_ts(light, False))
    elif isinstance(leaf, str) and leaf.startswith(PLACEHOLDER):
      name = leaf[len(PLACEHOLDER):]
      spec, assume = _placeholder_spec(name, ckpt_dir, _lookup_hint(array_metadata, name))
      pending[i] = (None, _open_ts(spec, assume))
  where = f'The checkpoint at {msgpack_path!r}'
  for i, (spec, future) in pending.items():
    try:
      opened[i] = future.result()
    except ValueError as e:
      if spec is None or 'NOT_FOUND' not in str(e) or 'metadata' not in str(e).lower():
        raise integrity.as_damage(e, '/'.join(items[i][0]), where) from e
      # No .zarray beside the chunks (as in T5X's own testdata): the spec's
      # metadata is complete for what T5X writes, so assume it.
      opened[i] = _open_ts(spec, True).result()

  # 2. Every chunk there (a missing one would read as zeros), every param accounted for,
  #    before reading any data.
  integrity.raise_missing(
      [('/'.join(items[i][0]), why) for i, store in sorted(opened.items())
       if (why := integrity.store_problem(store)) is not None],
      f'The checkpoint at {msgpack_path!r}')
  if config is not None:
    found = [(path, jax.ShapeDtypeStruct(tuple(opened[i].shape), opened[i].dtype.numpy_dtype)
              if i in opened else leaf) for i, (path, leaf) in enumerate(items)]
    check_against_config(found, config, msgpack_path)

  # 3. Read.
  if sharding_of is not None:
    out = []
    for i, (path, leaf) in enumerate(items):
      try:
        out.append((path, _read_sharded(opened.get(i), leaf, sharding_of(path), dtype)))
      except ValueError as e:  # a chunk cut short or overwritten, read shard by shard
        raise integrity.as_damage(e, '/'.join(path), where) from e
    return tree_lib.unflatten(out)
  reads = {i: store.read() for i, store in opened.items()}
  out = []
  for i, (path, leaf) in enumerate(items):
    try:
      value = np.asarray(reads[i].result()) if i in reads else leaf
    except ValueError as e:  # a chunk cut short or overwritten
      raise integrity.as_damage(e, '/'.join(path), where) from e
    if dtype is not None and tree_lib.is_float(value):
      value = np.asarray(value).astype(dtype)
    out.append((path, value))
  return tree_lib.unflatten(out)


def _read_sharded(store, leaf, sharding, dtype):
  """One leaf as a `jax.Array` with `sharding`, each shard read on its own from `store`
  (or sliced from the inline msgpack value `leaf`); empty nodes stay `{}`."""
  if store is None and not isinstance(leaf, (np.ndarray, np.generic)):
    return leaf

  def cast(x):
    x = np.asarray(x)
    return x.astype(dtype) if dtype is not None and tree_lib.is_float(x) else x

  if store is None:
    value = np.asarray(leaf)
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: cast(value[idx]))
  return jax.make_array_from_callback(tuple(store.shape), sharding,
                                      lambda idx: cast(store[idx].read().result()))
