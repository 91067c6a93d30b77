"""Shared fixtures: small random T5 models (built once per session)."""

from __future__ import annotations

import os

import jax
import pytest

# tests/sharded needs 8 simulated devices, set before JAX starts: tests/test_sharding.py
# runs it in a child process (SPECDEC_SHARDED_TESTS=1, XLA_FLAGS=...device_count=8).
collect_ignore = [] if os.environ.get('SPECDEC_SHARDED_TESTS') else ['sharded']

jax.config.update('jax_default_matmul_precision', 'highest')
# The jobs and the T5X model class turn on JAX's persistent compilation cache; the suite
# runs without it (hermetic: nothing written to ~/.cache) unless the caller sets it.
os.environ.setdefault('SPECDEC_COMPILATION_CACHE', 'off')

from specdec_jax.models import t5  # noqa: E402
from specdec_jax.models.config import T5Config  # noqa: E402


def small_config(**overrides) -> T5Config:
  base = dict(vocab_size=64, emb_dim=32, num_heads=4, num_encoder_layers=2,
              num_decoder_layers=2, head_dim=8, mlp_dim=64,
              mlp_activations=('gelu', 'linear'), dropout_rate=0.0,
              logits_via_embedding=False)
  base.update(overrides)
  return T5Config(**base)


class Pair:
  """A random target and two drafts: an untrained random one and a tiny one."""

  def __init__(self):
    self.config = small_config()
    self.model = t5.Transformer(self.config)
    self.params = t5.init_params(self.config, jax.random.PRNGKey(0))
    self.draft_config = small_config(emb_dim=16, num_decoder_layers=1, num_encoder_layers=1)
    self.draft_model = t5.Transformer(self.draft_config)
    self.draft_params = t5.init_params(self.draft_config, jax.random.PRNGKey(1))


@pytest.fixture(scope='session')
def pair():
  return Pair()


_SEEN = {'module': None, 'tests': 0}


@pytest.fixture(autouse=True)
def _bounded_compilation_caches(request):
  """Drops JAX's compiled programs at each new test module and every 20 tests.

  Every XLA:CPU executable keeps memory mappings of its code; hundreds of them in one
  process (this suite compiles several hundred) crashed the compiler with a segfault
  inside `backend_compile_and_load` at `vm.max_map_count` = 65530 here. Recompiling
  what a later test needs costs seconds; a crash costs the run.
  """
  module = request.node.module.__name__
  _SEEN['tests'] += 1
  if module != _SEEN['module'] or _SEEN['tests'] % 20 == 0:
    jax.clear_caches()
    _SEEN['module'] = module
  yield
