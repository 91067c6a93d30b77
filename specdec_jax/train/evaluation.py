"""Greedy or sampled translation of many sentences, and its BLEU (dev evaluation, distill data).

Used by training (dev BLEU every `train.eval_every_steps`), by the sequence-level
distillation data job (`specdec_jax.train.distill_data`) and by `scripts/eval_bleu.py`.
Decoding is the project's own baseline, `generate.t5_generate` (temperature 0, or > 0 to sample).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from specdec_jax.train import data as data_lib
from specdec_jax.text import inputs as inputs_lib
from specdec_jax.text.vocabulary import EOS_ID


def ids_until_eos(row, eos_id: int = EOS_ID) -> list[int]:
  """A decoded row cut before its first EOS (EOS and padding dropped), as Python ints
  (`inputs.tokens_until_eos` without the EOS)."""
  return [int(t) for t in inputs_lib.tokens_until_eos(row, eos_id) if t != eos_id and t > 0]


def detokenize(processor, ids: Sequence[int]) -> str:
  """Text of token ids; ids beyond the SentencePiece model (extra ids, padding rows) dropped."""
  n = processor.vocab_size()
  return processor.decode([int(i) for i in ids if 0 < i < n])


def _length_bucket(n: int, buckets: Sequence[int]) -> int:
  return next((b for b in buckets if n <= b), buckets[-1])


def decode_batches(model, params, inputs: Sequence[Sequence[int]], *, batch_size: int = 128,
                   max_decode_len: int = 64, input_buckets: Sequence[int] = (32, 48, 64),
                   sort_by_length: bool = True, temperature: float = 0.0,
                   seed: int = 0, inputs_bidirectional_attention: bool = True
                   ) -> Iterator[tuple[list[int], np.ndarray]]:
  """Greedy (or, with `temperature > 0`, sampled) decodes of tokenized inputs, batch by batch.

  Args:
    model, params: a `t5.Transformer` or a `DecoderOnlyTransformer` (dropout off) and
      its params; a decoder-only model decodes each input as its prompt
      (`generate.decoder_only_generate`).
    inputs: token-id lists (EOS included), one per sentence.
    batch_size: rows per call; the last batch is padded with one-token rows, so
      there is one compilation per input bucket.
    max_decode_len: decoded length.
    input_buckets: padded encoder lengths; an input longer than the largest is
      truncated to it (its final EOS kept).
    sort_by_length: decode sentences of similar length together (faster; the
      results are yielded with their original indices either way).
    temperature: 0 for greedy decoding; > 0 samples from the full softmax at that
      temperature (no top-k / top-p), batch `j` with `jax.random.fold_in(PRNGKey(seed), j)`,
      so a run is reproducible for a given order and batch size.
    seed: the sampling seed (unused at temperature 0).
    inputs_bidirectional_attention: decoder-only models: prefix-LM prefill (default) or
      causal.
  Yields:
    `(indices, decodes)`: the input indices of the batch's real rows and their
    decodes, int32 `[len(indices), max_decode_len]`.
  """
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  order = (sorted(range(len(inputs)), key=lambda i: len(inputs[i])) if sort_by_length
           else list(range(len(inputs))))
  buckets = tuple(sorted(input_buckets))
  import jax  # pylint: disable=g-import-not-at-top
  for j, s in enumerate(range(0, len(order), batch_size)):
    idx = order[s:s + batch_size]
    chunk = [inputs[i] for i in idx] + [[EOS_ID]] * (batch_size - len(idx))
    length = _length_bucket(max(len(x) for x in chunk), buckets)
    enc = data_lib.pad_batch(chunk, length)
    rng = jax.random.fold_in(jax.random.PRNGKey(seed), j)
    if hasattr(model, 'encode'):  # encoder–decoder
      decodes, _ = generate.t5_generate(model, params, enc, max_decode_len, eos_id=EOS_ID,
                                        temperature=float(temperature), decode_rng=rng)
    else:  # decoder-only: the input is the prompt, prefilled in one pass
      decodes, _ = generate.decoder_only_generate(
          model, params, enc, max_decode_len, eos_id=EOS_ID, temperature=float(temperature),
          decode_rng=rng, inputs_bidirectional_attention=inputs_bidirectional_attention)
    yield idx, np.asarray(decodes[:len(idx), 0])


def translate(model, params, processor, sources: Sequence[str],
              input_prefix: str = data_lib.TRANSLATE_PREFIX, **kwargs
              ) -> tuple[list[str], list[list[int]]]:
  """Greedy translations of raw source sentences (the task prefix is added here).

  Returns `(texts, ids)` in input order: detokenized text and the token ids before EOS.
  Keyword arguments go to `decode_batches`.
  """
  inputs = data_lib.encode_inputs(processor, sources, input_prefix)
  ids: list[list[int] | None] = [None] * len(inputs)
  for idx, decodes in decode_batches(model, params, inputs, **kwargs):
    for i, row in zip(idx, decodes):
      ids[i] = ids_until_eos(row)
  return [detokenize(processor, x) for x in ids], ids


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]):
  """sacreBLEU corpus BLEU (13a tokenization, detokenized text) as sacrebleu's result."""
  import sacrebleu  # pylint: disable=g-import-not-at-top
  return sacrebleu.corpus_bleu(list(hypotheses), [list(references)])


def draft_agreement(target, target_params, draft, draft_params, encoder_tokens, decodes,
                    inputs_bidirectional_attention: bool | None = None) -> dict:
  """How well a draft predicts the target along the target's own greedy outputs.

  Teacher-forced on the target's decodes (cut after the first EOS), per position:
  argmax agreement (the acceptance rate of greedy speculative decoding, γ-free) and
  β = Σ_x min(p(x), q(x)) at temperature 1 (paper Def. 3.1; its mean is α at T = 1).

  Args:
    target, draft: two `t5.Transformer`s or two `DecoderOnlyTransformer`s (dropout off)
      and their params.
    encoder_tokens: int32 `[batch, enc_len]`, the inputs (0 = padding); for decoder-only
      models the prompts, each followed by its decode as in training
      (`data.make_prefix_lm_features`).
    decodes: int32 `[batch, length]`, the target's greedy outputs.
    inputs_bidirectional_attention: decoder-only models: prefix LM (True) or causal
      (False); required for them, ignored for T5.
  Returns:
    dict with sums `agree`, `beta`, and `positions` (divide to get rates).
  Raises:
    ValueError: decoder-only models without `inputs_bidirectional_attention`.
  """
  tgt = np.array(decodes)
  for row in tgt:
    hits = np.flatnonzero(row == EOS_ID)
    if len(hits):
      row[hits[0] + 1:] = 0
  batch = teacher_forced_features(target, encoder_tokens, tgt, inputs_bidirectional_attention)
  agree, beta = _agreement_fn(target, draft)(target_params, draft_params, batch)
  w = batch['decoder_loss_weights']
  return dict(agree=float(np.sum(np.asarray(agree) * w)),
              beta=float(np.sum(np.asarray(beta) * w)), positions=float(np.sum(w)))


def teacher_forced_features(model, encoder_tokens, targets,
                            inputs_bidirectional_attention: bool | None = None) -> dict:
  """T5X feature batch (numpy) that teacher-forces `targets` (int32 `[batch, length]`, 0 =
  padding) after `encoder_tokens` (int32 `[batch, enc_len]`, 0 = padding), for `model`'s
  family: encoder–decoder features, or decoder-only features of `[batch, enc_len + length]`
  (prompt ++ targets, the loss weights on the targets only). `decoder_loss_weights` marks
  the scored positions (the targets' non-padding tokens)."""
  enc, tgt = np.asarray(encoder_tokens), np.asarray(targets)
  if hasattr(model, 'encode'):  # encoder–decoder
    dec_in = np.zeros_like(tgt)
    dec_in[:, 1:] = tgt[:, :-1]
    return {'encoder_input_tokens': enc, 'decoder_input_tokens': dec_in,
            'decoder_target_tokens': tgt,
            'decoder_loss_weights': (tgt > 0).astype(np.float32)}
  if inputs_bidirectional_attention is None:
    raise ValueError('inputs_bidirectional_attention must be True (prefix LM) or False '
                     '(causal) for decoder-only models.')
  return data_lib.make_prefix_lm_features(
      [list(x[x > 0]) for x in enc], [list(y[y > 0]) for y in tgt],
      enc.shape[1] + tgt.shape[1], bidirectional=inputs_bidirectional_attention)


def agreement_per_position(target, target_params, draft, draft_params, encoder_tokens,
                           targets):
  """Per position, teacher-forced on `targets` (int32 `[batch, length]`, the target's own
  outputs, 0 = padding), for a T5 pair: bool `[batch, length]` whether the draft's argmax
  equals the target's, and float32 `[batch, length]` β = Σ_x min(p(x), q(x)) at
  temperature 1. Positions at padding are computed too (mask them with `targets > 0`)."""
  batch = teacher_forced_features(target, encoder_tokens, targets)
  agree, beta = _agreement_fn(target, draft)(target_params, draft_params, batch)
  return np.asarray(agree), np.asarray(beta)


_AGREEMENT_FNS: dict = {}


def _agreement_fn(target, draft):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import family  # pylint: disable=g-import-not-at-top
  key = (target, draft)
  if key not in _AGREEMENT_FNS:
    @jax.jit
    def fn(tparams, dparams, batch):
      lp = jax.nn.log_softmax(family.forward(target, tparams, batch, enable_dropout=False))
      lq = jax.nn.log_softmax(family.forward(draft, dparams, batch, enable_dropout=False))
      agree = jnp.argmax(lp, -1) == jnp.argmax(lq, -1)
      beta = jnp.sum(jnp.minimum(jnp.exp(lp), jnp.exp(lq)), -1)
      return agree, beta
    _AGREEMENT_FNS[key] = fn
  return _AGREEMENT_FNS[key]
