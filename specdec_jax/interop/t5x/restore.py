"""Putting the draft's params into a T5X train state when T5X restores the target.

`SpeculativeEncoderDecoderModel` keeps the draft inside its params, under
`params['draft']` (as T5X models keep extra params, e.g. t5x/contrib/calm), so T5X
places and partitions it from its logical axes like any param and passes it to the
compiled predict step as an argument. A public T5X checkpoint of the target has no
`draft`: `add_draft_params` is a T5X `RestoreStateTransformationFn`
(t5x/checkpoints.py) that fills it in from the draft's own checkpoint while T5X
restores, bound in gin as

    utils.RestoreCheckpointConfig.state_transformation_fns = [@t5x_restore.add_draft_params]
    t5x_restore.add_draft_params.draft_checkpoint = %DRAFT_CHECKPOINT

(`specdec_jax/configs/t5x/restore_draft.gin`). A checkpoint that already holds
`target/draft` (one T5X saved while fine-tuning with this model class) is left as it is.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from flax import traverse_util
import numpy as np

DRAFT_KEY = 'draft'


def _leaves(tree) -> dict:
  return traverse_util.flatten_dict(tree, sep='/') if isinstance(tree, Mapping) else {}


def _zeros_like_spec(spec):
  return np.zeros(tuple(spec.shape), np.dtype(spec.dtype))


def add_draft_params(state_dict: Mapping[str, Any], target_state_dict: Mapping[str, Any], *,
                     is_resuming: bool = False,
                     draft_checkpoint: Optional[str | os.PathLike] = None,
                     key: str = DRAFT_KEY) -> dict:
  """Adds the draft's params (and zero optimizer state) to a restored T5X state dict.

  Args:
    state_dict: the checkpoint's state dict as T5X read it (`{'target': params,
      'state': {'step': …, 'param_states': …}}`; leaves are NumPy arrays or
      TensorStore specs, which are passed through untouched).
    target_state_dict: the model's train state dict (T5X passes
      `train_state.state_dict()` of the global shapes: leaves have `.shape`/`.dtype`).
    is_resuming: unused (a checkpoint that already holds the draft is kept either way).
    draft_checkpoint: the draft's T5X checkpoint (a model dir with `checkpoint_<step>/`
      folders, one such folder, or an Orbax `checkpoint_<step>/state`), read with
      `specdec_jax.checkpoints.load_t5x_checkpoint` (params only).
    key: the params key holding the draft (`'draft'`).
  Returns:
    A new state dict: `target/<key>` holds the draft's params as NumPy arrays cast
    to the train state's dtypes (T5X then shards them from their `params_axes` and
    applies `RestoreCheckpointConfig.dtype`), and every `state/param_states/<key>/…`
    leaf the train state has but the checkpoint lacks is zeros of its shape (T5X's
    initial Adafactor state). Unchanged when the model has no draft in its state or
    the checkpoint already holds one.
  Raises:
    ValueError: no `draft_checkpoint` bound while a draft is needed, or the draft
      checkpoint's params do not match the model's `draft_module` (every missing,
      unexpected or mis-shaped param named).
    FileNotFoundError: nothing at `draft_checkpoint`.
  """
  del is_resuming
  target_params = (target_state_dict or {}).get('target', {})
  if key not in target_params:
    return dict(state_dict)
  ckpt_params = state_dict.get('target', {})
  if key in ckpt_params:
    return dict(state_dict)
  if draft_checkpoint is None:
    raise ValueError(
        f'The model keeps its draft under params[{key!r}] but the checkpoint being restored '
        'has none, and no draft checkpoint is bound: set t5x_restore.add_draft_params.'
        'draft_checkpoint = %DRAFT_CHECKPOINT (specdec_jax/configs/t5x/restore_draft.gin).')
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  loaded = _leaves(checkpoints.load_t5x_checkpoint(draft_checkpoint))
  expected = _leaves(target_params[key])
  missing = sorted(set(expected) - set(loaded))
  extra = sorted(set(loaded) - set(expected))
  shapes = sorted(k for k in set(expected) & set(loaded)
                  if tuple(np.shape(loaded[k])) != tuple(expected[k].shape))
  if missing or extra or shapes:
    detail = '; '.join(
        [f'missing {missing}'] * bool(missing) + [f'unexpected {extra}'] * bool(extra) +
        [f'{k}: checkpoint {tuple(np.shape(loaded[k]))} vs model {tuple(expected[k].shape)}'
         for k in shapes])
    raise ValueError(f'The draft checkpoint {os.fspath(draft_checkpoint)!r} does not fit the '
                     f'model\'s draft_module: {detail}. Bind DRAFT_MODULE to the network the '
                     'draft was trained with.')
  draft = {k: np.asarray(v).astype(np.dtype(expected[k].dtype)) for k, v in loaded.items()}
  out = dict(state_dict)
  out['target'] = dict(ckpt_params)
  out['target'][key] = traverse_util.unflatten_dict(draft, sep='/')

  model_states = (target_state_dict.get('state') or {}).get('param_states')
  if isinstance(model_states, Mapping) and key in model_states:
    state = dict(out.get('state') or {})
    ckpt_states = dict(state.get('param_states') or {})
    if key not in ckpt_states:
      ckpt_states[key] = traverse_util.unflatten_dict(
          {k: _zeros_like_spec(v) for k, v in _leaves(model_states[key]).items()}, sep='/')
    state['param_states'] = ckpt_states
    out['state'] = state
  return out
