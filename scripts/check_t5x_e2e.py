r"""The real T5X round trip on a shipped demo pair, checked against our decode job.

    python scripts/check_t5x_e2e.py [--pair=demo_ende|demo_ende_decoder_only]
        [--t5x_python=/tmp/t5xenv_do/bin/python]
        [--work_dir=/tmp/e2e_t5x] [--num_examples=50] [--train_steps=3] [--batch_size=8]
        [--t5x_commit=<hash>] [--output=out/check_t5x_e2e.json]
                                                     (repo root; about 3 minutes on 2 CPU cores)

Not part of CI: `t5x` is not on the package registry. `--t5x_python` is the interpreter
of an environment where the real T5X runs (`../shared/tools/real_t5x/build_env.sh`).
On a shipped demo pair (`--pair`: `demo_ende`, the T5 pair, T5X model gin
`specdec_jax/configs/t5x/demo_ende.gin`, model class `SpeculativeEncoderDecoderModel`; or
`demo_ende_decoder_only`, the prefix-LM pair, gin
`specdec_jax/configs/t5x/demo_ende_decoder_only.gin`, `SpeculativeDecoderOnlyModel`; the
checkpoints are the ones the pair's `pair.json` names) it runs, each as a subprocess from
the repository root:

1. `t5x.infer` (T5X's `configs/runs/infer.gin`, `predict_with_aux`) on the shipped target
   checkpoint, the draft read from the shipped draft checkpoint by our restore hook;
2. `t5x.eval` (`configs/runs/eval.gin`) on the same checkpoints: BLEU and predictions;
3. `t5x.train` (`configs/runs/finetune.gin`; the README's command, section "The shipped
   demo pair in T5X", with its own MODEL_DIR) for `--train_steps` steps from the shipped
   target checkpoint (TRAIN_STEPS = its step + `--train_steps`). That checkpoint
   holds params and step but no optimizer state, hence
   `--gin.utils.RestoreCheckpointConfig.fallback_to_scratch=True`: T5X restores every key
   the checkpoint has and initializes each missing one from scratch, logging
   "Initializing param=<key> from scratch". The check parses those lines and fails
   unless every one lies under `state/param_states` (optimizer state, not a param);
4. `t5x.infer` again on the checkpoint `t5x.train` saved (`DRAFT_CHECKPOINT` bound to
   that same checkpoint: the draft is the one T5X saved under `target/draft`);
5. our decode job (`python -m specdec_jax.decode` with the same model gin and
   `CHECKPOINT_PATH` = `DRAFT_CHECKPOINT` = the trained checkpoint: the target is read
   from `target` without `draft`, the draft from `target/draft`), greedy, speculative
   and baseline, with `decode.checkpoint_dtype='bfloat16'` as `infer.gin` restores.

Inputs: the first `--num_examples` sentences of the Multi30K test split (the seqio task
`specdec_ende_multi30k`, from `specdec_jax.text.tasks`), read from a small copy of the
shared data (`$SPECDEC_DATA`, else `../shared/data`) under `<work_dir>/data` (the first
64 training and 16 validation pairs too), which every subprocess gets as `SPECDEC_DATA`.
Lengths: inputs and targets 64 tokens (T5X's `TASK_FEATURE_LENGTHS`, our
`decode.max_input_len` / `max_decode_len`).

Compared, row by row (the prediction text; for speculative runs also the per-row
`target_calls`, `drafted`, `accepted` T5X writes in `aux`): infer vs eval on the shipped
checkpoints, T5X infer on the trained checkpoint vs our decode job (speculative and
baseline), ours speculative vs ours baseline. Also: the trained checkpoint's step,
its optimizer state, how far training moved the target's params (max |Δ|) and that the
draft's params are unchanged (the loss is the target's; Adafactor leaves a zero-gradient
param as it is). Prints a summary, writes the JSON report (commands, T5X commit, counts,
timings) atomically, exits 0 when everything matches, 1 on a mismatch or a failed step
(its log's tail printed; all logs under `<work_dir>/logs`), 2 on bad arguments (e.g. no
T5X interpreter at `--t5x_python`).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# --pair → its T5X model gin (the checkpoints: the pair folder's pair.json).
PAIR_GINS = {'demo_ende': 'specdec_jax/configs/t5x/demo_ende.gin',
             'demo_ende_decoder_only': 'specdec_jax/configs/t5x/demo_ende_decoder_only.gin'}
TASK = 'specdec_ende_multi30k'
TASK_MODULE = 'specdec_jax.text.tasks'
LENGTHS = "{'inputs': 64, 'targets': 64}"
# split → (file stem under ende/, how many line pairs the small data copy keeps; None: --num_examples)
SPLITS = {'test': ('multi30k/test_2016_flickr', None), 'train': ('multi30k/train', 64),
          'validation': ('multi30k/val', 16)}
FROM_SCRATCH = re.compile(r'Initializing param=(\S+) from scratch')


class StepFailed(RuntimeError):
  pass


def _q(value: str) -> str:
  """A gin string literal for `--gin.X=...`."""
  return repr(str(value))


def _probe(python: str) -> dict:
  """What the T5X interpreter imports: t5x's and specdec_jax's locations (with PYTHONPATH=REPO)."""
  code = ('import json, t5x, specdec_jax; '
          'print(json.dumps({"t5x": t5x.__file__, "specdec_jax": specdec_jax.__file__}))')
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL='3')
  r = subprocess.run([python, '-c', code], cwd=REPO, env=env, capture_output=True, text=True,
                     check=False)
  if r.returncode != 0:
    return {'error': f'{python} cannot import t5x and specdec_jax ('
                     f'{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}'
                     '); build the environment with ../shared/tools/real_t5x/build_env.sh.'}
  return json.loads(r.stdout.strip().splitlines()[-1])


def _t5x_commit(t5x_file: str, given: str | None) -> str:
  if given:
    return given
  src = pathlib.Path(t5x_file).resolve().parent.parent
  r = subprocess.run(['git', '-C', str(src), 'rev-parse', 'HEAD'], capture_output=True,
                     text=True, check=False)
  return r.stdout.strip() if r.returncode == 0 else 'unknown (not a git checkout; pass --t5x_commit)'


def _read_lines(path: pathlib.Path, n: int) -> list[str]:
  opener = gzip.open if path.suffix == '.gz' else open
  out = []
  with opener(path, 'rt', encoding='utf-8') as f:
    for line in f:
      if len(out) == n:
        break
      out.append(line.rstrip('\n').rstrip('\r'))
  return out


def make_data(work: pathlib.Path, num_examples: int) -> pathlib.Path:
  """`<work>/data/ende/multi30k/*.{en,de}`: the first lines of each split of the shared data."""
  from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
  src = paths.data_dir() / 'ende'
  dst = work / 'data'
  for stem, keep in SPLITS.values():
    for lang in ('en', 'de'):
      found = [src / f'{stem}.{lang}{sfx}' for sfx in ('.gz', '')
               if (src / f'{stem}.{lang}{sfx}').is_file()]
      if not found:
        raise SystemExit(f'check_t5x_e2e: error: no {stem}.{lang}[.gz] under {src} '
                         '(set SPECDEC_DATA to the shared data folder).')
      out = dst / 'ende' / f'{stem}.{lang}'
      out.parent.mkdir(parents=True, exist_ok=True)
      out.write_text('\n'.join(_read_lines(found[0], keep or num_examples)) + '\n',
                     encoding='utf-8')
  return dst


def run_step(name: str, argv: list[str], env: dict, logs: pathlib.Path, record: dict) -> str:
  """Runs one subprocess from the repo root, its stdout+stderr to `<logs>/<name>.log`."""
  log = logs / f'{name}.log'
  print(f'[{name}] {" ".join(argv)}', flush=True)
  start = time.time()
  with open(log, 'w', encoding='utf-8') as f:
    rc = subprocess.run(argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                        check=False).returncode
  seconds = round(time.time() - start, 1)
  record['steps'].append(dict(name=name, argv=argv, rc=rc, seconds=seconds, log=str(log)))
  text = log.read_text(encoding='utf-8', errors='replace')
  print(f'[{name}] exit {rc} in {seconds} s', flush=True)
  if rc != 0:
    print('\n'.join(text.splitlines()[-40:]), file=sys.stderr)
    raise StepFailed(f'{name} exited {rc} (log: {log})')
  return text


def _jsonl(path: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in path.read_text(encoding='utf-8').splitlines() if line]


def _one(folder: pathlib.Path, pattern: str) -> pathlib.Path:
  found = sorted(folder.glob(pattern))
  if len(found) != 1:
    raise StepFailed(f'expected one {pattern} under {folder}, found {[str(p) for p in found]}')
  return found[0]


def _text(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def _input(row: dict) -> str:
  """The pretokenized input of a row: ours (`inputs`), T5X infer's (`inputs`) or eval's (`input`)."""
  value = row.get('inputs', row.get('input'))
  return _text(value.get('inputs_pretokenized') if isinstance(value, dict) else value)


def compare(a: list[dict], b: list[dict], stats: bool = False) -> dict:
  """Row-by-row agreement of two prediction lists (same inputs in the same order)."""
  n = min(len(a), len(b))
  same = [i for i in range(n) if _text(a[i]['prediction']) == _text(b[i]['prediction'])]
  out = dict(rows=[len(a), len(b)], inputs_equal=sum(_input(a[i]) == _input(b[i])
                                                     for i in range(n)),
             predictions_equal=len(same),
             differing_rows=[i for i in range(n) if i not in set(same)][:10])
  if stats:
    keys = ('target_calls', 'drafted', 'accepted')
    out['stats_equal'] = sum(all(int(a[i][k]) == int(b[i][k]) for k in keys) for i in range(n))
  return out


def _t5x_rows(path: pathlib.Path) -> list[dict]:
  """T5X infer JSONL → rows with `inputs`, `prediction` and the aux statistics."""
  rows = []
  for r in _jsonl(path):
    aux = r.get('aux', {})
    rows.append(dict(inputs=r.get('inputs'), prediction=r['prediction'],
                     **{k: aux[k] for k in ('target_calls', 'drafted', 'accepted') if k in aux}))
  return rows


def check_training(initial: str, draft: str, trained: pathlib.Path, log_text: str) -> dict:
  """What T5X did with the optimizer-less checkpoint, and what training changed.

  `initial` / `draft`: the shipped target / draft checkpoint folders, relative to the repo."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top

  def flat(tree):
    return {k: np.asarray(v, np.float32) for k, v in
            traverse_util.flatten_dict(tree, sep='/').items()}

  scratch = FROM_SCRATCH.findall(log_text)
  out = dict(initialized_from_scratch=len(scratch),
             initialized_from_scratch_outside_optimizer_state=sorted(
                 k for k in scratch if not k.startswith('state/param_states/')),
             initialized_from_scratch_examples=scratch[:3])
  try:
    checkpoints.read_t5x_arrays(REPO / initial, 'state/param_states')
    out['initial_has_optimizer_state'] = True
  except KeyError:
    out['initial_has_optimizer_state'] = False
  state = checkpoints.read_t5x_arrays(trained, 'state')
  out['trained_step'] = int(np.asarray(state['step']))
  out['trained_optimizer_state_arrays'] = len(traverse_util.flatten_dict(state['param_states']))
  before = flat(checkpoints.load_t5x_checkpoint(REPO / initial))
  after = flat(checkpoints.load_t5x_checkpoint(trained, exclude=('draft',)))
  draft_before = flat(checkpoints.load_t5x_checkpoint(REPO / draft))
  draft_after = flat(checkpoints.load_t5x_checkpoint(trained, subtree='target/draft'))
  out['target_same_names'] = set(before) == set(after)
  out['target_max_abs_change'] = float(max(np.max(np.abs(after[k] - before[k]))
                                           for k in before if k in after))
  out['target_arrays_changed'] = sum(not np.array_equal(after[k], before[k])
                                     for k in before if k in after)
  out['target_arrays'] = len(before)
  out['draft_same_names'] = set(draft_before) == set(draft_after)
  out['draft_unchanged'] = out['draft_same_names'] and all(
      np.array_equal(draft_before[k], draft_after[k]) for k in draft_before)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--pair', default='demo_ende', choices=sorted(PAIR_GINS),
                  help='the shipped demo pair (its T5X model gin and pair.json checkpoints)')
  ap.add_argument('--t5x_python', default='/tmp/t5xenv_do/bin/python',
                  help='python of an environment where the real T5X runs')
  ap.add_argument('--decode_python', default=sys.executable,
                  help='python for our decode job (default: this one)')
  ap.add_argument('--work_dir', default='/tmp/e2e_t5x',
                  help='scratch folder (emptied first): data copy, T5X outputs, logs')
  ap.add_argument('--num_examples', type=int, default=50, help='test sentences')
  ap.add_argument('--train_steps', type=int, default=3, help='t5x.train steps')
  ap.add_argument('--batch_size', type=int, default=8, help='batch of every run')
  ap.add_argument('--t5x_commit', default=None,
                  help='the T5X source commit, recorded in the report (default: git of its source)')
  ap.add_argument('--output', default='out/check_t5x_e2e.json')
  a = ap.parse_args(argv)
  python = pathlib.Path(a.t5x_python)
  if not (python.is_file() and os.access(python, os.X_OK)):
    ap.error(f'--t5x_python={a.t5x_python!r} is not an executable file: build a T5X '
             'environment with ../shared/tools/real_t5x/build_env.sh and pass its bin/python.')
  if a.num_examples < 1 or a.train_steps < 1 or a.batch_size < 1:
    ap.error('--num_examples, --train_steps and --batch_size must be >= 1.')
  work = pathlib.Path(a.work_dir).resolve()
  if work == REPO or REPO in work.parents:
    ap.error('--work_dir must be outside the repository.')
  if work.is_dir() and any(work.iterdir()) and not (work / 'logs').is_dir():
    ap.error(f'--work_dir={str(work)!r} holds files this check did not write; it empties '
             'its work folder first, so name a new or earlier one.')

  gin_path = PAIR_GINS[a.pair]
  pair_dir = REPO / 'specdec_jax' / 'assets' / a.pair
  pair = json.loads((pair_dir / 'pair.json').read_text(encoding='utf-8'))
  target_ckpt = str((pair_dir / pair['target']['checkpoint']).relative_to(REPO))
  draft_ckpt = str((pair_dir / pair['draft']['checkpoint']).relative_to(REPO))
  probe = _probe(str(python))
  if 'error' in probe:
    ap.error(probe['error'])
  if REPO not in pathlib.Path(probe['specdec_jax']).resolve().parents:
    ap.error(f'{python} imports specdec_jax from {probe["specdec_jax"]}, not from {REPO}.')
  t5x_src = pathlib.Path(probe['t5x']).resolve().parent  # the t5x package folder
  for run in ('infer', 'eval', 'finetune'):  # named as the README does: t5x/configs/runs/<run>.gin,
    if not (t5x_src / 'configs' / 'runs' / f'{run}.gin').is_file():  # found on T5X's search path
      ap.error(f'{t5x_src} has no configs/runs/{run}.gin: not a T5X source tree?')
  commit = _t5x_commit(probe['t5x'], a.t5x_commit)

  shutil.rmtree(work, ignore_errors=True)
  (work / 'logs').mkdir(parents=True)
  data = make_data(work, a.num_examples)
  env = dict(os.environ, SPECDEC_DATA=str(data), PYTHONPATH=str(REPO),
             TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')
  git = lambda *args: subprocess.run(['git', '-C', str(REPO), *args], capture_output=True,
                                     text=True, check=False).stdout.strip()
  record = dict(pair=a.pair, model_gin=gin_path, target_checkpoint=target_ckpt,
                draft_checkpoint=draft_ckpt, t5x_commit=commit,
                repo_commit=git('rev-parse', 'HEAD'),
                repo_uncommitted=git('status', '--porcelain').splitlines(),
                t5x=probe['t5x'], specdec_jax=probe['specdec_jax'],
                t5x_python=str(python), decode_python=a.decode_python, work_dir=str(work),
                num_examples=a.num_examples, train_steps=a.train_steps,
                batch_size=a.batch_size, task=f'{TASK} (test split, first {a.num_examples})',
                steps=[])
  logs = work / 'logs'
  t5x = [str(python), '-m']
  common = [f'--gin_file={gin_path}', f'--gin.MIXTURE_OR_TASK_NAME={_q(TASK)}',
            f'--gin.MIXTURE_OR_TASK_MODULE={_q(TASK_MODULE)}',
            f'--gin.TASK_FEATURE_LENGTHS={LENGTHS}']

  def infer(name, checkpoint, draft=None):
    out = work / name
    argv = t5x + ['t5x.infer'] + common + [
        '--gin_file=t5x/configs/runs/infer.gin', f'--gin.CHECKPOINT_PATH={_q(checkpoint)}',
        f'--gin.INFER_OUTPUT_DIR={_q(out)}', "--gin.infer.mode='predict_with_aux'",
        f'--gin.utils.DatasetConfig.batch_size={a.batch_size}']
    if draft:
      argv.append(f'--gin.DRAFT_CHECKPOINT={_q(draft)}')
    run_step(name, argv, env, logs, record)
    return _t5x_rows(_one(out, f'{TASK}-*.jsonl-*-of-*[0-9]'))

  ok = True
  try:
    # 1-2. infer and eval on the shipped checkpoints.
    infer_shipped = infer('t5x_infer_shipped', target_ckpt)
    eval_dir = work / 't5x_eval'
    run_step('t5x_eval', t5x + ['t5x.eval'] + common + [
        '--gin_file=t5x/configs/runs/eval.gin', f'--gin.CHECKPOINT_PATH={_q(target_ckpt)}',
        f'--gin.EVAL_OUTPUT_DIR={_q(eval_dir)}',
        f'--gin.utils.DatasetConfig.batch_size={a.batch_size}'], env, logs, record)
    metrics = _jsonl(_one(eval_dir / 'inference_eval', f'{TASK}-metrics.jsonl'))
    eval_rows = _jsonl(_one(eval_dir / 'inference_eval', f'{TASK}-*[0-9].jsonl'))
    record['eval_bleu'] = metrics[-1].get('bleu')
    record['infer_vs_eval_shipped'] = compare(infer_shipped, eval_rows)

    # 3. a few training steps from the shipped (optimizer-less) target checkpoint.
    model_dir = work / 't5x_train'
    start_step = int(pair['target']['step'])
    total = start_step + a.train_steps
    # The README's command (section "The shipped demo pair in T5X"), MODEL_DIR aside.
    train_log = run_step('t5x_train', t5x + ['t5x.train'] + common[:1] + [
        '--gin_file=t5x/configs/runs/finetune.gin',
        f'--gin.INITIAL_CHECKPOINT_PATH={_q(target_ckpt)}',
        '--gin.utils.RestoreCheckpointConfig.fallback_to_scratch=True',
        f'--gin.MODEL_DIR={_q(model_dir)}'] + common[1:] + [
        f'--gin.TRAIN_STEPS={total}', f'--gin.BATCH_SIZE={a.batch_size}',
        '--gin.USE_CACHED_TASKS=False',
        '--gin.train/utils.DatasetConfig.pack=False',
        '--gin.train_eval/utils.DatasetConfig.pack=False',
        '--gin.train.infer_eval_dataset_cfg=None'],
        env, logs, record)
    trained = model_dir / f'checkpoint_{total}'
    if not trained.is_dir():
      raise StepFailed(f't5x.train saved no {trained}')
    record['trained_checkpoint'] = str(trained)
    record['training'] = check_training(target_ckpt, draft_ckpt, trained, train_log)

    # 4. infer on the trained checkpoint (the draft: the one T5X saved in it).
    infer_trained = infer('t5x_infer_trained', str(trained), draft=str(trained))
    record['infer_shipped_vs_trained'] = compare(infer_shipped, infer_trained)

    # 5. our decode job on the trained checkpoint, draft from its target/draft.
    ours = {}
    for method in ('speculative', 'baseline'):
      out = work / f'decode_{method}.jsonl'
      run_step(f'decode_{method}', [a.decode_python, '-m', 'specdec_jax.decode',
                                    f'--gin_file={gin_path}',
                                    f'--gin.CHECKPOINT_PATH={_q(trained)}',
                                    f'--gin.DRAFT_CHECKPOINT={_q(trained)}',
                                    f'--gin.decode.task_name={_q(TASK)}',
                                    f'--gin.decode.max_examples={a.num_examples}',
                                    f'--gin.decode.method={_q(method)}',
                                    "--gin.decode.checkpoint_dtype='bfloat16'",
                                    f'--gin.decode.batch_size={a.batch_size}',
                                    f'--gin.decode.output_path={_q(out)}'], env, logs, record)
      ours[method] = _jsonl(out)
    record['t5x_infer_vs_ours_speculative'] = compare(infer_trained, ours['speculative'],
                                                      stats=True)
    record['t5x_infer_vs_ours_baseline'] = compare(infer_trained, ours['baseline'])
    record['ours_speculative_vs_baseline'] = compare(ours['speculative'], ours['baseline'])
  except StepFailed as e:
    record['failed'] = str(e)
    print(f'check_t5x_e2e: FAILED: {e}', file=sys.stderr)
    ok = False

  n = a.num_examples
  if ok:
    t = record['training']
    compared = [v for k, v in record.items() if isinstance(v, dict) and 'inputs_equal' in v]
    checks = {
        'same inputs, same order': all(c['inputs_equal'] == n and c['rows'] == [n, n]
                                       for c in compared),
        'infer == eval (shipped)': record['infer_vs_eval_shipped']['predictions_equal'] == n,
        'only optimizer state initialized from scratch': (
            t['initialized_from_scratch'] > 0
            and not t['initialized_from_scratch_outside_optimizer_state']),
        'trained step': t['trained_step'] == total,
        'target params moved': t['target_arrays_changed'] > 0 and t['target_same_names'],
        'draft unchanged': t['draft_unchanged'],
        'T5X infer == ours speculative': (
            record['t5x_infer_vs_ours_speculative']['predictions_equal'] == n),
        'T5X aux stats == ours': record['t5x_infer_vs_ours_speculative']['stats_equal'] == n,
        'T5X infer == ours baseline': record['t5x_infer_vs_ours_baseline']['predictions_equal'] == n,
    }
    record['checks'] = checks
    ok = all(checks.values())
    print(f'T5X {commit}; {n} test sentences')
    print(f'eval BLEU (shipped): {record["eval_bleu"]}; infer vs eval predictions equal: '
          f'{record["infer_vs_eval_shipped"]["predictions_equal"]}/{n}')
    print(f'train: {a.train_steps} steps to step {t["trained_step"]}; initialized from scratch: '
          f'{t["initialized_from_scratch"]} keys, outside state/param_states: '
          f'{len(t["initialized_from_scratch_outside_optimizer_state"])}; target arrays changed '
          f'{t["target_arrays_changed"]}/{t["target_arrays"]} (max |d| '
          f'{t["target_max_abs_change"]:.3g}); draft unchanged: {t["draft_unchanged"]}')
    print(f'infer shipped vs trained: {record["infer_shipped_vs_trained"]["predictions_equal"]}/{n} equal')
    for key in ('t5x_infer_vs_ours_speculative', 't5x_infer_vs_ours_baseline',
                'ours_speculative_vs_baseline'):
      c = record[key]
      extra = f', stats equal {c["stats_equal"]}/{n}' if 'stats_equal' in c else ''
      print(f'{key}: predictions equal {c["predictions_equal"]}/{n}{extra}')
    for name, passed in checks.items():
      print(f'  {"ok  " if passed else "FAIL"} {name}')
  record['ok'] = ok
  from specdec_jax.util import atomic  # pylint: disable=g-import-not-at-top
  atomic.write_text(a.output, json.dumps(record, indent=1, default=str))
  print(f'wrote {a.output}')
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
