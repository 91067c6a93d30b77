"""Draft-length policies: how many tokens each row drafts in the next round (γ per row).

A policy is a static, hashable description (it is a static argument of the compiled
loop); its decisions are made inside the `lax.while_loop`, per row, from that row's
own history, within [1, γ_max]:

* `constant` — γ_max every round (the paper's fixed γ; the default).
* `heuristic` — Hugging Face's schedule for assisted generation: start at
  `gamma_init`, +2 after a round whose drafts were all accepted, −1 otherwise.
* `confidence` — draft up to γ_max but stop after the first draft token whose draft
  distribution's top probability is below `threshold` (SpecDec++ / DISCO style);
  that token is still proposed.
* `optimal` — the γ that maximises the paper's expected speedup (Theorem 3.8 with
  the verify cost, E(α̂, γ) / (γc + v(γ) + a)) for the row's running estimate α̂ of
  the acceptance rate, with the measured costs `c`, `v` and `a` (units of one target
  step). α̂ = (Σβ + prior_alpha · prior_weight) / (scored positions + prior_weight); the
  first round uses the prior alone.

Exactness does not depend on the policy: a round's draft length is a function of the
row's past (accepted tokens, statistics) and, for `confidence`, of the draft's
distributions at positions whose prefix is drafted — never of the sampled token
being judged — so each position is an ordinary speculative step for its prefix.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax.numpy as jnp

POLICIES = ('constant', 'heuristic', 'confidence', 'optimal')


@dataclasses.dataclass(frozen=True)
class DraftPolicy:
  """A draft-length policy (see the module docstring).

  Attributes:
    kind: one of `POLICIES`.
    gamma_init: `heuristic`: the first round's draft length (default γ_max).
    threshold: `confidence`: stop after a draft whose top probability is below this.
    c: `optimal`: cost of one draft step, in target steps.
    v: `optimal`: cost of a verify call of γ+1 tokens for γ = 1 … γ_max, in target
      steps (a tuple; missing entries are extrapolated linearly, empty = all 1).
    a: `optimal`: the loop's own work per round, in target steps.
    prior_alpha, prior_weight: `optimal`: the prior of the running α estimate.
  """
  kind: str = 'constant'
  gamma_init: Optional[int] = None
  threshold: float = 0.5
  c: float = 0.05
  v: tuple = ()
  a: float = 0.0
  prior_alpha: float = 0.7
  prior_weight: float = 4.0

  def __post_init__(self):
    if self.kind not in POLICIES:
      raise ValueError(f'draft policy kind must be one of {POLICIES}, got {self.kind!r}.')
    if not 0.0 <= self.threshold <= 1.0:
      raise ValueError(f'draft policy threshold must be in [0, 1], got {self.threshold!r}.')
    if self.gamma_init is not None and (not isinstance(self.gamma_init, int)
                                        or self.gamma_init < 1):
      raise ValueError(f'draft policy gamma_init must be None or an int >= 1, got '
                       f'{self.gamma_init!r}.')
    for name in ('c', 'a', 'prior_weight'):
      if not getattr(self, name) >= 0:
        raise ValueError(f'draft policy {name} must be >= 0, got {getattr(self, name)!r}.')
    if not 0.0 <= self.prior_alpha <= 1.0:
      raise ValueError(f'draft policy prior_alpha must be in [0, 1], got {self.prior_alpha!r}.')
    object.__setattr__(self, 'v', tuple(float(x) for x in self.v))

  @property
  def adaptive(self) -> bool:
    """Whether the draft length can differ from γ_max (the loop then drafts and
    verifies only what is needed)."""
    return self.kind != 'constant'

  def verify_costs(self, gamma_max: int) -> list[float]:
    """v(γ) for γ = 1 … γ_max (extrapolated from the given entries)."""
    v = list(self.v) or [1.0]
    while len(v) < gamma_max:
      step = v[-1] - v[-2] if len(v) > 1 else 0.0
      v.append(v[-1] + step)
    return v[:gamma_max]


def as_policy(policy) -> DraftPolicy:
  """A `DraftPolicy` from a policy, a kind name, or None (constant)."""
  if policy is None:
    return DraftPolicy()
  if isinstance(policy, DraftPolicy):
    return policy
  if isinstance(policy, str):
    return DraftPolicy(kind=policy)
  raise ValueError(f'draft_policy must be a DraftPolicy, one of {POLICIES} or None, got '
                   f'{policy!r}.')


def initial_budget(policy: DraftPolicy, gamma_max: int, batch: int):
  """int32 `[batch]`: the first round's draft length per row."""
  g = gamma_max
  if policy.kind == 'heuristic' and policy.gamma_init is not None:
    g = min(policy.gamma_init, gamma_max)
  if policy.kind == 'optimal':  # the optimum for the prior α alone (nothing scored yet)
    zeros = jnp.zeros((batch,), jnp.float32)
    return next_budget(policy, gamma_max, jnp.full((batch,), g, jnp.int32), zeros, zeros,
                       zeros, zeros)
  return jnp.full((batch,), g, jnp.int32)


def next_budget(policy: DraftPolicy, gamma_max: int, budget, n_drafted, n_accepted,
                alpha_sum, alpha_count):
  """int32 `[batch]`: next round's draft length per row, from this round's outcome.

  Args:
    budget: `[batch]` this round's draft length.
    n_drafted, n_accepted: `[batch]` what this round drafted and accepted.
    alpha_sum, alpha_count: `[batch]` the row's running Σβ and scored positions.
  """
  if policy.kind in ('constant', 'confidence'):
    return budget
  if policy.kind == 'heuristic':
    grown = jnp.where((n_accepted >= n_drafted) & (n_drafted > 0), budget + 2, budget - 1)
    return jnp.clip(grown, 1, gamma_max).astype(jnp.int32)
  # optimal: argmax over γ of E(α̂, γ) / (γ c + v(γ) + a).
  alpha = ((alpha_sum + policy.prior_alpha * policy.prior_weight) /
           (alpha_count + policy.prior_weight))
  alpha = jnp.clip(alpha, 0.0, 1.0 - 1e-6)
  gammas = jnp.arange(1, gamma_max + 1, dtype=jnp.float32)  # [G]
  expected = (1.0 - alpha[:, None] ** (gammas[None] + 1.0)) / (1.0 - alpha[:, None])
  cost = gammas * policy.c + jnp.asarray(policy.verify_costs(gamma_max)) + policy.a
  return (jnp.argmax(expected / cost[None], axis=1) + 1).astype(jnp.int32)


def check_costs(v: Sequence[float], gamma_max: int) -> None:
  """Raises ValueError when a given v(γ) is not positive."""
  if any(not x > 0 for x in v[:gamma_max]):
    raise ValueError(f'draft policy v must hold positive costs, got {tuple(v)!r}.')
