"""Checkpoint locations: local paths or TensorStore kvstore URLs, and `find_checkpoint`."""

from __future__ import annotations

import os
import re

MSGPACK_FILE = 'checkpoint'
STATE_DIR = 'state'
_STEP_DIR_RE = re.compile(r'checkpoint_(\d+)')
_BARE_STEP_DIR_RE = re.compile(r'\d+')  # Orbax's default step folders (e.g. T5X's tiny_orbax/1).


def is_url(path: str) -> bool:
  return '://' in path


def join(base: str, *names: str) -> str:
  if is_url(base):
    return '/'.join([base.rstrip('/')] + [n.strip('/') for n in names])
  return os.path.join(base, *names)


def parent(path: str) -> str:
  if is_url(path):
    return path.rstrip('/').rsplit('/', 1)[0]
  return os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
  return path.rstrip('/').rsplit('/', 1)[-1] if is_url(path) else os.path.basename(
      os.path.normpath(path))


def _kvstore(url_dir: str):
  import tensorstore as ts
  return ts.KvStore.open(url_dir.rstrip('/') + '/').result()


def is_file(path: str) -> bool:
  if not is_url(path):
    return os.path.isfile(path)
  parent_dir, name = path.rstrip('/').rsplit('/', 1)
  return _kvstore(parent_dir).read(name).result().state == 'value'


def children(path: str) -> list[str] | None:
  """Names directly inside `path`, or None when it is not a directory."""
  if not is_url(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else None
  keys = _kvstore(path).list().result()
  if not keys:
    return None
  return sorted({k.decode().split('/', 1)[0] for k in keys})


def read_bytes(path: str) -> bytes:
  if not is_url(path):
    with open(path, 'rb') as f:
      return f.read()
  parent_dir, name = path.rstrip('/').rsplit('/', 1)
  result = _kvstore(parent_dir).read(name).result()
  if result.state != 'value':
    raise FileNotFoundError(f'{path} does not exist.')
  return bytes(result.value)


_EXPECTED = ('a T5X checkpoint: a checkpoint_<step>/ directory holding a `checkpoint` msgpack '
             'file (legacy layout) or a `state/` Orbax directory, a msgpack checkpoint file '
             'itself, an Orbax `state/` directory, or a directory of checkpoint_<step>/ '
             'folders')


def _step_dirs(path: str) -> dict[int, str]:
  names = children(path) or []
  out = {}
  for name in names:  # `checkpoint_<step>` wins over a bare `<step>`.
    if _BARE_STEP_DIR_RE.fullmatch(name):
      out.setdefault(int(name), join(path, name))
  for name in names:
    m = _STEP_DIR_RE.fullmatch(name)
    if m:
      out[int(m.group(1))] = join(path, name)
  return out


def _classify(path: str) -> tuple[str, str] | None:
  """('msgpack', file) or ('orbax', state_dir) for a checkpoint at `path`, else None."""
  if is_file(path):
    return 'msgpack', path
  names = children(path)
  if names is None:
    return None
  if '_METADATA' in names:
    return 'orbax', path
  if MSGPACK_FILE in names and is_file(join(path, MSGPACK_FILE)):
    return 'msgpack', join(path, MSGPACK_FILE)
  if STATE_DIR in names:
    inner = _classify(join(path, STATE_DIR))
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
  if not is_url(path) and not os.path.exists(path):
    raise FileNotFoundError(f'No such file or directory: {path!r}; expected {_EXPECTED}.')
  steps = {} if is_file(path) else _step_dirs(path)
  if steps and _classify(path) is None:
    if restore_step is None:
      restore_step = max(steps)
    if restore_step not in steps:
      raise FileNotFoundError(
          f'No checkpoint_{restore_step} under {path!r}; steps found: {sorted(steps)}.')
    path = steps[restore_step]
  elif restore_step is not None:
    m = _STEP_DIR_RE.fullmatch(basename(path))
    if m and int(m.group(1)) != restore_step:
      raise ValueError(f'restore_step={restore_step} but {path!r} is the checkpoint of step '
                       f'{m.group(1)}; pass the model directory to choose a step.')
  found = _classify(path)
  if found is None:
    raise FileNotFoundError(f'No T5X checkpoint at {path!r}; expected {_EXPECTED}.')
  return found
