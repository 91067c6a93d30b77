"""The files of a training run: `config.json`, `params.msgpack`, `train_state_<step>.msgpack`.

Used by `specdec_jax.train.job` (writes and resumes them) and by everything that reads a
finished run (`load_run`: scripts/export_demo.py, scripts/eval_bleu.py, distillation).
All writes go to a temporary file first and are renamed into place.
"""

from __future__ import annotations

import json
import os
import pathlib
import warnings

import flax
import jax
import numpy as np

from specdec_jax.util import atomic
from specdec_jax.models import config as config_lib


# ---------------------------------------------------------------------------- config io

config_to_dict = config_lib.to_dict  # T5Config ↔ the run's config.json
config_from_dict = config_lib.from_dict


def param_count(params) -> int:
  """Number of scalars in a params tree."""
  return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


def save_params(params, path: str | os.PathLike) -> None:
  """Writes a params tree as flax msgpack, atomically (`load_params` reads it)."""
  atomic.write_bytes(path, flax.serialization.msgpack_serialize(jax.device_get(params)))


def load_params(path: str | os.PathLike):
  """The params tree (numpy arrays) of a `save_params` file."""
  return flax.serialization.msgpack_restore(pathlib.Path(path).read_bytes())


def run_inputs_bidirectional_attention(run_dir: str | os.PathLike) -> bool | None:
  """A decoder-only model folder's prefix-LM flag (T5X's `inputs_bidirectional_attention`).

  Read from the training run's `summary.json`, else from `pair.json` in the folder above
  (an exported pair's `target/` or `draft/`). Returns None when neither says (a T5 run, or
  a folder without either file).
  """
  run_dir = pathlib.Path(run_dir)
  for path in (run_dir / 'summary.json', run_dir.parent / 'pair.json'):
    if path.is_file():
      value = json.loads(path.read_text()).get('inputs_bidirectional_attention')
      if value is not None:
        return bool(value)
  return None


def load_run(run_dir: str | os.PathLike):
  """(T5Config, float32 params) of a finished model folder.

  Args:
    run_dir: a training run (`config.json` + `params.msgpack`, as `specdec_jax.train.job`
      writes), or a folder with `config.json` and T5X checkpoints (`checkpoint_<step>/`,
      the newest is read), such as the shipped pair's `specdec_jax/assets/demo_ende/target`.
  Returns:
    `(T5Config, params)`, the params as float32 `jax.Array`s on the default device, in
    T5X's tree: put there once, here, since a jitted decoder would copy numpy params to
    the device on every call (`generate` warns about that).
  Raises:
    FileNotFoundError: `config.json` is missing, or neither `params.msgpack` nor a T5X
      checkpoint is there (the message names the folder and what was expected).
  """
  run_dir = pathlib.Path(run_dir)
  if not (run_dir / 'config.json').is_file():
    raise FileNotFoundError(
        f'{run_dir} has no config.json: pass a finished training run (config.json + '
        'params.msgpack) or a model folder with config.json and T5X checkpoint_<step>/ folders.')
  config = config_from_dict(json.loads((run_dir / 'config.json').read_text()))
  if (run_dir / 'params.msgpack').is_file():
    return config, jax.device_put(load_params(run_dir / 'params.msgpack'))
  if not any(run_dir.glob('checkpoint_*')):
    raise FileNotFoundError(
        f'{run_dir} has config.json but neither params.msgpack (a finished training run) nor '
        'T5X checkpoint_<step>/ folders.')
  from specdec_jax import checkpoints  # pylint: disable=import-outside-toplevel
  params = checkpoints.load_t5x_checkpoint(run_dir, config=config, dtype=np.float32)
  return config, jax.device_put(params)


# ---------------------------------------------------------------------------- checkpoints

def _checkpoints(run_dir: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
  found = []
  for p in run_dir.glob('train_state_*.msgpack'):
    try:
      found.append((int(p.stem.split('_')[-1]), p))
    except ValueError:
      pass
  return sorted(found)


def save_train_state(run_dir: pathlib.Path, state, position: dict, keep: int):
  """Writes `train_state_<step>.msgpack` (state + data position); keeps the newest `keep`.

  The file just written is never deleted (`keep` below 1 counts as 1), so an interrupted
  run can always resume.
  """
  step = int(state.step)
  blob = {'state': flax.serialization.to_state_dict(jax.device_get(state)), 'position': position}
  atomic.write_bytes(run_dir / f'train_state_{step}.msgpack',
                     flax.serialization.msgpack_serialize(blob))
  found = _checkpoints(run_dir)
  for _, old in found[:max(0, len(found) - max(1, keep))]:
    old.unlink(missing_ok=True)


def restore_train_state(run_dir: pathlib.Path, template):
  """(state like `template`, data position) from the newest intact train_state file, or None.

  A newer file that cannot be read (truncated or damaged: msgpack fails, or its tree does
  not fit `template`) is skipped for the one before it, with a warning naming it; it is
  left on disk. When no file is intact, the newest one's error is raised.

  Raises:
    ValueError: every train_state file is damaged, naming the newest and the fix.
  """
  ckpts = _checkpoints(run_dir)
  if not ckpts:
    return None
  errors = []
  for step, path in reversed(ckpts):
    try:
      blob = flax.serialization.msgpack_restore(path.read_bytes())
      state = flax.serialization.from_state_dict(template, blob['state'])
      position = {k: int(v) for k, v in blob['position'].items()}
    except (ValueError, KeyError, TypeError) as e:  # msgpack's "incomplete input", wrong tree
      errors.append((path, e))
      continue
    if errors:
      warnings.warn('train: skipped damaged train state(s) '
                    + ', '.join(f'{p.name} ({str(e).splitlines()[0][:80]})' for p, e in errors)
                    + f'; resuming from {path.name} (step {step}).', stacklevel=2)
    return state, position
  path, e = errors[0]
  raise ValueError(f'train.run_dir {str(run_dir)!r}: no train state can be read; the newest, '
                   f'{path.name}, fails with: {e}. Move the damaged files away to start over, '
                   'or use a new run_dir.') from e
