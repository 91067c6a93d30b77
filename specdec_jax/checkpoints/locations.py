"""Checkpoint locations: local paths or TensorStore kvstore URLs (`find.py` finds checkpoints)."""

from __future__ import annotations

import os

MSGPACK_FILE = 'checkpoint'
STATE_DIR = 'state'


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
