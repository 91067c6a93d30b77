"""specdec-jax: exact speculative decoding for JAX/Flax T5 models, T5X-compatible."""

import os as _os

# seqio imports TensorFlow; keep its C++ start-up logging out of our jobs' output.
_os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
