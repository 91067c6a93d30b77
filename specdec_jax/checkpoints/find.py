"""Finding a T5X checkpoint under a path: `find_checkpoint` (the newest complete step)."""

from __future__ import annotations

import os
import re
import warnings

from specdec_jax.checkpoints import integrity
from specdec_jax.checkpoints import locations as loc

_STEP_DIR_RE = re.compile(r'checkpoint_(\d+)')
_BARE_STEP_DIR_RE = re.compile(r'\d+')  # Orbax's default step folders (e.g. T5X's tiny_orbax/1).

_EXPECTED = ('a T5X checkpoint: a checkpoint_<step>/ directory holding a `checkpoint` msgpack '
             'file (legacy layout) or a `state/` Orbax directory, a msgpack checkpoint file '
             'itself, an Orbax `state/` directory, or a directory of checkpoint_<step>/ '
             'folders')


def _step_dirs(path: str) -> dict[int, str]:
  names = loc.children(path) or []
  out = {}
  for name in names:  # `checkpoint_<step>` wins over a bare `<step>`.
    if _BARE_STEP_DIR_RE.fullmatch(name):
      out.setdefault(int(name), loc.join(path, name))
  for name in names:
    m = _STEP_DIR_RE.fullmatch(name)
    if m:
      out[int(m.group(1))] = loc.join(path, name)
  return out


def _classify(path: str) -> tuple[str, str] | None:
  """('msgpack', file) or ('orbax', state_dir) for a checkpoint at `path`, else None."""
  if loc.is_file(path):
    return 'msgpack', path
  names = loc.children(path)
  if names is None:
    return None
  if '_METADATA' in names:
    return 'orbax', path
  if loc.MSGPACK_FILE in names and loc.is_file(loc.join(path, loc.MSGPACK_FILE)):
    return 'msgpack', loc.join(path, loc.MSGPACK_FILE)
  if loc.STATE_DIR in names:
    inner = _classify(loc.join(path, loc.STATE_DIR))
    if inner is not None:
      return inner
  return None


def _newest_complete(path: str, steps: dict[int, str]) -> int:
  """The highest step whose folder is a complete checkpoint; warns naming skipped ones.

  When no step is complete, the highest is returned (its reader then names the damage). A
  single step is returned unchecked: there is nothing to fall back to, and its reader names
  any damage without parsing the msgpack file a second time.
  """
  if len(steps) == 1:
    return next(iter(steps))
  skipped = []
  for step in sorted(steps, reverse=True):
    problem = integrity.step_problem(steps[step])
    if problem is None:
      if skipped:
        warnings.warn(
            f'{path}: skipped the newest checkpoint step(s) '
            + '; '.join(f'checkpoint_{s}: {why}' for s, why in skipped)
            + f'. Loading checkpoint_{step}, the newest complete one; pass restore_step to '
            'choose another.', stacklevel=3)
      return step
    skipped.append((step, problem))
  return max(steps)


def find_checkpoint(path: str | os.PathLike, restore_step: int | None = None
                    ) -> tuple[str, str]:
  """Locates a T5X checkpoint (mirrors `t5x.checkpoints.find_checkpoint`, both layouts).

  Args:
    path: a model directory holding `checkpoint_<step>/` folders, one such
      folder, its `checkpoint` msgpack file, its Orbax `state/` folder, or a
      single msgpack file.
    restore_step: which `checkpoint_<step>` to use under a model directory
      (default: the highest step that is complete, `integrity.step_problem`; skipped
      newer steps are named in a warning).
  Returns:
    `(kind, location)`: `('msgpack', path of the msgpack file)` for the legacy
    and early-Orbax layouts, or `('orbax', path of the state directory)`.
  Raises:
    FileNotFoundError: nothing at `path`, no checkpoint in it, or no
      `checkpoint_<restore_step>` (the message lists the steps found).
    ValueError: `restore_step` contradicts a `checkpoint_<step>` path.
  """
  path = os.fspath(path)
  if not loc.is_url(path) and not os.path.exists(path):
    raise FileNotFoundError(f'No such file or directory: {path!r}; expected {_EXPECTED}.')
  steps = {} if loc.is_file(path) else _step_dirs(path)
  if steps and _classify(path) is None:
    if restore_step is None:
      restore_step = _newest_complete(path, steps)
    if restore_step not in steps:
      raise FileNotFoundError(
          f'No checkpoint_{restore_step} under {path!r}; steps found: {sorted(steps)}.')
    path = steps[restore_step]
  elif restore_step is not None:
    m = _STEP_DIR_RE.fullmatch(loc.basename(path))
    if m and int(m.group(1)) != restore_step:
      raise ValueError(f'restore_step={restore_step} but {path!r} is the checkpoint of step '
                       f'{m.group(1)}; pass the model directory to choose a step.')
  found = _classify(path)
  if found is None:
    raise FileNotFoundError(f'No T5X checkpoint at {path!r}; expected {_EXPECTED}.')
  return found
