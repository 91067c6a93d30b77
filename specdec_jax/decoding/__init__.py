"""Decoding loops: T5X-style `temperature_sample` and `speculative_sample`.

Both run in a single `lax.while_loop` (one compilation per shape, no host round-trip
per token) over per-row state, and take models through their cached call:

    step_fn(tokens [batch, k] int32, lengths [batch] int32, cache)
        -> (logits [batch, k, vocab], new_cache)

which consumes k decoder inputs per row at positions `lengths[b] … lengths[b]+k−1`
(`specdec_jax.models.t5.make_step_fn` builds one for our T5). `temperature_sample`
takes T5X's one-token `tokens_to_logits(DecodingState) -> (logits [B', V], cache)`
and `tokens_to_logits_from_step_fn` adapts a step_fn to it.

Conventions shared with T5X (`t5x/decoding.py`): `inputs [batch, max_decode_len]`
holds forced prompt tokens at the start of each row (0 = free), the decoder's start
token is 0, outputs are `[batch, num_decodes, max_decode_len]` with 0 after EOS, and
log-probs `[batch, num_decodes]` are sorted ascending (best decode last).

The loops live in `baseline.py` (temperature_sample) and `speculative.py`
(speculative_sample, whose phases are `draft.py`, `verify.py` and `accept.py`); this
module is their public face.
"""

from specdec_jax.decoding.baseline import DecodingState, temperature_sample, tokens_to_logits_from_step_fn  # noqa: F401
from specdec_jax.decoding.loop_common import MIN_TEMPERATURE  # noqa: F401
from specdec_jax.decoding.loop_common import check_common as _check_common  # noqa: F401
from specdec_jax.decoding.loop_common import expand_batch as _expand_batch  # noqa: F401
from specdec_jax.decoding.loop_common import row_keys as _row_keys  # noqa: F401
from specdec_jax.decoding.policies import DraftPolicy  # noqa: F401
from specdec_jax.decoding.speculative import SpeculativeStats, speculative_sample  # noqa: F401
