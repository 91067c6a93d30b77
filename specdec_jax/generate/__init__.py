"""Running a model family through the decoders: jitted entry points per family.

The decoding core (`specdec_jax.decoding`) takes models only through their k-token cached
call; this package binds a family's model to it, as one `jax.jit` per program:

* `t5`: `t5_generate` (baseline) and `t5_speculative_generate` on encoder inputs, one
  device or a mesh (`sharding_plan=`), with any drafter. Re-exported here, so
  `from specdec_jax import generate; generate.t5_generate(...)` reads as before.
* `common`: what every family's entry points share: the drafter specs (`resolve_drafter`,
  `drafter_name`, `needs_draft_model`), `cache_length`, and the checks made before compiling.
* `xla_options`: the compiler options both decoders compile with on CPU.
* `compile_cache`: JAX's persistent compilation cache for the jobs and the T5X model class.

* `decoder_only`: `decoder_only_generate` and `decoder_only_speculative_generate` on
  prompts (prefilled in one pass, T5X's `DecoderOnlyModel` semantics), one device or a
  mesh (`sharding_plan=`).

A new model family adds its module here, beside `t5` and `decoder_only`.
"""

from specdec_jax.generate.common import (cache_length, drafter_name,  # noqa: F401
                                         needs_draft_model, resolve_drafter)
from specdec_jax.generate.t5 import t5_generate, t5_speculative_generate  # noqa: F401
from specdec_jax.generate.decoder_only import (decoder_only_generate,  # noqa: F401
                                               decoder_only_speculative_generate)
