"""The correction pair's synthetic data (train/gec_data.py) and the draft tables
(drafters/tables.py): tokenization like JFLEG, a seeded recipe that makes every kind of
error, and table files that refuse what does not fit."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from specdec_jax.drafters import tables
from specdec_jax.train import gec_data


def test_tokenize_like_jfleg():
  assert (gec_data.tokenize("I don't know, Sam's (maybe) in the U.S. today.")
          == "I do n't know , Sam 's ( maybe ) in the U.S. today .")
  assert gec_data.tokenize('It costs 1,000 dollars!') == 'It costs 1,000 dollars !'


def test_corruption_is_seeded_and_makes_every_kind():
  sentence = gec_data.tokenize('The two young men are walking to the park with their dogs, '
                               'and I think that they have been there before.')
  kinds = collections.Counter()
  changed = 0
  for i in range(400):
    a, ka = gec_data.corrupt(sentence, np.random.default_rng([0, 0, i]))
    b, kb = gec_data.corrupt(sentence, np.random.default_rng([0, 0, i]))
    assert (a, ka) == (b, kb)  # the same generator, the same corruption
    kinds.update(ka)
    changed += a != sentence
  assert set(kinds) == set(gec_data.KINDS)
  assert 0.7 < changed / 400 < 0.95  # keep_prob 0.15 leaves some sentences correct


def test_build_writes_aligned_splits(tmp_path):
  root = tmp_path / 'data' / 'ende'
  for sub, n in (('multi30k', 30), ('wmt', 30)):
    (root / sub).mkdir(parents=True)
  lines = [f'A man number {i} is walking in the park with a dog.' for i in range(30)]
  for stem in ('multi30k/train', 'multi30k/val', 'wmt/news_train', 'wmt/news_dev'):
    (root / f'{stem}.en').write_text('\n'.join(lines) + '\n')
  summary = gec_data.build(tmp_path / 'out', seed=1, data_dir=tmp_path / 'data',
                           val_per_corpus=5)
  src = (tmp_path / 'out' / 'train.src').read_text().splitlines()
  tgt = (tmp_path / 'out' / 'train.tgt').read_text().splitlines()
  assert len(src) == len(tgt) == 60 == summary['splits']['train']['sentences']
  assert len((tmp_path / 'out' / 'val.src').read_text().splitlines()) == 10
  assert tgt[0] == gec_data.tokenize(lines[0])
  with pytest.raises(ValueError, match='not a folder'):
    gec_data.build(tmp_path / 'out' / 'train.src', data_dir=tmp_path / 'data')
  # --max_words: a 12-word line (13 tokens with the stop) is dropped at 12, kept at 13.
  short = gec_data.build(tmp_path / 'short', data_dir=tmp_path / 'data', max_words=12,
                         val_per_corpus=5)
  assert short['splits']['train']['sentences'] == 0 and short['max_words'] == 12
  assert gec_data.build(tmp_path / 'keep', data_dir=tmp_path / 'data', max_words=13,
                        val_per_corpus=5)['splits']['train']['sentences'] == 60
  for bad in (2, 40.0, True):
    with pytest.raises(ValueError, match='--max_words must be an integer >= 3'):
      gec_data.build(tmp_path / 'bad', data_dir=tmp_path / 'data', max_words=bad)
  assert not (tmp_path / 'bad').exists()


def test_tables_estimate_save_load(tmp_path):
  seqs = [[5, 6, 7], [5, 6, 8], [5, 6, 7]]
  ids, log_probs = tables.estimate(seqs, vocab_size=10, order=2, k=3, smoothing=0.0)
  assert ids[0, 0] == 5  # after the start token 0: always 5
  assert ids[6, 0] == 7 and np.exp(log_probs[6, 0]) == pytest.approx(2 / 3)
  assert ids[7, 0] == 1  # EOS after the last token
  np.testing.assert_allclose(np.exp(log_probs).sum(1), 1.0, rtol=1e-6)
  path = tables.save(tmp_path / 't.npz', ids, log_probs, 2, 10)
  got_ids, got_lp, order = tables.load(path, vocab_size=10)
  np.testing.assert_array_equal(got_ids, ids)
  assert order == 2
  with pytest.raises(ValueError, match='vocab_size 10'):
    tables.load(path, vocab_size=12)
  with pytest.raises(FileNotFoundError, match='specdec_jax.drafters.tables'):
    tables.load(tmp_path / 'missing.npz')
  (tmp_path / 'bad.npz').write_bytes(b'not a table')
  with pytest.raises(ValueError, match='not an n-gram table'):
    tables.load(tmp_path / 'bad.npz')
  with pytest.raises(ValueError, match='order'):
    tables.estimate(seqs, 10, order=3)
  with pytest.raises(ValueError, match='vocab_size'):
    tables.estimate([[11]], 10)
  uni_ids, _ = tables.estimate(seqs, 10, order=1, k=2)
  assert uni_ids.shape == (1, 2) and set(uni_ids[0]) == {1, 5}  # ties: the lower ids (EOS counts)


def _fake_jfleg(folder, n=10):
  folder.mkdir()
  src = [f'he go {i} school .' for i in range(n)]
  (folder / 'dev.src').write_text('\n'.join(src) + '\n', encoding='utf-8')
  for k in range(4):  # refs 0 and 1 agree, 2 and 3 differ: 3 distinct references a sentence
    refs = [f'he goes to {i} school .' if k < 2 else f'he went {k} {i} school .'
            for i in range(n)]
    (folder / f'dev.ref{k}').write_text('\n'.join(refs) + '\n', encoding='utf-8')
  return src


def _fake_synthetic(folder, n=20):
  folder.mkdir()
  for split, m in (('train', n), ('val', 5)):
    (folder / f'{split}.src').write_text(''.join(f'syn {split} {i} wrong\n' for i in range(m)))
    (folder / f'{split}.tgt').write_text(''.join(f'syn {split} {i} right\n' for i in range(m)))


def test_jfleg_split_holds_out_a_seeded_part(tmp_path):
  """`jfleg_split`: held-out sentences never reach the training files; distinct references
  only; synthetic pairs mixed in; the same seed gives the same files."""
  from specdec_jax.train import jfleg_split
  src = _fake_jfleg(tmp_path / 'jfleg')
  _fake_synthetic(tmp_path / 'syn')
  recipe = jfleg_split.build(tmp_path / 'out', tmp_path / 'syn', held_out=4, synthetic_pairs=6,
                             seed=3, jfleg_dir=tmp_path / 'jfleg')
  out = tmp_path / 'out'
  held = [int(x) for x in (out / 'heldout.ids').read_text().split()]
  assert len(held) == 4 and held == sorted(held)
  assert (out / 'heldout.src').read_text().splitlines() == [src[i] for i in held]
  train_src = (out / 'train.src').read_text().splitlines()
  train_tgt = (out / 'train.tgt').read_text().splitlines()
  assert len(train_src) == len(train_tgt) == 6 * 3 + 6
  assert not {src[i] for i in held} & set(train_src)          # nothing held out is trained on
  assert {s for s in train_src if not s.startswith('syn')} == {src[i] for i in range(10)
                                                                if i not in held}
  assert sum(s.startswith('syn train') for s in train_src) == 6
  assert (out / 'val.src').read_text() == (tmp_path / 'syn' / 'val.src').read_text()
  assert recipe['jfleg_pairs'] == 18 and recipe['train_pairs'] == 24
  assert json.loads((out / 'recipe.json').read_text()) == recipe
  again = jfleg_split.build(tmp_path / 'again', tmp_path / 'syn', held_out=4, synthetic_pairs=6,
                            seed=3, jfleg_dir=tmp_path / 'jfleg')
  assert again['train_pairs'] == 24
  assert (tmp_path / 'again' / 'train.src').read_text() == (out / 'train.src').read_text()
  other = jfleg_split.build(tmp_path / 'other', tmp_path / 'syn', held_out=4, synthetic_pairs=6,
                            seed=4, jfleg_dir=tmp_path / 'jfleg')
  assert other['held_out_sentences'] == 4
  assert (tmp_path / 'other' / 'heldout.ids').read_text() != (out / 'heldout.ids').read_text()


def test_jfleg_split_refuses_bad_sizes_before_writing(tmp_path, capsys):
  from specdec_jax.train import jfleg_split
  _fake_jfleg(tmp_path / 'jfleg')
  _fake_synthetic(tmp_path / 'syn')
  for kw, msg in ((dict(held_out=10), 'held_out must be between 1 and 9'),
                  (dict(held_out=0), 'held_out must be between 1 and 9'),
                  (dict(held_out=4, synthetic_pairs=21), 'synthetic_pairs=21 exceeds the 20'),
                  (dict(held_out=-1), 'held_out must be an integer >= 0')):
    with pytest.raises(ValueError, match=msg):
      jfleg_split.build(tmp_path / 'out', tmp_path / 'syn', jfleg_dir=tmp_path / 'jfleg', **kw)
  assert not (tmp_path / 'out').exists()
  assert jfleg_split.main(['--out', str(tmp_path / 'out'), '--synthetic_dir',
                           str(tmp_path / 'missing'), '--jfleg_dir', str(tmp_path / 'jfleg'),
                           '--held_out', '4']) == 2
  assert 'gec_data' in capsys.readouterr().err and not (tmp_path / 'out').exists()
