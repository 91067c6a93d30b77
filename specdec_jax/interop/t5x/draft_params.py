"""The draft's params in the T5X model class: `params['draft']`, or the constructor's.

T5X models keep extra params in their params tree (t5x/contrib/calm), which T5X
places, partitions from `params_axes` and passes to compiled steps as arguments.
`SpeculativeEncoderDecoderModel` keeps the draft there, under `params['draft']`;
`DraftParamsMixin` holds the constructor's `draft_params` (a tree or a checkpoint
path, loaded lazily) for callers whose params lack it, and refuses to use those
inside a trace, where they would become constants of the compiled program.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import jax

from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.models import family

PyTree = Any
DRAFT_KEY = t5x_decoding.DRAFT_KEY


def _is_traced(tree) -> bool:
  return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


class DraftParamsMixin:
  """Draft params of the model class (needs `draft_module`, `_draft_params`,
  `_draft_checkpoint_path`, `_draft_params_dtype`)."""

  def _init_draft_params(self, draft_params, draft_params_dtype) -> None:
    """The constructor's `draft_params`: a params tree (checked now), a T5X checkpoint
    path (loaded on first use) or None. Needs `draft_module` and `drafter_name` set.

    Raises:
      ValueError: draft params without a draft module, or a tree that does not fit it.
    """
    self._draft_params_dtype = draft_params_dtype
    self._draft_checkpoint_path = None
    self._draft_params = None
    if self.draft_module is None and draft_params is not None:
      raise ValueError('draft_params is given but draft_module is None; pass the draft '
                       f'module, or drop draft_params with drafter={self.drafter_name!r}.')
    if isinstance(draft_params, (str, os.PathLike)):
      self._draft_checkpoint_path = os.fspath(draft_params)
    elif draft_params is not None:
      if isinstance(draft_params, Mapping) and set(draft_params) == {'params'}:
        draft_params = draft_params['params']
      self._draft_params = self._check_draft(draft_params)

  def _check_draft(self, draft_params):
    try:
      family.check_params(draft_params, self.draft_module.config)
    except ValueError as e:
      raise ValueError(f'draft_params do not fit draft_module.config: {e}') from None
    return draft_params

  @property
  def draft_checkpoint_path(self) -> Optional[str]:
    """The draft checkpoint path given at construction (None for a params tree)."""
    return self._draft_checkpoint_path

  @property
  def draft_params_loaded(self) -> bool:
    """Whether the constructor's draft params are in memory (a path loads on first use)."""
    return self._draft_params is not None

  @property
  def draft_params(self) -> PyTree:
    """The constructor's draft params; a checkpoint path is loaded now, once (on device).

    Raises:
      ValueError: the model was built without `draft_params`.
      FileNotFoundError / ValueError: from `checkpoints.load_t5x_checkpoint` (no
        checkpoint there, or params that do not fit `draft_module.config`).
    """
    if self._draft_params is None:
      if self._draft_checkpoint_path is None:
        raise ValueError(f'No draft params: pass params holding {DRAFT_KEY!r} (T5X restores '
                         'them with specdec_jax.interop.t5x.restore.add_draft_params) or construct '
                         'the model with draft_params= (a params tree or T5X checkpoint).')
      from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
      self._draft_params = jax.device_put(checkpoints.load_t5x_checkpoint(
          self._draft_checkpoint_path, config=self.draft_module.config,
          dtype=self._draft_params_dtype))
    return self._draft_params

  def params_with_draft(self, target_params: PyTree, draft_params: PyTree = None) -> dict:
    """`{**target_params, 'draft': draft}`: the params tree the methods take.

    Args:
      target_params: the target's params (T5X's tree, e.g. a restored checkpoint).
      draft_params: the draft's; default the constructor's `draft_params`.
    Raises:
      ValueError: `target_params` already holds `draft`, or the draft does not fit
        `draft_module.config`.
    """
    if isinstance(target_params, Mapping) and DRAFT_KEY in target_params:
      raise ValueError(f'target_params already hold {DRAFT_KEY!r}.')
    draft = self.draft_params if draft_params is None else self._check_draft(draft_params)
    return {**target_params, DRAFT_KEY: draft}

  def split_params(self, params: PyTree):
    """`(target params, draft params)` for the decoders.

    `params['draft']` when present; otherwise the constructor's `draft_params`, but
    only outside a trace: inside `jax.jit` (T5X's compiled predict step) those would
    become constants of the compiled program, so that is an error.

    Raises:
      ValueError: traced `params` without `draft`, or no draft params at all.
    """
    target, draft = t5x_decoding.split_draft_params(params)
    if draft is None:
      if _is_traced(target):
        raise ValueError(
            f'params lack {DRAFT_KEY!r} inside a compiled function: the draft would be '
            'baked into the program as constants. Pass params that hold it (T5X: '
            'get_initial_variables + utils.RestoreCheckpointConfig.state_transformation_fns'
            ' = [@t5x_restore.add_draft_params]; Python: model.params_with_draft(params)).')
      draft = self.draft_params
    return target, draft
