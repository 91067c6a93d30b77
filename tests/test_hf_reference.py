"""Our T5 against Hugging Face transformers' T5ForConditionalGeneration (PyTorch, float32).

Both directions of the weight mapping are covered: a randomly initialised HF model
imported with `import_hf_t5`, and our randomly initialised params exported with
`export_hf_t5` and loaded by `from_pretrained`.
"""

import functools

import jax
import numpy as np
import pytest

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

from specdec_jax.interop.hf import t5 as hf_t5  # noqa: E402
from specdec_jax.models import t5  # noqa: E402
from specdec_jax.models.config import T5Config  # noqa: E402

TOL = 1e-4
VOCAB = 101
KINDS = {
    # T5 1.0: relu MLP, output layer tied to the embedding (scaled by d_model ** -0.5).
    't5_1_0': dict(feed_forward_proj='relu', tie_word_embeddings=True),
    # T5 1.1: gated-gelu MLP, separate lm_head.
    't5_1_1': dict(feed_forward_proj='gated-gelu', tie_word_embeddings=False),
}


def our_config(kind):
  acts = ('relu',) if kind == 't5_1_0' else ('gelu', 'linear')
  return T5Config(vocab_size=VOCAB, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=48,
                  num_encoder_layers=2, num_decoder_layers=2, mlp_activations=acts,
                  logits_via_embedding=(kind == 't5_1_0'), dropout_rate=0.0)


def random_hf_model(kind, seed=0):
  """A randomly initialised HF T5 (norm scales randomised too), untied by hand for 1.1."""
  torch.manual_seed(seed)
  cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                              num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                              **KINDS[kind])
  model = transformers.T5ForConditionalGeneration(cfg)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if 'layer_norm' in name:
        p.uniform_(0.5, 1.5)
    if kind == 't5_1_1':
      # transformers 5.x ties lm_head even for tie_word_embeddings=False (NOTES.md).
      model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, 32))
      model.config.scale_decoder_outputs = False
  return model.eval()


def inputs():
  """Right-padded encoder inputs of different lengths (0 = pad) and decoder inputs."""
  rng = np.random.default_rng(0)
  enc = rng.integers(2, VOCAB, size=(3, 13)).astype(np.int32)
  for row, length in enumerate((13, 9, 4)):
    enc[row, length:] = 0
  dec = rng.integers(2, VOCAB, size=(3, 11)).astype(np.int32)
  dec[:, 0] = 0  # Decoder inputs start with the start token 0, as in HF.
  return enc, dec


def hf_logits(model, enc, dec):
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(enc).long(),
                attention_mask=torch.from_numpy(enc != 0).long(),
                decoder_input_ids=torch.from_numpy(dec).long())
  return out.logits.numpy()


@functools.partial(jax.jit, static_argnums=0)
def our_logits(config, params, enc, dec):
  return t5.Transformer(config).apply({'params': params}, enc, dec, enable_dropout=False)


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_imported_hf_weights_give_hf_logits(kind):
  model = random_hf_model(kind)
  config = our_config(kind)
  assert hf_t5.t5_config_from_hf(model.config) == config
  params = hf_t5.import_hf_t5(model.state_dict(), model.config)
  t5.check_params(params, config)
  assert ('logits_dense' in params['decoder']) == (kind == 't5_1_1')
  enc, dec = inputs()
  ours = np.asarray(our_logits(config, params, enc, dec))
  theirs = hf_logits(model, enc, dec)
  assert ours.shape == theirs.shape == (3, 11, VOCAB)
  assert np.abs(ours - theirs).max() <= TOL


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_exported_params_load_in_hf_with_same_logits(kind, tmp_path):
  config = our_config(kind)
  params = t5.init_params(config, jax.random.PRNGKey(1))
  # Randomise the norm scales (initialised to ones) so their mapping is checked too.
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: x * jax.random.uniform(jax.random.PRNGKey(len(str(p))), x.shape, x.dtype,
                                          0.5, 1.5)
      if 'scale' in jax.tree_util.keystr(p) else x, params)
  folder = hf_t5.export_hf_t5(params, config, tmp_path / 'hf')
  model = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
  assert (model.lm_head.weight is model.shared.weight) == (kind == 't5_1_0')
  assert model.config.decoder_start_token_id == 0
  enc, dec = inputs()
  ours = np.asarray(our_logits(config, params, enc, dec))
  assert np.abs(ours - hf_logits(model, enc, dec)).max() <= TOL
  # And back: the import inverts the export exactly.
  again = hf_t5.import_hf_t5(folder)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b), params, again)
  assert hf_t5.t5_config_from_hf(folder) == config
