"""seqio tasks for the shared English→German data (Multi30K, WMT newstest).

Importing this module registers (with `seqio.TaskRegistry.add`):

| task | splits → files under `paths.data_dir()/ende/` |
|---|---|
| `specdec_ende_multi30k` | train → `multi30k/train`, validation → `multi30k/val`, test → `multi30k/test_2016_flickr` |
| `specdec_ende_wmt_news` | train → `wmt/news_train`, validation → `wmt/news_dev` (newstest2013), test → `wmt/news_test` (newstest2014) |

Each reads the line-aligned `.en` / `.de` files (gzip or plain text) when the
dataset is built — not at import — through a `seqio.FunctionDataSource` yielding
raw text `{'inputs': en, 'targets': de}`, and preprocesses it like T5's
translation tasks: prepend the prefix `'translate English to German: '` to the
input, tokenize (keeping `inputs_pretokenized` / `targets_pretokenized`), append
EOS. The metric is sacrebleu corpus BLEU on the detokenized text.

The default vocabulary is the demo pair's joint EN+DE SentencePiece model
(`specdec_jax/assets/demo_ende/vocab/*.model`, loaded lazily on first use, with 100
extra ids). For another vocabulary (e.g. the T5 one) register a second set under
another name:

    from specdec_jax.text import tasks
    tasks.register_ende_tasks('/path/to/sentencepiece.model', name_prefix='my_ende')

The decode job (`decode.task_name='specdec_ende_multi30k'`) only reads the
pretokenized text of a task and re-tokenizes it with the model pair's own
vocabulary, so any of these tasks works with any pair.
"""

from __future__ import annotations

import gzip
import os
import pathlib
from typing import Mapping, Optional

from specdec_jax.util import paths
from specdec_jax.text import vocabulary as _vocabulary

seqio = _vocabulary.import_seqio()  # Imports TensorFlow, without its start-up log lines.
import tensorflow as tf  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

TRANSLATE_PREFIX = _vocabulary.TRANSLATE_PREFIX
DEMO_VOCAB_DIR = paths.ASSETS_DIR / 'demo_ende' / 'vocab'
DEFAULT_EXTRA_IDS = 100

# split name → file stem under `<data_dir>/ende/` (files `<stem>.en[.gz]`, `<stem>.de[.gz]`).
SPLITS: dict[str, dict[str, str]] = {
    'multi30k': {'train': 'multi30k/train', 'validation': 'multi30k/val',
                 'test': 'multi30k/test_2016_flickr'},
    'wmt_news': {'train': 'wmt/news_train', 'validation': 'wmt/news_dev',
                 'test': 'wmt/news_test'},
}
SIZES = {
    'multi30k': {'train': 29000, 'validation': 1014, 'test': 1000},
    'wmt_news': {'train': 27656, 'validation': 3000, 'test': 3003},
}


def _find(root: pathlib.Path, stem: str, lang: str) -> pathlib.Path:
  for suffix in ('.gz', ''):
    path = root / 'ende' / f'{stem}.{lang}{suffix}'
    if path.is_file():
      return path
  raise FileNotFoundError(f'No {stem}.{lang}[.gz] under {root / "ende"} (shared EN→DE data).')


def _read(path: pathlib.Path) -> list[str]:
  opener = gzip.open if path.suffix == '.gz' else open
  with opener(path, 'rt', encoding='utf-8') as f:
    return [line.rstrip('\n').rstrip('\r') for line in f]


def read_split(corpus: str, split: str,
               data_dir: Optional[str | os.PathLike] = None) -> tuple[list[str], list[str]]:
  """(English lines, German lines) of one split, checked to be line-aligned."""
  root = pathlib.Path(data_dir) if data_dir else paths.data_dir()
  stem = SPLITS[corpus][split]
  en_path, de_path = _find(root, stem, 'en'), _find(root, stem, 'de')
  en, de = _read(en_path), _read(de_path)
  if len(en) != len(de):
    raise ValueError(f'{en_path} has {len(en)} lines but {de_path} has {len(de)}.')
  return en, de


def _dataset_fn(corpus: str, data_dir):
  def dataset_fn(split: str, shuffle_files: bool, seed: Optional[int] = None):
    del shuffle_files, seed  # One file per split: nothing to shuffle at file level.
    en, de = read_split(corpus, split, data_dir)
    return tf.data.Dataset.from_tensor_slices({'inputs': en, 'targets': de})
  return dataset_fn


def add_prefix(dataset: tf.data.Dataset, prefix: str = TRANSLATE_PREFIX) -> tf.data.Dataset:
  """Prepends `prefix` to the raw `inputs` text (T5's translation task convention)."""
  def fn(ex):
    return {**ex, 'inputs': tf.strings.join([prefix, ex['inputs']])}
  return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)


def bleu(targets, predictions) -> dict:
  """sacrebleu corpus BLEU (13a tokenization) of detokenized text."""
  import sacrebleu
  return {'bleu': sacrebleu.corpus_bleu(list(predictions), [list(targets)]).score}


def _vocabulary(vocabulary) -> seqio.Vocabulary:
  if isinstance(vocabulary, seqio.Vocabulary):
    return vocabulary
  path = pathlib.Path(vocabulary) if vocabulary else DEMO_VOCAB_DIR
  if path.is_dir():
    models = sorted(path.glob('*.model'))
    # The demo vocabulary may not be there yet; seqio reads the file only on first use.
    path = models[0] if len(models) == 1 else path / 'ende8k.model'
  return seqio.SentencePieceVocabulary(str(path), extra_ids=DEFAULT_EXTRA_IDS)


def register_ende_tasks(vocabulary=None, *, name_prefix: str = 'specdec_ende',
                        prefix: str = TRANSLATE_PREFIX,
                        data_dir: Optional[str | os.PathLike] = None,
                        overwrite: bool = False) -> list[str]:
  """Registers `<name_prefix>_multi30k` and `<name_prefix>_wmt_news`; returns the names.

  Args:
    vocabulary: a `seqio.Vocabulary`, a SentencePiece `.model` path, a folder holding
      one, or None for the demo vocabulary.
    name_prefix: task name prefix.
    prefix: text prepended to every English input.
    data_dir: the shared data folder (default `paths.data_dir()`, resolved when a
      dataset is built).
    overwrite: replace tasks already registered under these names (else they are
      kept as they are).
  """
  vocab = _vocabulary(vocabulary)
  features = {'inputs': seqio.Feature(vocab, add_eos=True, required=True),
              'targets': seqio.Feature(vocab, add_eos=True)}
  names = []
  for corpus in SPLITS:
    name = f'{name_prefix}_{corpus}'
    names.append(name)
    if name in seqio.TaskRegistry.names():
      if not overwrite:
        continue
      seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(
        name,
        source=seqio.FunctionDataSource(_dataset_fn(corpus, data_dir),
                                        splits=list(SPLITS[corpus]),
                                        num_input_examples=SIZES[corpus]),
        preprocessors=[
            _with_prefix(prefix),
            seqio.preprocessors.tokenize,
            seqio.preprocessors.append_eos_after_trim,
        ],
        output_features=features,
        metric_fns=[bleu])
  return names


def _with_prefix(prefix: str):
  def preprocessor(dataset):
    return add_prefix(dataset, prefix)
  return preprocessor


def task_names() -> Mapping[str, str]:
  return {corpus: f'specdec_ende_{corpus}' for corpus in SPLITS}


DEFAULT_TASKS = register_ende_tasks()
