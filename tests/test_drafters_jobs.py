"""Drafters through the jobs and the T5X model class (issue #40): a target-only pair folder
(no draft model at all) decoded with 'lookup' and 'bigram', lenience labelled, bad
drafter settings refused with exit 2 before loading.

The pair is tiny and random (tests/test_benchmark_smoke.py's), so only exactness and
plumbing are checked here; speed is the benchmark's (BENCHMARKS.md).
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from specdec_jax import decode as decode_lib
from specdec_jax import generate
from specdec_jax.benchmark import job as bench
from specdec_jax.drafters import tables

from test_benchmark_smoke import _clear_gin, tiny_pair  # noqa: F401  (fixtures)


@pytest.fixture(scope='module')
def target_only(tiny_pair, tmp_path_factory):  # noqa: F811
  """A pair folder with the target alone (pair.json, target/, vocab/, bigram.npz)."""
  root, sentences = tiny_pair
  out = tmp_path_factory.mktemp('target_only')
  shutil.copytree(root / 'target', out / 'target')
  shutil.copytree(root / 'vocab', out / 'vocab')
  pair = json.loads((root / 'pair.json').read_text())
  (out / 'pair.json').write_text(json.dumps({'target': pair['target'],
                                             'input_prefix': ''}))
  rng = np.random.default_rng(0)
  ids, log_probs = tables.estimate([rng.integers(3, 200, 9) for _ in range(50)], 8192, k=8)
  tables.save(out / 'bigram.npz', ids, log_probs, 2, 8192)
  inputs = out / 'inputs.txt'
  inputs.write_text('A dog runs in the park.\nTwo men are talking.\nA girl reads.\n')
  return out, inputs


def _run(folder, inputs, out, *bindings):
  return decode_lib.main([
      f"--gin.decode.pair_dir='{folder}'", f"--gin.decode.input_path='{inputs}'",
      f"--gin.decode.output_path='{out}'", '--gin.decode.max_input_len=16',
      '--gin.decode.max_decode_len=12', '--gin.decode.batch_size=2',
      '--gin.decode.print_predictions=0', *[f'--gin.{b}' for b in bindings]])


def _rows(path):
  return [json.loads(x) for x in path.read_text().splitlines()]


def test_target_only_pair_with_model_free_drafters(target_only, tmp_path, capsys):
  folder, inputs = target_only
  base = tmp_path / 'base.jsonl'
  assert _run(folder, inputs, base, "decode.method='baseline'") == 0
  for drafter in ('lookup', 'bigram'):
    out = tmp_path / f'{drafter}.jsonl'
    rc = _run(folder, inputs, out, f"decode.drafter='{drafter}'", 'decode.gamma=3')
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert [r['prediction'] for r in _rows(out)] == [r['prediction'] for r in _rows(base)]
    summary = json.loads((tmp_path / f'{drafter}.jsonl.summary.json').read_text())
    assert summary['drafter'] == drafter and summary['exact'] is True
    assert summary['draft_checkpoint'] is None  # no draft model anywhere
    assert f'drafter={drafter}' in captured.out
  assert summary['ngram_table_path'].endswith('bigram.npz')


def test_lenience_is_labelled_not_exact(target_only, tmp_path, capsys):
  folder, inputs = target_only
  out = tmp_path / 'lenient.jsonl'
  rc = _run(folder, inputs, out, "decode.drafter='bigram'", 'decode.temperature=1.0',
            'decode.lenience=0.5')
  captured = capsys.readouterr()
  assert rc == 0, captured.err
  summary = json.loads((tmp_path / 'lenient.jsonl.summary.json').read_text())
  assert summary['exact'] is False and summary['lenience'] == 0.5
  assert all(r['exact'] is False for r in _rows(out))
  assert 'NO (lenience=0.5' in captured.out


@pytest.mark.parametrize('bindings, needle', [
    (["decode.drafter='ngram'"], 'decode.drafter'),
    (["decode.drafter='lookup'", "decode.ngram_table_path='x.npz'"], 'ngram_table_path'),
    (["decode.drafter='unigram'"], 'unigram.npz'),
    (["decode.lenience=0.0"], 'lenience'),
    (["decode.lenience=0.5", "decode.verification='block'"], "verification='token'"),
    (["decode.drafter='model'"], 'draft/'),
])
def test_bad_drafter_settings_exit_2(target_only, tmp_path, capsys, bindings, needle):
  folder, inputs = target_only
  out = tmp_path / 'o.jsonl'
  rc = _run(folder, inputs, out, *bindings)
  err = capsys.readouterr().err
  assert rc == 2, err
  assert needle in err and 'Traceback' not in err
  assert not out.exists()


def test_benchmark_drafters_on_a_target_only_pair(target_only, tmp_path):
  folder, inputs = target_only
  out = tmp_path / 'bench'
  decode_lib.parse_gin(['configs/runs/benchmark.gin'], [
      'benchmark.quick = True', f"benchmark.pair_dir = '{folder}'",
      f"benchmark.output_dir = '{out}'", f"benchmark.datasets = (('tiny', '{inputs}'),)",
      "benchmark.prefix = ''", 'benchmark.max_input_len = 16', 'benchmark.max_decode_len = 12',
      "benchmark.drafters = ('lookup', 'bigram')"])
  res = bench.benchmark()
  assert res['settings_results'] == [] and res['identical_at_t0'] is True
  rows = res['drafter_results']
  assert sorted((r['drafter'], r['gamma']) for r in rows) == [
      ('bigram', 2), ('bigram', 4), ('lookup', 2), ('lookup', 4)]
  for r in rows:
    assert r['exact'] and r['identical'] and r['c'] == 0.0
    assert r['tokens_per_target_call'] >= 1.0
  assert '## Drafters' in (out / 'results.md').read_text()


def test_t5x_model_class_with_lookup_and_no_draft(pair):
  """`SpeculativeEncoderDecoderModel(drafter='lookup')` with no draft module: the
  target's greedy tokens; the decode_fn takes the drafter too."""
  from specdec_jax.interop.t5x import decoding as t5x_decoding
  from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel
  from test_t5x_model import ENC, MAX_LEN, FakeVocab, t5x_batch
  vocab = FakeVocab(size=60)
  model = SpeculativeEncoderDecoderModel(pair.model, vocab, vocab, optimizer_def=None,
                                         drafter='lookup', gamma=3)
  ref, _ = generate.t5_generate(pair.model, pair.params, ENC, MAX_LEN, eos_id=1)
  decodes, aux = model.predict_batch_with_aux(pair.params, t5x_batch(),
                                              return_all_decodes=True)
  np.testing.assert_array_equal(np.asarray(decodes), np.asarray(ref))
  assert 'draft' not in model.get_initial_variables(
      jax.random.PRNGKey(0), {'encoder_input_tokens': ENC.shape,
                              'decoder_input_tokens': (3, MAX_LEN)})['params']
  with pytest.raises(ValueError, match='draft_module'):
    SpeculativeEncoderDecoderModel(pair.model, vocab, vocab, optimizer_def=None)
  with pytest.raises(ValueError, match='ngram_table'):
    SpeculativeEncoderDecoderModel(pair.model, vocab, vocab, optimizer_def=None,
                                   drafter='bigram')
  with pytest.raises(ValueError, match='drafter'):
    SpeculativeEncoderDecoderModel(pair.model, vocab, vocab, optimizer_def=None,
                                   drafter='trigram')
  # T5X's decode_fn calling convention (prompt with a leading 0, as T5X passes it).
  inputs = np.zeros((3, MAX_LEN), np.int32)
  out, _ = t5x_decoding.speculative_sample(
      inputs, None, None, eos_id=1, temperature=0.0, gamma=3, drafter='lookup',
      target_module=pair.model, target_params=pair.params, encoder_input_tokens=ENC)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))
