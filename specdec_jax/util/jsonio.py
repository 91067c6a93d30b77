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


def finite_or_none(obj):
  """`obj` with every non-finite float (NaN, ±Inf), nested in dicts, lists and tuples, as
  None: JSON has no NaN or Infinity, so a strict reader would refuse the file."""
  import math  # pylint: disable=import-outside-toplevel
  if isinstance(obj, float):
    return obj if math.isfinite(obj) else None
  if isinstance(obj, dict):
    return {k: finite_or_none(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [finite_or_none(v) for v in obj]
  if hasattr(obj, 'tolist') and not isinstance(obj, (str, bytes)):
    return finite_or_none(obj.tolist())
  return obj


def dumps(obj, **kwargs) -> str:
  """Strict JSON (`allow_nan=False`) of a report or summary: non-finite floats become null
  (`finite_or_none`), arrays lists, other values `str` (`default`)."""
  import json  # pylint: disable=import-outside-toplevel
  return json.dumps(finite_or_none(obj), allow_nan=False, default=default, **kwargs)
