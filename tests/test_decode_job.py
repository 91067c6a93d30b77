"""End-to-end tests of the decode job (`python -m specdec_jax.decode`) on tiny models.

Target: T5X's own testdata checkpoint `test_t5_tiny.checkpoint_0` (T5 1.1, emb 8,
vocab 32128); draft: a random 1+1-layer T5 1.1 written with
`checkpoints.save_t5x_checkpoint`; vocabulary: the standard T5 SentencePiece model
from the shared data. Only two programs are compiled (speculative and baseline).
"""

import gzip
import json
import os
import pathlib
import stat

import gin
import jax
import numpy as np
import pytest

from specdec_jax import decode as decode_lib
from specdec_jax.decode import outputs as decode_outputs
from specdec_jax.text import inputs as inputs_lib
from specdec_jax.util import paths
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

DRAFT = T5Config(vocab_size=32128, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                 num_encoder_layers=1, num_decoder_layers=1,
                 mlp_activations=('gelu', 'linear'), logits_via_embedding=False,
                 dropout_rate=0.0)

SOURCES = [
    'A dog runs in the park.',
    'Two men are talking.',
    # Over-long with max_input_len=16: truncated (the documented default).
    'A very long sentence about a woman who walks with her three small children along '
    'the river on a sunny day in the middle of the summer.',
    'A girl is reading.',
    'The cat sleeps.',
]
REFERENCES = ['Ein Hund rennt im Park.', 'Zwei Männer unterhalten sich.',
              'Ein sehr langer Satz.', 'Ein Mädchen liest.', 'Die Katze schläft.']


@pytest.fixture(autouse=True)
def _clear_gin():
  yield
  gin.clear_config()


@pytest.fixture(scope='module')
def shared():
  try:
    root = paths.data_dir()
  except FileNotFoundError as e:
    pytest.skip(str(e))
  target = root / 't5x_checkpoints' / 'test_t5_tiny.checkpoint_0'
  vocab = root / 't5_vocab' / 'sentencepiece.model'
  for p in (target, vocab):
    if not p.exists():
      pytest.skip(f'{p} is missing')
  return target, vocab


@pytest.fixture(scope='module')
def pair(shared, tmp_path_factory):
  """(gin file binding the tiny pair, folder) — the draft saved as a T5X checkpoint."""
  checkpoints = pytest.importorskip('specdec_jax.checkpoints')
  if not hasattr(checkpoints, 'save_t5x_checkpoint'):
    pytest.skip('specdec_jax.checkpoints.save_t5x_checkpoint is not available')
  target, vocab = shared
  root = tmp_path_factory.mktemp('pair')
  draft_dir = root / 'draft'
  checkpoints.save_t5x_checkpoint(t5.init_params(DRAFT, jax.random.PRNGKey(7), 4, 4),
                                  draft_dir, step=3)
  gin_file = root / 'tiny_pair.gin'
  lines = [
      'decode.pair_dir = None',
      f"decode.target_checkpoint = '{target}'",
      f"decode.draft_checkpoint = '{draft_dir}'",
      f"decode.vocab_path = '{vocab}'",
      'decode.target_config = @target/network.T5Config()',
      'decode.draft_config = @draft/network.T5Config()',
      'decode.max_input_len = 16',
      'decode.max_decode_len = 10',
      'decode.batch_size = 3',
      'decode.gamma = 3',
  ]
  for scope, cfg in (('target', dict(emb_dim=8, num_heads=4, head_dim=3, mlp_dim=16,
                                     num_encoder_layers=2, num_decoder_layers=2)),
                     ('draft', dict(emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                                    num_encoder_layers=1, num_decoder_layers=1))):
    cfg.update(vocab_size=32128, dropout_rate=0.0, logits_via_embedding=False)
    lines += [f'{scope}/network.T5Config.{k} = {v!r}' for k, v in cfg.items()]
    lines.append(f"{scope}/network.T5Config.mlp_activations = ('gelu', 'linear')")
  gin_file.write_text('\n'.join(lines) + '\n')
  return gin_file, root


def _tsv(folder: pathlib.Path) -> pathlib.Path:
  path = folder / 'inputs.tsv'
  path.write_text(''.join(f'{s}\t{r}\n' for s, r in zip(SOURCES, REFERENCES)),
                  encoding='utf-8')
  return path


def _argv(gin_file, *bindings):
  return ['--gin_file=configs/runs/decode.gin', f'--gin_file={gin_file}',
          *[f'--gin.{b}' for b in bindings]]


def _read_jsonl(path):
  return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_speculative_job_matches_baseline(pair, tmp_path, capsys):
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  outputs = {}
  for method in ('speculative', 'baseline'):
    out = tmp_path / f'{method}.jsonl'
    rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{out}'", f"decode.method='{method}'"))
    err = capsys.readouterr().err
    assert rc == 0, err
    # The over-long input is truncated with exactly one warning.
    assert 'truncated' in err and 'inputs.tsv:3' in err
    rows = _read_jsonl(out)
    # Outputs cut at max_decode_len are marked per row, counted, and warned about once.
    cut = sum(r['ended'] == 'max_decode_len' for r in rows)
    assert all(r['ended'] in ('eos', 'max_decode_len') for r in rows)
    assert all(r['tokens'] == 10 for r in rows if r['ended'] == 'max_decode_len')
    assert err.count('warning:') == 1 + (cut > 0)
    assert (f'{cut} of 5 outputs reached decode.max_decode_len=10' in err) == (cut > 0)
    assert [r['inputs'] for r in rows] == SOURCES
    assert [r['targets'] for r in rows] == REFERENCES
    assert [r.get('truncated', False) for r in rows] == [False, False, True, False, False]
    for r in rows:
      assert set(r) >= {'inputs', 'prediction', 'targets', 'target_calls', 'drafted',
                        'accepted', 'tokens'}
      assert 1 <= r['tokens'] <= 10 and 1 <= r['target_calls'] <= r['tokens']
      assert 0 <= r['accepted'] <= r['drafted']
    summary = json.loads((tmp_path / f'{method}.jsonl.summary.json').read_text())
    assert summary['examples'] == 5 and summary['batches'] == 2
    assert summary['padding_rows'] == 1 and summary['truncated_inputs'] == 1
    assert summary['cut_at_max_decode_len'] == cut
    assert 'checkpoint_dtype' in summary  # a run with params cast at load says so
    assert summary['compile_s'] is not None and summary['run_s'] > 0
    assert summary['tokens'] == sum(r['tokens'] for r in rows)
    assert isinstance(summary['bleu'], float)
    assert not list(tmp_path.glob('.*.tmp'))
    outputs[method] = (rows, summary)

  spec, base = outputs['speculative'][0], outputs['baseline'][0]
  # Greedy speculative decoding is exact: same text, same length.
  assert [r['prediction'] for r in spec] == [r['prediction'] for r in base]
  assert [r['tokens'] for r in spec] == [r['tokens'] for r in base]
  assert all(r['drafted'] == 0 and r['target_calls'] == r['tokens'] for r in base)
  s = outputs['speculative'][1]
  assert s['drafted'] > 0 and 0.0 <= s['alpha'] <= 1.0 + 1e-6
  assert s['tokens_per_target_call'] >= 1.0
  assert outputs['baseline'][1]['tokens_per_target_call'] == 1.0


def _assert_clean_failure(rc, capsys, out, *needles, code=2):
  err = capsys.readouterr().err
  assert rc == code, err
  assert 'Traceback' not in err and 'In call to configurable' not in err
  for needle in needles:
    assert needle in err, err
  assert not out.exists()
  assert not list(out.parent.glob(f'.{out.name}.*'))
  return err


@pytest.fixture
def no_loading(monkeypatch):
  """Fails the test if a checkpoint is loaded (errors must come before that)."""
  from specdec_jax import checkpoints

  def boom(*a, **k):
    raise AssertionError('checkpoint loaded before the input was validated')
  monkeypatch.setattr(checkpoints, 'load_t5x_checkpoint', boom)


def test_output_path_that_is_the_input_is_refused(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('A dog.\n')
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{tmp_path}/./in.txt'"))
  err = capsys.readouterr().err
  assert rc == 2 and 'would overwrite the input' in err, err
  assert inp.read_text() == 'A dog.\n'


def test_missing_input_file(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  missing = tmp_path / 'nope.txt'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{missing}'",
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, str(missing), 'not found')


def test_empty_line_names_file_and_line(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('A dog.\nA cat.\n\nA bird.\n')
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, f'{inp}:3', 'empty')


def test_over_long_input_error_mode(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('A dog.\n' + 'word ' * 40 + '\n')
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", "decode.on_long_input='error'"))
  _assert_clean_failure(rc, capsys, out, f'{inp}:2', 'max_input_len=16')


def test_max_input_len_shorter_than_the_prefix(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, "decode.prefix='translate English to German: '",
                             'decode.max_input_len=4', f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, 'decode.max_input_len=4 leaves no room')


@pytest.mark.parametrize('binding, needle', [
    ('decode.gama=3', "doesn't have a parameter named 'gama'"),
    ('decod.gamma=3', "No configurable matching 'decod'"),
])
def test_unknown_gin_binding(pair, tmp_path, capsys, binding, needle):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, binding, f"decode.output_path='{out}'"))
  err = _assert_clean_failure(rc, capsys, out, 'invalid gin configuration', needle)
  assert binding.split('=')[0] in err.replace(' = ', '=').replace(' ', '')


def test_unknown_gin_binding_raises_in_library_use(pair):
  gin_file, _ = pair
  with pytest.raises(ValueError, match='gama'):
    decode_lib.run(_argv(gin_file, 'decode.gama=3'))


def test_wrong_shape_checkpoint(pair, tmp_path, capsys):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, 'draft/network.T5Config.emb_dim=16',
                             f"decode.output_path='{out}'"))
  err = _assert_clean_failure(rc, capsys, out, 'decode.draft_checkpoint', 'shape')
  assert '16' in err and '8' in err


def test_missing_checkpoint_binding(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, 'decode.target_checkpoint=None',
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, 'bind decode.target_checkpoint=')
  rc = decode_lib.main(_argv(gin_file, f"decode.target_checkpoint='{tmp_path / 'none'}'",
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, 'decode.target_checkpoint', str(tmp_path / 'none'))


def test_t5_1_1_pair_config_needs_checkpoints(tmp_path, capsys, no_loading):
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(['--gin_file=configs/runs/decode.gin',
                        '--gin_file=configs/pairs/t5_1_1_small_to_xxl.gin',
                        f"--gin.decode.output_path='{out}'"])
  _assert_clean_failure(rc, capsys, out, 'bind decode.target_checkpoint=')


def test_demo_pair_missing_is_reported(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(paths, 'ASSETS_DIR', tmp_path / 'assets')
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(['--gin_file=configs/runs/decode.gin',
                        f"--gin.decode.output_path='{out}'"])
  _assert_clean_failure(rc, capsys, out, 'demo model pair is not available', code=3)


def test_error_during_decoding_leaves_no_output(pair, tmp_path, monkeypatch, capsys):
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('\n'.join(SOURCES[:2] + SOURCES[3:]) + '\n')
  out = tmp_path / 'o.jsonl'
  calls = []

  def fake(p, batch, bi):  # First batch fine (and written), then a failure.
    calls.append(bi)
    if len(calls) > 2:  # warm-up + first batch
      raise RuntimeError('device lost')
    n = batch.tokens.shape[0]
    ones = np.ones(n, np.int64)
    return np.ones((n, 10), np.int32), dict(target_calls=ones, drafted=ones, accepted=ones,
                                            alpha_sum=ones * 1.0, alpha_count=ones,
                                            tokens=ones)
  monkeypatch.setattr(decode_outputs, '_decode_batch', fake)
  with pytest.raises(RuntimeError, match='device lost'):
    decode_lib.run(_argv(gin_file, f"decode.input_path='{inp}'",
                         f"decode.output_path='{out}'"))
  assert not out.exists() and not decode_lib.summary_path_for(out).exists()
  assert not list(tmp_path.glob('.o.jsonl.*'))


# --- inputs without models -------------------------------------------------------

def test_input_formats(tmp_path):
  txt = tmp_path / 'a.txt'
  txt.write_bytes('One.\r\nTwo words.\n'.encode())
  assert [r.inputs for r in inputs_lib.read_file(txt)] == ['One.', 'Two words.']
  gz = tmp_path / 'b.tsv.gz'
  with gzip.open(gz, 'wt', encoding='utf-8') as f:
    f.write('Hello.\tHallo.\nBye.\n')
  recs = inputs_lib.read_file(gz)
  assert [(r.inputs, r.targets) for r in recs] == [('Hello.', 'Hallo.'), ('Bye.', None)]
  js = tmp_path / 'c.jsonl'
  js.write_text('{"src": "Hi.", "ref": "Hallo."}\n{"src": "Yo."}\n')
  recs = inputs_lib.read_file(js, input_field='src', target_field='ref')
  assert [(r.inputs, r.targets) for r in recs] == [('Hi.', 'Hallo.'), ('Yo.', None)]
  with pytest.raises(ValueError, match=r'c\.jsonl:1: no field'):
    inputs_lib.read_file(js)
  bad = tmp_path / 'd.tsv'
  bad.write_text('a\tb\tc\n')
  with pytest.raises(ValueError, match=r'd\.tsv:1: 3 tab-separated columns'):
    inputs_lib.read_file(bad)
  with pytest.raises(ValueError, match='is a folder'):
    inputs_lib.read_file(tmp_path)
  builtin = inputs_lib.read_records()
  assert len(builtin) == 8 and all(r.targets is None for r in builtin)


def test_seqio_task_inputs():
  try:
    root = paths.data_dir()
  except FileNotFoundError as e:
    pytest.skip(str(e))
  recs = inputs_lib.read_records(task_name='specdec_ende_multi30k', task_split='test',
                                 max_examples=3)
  with gzip.open(root / 'ende/multi30k/test_2016_flickr.en.gz', 'rt') as f:
    en = [next(f).rstrip('\n') for _ in range(3)]
  with gzip.open(root / 'ende/multi30k/test_2016_flickr.de.gz', 'rt') as f:
    de = [next(f).rstrip('\n') for _ in range(3)]
  assert [r.inputs for r in recs] == ['translate English to German: ' + s for s in en]
  assert [r.targets for r in recs] == de and all(r.prefixed for r in recs)
  with pytest.raises(ValueError, match='Unknown seqio task'):
    inputs_lib.read_records(task_name='no_such_task')


def test_pair_dir_with_pair_json(pair, shared, tmp_path):
  """A pair folder like the shipped demo pair: pair.json + target/ + draft/ + vocab/."""
  import shutil
  gin_file, root = pair
  target, vocab = shared
  folder = tmp_path / 'my_pair'
  (folder / 'vocab').mkdir(parents=True)
  shutil.copy(vocab, folder / 'vocab' / 't5.model')
  (folder / 'target').mkdir()
  shutil.copy(target, folder / 'target' / 'checkpoint_0')  # A single msgpack file.
  shutil.copytree(root / 'draft', folder / 'draft')
  target_cfg = dict(vocab_size=32128, emb_dim=8, num_heads=4, head_dim=3, mlp_dim=16,
                    num_encoder_layers=2, num_decoder_layers=2, dtype='float32',
                    mlp_activations=['gelu', 'linear'], dropout_rate=0.0,
                    logits_via_embedding=False)
  draft_cfg = dict(target_cfg, num_heads=2, head_dim=4, num_encoder_layers=1,
                   num_decoder_layers=1)
  (folder / 'pair.json').write_text(json.dumps(
      {'target': {'config': target_cfg}, 'draft': draft_cfg}))
  decode_lib.parse_gin(['configs/runs/decode.gin'],
                       [f"decode.pair_dir = '{folder}'",
                        f"decode.output_path = '{tmp_path / 'o.jsonl'}'"])
  prepared = decode_lib.decode(prepare_only=True)
  assert prepared.pair.name == 'my_pair'
  assert prepared.pair.target_config.num_heads == 4
  assert prepared.pair.draft_config.num_decoder_layers == 1
  assert prepared.pair.draft_checkpoint == str((folder / 'draft').resolve())
  assert len(prepared.examples) == 8  # The built-in examples.
  assert prepared.target_params['decoder']['logits_dense']['kernel'].shape == (8, 32128)
  # Loaded onto the device once (numpy params would be copied there on every call).
  for params in (prepared.target_params, prepared.draft_params):
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(params))
  assert not (tmp_path / 'o.jsonl').exists()


def test_batches_pad_to_length_buckets():
  """`length_buckets`: each batch takes the smallest bucket (or max_input_len) that fits."""
  def ex(i, n):
    return inputs_lib.Example(i, inputs_lib.Record(f'x{i}', None, f'in:{i}'),
                              tuple(range(2, n + 1)) + (1,), False)
  examples = [ex(0, 5), ex(1, 40), ex(2, 70), ex(3, 3)]
  got = [b.tokens.shape for b in inputs_lib.batches(examples, 1, 128, (32, 64))]
  assert got == [(1, 32), (1, 64), (1, 128), (1, 32)]
  got = [b.tokens.shape for b in inputs_lib.batches(examples, 2, 128, (32, 64))]
  assert got == [(2, 64), (2, 128)]
  assert [b.tokens.shape for b in inputs_lib.batches(examples, 4, 128)] == [(4, 128)]
  first = next(inputs_lib.batches(examples, 1, 128, (32,)))
  np.testing.assert_array_equal(first.tokens[0, :6], [2, 3, 4, 5, 1, 0])
  with pytest.raises(ValueError, match='length_buckets'):  # at the call, not when iterated
    inputs_lib.batches(examples, 1, 128, (0,))
  with pytest.raises(ValueError, match='length_buckets'):
    inputs_lib.batches(examples, 1, 128, 32)
  with pytest.raises(ValueError, match='batch_size'):
    inputs_lib.batches(examples, 0, 128)
  with pytest.raises(ValueError, match='in:2: 70 tokens exceed max_input_len=64'):
    inputs_lib.batches(examples, 1, 64)


def test_unquoted_string_binding_gets_a_quoting_hint():
  from specdec_jax.util import flags
  msg = flags.gin_error_message(ValueError('Unable to parse value.'),
                                ['decode.gamma = 3', 'decode.input_path = /x/in.txt'])
  assert "binding 'decode.input_path = /x/in.txt'" in msg
  assert '''--gin.decode.input_path="'/x/in.txt'"''' in msg
  # Literals, references and quoted strings are not flagged.
  for ok in ("decode.x = 'a'", 'decode.x = (1, 2)', 'decode.x = @f()', 'decode.x = %M',
             'decode.x = -0.5', 'decode.x = None', 'decode.x = True'):
    assert flags.gin_error_message(ValueError('e'), [ok]) == 'e'


# --- bad inputs, permissions, Ctrl-C, progress (issue: input and numerics faults) --------

def _fake_decode_batch(interrupt_at=None):
  """A stand-in for `_decode_batch` (no compilation): every row decodes to EOS."""
  calls = []

  def fake(p, batch, bi):
    calls.append(bi)
    if interrupt_at is not None and len(calls) > interrupt_at:
      raise KeyboardInterrupt
    n = batch.tokens.shape[0]
    ones = np.ones(n, np.int64)
    return np.ones((n, 10), np.int32), dict(target_calls=ones, drafted=ones, accepted=ones,
                                            alpha_sum=ones * 1.0, alpha_count=ones,
                                            tokens=ones)
  return fake


@pytest.mark.parametrize('name, body, needles', [
    ('in.jsonl', '{"inputs": "A cat."}\n{"inputs": "A dog \\ud83d runs"}\n',
     ['in.jsonl:2', 'lone UTF-16 surrogate U+D83D']),
    ('in.tsv', 'A cat.\tEine Katze.\n\n', ['in.tsv:2', 'empty']),
    ('in.jsonl', '{"inputs": "A cat."}\n[1, 2]\n', ['in.jsonl:2', 'expected a JSON object']),
    ('in.txt', b'A cat.\n\xff\xfe\n', ['in.txt', 'not valid UTF-8']),
])
def test_bad_input_files_exit_2_before_loading(pair, tmp_path, capsys, no_loading, name, body,
                                               needles):
  gin_file, _ = pair
  inp = tmp_path / name
  if isinstance(body, bytes):
    inp.write_bytes(body)
  else:
    inp.write_text(body, encoding='utf-8')
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, *needles)


def test_byte_order_mark_is_not_in_the_output(pair, tmp_path, monkeypatch, capsys):
  gin_file, _ = pair
  monkeypatch.setattr(decode_outputs, '_decode_batch', _fake_decode_batch())
  for name, body in (('in.txt', 'A dog runs.\nTwo men.\n'),
                     ('in.jsonl', '{"inputs": "A dog runs."}\n{"inputs": "Two men."}\n')):
    inp = tmp_path / name
    inp.write_bytes(b'\xef\xbb\xbf' + body.encode())
    out = tmp_path / f'{name}.out.jsonl'
    rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{out}'"))
    assert rc == 0, capsys.readouterr().err
    assert [r['inputs'] for r in _read_jsonl(out)] == ['A dog runs.', 'Two men.']


@pytest.mark.parametrize('umask, mode', [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_files_follow_the_umask(pair, tmp_path, monkeypatch, capsys, umask, mode):
  gin_file, _ = pair
  monkeypatch.setattr(decode_outputs, '_decode_batch', _fake_decode_batch())
  out = tmp_path / 'o.jsonl'
  old = os.umask(umask)
  try:
    rc = decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'"))
  finally:
    os.umask(old)
  assert rc == 0, capsys.readouterr().err
  for path in (out, decode_lib.summary_path_for(out)):
    assert stat.S_IMODE(path.stat().st_mode) == mode, (path, oct(path.stat().st_mode))


def test_ctrl_c_prints_one_line_exits_130_and_writes_nothing(pair, tmp_path, monkeypatch,
                                                              capsys):
  gin_file, _ = pair
  monkeypatch.setattr(decode_outputs, '_decode_batch', _fake_decode_batch(interrupt_at=2))
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'",  # 8 inputs, 3 batches
                             'decode.max_input_len=64'))
  err = capsys.readouterr().err
  assert rc == 130
  assert err == 'specdec_jax.decode: interrupted; no output written\n', err
  assert not out.exists() and not decode_lib.summary_path_for(out).exists()
  assert not list(tmp_path.glob('.o.jsonl*'))


def test_progress_bar_only_on_a_terminal_or_when_asked(pair, tmp_path, monkeypatch, capsys):
  gin_file, _ = pair
  monkeypatch.delenv('SPECDEC_PROGRESS', raising=False)
  monkeypatch.setattr(decode_outputs, '_decode_batch', _fake_decode_batch())
  out = tmp_path / 'o.jsonl'
  assert decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'")) == 0
  captured = capsys.readouterr()
  assert 'batch' not in captured.err and '3/3' not in captured.err, captured.err  # not a tty
  assert decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'",
                               'decode.progress=True')) == 0
  captured = capsys.readouterr()
  assert '3/3' in captured.err and '3/3' not in captured.out


def test_gamma_larger_than_the_budget(pair, tmp_path, capsys):
  """γ + 1 > max_decode_len: exit 0, and every output within the budget."""
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('A dog runs in the park.\nTwo men are talking.\nA girl is reading.\n')
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", 'decode.max_decode_len=4',
                             'decode.gamma=4'))
  assert rc == 0, capsys.readouterr().err
  rows = _read_jsonl(out)
  assert len(rows) == 3 and all(1 <= r['tokens'] <= 4 for r in rows)
  assert all(r['target_calls'] >= 1 for r in rows)


def _run_named(gin_file, inp, folder, capsys, name, extra):
  """Runs the job on `inp` into `<folder>/<name>.jsonl`: (predictions, summary, captured)."""
  out = folder / f'{name}.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", *extra))
  captured = capsys.readouterr()
  assert rc == 0, captured.err
  summary = json.loads((folder / f'{name}.jsonl.summary.json').read_text())
  return [r['prediction'] for r in _read_jsonl(out)], summary, captured


@pytest.mark.parametrize('policy', ["'heuristic'", '@specdec_jax.DraftPolicy()'])
def test_draft_policy_binding(pair, tmp_path, capsys, policy):
  """An adaptive draft_policy (by name or as a configurable) gives the baseline's text."""
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  preds = {}
  for name, extra in (('baseline', ["decode.method='baseline'"]),
                      ('policy', [f'decode.draft_policy={policy}',
                                  "specdec_jax.DraftPolicy.kind='confidence'",
                                  'specdec_jax.DraftPolicy.threshold=0.6'][
                                      :1 if policy.startswith("'") else 3])):
    preds[name], summary, captured = _run_named(gin_file, inp, tmp_path, capsys, name, extra)
  assert preds['policy'] == preds['baseline']
  kind = 'heuristic' if policy.startswith("'") else 'confidence'
  assert summary['draft_policy']['kind'] == kind
  assert f'draft_policy={kind}' in captured.out
  # (< 1 is possible: near the length budget a round may draft nothing.)
  assert 0.0 < summary['mean_draft_length'] <= 4.0


def test_unknown_draft_policy_is_a_clean_error(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'",
                             "decode.draft_policy='greedy'"))
  _assert_clean_failure(rc, capsys, out, 'draft_policy', 'heuristic')


# --- a T5X model gin as the model description ---------------------------------------------

def _speculative_model_gin() -> pathlib.Path:
  for rel in ('specdec_jax/configs/t5x/speculative_model.gin',
              'configs/t5x/speculative_model.gin'):
    if (paths.REPO_ROOT / rel).is_file():
      return paths.REPO_ROOT / rel
  pytest.skip('the T5X model gin speculative_model.gin is not in the repository')


@pytest.fixture(scope='module')
def t5x_model_gin(pair, shared):
  """The project's T5X model gin, sized down to the tiny pair (as a user would)."""
  _, root = pair
  _, vocab = shared
  path = root / 'tiny_t5x_model.gin'
  lines = [f"include '{_speculative_model_gin()}'"]
  for scope, cfg in (('', dict(emb_dim=8, num_heads=4, head_dim=3, mlp_dim=16,
                               num_encoder_layers=2, num_decoder_layers=2)),
                     ('draft/', dict(emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                                     num_encoder_layers=1, num_decoder_layers=1))):
    lines += [f'{scope}network.T5Config.{k} = {v!r}' for k, v in cfg.items()]
  lines += [f"VOCAB_PATH = '{vocab}'", f"DRAFT_CHECKPOINT = '{root / 'draft'}'", 'GAMMA = 3']
  path.write_text('\n'.join(lines) + '\n')
  return path


def _t5x_argv(model_gin, shared, *bindings, checkpoint=True):
  target, _ = shared
  return ([f'--gin_file={model_gin}']
          + ([f"--gin.CHECKPOINT_PATH='{target}'"] if checkpoint else [])
          + ['--gin.decode.max_input_len=16', '--gin.decode.max_decode_len=10',
             '--gin.decode.batch_size=3'] + [f'--gin.{b}' for b in bindings])


def test_t5x_model_gin_runs_the_same_pair(pair, shared, t5x_model_gin, tmp_path, capsys):
  """One gin file for t5x.infer and the job: same configs, checkpoints, γ and output."""
  gin_file, root = pair
  target, _ = shared
  inp = _tsv(tmp_path)
  out_t5x, out_job = tmp_path / 't5x.jsonl', tmp_path / 'job.jsonl'
  decode_lib.parse_gin([str(t5x_model_gin)], [f"CHECKPOINT_PATH = '{target}'"])
  p = decode_lib.decode(prepare_only=True, check_bindings=True)
  decode_lib.parse_gin(['configs/runs/decode.gin', str(gin_file)], [])
  q = decode_lib.decode(prepare_only=True, check_bindings=True)
  assert p.pair.target_config == q.pair.target_config
  assert p.pair.draft_config == q.pair.draft_config
  assert p.pair.target_checkpoint == q.pair.target_checkpoint == str(target)
  assert p.pair.draft_checkpoint == str((root / 'draft').resolve())
  assert (p.settings['gamma'], p.settings['temperature'], p.settings['method']) == (
      3, 0.0, 'speculative')
  rc = decode_lib.main(_t5x_argv(t5x_model_gin, shared, f"decode.input_path='{inp}'",
                                 f"decode.output_path='{out_t5x}'"))
  assert rc == 0, capsys.readouterr().err
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out_job}'"))
  assert rc == 0, capsys.readouterr().err
  assert _read_jsonl(out_t5x) == _read_jsonl(out_job)
  summary = json.loads(decode_lib.summary_path_for(out_t5x).read_text())
  assert summary['gamma'] == 3 and summary['target_checkpoint'] == str(target)


def test_t5x_model_gin_macros_are_honoured(shared, t5x_model_gin, tmp_path):
  target, _ = shared
  out = tmp_path / 'o.jsonl'
  decode_lib.parse_gin([str(t5x_model_gin)], [
      f"CHECKPOINT_PATH = '{target}'", 'GAMMA = 2', 'TEMPERATURE = 0.5',
      'models.SpeculativeEncoderDecoderModel.topp = 0.9', f"decode.output_path = '{out}'"])
  p = decode_lib.decode(prepare_only=True, check_bindings=True)
  assert (p.settings['gamma'], p.settings['temperature'], p.settings['topp']) == (2, 0.5, 0.9)
  decode_lib.parse_gin([str(t5x_model_gin)], [
      f"CHECKPOINT_PATH = '{target}'",
      'models.SpeculativeEncoderDecoderModel.decode_fn = '
      '@specdec_jax.t5x_decoding.temperature_sample'])
  p = decode_lib.decode(prepare_only=True, check_bindings=True)
  assert p.settings['method'] == 'baseline' and p.draft_params is None


@pytest.mark.parametrize('extra, needles', [
    # The demo / decode.* pair plus a T5X macro the job would ignore.
    (['CHECKPOINT_PATH="/ckpt/x"'], ["CHECKPOINT_PATH = '/ckpt/x'", 'decode.target_checkpoint',
                                      'does not use']),
    (['GAMMA=5'], ['GAMMA = 5', 'decode.gamma']),
    (['TEMPERATURE=0.7'], ['TEMPERATURE = 0.7', 'decode.temperature']),
    # A scoped T5Config binding that a more specific one overrides, and an unscoped one.
    (['network.T5Config.emb_dim=16'], ['network.T5Config.emb_dim = 16', 'more specific']),
])
def test_unused_bindings_are_errors(pair, tmp_path, capsys, no_loading, extra, needles):
  gin_file, _ = pair
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.output_path='{out}'", *extra))
  _assert_clean_failure(rc, capsys, out, 'gin binding(s) the decode job does not use', *needles)


def test_unused_binding_raises_in_library_use(pair):
  gin_file, _ = pair
  with pytest.raises(ValueError, match='CHECKPOINT_PATH'):
    decode_lib.run(_argv(gin_file, "CHECKPOINT_PATH='/x'"))


@pytest.mark.parametrize('extra, needles, checkpoint', [
    ([], ['No target checkpoint', '--gin.CHECKPOINT_PATH='], False),
    (['decode.gamma=5'], ['decode.gamma', 'GAMMA'], True),
    (['decode.pair_dir="demo_ende"'], ['decode.pair_dir', 'configs/runs/decode.gin'], True),
    (['models.SpeculativeEncoderDecoderModel.rescale_log_probs=False'],
     ['rescale_log_probs', 'not used by the decode job'], True),
    (['models.SpeculativeEncoderDecoderModel.decode_fn=@network.Transformer'],
     ['decode_fn', 'cannot be run by the decode job'], True),
    (['MODEL=@network.Transformer()'], ['MODEL = @network.Transformer()',
                                         'cannot be run by the decode job'], True),
    (['decode.method="speculative"',
      'models.SpeculativeEncoderDecoderModel.decode_fn='
      '@specdec_jax.t5x_decoding.temperature_sample'], ['contradicts'], True),
    (['target/network.T5Config.emb_dim=16'],  # the T5X gin's target is unscoped
     ['target/network.T5Config.emb_dim = 16', 'does not use'], True),
])
def test_t5x_model_gin_bindings_that_cannot_be_honoured(shared, t5x_model_gin, tmp_path,
                                                        capsys, no_loading, extra, needles,
                                                        checkpoint):
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_t5x_argv(t5x_model_gin, shared, f"decode.output_path='{out}'", *extra,
                                 checkpoint=checkpoint))
  _assert_clean_failure(rc, capsys, out, *needles)


def test_t5x_model_gin_with_the_decode_run_gin_is_an_error(shared, t5x_model_gin, tmp_path,
                                                           capsys, no_loading):
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(['--gin_file=configs/runs/decode.gin', *_t5x_argv(
      t5x_model_gin, shared, f"decode.output_path='{out}'")])
  _assert_clean_failure(rc, capsys, out, 'The T5X model gin (MODEL) describes the model pair',
                        'decode.pair_dir', 'decode.gamma → GAMMA')


def test_block_verification_binding(pair, tmp_path, capsys):
  """decode.verification='block': greedy text identical to the token rule's, recorded in
  the summary; at T = 1 it decodes and reports its statistics; a bad value exits 2."""
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  preds, summaries = {}, {}
  for name, extra in (('token', []), ('block', ["decode.verification='block'"]),
                      ('block_t1', ["decode.verification='block'", 'decode.temperature=1.0'])):
    preds[name], summaries[name], _ = _run_named(gin_file, inp, tmp_path, capsys, name, extra)
  assert preds['block'] == preds['token']
  assert summaries['token']['verification'] == 'token'
  assert summaries['block']['verification'] == 'block'
  assert summaries['block_t1']['verification'] == 'block' and summaries['block_t1']['examples'] > 0
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{tmp_path / 'x.jsonl'}'",
                             "decode.verification='blocks'"))
  err = capsys.readouterr().err
  assert rc == 2 and "decode.verification must be 'token'" in err, err
  assert not (tmp_path / 'x.jsonl').exists()


def test_unusable_cache_folder_is_one_warning_line_and_errors_come_first(pair, tmp_path, capsys):
  """--compilation_cache_dir under a regular file: one `warning:` line, the job runs (exit 0);
  with a configuration error as well, only the error is printed (exit 2)."""
  gin_file, _ = pair
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')
  inp = _tsv(tmp_path)
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{tmp_path / 'o.jsonl'}'")
                       + [f'--compilation_cache_dir={blocker / "cache"}'])
  err = capsys.readouterr().err
  assert rc == 0, err
  lines = [line for line in err.splitlines() if 'compilation cache' in line]
  assert len(lines) == 1 and lines[0].startswith('warning: JAX compilation cache off'), err
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{tmp_path / 'x.jsonl'}'",
                             "decode.verification='blocks'")
                       + [f'--compilation_cache_dir={blocker / "other"}'])
  err = capsys.readouterr().err
  assert rc == 2 and 'compilation cache' not in err and 'decode.verification' in err, err


def test_suppress_ids_setting(pair, tmp_path, capsys):
  """`decode.suppress_ids`: suppressing the first pieces of the plain greedy outputs changes
  them (tests/test_suppress_ids.py checks that no suppressed id is emitted), the summary
  lists them compactly, greedy speculative still equals greedy baseline under them, and
  bad values exit 2 before any model is loaded."""
  from specdec_jax import text
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  vocab = text.vocabulary.load_vocabulary(str(paths.data_dir() / 't5_vocab/sentencepiece.model'))
  plain = tmp_path / 'plain.jsonl'
  assert decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{plain}'")) == 0
  first = [vocab.encode(r['prediction'])[:1] for r in _read_jsonl(plain)]
  ids = sorted({t for f in first for t in f} - {0, 1})
  assert ids  # the tiny target's greedy outputs start with real pieces
  preds = {}
  for method in ('speculative', 'baseline'):
    out = tmp_path / f'{method}.jsonl'
    assert decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                                 f"decode.output_path='{out}'", f"decode.method='{method}'",
                                 f'decode.suppress_ids={ids + [[32100, 32127]]}')) == 0
    preds[method] = [r['prediction'] for r in _read_jsonl(out)]
    summary = json.loads((tmp_path / f'{method}.jsonl.summary.json').read_text())
    assert summary['suppress_ids'] == decode_lib.pair.compact_ids(ids + list(range(32100, 32128)))
  assert preds['speculative'] == preds['baseline']
  assert preds['baseline'] != [r['prediction'] for r in _read_jsonl(plain)]
  capsys.readouterr()
  for bad, message in (('[-3]', 'decode.suppress_ids: -3 is not a token id'),
                       ('[[9, 4]]', 'is not a range [first, last]'),
                       ('[40000]', "beyond the target model's vocab_size=32128")):
    rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{tmp_path}/bad.jsonl'",
                               f'decode.suppress_ids={bad}'))
    assert rc == 2 and message in capsys.readouterr().err
  assert not (tmp_path / 'bad.jsonl').exists()


def test_decode_job_reads_a_checkpoint_holding_the_draft(pair, shared, tmp_path, capsys):
  """A checkpoint as T5X saves it for SpeculativeEncoderDecoderModel (draft params under
  `target/draft`) decodes without a separate draft checkpoint, the same as the two
  checkpoints apart; without a draft in it, the error names both ways to give one."""
  from specdec_jax import checkpoints
  gin_file, root = pair
  target_ckpt, _ = shared
  target = checkpoints.load_t5x_checkpoint(target_ckpt)
  draft = checkpoints.load_t5x_checkpoint(root / 'draft')
  both = checkpoints.save_t5x_checkpoint({**target, 'draft': draft}, tmp_path / 'both', step=9)
  inp = _tsv(tmp_path)
  apart, joint = tmp_path / 'apart.jsonl', tmp_path / 'joint.jsonl'
  assert decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{apart}'")) == 0
  assert decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{joint}'",
                               f"decode.target_checkpoint='{both}'",
                               'decode.draft_checkpoint=None')) == 0
  assert _read_jsonl(joint) == _read_jsonl(apart)
  capsys.readouterr()
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{tmp_path}/x.jsonl'",
                             'decode.draft_checkpoint=None'))
  err = capsys.readouterr().err
  assert rc == 2 and 'holds no draft under target/draft' in err
  assert 'decode.draft_checkpoint' in err


@pytest.mark.parametrize('dtype', ['int8', 'float8_e5m2'])
def test_non_floating_checkpoint_dtype_is_refused_first(pair, tmp_path, capsys, dtype):
  gin_file, _ = pair
  rc = decode_lib.main(_argv(gin_file, f"decode.output_path='{tmp_path}/x.jsonl'",
                             f"decode.checkpoint_dtype='{dtype}'"))
  assert rc == 2
  assert "decode.checkpoint_dtype must be one of ('float32'" in capsys.readouterr().err
  assert not list(tmp_path.iterdir())


def test_bfloat16_params_on_cpu_warn_once(monkeypatch):
  """Decoding bfloat16 params on the CPU warns once per process, naming the float32 cast."""
  import jax.numpy as jnp
  from specdec_jax import generate
  from specdec_jax.generate import common
  monkeypatch.setattr(common, '_BF16_WARNED', [])
  cfg = DRAFT.replace(vocab_size=64)
  model = t5.Transformer(cfg)
  params = jax.tree.map(lambda x: x.astype(jnp.bfloat16),
                        t5.init_params(cfg, jax.random.PRNGKey(0)))
  enc = np.ones((1, 3), np.int32)
  with pytest.warns(RuntimeWarning, match="bfloat16 arrays .* decode.checkpoint_dtype='float32'"):
    generate.t5_generate(model, params, enc, 4)
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    generate.t5_generate(model, params, enc, 4)  # once per process


# --- issue #43: damaged inputs never become quiet wrong answers ----------------------------

def test_a_damaged_checkpoint_is_named_damaged_not_mismatched(pair, tmp_path, capsys):
  """A draft checkpoint with one array folder deleted: exit 2, "damaged", naming the param."""
  import shutil
  gin_file, root = pair
  draft = tmp_path / 'draft'
  shutil.copytree(root / 'draft', draft)
  step = next(draft.glob('checkpoint_*'))
  shutil.rmtree(next(step.glob('target.decoder.layers_0.mlp.wi_0.kernel')))
  inp = _tsv(tmp_path)
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'",
                             f"decode.draft_checkpoint='{draft}'"))
  err = _assert_clean_failure(rc, capsys, out, 'damaged', 'decoder/layers_0/mlp/wi_0/kernel',
                              'decode.draft_checkpoint')
  assert 'does not fit' not in err


@pytest.mark.parametrize('binding, needle', [
    ('decode.topk=40000', "decode.topk=40000 exceeds the target model's vocab_size=32128"),
    ('decode.seed=-1', 'decode.seed must be an int in [0, 2**32)'),
    ('decode.seed=4294967296', 'decode.seed must be an int in [0, 2**32)'),
])
def test_settings_out_of_range_are_refused_before_loading(pair, tmp_path, capsys, no_loading,
                                                          binding, needle):
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", "decode.temperature=1.0",
                             binding))
  _assert_clean_failure(rc, capsys, out, needle)


def test_summary_path_that_is_a_folder_is_refused_before_loading(pair, tmp_path, capsys,
                                                                 no_loading):
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  out = tmp_path / 'o.jsonl'
  (tmp_path / 'o.jsonl.summary.json').mkdir()
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'"))
  _assert_clean_failure(rc, capsys, out, 'o.jsonl.summary.json', 'is a folder')


def test_symlinked_output_is_written_through(pair, tmp_path, capsys):
  gin_file, _ = pair
  inp = tmp_path / 'in.txt'
  inp.write_text('A dog runs.\n')
  real = tmp_path / 'real'
  real.mkdir()
  (real / 'o.jsonl').write_text('old\n')
  link = tmp_path / 'o.jsonl'
  link.symlink_to(real / 'o.jsonl')
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{link}'", "decode.method='baseline'"))
  assert rc == 0, capsys.readouterr().err
  assert link.is_symlink()
  assert _read_jsonl(real / 'o.jsonl')[0]['inputs'] == 'A dog runs.'


def test_sampled_baseline_rows_do_not_depend_on_the_batch(pair, tmp_path, capsys):
  """At T = 1 the baseline takes one key per row (from the example's index), as the
  speculative decoder does: a row's output is the same at batch size 1 and 3."""
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  preds = {}
  for batch_size in (1, 3):
    out = tmp_path / f'b{batch_size}.jsonl'
    rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                               f"decode.output_path='{out}'", "decode.method='baseline'",
                               'decode.temperature=1.0', f'decode.batch_size={batch_size}'))
    assert rc == 0, capsys.readouterr().err
    preds[batch_size] = [r['prediction'] for r in _read_jsonl(out)]
  assert preds[1] == preds[3]
  assert len(set(preds[1])) > 1  # sampled, not one constant output


def test_output_inside_a_checkpoint_it_reads_is_refused_before_loading(pair, tmp_path, capsys,
                                                                       no_loading):
  gin_file, root = pair
  inp = _tsv(tmp_path)
  step = next((root / 'draft').glob('checkpoint_*'))
  before = (step / 'checkpoint').read_bytes()
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{step / 'checkpoint'}'"))
  err = capsys.readouterr().err
  assert rc == 2 and 'would overwrite what the draft checkpoint reads' in err, err
  assert (step / 'checkpoint').read_bytes() == before


def test_suppressing_eos_is_refused(pair, tmp_path, capsys, no_loading):
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", 'decode.suppress_ids=[1]'))
  _assert_clean_failure(rc, capsys, out, 'decode.suppress_ids holds the EOS id 1')


@pytest.mark.parametrize('binding', ['decode.max_decode_len=1000000000',
                                     'decode.batch_size=100000000',
                                     'decode.max_input_len=100000000'])
def test_sizes_beyond_memory_are_refused_before_loading(pair, tmp_path, capsys, no_loading,
                                                        binding):
  gin_file, _ = pair
  inp = _tsv(tmp_path)
  out = tmp_path / 'o.jsonl'
  rc = decode_lib.main(_argv(gin_file, f"decode.input_path='{inp}'",
                             f"decode.output_path='{out}'", binding))
  _assert_clean_failure(rc, capsys, out, 'GiB are available', binding.split('=')[0])


def test_decode_bytes_counts_the_demo_sizes():
  """The estimate is a lower bound of the right size: the demo pair's batch of 8 needs
  far less than a GiB, and it grows linearly with the batch."""
  from specdec_jax.decode import job
  from specdec_jax.decode import pair as pair_lib
  demo = pair_lib.resolve_pair('demo_ende', target_config=None, draft_config=None,
                               target_checkpoint=None, draft_checkpoint=None, vocab_path=None,
                               need_draft=True)
  configs = [('target', demo.target_config), ('draft', demo.draft_config)]
  s = dict(batch_size=8, gamma=4, method='speculative', max_decode_len=64, max_input_len=64)
  small = job.decode_bytes(s, configs)
  assert 50e6 < small < 2 ** 30  # ≥ the float32 params (about 25M + 2.4M scalars)
  assert job.decode_bytes(dict(s, batch_size=80), configs) > small
