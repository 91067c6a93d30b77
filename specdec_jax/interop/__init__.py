"""What speaks other libraries' language: T5X (`interop.t5x`: the model class, decode_fn
adapters, restore hook, features, vocabulary checks, losses, gin registrations) and
Hugging Face (`interop.hf`: T5 import / export). T5X checkpoints, the project's own
storage format, are `specdec_jax.checkpoints`."""
