r"""Synthetic grammatical-error-correction data: clean English made wrong by a seeded recipe.

  python -m specdec_jax.train.gec_data --out=runs/gec_data [--seed=0]

writes, under `--out`, line-aligned `train.{src,tgt}` and `val.{src,tgt}` (UTF-8, one
sentence a line, `src` the corrupted sentence, `tgt` the clean one) and `recipe.json`
(the recipe's settings and counts). Both sides are tokenized like JFLEG (`tokenize`:
punctuation and clitics split off by spaces, "don't" → "do n't"), so the trained
corrector sees at training time the text form it gets from `gec/jfleg_dev/dev.src`.

Sources of clean English (all under `paths.data_dir()`, the shared data, read-only):
  train: Multi30K train `.en` (29,000 captions) + WMT news_train `.en` (27,656 news
         sentences), sentences of 3–40 words;
  val:   the first 250 of Multi30K val `.en` + the first 250 of WMT news_dev `.en`.

The corruption recipe (`corrupt`), per sentence with its own generator
`numpy.random.default_rng([seed, split_id, line])` so every line is reproducible alone:
  - with probability `keep_prob` (0.15) the sentence is left unchanged (a corrector must
    learn to copy correct text);
  - otherwise `1 + Poisson(edit_rate)` edits (1.2, at most 5), each of a kind drawn with
    the weights in `KINDS`: spelling (delete, insert, substitute, transpose or double a
    letter; a common-misspelling or homophone table first), articles (drop, insert, swap
    a/an/the), prepositions (swap within `PREPOSITIONS`, drop), agreement (is/are, was/were,
    has/have, do/does, a noun or verb's -s added or dropped), verb form (-ed/-ing/base),
    word order (two adjacent words swapped), casing (sentence start or a proper noun
    lower-cased, "I" → "i"), punctuation (a comma or the final stop dropped, a comma
    inserted), and a word dropped or doubled.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Sequence

import numpy as np

from specdec_jax.util import atomic

_CLITICS = re.compile(r"(?i)\b(\w+)(n't)\b|(\w)('s|'re|'ve|'ll|'d|'m)\b")
_PUNCT = re.compile(r'([.,!?;:()"\[\]]|--)')


def tokenize(text: str) -> str:
  """JFLEG-style tokenization: "I don't know, Sam's (maybe)." → "I do n't know , Sam 's ( maybe ) ."."""
  text = text.replace('’', "'").replace('“', '"').replace('”', '"')
  text = _CLITICS.sub(lambda m: (f'{m.group(1)} {m.group(2)}' if m.group(1)
                                 else f'{m.group(3)} {m.group(4)}'), text)
  # Split punctuation except a '.' inside a number or an abbreviation like "U.S.".
  text = re.sub(r'(?<![0-9A-Z])\.(?=\s|$)|(?<=[a-z])\.(?=\s|$)', ' . ', text)
  text = re.sub(r'([,!?;:()"\[\]]|--)', r' \1 ', text)
  text = re.sub(r'(?<=\d) , (?=\d{3})', ',', text)  # 1,000 stays one token
  return ' '.join(text.split())


ARTICLES = ('a', 'an', 'the')
PREPOSITIONS = ('in', 'on', 'at', 'to', 'for', 'of', 'with', 'from', 'by', 'about', 'into',
                'over', 'under')
AGREEMENT = {'is': 'are', 'are': 'is', 'was': 'were', 'were': 'was', 'has': 'have',
             'have': 'has', 'does': 'do', 'do': 'does', 'this': 'these', 'these': 'this',
             'much': 'many', 'many': 'much'}
CONFUSIONS = {'their': 'there', 'there': 'their', 'your': 'you', 'its': 'it',
              'then': 'than', 'than': 'then', 'to': 'too', 'too': 'to', 'which': 'witch',
              'because': 'becouse', 'people': 'peoples', 'believe': 'belive',
              'different': 'diferent', 'necessary': 'neccessary', 'until': 'untill',
              'really': 'realy', 'beautiful': 'beatiful', 'friends': 'freinds',
              'know': 'now', 'would': 'will', 'could': 'can', 'more': 'much',
              'everyone': 'every one', 'a lot': 'alot'}
# kind → weight (relative frequency of an edit of that kind).
KINDS = {'spelling': 0.26, 'article': 0.14, 'preposition': 0.10, 'agreement': 0.12,
         'verb_form': 0.07, 'word_order': 0.05, 'casing': 0.07, 'punctuation': 0.13,
         'drop_or_double': 0.06}
_LETTERS = 'abcdefghijklmnopqrstuvwxyz'
_PUNCT_TOKENS = {'.', ',', '!', '?', ';', ':', '(', ')', '"', '--', "'s", "n't"}


def _is_word(tok: str) -> bool:
  return tok.isalpha()


def _misspell(word: str, rng: np.random.Generator) -> str:
  low = word.lower()
  if low in CONFUSIONS and rng.random() < 0.5:
    out = CONFUSIONS[low]
    return out.capitalize() if word[0].isupper() else out
  if len(word) < 3:
    return word
  i = int(rng.integers(1, len(word)))  # keep the first letter, as most typos do
  op = rng.integers(5)
  if op == 0:
    return word[:i] + word[i + 1:]
  if op == 1:
    return word[:i] + _LETTERS[rng.integers(26)] + word[i:]
  if op == 2:
    return word[:i] + _LETTERS[rng.integers(26)] + word[i + 1:]
  if op == 3 and i + 1 < len(word):
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]
  return word[:i] + word[i] + word[i:]


def _verb_form(word: str, rng: np.random.Generator) -> str:
  if word.endswith('ed') and len(word) > 4:
    return word[:-2] if rng.random() < 0.5 else word[:-2] + 'ing'
  if word.endswith('ing') and len(word) > 5:
    return word[:-3] if rng.random() < 0.5 else word[:-3] + 'ed'
  if word.endswith('s') and len(word) > 3:
    return word[:-1]
  return word + ('ed' if rng.random() < 0.5 else 'ing')


def _edit(tokens: list[str], kind: str, rng: np.random.Generator) -> bool:
  """Applies one edit of `kind` in place; False when the sentence offers no spot for it."""
  n = len(tokens)
  words = [i for i, t in enumerate(tokens) if _is_word(t)]
  if not words:
    return False
  if kind == 'spelling':
    cands = [i for i in words if len(tokens[i]) >= 3] or words
    i = cands[rng.integers(len(cands))]
    new = _misspell(tokens[i], rng)
    if new == tokens[i]:
      return False
    tokens[i] = new
    return True
  if kind == 'article':
    arts = [i for i in words if tokens[i].lower() in ARTICLES]
    if arts and rng.random() < 0.7:
      i = arts[rng.integers(len(arts))]
      if rng.random() < 0.5:
        del tokens[i]
      else:
        choices = [a for a in ARTICLES if a != tokens[i].lower()]
        new = choices[rng.integers(len(choices))]
        tokens[i] = new.capitalize() if tokens[i][0].isupper() else new
      return True
    i = words[rng.integers(len(words))]
    tokens.insert(i, ARTICLES[rng.integers(3)])
    return True
  if kind == 'preposition':
    preps = [i for i in words if tokens[i].lower() in PREPOSITIONS]
    if not preps:
      return False
    i = preps[rng.integers(len(preps))]
    if rng.random() < 0.25:
      del tokens[i]
    else:
      choices = [p for p in PREPOSITIONS if p != tokens[i].lower()]
      tokens[i] = choices[rng.integers(len(choices))]
    return True
  if kind == 'agreement':
    agr = [i for i in words if tokens[i].lower() in AGREEMENT]
    if agr and rng.random() < 0.6:
      i = agr[rng.integers(len(agr))]
      new = AGREEMENT[tokens[i].lower()]
      tokens[i] = new.capitalize() if tokens[i][0].isupper() else new
      return True
    i = words[rng.integers(len(words))]
    w = tokens[i]
    tokens[i] = w[:-1] if w.endswith('s') and len(w) > 3 else w + 's'
    return True
  if kind == 'verb_form':
    cands = [i for i in words if tokens[i].endswith(('ed', 'ing'))] or words
    i = cands[rng.integers(len(cands))]
    tokens[i] = _verb_form(tokens[i], rng)
    return True
  if kind == 'word_order':
    pairs = [i for i in range(n - 1) if _is_word(tokens[i]) and _is_word(tokens[i + 1])]
    if not pairs:
      return False
    i = pairs[rng.integers(len(pairs))]
    tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    return True
  if kind == 'casing':
    caps = [i for i in words if tokens[i][0].isupper()]
    if not caps:
      return False
    i = caps[rng.integers(len(caps))]
    tokens[i] = 'i' if tokens[i] == 'I' else tokens[i].lower()
    return True
  if kind == 'punctuation':
    marks = [i for i, t in enumerate(tokens) if t in (',', '.', ';', '!', '?')]
    if marks and rng.random() < 0.65:
      del tokens[marks[rng.integers(len(marks))]]
      return True
    if n < 4:
      return False
    tokens.insert(int(rng.integers(1, n - 1)), ',')
    return True
  if kind == 'drop_or_double':
    i = words[rng.integers(len(words))]
    if rng.random() < 0.5 and n > 4:
      del tokens[i]
    else:
      tokens.insert(i, tokens[i])
    return True
  raise ValueError(f'unknown edit kind {kind!r}; kinds: {sorted(KINDS)}')


def corrupt(sentence: str, rng: np.random.Generator, keep_prob: float = 0.15,
            edit_rate: float = 1.2, max_edits: int = 5) -> tuple[str, list[str]]:
  """(corrupted tokenized sentence, kinds of the edits made) for one tokenized sentence."""
  if rng.random() < keep_prob:
    return sentence, []
  tokens = sentence.split()
  kinds = list(KINDS)
  weights = np.array([KINDS[k] for k in kinds])
  weights /= weights.sum()
  wanted = min(1 + int(rng.poisson(edit_rate)), max_edits)
  made = []
  for _ in range(4 * wanted):
    if len(made) == wanted:
      break
    kind = kinds[rng.choice(len(kinds), p=weights)]
    if _edit(tokens, kind, rng):
      made.append(kind)
  return ' '.join(tokens), made


def _clean_sentences(split: str, data_dir, max_words: int) -> list[str]:
  from specdec_jax.text.vocabulary import read_lines  # pylint: disable=g-import-not-at-top
  from specdec_jax.train.data import _find  # pylint: disable=g-import-not-at-top
  from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(data_dir) if data_dir else paths.data_dir()
  out = []
  for line in read_lines(_find(root, f'{split}.en')):
    tok = tokenize(line)
    if 3 <= len(tok.split()) <= max_words:
      out.append(tok)
  return out


def build(out: str | pathlib.Path, seed: int = 0, data_dir=None, max_words: int = 40,
          val_per_corpus: int = 250) -> dict:
  """Writes the corpus under `out` (see the module docstring); returns the recipe summary.

  `max_words`: the longest clean sentence kept, in JFLEG-style tokens (3 at least; the
  corrector v2 used 40; the shipped v3 uses 80, as JFLEG dev has sentences up to 80).

  Raises:
    FileNotFoundError: a shared-data file is missing (set SPECDEC_DATA).
    ValueError: `out` exists and is not a folder, or `max_words` is not an int >= 3.
  """
  if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 3:
    raise ValueError(f'--max_words must be an integer >= 3 (the shortest sentence kept has 3 '
                     f'words), got {max_words!r}.')
  out = pathlib.Path(out)
  if out.exists() and not out.is_dir():
    raise ValueError(f'--out={str(out)!r} exists and is not a folder; give a folder path.')
  splits = {
      'train': _clean_sentences('ende/multi30k/train', data_dir, max_words)
               + _clean_sentences('ende/wmt/news_train', data_dir, max_words),
      'val': _clean_sentences('ende/multi30k/val', data_dir, max_words)[:val_per_corpus]
             + _clean_sentences('ende/wmt/news_dev', data_dir, max_words)[:val_per_corpus],
  }
  out.mkdir(parents=True, exist_ok=True)
  summary = {'seed': seed, 'max_words': max_words, 'kinds': KINDS, 'keep_prob': 0.15,
             'edit_rate': 1.2, 'max_edits': 5, 'splits': {}}
  for split_id, (split, clean) in enumerate(splits.items()):
    src, counts = [], {k: 0 for k in KINDS}
    for line, sentence in enumerate(clean):
      bad, kinds = corrupt(sentence, np.random.default_rng([seed, split_id, line]))
      src.append(bad)
      for k in kinds:
        counts[k] += 1
    atomic.write_text(out / f'{split}.src', '\n'.join(src) + '\n')
    atomic.write_text(out / f'{split}.tgt', '\n'.join(clean) + '\n')
    summary['splits'][split] = {'sentences': len(clean), 'edits': counts,
                                'unchanged': sum(a == b for a, b in zip(src, clean))}
  atomic.write_text(out / 'recipe.json', json.dumps(summary, indent=2))
  return summary


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog='python -m specdec_jax.train.gec_data',
      description='Write synthetic GEC training data (corrupted → clean English).')
  parser.add_argument('--out', required=True, help='output folder, e.g. runs/gec_data')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--max_words', type=int, default=40,
                      help='longest clean sentence kept, in words (default 40)')
  parser.add_argument('--data_dir', default=None, help='shared data root (default: SPECDEC_DATA '
                      'or ../shared/data)')
  args = parser.parse_args(argv)
  try:
    summary = build(args.out, args.seed, args.data_dir, max_words=args.max_words)
  except (ValueError, FileNotFoundError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(json.dumps(summary['splits']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
