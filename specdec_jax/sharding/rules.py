"""T5X's standard logical axis rules and logical-axes → `PartitionSpec` resolution.

A param's logical axes (its `params_axes` entry, e.g. `('embed', 'mlp')`) become a
`jax.sharding.PartitionSpec` over the mesh axes `('data', 'model')` through the
rules, as T5X's `partitioning.standard_logical_axis_rules()` (1-D parameter and
activation partitioning) does: `batch` → `data`; `vocab`, `mlp`, `heads`,
`joined_kv` → `model`; everything else (`embed`, `kv`, `length`,
`relpos_buckets`, …) unsharded. Resolution itself is flax's
`flax.linen.logical_to_mesh_axes`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
from flax import linen as nn

DATA = 'data'
MODEL = 'model'
MESH_AXES = (DATA, MODEL)

Rules = tuple  # ((logical name, mesh axis or None), ...)


def standard_logical_axis_rules(additional_rules: Sequence[tuple] = ()) -> Rules:
  """T5X's standard rules (`t5x.partitioning.standard_logical_axis_rules` with
  `activation_partitioning_dims=1`, `parameter_partitioning_dims=1`) as a tuple.

  Args:
    additional_rules: `(logical name, mesh axis or None)` pairs that take precedence
      (flax uses the first rule that names an axis), e.g. `(('embed', 'model'),)`.
  Registered with gin as `specdec_jax.standard_logical_axis_rules` (`gin_utils`).

  Returns:
    `((logical name, mesh axis or None), ...)`, hashable (usable as a static jit arg).
  Raises:
    ValueError: a rule is not a `(str, 'data' | 'model' | None)` pair.
  """
  base = (('batch', DATA), ('vocab', MODEL), ('mlp', MODEL), ('heads', MODEL),
          ('joined_kv', MODEL), ('kv', None), ('embed', None), ('length', None),
          ('relpos_buckets', None), ('abspos_buckets', None), ('layers', None),
          ('stack', None), ('mlp_activations', None))
  return check_rules(tuple(additional_rules) + base,
                     'standard_logical_axis_rules.additional_rules')


def check_rules(rules, what: str) -> Rules:
  """`rules` as a tuple of pairs; ValueError naming `what` unless each is (str, mesh axis)."""
  out = []
  for rule in rules:
    if (not isinstance(rule, (tuple, list)) or len(rule) != 2 or not isinstance(rule[0], str)
        or rule[1] not in MESH_AXES + (None,)):
      raise ValueError(f'{what}: each rule must be (logical axis name, one of {MESH_AXES} or '
                       f'None), got {rule!r}; e.g. ((\'embed\', None), (\'mlp\', \'model\')).')
    out.append((rule[0], rule[1]))
  return tuple(out)


def logical_to_spec(axes: Sequence[Optional[str]], rules: Rules, shape: Sequence[int],
                    mesh_shape: dict) -> jax.sharding.PartitionSpec:
  """The `PartitionSpec` of an array with logical `axes` and `shape` under `rules`.

  A dimension whose size the mesh axis does not divide stays unsharded (jit needs
  even shards), e.g. 6 relative-position heads on a model axis of 8.

  Args:
    axes: one logical name (or None) per dimension.
    rules: as `standard_logical_axis_rules`.
    shape: the array's shape.
    mesh_shape: `{mesh axis: size}` (`Mesh.shape`).
  """
  spec = list(nn.logical_to_mesh_axes(tuple(axes), rules))
  used = set()
  for i, axis in enumerate(spec):
    if axis is None:
      continue
    if shape[i] % mesh_shape[axis] or axis in used:
      spec[i] = None
    else:
      used.add(axis)
  return jax.sharding.PartitionSpec(*spec)
