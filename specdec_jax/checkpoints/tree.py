"""Nested-dict helpers for T5X state dicts (TensorStore spec dicts count as leaves)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def is_ts_spec(x) -> bool:
  """Whether `x` is a serialised TensorStore spec (T5X's `state_utils.tensorstore_leaf`)."""
  return isinstance(x, dict) and 'driver' in x and ('kvstore' in x or 'path' in x)


def is_leaf(x) -> bool:
  """Whether `x` ends a path of a state dict: any non-dict, or a TensorStore spec dict."""
  return not isinstance(x, dict) or is_ts_spec(x)


def flatten(tree, prefix=()) -> list[tuple[tuple[str, ...], Any]]:
  """[(path tuple, leaf)], sorted; TS spec dicts are leaves, empty dicts kept as `{}` leaves."""
  if is_leaf(tree):
    return [(prefix, tree)]
  if not tree:
    return [(prefix, {})]
  out = []
  for key in sorted(tree):
    out.extend(flatten(tree[key], prefix + (key,)))
  return out


def unflatten(items):
  """The nested dict of `[(path tuple, leaf)]` (`flatten`'s inverse); an empty path is
  the whole tree."""
  root: dict = {}
  for path, value in items:
    if not path:
      return value
    node = root
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return root


def select(tree, subtree: str | None, where: str):
  """The node at '/'-separated `subtree` of `tree` (KeyError naming the keys there)."""
  if not subtree:
    return tree
  node = tree
  for part in subtree.strip('/').split('/'):
    if not isinstance(node, dict) or is_ts_spec(node) or part not in node:
      keys = sorted(node) if isinstance(node, dict) and not is_ts_spec(node) else []
      raise KeyError(f'{where} has no {subtree!r} (at {part!r}; keys there: {keys}).')
    node = node[part]
  return node


def is_float(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.floating)
