"""XLA compiler options the decoders compile with, and a `jax.jit` that applies them.

On XLA:CPU the default copy insertion cannot prove that a buffer carried through a
`lax.while_loop` and updated inside a `lax.cond` / `lax.switch` branch may be updated
in place, and copies it: the adaptive draft length's `lax.switch` over verify widths
(`verify.verify_block_adaptive`) copied all 12 target KV-cache leaves
(12 × f32[1, 6, 64, 64] for the demo pair at batch 1) once per round, and the draft's
nested `while_loop` two more buffers. Copy insertion with region analysis
(`xla_cpu_copy_insertion_use_region_analysis`) proves these updates safe and removes
every one of those copies (`../shared/tools/hlo_loop_census.py` counts them;
BENCHMARKS.md); the exactness suites pass unchanged with it. Other backends, and calls
nested in another jit, compile unchanged.
"""

from __future__ import annotations

import functools
import inspect

import jax

CPU_COMPILER_OPTIONS = {'xla_cpu_copy_insertion_use_region_analysis': True}

# `jax.jit(..., compiler_options=)` exists in recent jax versions (this package is tested
# on 0.10); with a jax without it the decoders compile with XLA's defaults.
_SUPPORTED = 'compiler_options' in inspect.signature(jax.jit).parameters


class _BackendJit:
  """`jax.jit(fun, **kwargs)`, compiled with `CPU_COMPILER_OPTIONS` when the default
  backend is the CPU and the call is top-level (not inside another trace). Calls and
  `.lower(...)` go to the variant that applies."""

  def __init__(self, fun, **kwargs):
    self._plain = jax.jit(fun, **kwargs)
    self._cpu = (jax.jit(fun, compiler_options=dict(CPU_COMPILER_OPTIONS), **kwargs)
                 if _SUPPORTED else self._plain)
    functools.update_wrapper(self, fun)

  def _pick(self, args, kwargs):
    # `compiler_options` are for top-level jits only: called inside another trace (T5X's
    # jitted predict step, a user's jax.jit) this is a nested jit, compiled with the
    # outer program's options.
    if _inside_trace(args, kwargs) or jax.default_backend() != 'cpu':
      return self._plain
    return self._cpu

  def __call__(self, *args, **kwargs):
    return self._pick(args, kwargs)(*args, **kwargs)

  def lower(self, *args, **kwargs):
    return self._pick(args, kwargs).lower(*args, **kwargs)


def _inside_trace(args, kwargs) -> bool:
  """Whether a call happens under a JAX trace (an enclosing jit, vmap, grad, ...)."""
  try:
    from jax._src import core  # pylint: disable=g-import-not-at-top
    return not core.trace_state_clean()
  except (ImportError, AttributeError):  # a jax without it: the arguments tell
    return any(isinstance(x, jax.core.Tracer)
               for x in jax.tree_util.tree_leaves((args, kwargs)))


def jit(fun=None, **kwargs):
  """`jax.jit` with the decoders' compiler options on CPU; usable as a decorator
  (`@xla_options.jit(static_argnames=...)`) or called as `jit(fun, **kwargs)`."""
  if fun is None:
    return lambda f: _BackendJit(f, **kwargs)
  return _BackendJit(fun, **kwargs)
