"""Checks that a draft shares the target's token ids (vocabulary comparison).

Speculative decoding compares the two models' distributions id by id, so the draft
must map every id to the same piece as the target. Works on seqio vocabularies and
on any object with `vocab_size`, `eos_id` and `tokenizer.id_to_piece` or `decode`.
"""

from __future__ import annotations

from typing import Optional


def _pieces(vocab) -> Optional[list]:
  """Every id's piece/string, via a SentencePiece processor when there is one."""
  tok = getattr(vocab, 'tokenizer', None)
  if tok is None and hasattr(vocab, 'id_to_piece'):
    tok = vocab
  if tok is not None and hasattr(tok, 'id_to_piece'):
    size = tok.get_piece_size() if hasattr(tok, 'get_piece_size') else vocab.vocab_size
    return [tok.id_to_piece(i) for i in range(size)]
  size = getattr(vocab, 'vocab_size', None)
  if size is not None and hasattr(vocab, 'decode'):
    return [vocab.decode([i]) for i in range(size)]
  return None


def check_vocabularies_match(target_vocab, draft_vocab, what: str = 'output') -> None:
  """Raises unless the two vocabularies map every id to the same piece.

  Compares sizes, EOS ids and then the pieces id by id (SentencePiece
  `tokenizer.id_to_piece`, else `vocabulary.decode([id])`); identical serialized
  SentencePiece models (`sp_model`) short-circuit.

  Raises:
    ValueError: naming the first difference (size, EOS id, or the first id whose
      pieces differ, with both pieces), or when neither pieces nor decoding are
      available to compare.
  """
  if target_vocab is draft_vocab or target_vocab is None or draft_vocab is None:
    return
  fix = ('Speculative decoding needs the draft to share the target\'s token ids: use a '
         'draft trained with the same vocabulary.')
  size_t = getattr(target_vocab, 'vocab_size', None)
  size_d = getattr(draft_vocab, 'vocab_size', None)
  if size_t != size_d:
    raise ValueError(f'The draft vocabulary has {size_d} ids but the target\'s {what} '
                     f'vocabulary has {size_t}. {fix}')
  eos_t = getattr(target_vocab, 'eos_id', None)
  eos_d = getattr(draft_vocab, 'eos_id', None)
  if eos_t != eos_d:
    raise ValueError(f'The draft vocabulary has eos_id={eos_d} but the target\'s {what} '
                     f'vocabulary has eos_id={eos_t}. {fix}')
  try:
    sp_t, sp_d = target_vocab.sp_model, draft_vocab.sp_model
  except AttributeError:
    sp_t = sp_d = None
  if sp_t is not None and sp_t == sp_d:
    return
  pieces_t, pieces_d = _pieces(target_vocab), _pieces(draft_vocab)
  if pieces_t is None or pieces_d is None:
    raise ValueError(f'Cannot compare the draft vocabulary {draft_vocab!r} with the target\'s '
                     f'{what} vocabulary {target_vocab!r}: neither exposes pieces '
                     '(tokenizer.id_to_piece) nor decode(ids).')
  if len(pieces_t) != len(pieces_d):
    raise ValueError(f'The draft vocabulary has {len(pieces_d)} pieces but the target\'s '
                     f'{what} vocabulary has {len(pieces_t)}. {fix}')
  for i, (a, b) in enumerate(zip(pieces_t, pieces_d)):
    if a != b:
      raise ValueError(f'Vocabulary mismatch at id {i}: the target\'s {what} vocabulary has '
                       f'{a!r}, the draft vocabulary has {b!r}. {fix}')
