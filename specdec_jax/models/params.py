"""Param-tree helpers shared by the model families: shapes, checks, logical axes."""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp


def shapes_of(init_fn) -> dict:
  """`{keystr path: shape}` of the params `init_fn()` would return (no allocation)."""
  shapes = jax.eval_shape(init_fn)
  return {jax.tree_util.keystr(p): tuple(v.shape)
          for p, v in jax.tree_util.tree_flatten_with_path(shapes)[0]}


def check_tree(params, expected: dict, config_name: str, extra_hint: str) -> None:
  """Checks that `params` has exactly the paths and shapes of `expected` (`shapes_of`).

  Raises:
    ValueError: naming the first missing, mis-shaped or unexpected param, the config
      class (`config_name`) and the fix; `extra_hint` says which config fields decide
      which params exist.
  """
  got = {jax.tree_util.keystr(p): tuple(jnp.shape(v))
         for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  for path in sorted(expected):
    if path not in got:
      raise ValueError(f'params lack {path} (expected shape {expected[path]}); the '
                       f'checkpoint does not match this {config_name}.')
    if got[path] != expected[path]:
      raise ValueError(f'param {path} has shape {got[path]} but the {config_name} expects '
                       f'{expected[path]}; load it with the config it was trained with.')
  extra = sorted(set(got) - set(expected))
  if extra:
    raise ValueError(f'params have {extra[0]} (shape {got[extra[0]]}) that this {config_name} '
                     f'does not use; check {extra_hint}.')


def unbox_axes(params_axes):
  """A `params_axes` collection (`{name + '_axes': AxisMetadata}` nests, as flax's
  `param_with_axes` and T5X write it) → the params' tree with `names` tuples as leaves."""
  out = {}
  for name, value in flax.core.unfreeze(params_axes).items():
    if isinstance(value, dict):
      out[name] = unbox_axes(value)
    else:
      out[name.removesuffix('_axes')] = tuple(value.names)
  return out
