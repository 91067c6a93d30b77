"""GLEU (specdec_jax/text/gleu.py): hand-computed statistics, planted wrong variants,
seeded reference draws, the JFLEG dev set (skipped without the data) and input errors.
Pure Python + numpy; no JAX."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from specdec_jax.text import gleu
from specdec_jax.util import paths

# One error at the end: every order has exactly one source n-gram the reference changed.
SRC = 'my brother and i walk to the school every days'
REF = 'my brother and i walk to the school every day'


def _score(src, hyp, ref, **kw):
  return gleu.corpus_gleu([src], [hyp], [[ref]], iterations=3, **kw).score


# --- 1: hand-computed statistics ---------------------------------------------------

def test_source_copy_is_penalised_for_the_ngrams_the_reference_changed():
  # n=1: 9 shared - 1 kept 'days' = 8 of 10; n=2: 8 - 1 = 7 of 9; n=3: 7 - 1 = 6 of 8;
  # n=4: 6 - 1 = 5 of 7.
  np.testing.assert_array_equal(gleu.gleu_stats(SRC, SRC, REF),
                                [10, 10, 8, 10, 7, 9, 6, 8, 5, 7])
  want = 100 * (0.8 * 7 / 9 * 0.75 * 5 / 7) ** 0.25  # = 100 / 3 ** 0.25
  assert want == pytest.approx(100 / 3 ** 0.25)
  assert _score(SRC, SRC, REF) == pytest.approx(want, rel=1e-12)


def test_reference_copy_scores_100_and_beats_the_source():
  np.testing.assert_array_equal(gleu.gleu_stats(SRC, REF, REF),
                                [10, 10, 10, 10, 9, 9, 8, 8, 7, 7])
  assert _score(SRC, REF, REF) == pytest.approx(100.0)
  assert _score(SRC, SRC, REF) < _score(SRC, REF, REF)
  # Short sentence: the source keeps 'he go' and 'go to', which outweigh the one shared
  # bigram 'to school', so its bigram numerator is max(0, 1 - 2) = 0 and GLEU is 0.
  s, r = 'he go to school', 'he goes to school'
  np.testing.assert_array_equal(gleu.gleu_stats(s, s, r), [4, 4, 2, 4, 0, 3, 0, 2, 0, 1])
  assert _score(s, s, r) == 0.0
  assert _score(s, r, r) == pytest.approx(100.0)


def test_brevity_penalty():
  short = 'my brother and i walk to the school'  # 8 tokens, all right, against 10.
  np.testing.assert_array_equal(gleu.gleu_stats(SRC, short, REF),
                                [8, 10, 8, 8, 7, 7, 6, 6, 5, 5])
  assert _score(SRC, short, REF) == pytest.approx(100 * math.exp(1 - 10 / 8), rel=1e-12)
  longer = REF + ' too'  # H > R: no penalty; precisions 10/11, 9/10, 8/9, 7/8.
  want = 100 * (10 / 11 * 9 / 10 * 8 / 9 * 7 / 8) ** 0.25
  assert _score(SRC, longer, REF) == pytest.approx(want, rel=1e-12)
  assert _score(SRC, '', REF) == 0.0


def test_statistics_sum_over_the_corpus():
  s2, r2 = 'he go to school', 'he goes to school'
  result = gleu.corpus_gleu([SRC, s2], [SRC, s2], [[REF, r2]], iterations=2)
  stats = gleu.gleu_stats(SRC, SRC, REF) + gleu.gleu_stats(s2, s2, r2)
  np.testing.assert_array_equal(stats, [14, 14, 10, 14, 7, 12, 6, 10, 5, 8])
  want = 100 * (10 / 14 * 7 / 12 * 6 / 10 * 5 / 8) ** 0.25
  assert result.score == pytest.approx(want, rel=1e-12)
  assert result.std == 0.0 and result.ci95 == (result.score, result.score)
  assert (result.iterations, result.sentences) == (2, 2)


# --- 2: planted wrong variants -----------------------------------------------------

def _bleu_style(src, hyp, ref):
  """Planted variant: plain clipped n-gram precision, no source penalty."""
  del src
  h, r = hyp.split(), ref.split()
  logp = 0.0
  for n in range(1, 5):
    hg = [tuple(h[i:i + n]) for i in range(len(h) - n + 1)]
    rg = [tuple(r[i:i + n]) for i in range(len(r) - n + 1)]
    match = sum(min(hg.count(g), rg.count(g)) for g in set(hg))
    logp += math.log(match / len(hg)) / 4
  return 100 * math.exp(min(0.0, 1 - len(r) / len(h)) + logp)


def test_planted_bleu_style_precision_differs():
  planted = _bleu_style(SRC, SRC, REF)
  assert planted == pytest.approx(100 * 0.6 ** 0.25)  # 9/10 * 8/9 * 7/8 * 6/7 = 0.6.
  assert abs(_score(SRC, SRC, REF) - planted) > 5
  # Where the hypothesis keeps no source-only n-gram the two agree.
  assert _score(SRC, REF, REF) == pytest.approx(_bleu_style(SRC, REF, REF))


def test_source_difference_multiset_vs_type():
  # The source repeats 'the' (and its n-grams); the reference keeps one 'the'.
  src = 'we saw the the big dog at the park today'
  ref = 'we saw the big dog at the park today'
  # Unigrams: s has the x3, r has the x2. multiset: s \ r = {the: 1}, so copying the
  # source loses 1; type: 'the' is in r, so s \ r has no 'the' and nothing is lost.
  multi = gleu.gleu_stats(src, src, ref, source_diff='multiset')
  typed = gleu.gleu_stats(src, src, ref, source_diff='type')
  assert multi[2] == 9 - 1 and typed[2] == 9
  # Bigram 'the the' is in no reference: both subtract it.
  assert multi[4] == typed[4] == 8 - 1
  # The reference itself: 'type' never penalises it, 'multiset' can.
  assert gleu.gleu_stats(src, ref, ref, source_diff='type')[2] == 9
  assert gleu.gleu_stats(src, ref, ref, source_diff='multiset')[2] == 9 - 1
  assert _score(src, src, ref, source_diff='multiset') < _score(src, src, ref, source_diff='type')
  with pytest.raises(ValueError, match='source_diff'):
    gleu.gleu_stats(src, src, ref, source_diff='set')


# --- 3: reference draws ------------------------------------------------------------

SRCS = [SRC, 'he go to school', 'she like apples very much yes', 'they was happy about it all']
REFS = [
    [REF, 'he goes to school', 'she likes apples very much yes', 'they were happy about it all'],
    ['my brother and i walk to school every day', 'he went to school',
     'she likes apple very much yes', 'they was happy about it all'],
    [SRC, 'he goes to the school', 'she really likes apples yes', 'they were glad about it all'],
]
HYPS = [REF, 'he goes to school', 'she like apples very much yes', 'they were happy about it']


def test_fixed_seed_is_deterministic_and_matches_explicit_draws():
  a = gleu.corpus_gleu(SRCS, HYPS, REFS, iterations=50, seed=7)
  b = gleu.corpus_gleu(SRCS, HYPS, REFS, iterations=50, seed=7)
  assert a == b
  assert gleu.corpus_gleu(SRCS, HYPS, REFS, iterations=50, seed=8) != a
  # The same draws done by hand: sentence-by-sentence statistics, summed, scored.
  draws = np.random.default_rng(7).integers(0, 3, size=(50, 4))
  scores = [100 * gleu.gleu_from_stats(sum(gleu.gleu_stats(SRCS[i], HYPS[i], REFS[k][i])
                                           for i, k in enumerate(row)))
            for row in draws]
  assert a.score == pytest.approx(np.mean(scores), rel=1e-12)
  assert a.std == pytest.approx(np.std(scores), rel=1e-9)
  assert a.std > 0
  assert a.ci95 == pytest.approx((a.score - 1.959964 * a.std, a.score + 1.959964 * a.std))
  assert (a.iterations, a.sentences) == (50, 4)


def test_many_draws_average_over_all_reference_choices():
  exact = np.mean([
      100 * gleu.gleu_from_stats(sum(gleu.gleu_stats(SRCS[i], HYPS[i], REFS[k][i])
                                     for i, k in enumerate(choice)))
      for choice in itertools.product(range(3), repeat=4)])  # All 81 choices.
  result = gleu.corpus_gleu(SRCS, HYPS, REFS, iterations=4000, seed=0)
  # Standard error of the mean: std / sqrt(4000); allow 4 of them.
  assert abs(result.score - exact) < 4 * result.std / math.sqrt(4000)
  single = [gleu.corpus_gleu(SRCS, HYPS, [refs], iterations=5).score for refs in REFS]
  assert min(single) < result.score < max(single)


# --- 4: JFLEG dev ------------------------------------------------------------------

def _jfleg_dev():
  try:
    folder = paths.data_dir() / 'gec' / 'jfleg_dev'
  except FileNotFoundError as e:
    pytest.skip(f'No shared data folder (SPECDEC_DATA): {e}')
  if not folder.is_dir():
    pytest.skip(f'JFLEG dev data not found at {str(folder)!r} '
                '($SPECDEC_DATA/gec/jfleg_dev with dev.src, dev.ref0..dev.ref3).')
  return gleu.read_jfleg(folder)


def test_jfleg_dev_source_and_reference():
  src, refs = _jfleg_dev()
  assert len(src) == 754 and len(refs) == 4 and all(len(r) == 754 for r in refs)
  source = gleu.corpus_gleu(src, src, refs)
  ref0 = gleu.corpus_gleu(src, refs[0], refs)
  print(f'JFLEG dev GLEU: source {source.score:.2f} (std {source.std:.2f}), '
        f'ref0 vs all four refs {ref0.score:.2f}')
  assert 35 <= source.score <= 42  # JFLEG reports 38.21 (dev) for the source.
  assert ref0.score > 50
  assert ref0.score > source.score + 15


def test_jfleg_dev_type_reading_reproduces_the_leaderboard():
  """With the JFLEG script's s \\ r the leaderboard's dev numbers come back, to within the
  sampling noise of 500 draws (std ~1 / sqrt(500) ~ 0.05): source 38.21, reference 55.26
  (each reference against the other three, averaged)."""
  src, refs = _jfleg_dev()
  source = gleu.corpus_gleu(src, src, refs, source_diff='type')
  reference = np.mean([
      gleu.corpus_gleu(src, refs[k], refs[:k] + refs[k + 1:], source_diff='type').score
      for k in range(4)])
  print(f'JFLEG dev GLEU (type): source {source.score:.2f}, reference {reference:.2f}')
  assert source.score == pytest.approx(38.21, abs=0.25)
  assert reference == pytest.approx(55.26, abs=0.25)


# --- 5: errors ---------------------------------------------------------------------

def test_errors_name_the_argument():
  with pytest.raises(ValueError, match='hypotheses has 1 sentences but sources has 2'):
    gleu.corpus_gleu(['a', 'b'], ['a'], [['a', 'b']])
  with pytest.raises(ValueError, match=r'references\[1\] has 3 sentences'):
    gleu.corpus_gleu(['a', 'b'], ['a', 'b'], [['a', 'b'], ['a', 'b', 'c']])
  with pytest.raises(ValueError, match='sources is empty'):
    gleu.corpus_gleu([], [], [[]])
  with pytest.raises(ValueError, match='references is empty'):
    gleu.corpus_gleu(['a'], ['a'], [])
  with pytest.raises(ValueError, match=r'pass \[refs\]'):
    gleu.corpus_gleu(['a', 'b'], ['a', 'b'], ['a', 'b'])
  with pytest.raises(ValueError, match='iterations'):
    gleu.corpus_gleu(['a'], ['a'], [['a']], iterations=0)
  with pytest.raises(TypeError, match=r'hypotheses\[0\]'):
    gleu.corpus_gleu(['a b'], [['a', 'b']], [['a b']])
  with pytest.raises(TypeError, match='sources'):
    gleu.corpus_gleu('a b', ['a b'], [['a b']])


def test_read_jfleg_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match='nowhere'):
    gleu.read_jfleg(tmp_path / 'nowhere')
  (tmp_path / 'dev.src').write_text('a b \nc\n', encoding='utf-8')
  for k in range(3):
    (tmp_path / f'dev.ref{k}').write_text('a b\nc d\n', encoding='utf-8')
  with pytest.raises(FileNotFoundError, match=r'lacks dev\.ref3') as e:
    gleu.read_jfleg(tmp_path)
  assert str(tmp_path) in str(e.value)
  (tmp_path / 'dev.ref3').write_text('a b\n', encoding='utf-8')
  with pytest.raises(ValueError, match=r'dev\.ref3.*1 lines'):
    gleu.read_jfleg(tmp_path)
  (tmp_path / 'dev.ref3').write_text('\ufeffa b\r\ne f', encoding='utf-8')
  src, refs = gleu.read_jfleg(tmp_path)
  assert src == ['a b', 'c'] and refs[3] == ['a b', 'e f'] and refs[0] == ['a b', 'c d']


def test_cli(tmp_path, capsys):
  src, hyp, ref = (tmp_path / n for n in ('src', 'hyp', 'ref'))
  src.write_text(SRC + '\n', encoding='utf-8')
  hyp.write_text(SRC + '\n', encoding='utf-8')
  ref.write_text(REF + '\n', encoding='utf-8')
  assert gleu.main(['--src', str(src), '--hyp', str(hyp), '--ref', str(ref),
                    '--iterations', '3']) == 0
  out = json.loads(capsys.readouterr().out)
  assert out['gleu'] == pytest.approx(100 / 3 ** 0.25, abs=1e-4)
  assert out['sentences'] == 1 and out['std'] == 0 and len(out['ci95']) == 2
  hyp.write_text('a\nb\n', encoding='utf-8')
  assert gleu.main(['--src', str(src), '--hyp', str(hyp), '--ref', str(ref)]) == 2
  err = capsys.readouterr().err
  assert err.startswith('gleu: error:') and '2 lines' in err and err.count('\n') == 1
  assert gleu.main(['--src', str(tmp_path / 'missing'), '--hyp', str(hyp),
                    '--ref', str(ref)]) == 2
  assert 'not found' in capsys.readouterr().err


def _load_eval_gec():
  import importlib.util
  import pathlib
  path = pathlib.Path(__file__).resolve().parent.parent / 'scripts' / 'eval_gec.py'
  spec = importlib.util.spec_from_file_location('eval_gec_script', path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_eval_gec_script_length_table(tmp_path, capsys):
  """`scripts/eval_gec.py`: the model card's length table (buckets, loops, drops) per bucket."""
  eval_gec = _load_eval_gec()
  short = 'he go to school yesterday .'                       # 6 words
  mid = ' '.join(f'w{i}' for i in range(24))                   # 24 words
  long_ = ' '.join(f'x{i}' for i in range(45))                 # 45 words
  sources = [short, short, mid, long_]
  hyps = ['he went to school yesterday .', short,              # one edit, one unchanged
          ' '.join(mid.split()[:21]),                           # drops 3 words
          long_ + ' ' + ' '.join(['x1'] * 30)]                  # loops to the limit
  ended = ['eos', 'eos', 'eos', 'max_decode_len']
  for k in range(4):
    refs = ['he went to school yesterday .', short, mid, long_]
    (tmp_path / f'dev.ref{k}').write_text('\n'.join(refs) + '\n', encoding='utf-8')
  (tmp_path / 'dev.src').write_text('\n'.join(sources) + '\n', encoding='utf-8')
  pred = tmp_path / 'pred.jsonl'
  pred.write_text(''.join(json.dumps(dict(prediction=h, ended=e)) + '\n'
                          for h, e in zip(hyps, ended)), encoding='utf-8')
  out = tmp_path / 'gleu.json'
  assert eval_gec.main(['--predictions', str(pred), '--jfleg', str(tmp_path),
                        '--out', str(out)]) == 0
  res = json.loads(out.read_text())
  assert res == json.loads(capsys.readouterr().out)
  assert res['sentences'] == 4 and res['changed_sentences'] == 3 and res['at_limit'] == 1
  table = {r['words']: r for r in res['by_length']}
  assert sorted(table) == ['20-29', '<20', '>=40']              # the empty 30-39 is left out
  assert (table['<20']['sentences'], table['<20']['unchanged'], table['<20']['at_limit'],
          table['<20']['dropped_2plus']) == (2, 1, 0, 0)
  assert (table['20-29']['unchanged'], table['20-29']['dropped_2plus']) == (0, 1)
  assert (table['>=40']['at_limit'], table['>=40']['dropped_2plus']) == (1, 0)
  _, refs = gleu.read_jfleg(tmp_path)
  want = gleu.corpus_gleu(sources[:2], hyps[:2], [r[:2] for r in refs]).score
  assert table['<20']['gleu'] == pytest.approx(want)
  assert table['<20']['gleu'] > table['<20']['gleu_do_nothing']  # the edit matches the reference


def test_eval_gec_script_scores_only_the_named_lines(tmp_path, capsys):
  """`--lines` (a held-out part of dev): the predictions are those lines', in order, and
  only they are scored; bad line files are refused with the flag named."""
  eval_gec = _load_eval_gec()
  sources = ['a b c .', 'd e f .', 'g h i .', 'j k l .']
  refs = ['a b c !', 'd e f !', 'g h i !', 'j k l !']
  (tmp_path / 'dev.src').write_text('\n'.join(sources) + '\n', encoding='utf-8')
  for k in range(4):
    (tmp_path / f'dev.ref{k}').write_text('\n'.join(refs) + '\n', encoding='utf-8')
  (tmp_path / 'ids').write_text('3\n1\n')
  pred = tmp_path / 'pred.jsonl'
  pred.write_text(''.join(json.dumps(dict(prediction=h, ended='eos')) + '\n'
                          for h in ('j k l !', 'd e f .')), encoding='utf-8')
  assert eval_gec.main(['--predictions', str(pred), '--jfleg', str(tmp_path),
                        '--lines', str(tmp_path / 'ids')]) == 0
  res = json.loads(capsys.readouterr().out)
  want = gleu.corpus_gleu([sources[3], sources[1]], ['j k l !', 'd e f .'],
                          [[refs[3], refs[1]]] * 4).score
  assert res['sentences'] == 2 and res['gleu'] == pytest.approx(want)
  assert res['changed_sentences'] == 1 and res['lines'] == str(tmp_path / 'ids')
  for bad in ('3\n4\n', '1\n1\n', 'x\n', '-1\n', ''):
    (tmp_path / 'ids').write_text(bad)
    assert eval_gec.main(['--predictions', str(pred), '--jfleg', str(tmp_path),
                          '--lines', str(tmp_path / 'ids')]) == 2
    assert '--lines=' in capsys.readouterr().err
  (tmp_path / 'ids').write_text('0\n1\n2\n')
  assert eval_gec.main(['--predictions', str(pred), '--jfleg', str(tmp_path),
                        '--lines', str(tmp_path / 'ids')]) == 2
  assert '--lines names 3 lines' in capsys.readouterr().err


def _load_script(name):
  import importlib.util
  import pathlib
  path = pathlib.Path(__file__).resolve().parent.parent / 'scripts' / f'{name}.py'
  spec = importlib.util.spec_from_file_location(f'{name}_script', path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_edit_margin_keeps_only_confident_edits():
  """`scripts/gec_edit_margin.keep_confident`: an edit survives only at margin ≥ δ; an
  unchanged output (same words, other spacing) stays the source; lengths must agree."""
  em = _load_script('gec_edit_margin')
  sources = ['he go home .', 'a b c', 'x y']
  hyps = ['he goes home .', 'a  b c', 'x z']
  assert em.keep_confident(sources, hyps, [3.0, 9.0, 0.5], 1.0) == [
      'he goes home .', 'a b c', 'x y']
  assert em.keep_confident(sources, hyps, [3.0, 9.0, 0.5], 0.0) == [
      'he goes home .', 'a b c', 'x z']
  with pytest.raises(ValueError, match='differ in length'):
    em.keep_confident(sources, hyps, [1.0], 0.0)


def test_edit_margin_scores_match_cached_decoding():
  """`sequence_logprobs` (teacher-forced, one call) equals Σ log p of the same target
  summed one cached decoder step at a time (`t5.decode_step`), on a tiny random T5; a
  planted off-by-one (targets not shifted right) gives a different score."""
  import jax
  import jax.numpy as jnp
  from conftest import small_config
  from specdec_jax.models import t5
  em = _load_script('gec_edit_margin')
  config = small_config()
  model = t5.Transformer(config)
  params = t5.init_params(config, jax.random.PRNGKey(3))

  class Vocab:  # words → ids 2 … 63
    def encode(self, text):
      return [2 + (sum(map(ord, w)) % 60) for w in text.split()]
  src, tgt = ['he go home .', 'she like it'], ['he goes home .', 'she likes it very much']
  got = em.sequence_logprobs(model, params, Vocab(), 'fix: ', src, tgt, batch_size=4,
                             max_input_len=12, max_target_len=8)
  for i in range(2):
    enc = jnp.asarray([Vocab().encode('fix: ' + src[i]) + [1]], jnp.int32)
    ids = Vocab().encode(tgt[i]) + [1]
    cache = t5.encode_and_init_cache(model, params, enc, 16)
    step = t5.make_step_fn(model, params)
    total, prev = 0.0, 0
    for n, tok in enumerate(ids):
      logits, cache = step(jnp.asarray([[prev]], jnp.int32), jnp.asarray([n], jnp.int32), cache)
      total += float(jax.nn.log_softmax(logits[0, 0])[tok])
      prev = tok
    assert got[i] == pytest.approx(total, abs=1e-4)
  # planted: teacher forcing without the right shift scores something else
  e_ids, t_ids = Vocab().encode('fix: ' + src[0]) + [1], Vocab().encode(tgt[0]) + [1]
  enc = jnp.zeros((1, 12), jnp.int32).at[0, :len(e_ids)].set(jnp.asarray(e_ids))
  tgt0 = jnp.zeros((1, 8), jnp.int32).at[0, :len(t_ids)].set(jnp.asarray(t_ids))
  logits = model.apply({'params': params}, enc, tgt0, tgt0, enable_dropout=False)
  wrong = float(jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits), tgt0[..., None], -1)[..., 0]
                        * (tgt0 > 0)))
  assert abs(wrong - got[0]) > 1e-2


def test_edit_margin_cli_refuses_bad_files_before_loading_the_model(tmp_path, capsys):
  """`scripts/gec_edit_margin.py`: unreadable or mismatched predictions and bad held-out
  files end in one error line naming the flag (exit 2), before any model is loaded."""
  em = _load_script('gec_edit_margin')
  sources, _ = gleu.read_jfleg(paths.data_dir() / 'gec' / 'jfleg_dev')
  good = tmp_path / 'good.jsonl'
  good.write_text(''.join(json.dumps(dict(inputs=s + ' ', prediction=s)) + '\n' for s in sources))
  held = tmp_path / 'held.ids'
  held.write_text('0\n5\n')
  cases = {
      'short': (''.join(json.dumps(dict(prediction='x')) + '\n' for _ in range(5)), '0\n'),
      'notjson': ('{"prediction": \n' * len(sources), '0\n'),
      'shifted': (''.join(json.dumps(dict(inputs=s, prediction=s)) + '\n'
                          for s in sources[1:] + sources[:1]), '0\n'),
  }
  for name, (text, _) in cases.items():
    (tmp_path / f'{name}.jsonl').write_text(text)
    assert em.main(['--predictions', str(tmp_path / f'{name}.jsonl'),
                    '--heldout', str(held)]) == 2, name
    err = capsys.readouterr().err
    assert err.startswith('error: --predictions=') and 'Traceback' not in err, (name, err)
  assert em.main(['--predictions', str(tmp_path / 'missing.jsonl'), '--heldout', str(held)]) == 2
  assert 'error: --predictions=' in capsys.readouterr().err
  for bad in ('754\n', '1\n1\n', 'x\n'):
    held.write_text(bad)
    assert em.main(['--predictions', str(good), '--heldout', str(held)]) == 2
    assert 'error: --heldout=' in capsys.readouterr().err
  assert em.main(['--predictions', str(good), '--heldout', str(tmp_path / 'none.ids')]) == 2
  assert '--synthetic_dir=runs/gec_data_80' in capsys.readouterr().err  # the hint runs as given
  held.write_text('\n'.join(map(str, range(len(sources)))))
  assert em.main(['--predictions', str(good), '--heldout', str(held)]) == 2
  assert 'nothing is left' in capsys.readouterr().err
  held.write_text('0\n')
  assert em.main(['--predictions', str(good), '--heldout', str(held),
                  '--pair_dir', str(tmp_path)]) == 2
  assert 'error: --pair_dir=' in capsys.readouterr().err
