"""Hugging Face T5 import / export (`t5`: the entry points) and its parts:

* `t5`: `import_hf_t5`, `load_hf_t5`, `export_hf_t5`, to and from the T5X param tree.
* `config`: HF `T5Config` ↔ our `T5Config`.
* `files`: reading HF weight files (safetensors, sharded or not; PyTorch `.bin`).
* `accounting`: the key ↔ param mapping, with every tensor and param accounted for.
"""
