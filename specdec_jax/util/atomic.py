"""Atomic file writes: the project's one way to write an output file.

Every writer goes through a temporary file in the destination's folder, created with
the permissions the umask gives new files (0644 under the usual 022, as `open()`
would; `mkstemp` alone makes 0600), renamed into place only once complete; any
failure — an exception, Ctrl-C — removes the temporary file, so no reader ever sees
a half-written output. A symlinked destination is written through (its target is
replaced, the link kept); a destination that is a folder or a special file is refused
with a ValueError before anything is written (`destination`).
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from typing import Callable, IO


def umask() -> int:
  """The process's umask (read without changing it)."""
  mask = os.umask(0)
  os.umask(mask)
  return mask


def destination(path: str | os.PathLike, name: str | None = None) -> pathlib.Path:
  """The file that writing `path` replaces: a symlink's final target, else `path` itself.

  Writes go *through* a symlink (the link stays, its target gets the new contents), as
  `open(path, 'w')` would; a dangling link's target is created.

  Args:
    path: the destination as given.
    name: the setting that named it (e.g. 'decode.output_path'), for the message.
  Raises:
    ValueError: the destination exists and is not a regular file (a folder, a FIFO, a
      device, a socket): naming `name` and the path, before anything is written.
  """
  p = pathlib.Path(path).expanduser()
  if p.is_symlink():
    p = pathlib.Path(os.path.realpath(p))
  if p.exists() and not p.is_file():
    kind = 'a folder' if p.is_dir() else 'not a regular file (a FIFO, device or socket)'
    label = f'{name} ' if name else ''
    raise ValueError(f'Cannot write {label}{str(path)!r}: it is {kind}; name a file path.')
  return p


def check_writable(path: str | os.PathLike, name: str) -> None:
  """Raises ValueError unless a new file can be made where `path` would be written.

  Probes the nearest existing folder above `destination(path)` by creating and removing a
  temporary file in it (`os.access` says yes to root on read-only mounts such as /sys), so
  an unwritable output is found before the work, not after it. Makes no folder.
  """
  folder = destination(path, name).parent
  while not folder.exists():
    folder = folder.parent
  if not folder.is_dir():
    raise ValueError(f'Cannot write {name} {str(path)!r}: {str(folder)!r} is not a folder.')
  try:
    fd, probe = tempfile.mkstemp(dir=folder, prefix='.probe.', suffix='.tmp')
    os.close(fd)
    os.unlink(probe)
  except OSError as e:
    raise ValueError(f'Cannot write {name} {str(path)!r}: {str(folder)!r} is not writable '
                     f'({e.strerror or e}).') from None


def check_not_reading(path: str | os.PathLike, name: str, reads: dict) -> None:
  """Raises ValueError when writing `path` would replace a file the job reads.

  Args:
    path: the output as given (symlinks followed, as `destination` does).
    name: its setting, for the message.
    reads: `{setting: path}` of what the job reads: a file must not be the output; a folder
      (a checkpoint, a pair folder) must not hold it. None values are skipped.
  """
  out = pathlib.Path(os.path.realpath(destination(path, name)))
  for setting, read in reads.items():
    if read is None or '://' in str(read):
      continue
    src = pathlib.Path(os.path.realpath(pathlib.Path(read).expanduser()))
    if out == src or (src.is_dir() and src in out.parents):
      raise ValueError(f'{name} {str(path)!r} would overwrite what {setting} reads '
                       f'({str(read)!r}); write the output somewhere else.')


def commit(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
  """Renames the finished temporary file `tmp` to `path`'s `destination`."""
  os.replace(tmp, destination(path))


def temp_path(path: str | os.PathLike) -> pathlib.Path:
  """A new empty temporary file beside `path` (mode 0666 & ~umask), keeping its
  extension last (`.name.<random>.tmp.png`) so writers that infer the format from the
  name (matplotlib) still do."""
  path = destination(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.',
                             suffix='.tmp' + path.suffix)
  os.close(fd)
  try:
    os.chmod(tmp, 0o666 & ~umask())
  except BaseException:
    os.unlink(tmp)
    raise
  return pathlib.Path(tmp)


def write_with(path: str | os.PathLike, write: Callable[[str], None]) -> None:
  """Calls `write(temporary path)`, then renames the result to `path`.

  Raises:
    whatever `write` raises (the temporary file is removed first).
  """
  tmp = temp_path(path)
  try:
    write(str(tmp))
    commit(tmp, path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` atomically."""
  write_with(path, lambda tmp: pathlib.Path(tmp).write_bytes(data))


def write_text(path: str | os.PathLike, text: str) -> None:
  """Writes `text` (UTF-8) to `path` atomically."""
  write_with(path, lambda tmp: pathlib.Path(tmp).write_text(text, encoding='utf-8'))


def open_text(path: str | os.PathLike) -> tuple[IO[str], pathlib.Path]:
  """`(open UTF-8 text file, its temporary path)` for streaming writes; the caller
  closes it, then `commit(tmp, path)` — or unlinks `tmp` on failure."""
  tmp = temp_path(path)
  try:
    return open(tmp, 'w', encoding='utf-8'), tmp  # pylint: disable=consider-using-with
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
