"""Accept/resample rule, statistics, reproducibility and argument checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding
from specdec_jax.generate import t5 as generate  # the module: its jitted programs are patched here
from specdec_jax.decoding import accept
from specdec_jax.decoding import sampling
from specdec_jax.models import t5

ENC = np.array([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0], [13, 1, 0, 0, 0, 0],
                [20, 21, 22, 23, 1, 0]], np.int32)


def test_paper_worked_example():
  """Leviathan et al. §3: p = (0.1, 0.6, 0.3), q = (0.5, 0.3, 0.2)."""
  p = jnp.array([0.1, 0.6, 0.3])
  q = jnp.array([0.5, 0.3, 0.2])
  np.testing.assert_allclose(float(accept.acceptance_probability(p, q)), 0.6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(accept.residual_distribution(p, q)), [0, 0.75, 0.25],
                             atol=1e-6)


def test_accept_rule_on_one_hots_is_deterministic():
  """Greedy rows: accept while x_i = argmax p_i, then emit argmax p_j (no randomness)."""
  v = 5
  x = jnp.array([[1, 2, 3]])
  q = jax.nn.one_hot(x, v)
  p = jax.nn.one_hot(jnp.array([[1, 2, 4, 0]]), v)
  for seed in range(3):
    u = jax.random.uniform(jax.random.PRNGKey(seed), (1, 5))
    n_acc, nxt = accept.accept_and_resample(x, q, p, jnp.array([3]), jnp.array([True]),
                                            u[:, :3], u[:, 3:])
    assert int(n_acc[0]) == 2 and int(nxt[0]) == 4
  # Budget: only one draft counts; after accepting it the next token is the bonus p_2.
  n_acc, nxt = accept.accept_and_resample(x, q, p, jnp.array([1]), jnp.array([True]),
                                          u[:, :3], u[:, 3:])
  assert int(n_acc[0]) == 1 and int(nxt[0]) == 2


def test_greedy_accept_matches_the_general_rule_on_one_hots():
  """`greedy_accept` (token ids only) = `accept_and_resample` with one-hot p, q."""
  rng = np.random.default_rng(0)
  v, gamma = 4, 3
  for _ in range(50):
    x = jnp.asarray(rng.integers(0, v, (2, gamma)), jnp.int32)
    t = jnp.asarray(rng.integers(0, v, (2, gamma + 1)), jnp.int32)
    n_drafted = jnp.asarray(rng.integers(0, gamma + 1, 2), jnp.int32)
    u = jax.random.uniform(jax.random.PRNGKey(0), (2, gamma + 2))
    want = accept.accept_and_resample(x, jax.nn.one_hot(x, v), jax.nn.one_hot(t, v),
                                      n_drafted, jnp.array([True, True]), u[:, :gamma],
                                      u[:, gamma:])
    got = accept.greedy_accept(x, t, n_drafted)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_fast_argmax_and_categorical_equal_jax():
  """`sampling.argmax` = jnp.argmax (ties → first, NaN → first NaN); `categorical`
  draws the very same samples as jax.random.categorical for the same key."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((5, 300)).astype(np.float32)
  x[1, [3, 200]] = 9.0  # tie: first index wins
  x[2, [7, 9]] = np.nan  # NaN: first NaN wins, like jnp.argmax
  x[3, :] = sampling.NEG_INF
  np.testing.assert_array_equal(np.asarray(sampling.argmax(jnp.asarray(x))),
                                np.asarray(jnp.argmax(jnp.asarray(x), axis=-1)))
  logits = jnp.asarray(np.where(rng.random((4, 300)) < 0.5, sampling.NEG_INF,
                                rng.standard_normal((4, 300))), jnp.float32)
  for seed in range(20):
    key = jax.random.PRNGKey(seed)
    np.testing.assert_array_equal(np.asarray(sampling.categorical(key, logits)),
                                  np.asarray(jax.random.categorical(key, logits)))
    keys = jax.random.split(key, 4)
    np.testing.assert_array_equal(np.asarray(sampling.sample_rows(keys, logits)),
                                  np.asarray(jax.vmap(jax.random.categorical)(keys, logits)))


def spec(pair, enc, gamma=3, temperature=1.0, key=None, **kw):
  return generate.t5_speculative_generate(
      pair.model, pair.params, pair.draft_model, pair.draft_params, enc, 16, gamma,
      eos_id=1, temperature=temperature, decode_rng=key, **kw)


def test_statistics_add_up(pair):
  out, _, stats = spec(pair, ENC, key=jax.random.PRNGKey(0))
  out = np.asarray(out[:, 0])
  emitted = np.asarray(stats.tokens[:, 0])
  for b in range(len(ENC)):
    nz = out[b] != 0
    length = np.argmax(out[b] == 1) + 1 if (out[b] == 1).any() else len(out[b])
    assert emitted[b] == length
    assert nz[:length].sum() == (out[b, :length] != 0).sum()
  acc, drafted, calls = (np.asarray(stats.accepted[:, 0]), np.asarray(stats.drafted[:, 0]),
                         np.asarray(stats.target_calls[:, 0]))
  assert (acc <= drafted).all()
  # Each round emits accepted + 1 tokens, less what stopping at EOS removed.
  assert (emitted <= acc + calls).all()
  hit_eos = (out == 1).any(axis=1)
  np.testing.assert_array_equal(emitted[~hit_eos], (acc + calls)[~hit_eos])
  alpha = np.asarray(stats.alpha[:, 0])
  assert ((0 <= alpha) & (alpha <= 1)).all()
  # Self-draft: α = 1 and everything accepted.
  _, _, s2 = generate.t5_speculative_generate(pair.model, pair.params, pair.model, pair.params,
                                              ENC, 16, 3, eos_id=1, temperature=1.0)
  np.testing.assert_allclose(np.asarray(s2.alpha), 1.0, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(s2.accepted), np.asarray(s2.drafted))


def test_reproducible_and_independent_of_batch(pair):
  keys = jax.random.split(jax.random.PRNGKey(42), len(ENC))
  a, lpa, _ = spec(pair, ENC, key=keys)
  b, lpb, _ = spec(pair, ENC, key=keys)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(lpa), np.asarray(lpb))
  alone, lp_alone, _ = spec(pair, ENC[2:3], key=keys[2:3])
  np.testing.assert_array_equal(np.asarray(alone[0]), np.asarray(a[2]))
  np.testing.assert_allclose(np.asarray(lp_alone[0]), np.asarray(lpa[2]), rtol=1e-5)
  c, _, _ = spec(pair, ENC, key=jax.random.split(jax.random.PRNGKey(7), len(ENC)))
  assert not np.array_equal(np.asarray(a), np.asarray(c))


def test_num_decodes_and_topk(pair):
  out, lp, stats = spec(pair, ENC[:2], key=jax.random.PRNGKey(1), num_decodes=4, topk=5)
  assert out.shape == (2, 4, 16) and lp.shape == (2, 4) and stats.accepted.shape == (2, 4)
  assert (np.diff(np.asarray(lp), axis=1) >= 0).all()


def test_padded_vocab_draft(pair):
  """A draft padded to more ids than the target: extra ids get probability 0."""
  cfg = pair.draft_config.replace(vocab_size=80)
  model = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(3))
  out, _, _ = generate.t5_speculative_generate(pair.model, pair.params, model, params, ENC, 12,
                                               4, eos_id=1, temperature=0.0, real_vocab_size=60)
  base, _ = generate.t5_generate(pair.model, pair.params, ENC, 12, eos_id=1)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(base))


@pytest.mark.parametrize('kwargs, match', [
    (dict(gamma=0), 'gamma'),
    (dict(real_vocab_size=70), 'do not share the same token ids'),
    (dict(topk=2, topp=0.5), 'At most one of topk and topp'),
    (dict(temperature=-0.5), 'temperature must be >= 0'),
    (dict(temperature=float('nan')), 'temperature must be >= 0'),
    (dict(temperature=float('inf')), 'temperature must be >= 0 and finite'),
    (dict(gamma=True), 'gamma'),
    (dict(topk=10 ** 6), 'exceeds the vocabulary size'),
    (dict(decoder_prompt=np.zeros((4, 15), np.int32)), r'decoder_prompt has shape \(4, 15\)'),
    (dict(decoder_prompt=np.zeros((1, 16), np.int32)), 'decoder_prompt'),
    (dict(draft_encoder_input_tokens=ENC[:2]), 'draft_encoder_input_tokens'),
])
def test_bad_arguments_raise_before_compiling(pair, kwargs, match, monkeypatch):
  def no_compile(*a, **k):
    raise AssertionError('compiled before validating')
  monkeypatch.setattr(generate, '_speculative_generate', no_compile)
  args = dict(gamma=3)
  args.update(kwargs)
  gamma = args.pop('gamma')
  with pytest.raises(ValueError, match=match):
    generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                     pair.draft_params, ENC, 16, gamma, eos_id=1, **args)


def test_short_draft_cache_is_rejected(pair):
  tc = t5.encode_and_init_cache(pair.model, pair.params, ENC, 16)
  dc = t5.encode_and_init_cache(pair.draft_model, pair.draft_params, ENC, 8)
  with pytest.raises(ValueError, match='draft_cache holds 8 positions'):
    decoding.speculative_sample(jnp.zeros((4, 16), jnp.int32), tc,
                                t5.make_step_fn(pair.model, pair.params), dc,
                                t5.make_step_fn(pair.draft_model, pair.draft_params),
                                eos_id=1, gamma=2, vocab_size=64)


def _cache_copies(jitted, pair, policy):
  """Copies of a target self-attention cache leaf in the compiled adaptive program."""
  import re  # pylint: disable=g-import-not-at-top
  from specdec_jax.decoding import policies  # pylint: disable=g-import-not-at-top
  gamma, max_len = 3, 16
  tok = jnp.asarray(ENC[:1])
  text = jitted.lower(
      pair.model, pair.params, pair.draft_model, pair.draft_params, tok, tok,
      jnp.zeros((1, max_len), jnp.int32), jax.random.PRNGKey(0), jnp.float32(0.0), topp=0.0,
      max_decode_len=max_len, gamma=gamma, eos_id=1, num_decodes=1, topk=0,
      static_temperature=0.0, max_decode_steps=None, real_vocab_size=None,
      rescale_log_probs=True, prompt_free=True, per_row_greedy=False,
      draft_policy=policies.as_policy(policy)).compile().as_text()
  cfg = pair.config
  shape = f'f32[1,{cfg.num_heads},{generate.cache_length(max_len, gamma)},{cfg.head_dim}]'
  # The while bodies' computations (`body=%name` of each `while`), then their copies.
  bodies = set(re.findall(r'\bwhile\(.*?body=%?([\w.\-]+)', text))
  assert bodies, 'no while loop in the compiled program'
  copies, current = 0, None
  for line in text.split('\n'):
    head = re.match(r'^(?:ENTRY )?%?([\w.\-]+) [(].*[{]$', line)
    if head:
      current = head.group(1)
    elif current in bodies and re.search(re.escape(shape) + r'\{[0-9,]*\} copy\(', line):
      copies += 1
  return copies


def test_adaptive_round_updates_the_caches_in_place(pair):
  """The `lax.switch` over verify widths must not copy the target's KV caches each round:
  the decoders compile with region-analysis copy insertion on CPU (`xla_options`), and
  the same program under plain `jax.jit` shows the copies this test would catch."""
  from specdec_jax.generate import xla_options  # pylint: disable=g-import-not-at-top
  if not xla_options._SUPPORTED or jax.default_backend() != 'cpu':  # pylint: disable=protected-access
    pytest.skip('compiler options need jax.jit(compiler_options=) on the CPU backend')
  fn = generate._speculative_generate  # pylint: disable=protected-access
  assert _cache_copies(fn._plain, pair, 'heuristic') > 0  # pylint: disable=protected-access
  assert _cache_copies(fn, pair, 'heuristic') == 0


def test_decoders_run_inside_an_outer_jit(pair):
  """Under an enclosing `jax.jit` (T5X's predict step) the decoders are nested jits, which
  may not carry compiler options: they must run there, with the same result."""
  tok = jnp.asarray(ENC[:2])
  direct = generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                            pair.draft_params, tok, 8, 2)[0]
  nested = jax.jit(lambda t: generate.t5_speculative_generate(
      pair.model, pair.params, pair.draft_model, pair.draft_params, t, 8, 2)[0])(tok)
  np.testing.assert_array_equal(np.asarray(direct), np.asarray(nested))
  base = jax.jit(lambda t: generate.t5_generate(pair.model, pair.params, t, 8)[0])(tok)
  np.testing.assert_array_equal(np.asarray(base),
                                np.asarray(generate.t5_generate(pair.model, pair.params, tok, 8)[0]))
