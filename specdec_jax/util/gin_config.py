"""Registering gin configurables at import, also after a job has locked gin's config.

`gin.finalize()` locks gin's config (our CLIs and `decode.parse_gin` finalize, as T5X's
`gin_utils` does), and a locked gin refuses every new registration: importing, say,
`specdec_jax.benchmark.job` after a decode job in the same process (a notebook, a test
session) raised "Attempted to add a new configurable after the config was locked".
Registering binds nothing, so these wrappers register with the config unlocked for that
moment (`gin.unlock_config()`, which restores the lock after).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import gin


def configurable(fn: Optional[Callable] = None, **kwargs) -> Any:
  """`gin.configurable` (as a decorator with or without arguments, or a call)."""
  if fn is None:
    return lambda f: configurable(f, **kwargs)
  with gin.unlock_config():
    return gin.configurable(fn, **kwargs)


def external_configurable(fn_or_cls: Callable, **kwargs) -> Any:
  """`gin.external_configurable`."""
  with gin.unlock_config():
    return gin.external_configurable(fn_or_cls, **kwargs)


def constant(name: str, value: Any) -> None:
  """`gin.constant`."""
  with gin.unlock_config():
    gin.constant(name, value)
