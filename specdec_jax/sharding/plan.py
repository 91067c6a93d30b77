"""`ShardingPlan`: a device mesh, the logical axis rules, and the shardings they give.

The plan turns logical axes into `jax.sharding.NamedSharding`s for everything a
decode touches: target and draft params (from the `params_axes` the models declare,
as T5X's `PjitPartitioner` does), the KV caches (`[batch, heads, length, head_dim]`
→ `('batch', 'heads', None, None)`), and the batch (`('batch', …)`). It is a frozen,
hashable dataclass, so the jitted decoders take it as a static argument and pin the
caches to it inside the one compiled program (`constrain_cache`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specdec_jax.sharding import rules as rules_lib

DRAFT_SHARDINGS = ('replicated', 'like_target')


def make_mesh(mesh_shape: Sequence[int], devices=None) -> Mesh:
  """A `(data, model)` mesh over all devices (all processes') or `devices`.

  Args:
    mesh_shape: `(data, model)` sizes; their product must equal the device count.
      One entry may be -1 (the rest of the devices), as T5X's `num_partitions`
      leaves the data axis implicit.
    devices: optional flat list of devices (default `jax.devices()`).
  Raises:
    ValueError: naming `mesh_shape`, when it is not two positive ints (or -1) whose
      product is the device count.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = tuple(mesh_shape) if isinstance(mesh_shape, (tuple, list)) else None
  if (shape is None or len(shape) != 2 or
      not all(isinstance(s, int) and not isinstance(s, bool) and (s >= 1 or s == -1)
              for s in shape) or shape.count(-1) > 1):
    raise ValueError(f'mesh_shape must be (data, model): two ints >= 1 (one may be -1 for the '
                     f'rest of the devices), got {mesh_shape!r}.')
  if -1 in shape:
    known = shape[0] * shape[1] * -1
    if len(devices) % known:
      raise ValueError(f'mesh_shape={mesh_shape!r}: {len(devices)} devices are not divisible by '
                       f'{known}.')
    shape = tuple(len(devices) // known if s == -1 else s for s in shape)
  if shape[0] * shape[1] != len(devices):
    raise ValueError(f'mesh_shape={tuple(mesh_shape)!r} needs {shape[0] * shape[1]} devices but '
                     f'{len(devices)} are available; pick (data, model) with data * model = '
                     f'{len(devices)} (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N '
                     'simulates N devices).')
  # Auto axes: GSPMD propagates shardings from the inputs and constraints, as under
  # T5X's pjit partitioner (JAX's newer default, explicit axes, would make every
  # ambiguous gather an error).
  auto = (jax.sharding.AxisType.Auto,) * 2
  if devices == list(jax.devices()):
    return jax.make_mesh(shape, rules_lib.MESH_AXES, devices=devices, axis_types=auto)
  return Mesh(np.asarray(devices).reshape(shape), rules_lib.MESH_AXES, axis_types=auto)


@dataclasses.dataclass(frozen=True)
class ShardingPlan:
  """How a decode is laid out on a `(data, model)` mesh.

  Attributes:
    mesh: the `jax.sharding.Mesh` with axes `('data', 'model')` (`make_mesh`).
    rules: logical axis rules (`rules.standard_logical_axis_rules()`).
    draft: 'replicated' (every device holds the whole draft: no collectives in the
      draft's γ calls) or 'like_target' (the draft's params and cache heads follow
      the same rules as the target's).
  """
  mesh: Mesh
  rules: tuple = dataclasses.field(default_factory=rules_lib.standard_logical_axis_rules)
  draft: str = 'replicated'

  def __post_init__(self):
    if tuple(self.mesh.axis_names) != rules_lib.MESH_AXES:
      raise ValueError(f'ShardingPlan.mesh must have axes {rules_lib.MESH_AXES}, got '
                       f'{self.mesh.axis_names}; build it with make_mesh((data, model)).')
    if self.draft not in DRAFT_SHARDINGS:
      raise ValueError(f'draft_sharding must be one of {DRAFT_SHARDINGS}, got {self.draft!r}.')
    object.__setattr__(self, 'rules', rules_lib.check_rules(self.rules, 'logical_axis_rules'))

  @property
  def data_size(self) -> int:
    """Devices along `data`: the batch is padded to a multiple of it."""
    return self.mesh.shape[rules_lib.DATA]

  def _rules_for(self, role: str):
    if role == 'draft' and self.draft == 'replicated':
      return tuple((name, rules_lib.DATA if name == 'batch' else None) for name, _ in self.rules)
    return self.rules

  def sharding(self, axes, shape, role: str = 'target') -> NamedSharding:
    """`NamedSharding` of an array with logical `axes` and `shape` (see `rules.logical_to_spec`)."""
    return NamedSharding(self.mesh, rules_lib.logical_to_spec(
        axes, self._rules_for(role), shape, dict(self.mesh.shape)))

  def param_shardings(self, config, role: str = 'target'):
    """Tree of `NamedSharding`s matching the params of `config`'s model (`t5.init_params`
    for a `T5Config`, `decoder_only.init_params` for a `DecoderOnlyConfig`), from their
    family's `params_axes`.

    `role` 'draft' replicates every param when `draft == 'replicated'`. Cached per
    (plan, config, role): the sharded decoders ask for it on every call.
    """
    return _param_shardings(self, config, role)

  def shardings_for_axes(self, axes, params, role: str = 'target'):
    """`NamedSharding`s for `params` (arrays or `ShapeDtypeStruct`s) from their logical
    `axes` (a tree like the params with `names` tuples as leaves: `t5.unbox_axes`)."""
    return jax.tree.map(lambda a, p: self.sharding(a, p.shape, role), axes, params,
                        is_leaf=lambda x: isinstance(x, tuple))

  def variables_shardings(self, params, params_axes, draft_key: str = 'draft'):
    """Shardings of a T5X model's params (`SpeculativeEncoderDecoderModel`): the tree
    under `draft_key` as the draft (`ShardingPlan.draft`), the rest as the target, each
    from its `params_axes` entry — what T5X's partitioner derives from the same axes."""
    from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
    axes = t5.unbox_axes(params_axes)
    out = {k: self.shardings_for_axes(v, params[k]) for k, v in axes.items() if k != draft_key}
    if draft_key in axes:
      out[draft_key] = self.shardings_for_axes(axes[draft_key], params[draft_key], 'draft')
    return out

  def batch_sharding(self, ndim: int) -> NamedSharding:
    """`[batch, ...]` arrays: rows split over `data`, the rest replicated."""
    return NamedSharding(self.mesh, P(rules_lib.DATA, *([None] * (ndim - 1))))

  def constrain_cache(self, cache, role: str = 'target'):
    """Pins a `DecoderCache` or a decoder-only `SelfAttentionCache` (inside jit) to
    `('batch', 'heads', None, None)` per `[batch, heads, length, head_dim]` leaf (other
    leaves: `('batch', …)`)."""
    def pin(x):
      axes = ('batch', 'heads', None, None) if x.ndim == 4 and x.shape[1] > 1 else (
          ('batch',) + (None,) * (x.ndim - 1))
      return jax.lax.with_sharding_constraint(x, self.sharding(axes, x.shape, role))
    return jax.tree.map(pin, cache)

  def describe(self) -> dict:
    """JSON-able summary: mesh shape, rules and draft placement."""
    return {'mesh_shape': dict(self.mesh.shape), 'rules': [list(r) for r in self.rules],
            'draft_sharding': self.draft, 'devices': int(self.mesh.size),
            'processes': int(jax.process_count())}


@functools.lru_cache(maxsize=32)
def param_shapes_and_axes(config):
  """`(ShapeDtypeStruct tree, logical axes tree)` of the params of `config`'s model family:
  `t5.Transformer` for a `T5Config`, `DecoderOnlyTransformer` for a `DecoderOnlyConfig`
  (both declare T5X's logical axis names: 'vocab', 'embed', 'mlp', 'heads', 'kv', …).
  Cached per config; read-only."""
  from specdec_jax.models import decoder_only  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
  from specdec_jax.models.config import family_of  # pylint: disable=g-import-not-at-top
  if family_of(config) == 'decoder_only':
    shapes = jax.eval_shape(lambda: decoder_only.init_params(config, jax.random.PRNGKey(0), 2))
    return shapes, decoder_only.params_axes(config)
  shapes = jax.eval_shape(lambda: t5.init_params(config, jax.random.PRNGKey(0), 2, 2))
  return shapes, t5.params_axes(config)


@functools.lru_cache(maxsize=32)
def _param_shardings(plan: ShardingPlan, config, role: str):
  shapes, axes = param_shapes_and_axes(config)
  return plan.shardings_for_axes(axes, shapes, role)


def plan_from(mesh_shape: Optional[Sequence[int]], logical_axis_rules=None,
              draft_sharding: str = 'replicated') -> Optional[ShardingPlan]:
  """A `ShardingPlan` for `mesh_shape` (None → None: single-device decoding).

  Raises:
    ValueError: a bad `mesh_shape`, rule or `draft_sharding`, naming it.
  """
  if mesh_shape is None:
    return None
  rules = (rules_lib.standard_logical_axis_rules() if logical_axis_rules is None
           else logical_axis_rules)
  return ShardingPlan(make_mesh(mesh_shape), rules, draft_sharding)

