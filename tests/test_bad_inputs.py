"""Input and numerics faults found from public bug reports of other decoding / T5 projects.

One test (or a few) per class, each asserting the right value:
1. top-p at an exact boundary (float32 rounding), 2. top-p = 1.0 keeps everything,
3. float16 masks, 4. lone UTF-16 surrogates, 5. UTF-8 byte-order marks,
6. γ + 1 > max_decode_len, 7. output permissions follow the umask (tests/test_decode_job.py),
8. the training CLI's errors, 9. Ctrl-C and progress bars, 10. TensorFlow start-up noise,
11. params held as numpy arrays (copied to the device on every call).
The decode job's own cases are in tests/test_decode_job.py.
"""

from __future__ import annotations

import fractions
import os
import subprocess
import sys

import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import generate
from specdec_jax.util import flags
from specdec_jax.text import inputs
from specdec_jax.decoding import sampling
from specdec_jax.models import t5

ENC = np.array([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0], [13, 1, 0, 0, 0, 0]], np.int32)


@pytest.fixture(autouse=True)
def _clear_gin():
  yield
  gin.clear_config()


# --- 1, 2: top-p -------------------------------------------------------------------

def _dist(std_logits):
  return np.asarray(jax.nn.softmax(std_logits, axis=-1))


def test_topp_exact_boundary_keeps_the_exact_nucleus():
  """0.5 + 0.3 reaches topp = 0.8 exactly: the nucleus is {0.5, 0.3}, not all four."""
  logits = jnp.log(jnp.array([[0.3, 0.1, 0.1, 0.5]]))
  want = [[0.375, 0.0, 0.0, 0.625]]
  np.testing.assert_allclose(_dist(sampling.standardize(logits, 1.0, 0, 0.8)), want,
                             rtol=1e-6, atol=0)
  traced = jax.jit(lambda x, p: sampling.standardize(x, 1.0, 0, p))(logits, 0.8)
  np.testing.assert_allclose(_dist(traced), want, rtol=1e-6, atol=0)


def _exact_nucleus(weights, topp):
  """The smallest most-likely set with mass >= topp, plus ties (exact arithmetic)."""
  total = sum(weights)
  probs = [fractions.Fraction(int(w), int(total)) for w in weights]
  order = sorted(range(len(probs)), key=lambda i: -probs[i])
  mass, kept = fractions.Fraction(0), []
  for i in order:
    if mass >= topp:
      break
    kept.append(i)
    mass += probs[i]
  smallest = min(probs[i] for i in kept)
  return {i for i, p in enumerate(probs) if p >= smallest}


def test_topp_matches_exact_arithmetic_on_boundary_cases():
  """Random distributions whose topp is exactly a prefix mass (the hardest case)."""
  rng = np.random.default_rng(0)
  cases = 0
  for _ in range(300):
    weights = rng.integers(1, 20, size=int(rng.integers(3, 9)))
    order = np.argsort(-weights, kind='stable')
    j = int(rng.integers(1, len(weights)))
    topp = fractions.Fraction(int(weights[order[:j]].sum()), int(weights.sum()))
    if topp >= 1:
      continue
    cases += 1
    logits = jnp.log(jnp.asarray(weights / weights.sum(), jnp.float32))
    kept = np.flatnonzero(np.asarray(sampling.topp_mask(logits, float(topp)))
                          > sampling.NEG_INF / 2)
    assert set(kept.tolist()) == _exact_nucleus(weights, topp), (weights, topp)
  assert cases > 250


def test_topp_away_from_the_boundary_is_the_plain_nucleus():
  rng = np.random.default_rng(1)
  logits = jnp.asarray(rng.normal(size=(16, 50)) * 2.0, jnp.float32)
  for topp in (0.1, 0.5, 0.9, 0.99):
    got = np.asarray(sampling.topp_mask(logits, topp)) > sampling.NEG_INF / 2
    probs = np.asarray(jax.nn.softmax(logits))
    for row in range(16):
      p = probs[row].astype(np.float64)
      order = np.argsort(-p)
      n = int(np.searchsorted(np.cumsum(p[order]), topp) + 1)
      assert set(np.flatnonzero(got[row])) == set(order[:n].tolist())


def test_topp_one_keeps_every_token():
  """topp = 1.0 is "keep everything": identical to topp = 0 (off), static or traced."""
  rng = np.random.default_rng(2)
  logits = jnp.asarray(rng.normal(size=(4, 8192)) * 6.0, jnp.float32)  # peaked, 8k vocab
  off = sampling.standardize(logits, 0.7, 0, 0.0)
  assert int(jnp.sum(_dist(off) > 0)) > 4 * 4000  # many tiny but non-zero probabilities
  np.testing.assert_array_equal(np.asarray(sampling.standardize(logits, 0.7, 0, 1.0)),
                                np.asarray(off))
  fn = jax.jit(lambda x, p: sampling.standardize(x, 0.7, 0, p))
  np.testing.assert_array_equal(np.asarray(fn(logits, 1.0)), np.asarray(off))
  np.testing.assert_array_equal(np.asarray(fn(logits, 0.0)), np.asarray(off))  # traced 0: off
  np.testing.assert_array_equal(np.asarray(sampling.topp_mask(logits / 0.7, 1.0)),
                                np.asarray(logits / 0.7))


# --- 3: float16 ----------------------------------------------------------------------

def test_float16_masks_are_finite_and_decode_as_float32(pair):
  """Padded inputs in float16: finite logits, and the greedy output of float32."""
  from specdec_jax.models import layers
  for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
    bias = layers.mask_to_bias(jnp.array([True, False]), dtype)
    assert bias.dtype == dtype and bool(jnp.all(jnp.isfinite(bias))) and float(bias[1]) < -3e4
  want, _ = generate.t5_generate(pair.model, pair.params, ENC, 10, eos_id=1)
  for dtype in (jnp.float16, jnp.bfloat16):
    model = t5.Transformer(pair.config.replace(dtype=dtype))
    dec_in = jnp.zeros((3, 5), jnp.int32)
    logits = model.apply({'params': pair.params}, ENC, dec_in, jnp.ones_like(dec_in),
                         enable_dropout=False)
    assert bool(jnp.all(jnp.isfinite(logits))), dtype
    got, _ = generate.t5_generate(model, pair.params, ENC, 10, eos_id=1)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=str(dtype))
  assert (np.asarray(want)[:, 0, 0] != 0).all()  # real tokens, not the pad token


# --- 4, 5: text inputs ------------------------------------------------------------------

def test_lone_surrogate_is_an_input_error_naming_file_and_line(tmp_path):
  path = tmp_path / 'in.jsonl'
  path.write_text('{"inputs": "A cat."}\n{"inputs": "A dog \\ud83d runs"}\n', encoding='utf-8')
  with pytest.raises(ValueError, match=r'in\.jsonl:2: the source holds a lone UTF-16 '
                                       r'surrogate U\+D83D at character 7'):
    inputs.read_file(path)
  path.write_text('{"inputs": "A cat.", "targets": "Eine \\udc00 Katze."}\n', encoding='utf-8')
  with pytest.raises(ValueError, match=r'in\.jsonl:1: the reference holds a lone'):
    inputs.read_file(path)
  # A complete pair is one character and is fine.
  path.write_text('{"inputs": "A dog \\ud83d\\udc36 runs"}\n', encoding='utf-8')
  assert inputs.read_file(path)[0].inputs == 'A dog \U0001f436 runs'
  # Records built in Python are checked when tokenized (before SentencePiece sees them).
  class Vocab:
    eos_id = 1

    def encode(self, text):
      raise AssertionError(f'SentencePiece was given {text!r}')
  rec = inputs.Record('x \ud83d', None, 'mine:1')
  with pytest.raises(ValueError, match='mine:1: the input holds a lone UTF-16 surrogate'):
    inputs.tokenize([rec], Vocab(), max_input_len=8)


@pytest.mark.parametrize('name, body, want', [
    ('a.txt', 'One.\nTwo.\n', [('One.', None), ('Two.', None)]),
    ('b.tsv', 'Hello.\tHallo.\n', [('Hello.', 'Hallo.')]),
    ('c.jsonl', '{"inputs": "Hi.", "targets": "Hallo."}\n', [('Hi.', 'Hallo.')]),
])
def test_utf8_byte_order_mark_is_stripped(tmp_path, name, body, want):
  for compress in (False, True):
    path = tmp_path / (name + ('.gz' if compress else ''))
    data = b'\xef\xbb\xbf' + body.encode()
    if compress:
      import gzip
      data = gzip.compress(data)
    path.write_bytes(data)
    assert [(r.inputs, r.targets) for r in inputs.read_file(path)] == want


# --- 6: γ + 1 > max_decode_len ----------------------------------------------------------

class _OneLayerPair:
  """One-layer target and draft (one compilation per (max_decode_len, γ) is the cost)."""

  def __init__(self):
    from conftest import small_config  # pylint: disable=g-import-not-at-top
    self.config = small_config(emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                               num_encoder_layers=1, num_decoder_layers=1)
    self.model = t5.Transformer(self.config)
    self.params = t5.init_params(self.config, jax.random.PRNGKey(0))
    draft_config = self.config.replace(emb_dim=8, head_dim=4, mlp_dim=16)
    self.draft_model = t5.Transformer(draft_config)
    self.draft_params = t5.init_params(draft_config, jax.random.PRNGKey(1))


@pytest.fixture(scope='module')
def one_layer_pair():
  return _OneLayerPair()


@pytest.mark.parametrize('max_decode_len, gamma', [
    (1, 1), (1, 3), (1, 8), (2, 2), (2, 4), (3, 4), (8, 8)])
def test_any_gamma_with_any_budget_equals_the_baseline(one_layer_pair, max_decode_len, gamma):
  pair = one_layer_pair
  base, _ = _baseline8(pair)
  got, _, stats = generate.t5_speculative_generate(
      pair.model, pair.params, pair.draft_model, pair.draft_params, ENC, max_decode_len,
      gamma, eos_id=1)
  assert got.shape == (3, 1, max_decode_len)
  # Greedy decoding is prefix-consistent: the first L tokens of an 8-token decode.
  np.testing.assert_array_equal(np.asarray(got)[:, 0], np.asarray(base)[:, 0, :max_decode_len])
  assert (np.asarray(stats.tokens)[:, 0] <= max_decode_len).all()


_BASE = {}


def _baseline8(pair):
  if 'b' not in _BASE:
    _BASE['b'] = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1)
  return _BASE['b']


# --- 8: the training CLI ----------------------------------------------------------------

@pytest.fixture
def train_lib():
  from specdec_jax.train import job as train_module

  def no_training(*a, **k):
    raise AssertionError('training started')
  return train_module, no_training


@pytest.mark.parametrize('args, needles', [
    (['--gin_file=configs/train/target_endee.gin'],
     ["invalid gin configuration: gin file 'configs/train/target_endee.gin' not found",
      '--gin_file spelling']),
    (['--gin_file=configs/train/target_ende.gin', '--gin.train.max_minute=1'],
     ["invalid gin configuration", "'train' doesn't have a parameter named 'max_minute'"]),
    (['--gin_file=configs/train/target_ende.gin', '--gin.train.run_dir=runs/x'],
     ['invalid gin configuration', '''--gin.train.run_dir="'runs/x'"''']),
])
def test_train_cli_errors_are_one_clean_message(args, needles, capsys, monkeypatch, train_lib):
  module, no_training = train_lib
  monkeypatch.setattr(module, 'train', no_training)
  rc = module.main(args)
  err = capsys.readouterr().err
  assert rc == 2, err
  assert err.startswith('specdec_jax.train: error: ') and 'Traceback' not in err
  for n in needles:
    assert n in err, err


def test_train_cli_bad_setting_is_exit_2(capsys, tmp_path, train_lib):
  module, _ = train_lib
  rc = module.main(['--gin_file=configs/train/target_ende.gin',
                    f"--gin.train.run_dir='{tmp_path / 'run'}'", "--gin.train.mode='mixed'"])
  err = capsys.readouterr().err
  assert rc == 2 and "train.mode must be 'target' or 'distill', got 'mixed'" in err, err
  assert 'Traceback' not in err and '--debug' in err
  assert not (tmp_path / 'run').exists()


def test_help_shows_each_entry_points_examples_and_parameters(capsys):
  from specdec_jax import decode
  from specdec_jax.benchmark import job as benchmark
  from specdec_jax.train import job as train_module
  for main, prog, needles in (
      (decode.main, 'specdec_jax.decode', ['decode.gamma (default 4)', 'configs/runs/decode.gin',
                                           'CHECKPOINT_PATH', '3 the default demo pair']),
      (train_module.main, 'specdec_jax.train', ['train.run_dir (required)',
                                                'configs/train/target_ende_v3.gin']),
      (benchmark.main, 'specdec_jax.benchmark', ['benchmark.gammas (default',
                                                 '--gin.benchmark.quick=True'])):
    with pytest.raises(SystemExit) as e:
      main(['--help'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f'python -m {prog}' in out and 'exit status: 0 success, 2' in out
    for n in needles:
      assert n in out, (prog, n)


# --- 9: Ctrl-C and progress bars ----------------------------------------------------------

def test_ctrl_c_in_train_and_benchmark_is_one_line_and_130(capsys, monkeypatch, train_lib):
  from specdec_jax.benchmark import job as benchmark
  module, _ = train_lib

  def interrupted(*a, **k):
    raise KeyboardInterrupt
  monkeypatch.setattr(module, 'train', interrupted)
  monkeypatch.setattr(benchmark, 'benchmark', interrupted)
  for main, argv, prog in (
      (module.main, ['--gin_file=configs/train/target_ende.gin'], 'specdec_jax.train'),
      (benchmark.main, ['--gin_file=configs/runs/benchmark.gin'], 'specdec_jax.benchmark')):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 130
    assert err.startswith(f'{prog}: interrupted; ') and err.count('\n') == 1, err


def test_progress_bars_only_on_a_terminal_or_when_asked(monkeypatch):
  monkeypatch.delenv('SPECDEC_PROGRESS', raising=False)
  monkeypatch.setattr(sys.stderr, 'isatty', lambda: False, raising=False)
  assert not flags.show_progress(None) and flags.show_progress(True)
  assert flags.progress_file() is not sys.stderr
  assert flags.progress_file().write('x') == 1  # discarded
  assert flags.progress_file(True) is sys.stderr
  monkeypatch.setenv('SPECDEC_PROGRESS', '1')
  assert flags.show_progress(None) and not flags.show_progress(False)
  monkeypatch.delenv('SPECDEC_PROGRESS')
  monkeypatch.setattr(sys.stderr, 'isatty', lambda: True, raising=False)
  assert flags.show_progress(None) and flags.progress_file() is sys.stderr


# --- 10: TensorFlow start-up noise ------------------------------------------------------

def test_tensorflow_noise_is_dropped_and_other_stderr_kept(capfd):
  from specdec_jax.text import vocabulary
  with vocabulary._drop_tensorflow_startup_lines():  # pylint: disable=protected-access
    os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are '
                b'written to STDERR\n')
    os.write(2, b'I0000 00:00:1.2 1 port.cc:153] oneDNN custom operations are on. You may\n')
    os.write(2, b'I0000 00:00:1.3 1 cudart_stub.cc:31] Could not find cuda drivers on your '
                b'machine, GPU will not be used.\n')
    os.write(2, b'a real warning\n')
  assert capfd.readouterr().err == 'a real warning\n'


@pytest.mark.slow  # A fresh interpreter importing JAX and TensorFlow.
def test_entry_points_start_without_tensorflow_and_seqio_imports_quietly():
  """One fresh interpreter: the entry points import no TensorFlow; seqio's import is silent."""
  code = ('import sys; import specdec_jax.decode, specdec_jax.train.job, specdec_jax.benchmark.job; '
          "print(sorted(m for m in ('tensorflow', 'seqio') if m in sys.modules)); "
          'from specdec_jax.text import vocabulary; vocabulary.import_seqio(); '
          "print('tensorflow' in sys.modules)")
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                        timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ['[]', 'True'], proc.stdout
  assert proc.stderr == '', proc.stderr


# --- 11: params held as numpy arrays ------------------------------------------------

def test_numpy_params_are_warned_about_and_decode_the_same(pair):
  """A jitted call copies numpy arguments to the device every time (4-15 ms per call for
  the demo pair): the entry points warn, naming the tree and the fix; outputs unchanged."""
  import warnings
  x = jnp.asarray(ENC)
  host_target = jax.tree.map(np.asarray, pair.params)
  host_draft = jax.tree.map(np.asarray, pair.draft_params)
  with warnings.catch_warnings():
    warnings.simplefilter('error', RuntimeWarning)  # device params: no warning
    want = generate.t5_generate(pair.model, pair.params, x, 8)[0]
    want_spec = generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                                 pair.draft_params, x, 8, 2)[0]
  with pytest.warns(RuntimeWarning, match=r'^params holds numpy arrays.*'
                    r'params = jax\.device_put\(params\)'):
    got = generate.t5_generate(pair.model, host_target, x, 8)[0]
  np.testing.assert_array_equal(got, want)
  with pytest.warns(RuntimeWarning) as record:
    got_spec = generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                                host_draft, x, 8, 2)[0]
  assert [str(w.message).split()[0] for w in record] == ['draft_params']
  np.testing.assert_array_equal(got_spec, want_spec)
  # On a mesh numpy params are placed anew on every call too: warned the same way.
  from specdec_jax import sharding
  plan = sharding.plan_from((1, 1))
  with pytest.warns(RuntimeWarning, match=r'^params holds numpy arrays.*shardings=plan'):
    got = generate.t5_generate(pair.model, host_target, x, 8, sharding_plan=plan)[0]
  np.testing.assert_array_equal(got, want)


def test_reports_are_strict_json():
  """Summaries, JSONL rows, training logs and benchmark results go through `jsonio.dumps`:
  NaN and ±Inf (an α with no drafts, a diverged loss) become null, so a strict JSON reader
  (no NaN / Infinity constants) reads every file the jobs write."""
  import json
  import math
  import numpy as np
  from specdec_jax.util import jsonio

  def strict(text):
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

  report = {'alpha': float('nan'), 'loss': [1.0, float('inf'), -math.inf],
            'tokens_per_s': np.float32(np.nan), 'rows': np.array([0.5, np.nan]), 'ok': 2}
  assert strict(jsonio.dumps(report)) == {'alpha': None, 'loss': [1.0, None, None],
                                          'tokens_per_s': None, 'rows': [0.5, None], 'ok': 2}
  with pytest.raises(ValueError):  # what the jobs wrote before: NaN, not JSON
    strict(json.dumps(report, default=jsonio.default))
  # the writers use it (one grep-level guard per job module)
  import inspect
  from specdec_jax.benchmark import job as bench_job
  from specdec_jax.decode import outputs
  from specdec_jax.train import distill_data, job as train_job
  for module in (outputs, bench_job, distill_data, train_job):
    assert 'jsonio.dumps(' in inspect.getsource(module), module.__name__
