"""T5X interop (t5x itself is imported lazily and optionally).

* `model`: `SpeculativeEncoderDecoderModel`, T5X's `EncoderDecoderModel` contract decoding
  speculatively (draft params in `params['draft']`); `base` its T5X / standalone base.
* `decoding`: T5X-convention decode_fns (`temperature_sample`, `speculative_sample`);
  `decode_fn`: the model's decode_fn plumbing; `draft_params`: the draft's params.
* `features`: T5X feature / prompt layouts; `losses`: T5X's losses; `vocab`: vocabulary
  checks; `restore`: the `RestoreCheckpointConfig` hook adding the draft's params.
* `gin_registry`: gin registrations under T5X's names (`network.T5Config`, ...); gin
  files import it (`import specdec_jax.interop.t5x.gin_registry`).
"""
