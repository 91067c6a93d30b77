"""Hugging Face T5 internals behind `specdec_jax.hf_t5` (the public entry point).

* `config`: HF `T5Config` ↔ our `T5Config`.
* `files`: reading HF weight files (safetensors, sharded or not; PyTorch `.bin`).
* `accounting`: the key ↔ param mapping, with every tensor and param accounted for.
"""
