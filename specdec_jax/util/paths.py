"""Where the project finds its shared data and shipped assets."""

from __future__ import annotations

import os
import pathlib

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent  # specdec_jax/
REPO_ROOT = PACKAGE_DIR.parent
ASSETS_DIR = PACKAGE_DIR / 'assets'


def data_dir() -> pathlib.Path:
  """The shared data folder: `$SPECDEC_DATA`, else `<repo>/../shared/data`.

  Raises:
    FileNotFoundError: the folder does not exist (the message says how to set it).
  """
  env = os.environ.get('SPECDEC_DATA')
  path = pathlib.Path(env).expanduser() if env else REPO_ROOT.parent / 'shared' / 'data'
  if not path.is_dir():
    raise FileNotFoundError(
        f'Data folder {str(path)!r} not found. Set the environment variable SPECDEC_DATA to '
        'the folder holding ende/multi30k/..., or place it at <repo>/../shared/data.')
  return path
