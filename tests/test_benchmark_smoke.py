"""Smoke test of `python -m specdec_jax.benchmark` in quick mode on a tiny random pair.

The pair folder has the demo pair's layout (pair.json, target/, draft/, vocab/)
with two tiny random T5 1.1 models saved by `checkpoints.save_t5x_checkpoint` and
the demo's SentencePiece vocabulary. Checks the report's arithmetic and that the
two methods produced identical tokens at temperature 0.
"""

import json
import math
import shutil
import types

import gin
import jax
import numpy as np
import pytest

from specdec_jax.benchmark import job as bench
from specdec_jax.benchmark import rows as rows_lib
from specdec_jax import decode as decode_lib
from specdec_jax.util import paths
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

VOCAB = paths.ASSETS_DIR / 'demo_ende' / 'vocab'


def _cfg(**kw):
  base = dict(vocab_size=8192, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
              num_encoder_layers=2, num_decoder_layers=2, mlp_activations=('gelu', 'linear'),
              logits_via_embedding=False, dropout_rate=0.0)
  base.update(kw)
  return T5Config(**base)


@pytest.fixture(autouse=True)
def _clear_gin():
  yield
  gin.clear_config()


@pytest.fixture(scope='module')
def tiny_pair(tmp_path_factory):
  checkpoints = pytest.importorskip('specdec_jax.checkpoints')
  models = list(VOCAB.glob('*.model')) if VOCAB.is_dir() else []
  if len(models) != 1:
    pytest.skip(f'no SentencePiece model in {VOCAB}')
  root = tmp_path_factory.mktemp('tiny_pair')
  target, draft = _cfg(), _cfg(emb_dim=8, head_dim=4, num_encoder_layers=1,
                               num_decoder_layers=1)
  checkpoints.save_t5x_checkpoint(t5.init_params(target, jax.random.PRNGKey(0), 4, 4),
                                  root / 'target', step=1)
  checkpoints.save_t5x_checkpoint(t5.init_params(draft, jax.random.PRNGKey(1), 4, 4),
                                  root / 'draft', step=1)
  (root / 'vocab').mkdir()
  shutil.copy(models[0], root / 'vocab' / models[0].name)
  # The layout scripts/export_demo.py writes for the demo pair.
  (root / 'pair.json').write_text(json.dumps({
      'target': {'step': 1, 't5_config': bench.config_dict(target)},
      'draft': {'step': 1, 't5_config': bench.config_dict(draft)}}))
  sentences = root / 'sentences.en'
  sentences.write_text('A dog runs in the park.\nTwo men are talking.\n'
                       'A girl is reading a book.\nThe cat sleeps on the sofa.\n'
                       'A fifth sentence that quick mode does not read.\n')
  return root, sentences


def test_load_pair_puts_params_on_the_device(tiny_pair):
  """Once, at load: numpy params would be copied to the device on every decode call
  (for the demo pair 4-15 ms per call, up to a quarter of the speculative call at batch 1)."""
  root, _ = tiny_pair
  _, _, models = bench.load_pair(str(root), None, None, None, None, None, 100)
  for params in (models.target_params, models.draft_params):
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(params))


def test_quick_mode_report(tiny_pair, tmp_path):
  root, sentences = tiny_pair
  out = tmp_path / 'bench'
  decode_lib.parse_gin(['configs/runs/benchmark.gin'], [
      'benchmark.quick = True',
      f"benchmark.pair_dir = '{root}'",
      f"benchmark.output_dir = '{out}'",
      f"benchmark.datasets = (('tiny', '{sentences}'),)",
      'benchmark.max_input_len = 16',
      'benchmark.max_decode_len = 12',
  ])
  res = bench.benchmark()
  for name in ('results.json', 'results.md', 'speedup_vs_gamma.png', 'tokens_per_second.png'):
    assert (out / name).is_file(), name
  on_disk = json.loads((out / 'results.json').read_text())
  assert on_disk['identical_at_t0'] is True
  assert res['settings']['quick'] is True
  rows = on_disk['settings_results']
  assert sorted(r['gamma'] for r in rows) == [2, 4]
  assert {r['batch_size'] for r in rows} == {1} and {r['temperature'] for r in rows} == {0.0}
  assert on_disk['settings']['datasets'][0]['sentences'] == 4
  best = max(rows, key=lambda r: r['speedup'])['gamma']
  for r in rows:
    assert r['identical'] is True
    assert r['sentences'] == 4
    assert r['baseline_tokens'] == r['speculative_tokens']
    assert math.isclose(r['speedup'], r['baseline_time_s']['median'] /
                        r['speculative_time_s']['median'], rel_tol=1e-9)  # same tokens
    assert math.isclose(r['speedup'], r['speculative_tokens_per_s'] /
                        r['baseline_tokens_per_s'], rel_tol=1e-9)
    assert r['baseline_time_s']['min'] <= r['baseline_time_s']['median'] <= \
        r['baseline_time_s']['max']
    a, g, c, v = r['alpha'], r['gamma'], r['c'], r['v']
    assert 0.0 <= a <= 1.0 and 0.0 <= r['acceptance_rate'] <= 1.0
    assert c > 0 and v > 0
    sc = on_disk['step_costs']['1']
    assert math.isclose(c, sc['draft_step_s'] / sc['target_step_s']['1'], rel_tol=1e-9)
    assert math.isclose(v, sc['target_step_s'][str(g + 1)] / sc['target_step_s']['1'],
                        rel_tol=1e-9)
    expected = (1 - a ** (g + 1)) / (1 - a)
    assert math.isclose(r['predicted_speedup_thm38'], expected / (g * c + 1), rel_tol=1e-9)
    assert math.isclose(r['predicted_speedup_v'], expected / (g * c + v), rel_tol=1e-9)
    assert math.isclose(r['efficiency_v'], r['speedup'] / r['predicted_speedup_v'],
                        rel_tol=1e-9)
    # The cost model of every phase, recomputed from the recorded costs.
    t1 = sc['target_step_s']['1']
    (enc,) = sc['encoder'].values()  # 4 short sentences: one input-length bucket
    over = sc['overheads']['0']
    a_spec, a_base = over['spec_round_s'][str(g)] / t1, over['base_step_s'] / t1
    assert math.isclose(r['a_spec'], a_spec, rel_tol=1e-9) and a_spec > 0 and a_base > 0
    e_t, e_d = enc['target_s'] / t1, enc['draft_s'] / t1
    n_tok = r['baseline_tokens']  # batch 1: one row per batch, no padding rows
    base_units = 4 * e_t + n_tok * (1 + a_base)
    spec_units = 4 * (e_t + e_d) + (n_tok / expected) * (g * c + v + a_spec)
    assert math.isclose(r['predicted_speedup'], base_units / spec_units, rel_tol=1e-9)
    assert math.isclose(r['efficiency'], r['speedup'] / r['predicted_speedup'], rel_tol=1e-9)
    assert math.isclose(r['rounds_predicted'], n_tok / expected, rel_tol=1e-9)
    assert r['rounds_measured'] == r['target_calls']  # batch 1: the loop's rounds
    assert r['predicted_best_gamma'] in (2, 4)
    assert 1.0 <= r['tokens_per_target_call'] <= g + 1
    assert r['best_gamma'] == best
  assert on_disk['hf_peer']['skipped'] is True
  md = (out / 'results.md').read_text()
  assert 'speedup' in md and '| tiny |' in md


def test_cpu_info_reads_model_caches_and_matmul_flags(tmp_path):
  """The machine record names the CPU, its data/unified caches (instruction caches left out)
  and the matmul ISA flags present, from /proc/cpuinfo and sysfs (here fixture files)."""
  from specdec_jax.benchmark import report, runner
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text('processor\t: 0\nmodel name\t: Test CPU 9000\n'
                     'flags\t\t: fpu sse2 avx2 fma avx512f amx_bf16 amx_tile\n\n'
                     'processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n')
  for i, (level, kind, size) in enumerate([('1', 'Data', '48K'), ('1', 'Instruction', '64K'),
                                           ('2', 'Unified', '2048K'),
                                           ('3', 'Unified', '491520K')]):
    d = tmp_path / 'cache' / f'index{i}'
    d.mkdir(parents=True)
    for name, value in (('level', level), ('type', kind), ('size', size)):
      (d / name).write_text(value + '\n')
  info = runner.cpu_info(str(cpuinfo), str(tmp_path / 'cache'))
  assert info == {'model': 'Test CPU 9000', 'flags': ['avx2', 'fma', 'avx512f', 'amx_tile',
                                                      'amx_bf16'],
                  'caches_kib': {'L1d': 48, 'L2': 2048, 'L3': 491520}}
  assert report._cpu_text(info) == ('; Test CPU 9000, L2 2 MiB, L3 480 MiB, '
                                    'avx2 fma avx512f amx_tile amx_bf16')
  assert runner.cpu_info(str(tmp_path / 'none'), str(tmp_path / 'none')) == {}
  assert report._cpu_text({}) == ''


def test_predicted_speedup_formula():
  assert math.isclose(bench.predicted_speedup(0.0, 3, 0.1), 1 / 1.3)
  assert math.isclose(bench.predicted_speedup(0.5, 1, 0.0), 1.5)
  assert math.isclose(bench.predicted_speedup(1.0, 4, 0.0, 2.0), 2.5)


class _FakeRunner:
  """What `bench.rows.row` reads from a Runner."""

  def __init__(self, times, n_tokens, gamma=None, stats=None):
    self.times, self.gamma, self.stats = times, gamma, stats
    self.outputs = [list(range(n_tokens))]
    self.num_tokens = n_tokens
    self.first_call_s = 1.0
    self.batches = [types.SimpleNamespace(tokens=np.zeros((1, 8), np.int32))]
    self.row_tokens = [[n_tokens]]
    self.rounds = [stats['target_calls'][0]] if stats else None


def test_speedup_compares_throughput_when_lengths_differ():
  """At T > 0 the methods sample different outputs: speedup is the tokens/s ratio.

  Planted case: the speculative run is faster (0.9 s vs 1.0 s) but emitted fewer
  tokens (80 vs 100), so it is slower per token: 0.889×, not the time ratio 1.11×.
  """
  stats = dict(accepted=[10], drafted=[20], alpha_sum=[6.0], alpha_count=[10],
               tokens=[80], target_calls=[40])
  base = _FakeRunner([1.0, 1.0, 1.0], 100)
  spec = _FakeRunner([0.9, 0.9, 0.9], 80, gamma=2, stats=stats)
  costs = dict(c=0.1, v={'2': 1.2}, target_step_s={'1': 0.01},
               encoder={'8': dict(target_s=0.02, draft_s=0.005)},
               overheads={'1': dict(spec_round_s={'2': 0.001}, base_step_s=0.0005)})
  row = rows_lib.row('d', 1, 1.0, base, spec, costs)
  assert math.isclose(row['speedup'], (80 / 0.9) / (100 / 1.0), rel_tol=1e-12)
  assert math.isclose(row['speedup'], row['speculative_tokens_per_s'] /
                      row['baseline_tokens_per_s'], rel_tol=1e-12)
  assert row['speedup'] < 1.0 and row['identical'] is None


@pytest.mark.parametrize('binding, needle', [
    ('--gin.benchmark.gammas=(0,)', 'benchmark.gammas'),
    ('--gin.benchmark.num_sentences=0', 'benchmark.num_sentences'),
    ('--gin.benchmark.batch_sizes=(0,)', 'benchmark.batch_sizes'),
    ('--gin.benchmark.temperatures=(-1.0,)', 'benchmark.temperatures'),
    ('--gin.benchmark.input_length_buckets=32', 'benchmark.input_length_buckets'),
    ("--gin.benchmark.baseline_sampler='multinomial'", 'benchmark.baseline_sampler'),
    ('''--gin.benchmark.verifications="('block',)"''', 'benchmark.verifications'),
    ('''--gin.benchmark.verifications="('token', 'blocks')"''', 'benchmark.verifications'),
    ('--gin.benchmark.topp=1.5', 'benchmark.topk / topp'),
    ('--gin.benchmark.seed=-1', 'benchmark.seed must be an int in [0, 2**32)'),
    ("--gin.benchmark.datasets=(('news', '/nonexistent/news.en'),)",
     "'/nonexistent/news.en' not found (benchmark.datasets)"),
    ("--gin.benchmark.datasets='news.en'", 'benchmark.datasets must be a non-empty tuple'),
    ('--gin.benchmark.temperatures=(1e999,)', 'benchmark.temperatures must be a tuple of finite'),
])
def test_bad_settings_exit_2_before_loading(binding, needle, capsys, monkeypatch):
  """Checked up front (also in quick mode, which overrides the sweep): exit 2, no load."""
  def no_load(*a, **k):
    raise AssertionError('the pair was loaded before the settings were checked')
  monkeypatch.setattr(bench, 'load_pair', no_load)
  rc = bench.main(['--gin_file=configs/runs/benchmark.gin', '--gin.benchmark.quick=True',
                   binding])
  assert rc == 2
  err = capsys.readouterr().err
  assert needle in err and 'Traceback' not in err


def test_startup_cold_then_warm_cache(tiny_pair):
  """`benchmark/startup.py`: the cold child writes the decoders' programs to a fresh cache
  folder; the warm child finds every program there (it writes nothing new) and decodes."""
  from specdec_jax.benchmark import report, startup
  root, sentences = tiny_pair
  spec = dict(pair_dir=str(root), target_config=None, draft_config=None,
              target_checkpoint=None, draft_checkpoint=None, vocab_path=None, extra_ids=100,
              checkpoint_dtype=None, dataset=str(sentences),
              prefix=decode_lib.TRANSLATE_PREFIX, max_input_len=16, input_length_buckets=[16],
              max_decode_len=12, gamma=2, min_compile_time_s=0.0)
  st = startup.measure(spec)
  assert not st.get('skipped'), st
  cold, warm = st['cold'], st['warm']
  assert cold['cache_dir'] == warm['cache_dir'] and 'specdec_startup_cache_' in cold['cache_dir']
  assert cold['cache_entries'] >= 2, cold  # at least the baseline's and speculative programs
  assert warm['cache_entries'] == cold['cache_entries'], (cold, warm)
  for r in (cold, warm):
    for method in ('baseline', 'speculative'):
      assert r[method]['first_call_s'] >= r[method]['compile_s'] >= 0.0
  text = '\n'.join(report.startup_lines(st))
  assert '| cold |' in text and '| warm |' in text
  assert 'Not measured' in '\n'.join(report.startup_lines({'skipped': True, 'note': 'Not measured'}))


def test_topk_beyond_the_vocabulary_exits_2_before_reading_checkpoints(capsys, monkeypatch):
  from specdec_jax import checkpoints

  def no_read(*a, **k):
    raise AssertionError('a checkpoint was read before topk was checked')
  monkeypatch.setattr(checkpoints, 'load_t5x_checkpoint', no_read)
  rc = bench.main(['--gin_file=configs/runs/benchmark.gin', '--gin.benchmark.quick=True',
                   '--gin.benchmark.topk=100000'])
  assert rc == 2
  err = capsys.readouterr().err
  assert 'benchmark.topk: topk=100000 exceeds the target' in err and 'Traceback' not in err
