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
  python -m specdec_jax.vocabulary --output_prefix=/tmp/ende8k [--vocab_size=8000]
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import pathlib
from typing import Iterable, Sequence

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
DEFAULT_EXTRA_IDS = 100
TRANSLATE_PREFIX = 'translate English to German: '


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
  from specdec_jax import paths
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


def load_vocabulary(path: str | os.PathLike, extra_ids: int = DEFAULT_EXTRA_IDS):
  """`seqio.SentencePieceVocabulary` of the `.model` file at `path` (or a folder holding one)."""
  import seqio
  path = pathlib.Path(path)
  if path.is_dir():
    models = sorted(path.glob('*.model'))
    if len(models) != 1:
      raise FileNotFoundError(f'Expected exactly one .model file in {path}, found {models}.')
    path = models[0]
  if not path.exists():
    raise FileNotFoundError(f'SentencePiece model {str(path)!r} not found.')
  return seqio.SentencePieceVocabulary(str(path), extra_ids=extra_ids)


def load_processor(path: str | os.PathLike):
  """A plain `sentencepiece.SentencePieceProcessor` (no TensorFlow import; same ids as seqio)."""
  import sentencepiece as spm
  path = pathlib.Path(path)
  if path.is_dir():
    path = sorted(path.glob('*.model'))[0]
  return spm.SentencePieceProcessor(model_file=str(path))


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
