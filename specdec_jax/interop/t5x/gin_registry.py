"""Gin registrations that let T5X-style gin files configure this package.

Importing this module (a gin file does it with `import specdec_jax.interop.t5x.gin_registry`)
registers, under T5X's binding names:

  network.T5Config                      specdec_jax.models.config.T5Config
  network.Transformer                   a factory returning specdec_jax.models.t5.Transformer
  network.TransformerConfig             specdec_jax.models.config.DecoderOnlyConfig (T5X's
                                        decoder-only config, `t5x/examples/decoder_only`)
  network.DecoderWrapper                a factory returning
                                        specdec_jax.models.decoder_only.DecoderOnlyTransformer
  network.float32, network.bfloat16     dtype constants (`dtype = %network.bfloat16`)
  seqio.SentencePieceVocabulary         seqio's class, imported only when called
                                        (seqio pulls in TensorFlow)
  models.SpeculativeEncoderDecoderModel specdec_jax.interop.t5x.model.SpeculativeEncoderDecoderModel
  models.SpeculativeDecoderOnlyModel    specdec_jax.interop.t5x.decoder_only_model.SpeculativeDecoderOnlyModel
  specdec_jax.t5x_decoding.temperature_sample  T5X-convention decode_fns (a model's
  specdec_jax.t5x_decoding.speculative_sample  `decode_fn`, as in T5X)
  specdec_jax.decoding.temperature_sample      our-layout loop (not a model decode_fn)
  specdec_jax.DraftPolicy               specdec_jax.decoding.policies.DraftPolicy (adaptive γ)
  specdec_jax.LookupDrafter             specdec_jax.decoding.drafters.LookupDrafter (n-gram
                                        lookup with its settings: `decode.drafter =
                                        @specdec_jax.LookupDrafter()`)
  specdec_jax.NgramTableDrafter         specdec_jax.decoding.drafters.NgramTableDrafter
  specdec_jax.standard_logical_axis_rules  T5X's logical axis rules (sharding)
  specdec_jax.t5_vocab_path             path of the shared T5 SentencePiece model
  specdec_jax.demo_vocab_path           path of the demo pairs' SentencePiece model, as the
                                        seqio tasks of `specdec_jax.text.tasks` name it

so `network.T5Config.emb_dim = 512`, `network.Transformer.config = @network.T5Config()`
and `MODEL = @models.SpeculativeEncoderDecoderModel()` read as in T5X's gin files.
T5X's own optimizer and restore config are bound in the dynamic-registration files
`specdec_jax/configs/t5x/{adafactor,restore_draft}.gin` (they import `t5x`).

It also adds `CONFIG_SEARCH_PATH` (the folder holding the `specdec_jax` package:
the repository root, or site-packages when installed) to gin's search path, so
`include 'specdec_jax/configs/models/t5_1_1/base.gin'` resolves from any working
directory (gin's Python-path reader resolves those paths too: the config folders are
packages, like T5X's `t5x/configs`). `python -m specdec_jax.interop.t5x.gin_registry` prints the
folder, e.g. for T5X's `--gin_search_paths`.

These are static (classic) gin registrations; T5X's own files use
`from __gin__ import dynamic_registration`. Do not load T5X's
`t5x/examples/t5/*.gin` in the same config: include ours instead.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import gin

import jax.numpy as jnp

from specdec_jax import decoding
from specdec_jax.util import gin_config
from specdec_jax.util import paths
from specdec_jax.decoding import drafters
from specdec_jax.decoding import policies
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.models import decoder_only
from specdec_jax.models import t5
from specdec_jax.models.config import DecoderOnlyConfig, T5Config
from specdec_jax.sharding import rules as sharding_rules
from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel
from specdec_jax.interop.t5x.decoder_only_model import SpeculativeDecoderOnlyModel

_log = logging.getLogger(__name__)


def _register(fn_or_cls, name: str, module: str):
  """`gin.external_configurable`, tolerating an existing registration of the same name."""
  try:
    return gin_config.external_configurable(fn_or_cls, name=name, module=module)
  except ValueError as e:  # e.g. a second registration under the same selector
    if 'already' not in str(e):
      raise
    _log.warning('gin: %s.%s is already registered; keeping the existing one.', module, name)
    return gin.get_configurable(f'{module}.{name}')


def transformer(config: T5Config = gin.REQUIRED) -> t5.Transformer:
  """`network.Transformer(config)`: our T5 with T5X's param tree (no params allocated)."""
  return t5.Transformer(config)


def decoder_wrapper(config: DecoderOnlyConfig = gin.REQUIRED
                    ) -> decoder_only.DecoderOnlyTransformer:
  """`network.DecoderWrapper(config)`: our decoder-only LM with T5X's param tree."""
  return decoder_only.DecoderOnlyTransformer(config)


def sentencepiece_vocabulary(sentencepiece_model_file: str = gin.REQUIRED,
                             extra_ids: int = 0, normalizer_spec_overrides=None,
                             reverse_extra_ids: bool = True,
                             use_fast_tokenizer: bool = False):
  """`seqio.SentencePieceVocabulary(...)`, importing seqio (and TensorFlow) only now.

  Raises:
    FileNotFoundError: a local `sentencepiece_model_file` that does not exist.
  """
  path = os.fspath(sentencepiece_model_file)
  if '://' not in path and not os.path.exists(path):
    raise FileNotFoundError(f'SentencePiece model {path!r} not found; bind VOCAB_PATH (or '
                            'seqio.SentencePieceVocabulary.sentencepiece_model_file) to it.')
  import seqio  # pylint: disable=g-import-not-at-top
  return seqio.SentencePieceVocabulary(
      path, extra_ids=extra_ids, normalizer_spec_overrides=normalizer_spec_overrides,
      reverse_extra_ids=reverse_extra_ids, use_fast_tokenizer=use_fast_tokenizer)


def t5_vocab_path(data_dir: Optional[str] = None) -> str:
  """Path of the shared T5 SentencePiece model: `<data_dir>/t5_vocab/sentencepiece.model`.

  `data_dir` defaults to `$SPECDEC_DATA`, else `<repo>/../shared/data`.

  Raises:
    FileNotFoundError: the data folder or the model file does not exist.
  """
  root = paths.data_dir() if data_dir is None else os.fspath(data_dir)
  path = os.path.join(root, 't5_vocab', 'sentencepiece.model')
  if not os.path.exists(path):
    raise FileNotFoundError(f'T5 SentencePiece model not found at {path!r}; bind VOCAB_PATH '
                            'to its location (e.g. gs://t5-data/vocabs/cc_all.32000/'
                            'sentencepiece.model).')
  return path


def demo_vocab_path() -> str:
  """Path of the demo pairs' SentencePiece model, spelled as the seqio tasks
  `specdec_ende_multi30k` / `specdec_ende_wmt_news` spell it (absolute, under the installed
  package's assets): seqio compares vocabularies by their file path, and `t5x.infer`
  refuses a model whose vocabulary differs from its task's."""
  return str(paths.ASSETS_DIR / 'demo_ende' / 'vocab' / 'ende8k.model')


_register(T5Config, 'T5Config', 'network')
gin_config.constant('network.float32', jnp.float32)
gin_config.constant('network.bfloat16', jnp.bfloat16)
_register(transformer, 'Transformer', 'network')
_register(DecoderOnlyConfig, 'TransformerConfig', 'network')
_register(decoder_wrapper, 'DecoderWrapper', 'network')
_register(sentencepiece_vocabulary, 'SentencePieceVocabulary', 'seqio')
_register(SpeculativeEncoderDecoderModel, 'SpeculativeEncoderDecoderModel', 'models')
_register(SpeculativeDecoderOnlyModel, 'SpeculativeDecoderOnlyModel', 'models')
_register(decoding.temperature_sample, 'temperature_sample', 'specdec_jax.decoding')
_register(t5x_decoding.temperature_sample, 'temperature_sample', 'specdec_jax.t5x_decoding')
_register(t5x_decoding.speculative_sample, 'speculative_sample', 'specdec_jax.t5x_decoding')
_register(t5_vocab_path, 't5_vocab_path', 'specdec_jax')
_register(demo_vocab_path, 'demo_vocab_path', 'specdec_jax')
_register(policies.DraftPolicy, 'DraftPolicy', 'specdec_jax')
_register(drafters.LookupDrafter, 'LookupDrafter', 'specdec_jax')
_register(drafters.NgramTableDrafter, 'NgramTableDrafter', 'specdec_jax')
_register(sharding_rules.standard_logical_axis_rules, 'standard_logical_axis_rules',
          'specdec_jax')

# The folder holding the specdec_jax package (repository root, or site-packages).
CONFIG_SEARCH_PATH = str(paths.PACKAGE_DIR.parent)
gin.add_config_file_search_path(CONFIG_SEARCH_PATH)
if str(paths.REPO_ROOT) != CONFIG_SEARCH_PATH:  # pragma: no cover - same folder today
  gin.add_config_file_search_path(str(paths.REPO_ROOT))

if __name__ == '__main__':
  print(CONFIG_SEARCH_PATH)
