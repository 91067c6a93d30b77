r"""Gin-configured training of T5 1.1 or decoder-only models on EN→DE text: `target` and
`distill` modes.

  python -m specdec_jax.train --gin_file=configs/train/target_ende_v3.gin \
      [--gin_file=...] [--gin.train.max_minutes=35] [--gin.train.run_dir="'runs/x'"]

Modes (`train.mode`):
  target   cross-entropy on the gold German tokens (label smoothing `label_smoothing`),
           plus `unlikelihood_weight` · token-level unlikelihood (Welleck et al. 2020).
  distill  trains a (draft) model on a mixture of the gold labels and a teacher's
           soft labels: loss = (1 − kd_weight) · CE(gold) + kd_weight · KL(p_T ‖ q_D),
           token-level, where p_T is the teacher's temperature-1 next-token
           distribution from a teacher forward pass (dropout off) in the same jitted
           step on the same batch, and q_D the draft's. The teacher (`teacher_dir`,
           a finished run dir) is frozen. KL(p_T ‖ q_D) at temperature 1 is the
           quantity speculative sampling cares about: the acceptance rate is
           α = Σ_x min(p_T, q_D) = 1 − TV(p_T, q_D) and TV ≤ sqrt(KL/2) (Pinsker), so
           lowering the forward KL to the target pushes α up directly; the gold term
           keeps the small draft anchored to the data where the teacher is wrong.
           `tv_weight > 0` adds tv_weight · TV(p_T, q_D) = tv_weight · (1 − Σ min(p_T, q_D)),
           the acceptance rate's own objective (DistillSpec's TVD), per token.

Everything runs under `run_dir`: `config.json` (the T5Config), `train_state_<step>.msgpack`
(params, optimizer state and data position, written every `checkpoint_every_steps`, the
last `keep_checkpoints` ≥ 1 kept; a restarted run resumes from the newest intact one, a
damaged newer one skipped with a warning), `params.msgpack`
(final float32 params, flax msgpack) and `train_log.jsonl`. Training stops after
`max_steps` steps or `max_minutes` minutes of wall time (compilation included),
whichever comes first.

Optimizer (`train.optimizer`): `adamw` (default) or T5X's `adafactor`. With AdamW,
`train.query_lr_scale = 1/√head_dim` scales the step of the attention query kernels to
T5's folded attention scale (`train_step.make_optimizer`); the v3 demo target uses it.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time
from typing import Sequence

import gin
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from specdec_jax.decoding import sampling
from specdec_jax.util import atomic
from specdec_jax.util import gin_config
from specdec_jax.train import data as data_lib
from specdec_jax.util import flags
from specdec_jax.util import jsonio
# Registers T5X's gin names (network.T5Config, ...), so T5X-style bindings work here.
from specdec_jax.interop.t5x import gin_registry as gin_utils  # noqa: F401  pylint: disable=unused-import
from specdec_jax.train import subword
from specdec_jax.text import vocabulary
from specdec_jax.models import family
from specdec_jax.models.config import T5Config, family_of


# The run's files and the training step live in their own modules; re-exported here
# (`train.load_run`, `train.config_to_dict`, ... are used by scripts and jobs).
from specdec_jax.train.run_files import (_checkpoints, config_from_dict, config_to_dict,  # noqa: F401
                                   load_params, load_run, param_count, restore_train_state,
                                   run_inputs_bidirectional_attention, save_params,
                                   save_train_state)
from specdec_jax.train.step import (TrainState, cross_entropy, is_query_kernel,  # noqa: F401
                                    kl_to_teacher, make_optimizer, make_schedule,
                                    make_train_step, tv_to_teacher)


# ---------------------------------------------------------------------------- dev BLEU

class _DevEval:
  """Greedy dev-set BLEU of the params being trained (dropout off, one compilation).

  With a teacher (distill mode) it also reports how well the model predicts the
  teacher along the teacher's own greedy dev outputs: `dev_greedy_agreement`
  (α of greedy speculative decoding) and `dev_beta_t1` (α at temperature 1).
  """

  def __init__(self, config, processor, split: str, examples: int, data_dir,
               teacher=None, teacher_params=None, suffixes=('en', 'de'),
               input_prefix: str = vocabulary.TRANSLATE_PREFIX,
               inputs_bidirectional_attention: bool = False):
    from specdec_jax.train import evaluation  # pylint: disable=g-import-not-at-top
    self._evaluation = evaluation
    self.model = family.build(config.replace(dropout_rate=0.0))
    self.decode_kwargs = ({} if family_of(config) == 't5' else
                          {'inputs_bidirectional_attention': inputs_bidirectional_attention})
    self.processor = processor
    self.sources, self.references = data_lib.read_parallel(split, data_dir, *suffixes,
                                                           limit=examples)
    self.input_prefix = input_prefix
    self.split = split
    self.teacher, self.teacher_params = teacher, teacher_params
    self.teacher_batches = None
    if teacher is not None:
      inputs = data_lib.encode_inputs(processor, self.sources, input_prefix)
      self.teacher_batches = []
      for idx, decodes in evaluation.decode_batches(teacher, teacher_params, inputs,
                                                    batch_size=100, sort_by_length=False,
                                                    **self.decode_kwargs):
        enc = data_lib.pad_batch([inputs[i] for i in idx], 64)
        self.teacher_batches.append((enc, decodes))

  def __call__(self, params) -> dict:
    t0 = time.time()
    hyps, ids = self._evaluation.translate(self.model, params, self.processor, self.sources,
                                           self.input_prefix, batch_size=100,
                                           **self.decode_kwargs)
    bleu = self._evaluation.corpus_bleu(hyps, self.references)
    out = {'dev_bleu': round(bleu.score, 2), 'dev_split': self.split,
           'dev_sentences': len(hyps),
           'dev_mean_len': round(float(np.mean([len(x) for x in ids])), 2)}
    if self.teacher_batches:
      tot = {'agree': 0.0, 'beta': 0.0, 'positions': 0.0}
      for enc, decodes in self.teacher_batches:
        a = self._evaluation.draft_agreement(self.teacher, self.teacher_params, self.model,
                                             params, enc, decodes, **self.decode_kwargs)
        tot = {k: tot[k] + a[k] for k in tot}
      out['dev_greedy_agreement'] = round(tot['agree'] / tot['positions'], 4)
      out['dev_beta_t1'] = round(tot['beta'] / tot['positions'], 4)
    out['dev_seconds'] = round(time.time() - t0, 1)
    return out


# ---------------------------------------------------------------------------- main loop

@gin_config.configurable
def train(run_dir: str = gin.REQUIRED,
          model_config=gin.REQUIRED,
          mode: str = 'target',
          vocab_path: str = 'specdec_jax/assets/demo_ende/vocab/ende8k.model',
          train_split: str = 'ende/multi30k/train',
          data_dir: str | None = None,
          batch_size: int = 128,
          buckets: Sequence[int] = (32, 48),
          learning_rate: float = 2e-3,
          warmup_steps: int = 200,
          lr_decay: str = 'rsqrt',
          total_steps: int | None = None,
          weight_decay: float = 0.01,
          label_smoothing: float = 0.1,
          kd_weight: float = 0.5,
          tv_weight: float = 0.0,
          teacher_dir: str | None = None,
          max_steps: int = 1_000_000,
          max_minutes: float = 35.0,
          checkpoint_every_steps: int = 100,
          keep_checkpoints: int = 2,
          log_every_steps: int = 20,
          seed: int = 0,
          limit_examples: int | None = None,
          optimizer: str = 'adamw',
          query_lr_scale: float = 1.0,
          targets_path: str | Sequence[str] | None = None,
          truncated_targets: str = 'keep',
          loop_repeats: int = 0,
          subword_samples: int = 0,
          subword_alpha: float = 0.3,
          eval_every_steps: int = 0,
          eval_split: str = 'ende/multi30k/val',
          eval_examples: int = 500,
          init_params_dir: str | None = None,
          unlikelihood_weight: float = 0.0,
          source_suffix: str = 'en',
          target_suffix: str = 'de',
          input_prefix: str = vocabulary.TRANSLATE_PREFIX,
          inputs_bidirectional_attention: bool = False) -> dict:
  """Trains one model; returns a summary dict (also written to `<run_dir>/summary.json`).

  `targets_path` replaces the gold German side by token-id lines (sequence-level
  distillation on a target's greedy or sampled outputs, written by
  `specdec_jax.train.distill_data`); a tuple of such files trains on all of them (each
  source once per file). `truncated_targets` ('keep' | 'drop' | 'gold') handles the lines of
  such a file that reached its decoder's `max_decode_len` (cut-off loops; its
  `.summary.json` says the length): kept (a draft imitates its target), dropped, or replaced
  by the gold target (a new target distilled from another model; `data.load_dataset`);
  `loop_repeats = r >= 2` also treats a line with one token trigram r or more times as
  truncated (a loop that closed before the limit).
  With `eval_every_steps > 0`, the first `eval_examples` sentences of `eval_split`
  are translated greedily every that many steps (and at the end) and their sacreBLEU
  is logged as `dev_bleu` in `train_log.jsonl`.
  `subword_samples = K > 0` (gold data) trains on K sampled SentencePiece segmentations of
  every pair (subword regularisation, `specdec_jax.train.subword`), stored in
  `<run_dir>/subword_segmentations.npz` so a resumed run trains on the same samples.
  `init_params_dir` starts from a finished model's params instead of a random init
  (fine-tuning; a run folder or a folder with `config.json` and T5X checkpoints, such
  as the shipped draft): its config must equal `model_config` (dropout aside), and the
  optimizer state and schedule start fresh. A resumed run ignores it (its train state
  already holds the params). `teacher_dir` takes the same two kinds of folder.
  Another task than EN→DE: the split's files are `<data_dir>/<split>.<source_suffix>` and
  `.<target_suffix>` (`eval_split` too), and `input_prefix` is the task prefix before
  every source (the correction pair: `configs/train/gec_corrector.gin`).
  `model_config` is a `T5Config` (encoder–decoder) or a `DecoderOnlyConfig`
  (`network.TransformerConfig` in gin): a decoder-only model trains on `input ++ target`
  sequences with the loss on the target only (T5X's `DecoderFeatureConverter`), as a
  prefix LM when `inputs_bidirectional_attention` (T5X's `DecoderOnlyModel` argument of the
  same name: bidirectional attention over the input), else as a causal LM.
  """
  start_time = time.time()
  if mode not in ('target', 'distill'):
    raise ValueError(f"train.mode must be 'target' or 'distill', got {mode!r}.")
  for name, weight in (('tv_weight', tv_weight), ('unlikelihood_weight', unlikelihood_weight)):
    if (isinstance(weight, bool) or not isinstance(weight, (int, float))
        or not math.isfinite(weight) or weight < 0):
      raise ValueError(f'train.{name} must be a finite number >= 0, got {weight!r}.')
  subword.check_args(subword_samples, subword_alpha, targets_path)
  if unlikelihood_weight and mode != 'target':
    raise ValueError(f'train.unlikelihood_weight={unlikelihood_weight} applies to '
                     'train.mode="target" only; set it to 0 for mode="distill".')
  if tv_weight and mode != 'distill':
    raise ValueError(f'train.tv_weight={tv_weight} needs train.mode="distill" (it is a '
                     'distance to the teacher); set it to 0 for mode="target".')
  fam = family_of(model_config)  # TypeError for anything but the two configs
  if inputs_bidirectional_attention and fam != 'decoder_only':
    raise ValueError('train.inputs_bidirectional_attention applies to decoder-only models '
                     '(network.TransformerConfig); leave it False for a T5Config.')
  decoder_only = None
  if fam == 'decoder_only':
    decoder_only = 'prefix_lm' if inputs_bidirectional_attention else 'causal'
  seed = sampling.check_seed('train.seed', seed)
  for name, value in (('keep_checkpoints', keep_checkpoints),
                      ('checkpoint_every_steps', checkpoint_every_steps)):
    sampling.check_int(f'train.{name} (at least one resumable train state is kept)'
                       if name == 'keep_checkpoints' else f'train.{name}', value, 1)
  run_dir = pathlib.Path(run_dir)
  if run_dir.exists() and not run_dir.is_dir():
    raise ValueError(f'train.run_dir {str(run_dir)!r} is a file; name a folder.')
  # The folder is made by the first file written (atomic writes make their folder), after
  # every setting, the vocabulary, the data and any teacher were found: a failed start
  # leaves no empty run folder behind.

  processor = vocabulary.load_processor(vocab_path)
  if processor.vocab_size() + vocabulary.DEFAULT_EXTRA_IDS > model_config.vocab_size:
    raise ValueError(f'vocab_size {model_config.vocab_size} < {processor.vocab_size()} pieces '
                     f'+ {vocabulary.DEFAULT_EXTRA_IDS} extra ids.')
  dataset = data_lib.load_dataset(processor, train_split, batch_size, buckets, seed, data_dir,
                                  limit=limit_examples, targets_path=targets_path,
                                  truncated_targets=truncated_targets,
                                  loop_repeats=loop_repeats,
                                  subword_samples=subword_samples, subword_alpha=subword_alpha,
                                  subword_cache=(run_dir / 'subword_segmentations.npz'
                                                 if subword_samples else None),
                                  source_suffix=source_suffix, target_suffix=target_suffix,
                                  input_prefix=input_prefix, decoder_only=decoder_only)

  model = family.build(model_config)
  teacher, teacher_params = None, None
  if mode == 'distill':
    if not teacher_dir:
      raise ValueError('train.mode="distill" needs train.teacher_dir (a finished target run).')
    teacher_config, teacher_params = load_run(teacher_dir)
    teacher_config = teacher_config.replace(dropout_rate=0.0)
    teacher = family.build(teacher_config)
    if teacher_config.vocab_size != model_config.vocab_size:
      raise ValueError('teacher and student vocab_size differ.')
    if family_of(teacher_config) != fam:
      raise ValueError(f'train.teacher_dir holds a {family_of(teacher_config)} model but the '
                       f'student is {fam}: distill within one model family (they share the '
                       'batch features).')
    teacher_bidirectional = run_inputs_bidirectional_attention(teacher_dir)
    if (fam == 'decoder_only' and teacher_bidirectional is not None
        and teacher_bidirectional != bool(inputs_bidirectional_attention)):
      raise ValueError(
          f'train.teacher_dir={teacher_dir!r} was trained with inputs_bidirectional_attention='
          f'{teacher_bidirectional} but train.inputs_bidirectional_attention='
          f'{bool(inputs_bidirectional_attention)}: the teacher would see prompts with a mask '
          'it was not trained on; set the student\'s to the teacher\'s.')

  rng = jax.random.PRNGKey(seed)
  init_rng, dropout_rng = jax.random.split(rng)
  params = family.init_params(model_config, init_rng)
  schedule = make_schedule(learning_rate, warmup_steps, lr_decay, total_steps)
  opt = make_optimizer(schedule, weight_decay, name=optimizer, query_lr_scale=query_lr_scale)
  state = TrainState(step=jnp.array(0, jnp.int32), params=params,
                     opt_state=opt.init(params))
  position = {'epoch': 0, 'batch': 0}
  restored = restore_train_state(run_dir, state)
  if restored is None and init_params_dir:  # a resumed run's train state holds its params
    init_config, init_params = load_run(init_params_dir)
    if init_config.replace(dropout_rate=0.0) != model_config.replace(dropout_rate=0.0):
      raise ValueError(f'train.init_params_dir={init_params_dir!r} holds a model of another '
                       'config than train.model_config; fine-tune it with its own config.')
    params = jax.tree_util.tree_map(jnp.asarray, init_params)
    family.check_params(params, model_config)
    state = TrainState(step=jnp.array(0, jnp.int32), params=params, opt_state=opt.init(params))
  prior_s = 0  # training seconds of earlier sessions of this run (kept in the train states)
  if restored is not None:
    state, position = restored
    prior_s = position.pop('seconds_trained', 0)
    try:
      family.check_params(state.params, model_config)
    except ValueError as e:
      raise ValueError(f'train.run_dir {str(run_dir)!r} holds a run of another model config '
                       f'({e}); use a new run_dir or the config it was started with.') from e
    print(f'Resumed from step {int(state.step)} (epoch {position["epoch"]}, '
          f'batch {position["batch"]}).', flush=True)

  def checkpoint():
    save_train_state(run_dir, state, dict(
        position, seconds_trained=int(prior_s + time.time() - start_time)), keep_checkpoints)
  n_params = param_count(state.params)
  print(f'mode={mode} params={n_params:,} steps/epoch={dataset.steps_per_epoch} '
        f'examples={len(dataset.inputs)}', flush=True)

  train_step = make_train_step(model, opt, mode=mode, label_smoothing=label_smoothing,
                               kd_weight=kd_weight, tv_weight=tv_weight, teacher=teacher,
                               unlikelihood_weight=unlikelihood_weight)
  dev_eval = None
  if eval_every_steps:
    dev_eval = _DevEval(model_config, processor, eval_split, eval_examples, data_dir,
                        teacher, teacher_params,
                        (source_suffix, target_suffix), input_prefix,
                        inputs_bidirectional_attention)
  atomic.write_text(run_dir / 'config.json', json.dumps(config_to_dict(model_config), indent=2))
  try:
    atomic.write_text(run_dir / 'operative_config.gin', gin.operative_config_str())
  except Exception:  # pylint: disable=broad-except  (gin not configured: library use)
    pass
  log_file = open(run_dir / 'train_log.jsonl', 'a')

  def evaluate(step):
    if dev_eval is None:
      return
    record = {'step': step, 'epoch': position['epoch'],
              'minutes': (time.time() - start_time) / 60, **dev_eval(state.params)}
    log_file.write(jsonio.dumps(record) + '\n')
    log_file.flush()
    tqdm.write(json.dumps(record), file=sys.stdout)

  deadline = start_time + 60.0 * max_minutes
  window_tokens, window_start = 0.0, time.time()
  total_tokens = 0.0
  last = {}
  stop_reason = 'max_steps'
  bar = tqdm(total=max_steps, initial=int(state.step), dynamic_ncols=True, mininterval=5.0,
             file=flags.progress_file())
  # From here on, the configuration has been checked: an error is a failure of the run,
  # not bad input, and keeps its traceback (`flags.run_cli` treats ValueError and
  # FileNotFoundError as configuration errors).
  try:
    done = False
    while not done:
      for batch in dataset.batches(position['epoch'], position['batch']):
        if int(state.step) >= max_steps:
          done, stop_reason = True, 'max_steps'
          break
        if time.time() >= deadline:
          done, stop_reason = True, 'max_minutes'
          break
        state, metrics = train_step(state, batch, dropout_rng, teacher_params)
        position['batch'] += 1
        step = int(state.step)
        metrics = jax.device_get(metrics)
        window_tokens += float(metrics['tokens'])
        total_tokens += float(metrics['tokens'])
        elapsed = time.time() - window_start
        tok_s = window_tokens / max(elapsed, 1e-6)
        last = {k: float(v) for k, v in metrics.items()}
        bar.update(1)
        bar.set_postfix(loss=f'{last["loss"]:.3f}', tok_s=f'{tok_s:.0f}', ep=position['epoch'])
        if step % log_every_steps == 0:
          record = {'step': step, 'epoch': position['epoch'], 'lr': float(schedule(step - 1)),
                    'tokens_per_s': tok_s, 'minutes': (time.time() - start_time) / 60, **last}
          log_file.write(jsonio.dumps(record) + '\n')
          log_file.flush()
          tqdm.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                 for k, v in record.items()}), file=sys.stdout)
          sys.stdout.flush()
          window_tokens, window_start = 0.0, time.time()
        if step % checkpoint_every_steps == 0:
          checkpoint()
        if eval_every_steps and step % eval_every_steps == 0:
          evaluate(step)
      else:
        position = {'epoch': position['epoch'] + 1, 'batch': 0}
    bar.close()
    checkpoint()
    if eval_every_steps and int(state.step) % eval_every_steps:
      evaluate(int(state.step))
    save_params(state.params, run_dir / 'params.msgpack')
  except (ValueError, FileNotFoundError) as e:
    raise RuntimeError(f'training failed at step {int(state.step)}: {e}') from e
  summary = {'mode': mode, 'steps': int(state.step), 'epoch': position['epoch'],
             'batch_in_epoch': position['batch'], 'params': n_params,
             'minutes_this_session': (time.time() - start_time) / 60, 'stop_reason': stop_reason,
             'last_metrics': last, 'config': config_to_dict(model_config),
             'init_params_dir': init_params_dir}
  if fam == 'decoder_only':
    summary['inputs_bidirectional_attention'] = bool(inputs_bidirectional_attention)
  summary['minutes_previous_sessions'] = prior_s / 60
  summary['minutes_total'] = summary['minutes_this_session'] + prior_s / 60
  atomic.write_text(run_dir / 'summary.json', jsonio.dumps(summary, indent=2))
  print(jsonio.dumps(summary), flush=True)
  return summary


def main(argv: Sequence[str] | None = None) -> int:
  """Command-line entry point (`flags.run_cli`): 0 done, 2 a configuration or input error
  (a missing gin file, an unknown parameter, an unquoted string, a bad setting, a missing
  data file), 130 interrupted (the checkpoints written so far are kept: rerun the same
  command to resume)."""
  f = flags.parse_gin_flags(
      sys.argv[1:] if argv is None else argv, 'python -m specdec_jax.train',
      'Train a T5 model (target or distill mode), gin-configured.',
      '--gin.train.max_minutes=35',
      examples=('python -m specdec_jax.train --gin_file=configs/train/target_ende_v3.gin',
                'python -m specdec_jax.train --gin_file=configs/train/draft_ende_v3_qls.gin '
                "--gin.train.max_minutes=10 --gin.train.run_dir=\"'runs/draft_try'\""),
      parameters=flags.parameters_help(train, 'train'))
  return flags.run_cli(
      f, 'specdec_jax.train',
      parse=lambda: flags.parse_gin(f.gin_files, f.bindings, f.search_paths),
      configure=lambda: train(),  # pylint: disable=unnecessary-lambda
      config_errors=(ValueError, FileNotFoundError),
      interrupted='the checkpoints written so far are kept; rerun the same command to resume',
      hint=' (rerun with --debug for the traceback)')


if __name__ == '__main__':
  sys.exit(main())
