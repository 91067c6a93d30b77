"""`jax.distributed` start-up for multi-process (multi-host) decoding, from the environment.

Set, before the job starts (the variables JAX itself reads where it can):

* `JAX_COORDINATOR_ADDRESS` — `host:port` of process 0 (e.g. `10.0.0.1:1234`);
* `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID` — how many processes, and this one's index;
* or `SPECDEC_DISTRIBUTED=1` alone, to let `jax.distributed.initialize()` detect a
  TPU pod slice, SLURM or Open MPI cluster by itself.

On CPU the processes talk through gloo (`jax_cpu_collectives_implementation`).
`JAX_NUM_CPU_DEVICES=N` (or `XLA_FLAGS=--xla_force_host_platform_device_count=N`)
gives each CPU process N simulated devices.
"""

from __future__ import annotations

import os
import sys

ENV_ADDRESS = 'JAX_COORDINATOR_ADDRESS'
ENV_NUM = 'JAX_NUM_PROCESSES'
ENV_ID = 'JAX_PROCESS_ID'
ENV_AUTO = 'SPECDEC_DISTRIBUTED'

_initialized = False


def _env_int(name: str):
  value = os.environ.get(name)
  if value is None or value == '':
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f'{name}={value!r} must be an integer.') from None


def requested() -> bool:
  """Whether the environment asks for a multi-process run."""
  return bool(os.environ.get(ENV_ADDRESS)) or os.environ.get(ENV_AUTO, '') not in ('', '0')


def initialize_from_env() -> bool:
  """Calls `jax.distributed.initialize` once if the environment asks for it.

  Must run before anything touches a JAX backend. Returns whether it initialized.

  Raises:
    ValueError: `JAX_COORDINATOR_ADDRESS` is set but `JAX_NUM_PROCESSES` /
      `JAX_PROCESS_ID` are missing or not integers (and no cluster is detected).
  """
  global _initialized
  if _initialized or not requested():
    return _initialized
  import jax  # pylint: disable=g-import-not-at-top
  num, pid = _env_int(ENV_NUM), _env_int(ENV_ID)
  address = os.environ.get(ENV_ADDRESS) or None
  if address and (num is None or pid is None):
    raise ValueError(f'{ENV_ADDRESS}={address!r} is set: set {ENV_NUM} (process count) and '
                     f'{ENV_ID} (this process, 0 … {ENV_NUM} − 1) as well.')
  if num is not None and pid is not None and not 0 <= pid < num:
    raise ValueError(f'{ENV_ID}={pid} must be in [0, {ENV_NUM}={num}).')
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  print(f'jax.distributed: process {pid if pid is not None else "?"} of '
        f'{num if num is not None else "?"}, waiting for all processes at '
        f'{address or "the detected coordinator"} …', file=sys.stderr, flush=True)
  jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid)
  _initialized = True
  return True


def is_writer() -> bool:
  """Whether this process writes the job's outputs (process 0 only)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.process_index() == 0
