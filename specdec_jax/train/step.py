"""One training step: losses, learning-rate schedule, optimizer and the jitted update.

`make_train_step` builds `(state, batch, rng, teacher_params) -> (state, metrics)` for
the two modes of `specdec_jax.train.job`: `target` (cross-entropy with label smoothing) and
`distill` ((1 − kd_weight) · CE + kd_weight · KL(p_teacher ‖ q_student) + tv_weight · TV(p, q),
token level; TV(p, q) = 1 − Σ min(p, q) is one minus the acceptance rate α of sampled
speculative decoding at that position, Leviathan et al. 2023, Def. 3.1 / Cor. 3.6).
In `target` mode `unlikelihood_weight > 0` adds token-level unlikelihood (Welleck et al. 2020,
"Neural Text Generation with Unlikelihood Training", Sec. 4, eq. 4): a penalty on the
probability of the tokens already in the target prefix, against repetition loops.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from specdec_jax.models import family


# ---------------------------------------------------------------------------- losses

def cross_entropy(logits, targets, weights, label_smoothing: float = 0.0):
  """Summed token cross-entropy (with label smoothing) and summed plain NLL, in float32."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  if label_smoothing > 0:
    smooth = -jnp.mean(logp, axis=-1)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
  else:
    loss = nll
  return jnp.sum(loss * weights), jnp.sum(nll * weights)


def unlikelihood(logits, targets, weights):
  """Summed token-level unlikelihood loss (Welleck et al. 2020, Sec. 4, eq. 4).

  At position t the negative candidates are the distinct tokens of the target prefix
  y_<t other than y_t, C_t = {y_s : s < t, weights[s] > 0} \\ {y_t}; the loss is
  Σ_t weights[t] · Σ_{c ∈ C_t} −log(1 − p(c | y_<t)), each candidate counted once however
  often it occurs in the prefix. Logits `[batch, length, vocab]` (any float dtype, computed in
  float32), targets `[batch, length]` int32, weights `[batch, length]`; returns a float32
  scalar. Memory: one `[batch, length, length]` gather.
  """
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  length = targets.shape[-1]
  # logp of every prefix token at every position: cand[b, t, s] = log p(y_s | y_<t).
  index = jnp.broadcast_to(targets[:, None, :], targets.shape[:1] + (length, length))
  cand = jnp.take_along_axis(logp, index, axis=-1)
  same = targets[:, :, None] == targets[:, None, :]            # [b, i, j]: y_i == y_j
  earlier = jnp.tril(jnp.ones((length, length), bool), k=-1)   # [i, j]: j < i
  valid = weights > 0
  # first[b, s]: y_s does not occur at a valid s' < s (same[b, s', s] with earlier[s, s']).
  first = ~jnp.any(same & earlier.T[None] & valid[:, :, None], axis=1)
  mask = (earlier[None] & first[:, None, :] & valid[:, None, :]
          & ~same)                                              # s < t, first, y_s != y_t
  penalty = -jnp.log(jnp.clip(1.0 - jnp.exp(cand), 1e-5, 1.0))
  return jnp.sum(jnp.sum(penalty * mask, axis=-1) * weights)


def _token_kl_tv(student_logits, teacher_logits):
  """Per-token KL(p ‖ q) and TV(p, q) from one log-softmax of each side (float32)."""
  logq = jax.nn.log_softmax(student_logits.astype(jnp.float32))
  logp = jax.nn.log_softmax(teacher_logits.astype(jnp.float32))
  p = jnp.exp(logp)
  kl = jnp.sum(p * (logp - logq), axis=-1)
  tv = 0.5 * jnp.sum(jnp.abs(p - jnp.exp(logq)), axis=-1)
  return kl, tv


def kl_to_teacher(student_logits, teacher_logits, weights):
  """Summed token KL(p_teacher ‖ q_student) at temperature 1."""
  return jnp.sum(_token_kl_tv(student_logits, teacher_logits)[0] * weights)


def tv_to_teacher(student_logits, teacher_logits, weights):
  """Summed token total-variation distance ½ Σ_x |p(x) − q(x)| = 1 − Σ_x min(p, q).

  At temperature 1 this is one minus the per-position acceptance rate of speculative sampling
  (Leviathan et al. 2023, Def. 3.1), so minimising it is the direct objective for α
  (DistillSpec, Zhou et al. 2024, uses it as one of its divergences). Logits `[..., vocab]`
  (any float dtype, computed in float32), weights `[...]`; returns a float32 scalar.
  """
  return jnp.sum(_token_kl_tv(student_logits, teacher_logits)[1] * weights)


# ---------------------------------------------------------------------------- schedule

def make_schedule(learning_rate: float, warmup_steps: int, decay: str = 'rsqrt',
                  total_steps: int | None = None):
  """Linear warm-up to `learning_rate`, then rsqrt decay (or cosine to 10 % of the peak at
  `total_steps`, or constant).

  Raises:
    ValueError: an unknown `decay`, or 'cosine' without `total_steps` (checked here, before
      the schedule is traced).
  """
  if decay not in ('rsqrt', 'cosine', 'constant'):
    raise ValueError(f'train.lr_decay: unknown decay {decay!r}; use rsqrt, cosine or constant.')
  if decay == 'cosine' and not (isinstance(total_steps, int) and total_steps > 0):
    raise ValueError(f"train.lr_decay='cosine' needs train.total_steps (the step the decay "
                     f'ends at), got {total_steps!r}.')

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


def make_optimizer(schedule, weight_decay: float = 0.01, clip_norm: float = 1.0,
                   name: str = 'adamw', query_lr_scale: float = 1.0):
  """The optimizer: `adamw` (β2 0.98, global-norm clipping) or `adafactor`.

  `adafactor` is T5's own optimizer as T5X configures it (factored second moments,
  decay 0.8, update clipping 1.0, updates scaled by each parameter's RMS —
  `multiply_by_parameter_scale`), which suits T5's initialisation (no 1/√d in
  attention: the query kernel starts small, and a parameter-relative step keeps its
  updates in proportion). `learning_rate` is then a relative step size.

  `query_lr_scale` (AdamW only) multiplies the step of every attention `query/kernel`.
  T5 folds the attention's 1/√head_dim into the query's initialisation (its init is
  √head_dim times smaller than the key's), but AdamW's step does not depend on a
  parameter's scale, so at one learning rate the query moves √head_dim times faster
  relative to its size than in a Transformer with scaled attention. With
  `query_lr_scale = 1/√head_dim` AdamW takes the steps of a scaled-attention Transformer
  under the reparametrisation q = q'/√head_dim (up to the global-norm clipping, which
  sees the query gradients at the other scale, and Adam's ε). Measured on the v2 demo
  target (emb 384, head_dim 64, lr 7e-4, scale 1): its query kernels grew 3× from their
  init while every other kernel ended within 0.9–1.3× of its init scale; at lr 1.5e-3
  that run diverged.

  Raises:
    ValueError: an unknown `name`, or `query_lr_scale` not > 0 (or not 1 with adafactor).
  """
  if not (isinstance(query_lr_scale, (int, float)) and query_lr_scale > 0):
    raise ValueError(f'train.query_lr_scale must be a number > 0, got {query_lr_scale!r}.')
  decay_mask = lambda params: jax.tree_util.tree_map(lambda x: x.ndim > 1, params)
  if name == 'adamw':
    parts = [optax.clip_by_global_norm(clip_norm),
             optax.adamw(schedule, b1=0.9, b2=0.98, eps=1e-9, weight_decay=weight_decay,
                         mask=decay_mask)]
    if query_lr_scale != 1.0:
      parts.append(optax.stateless(lambda updates, params=None: scale_query_updates(
          updates, query_lr_scale)))
    return optax.chain(*parts)
  if name == 'adafactor':
    if query_lr_scale != 1.0:
      raise ValueError('train.query_lr_scale applies to adamw only (adafactor already scales '
                       'each step by its parameter\'s RMS); leave it at 1.0.')
    return optax.adafactor(schedule, decay_rate=0.8, multiply_by_parameter_scale=True,
                           clipping_threshold=1.0, weight_decay_rate=weight_decay or None,
                           weight_decay_mask=decay_mask if weight_decay else None)
  raise ValueError(f"train.optimizer must be 'adamw' or 'adafactor', got {name!r}.")


def is_query_kernel(path) -> bool:
  """Whether a param-tree path (`jax.tree_util` key path) is an attention `query/kernel`."""
  names = [getattr(k, 'key', getattr(k, 'name', None)) for k in path]
  return len(names) >= 2 and names[-2:] == ['query', 'kernel']


def scale_query_updates(updates, scale: float):
  """`updates` with every attention `query/kernel` leaf multiplied by `scale`."""
  return jax.tree_util.tree_map_with_path(
      lambda path, u: u * scale if is_query_kernel(path) else u, updates)


# ---------------------------------------------------------------------------- steps

@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def make_train_step(model, optimizer, *, mode: str, label_smoothing: float,
                    kd_weight: float = 0.5, tv_weight: float = 0.0, teacher=None,
                    unlikelihood_weight: float = 0.0):
  """Jitted `(state, batch, rng, teacher_params) -> (state, metrics)`; one compile per shape.

  `model` (and `teacher`) may be of either family (`models.family.forward`): a batch holds
  the T5X features of that family (`train.data.make_features` /
  `make_prefix_lm_features`).

  In `target` mode the loss per token is CE + unlikelihood_weight · UL (`unlikelihood`; the
  metrics hold `ul` when the weight is > 0).

  In `distill` mode the loss per token is (1 − kd_weight) · CE + kd_weight · KL + tv_weight ·
  TV, and the metrics also hold `kl`, `tv` (mean TV to the teacher: 1 − `tv` is the training
  batch's Σ min(p, q)) and `teacher_agree`.
  """

  def loss_fn(params, batch, rng, teacher_params):
    logits = family.forward(model, params, batch, enable_dropout=True, rngs={'dropout': rng})
    weights = batch['decoder_loss_weights']
    tokens = jnp.maximum(jnp.sum(weights), 1.0)
    ce, nll = cross_entropy(logits, batch['decoder_target_tokens'], weights, label_smoothing)
    metrics = {'nll': nll / tokens, 'tokens': jnp.sum(weights)}
    if mode == 'distill':
      teacher_logits = jax.lax.stop_gradient(family.forward(
          teacher, teacher_params, batch, enable_dropout=False))
      kl, tv = (jnp.sum(t * weights) for t in _token_kl_tv(logits, teacher_logits))
      loss = ((1.0 - kd_weight) * ce + kd_weight * kl + tv_weight * tv) / tokens
      metrics['kl'] = kl / tokens
      metrics['tv'] = tv / tokens
      metrics['teacher_agree'] = jnp.sum(
          (jnp.argmax(logits, -1) == jnp.argmax(teacher_logits, -1)) * weights) / tokens
    else:
      loss = ce / tokens
      if unlikelihood_weight:
        ul = unlikelihood(logits, batch['decoder_target_tokens'], weights) / tokens
        metrics['ul'] = ul
        loss = loss + unlikelihood_weight * ul
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
