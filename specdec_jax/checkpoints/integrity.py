"""Is a checkpoint whole? Damage that would otherwise load as if nothing were wrong.

TensorStore reads a zarr chunk that is missing as the array's fill value, and a zarr
folder that is missing entirely (when the msgpack spec carries the metadata) as an array
of fill values: a checkpoint with a deleted MLP kernel loads, and decodes "quietly worse".
A truncated msgpack file fails deep inside msgpack with "Unpack failed: incomplete input".
A step folder that a crashed or partial copy left behind is the newest step, and would be
chosen over the complete one before it. This module names each of these:

* `DamagedCheckpoint` (a `ValueError`): the base of every "the files are damaged" error,
  as opposed to "the files do not fit the config" (`config_check`).
* `TruncatedCheckpoint`: the msgpack file ends early (or is empty).
* `MissingChunks`: zarr arrays whose chunk files (or whole folder) are missing.
* `step_problem(step_dir)`: why a `checkpoint_<step>/` folder is not a complete
  checkpoint (None when it is), so that `find_checkpoint` takes the newest complete step.

Only arrays whose zarr metadata has no fill value (`"fill_value": null`, what T5X's
`_get_spec` and orbax write) are checked chunk by chunk: TensorStore then writes every
chunk, so a missing one is damage. With a fill value, chunks equal to it may be left out on
purpose, and cannot be told from lost ones.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from specdec_jax.checkpoints import locations as loc


class DamagedCheckpoint(ValueError):
  """The checkpoint's files are damaged (truncated, missing chunks, non-finite values)."""


class TruncatedCheckpoint(DamagedCheckpoint):
  """The msgpack file of a checkpoint ends before its contents do (or is empty)."""


class MissingChunks(DamagedCheckpoint):
  """Zarr arrays of a checkpoint lack chunk files, or their whole folder."""


# TensorStore status codes of a read that found damaged data (cut, garbage, wrong metadata).
DAMAGE_CODES = ('NOT_FOUND', 'FAILED_PRECONDITION', 'DATA_LOSS', 'OUT_OF_RANGE')


def as_damage(error: Exception, name: str, where: str) -> Exception:
  """`DamagedCheckpoint` naming param `name` for TensorStore's error reading it, else `error`.

  A chunk file cut short or overwritten, or a `.zarray` whose shape no longer matches the
  checkpoint's spec, fails in TensorStore with one of `DAMAGE_CODES` (or "Expected ...
  but received" for metadata); the message then says "damaged", not "does not fit".
  """
  text = str(error)
  if not (any(code in text for code in DAMAGE_CODES) or 'but received' in text):
    return error
  return DamagedCheckpoint(f'{where} is damaged: array {name} cannot be read '
                           f'({text.splitlines()[0]}). Copy the checkpoint again, or load an '
                           'earlier step.')


def restore_msgpack(path: str):
  """The msgpack contents of the checkpoint file at `path` (flax's `msgpack_restore`).

  Raises:
    TruncatedCheckpoint: the file is empty or ends early (msgpack: "incomplete input"),
      naming the file, its size and the fix (an earlier step, or a fresh copy).
    FileNotFoundError: no file at `path`.
  """
  from flax import serialization  # pylint: disable=import-outside-toplevel
  data = loc.read_bytes(path)
  try:
    if not data:
      raise ValueError('incomplete input (empty file)')
    return serialization.msgpack_restore(data)
  except ValueError as e:  # msgpack's "Unpack failed: incomplete input"; ExtraData is too
    if 'incomplete' not in str(e) and 'extra data' not in str(e):
      raise
    raise TruncatedCheckpoint(
        f'The checkpoint file {path!r} is truncated or damaged ({len(data):,} bytes; msgpack: '
        f'{e}). It was cut off while being written or copied: copy it again, or load an '
        'earlier step (restore_step / the model directory without this step).') from e


def expected_chunks(shape: Iterable[int], chunks: Iterable[int]) -> int:
  """Number of chunk files a zarr array of `shape` split into `chunks` has (1 for a scalar)."""
  shape = tuple(shape)
  if not shape:
    return 1
  return math.prod(math.ceil(n / c) if c else 0 for n, c in zip(shape, chunks or shape))


def _chunk_keys(keys: Iterable[bytes | str]) -> int:
  names = [k.decode() if isinstance(k, bytes) else k for k in keys]
  return sum(1 for k in names if not k.rsplit('/', 1)[-1].startswith('.'))


def store_problem(store: Any) -> str | None:
  """Why an opened zarr `tensorstore.TensorStore` is incomplete, or None.

  Counts the chunk keys in the store's kvstore against its chunk grid (only for arrays
  without a fill value, see the module docstring). Reads no array data.
  """
  try:
    metadata = store.spec().to_json().get('metadata') or {}
  except Exception:  # pylint: disable=broad-except  (not a zarr store: nothing to count)
    return None
  if metadata.get('fill_value', None) is not None or metadata.get('zarr_format', 2) != 2:
    return None
  want = expected_chunks(store.shape, store.chunk_layout.read_chunk.shape)
  have = _chunk_keys(store.kvstore.list().result())
  if have >= want:
    return None
  if have == 0:
    return 'its folder or every chunk file is missing'
  return f'{want - have} of its {want} chunk files are missing'


def raise_missing(problems: list[tuple[str, str]], where: str) -> None:
  """Raises `MissingChunks` for `[(param name, problem)]`, if any, naming up to five."""
  if not problems:
    return
  listed = '; '.join(f'{name}: {why}' for name, why in problems[:5])
  more = f' (and {len(problems) - 5} more)' if len(problems) > 5 else ''
  raise MissingChunks(
      f'{where} is damaged ({len(problems)} array(s) incomplete; TensorStore would read the '
      f'missing parts as zeros): {listed}{more}. Copy the checkpoint again, or load an '
      'earlier step.')


def orbax_problems(state_dir: str, paths: Iterable[tuple[str, ...]]
                   ) -> list[tuple[str, str]]:
  """`[('/'-joined name, problem)]` for the orbax arrays at `paths` that miss chunks.

  Lists the keys of the state folder once (through the OCDBT kvstore when the folder is an
  OCDBT database, else the folder itself) and checks each array's zarr v2 metadata against
  its chunk keys. Arrays stored otherwise (zarr v3, inline in the metadata) are skipped.
  """
  import tensorstore as ts  # pylint: disable=import-outside-toplevel
  base = state_dir if loc.is_url(state_dir) else 'file://' + state_dir
  base = base.rstrip('/') + '/'
  ocdbt = loc.is_file(loc.join(state_dir, 'manifest.ocdbt'))
  spec = {'driver': 'ocdbt', 'base': base} if ocdbt else base
  try:
    kv = ts.KvStore.open(spec).result()
    keys = [k.decode() for k in kv.list().result()]
  except Exception as e:  # pylint: disable=broad-except
    return [('(the whole state)', f'its {"OCDBT database" if ocdbt else "folder"} cannot be '
             f'listed: {str(e).splitlines()[0]}')]
  by_array: dict[str, list[str]] = {}
  for key in keys:
    head, _, rest = key.partition('/')
    by_array.setdefault(head, []).append(rest)
  problems = []
  for path in paths:
    name, shown = '.'.join(path), '/'.join(path)
    inside = by_array.get(name)
    if inside is None:
      problems.append((shown, 'no data for it in the state folder'))
      continue
    if '.zarray' not in inside:
      continue
    meta = json.loads(bytes(kv.read(f'{name}/.zarray').result().value))
    if meta.get('fill_value') is not None:
      continue
    want = expected_chunks(meta['shape'], meta['chunks'])
    have = _chunk_keys(inside)
    if have < want:
      problems.append((shown, f'{want - have} of its {want} chunk files are missing'))
  return problems


def step_problem(path: str) -> str | None:
  """Why the checkpoint folder (or file) at `path` is not complete, or None when it is.

  Cheap checks only (no array is read): a `checkpoint_<step>/` folder must hold either a
  `checkpoint` msgpack file that parses to its end, or an Orbax `state/` folder with a
  `_METADATA` file that parses and, for OCDBT, its `manifest.ocdbt`.
  """
  if loc.is_file(path):
    try:
      restore_msgpack(path)
    except TruncatedCheckpoint:
      return 'its msgpack file is truncated'
    return None
  names = loc.children(path)
  if names is None:
    return 'it is not a folder'
  if not names:
    return 'it is empty'
  if loc.MSGPACK_FILE in names and loc.is_file(loc.join(path, loc.MSGPACK_FILE)):
    return step_problem(loc.join(path, loc.MSGPACK_FILE))
  state = loc.join(path, loc.STATE_DIR) if loc.STATE_DIR in names else path
  inner = loc.children(state) or []
  if '_METADATA' not in inner:
    return (f'it holds neither a `{loc.MSGPACK_FILE}` file nor an Orbax state with a '
            '_METADATA file (a save that did not finish)')
  try:
    json.loads(loc.read_bytes(loc.join(state, '_METADATA')))
  except ValueError:
    return 'its Orbax _METADATA file is truncated'
  if any(n.startswith('ocdbt.process_') for n in inner) and 'manifest.ocdbt' not in inner:
    return 'its Orbax OCDBT manifest is missing (a save that did not finish)'
  return None
