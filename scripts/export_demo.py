r"""Exports the trained demo pair into `specdec_jax/assets/demo_ende/` (T5X legacy checkpoints).

  python scripts/export_demo.py --target_run=runs/target_ende_v3 --draft_run=runs/draft_ende_v3_qls \
      [--out=specdec_jax/assets/demo_ende] [--dtype=bfloat16]
  python scripts/export_demo.py --target_run= --draft_run=runs/draft_ende_v31   # new draft only
  python scripts/export_demo.py --target_run=runs/gec_corrector --draft_run=none \
      --out=specdec_jax/assets/gec_en --task='English grammatical error correction (synthetic errors)' \
      --input_prefix='fix grammar: '   # a target-only pair (model-free drafters)

Writes `<out>/target/checkpoint_<step>/` and `<out>/draft/checkpoint_<step>/` with
`specdec_jax.checkpoints.save_t5x_checkpoint` (TensorStore/zarr arrays beside the msgpack,
as T5X does), a `config.json` (the model config: a T5Config, or a decoder-only config with
its `family`) next to each, and `<out>/pair.json` recording both configs (for a decoder-only
pair also `inputs_bidirectional_attention`, from the training summary), the vocabulary and the training summaries. `--target_run=` (empty) or
`--draft_run=` keeps that model as shipped, with its `pair.json` entry (e.g. a new draft
for the shipped target). `--draft_run=none` writes a pair without a draft (for the
model-free drafters: lookup, tables); the vocabulary is copied into `<out>/vocab/` when
it is not there. Every run is checked before any folder is replaced; each model
folder is written beside its destination and swapped in (two renames; an interrupted swap
is undone by the next export) only once it loads back onto its config; `pair.json` is
written atomically.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys

import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.train import job as train_lib  # noqa: E402
from specdec_jax.models import family  # noqa: E402


def export_model(run_dir, out_dir, dtype):
  from specdec_jax import checkpoints
  from specdec_jax.util import atomic
  run_dir, out_dir = pathlib.Path(run_dir), pathlib.Path(out_dir)
  config, params = train_lib.load_run(run_dir)
  family.check_params(params, config)
  summary = json.loads((run_dir / 'summary.json').read_text())
  step = int(summary['steps'])
  tmp = out_dir.with_name(f'.{out_dir.name}.export.tmp')
  old = out_dir.with_name(f'.{out_dir.name}.export.old')
  if old.exists() and not out_dir.exists():  # an earlier export died between its renames
    old.rename(out_dir)
  for stale in (tmp, old):
    shutil.rmtree(stale, ignore_errors=True)
  tmp.mkdir(parents=True)
  try:
    path = checkpoints.save_t5x_checkpoint(params, tmp, step, dtype=dtype)
    atomic.write_text(tmp / 'config.json', json.dumps(train_lib.config_to_dict(config), indent=2))
    # Round trip: what is shipped loads back onto the config.
    family.check_params(checkpoints.load_t5x_checkpoint(tmp, config=config), config)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  if out_dir.exists():
    out_dir.rename(old)
  try:
    tmp.rename(out_dir)
  except BaseException:
    if old.exists() and not out_dir.exists():
      old.rename(out_dir)
    raise
  shutil.rmtree(old, ignore_errors=True)
  return config, step, out_dir / pathlib.Path(path).relative_to(tmp), summary, params


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument('--target_run', default='runs/target_ende_v3')
  p.add_argument('--draft_run', default='runs/draft_ende_v3_qls')
  p.add_argument('--out', default='specdec_jax/assets/demo_ende')
  p.add_argument('--dtype', default='bfloat16')
  p.add_argument('--task', default='translate English to German (Multi30K)')
  p.add_argument('--input_prefix', default='translate English to German: ')
  p.add_argument('--vocab', default='specdec_jax/assets/demo_ende/vocab/ende8k.model')
  args = p.parse_args(argv)
  dtype = jnp.dtype(args.dtype).type
  out = pathlib.Path(args.out)
  pair = {'task': args.task,
          'input_prefix': args.input_prefix,
          'vocabulary': {'path': f'vocab/{pathlib.Path(args.vocab).name}', 'extra_ids': 100,
                         'usage': 'seqio.SentencePieceVocabulary(path, extra_ids=100)'},
          'storage_dtype': args.dtype, 'eos_id': 1, 'pad_id': 0}
  # Ids the demo models never saw in training and must not emit (decode.suppress_ids='pair'):
  # the unknown piece, the 100 sentinels and the rows that pad the vocabulary to 8,192.
  import sentencepiece  # pylint: disable=import-outside-toplevel
  sp = sentencepiece.SentencePieceProcessor(model_file=args.vocab)
  pair['suppress_ids'] = [sp.unk_id(), [sp.vocab_size(), 8191]]
  from specdec_jax.util import atomic
  previous = {}
  if (out / 'pair.json').is_file():
    previous = json.loads((out / 'pair.json').read_text())
  roles = (('target', args.target_run),) + (
      () if args.draft_run == 'none' else (('draft', args.draft_run),))
  if not (out / 'vocab' / pathlib.Path(args.vocab).name).is_file():
    (out / 'vocab').mkdir(parents=True, exist_ok=True)
    shutil.copy(args.vocab, out / 'vocab' / pathlib.Path(args.vocab).name)
  for role, run in roles:  # every check before any folder is replaced
    if not run:
      if role not in previous or f'{role}_config' not in previous:
        raise SystemExit(f'--{role}_run is empty but {out / "pair.json"} has no {role} to keep.')
      if previous.get('storage_dtype') != args.dtype:
        raise SystemExit(f'--{role}_run is empty (keep the shipped {role}), but it is stored as '
                         f'{previous.get("storage_dtype")} and --dtype is {args.dtype}.')
    elif not pathlib.Path(run, 'params.msgpack').exists():
      raise SystemExit(f'--{role}_run={run!r}: no finished run there (params.msgpack).')
  for role, run in roles:
    if not run:
      pair[role], pair[f'{role}_config'] = previous[role], previous[f'{role}_config']
      print(f'{role}: kept as shipped ({previous[role]["checkpoint"]})')
      continue
    config, step, path, summary, params = export_model(run, out / role, dtype)
    pair[role] = {'checkpoint': f'{role}/checkpoint_{step}', 'step': step,
                  'params': train_lib.param_count(params),
                  't5_config': train_lib.config_to_dict(config),
                  'train_summary': {k: v for k, v in summary.items() if k != 'config'}}
    pair[f'{role}_config'] = pair[role]['t5_config']  # the key specdec_jax.decode reads
    if 'inputs_bidirectional_attention' in summary:  # a decoder-only run: prefix LM or not
      pair['inputs_bidirectional_attention'] = summary['inputs_bidirectional_attention']
    print(role, path)
  atomic.write_text(out / 'pair.json', json.dumps(pair, indent=2))
  print(json.dumps({k: v for k, v in pair.items() if k not in ('target', 'draft')}))


if __name__ == '__main__':
  main()
