r"""Sequence-level distillation data: a trained target's own translations of a split.

    python -m specdec_jax.distill_data --gin_file=configs/train/distill_data.gin

Translates every source sentence of `split` (e.g. all 29,000 Multi30K training
sources) greedily (or, with `temperature > 0`, by sampling) with the target of `target_run` (the project's own baseline
decoder, `generate.t5_generate`, or `generate.decoder_only_generate` for a decoder-only target, which
decodes each input as its prompt with the run's own prefix-LM setting; batched and length-sorted) and writes the output
token ids, one line per source in split order, space-separated, EOS excluded, to
`output_path` (atomically). `train.targets_path` then trains a draft on these
sequences instead of the gold German (Kim & Rush 2016; DistillSpec, Zhou et al. 2024):
the draft learns the target's own outputs, which is what it must predict while
decoding. Sampled outputs (`temperature=1`) add the prefixes that sampled speculative
decoding visits, on which a draft distilled on greedy outputs alone agrees less. A summary (counts, mean length, outputs that hit `max_decode_len`,
seconds) goes to `<output_path>.summary.json`.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time
from typing import Optional, Sequence

import gin

from specdec_jax.decoding import sampling
from specdec_jax.util import atomic
from specdec_jax.util import gin_config
from specdec_jax.train import data as data_lib
from specdec_jax.util import flags
from specdec_jax.util import jsonio
from specdec_jax.interop.t5x import gin_registry as gin_utils  # noqa: F401  pylint: disable=unused-import
from specdec_jax.train import job as train_lib  # registers `train` before gin is locked
from specdec_jax.text import vocabulary


def distill_data(target_run: str = gin.REQUIRED,
                 output_path: str = gin.REQUIRED,
                 split: str = 'ende/multi30k/train',
                 vocab_path: str = 'specdec_jax/assets/demo_ende/vocab/ende8k.model',
                 data_dir: Optional[str] = None,
                 batch_size: int = 128,
                 max_decode_len: int = 64,
                 limit: Optional[int] = None,
                 temperature: float = 0.0,
                 seed: int = 0) -> dict:
  """Writes the greedy (or sampled) outputs of `target_run`'s model for every source of `split`.

  Args:
    target_run: a finished training run dir (`config.json`, `params.msgpack`) or a model
      folder with `config.json` and T5X checkpoints (the shipped target).
    output_path: the token-id file to write (`train.targets_path` reads it).
    split: shared-data split whose `.en` side is translated.
    vocab_path: the SentencePiece model (the task prefix is added as in training).
    batch_size: rows per decoder call (sentences sorted by length).
    max_decode_len: decode length; outputs that reach it are counted in the summary.
    limit: translate only the first `limit` sources (tests).
    temperature: 0 (greedy, the default) or > 0: sample each output from the target's
      full softmax at this temperature (`evaluation.decode_batches`).
    seed: sampling seed (batch j uses `fold_in(PRNGKey(seed), j)`).
  Returns:
    the summary dict (also written to `<output_path>.summary.json`).
  Raises:
    FileNotFoundError: `target_run` lacks its params or config.
    ValueError: `temperature` is negative or not finite, `batch_size` or `max_decode_len` not
      a positive int, `seed` not an int in [0, 2**32), `output_path` or its summary path is
      a folder or a special file (all before the target is loaded).
    RuntimeError: decoding failed (nothing is written then).
  """
  from specdec_jax.train import evaluation  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import family  # pylint: disable=g-import-not-at-top
  from specdec_jax.models.config import family_of  # pylint: disable=g-import-not-at-top
  from specdec_jax.train import run_files  # pylint: disable=g-import-not-at-top
  for label, value in (('batch_size', batch_size), ('max_decode_len', max_decode_len)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f'distill_data.{label} must be a positive int, got {value!r}.')
  if not temperature >= 0 or not math.isfinite(temperature):
    raise ValueError(f'distill_data.temperature must be >= 0 and finite (0 = greedy), got '
                     f'{temperature!r}.')
  seed = sampling.check_seed('distill_data.seed', seed)
  out = pathlib.Path(output_path)  # both files checked before the model is even loaded
  reads = {'distill_data.target_run': target_run, 'distill_data.vocab_path': vocab_path}
  for path, name in ((out, 'distill_data.output_path'),
                     (out.with_name(out.name + '.summary.json'),
                      'the summary beside distill_data.output_path')):
    atomic.destination(path, name)
    atomic.check_not_reading(path, name, reads)
  atomic.check_writable(out, 'distill_data.output_path')
  if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
    raise ValueError(f'distill_data.limit must be None (the whole split) or an int >= 1, got '
                     f'{limit!r}.')
  run = pathlib.Path(target_run)
  t0 = time.time()
  try:
    config, params = train_lib.load_run(run)
  except FileNotFoundError as e:
    raise FileNotFoundError(f'distill_data.target_run={target_run!r}: {e} Train the target '
                            'first (python -m specdec_jax.train ...) or pass the shipped '
                            "target, 'specdec_jax/assets/demo_ende/target'.") from e
  model = family.build(config.replace(dropout_rate=0.0))
  decode_kwargs, decoder = {}, 'generate.t5_generate'
  if family_of(config) == 'decoder_only':
    bidirectional = run_files.run_inputs_bidirectional_attention(run)
    if bidirectional is None:
      raise FileNotFoundError(
          f'distill_data.target_run={target_run!r} holds a decoder-only model but neither its '
          "summary.json nor ../pair.json says inputs_bidirectional_attention (prefix LM or "
          'causal); pass the finished training run folder.')
    decode_kwargs['inputs_bidirectional_attention'] = bidirectional
    decoder = ('generate.decoder_only_generate with ' +
               ('prefix LM' if bidirectional else 'causal') + ' prompt prefill')
  processor = vocabulary.load_processor(vocab_path)
  sources, _ = data_lib.read_parallel(split, data_dir, limit=limit)
  inputs = data_lib.encode_inputs(processor, sources)
  ids: list = [None] * len(inputs)
  hit_max = 0
  try:
    for idx, decodes in evaluation.decode_batches(model, params, inputs, batch_size=batch_size,
                                                  max_decode_len=max_decode_len,
                                                  temperature=temperature, seed=seed,
                                                  **decode_kwargs):
      for i, row in zip(idx, decodes):
        ids[i] = evaluation.ids_until_eos(row)
        hit_max += int(len(ids[i]) >= max_decode_len)
  except (ValueError, FileNotFoundError) as e:  # inside the run: not a configuration error
    done = sum(x is not None for x in ids)
    raise RuntimeError(f'distill_data failed after {done} of {len(ids)} sentences: {e}') from e
  atomic.write_text(out, ''.join(' '.join(map(str, x)) + '\n' for x in ids))
  summary = dict(target_run=str(target_run), split=split, sentences=len(ids),
                 mean_tokens=sum(len(x) for x in ids) / max(len(ids), 1),
                 reached_max_decode_len=hit_max, max_decode_len=max_decode_len,
                 decoder=(f'{decoder} (greedy)' if temperature == 0 else
                          f'{decoder} (sampled, temperature {temperature}, seed {seed})'),
                 seconds=round(time.time() - t0, 1),
                 output_path=str(out))
  atomic.write_text(out.with_name(out.name + '.summary.json'), jsonio.dumps(summary, indent=2))
  print(jsonio.dumps(summary), flush=True)
  return summary


distill_data = gin_config.configurable(distill_data)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point (`flags.run_cli`): 0 done, 2 a configuration error."""
  f = flags.parse_gin_flags(
      sys.argv[1:] if argv is None else argv, 'python -m specdec_jax.distill_data',
      "A target's greedy or sampled translations of a split (sequence-level distillation data).",
      '--gin.distill_data.limit=100',
      examples=('python -m specdec_jax.distill_data --gin_file=configs/train/distill_data.gin',),
      parameters=flags.parameters_help(distill_data, 'distill_data'))
  return flags.run_cli(
      f, 'specdec_jax.distill_data',
      parse=lambda: flags.parse_gin(f.gin_files, f.bindings, f.search_paths),
      configure=lambda: distill_data(),  # pylint: disable=unnecessary-lambda
      config_errors=(ValueError, FileNotFoundError))

