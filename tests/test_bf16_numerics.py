"""bfloat16 numerics as T5X's network (t5x/examples/t5/{layers,network}.py).

T5X with `dtype='bfloat16'`: attention logits and softmax in bfloat16 (float32 only
with `float32_attention_logits`), RMS-norm statistics in float32 with bfloat16
output, float32 logits (T5 1.1's `logits_dense` casts its input to float32; T5 1.0's
tied layer multiplies the bfloat16 decoder output by the float32 embedding and
divides by √emb_dim in float32). The first test checks these dtypes op by op in the
traced program; the others measure bfloat16 against float32, the k-token cached call
against one-token calls, and greedy speculative against greedy baseline decoding —
the tolerances are the ones documented in README "bfloat16 numerics".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import generate
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

VOCAB = 128
# Documented tolerances (README "bfloat16 numerics"): bfloat16 keeps 8 significant
# bits, so each rounding is ≤ 2^-9 relative; through a few layers the logits of a
# bfloat16 model stay within 2^-5 of max|logit| of the float32 model's.
BF16_VS_F32 = 2.0 ** -5
# k-token cached call vs k one-token calls, both bfloat16 (XLA:CPU measured: 0).
K_TOKEN_VS_ONE = 2.0 ** -7


def _config(**kw) -> T5Config:
  base = dict(vocab_size=VOCAB, emb_dim=64, num_heads=4, num_encoder_layers=2,
              num_decoder_layers=2, head_dim=16, mlp_dim=96,
              mlp_activations=('gelu', 'linear'), dropout_rate=0.0,
              logits_via_embedding=False, dtype=jnp.bfloat16)
  base.update(kw)
  return T5Config(**base)


T5_1_1 = _config()
T5_1_0 = _config(mlp_activations=('relu',), logits_via_embedding=True)


def _inputs(batch=4, enc_len=10, dec_len=8, seed=0):
  rng = np.random.RandomState(seed)
  enc = rng.randint(3, VOCAB, (batch, enc_len)).astype(np.int32)
  enc[:, -1] = 1
  dec = rng.randint(3, VOCAB, (batch, dec_len)).astype(np.int32)
  dec[:, 0] = 0
  return enc, dec


def _eqns(jaxpr):
  """Every equation of a jaxpr, recursing into sub-jaxprs (pjit, custom_jvp, loops)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          yield from _eqns(inner)


def _dtypes(fn, *args):
  """{primitive: [(input dtypes, output dtypes), ...]} of the traced `fn`."""
  out = {}
  for eqn in _eqns(jax.make_jaxpr(fn)(*args).jaxpr):
    ins = tuple(str(v.aval.dtype) for v in eqn.invars if hasattr(v.aval, 'dtype'))
    outs = tuple(str(v.aval.dtype) for v in eqn.outvars)
    shapes = tuple(tuple(v.aval.shape) for v in eqn.outvars)
    out.setdefault(eqn.primitive.name, []).append((ins, outs, shapes))
  return out


@pytest.mark.parametrize('config', [T5_1_1, T5_1_0, T5_1_1.replace(float32_attention_logits=True)],
                         ids=['t5_1_1', 't5_1_0_tied', 'float32_attention_logits'])
def test_dtypes_at_every_step_follow_t5x(config):
  model = t5.Transformer(config)
  params = jax.eval_shape(lambda: t5.init_params(config.replace(dtype=jnp.float32),
                                                 jax.random.PRNGKey(0)))
  enc, dec = _inputs()
  full = _dtypes(lambda p: model.apply({'params': p}, enc, dec, dec, enable_dropout=False),
                 params)

  def step(p):
    cache = t5.encode_and_init_cache(model, p, enc, 8)
    return t5.make_step_fn(model, p)(dec[:, :3], jnp.zeros(4, jnp.int32), cache)[0]
  cached = _dtypes(step, params)
  attn_dtype = 'float32' if config.float32_attention_logits else 'bfloat16'
  n_attention = config.num_encoder_layers + 2 * config.num_decoder_layers
  for prog in (full, cached):
    # Softmax: every exp is an attention softmax, in the logits' dtype (as T5X).
    exps = prog['exp']
    assert len(exps) == n_attention  # the cached program encodes too
    assert {e[0] for e in exps} == {(attn_dtype,)}
    # RMS norm statistics in float32.
    assert {e[0] for e in prog['rsqrt']} == {('float32',)}
    # Logits in float32: T5 1.1's logits_dense casts its input to float32; T5 1.0's
    # tied layer is T5X's jnp.dot(bf16 decoder output, f32 embedding) -> float32.
    vocab_dots = [e for e in prog['dot_general'] if e[2][0][-1] == VOCAB]
    operands = ('bfloat16', 'float32') if config.logits_via_embedding else ('float32',) * 2
    assert vocab_dots and all(e[0] == operands and e[1] == ('float32',) for e in vocab_dots)
    # Every other matmul runs in bfloat16 (projections, MLP, attention weights x values
    # unless float32_attention_logits).
    others = [e for e in prog['dot_general'] if e[2][0][-1] != VOCAB]
    assert all(e[1] == ('bfloat16',) or (config.float32_attention_logits and
                                         e[1] == ('float32',)) for e in others)
  if config.logits_via_embedding:
    # 1/√emb_dim applied in float32 (a bfloat16 constant would be 22.625, not 22.627…).
    divs = [e for e in full['div'] if e[2][0][-1] == VOCAB]
    assert divs and all(e[1] == ('float32',) and set(e[0]) == {'float32'} for e in divs)


@pytest.fixture(scope='module', params=[T5_1_1, T5_1_0], ids=['t5_1_1', 't5_1_0_tied'])
def bf16_and_f32(request):
  config = request.param
  params = t5.init_params(config.replace(dtype=jnp.float32), jax.random.PRNGKey(0))
  enc, dec = _inputs(batch=4)
  logits = {}
  for name, cfg in (('f32', config.replace(dtype=jnp.float32)), ('bf16', config)):
    model = t5.Transformer(cfg)
    logits[name] = jax.jit(lambda p, e, d: model.apply({'params': p}, e, d, d,
                                                       enable_dropout=False))(params, enc, dec)
  return logits


def test_bf16_logits_against_float32(bf16_and_f32):
  l32, l16 = np.asarray(bf16_and_f32['f32']), bf16_and_f32['bf16']
  assert l16.dtype == jnp.float32  # logits are float32 in both, as T5X
  err = np.abs(np.asarray(l16) - l32).max()
  scale = np.abs(l32).max()
  assert 0 < err <= BF16_VS_F32 * scale, (err, scale)
  assert np.mean(np.argmax(l32, -1) == np.argmax(np.asarray(l16), -1)) >= 0.9


@pytest.fixture(scope='module')
def bf16_target():
  params = t5.init_params(T5_1_1.replace(dtype=jnp.float32), jax.random.PRNGKey(0))
  return t5.Transformer(T5_1_1), params


def test_k_token_call_rounding_bf16(bf16_target):
  """The verify call's rounding: (γ+1) tokens at once vs one at a time, bfloat16."""
  model, params = bf16_target
  enc, dec = _inputs(batch=8, dec_len=6)
  cache = t5.encode_and_init_cache(model, params, enc, 8)
  step = jax.jit(t5.make_step_fn(model, params))
  k_logits, _ = step(dec, jnp.zeros(8, jnp.int32), cache)
  one = []
  c = cache
  for i in range(dec.shape[1]):
    logits, c = step(dec[:, i:i + 1], jnp.full(8, i, jnp.int32), c)
    one.append(np.asarray(logits[:, 0]))
  one = np.stack(one, 1)
  err = np.abs(np.asarray(k_logits) - one).max()
  assert err <= K_TOKEN_VS_ONE * np.abs(one).max(), err


def test_greedy_speculative_equals_baseline_bf16(bf16_target):
  """Greedy speculative vs greedy baseline, both bfloat16 (cannot be exact in general:
  a k-token verify call may round differently from one-token calls on some backends).

  Measured on XLA:CPU (README): every row identical. Asserted: ≥ 90 % of rows
  identical, and any row that differs first differs at a near tie of the target's
  two candidates (within the k-token rounding tolerance)."""
  model, params = bf16_target
  rng = np.random.RandomState(1)
  enc = rng.randint(3, VOCAB, (16, 10)).astype(np.int32)
  enc[:, -1] = 1
  length = 16
  base = np.asarray(generate.t5_generate(model, params, enc, length)[0][:, 0])
  # Draft = the target itself (every round verifies γ+1 positions): the hardest case.
  spec, _, stats = generate.t5_speculative_generate(model, params, model, params, enc,
                                                    length, 3)
  spec = np.asarray(spec[:, 0])
  assert np.sum(stats.accepted) > 0.5 * np.sum(stats.drafted)
  same = np.all(base == spec, axis=1)
  assert same.mean() >= 0.9, same.mean()
  for b in np.where(~same)[0]:
    t = int(np.argmax(base[b] != spec[b]))
    prefix = np.concatenate([[0], base[b, :t]])[None].astype(np.int32)
    logits = np.asarray(model.apply({'params': params}, enc[b:b + 1], prefix, prefix,
                                    enable_dropout=False))[0, -1]
    margin = abs(logits[base[b, t]] - logits[spec[b, t]])
    assert margin <= K_TOKEN_VS_ONE * np.abs(logits).max(), (b, t, margin)
