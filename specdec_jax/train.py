r"""Gin-configured training of T5 1.1 models on EN→DE text: `target` and `distill` modes.

  python -m specdec_jax.train --gin_file=configs/train/target_ende.gin \
      [--gin_file=...] [--gin.train.max_minutes=35] [--gin.train.run_dir="'runs/x'"]

Modes (`train.mode`):
  target   cross-entropy on the gold German tokens (label smoothing `label_smoothing`).
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

Everything runs under `run_dir`: `config.json` (the T5Config), `train_state_<step>.msgpack`
(params, optimizer state and data position, written every `checkpoint_every_steps`, the
last `keep_checkpoints` kept; a restarted run resumes from the newest), `params.msgpack`
(final float32 params, flax msgpack) and `train_log.jsonl`. Training stops after
`max_steps` steps or `max_minutes` minutes of wall time (compilation included),
whichever comes first.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import sys
import time
from typing import Any, Sequence

import flax
import gin
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from specdec_jax import data as data_lib
from specdec_jax import flags
# Registers T5X's gin names (network.T5Config, ...), so T5X-style bindings work here.
from specdec_jax import gin_utils  # noqa: F401  pylint: disable=unused-import
from specdec_jax import vocabulary
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config


# ---------------------------------------------------------------------------- config io

def config_to_dict(config: T5Config) -> dict[str, Any]:
  d = dataclasses.asdict(config)
  d['dtype'] = jnp.dtype(config.dtype).name
  d['mlp_activations'] = list(config.mlp_activations)
  return d


def config_from_dict(d: dict[str, Any]) -> T5Config:
  d = dict(d)
  d['dtype'] = jnp.dtype(d.get('dtype', 'float32')).type
  d['mlp_activations'] = tuple(d['mlp_activations'])
  return T5Config(**d)


def param_count(params) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


def save_params(params, path: str | os.PathLike) -> None:
  path = pathlib.Path(path)
  tmp = path.with_name(path.name + '.tmp')
  tmp.write_bytes(flax.serialization.msgpack_serialize(jax.device_get(params)))
  os.replace(tmp, path)


def load_params(path: str | os.PathLike):
  return flax.serialization.msgpack_restore(pathlib.Path(path).read_bytes())


def load_run(run_dir: str | os.PathLike):
  """(T5Config, float32 params) of a finished run dir (`config.json`, `params.msgpack`)."""
  run_dir = pathlib.Path(run_dir)
  config = config_from_dict(json.loads((run_dir / 'config.json').read_text()))
  return config, load_params(run_dir / 'params.msgpack')


# ---------------------------------------------------------------------------- losses

def cross_entropy(logits, targets, weights, label_smoothing: float = 0.0):
  """Summed token cross-entropy (with label smoothing) and summed plain NLL, in float32."""
  vocab = logits.shape[-1]
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  if label_smoothing > 0:
    smooth = -jnp.mean(logp, axis=-1)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
  else:
    loss = nll
  return jnp.sum(loss * weights), jnp.sum(nll * weights)


def kl_to_teacher(student_logits, teacher_logits, weights):
  """Summed token KL(p_teacher ‖ q_student) at temperature 1."""
  logq = jax.nn.log_softmax(student_logits.astype(jnp.float32))
  logp = jax.nn.log_softmax(teacher_logits.astype(jnp.float32))
  kl = jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)
  return jnp.sum(kl * weights)


# ---------------------------------------------------------------------------- schedule

def make_schedule(learning_rate: float, warmup_steps: int, decay: str = 'rsqrt',
                  total_steps: int | None = None):
  """Linear warm-up to `learning_rate`, then rsqrt decay (or cosine to `total_steps`, or constant)."""
  def schedule(step):
    step = jnp.asarray(step, jnp.float32) + 1.0
    warm = jnp.minimum(1.0, step / max(warmup_steps, 1))
    if decay == 'rsqrt':
      factor = jnp.sqrt(max(warmup_steps, 1) / jnp.maximum(step, max(warmup_steps, 1)))
    elif decay == 'cosine':
      frac = jnp.clip((step - warmup_steps) / max(total_steps - warmup_steps, 1), 0.0, 1.0)
      factor = 0.1 + 0.9 * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))
    elif decay == 'constant':
      factor = 1.0
    else:
      raise ValueError(f'Unknown decay {decay!r}; use rsqrt, cosine or constant.')
    return learning_rate * warm * factor
  return schedule


def make_optimizer(schedule, weight_decay: float = 0.01, clip_norm: float = 1.0):
  decay_mask = lambda params: jax.tree_util.tree_map(lambda x: x.ndim > 1, params)
  return optax.chain(
      optax.clip_by_global_norm(clip_norm),
      optax.adamw(schedule, b1=0.9, b2=0.98, eps=1e-9, weight_decay=weight_decay,
                  mask=decay_mask))


# ---------------------------------------------------------------------------- steps

@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def make_train_step(model, optimizer, *, mode: str, label_smoothing: float,
                    kd_weight: float = 0.5, teacher=None):
  """Jitted `(state, batch, rng, teacher_params) -> (state, metrics)`; one compile per shape."""

  def loss_fn(params, batch, rng, teacher_params):
    logits = model.apply({'params': params}, batch['encoder_input_tokens'],
                         batch['decoder_input_tokens'], batch['decoder_target_tokens'],
                         enable_dropout=True, rngs={'dropout': rng})
    weights = batch['decoder_loss_weights']
    tokens = jnp.maximum(jnp.sum(weights), 1.0)
    ce, nll = cross_entropy(logits, batch['decoder_target_tokens'], weights, label_smoothing)
    metrics = {'nll': nll / tokens, 'tokens': jnp.sum(weights)}
    if mode == 'distill':
      teacher_logits = jax.lax.stop_gradient(teacher.apply(
          {'params': teacher_params}, batch['encoder_input_tokens'],
          batch['decoder_input_tokens'], batch['decoder_target_tokens'],
          enable_dropout=False))
      kl = kl_to_teacher(logits, teacher_logits, weights)
      loss = ((1.0 - kd_weight) * ce + kd_weight * kl) / tokens
      metrics['kl'] = kl / tokens
      metrics['teacher_agree'] = jnp.sum(
          (jnp.argmax(logits, -1) == jnp.argmax(teacher_logits, -1)) * weights) / tokens
    else:
      loss = ce / tokens
    metrics['loss'] = loss
    return loss, metrics

  def step_fn(state: TrainState, batch, rng, teacher_params):
    rng = jax.random.fold_in(rng, state.step)
    grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, batch, rng, teacher_params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics['grad_norm'] = optax.tree.norm(grads)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return jax.jit(step_fn, donate_argnums=(0,))


# ---------------------------------------------------------------------------- checkpoints

def _checkpoints(run_dir: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
  found = []
  for p in run_dir.glob('train_state_*.msgpack'):
    try:
      found.append((int(p.stem.split('_')[-1]), p))
    except ValueError:
      pass
  return sorted(found)


def save_train_state(run_dir: pathlib.Path, state: TrainState, position: dict, keep: int):
  step = int(state.step)
  blob = {'state': flax.serialization.to_state_dict(jax.device_get(state)), 'position': position}
  path = run_dir / f'train_state_{step}.msgpack'
  tmp = path.with_name(path.name + '.tmp')
  tmp.write_bytes(flax.serialization.msgpack_serialize(blob))
  os.replace(tmp, path)
  for _, old in _checkpoints(run_dir)[:-keep]:
    old.unlink(missing_ok=True)


def restore_train_state(run_dir: pathlib.Path, template: TrainState):
  ckpts = _checkpoints(run_dir)
  if not ckpts:
    return None
  blob = flax.serialization.msgpack_restore(ckpts[-1][1].read_bytes())
  state = flax.serialization.from_state_dict(template, blob['state'])
  return state, {k: int(v) for k, v in blob['position'].items()}


# ---------------------------------------------------------------------------- main loop

@gin.configurable(denylist=['overrides'])
def train(run_dir: str = gin.REQUIRED,
          model_config: T5Config = gin.REQUIRED,
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
          teacher_dir: str | None = None,
          max_steps: int = 1_000_000,
          max_minutes: float = 35.0,
          checkpoint_every_steps: int = 100,
          keep_checkpoints: int = 2,
          log_every_steps: int = 20,
          seed: int = 0,
          limit_examples: int | None = None,
          overrides: dict | None = None) -> dict:
  """Trains one model; returns a summary dict (also written to `<run_dir>/summary.json`)."""
  start_time = time.time()
  if mode not in ('target', 'distill'):
    raise ValueError(f"train.mode must be 'target' or 'distill', got {mode!r}.")
  run_dir = pathlib.Path(run_dir)
  run_dir.mkdir(parents=True, exist_ok=True)
  (run_dir / 'config.json').write_text(json.dumps(config_to_dict(model_config), indent=2))
  try:
    (run_dir / 'operative_config.gin').write_text(gin.operative_config_str())
  except Exception:  # pylint: disable=broad-except
    pass

  processor = vocabulary.load_processor(vocab_path)
  if processor.vocab_size() + vocabulary.DEFAULT_EXTRA_IDS > model_config.vocab_size:
    raise ValueError(f'vocab_size {model_config.vocab_size} < {processor.vocab_size()} pieces '
                     f'+ {vocabulary.DEFAULT_EXTRA_IDS} extra ids.')
  dataset = data_lib.load_dataset(processor, train_split, batch_size, buckets, seed, data_dir,
                                  limit=limit_examples)

  model = t5.Transformer(model_config)
  teacher, teacher_params = None, None
  if mode == 'distill':
    if not teacher_dir:
      raise ValueError('train.mode="distill" needs train.teacher_dir (a finished target run).')
    teacher_config, teacher_params = load_run(teacher_dir)
    teacher_config = teacher_config.replace(dropout_rate=0.0)
    teacher = t5.Transformer(teacher_config)
    teacher_params = jax.device_put(teacher_params)
    if teacher_config.vocab_size != model_config.vocab_size:
      raise ValueError('teacher and student vocab_size differ.')

  rng = jax.random.PRNGKey(seed)
  init_rng, dropout_rng = jax.random.split(rng)
  params = t5.init_params(model_config, init_rng)
  schedule = make_schedule(learning_rate, warmup_steps, lr_decay, total_steps)
  optimizer = make_optimizer(schedule, weight_decay)
  state = TrainState(step=jnp.array(0, jnp.int32), params=params,
                     opt_state=optimizer.init(params))
  position = {'epoch': 0, 'batch': 0}
  restored = restore_train_state(run_dir, state)
  if restored is not None:
    state, position = restored
    print(f'Resumed from step {int(state.step)} (epoch {position["epoch"]}, '
          f'batch {position["batch"]}).', flush=True)
  n_params = param_count(state.params)
  print(f'mode={mode} params={n_params:,} steps/epoch={dataset.steps_per_epoch} '
        f'examples={len(dataset.inputs)}', flush=True)

  train_step = make_train_step(model, optimizer, mode=mode, label_smoothing=label_smoothing,
                               kd_weight=kd_weight, teacher=teacher)
  log_file = open(run_dir / 'train_log.jsonl', 'a')
  deadline = start_time + 60.0 * max_minutes
  window_tokens, window_start = 0.0, time.time()
  total_tokens = 0.0
  last = {}
  stop_reason = 'max_steps'
  bar = tqdm(total=max_steps, initial=int(state.step), dynamic_ncols=True, mininterval=5.0,
             file=sys.stdout)
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
        log_file.write(json.dumps(record) + '\n')
        log_file.flush()
        tqdm.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                               for k, v in record.items()}), file=sys.stdout)
        sys.stdout.flush()
        window_tokens, window_start = 0.0, time.time()
      if step % checkpoint_every_steps == 0:
        save_train_state(run_dir, state, position, keep_checkpoints)
    else:
      position = {'epoch': position['epoch'] + 1, 'batch': 0}
  bar.close()
  save_train_state(run_dir, state, position, keep_checkpoints)
  save_params(state.params, run_dir / 'params.msgpack')
  summary = {'mode': mode, 'steps': int(state.step), 'epoch': position['epoch'],
             'batch_in_epoch': position['batch'], 'params': n_params,
             'minutes_this_session': (time.time() - start_time) / 60, 'stop_reason': stop_reason,
             'last_metrics': last, 'config': config_to_dict(model_config)}
  prev = run_dir / 'summary.json'
  if prev.exists() and restored is not None:
    summary['minutes_previous_sessions'] = (json.loads(prev.read_text()).get('minutes_total', 0))
  summary['minutes_total'] = summary['minutes_this_session'] + summary.get(
      'minutes_previous_sessions', 0)
  prev.write_text(json.dumps(summary, indent=2))
  print(json.dumps(summary), flush=True)
  return summary


def main(argv: Sequence[str] | None = None):
  f = flags.parse_gin_flags(sys.argv[1:] if argv is None else argv,
                            'python -m specdec_jax.train',
                            'Train a T5 model (target or distill mode).',
                            "--gin.train.max_minutes=35")
  for path in ['.', *f.search_paths]:
    gin.add_config_file_search_path(path)
  gin.parse_config_files_and_bindings(f.gin_files, f.bindings)
  train()


if __name__ == '__main__':
  main()
