"""`json.dumps(..., default=)` hooks for the numpy / JAX values the project's outputs hold."""

from __future__ import annotations


def strict_default(x):
  """NumPy / JAX arrays → lists, their scalars → Python numbers; anything else raises.

  Raises:
    TypeError: `x` has no `.tolist()` (it is neither an array nor a NumPy / JAX scalar).
  """
  if hasattr(x, 'tolist'):  # np.ndarray, NumPy scalars, jax.Array (0-d → a number)
    return x.tolist()
  raise TypeError(f'not JSON serialisable: {type(x).__name__}')


def default(x):
  """As `strict_default`, but any other value is written as `str(x)` (reports, summaries)."""
  try:
    return strict_default(x)
  except TypeError:
    return str(x)
