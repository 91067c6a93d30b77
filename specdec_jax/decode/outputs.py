"""The decode job's steps 5–6: decode every batch, write the outputs atomically, summarize.

Outputs (`output_path` JSONL and `<output_path>.summary.json`) are written through
a temporary file in the same folder, created with the permissions the umask gives
new files (0644 under the usual 022, as `open()` would), and renamed into place at
the end; any failure — an exception, Ctrl-C — removes the temporary files, so
nothing half-written is left behind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import sys
import time

from specdec_jax.util import atomic
from specdec_jax.util import flags
from specdec_jax.text import inputs as inputs_lib
from specdec_jax.util import jsonio
from specdec_jax.decode import pair as pair_lib
from specdec_jax.decode.prepared import Prepared


def _decode_batch(p: Prepared, batch: inputs_lib.Batch, batch_index: int):
  """One call; returns host arrays (decodes [B, L], stats dict of [B] int/float arrays)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  s = p.settings
  eos = p.eos_id
  base = jax.random.PRNGKey(s['seed'])
  kwargs = dict(eos_id=eos, temperature=s['temperature'], topk=s['topk'], topp=s['topp'],
                suppress_ids=tuple(s.get('suppress_ids') or ()))
  if not hasattr(p.target_model, 'encode'):  # decoder-only: the input is the prompt
    return _decode_batch_decoder_only(p, batch, base, kwargs)
  if s['method'] == 'speculative':
    keys = _row_keys(batch, base)
    decodes, _, stats = generate.t5_speculative_generate(
        p.target_model, p.target_params, p.draft_model, p.draft_params, batch.tokens,
        s['max_decode_len'], s['gamma'], decode_rng=keys, real_vocab_size=p.vocab.vocab_size,
        draft_policy=s.get('draft_policy'), sharding_plan=p.plan,
        verification=s.get('verification', 'token'), drafter=s.get('drafter_spec'),
        ngram_table=s.get('ngram_table'), lenience=s.get('lenience', 1.0), **kwargs)
    decodes, stats = jax.device_get((decodes, stats))
    out = {k: np.asarray(getattr(stats, k))[:, 0]
           for k in ('target_calls', 'drafted', 'accepted', 'alpha_sum', 'alpha_count', 'tokens')}
  else:
    decodes, _ = generate.t5_generate(p.target_model, p.target_params, batch.tokens,
                                      s['max_decode_len'],
                                      decode_rng=_row_keys(batch, base),
                                      sharding_plan=p.plan, **kwargs)
    decodes = jax.device_get(decodes)
    tokens = np.array([len(inputs_lib.tokens_until_eos(r, eos))
                       for r in np.asarray(decodes)[:, 0]])
    zeros = np.zeros_like(tokens)
    out = dict(target_calls=tokens, drafted=zeros, accepted=zeros,
               alpha_sum=zeros.astype(np.float32), alpha_count=zeros, tokens=tokens)
  return np.asarray(decodes)[:, 0], out


def _row_keys(batch: inputs_lib.Batch, base):
  """One key per row, from its example index: a row's output depends only on its input."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  idx = [ex.index for ex in batch.examples]
  idx += [idx[0]] * (batch.tokens.shape[0] - len(idx))
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(np.asarray(idx, np.uint32))


def _decode_batch_decoder_only(p: Prepared, batch: inputs_lib.Batch, base, kwargs):
  """`_decode_batch` for a decoder-only pair: each input is its row's prompt, prefilled in
  one pass (prefix LM when the pair says so); `max_decode_len` tokens after it."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  s = p.settings
  bidirectional = bool(p.pair.inputs_bidirectional_attention)
  if s['method'] == 'speculative':
    decodes, _, stats = generate.decoder_only_speculative_generate(
        p.target_model, p.target_params, p.draft_model, p.draft_params, batch.tokens,
        s['max_decode_len'], s['gamma'], decode_rng=_row_keys(batch, base),
        real_vocab_size=p.vocab.vocab_size, draft_policy=s.get('draft_policy'),
        verification=s.get('verification', 'token'), drafter=s.get('drafter_spec'),
        ngram_table=s.get('ngram_table'), lenience=s.get('lenience', 1.0),
        inputs_bidirectional_attention=bidirectional, sharding_plan=p.plan, **kwargs)
    decodes, stats = jax.device_get((decodes, stats))
    out = {k: np.asarray(getattr(stats, k))[:, 0]
           for k in ('target_calls', 'drafted', 'accepted', 'alpha_sum', 'alpha_count', 'tokens')}
    return np.asarray(decodes)[:, 0], out
  decodes, _ = generate.decoder_only_generate(
      p.target_model, p.target_params, batch.tokens, s['max_decode_len'],
      decode_rng=_row_keys(batch, base), sharding_plan=p.plan,
      inputs_bidirectional_attention=bidirectional, **kwargs)
  decodes = np.asarray(jax.device_get(decodes))[:, 0]
  tokens = np.array([len(inputs_lib.tokens_until_eos(r, p.eos_id)) for r in decodes])
  zeros = np.zeros_like(tokens)
  return decodes, dict(target_calls=tokens, drafted=zeros, accepted=zeros,
                       alpha_sum=zeros.astype(np.float32), alpha_count=zeros, tokens=tokens)


def run_decode(p: Prepared) -> dict:
  """Steps 5–6: warm-up, decode every batch, write the outputs atomically, summarize."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  s = p.settings
  n_batches = inputs_lib.num_batches(len(p.examples), s['batch_size'])
  show = flags.show_progress(s['progress']) and (s['progress'] is not None or n_batches > 1)
  batches = inputs_lib.batches(p.examples, s['batch_size'], s['max_input_len'])

  compile_s = warmup_s = None
  first = next(inputs_lib.batches(p.examples, s['batch_size'], s['max_input_len']))
  if s['warmup']:
    t0 = time.perf_counter()
    _decode_batch(p, first, 0)
    warmup_s = time.perf_counter() - t0

  from specdec_jax.sharding import distributed  # pylint: disable=g-import-not-at-top
  writer = distributed.is_writer()  # Multi-process: every process decodes, process 0 writes.
  tmp_paths = []
  if writer:
    out_file, tmp = atomic.open_text(p.output_path)
    tmp_paths.append(tmp)
  else:
    out_file = open(os.devnull, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
  try:
    totals = dict(target_calls=0, drafted=0, accepted=0, alpha_sum=0.0, alpha_count=0,
                  tokens=0)
    predictions, references = [], []
    batch_times = []
    shown = []
    speculative = s['method'] == 'speculative'
    cut = 0  # outputs that reached max_decode_len without EOS
    exact = not speculative or s.get('lenience', 1.0) == 1.0
    t_run = time.perf_counter()
    with out_file, tqdm(total=n_batches, unit='batch', disable=not show, file=sys.stderr,
                        dynamic_ncols=True) as bar:
      for bi, batch in enumerate(batches):
        t0 = time.perf_counter()
        decodes, stats = _decode_batch(p, batch, bi)
        batch_times.append(time.perf_counter() - t0)
        for row, ex in enumerate(batch.examples):
          pred = p.vocab.decode([int(t) for t in decodes[row]])
          rec = {'inputs': ex.record.inputs, 'prediction': pred}
          # 'eos', or 'max_decode_len' when the output was cut there (no EOS emitted).
          rec['ended'] = 'eos' if (decodes[row] == p.eos_id).any() else 'max_decode_len'
          cut += rec['ended'] != 'eos'
          if ex.record.targets is not None:
            rec['targets'] = ex.record.targets
          for key in ('target_calls', 'drafted', 'accepted', 'tokens'):
            rec[key] = int(stats[key][row])
          if ex.truncated:
            rec['truncated'] = True
          if not exact:
            rec['exact'] = False  # lenience < 1: not the target's distribution
          out_file.write(jsonio.dumps(rec, ensure_ascii=False) + '\n')
          for key in totals:
            totals[key] += stats[key][row].item()
          predictions.append(pred)
          references.append(ex.record.targets)
          if len(shown) < s['print_predictions']:
            shown.append((ex.record.inputs, pred))
        bar.update(1)
    run_s = time.perf_counter() - t_run
    if warmup_s is not None:
      compile_s = max(0.0, warmup_s - batch_times[0])

    n = len(p.examples)
    summary = {
        'output': str(p.output_path),
        'method': s['method'],
        'pair': p.pair.name,
        'family': 'encoder_decoder' if hasattr(p.target_model, 'encode') else 'decoder_only',
        # decoder-only: the prompt's mask (prefix LM or causal); None for T5
        'inputs_bidirectional_attention': (None if hasattr(p.target_model, 'encode')
                                           else bool(p.pair.inputs_bidirectional_attention)),
        'target_checkpoint': p.pair.target_checkpoint,
        'checkpoint_dtype': (None if s.get('checkpoint_dtype') is None
                             else str(s['checkpoint_dtype'])),  # params cast at load
        'draft_checkpoint': p.pair.draft_checkpoint if speculative else None,
        'drafter': s.get('drafter', 'model') if speculative else None,
        'ngram_table_path': s.get('ngram_table_path') if speculative else None,
        'lookup_ngram': ((s.get('lookup_min_ngram'), s.get('lookup_max_ngram'))
                         if speculative and 'lookup' in s.get('drafter', 'model') else None),
        'lenience': s.get('lenience', 1.0) if speculative else None,
        'exact': exact,
        'vocab_path': p.pair.vocab_path,
        'input': (f"task:{s['task_name']}[{s['task_split']}]" if s['task_name']
                  else str(s['input_path'] or inputs_lib.EXAMPLES_PATH)),
        'gamma': s['gamma'] if s['method'] == 'speculative' else None,
        'draft_policy': (dataclasses.asdict(s['draft_policy'])
                         if s['method'] == 'speculative' and s.get('draft_policy') else None),
        'verification': (s.get('verification', 'token') if s['method'] == 'speculative'
                         else None),
        'temperature': s['temperature'], 'topk': s['topk'], 'topp': s['topp'],
        'suppress_ids': pair_lib.compact_ids(s.get('suppress_ids') or ()),
        'seed': s['seed'], 'batch_size': s['batch_size'],
        'max_input_len': s['max_input_len'], 'max_decode_len': s['max_decode_len'],
        'examples': n, 'batches': n_batches,
        'padding_rows': n_batches * s['batch_size'] - n,
        'truncated_inputs': sum(ex.truncated for ex in p.examples),
        'cut_at_max_decode_len': cut,
        'compile_s': compile_s, 'warmup_s': warmup_s, 'run_s': run_s,
        'run_includes_compile': not s['warmup'],
        'examples_per_s': n / run_s if run_s > 0 else None,
        'tokens_per_s': totals['tokens'] / run_s if run_s > 0 else None,
        'tokens': int(totals['tokens']), 'target_calls': int(totals['target_calls']),
        'drafted': int(totals['drafted']), 'accepted': int(totals['accepted']),
        'alpha': (totals['alpha_sum'] / totals['alpha_count']
                  if totals['alpha_count'] else None),
        'acceptance_rate': (totals['accepted'] / totals['drafted']
                            if totals['drafted'] else None),
        'mean_draft_length': (totals['drafted'] / totals['target_calls']
                              if totals['drafted'] else None),
        'tokens_per_target_call': (totals['tokens'] / totals['target_calls']
                                   if totals['target_calls'] else None),
        'bleu': None,
        'devices': _devices(),
        'sharding': p.plan.describe() if p.plan is not None else None,
    }
    if references and all(r is not None for r in references):
      import sacrebleu  # pylint: disable=g-import-not-at-top
      summary['bleu'] = sacrebleu.corpus_bleu(predictions, [references]).score
    if not writer:
      return summary
    summary_path = summary_path_for(p.output_path)
    sum_file, sum_tmp = atomic.open_text(summary_path)
    tmp_paths.append(sum_tmp)
    with sum_file:
      sum_file.write(jsonio.dumps(summary, indent=2))
      sum_file.write('\n')
    atomic.commit(tmp, p.output_path)
    atomic.commit(sum_tmp, summary_path)
  except BaseException:
    for t in tmp_paths:
      t.unlink(missing_ok=True)
    raise
  for source, pred in shown:
    print(f'{source}\n  → {pred}')
  if shown:
    print()
  print_summary(summary)
  if summary['cut_at_max_decode_len']:
    flags.print_warning(
        f"{summary['cut_at_max_decode_len']} of {summary['examples']} outputs reached "
        f"decode.max_decode_len={s['max_decode_len']} without EOS (cut there; their rows say "
        "\"ended\": \"max_decode_len\"); raise decode.max_decode_len to let them finish.")
  return summary


def summary_path_for(output_path) -> pathlib.Path:
  """`<output_path>.summary.json`, where the job writes its summary."""
  output_path = pathlib.Path(output_path)
  return output_path.with_name(output_path.name + '.summary.json')


def _devices() -> str:
  import jax  # pylint: disable=g-import-not-at-top
  devs = jax.devices()
  return f'{len(devs)} x {devs[0].device_kind}' if devs else 'none'


def print_summary(summary: dict, stream=None) -> None:
  """Prints the job's summary dict as aligned `name  value` lines (stdout by default)."""
  stream = stream or sys.stdout

  def fmt(v, spec='.3f'):
    if v is None:
      return '-'
    return format(v, spec) if isinstance(v, float) and math.isfinite(v) else str(v)

  rows = [
      ('method', summary['method'] + (f" (gamma={summary['gamma']}" + (
          f", draft_policy={summary['draft_policy']['kind']})"
          if (summary.get('draft_policy') or {}).get('kind', 'constant') != 'constant'
          else ')') if summary['gamma'] else '') + (
              ' [block verification]' if summary.get('verification') == 'block' else '') + (
              f", drafter={summary['drafter']}" if summary.get('drafter') is not None
              else '')),
      ('exact', 'yes' if summary.get('exact', True) else
       f"NO (lenience={summary.get('lenience')}: not the target's distribution)"),
      ('examples', f"{summary['examples']} in {summary['batches']} batch(es) of "
                   f"{summary['batch_size']}"),
      ('compile', f"{fmt(summary['compile_s'], '.2f')} s" + (
          ' (not separated: decode.warmup=False)' if summary['run_includes_compile'] else '')),
      ('run', f"{fmt(summary['run_s'], '.2f')} s"),
      ('examples/s', fmt(summary['examples_per_s'], '.2f')),
      ('tokens/s', fmt(summary['tokens_per_s'], '.1f')),
      ('tokens', str(summary['tokens'])),
      ('target calls', str(summary['target_calls'])),
      ('tokens / target call', fmt(summary['tokens_per_target_call'])),
      ('alpha', fmt(summary['alpha'])),
      ('acceptance rate', fmt(summary['acceptance_rate'])),
      ('BLEU', fmt(summary['bleu'], '.2f')),
      ('truncated inputs', str(summary['truncated_inputs'])),
      ('cut at max_decode_len', str(summary.get('cut_at_max_decode_len', 0))),
      ('output', summary['output']),
  ]
  width = max(len(k) for k, _ in rows)
  for k, v in rows:
    print(f'{k:<{width}}  {v}', file=stream)
  print(f"{'summary':<{width}}  {summary_path_for(summary['output'])}", file=stream, flush=True)


