"""Sharded speculative decoding on a `(data, model)` device mesh (T5X's partitioning).

Layers: `rules` (T5X's logical axis rules → `PartitionSpec`), `plan` (the mesh and
every sharding a decode needs: `ShardingPlan`), `batch` (host side: padding to the
data axis, global arrays, gathering), `decode` (the sharded runs behind
`generate.t5_generate(..., sharding_plan=)` and `generate.decoder_only_generate(...,
sharding_plan=)`, speculative ones included), `distributed` (`jax.distributed` from
the environment), `memory` (per-device params and KV caches: measured and predicted). See docs/scaling.md.
"""

from specdec_jax.sharding.memory import per_device_bytes  # noqa: F401
from specdec_jax.sharding.plan import DRAFT_SHARDINGS, ShardingPlan, make_mesh, plan_from  # noqa: F401
from specdec_jax.sharding.rules import standard_logical_axis_rules  # noqa: F401
