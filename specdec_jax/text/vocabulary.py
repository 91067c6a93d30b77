"""Joint English+German SentencePiece vocabulary with T5 conventions.

The demo model pair (`specdec_jax/assets/demo_ende/`) uses an 8,000-piece unigram
SentencePiece model trained on the Multi30K training text (English and German
sides). It follows T5's id conventions: pad=0, eos=1, unk=2 and no BOS, so it is
used exactly like T5's own vocabulary through
`seqio.SentencePieceVocabulary(path, extra_ids=100)` (8,100 ids; the models pad
their embedding to 8,192 rows, ids 8,100–8,191 are never produced by the data).

Training is deterministic: the sentences are fed in file order (English file,
then German file), without sampling or shuffling, on one thread.

Command line:
  python -m specdec_jax.text.vocabulary --output_prefix=/tmp/ende8k [--vocab_size=8000]

`import_seqio()` imports seqio (which imports TensorFlow) without TensorFlow's C++
start-up log lines (oneDNN / CUDA notices, printed to the process's stderr before
its logging is initialised, so `TF_CPP_MIN_LOG_LEVEL` does not silence them).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import os
import pathlib
import re
import sys
import tempfile
from typing import Iterable, Sequence

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
DEFAULT_EXTRA_IDS = 100
TRANSLATE_PREFIX = 'translate English to German: '


# TensorFlow's start-up lines (C++ logging before absl is initialised; one set per
# shared library it loads, so usually twice).
_TF_NOISE = re.compile(
    r'(WARNING: All log messages before absl::InitializeLog\(\) is called'
    r'|oneDNN custom operations are on'
    r'|cudart_stub\.cc|Could not find cuda drivers'
    r'|Unable to register cu(DNN|FFT|BLAS) factory'
    r'|TF-TRT Warning|computation placer already registered'
    r'|This TensorFlow binary is optimized to use available CPU instructions'
    r'|rebuild TensorFlow with the appropriate compiler flags'
    r'|cuda_(dnn|fft|blas)\.cc.*Unable to register)')


@contextlib.contextmanager
def _drop_tensorflow_startup_lines():
  """Captures the process's stderr (fd 2) and re-emits every line but TensorFlow's noise."""
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):  # No real fd 2: nothing to filter.
    yield
    return
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield
    finally:
      try:
        sys.stderr.flush()
      except (OSError, ValueError):
        pass
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      kept = [line for line in capture.read().decode('utf-8', 'replace').splitlines(True)
              if not _TF_NOISE.search(line)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


def import_seqio():
  """`import seqio` (and so TensorFlow) with TensorFlow's start-up log lines dropped.

  Other output written to stderr during the import (a real warning or error) is
  passed through; an import error is raised as usual. Returns the seqio module.
  """
  if sys.modules.get('seqio') is not None:
    return sys.modules['seqio']
  with _drop_tensorflow_startup_lines():
    import seqio  # pylint: disable=g-import-not-at-top
  return seqio


class SentencePieceVocab:
  """The part of `seqio.SentencePieceVocabulary` the jobs use, on `sentencepiece` alone.

  For machines where seqio (and TensorFlow) is not installed, e.g. an accelerator
  image: `load_vocabulary` falls back to it. Same ids as seqio's: the model's pieces,
  then `extra_ids` sentinels; `vocab_size` counts both; pad 0, EOS 1, unk 2.
  """

  def __init__(self, path: str, extra_ids: int = DEFAULT_EXTRA_IDS):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    self._sp = spm.SentencePieceProcessor(model_file=str(path))
    self.sentencepiece_model_file = str(path)
    self.extra_ids = extra_ids
    self.pad_id, self.eos_id, self.unk_id = PAD_ID, EOS_ID, UNK_ID

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size() + self.extra_ids

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def decode(self, ids) -> str:
    n = self._sp.get_piece_size()
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    return self._sp.decode([i for i in ids if 0 < i < n])


def read_lines(path: str | os.PathLike) -> list[str]:
  """Lines of a UTF-8 text file (`.gz` or plain), without trailing newlines."""
  path = pathlib.Path(path)
  opener = gzip.open if path.suffix == '.gz' else open
  with opener(path, 'rt', encoding='utf-8') as f:
    return [line.rstrip('\n') for line in f]


def train_sentencepiece(sentences: Iterable[str], output_prefix: str | os.PathLike,
                        vocab_size: int = 8000, *, seed: int = 0,
                        character_coverage: float = 1.0) -> pathlib.Path:
  """Trains a unigram SentencePiece model with T5's special ids; returns the `.model` path.

  Args:
    sentences: training text, one sentence per item, used in the given order.
    output_prefix: writes `<output_prefix>.model` and `<output_prefix>.vocab`.
    vocab_size: number of pieces (pad, eos and unk included).
    seed: recorded for reproducibility; training itself is deterministic
      (no input sampling, no shuffling, one thread).
    character_coverage: 1.0 keeps every character seen (umlauts, ß, ...).
  """
  import sentencepiece as spm
  del seed  # Deterministic by construction (ordered input, no sampling).
  output_prefix = pathlib.Path(output_prefix)
  output_prefix.parent.mkdir(parents=True, exist_ok=True)
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(list(sentences)),
      model_writer=model,
      vocab_size=vocab_size,
      model_type='unigram',
      character_coverage=character_coverage,
      pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
      pad_piece='<pad>', eos_piece='</s>', unk_piece='<unk>',
      input_sentence_size=0,
      shuffle_input_sentence=False,
      num_threads=1,
      minloglevel=2,
  )
  path = output_prefix.with_name(output_prefix.name + '.model')
  path.write_bytes(model.getvalue())
  return path


def train_ende_vocabulary(output_prefix: str | os.PathLike, vocab_size: int = 8000,
                          data_dir: str | os.PathLike | None = None,
                          splits: Sequence[str] = ('ende/multi30k/train',),
                          input_prefix: str = TRANSLATE_PREFIX) -> pathlib.Path:
  """Trains the joint EN+DE vocabulary on the given shared-data splits (`.en`/`.de`, gz or not).

  The English side is used exactly as the model sees it, i.e. with `input_prefix`
  prepended, so the task prefix gets its own pieces (5 tokens instead of 13).
  """
  from specdec_jax.util import paths
  root = pathlib.Path(data_dir) if data_dir else paths.data_dir()
  sentences: list[str] = []
  for split in splits:
    for lang in ('en', 'de'):
      for suffix in ('.gz', ''):
        path = root / f'{split}.{lang}{suffix}'
        if path.exists():
          lines = read_lines(path)
          if lang == 'en':
            lines = [input_prefix + line for line in lines]
          sentences.extend(lines)
          break
      else:
        raise FileNotFoundError(f'No {split}.{lang}[.gz] under {root}.')
  return train_sentencepiece(sentences, output_prefix, vocab_size)


def load_vocabulary(path: str | os.PathLike | None, extra_ids: int = DEFAULT_EXTRA_IDS,
                    binding: str = 'vocab_path'):
  """`seqio.SentencePieceVocabulary` of a `.model` file (or a folder holding exactly one).

  seqio (and with it TensorFlow) is imported with TensorFlow's C++ start-up log lines
  dropped (`import_seqio`); without seqio (e.g. an accelerator image) the same ids come
  from `SentencePieceVocab`.

  Args:
    path: the `.model` file or its folder.
    extra_ids: sentinel ids appended (T5: 100).
    binding: the setting that names `path`, for error messages.
  Raises:
    ValueError: no path, or a file SentencePiece cannot load.
    FileNotFoundError: the file (or the one `.model` in the folder) does not exist.
  """
  if not path:
    raise ValueError(f"No vocabulary: bind {binding}='/path/to/sentencepiece.model'.")
  p = pathlib.Path(path)
  if p.is_dir():
    models = sorted(p.glob('*.model'))
    if len(models) != 1:
      raise FileNotFoundError(f'Expected one SentencePiece .model file in {str(p)!r} '
                              f'({binding}), found {len(models)}.')
    p = models[0]
  if not p.is_file():
    raise FileNotFoundError(f'SentencePiece model {str(p)!r} not found ({binding}); '
                            f"bind {binding}='/path/to/sentencepiece.model'.")
  try:
    seqio = import_seqio()
  except ImportError:
    vocab = SentencePieceVocab(str(p), extra_ids=extra_ids)
  else:
    vocab = seqio.SentencePieceVocabulary(str(p), extra_ids=extra_ids)
  try:
    vocab.vocab_size  # Loads the model now, so a broken file fails before compiling.
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'Cannot load SentencePiece model {str(p)!r}: {e}') from e
  return vocab


def load_processor(path: str | os.PathLike):
  """A plain `sentencepiece.SentencePieceProcessor` (no TensorFlow import; same ids as seqio).

  Args:
    path: a SentencePiece `.model` file, or a folder holding one (the first by name).
  Raises:
    FileNotFoundError: no such file, or a folder without a `.model` file.
    ValueError: the file is not a SentencePiece model (sentencepiece cannot parse it).
  """
  import sentencepiece as spm
  path = pathlib.Path(path).expanduser()
  if path.is_dir():
    models = sorted(path.glob('*.model'))
    if not models:
      raise FileNotFoundError(f'The vocabulary folder {str(path)!r} holds no SentencePiece '
                              '.model file.')
    path = models[0]
  if not path.is_file():
    raise FileNotFoundError(f'No SentencePiece vocabulary at {str(path)!r}.')
  try:
    return spm.SentencePieceProcessor(model_file=str(path))
  except RuntimeError as e:  # sentencepiece's parse failure
    raise ValueError(f'{str(path)!r} is not a SentencePiece model: {e}') from e


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--output_prefix', required=True)
  parser.add_argument('--vocab_size', type=int, default=8000)
  parser.add_argument('--data_dir', default=None)
  args = parser.parse_args(argv)
  path = train_ende_vocabulary(args.output_prefix, args.vocab_size, args.data_dir)
  print(path)


if __name__ == '__main__':
  main()
