"""`specdec_jax.generate.compile_cache`: where JAX's persistent compilation cache lives,
how it is turned off, and that a folder it cannot use is one warning, never an error."""

from __future__ import annotations

import os
import warnings

import jax
import pytest

from specdec_jax.generate import compile_cache


@pytest.fixture(autouse=True)
def _restore_jax_cache_dir():
  before = jax.config.jax_compilation_cache_dir
  before_min = jax.config.jax_persistent_cache_min_compile_time_secs
  compile_cache._explicit = compile_cache._UNDECIDED  # pylint: disable=protected-access
  yield
  compile_cache.enable(False)
  compile_cache._explicit = compile_cache._UNDECIDED  # pylint: disable=protected-access
  compile_cache._enabled_by_us = None  # pylint: disable=protected-access
  jax.config.update('jax_compilation_cache_dir', before)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', before_min)
  compile_cache._warned.clear()  # pylint: disable=protected-access


def test_resolve_order(monkeypatch, tmp_path):
  monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert compile_cache.resolve() == tmp_path / 'xdg' / 'specdec_jax' / 'jax_compilation_cache'
  monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / 'env'))
  assert compile_cache.resolve() == tmp_path / 'env'
  assert compile_cache.resolve(tmp_path / 'arg') == tmp_path / 'arg'  # the argument wins
  for off in ('off', 'OFF', '0', 'false', 'none', ''):
    monkeypatch.setenv(compile_cache.ENV_VAR, off)
    assert compile_cache.resolve() is None, off
  assert compile_cache.resolve(False) is None
  assert compile_cache.resolve('off') is None
  with pytest.raises(TypeError, match='compilation_cache=True is ambiguous'):
    compile_cache.resolve(True)
  with pytest.raises(TypeError, match='compilation_cache must be None, False'):
    compile_cache.resolve(3)


def test_no_home_and_no_xdg_is_off_with_one_warning(monkeypatch):
  monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
  monkeypatch.delenv('XDG_CACHE_HOME', raising=False)
  monkeypatch.setattr(os.path, 'expanduser', lambda p: p)  # no home folder known
  assert compile_cache.default_dir() is None
  with pytest.warns(RuntimeWarning, match='no home folder'):
    assert compile_cache.enable() is None


def test_an_explicit_choice_stands_for_later_default_calls(tmp_path, monkeypatch):
  """The decode job's --no_compilation_cache / --compilation_cache_dir, then the T5X model
  class built from a model gin (enable(None)): the job's choice stands."""
  monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / 'env'))
  assert compile_cache.enable('off') is None
  assert compile_cache.enable() is None and jax.config.jax_compilation_cache_dir is None
  folder = compile_cache.enable(tmp_path / 'flag')
  assert compile_cache.enable() == folder == jax.config.jax_compilation_cache_dir
  assert not (tmp_path / 'env').exists()


def test_off_turns_off_a_folder_someone_else_set(tmp_path):
  jax.config.update('jax_compilation_cache_dir', str(tmp_path / 'elsewhere'))
  assert compile_cache.enable(False) is None
  assert jax.config.jax_compilation_cache_dir is None


def test_enable_uses_a_versioned_folder_and_off_restores(tmp_path):
  folder = compile_cache.enable(tmp_path / 'c')
  assert folder == str(tmp_path / 'c' / compile_cache.version_tag())
  assert os.path.isdir(folder)
  assert jax.config.jax_compilation_cache_dir == folder
  assert jax.config.jax_persistent_cache_min_compile_time_secs <= compile_cache.MIN_COMPILE_SECONDS
  assert compile_cache.enable('off') is None
  assert jax.config.jax_compilation_cache_dir is None


def test_a_folder_chosen_by_someone_else_is_kept(tmp_path, monkeypatch):
  monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / 'ours'))
  jax.config.update('jax_compilation_cache_dir', str(tmp_path / 't5x_flag'))
  assert compile_cache.enable() == str(tmp_path / 't5x_flag')  # e.g. T5X's own setting
  assert not (tmp_path / 'ours').exists()
  explicit = compile_cache.enable(tmp_path / 'explicit')  # an explicit folder wins
  assert explicit.startswith(str(tmp_path / 'explicit'))


def test_unusable_folder_is_one_warning_not_an_error(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')
  with pytest.warns(RuntimeWarning, match='compilation cache off: cannot use') as record:
    assert compile_cache.enable(blocker / 'cache') is None
    assert compile_cache.enable(blocker / 'cache') is None  # the same problem: no second warning
  assert len(record) == 1
  assert jax.config.jax_compilation_cache_dir in (None, '')


def test_other_jax_versions_are_ignored_with_one_warning(tmp_path):
  (tmp_path / 'jax-0.0.1-jaxlib-0.0.1').mkdir(parents=True)
  with pytest.warns(RuntimeWarning, match='other JAX versions .* are ignored') as record:
    folder = compile_cache.enable(tmp_path)
    compile_cache.enable(tmp_path)
  assert len(record) == 1
  assert folder.endswith(compile_cache.version_tag())


def test_damaged_entries_are_recompiled_not_fatal(tmp_path):
  """JAX's own reader: a damaged entry is a warning, the program is compiled anew."""
  import jax.numpy as jnp
  from jax._src import compilation_cache as cc  # pylint: disable=g-import-not-at-top
  folder = compile_cache.enable(tmp_path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  fn = lambda x: jnp.tanh(x) @ x.T + 3.0  # noqa: E731
  x = jnp.arange(16.0).reshape(4, 4) / 16
  want = jax.jit(fn)(x)
  entries = [e for e in os.listdir(folder) if 'lambda' in e]
  assert entries, os.listdir(folder)
  for e in entries:
    with open(os.path.join(folder, e), 'wb') as f:
      f.write(b'damaged')
  jax.clear_caches()
  cc.reset_cache()
  with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter('always')
    got = jax.jit(fn)(x)
  assert (got == want).all()
  assert any('Error reading persistent compilation cache entry' in str(w.message) for w in record)
