"""JAX's persistent compilation cache for the jobs and the T5X model class.

A decode job compiles its programs (3.6 s for the demo pair on a 2-core AMD EPYC, 12 s
on another host) and then decodes for well under a second; with the cache a second run of the same job
reads the compiled programs from disk instead. `enable` turns JAX's own cache on
(`jax_compilation_cache_dir`); the decode job, the benchmark and
`SpeculativeEncoderDecoderModel` call it before they compile.

Where the cache lives, in order:
  1. the `setting` argument (the jobs' `--compilation_cache_dir=DIR` flag, the model
     class's `compilation_cache=` argument): a folder, or False / 'off' for no cache;
  2. the environment variable `SPECDEC_COMPILATION_CACHE`: a folder, or one of
     `0 off false no none` (case-insensitive) for no cache;
  3. the per-user default `$XDG_CACHE_HOME/specdec_jax/jax_compilation_cache`
     (`~/.cache/...` when XDG_CACHE_HOME is unset).
A cache folder someone already gave JAX (`jax.config.jax_compilation_cache_dir`, e.g.
T5X's own flag) is kept as it is, unless `setting` names a folder or turns the cache off
(then no persistent cache is used in this process: "compile everything anew"). An
explicit setting is remembered: a later `enable(None)` in the same process (e.g. the T5X
model class built by the decode job from a model gin) keeps that decision.

Entries go to a subfolder per JAX / jaxlib version (`jax-0.10.2-jaxlib-0.10.2`), so a
cache written by another JAX version is never read (one warning says it is ignored). A
folder that cannot be made, read or written turns the cache off with one warning, never
an error; an unreadable or damaged entry is recompiled by JAX itself (it warns and goes
on: `jax_raise_persistent_cache_errors` stays False) but not rewritten, so it warns again
on every run: delete the folder the warning's run used to start afresh. JAX 0.10's cache
keys depend on the folder's path: a copied or moved cache folder is compiled anew.
"""

from __future__ import annotations

import logging
import os
import pathlib
import warnings
from typing import Any, Callable, Optional, Union

import jax

ENV_VAR = 'SPECDEC_COMPILATION_CACHE'
OFF_WORDS = ('0', 'off', 'false', 'no', 'none')
# Programs compiling faster than this are not written (JAX's default is 1 s; the
# decoders' programs take seconds, the small helper programs around them milliseconds).
MIN_COMPILE_SECONDS = 0.2

_log = logging.getLogger(__name__)
_warned: set[str] = set()
_enabled_by_us: Optional[str] = None
_UNDECIDED = object()
_explicit: Any = _UNDECIDED  # the folder (or None: off) an explicit setting chose


def _warn_once(message: str, warn: Optional[Callable[[str], None]] = None) -> None:
  if message not in _warned:
    _warned.add(message)
    if warn is None:
      warnings.warn(message, RuntimeWarning, stacklevel=3)
    else:
      warn(message)


def version_tag() -> str:
  """`jax-<version>-jaxlib-<version>`: the subfolder this JAX's entries go to."""
  import jaxlib  # pylint: disable=g-import-not-at-top
  return f'jax-{jax.__version__}-jaxlib-{getattr(jaxlib, "__version__", "unknown")}'


def default_dir() -> Optional[pathlib.Path]:
  """`$XDG_CACHE_HOME/specdec_jax/jax_compilation_cache` (XDG default `~/.cache`); None
  when neither XDG_CACHE_HOME nor a home folder is known (the cache is then off)."""
  base = os.environ.get('XDG_CACHE_HOME')
  if not base:
    home = os.path.expanduser('~')
    if home == '~' or not os.path.isabs(home):
      return None
    base = os.path.join(home, '.cache')
  return pathlib.Path(base) / 'specdec_jax' / 'jax_compilation_cache'


def resolve(setting: Union[None, bool, str, os.PathLike] = None) -> Optional[pathlib.Path]:
  """The cache's root folder from `setting`, `$SPECDEC_COMPILATION_CACHE` or the default;
  None when the cache is turned off (`setting` False / an off word, or the variable).

  Raises:
    TypeError: `setting` is True or not None / bool / str / PathLike (True means "the
      default": pass None).
  """
  if setting is False:
    return None
  if setting is True:
    raise TypeError('compilation_cache=True is ambiguous: pass None for the default folder, '
                    'a folder path, or False to turn the cache off.')
  if setting is None:
    env = os.environ.get(ENV_VAR)
    if env is None:
      return default_dir()
    setting = env
  if not isinstance(setting, (str, os.PathLike)):
    raise TypeError(f'compilation_cache must be None, False, "off" or a folder path, got '
                    f'{setting!r}.')
  text = os.fspath(setting)
  if text.strip().lower() in OFF_WORDS or not text.strip():
    return None
  try:
    return pathlib.Path(text).expanduser()
  except RuntimeError:  # "~user" with no such user / no home: use the path as written
    return pathlib.Path(text)


def enable(setting: Union[None, bool, str, os.PathLike] = None, *,
           warn: Optional[Callable[[str], None]] = None) -> Optional[str]:
  """Turns JAX's persistent compilation cache on; returns the folder used, or None.

  Args:
    setting: None (an explicit setting made earlier in this process, else a folder
      already set in `jax.config`, else the environment variable, else the per-user
      default), a folder, or False / 'off' (no persistent cache in this process).
    warn: how to report a problem (one message, once per process); default
      `warnings.warn(..., RuntimeWarning)`. The jobs print one `warning: …` line.
  Returns:
    The versioned folder entries are read from and written to, or None when off.
  Raises:
    TypeError: `setting` is True or of the wrong type (see `resolve`).
  """
  global _enabled_by_us, _explicit
  current = jax.config.jax_compilation_cache_dir
  if setting is None and _explicit is not _UNDECIDED:
    return _explicit  # an explicit choice made earlier in this process stands
  if setting is None and current and current != _enabled_by_us:
    return current  # someone else (a user, T5X) chose the folder: keep it
  root = resolve(setting)
  if setting is not None:
    _explicit = None  # updated below once a folder is in use
  if root is None:
    if setting is None and default_dir() is None and ENV_VAR not in os.environ:
      _warn_once('JAX compilation cache off: no home folder or XDG_CACHE_HOME to put it in; '
                 f'set {ENV_VAR} to a writable folder.', warn)
    if current:  # off: no persistent cache in this process, whoever set the folder
      jax.config.update('jax_compilation_cache_dir', None)
      _reset_jax_cache()
    _enabled_by_us = None
    return None
  folder = root / version_tag()
  try:
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f'.probe-{os.getpid()}'
    probe.write_bytes(b'')
    probe.unlink()
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
      raise PermissionError(f'no read/write access to {folder}')
    others = sorted(p.name for p in root.iterdir()
                    if p.name.startswith('jax-') and p.name != folder.name and p.is_dir())
  except OSError as e:
    _warn_once(f'JAX compilation cache off: cannot use {folder} ({e}); every run compiles '
               'anew. Choose a writable folder (--compilation_cache_dir, compilation_cache=, '
               f'or {ENV_VAR}) or turn the cache off (--no_compilation_cache, '
               f'{ENV_VAR}=off).', warn)
    return None
  if others:
    _warn_once(f'JAX compilation cache: entries of other JAX versions in {root} are ignored '
               f'({", ".join(others)}); delete those folders to free the space.', warn)
  if current != str(folder):
    if current:
      _reset_jax_cache()
    jax.config.update('jax_compilation_cache_dir', str(folder))
  if jax.config.jax_persistent_cache_min_compile_time_secs > MIN_COMPILE_SECONDS:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_SECONDS)
  _enabled_by_us = str(folder)
  if setting is not None:
    _explicit = str(folder)
  _log.info('JAX compilation cache: %s', folder)
  return str(folder)


def _reset_jax_cache() -> None:
  """Lets JAX open the cache folder anew (it opens it once per process)."""
  try:
    from jax._src import compilation_cache as cc  # pylint: disable=g-import-not-at-top
    cc.reset_cache()
  except (ImportError, AttributeError):  # pragma: no cover - other JAX versions
    pass
