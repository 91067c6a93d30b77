"""Reading Hugging Face weight files into `{key: numpy array}`.

`model.safetensors`, sharded safetensors (`model.safetensors.index.json`),
`pytorch_model.bin` or sharded `.bin` (`pytorch_model.bin.index.json`), tried in
that order (transformers' own preference). Read with the `safetensors` library
(bfloat16 through `ml_dtypes`); torch is needed only for `.bin` files, whose
floating tensors come back as float32.
"""

from __future__ import annotations

import json
import os

import numpy as np
import safetensors.numpy

CANDIDATES = ('model.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin',
              'pytorch_model.bin.index.json')


def to_numpy(v) -> np.ndarray:
  if hasattr(v, 'detach'):  # torch.Tensor
    v = v.detach().cpu()
    if v.is_floating_point():
      v = v.float()
    return v.numpy()
  return np.asarray(v)


def _load_one(path: str) -> dict[str, np.ndarray]:
  if path.endswith('.safetensors'):
    return safetensors.numpy.load_file(path)
  import torch
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: to_numpy(v) for k, v in state.items()}


def _same(a, b) -> bool:
  return np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a, np.float64),
                                                       np.asarray(b, np.float64))


def weight_file(folder: str) -> str:
  """The weight (or index) file of an HF folder that `load_folder` reads."""
  for name in CANDIDATES:
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f'No Hugging Face weights in {folder!r}; expected one of '
                          f'{list(CANDIDATES)}.')


def load_folder(folder: str) -> dict[str, np.ndarray]:
  """Every tensor of an HF folder's weights, by key.

  Raises:
    FileNotFoundError: no weight file, or a shard the index names is missing.
    ValueError: the index lists a key no shard holds, or two shards hold the same
      key with different values (both files named).
  """
  path = weight_file(folder)
  if not path.endswith('.index.json'):
    return _load_one(path)
  with open(path) as f:
    weight_map = json.load(f)['weight_map']
  state: dict[str, np.ndarray] = {}
  source: dict[str, str] = {}
  for shard in sorted(set(weight_map.values())):
    shard_path = os.path.join(folder, shard)
    if not os.path.isfile(shard_path):
      raise FileNotFoundError(f'{path} names the shard {shard!r}, which is missing.')
    for key, value in _load_one(shard_path).items():
      if key in state and not _same(state[key], value):
        raise ValueError(f'{key} is stored twice with different values, in {source[key]} '
                         f'and {shard}.')
      state.setdefault(key, value)
      source.setdefault(key, shard)
  absent = sorted(k for k in weight_map if k not in state)
  if absent:
    raise ValueError(f'{path} lists {len(absent)} tensor(s) no shard holds, e.g. {absent[0]} '
                     f'(in {weight_map[absent[0]]}).')
  return state
