"""Greedy speculative decoding equals greedy decoding token for token.

Drafts: (a) the target itself (everything accepted, bonus tokens), (b) an untrained
random model (almost everything rejected), (c) the target with logits perturbed at
chosen positions (rejections exactly there — the expected statistics are simulated
in Python). EOS is forced at chosen positions: inside a drafted block, on a bonus
token, and never. Budgets of 1, γ−1, γ, γ+1 tokens. Every adaptive draft-length
policy gives the same tokens too, and each moves the draft length the way it should.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding
from specdec_jax.decoding import policies
from specdec_jax.models import t5

MAX_LEN = 40
ENC = np.array([[5, 6, 7, 8, 9, 10, 1], [11, 12, 13, 1, 0, 0, 0], [14, 1, 0, 0, 0, 0, 0]],
               np.int32)
NEVER = 10_000


def wrap(step, eos_at, perturb_at, eos_id=1):
  """step_fn whose EOS logit is boosted at `eos_at[b]` and whose argmax is replaced by
  (argmax + 1) mod V at the positions in `perturb_at[b, :]` (positions are 1-based
  output indices: logits[:, i] predicts position lengths + i + 1)."""
  def step_fn(tokens, lengths, cache):
    logits, cache = step(tokens, lengths, cache)
    pos = lengths[:, None] + jnp.arange(tokens.shape[1])[None] + 1
    logits = logits.at[..., eos_id].add(jnp.where(pos == eos_at[:, None], 1e4, 0.0))
    if perturb_at is not None:
      hit = jnp.any(pos[..., None] == perturb_at[:, None, :], axis=-1)
      wrong = (jnp.argmax(logits, -1) + 1) % logits.shape[-1]
      logits = logits + 1e5 * jax.nn.one_hot(wrong, logits.shape[-1]) * hit[..., None]
    return logits, cache
  return step_fn


@functools.lru_cache(maxsize=None)
def baseline(pair, max_decode_steps):
  """Jitted greedy baseline; the EOS positions are traced."""
  target_step = t5.make_step_fn(pair.model, pair.params)

  @jax.jit
  def base(enc, eos_at):
    cache = t5.encode_and_init_cache(pair.model, pair.params, enc, MAX_LEN)
    return decoding.temperature_sample(
        jnp.zeros((enc.shape[0], MAX_LEN), jnp.int32), cache,
        decoding.tokens_to_logits_from_step_fn(wrap(target_step, eos_at, None)), eos_id=1,
        temperature=0.0, max_decode_steps=max_decode_steps)[0][:, 0]
  return base


@functools.lru_cache(maxsize=None)
def runner(pair, gamma, kind, max_decode_steps, policy=None):
  """Jitted speculative decoder for one static setting; EOS/perturbations traced."""
  target_step = t5.make_step_fn(pair.model, pair.params)

  @jax.jit
  def spec(enc, eos_at, perturb_at):
    tc = t5.encode_and_init_cache(pair.model, pair.params, enc, MAX_LEN)
    if kind == 'random':
      dc = t5.encode_and_init_cache(pair.draft_model, pair.draft_params, enc, MAX_LEN)
      draft_step = t5.make_step_fn(pair.draft_model, pair.draft_params)
    else:
      dc, draft_step = tc, wrap(target_step, eos_at, perturb_at if kind == 'perturbed' else None)
    out, _, stats = decoding.speculative_sample(
        jnp.zeros((enc.shape[0], MAX_LEN), jnp.int32), tc, wrap(target_step, eos_at, None),
        dc, draft_step, eos_id=1, gamma=gamma, vocab_size=pair.config.vocab_size,
        temperature=0.0, max_decode_steps=max_decode_steps, draft_policy=policy)
    return out[:, 0], stats
  return spec


def simulate(gamma, perturbed, eos, budget):
  """Expected (target_calls, drafted, accepted, tokens) for a greedy draft that equals
  the target except at `perturbed` positions."""
  n = calls = drafted = acc = 0
  while n < budget:
    g = min(gamma, budget - n - 1)
    calls += 1
    drafted += g
    a = next((i - 1 for i in range(1, g + 1) if n + i in perturbed), g)
    acc += a
    if n + 1 <= eos <= n + a + 1:
      return calls, drafted, acc, eos
    n += a + 1
  return calls, drafted, acc, n


def eos_positions(gamma):
  # Row 0: inside a drafted block (round 2); row 1: on the bonus of round 2; row 2: never.
  return np.array([gamma + 2, 2 * (gamma + 1), NEVER], np.int32)


@pytest.mark.parametrize('gamma', [1, 2, 4, 7, 16])
@pytest.mark.parametrize('kind', ['self', 'random', 'perturbed'])
def test_greedy_equality(pair, gamma, kind):
  base, spec = baseline(pair, None), runner(pair, gamma, kind, None)
  eos_at = jnp.asarray(eos_positions(gamma))
  perturb = np.array([[2, 9, 10, 25], [3, 4, 30, 31], [1, 5, 17, 33]], np.int32)
  want = np.asarray(base(ENC, eos_at))
  got, stats = spec(ENC, eos_at, jnp.asarray(perturb))
  np.testing.assert_array_equal(np.asarray(got), want)
  assert (want[0, gamma + 1] == 1) and (want[1, 2 * gamma + 1] == 1)  # EOS where forced
  assert (want[0, gamma + 2:] == 0).all() and (want[2] != 0).all()
  calls, drafted, accepted = (np.asarray(stats.target_calls[:, 0]),
                              np.asarray(stats.drafted[:, 0]), np.asarray(stats.accepted[:, 0]))
  assert (accepted <= drafted).all()
  if kind == 'self':
    np.testing.assert_allclose(np.asarray(stats.alpha[:, 0]), 1.0, atol=1e-6)
  if kind in ('self', 'perturbed'):
    for b in range(3):
      pert = set(perturb[b].tolist()) if kind == 'perturbed' else set()
      exp = simulate(gamma, pert, int(eos_at[b]), MAX_LEN)
      assert (calls[b], drafted[b], accepted[b], int(stats.tokens[b, 0])) == exp, (b, exp)
  if kind == 'perturbed':  # A row alone gives the same output as inside the batch.
    alone, _ = spec(ENC[1:2], eos_at[1:2], jnp.asarray(perturb[1:2]))
    np.testing.assert_array_equal(np.asarray(alone[0]), want[1])


@pytest.mark.parametrize('gamma', [4, 7])
@pytest.mark.parametrize('kind', ['self', 'perturbed'])
def test_budgets(pair, gamma, kind):
  eos_at = jnp.full((3,), NEVER, jnp.int32)
  perturb = jnp.asarray(np.array([[2, 3, 6, 7]] * 3, np.int32))
  full = np.asarray(baseline(pair, None)(ENC, eos_at))
  for budget in (1, gamma - 1, gamma, gamma + 1):
    spec = runner(pair, gamma, kind, budget)
    got, stats = spec(ENC, eos_at, perturb)
    want = full.copy()
    want[:, budget:] = 0
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=f'budget {budget}')
    np.testing.assert_array_equal(np.asarray(stats.tokens[:, 0]), budget)
    pert = {2, 3, 6, 7} if kind == 'perturbed' else set()
    exp = simulate(gamma, pert, NEVER, budget)
    assert (int(stats.target_calls[0, 0]), int(stats.drafted[0, 0]),
            int(stats.accepted[0, 0])) == exp[:3]


ADAPTIVE = {
    'heuristic': policies.DraftPolicy('heuristic', gamma_init=2),
    'confidence': policies.DraftPolicy('confidence', threshold=0.5),
    'optimal': policies.DraftPolicy('optimal', c=0.05, v=(1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5)),
}


@pytest.mark.parametrize('gamma', [1, 4, 7])
@pytest.mark.parametrize('kind', ['self', 'random', 'perturbed'])
@pytest.mark.parametrize('policy', sorted(ADAPTIVE))
def test_greedy_equality_adaptive(pair, gamma, kind, policy):
  """Every policy emits exactly the greedy tokens; draft lengths stay in [1, γ]."""
  eos_at = jnp.asarray(eos_positions(gamma))
  perturb = np.array([[2, 9, 10, 25], [3, 4, 30, 31], [1, 5, 17, 33]], np.int32)
  want = np.asarray(baseline(pair, None)(ENC, eos_at))
  got, stats = runner(pair, gamma, kind, None, ADAPTIVE[policy])(ENC, eos_at,
                                                                 jnp.asarray(perturb))
  np.testing.assert_array_equal(np.asarray(got), want)
  drafted, calls = np.asarray(stats.drafted[:, 0]), np.asarray(stats.target_calls[:, 0])
  # Every round drafts 1..γ, except a last round at the length limit, which drafts 0.
  assert ((drafted >= calls - 1) & (drafted <= gamma * calls)).all(), (drafted, calls)
  assert (np.asarray(stats.accepted) <= np.asarray(stats.drafted)).all()


@pytest.mark.parametrize('budget', [1, 3, 6])
def test_adaptive_budgets(pair, budget):
  """Near the length budget the adaptive loop shrinks γ like the constant one."""
  eos_at = jnp.full((3,), NEVER, jnp.int32)
  perturb = jnp.asarray(np.array([[2, 3, 6, 7]] * 3, np.int32))
  want = np.asarray(baseline(pair, None)(ENC, eos_at)).copy()
  want[:, budget:] = 0
  for policy in ADAPTIVE.values():
    got, stats = runner(pair, 4, 'perturbed', budget, policy)(ENC, eos_at, perturb)
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=f'{policy.kind} {budget}')
    np.testing.assert_array_equal(np.asarray(stats.tokens[:, 0]), budget)


def test_policies_move_the_draft_length(pair):
  """Planted cases with a known answer (greedy, γ = 6, no EOS).

  With the target as its own draft ('self') every draft is accepted, so the rounds
  are deterministic:
  heuristic from 2 (budget 20 tokens): lengths 2, 4, 6, then 4 (capped by the budget).
  confidence, threshold 0, never stops: 6, 6, 6, 3 (budget 25); threshold 1 stops
  after the first draft (top probabilities are < 1): 12 rounds of 1, then one of 0.
  optimal: free drafts (c = 0, v = 1) pick γ (as threshold 0); expensive drafts
  (c = 10) pick 1 (as threshold 1).
  With the random draft (almost nothing accepted) the heuristic falls towards 1.
  """
  gamma, eos_at = 6, jnp.full((3,), NEVER, jnp.int32)
  none = jnp.zeros((3, 4), jnp.int32)

  def run(kind, policy, budget=None):
    _, stats = runner(pair, gamma, kind, budget, policy)(ENC, eos_at, none)
    return np.asarray(stats.drafted[:, 0]), np.asarray(stats.target_calls[:, 0])

  cases = [
      (policies.DraftPolicy('heuristic', gamma_init=2), 20, 2 + 4 + 6 + 4, 4),
      (policies.DraftPolicy('confidence', threshold=0.0), 25, 6 + 6 + 6 + 3, 4),
      (policies.DraftPolicy('confidence', threshold=1.0), 25, 12, 13),
      (policies.DraftPolicy('optimal', c=0.0, v=(1.0,)), 25, 6 + 6 + 6 + 3, 4),
      (policies.DraftPolicy('optimal', c=10.0, v=(1.0,)), 25, 12, 13),
  ]
  for policy, budget, want_drafted, want_calls in cases:
    drafted, calls = run('self', policy, budget)
    np.testing.assert_array_equal(drafted, want_drafted, err_msg=str(policy))
    np.testing.assert_array_equal(calls, want_calls, err_msg=str(policy))
  drafted, calls = run('random', policies.DraftPolicy('heuristic'))
  assert (drafted / calls < 1.6).all(), drafted / calls


def test_policy_arguments_are_checked():
  with pytest.raises(ValueError, match='kind'):
    policies.DraftPolicy('sometimes')
  with pytest.raises(ValueError, match='threshold'):
    policies.DraftPolicy('confidence', threshold=1.5)
  with pytest.raises(ValueError, match='draft_policy'):
    policies.as_policy(3)
