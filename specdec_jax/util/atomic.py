"""Atomic file writes: the project's one way to write an output file.

Every writer goes through a temporary file in the destination's folder, created with
the permissions the umask gives new files (0644 under the usual 022, as `open()`
would; `mkstemp` alone makes 0600), renamed into place only once complete; any
failure — an exception, Ctrl-C — removes the temporary file, so no reader ever sees
a half-written output.
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


def temp_path(path: str | os.PathLike) -> pathlib.Path:
  """A new empty temporary file beside `path` (mode 0666 & ~umask), keeping its
  extension last (`.name.<random>.tmp.png`) so writers that infer the format from the
  name (matplotlib) still do."""
  path = pathlib.Path(path)
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
    os.replace(tmp, path)
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
  closes it, then `os.replace(tmp, path)` — or unlinks `tmp` on failure."""
  tmp = temp_path(path)
  try:
    return open(tmp, 'w', encoding='utf-8'), tmp  # pylint: disable=consider-using-with
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
