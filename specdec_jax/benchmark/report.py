"""The benchmark's reports: results.md (tables) and two plots."""

from __future__ import annotations

import math
import pathlib
import statistics

import numpy as np

from specdec_jax.util import atomic
from specdec_jax.benchmark.costs import predicted_speedup


def _f(x, spec='.2f'):
  if x is None:
    return '–'
  if isinstance(x, float) and not math.isfinite(x):
    return 'nan'
  return format(x, spec)


def _cpu_text(cpu) -> str:
  """'; Intel(R) Xeon(R) Processor, L2 2 MiB, L3 480 MiB, avx512f amx_bf16' from `cpu_info()`."""
  if not cpu:
    return ''
  parts = [cpu['model']] if cpu.get('model') else []
  for level, kib in (cpu.get('caches_kib') or {}).items():
    if level != 'L1d':
      parts.append(f'{level} {kib // 1024} MiB' if kib >= 1024 else f'{level} {kib} KiB')
  if cpu.get('flags'):
    parts.append(' '.join(cpu['flags']))
  return '; ' + ', '.join(parts) if parts else ''


def _sharding_lines(sh) -> list:
  """The mesh paragraph (empty for a one-device run)."""
  if not sh:
    return []
  t, d = sh['target_param_bytes'], sh['draft_param_bytes']
  return [f'Mesh: {sh["mesh_shape"]} over {sh["devices"]} devices in {sh["processes"]} '
          f'process(es), draft {sh["draft_sharding"]}; target params {t["total"] / 2**20:.1f} '
          f'MiB in all, at most {t["max_per_device"] / 2**20:.1f} MiB per device '
          f'({t["max_per_device"] / t["total"]:.3f} of the total); draft '
          f'{d["max_per_device"] / 2**20:.1f} of {d["total"] / 2**20:.1f} MiB per device.', '']


def verification_lines(rows) -> list:
  """Token-wise vs block verification (Sun et al., ICLR 2025) side by side, same run."""
  if not rows:
    return []
  lines = ['', '## Token-wise vs block verification (same drafts, same run)', '',
           'Block verification decides the accepted length from the same p and q jointly '
           '(exact; never fewer tokens per target call in expectation). Δ = block ÷ token − 1.',
           '', '| dataset | T | batch | γ | tok/target call token | block | Δ | accept rate '
           'token | block | speedup token | block |', '|' + '---|' * 11]
  for r in rows:
    gain = r['tokens_per_target_call'] / r['token_tokens_per_target_call'] - 1
    lines.append(
        f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} | '
        f'{_f(r["token_tokens_per_target_call"], ".3f")} | {_f(r["tokens_per_target_call"], ".3f")} '
        f'| {gain * 100:+.1f} % | {_f(r["token_acceptance_rate"], ".3f")} | '
        f'{_f(r["acceptance_rate"], ".3f")} | {_f(r["token_speedup"])} | **{_f(r["speedup"])}** |')
  return lines


def drafter_lines(rows) -> list:
  """Every drafter (and lenient rule) beside the model draft, same run."""
  if not rows:
    return []
  lines = ['', '## Drafters (issue #40) and lenience (paper Appendix A.5)', '',
           'Same run, same inputs, same baseline. Model-free drafters: c = 0. **pred** uses '
           'the rounds the loop ran and v at the mean draft length (`rows.drafter_row`). '
           'Rows with lenience < 1 are **NOT exact** (the output is not the target\'s '
           'distribution).', '',
           '| dataset | T | batch | drafter | lenience | exact | γ | spec tok/s | speedup | α | '
           'accept rate | mean draft len | tok/target call | pred (rounds) | eff. | '
           'identical (T=0) |', '|' + '---|' * 16]
  for r in rows:
    lines.append(
        f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["drafter"]} | '
        f'{r["lenience"]:g} | {"yes" if r["exact"] else "**NO**"} | {r["gamma"]} | '
        f'{_f(r["speculative_tokens_per_s"], ".1f")} | **{_f(r["speedup"])}** '
        f'[{_f(r["speedup_min"])}–{_f(r["speedup_max"])}] | {_f(r["alpha"], ".3f")} | '
        f'{_f(r["acceptance_rate"], ".3f")} | {_f(r["mean_draft_length"])} | '
        f'{_f(r["tokens_per_target_call"])} | {_f(r["predicted_speedup_rounds"])} | '
        f'{_f(r["efficiency_rounds"])} | {"–" if r["identical"] is None else r["identical"]} |')
  return lines


def startup_lines(st) -> list:
  """The start-up section: compile time with the persistent compilation cache cold / warm."""
  lines = ['', '## Start-up: persistent compilation cache cold and warm', '']
  if not st or st.get('skipped'):
    return lines + [(st or {}).get('note', 'Not measured (benchmark.startup=False, quick mode '
                                           'or a mesh).')]
  lines += [f'{st["note"]}.', '',
            '| cache | process wall s | load s | baseline compile s | speculative compile s |',
            '|---|---|---|---|---|']
  for label in ('cold', 'warm'):
    r = st[label]
    lines.append(f'| {label} | {_f(r["process_wall_s"], ".1f")} | {_f(r["load_s"])} | '
                 f'{_f(r["baseline"]["compile_s"])} | {_f(r["speculative"]["compile_s"])} |')
  return lines


def markdown(res: dict) -> str:
  s = res['settings']
  m = res['machine']
  lines = [
      '# Speculative decoding benchmark', '',
      f'Command: `{res["command"]}`', '',
      f'Pair: `{res["pair"]["name"]}` — sentences per dataset: '
      + ', '.join(f'{d["name"]} {d["sentences"]}' for d in s['datasets'])
      + f'; max_input_len {s["max_input_len"]} (batches padded to the smallest of '
      f'{s.get("input_length_buckets") or []} or max_input_len that fits), '
      f'max_decode_len {s["max_decode_len"]}, '
      f'repeats {s["repeats"]} (times: median [min–max] of the repeats, compilation excluded); '
      f'baseline sampler at T > 0: `{s.get("baseline_sampler", "gumbel")}` (the speculative '
      'loop samples by `inverse_cdf`).',
      '',
      f'Machine: {m["cpu_count"]} CPU cores ({m["processor"]}{_cpu_text(m.get("cpu"))}), '
      f'{m["platform"]}; load average '
      f'at start {m.get("load_average_at_start")}; jax {m["jax"]}, flax {m["flax"]}, torch '
      f'{m["torch"]}, transformers {m["transformers"]}.', '',
      f'Outputs identical between methods at temperature 0: **{res["identical_at_t0"]}**', '',
  ] + _sharding_lines(res.get('sharding')) + [
      '## Step costs', '',
      'Each timed alone in its own compiled program (`benchmark/costs.py`), in units of one '
      'target 1-token step except where ms. a = the loop\'s own work per speculative round '
      '(decoding with free models), a_base per baseline step.', '',
      '| batch | target step (ms) | draft step (ms) | c | v(γ) | encoders target / draft '
      '(per input length) | a(γ) at T | a_base at T |',
      '|---|---|---|---|---|---|---|---|']
  for bs, sc in res['step_costs'].items():
    t1 = sc['target_step_s']['1']
    vs = ', '.join(f'γ={g}: {_f(v)}' for g, v in sc['v'].items())
    enc = ', '.join(f'{n}: {_f(e["target_s"] / t1, ".1f")} / {_f(e["draft_s"] / t1, ".1f")}'
                    for n, e in sc.get('encoder', {}).items())
    a = '; '.join(f'T={t}: ' + ', '.join(f'γ={g}: {_f(x / t1)}'
                                          for g, x in o['spec_round_s'].items())
                  for t, o in sc.get('overheads', {}).items())
    ab = ', '.join(f'T={t}: {_f(o["base_step_s"] / t1)}'
                   for t, o in sc.get('overheads', {}).items())
    lines.append(f'| {bs} | {_f(t1 * 1e3)} | {_f(sc["draft_step_s"] * 1e3)} | '
                 f'{_f(sc["c"], ".3f")} | {vs} | {enc} | {a} | {ab} |')
  lines += ['', '## Speculative vs baseline', '',
            'speedup = speculative tokens/s ÷ baseline tokens/s (median [min–max] over '
            'repeats). **pred** is the cost model of every phase (encoders, γ draft steps, '
            'the verify call, the loop\'s own work; `benchmark/costs.py`) with this row\'s α, '
            'and **eff.** = speedup ÷ pred; "eff. (rounds)" uses the rounds the loop really '
            'ran instead of the α-based estimate; Thm 3.8 is the paper\'s formula '
            '(1−α^(γ+1))/((1−α)(γc+1)).', '',
            '| dataset | T | batch | γ | baseline tok/s | spec tok/s | speedup | '
            'accept rate | α | tok/target call | c | v | a | pred | **eff.** | '
            'eff. (rounds) | Thm 3.8 | identical (T=0) | best γ (measured / predicted) |',
            '|' + '---|' * 19]
  for r in res['settings_results']:
    lines.append(
        f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} | '
        f'{_f(r["baseline_tokens_per_s"], ".1f")} | {_f(r["speculative_tokens_per_s"], ".1f")} | '
        f'**{_f(r["speedup"])}** [{_f(r["speedup_min"])}–{_f(r["speedup_max"])}] | '
        f'{_f(r["acceptance_rate"], ".3f")} | {_f(r["alpha"], ".3f")} | '
        f'{_f(r["tokens_per_target_call"])} | {_f(r["c"], ".3f")} | {_f(r["v"])} | '
        f'{_f(r["a_spec"])} | {_f(r["predicted_speedup"])} | **{_f(r["efficiency"])}** | '
        f'{_f(r["efficiency_rounds"])} | {_f(r["predicted_speedup_thm38"])} | '
        f'{"–" if r["identical"] is None else r["identical"]} | '
        f'{r["best_gamma"]} / {r["predicted_best_gamma"]} |')
  if res.get('policy_results'):
    lines += ['', '## Adaptive draft length (policies, γ_max = the largest γ of the sweep)', '',
              'vs best fixed γ = this row\'s tokens/s ÷ the best fixed-γ row\'s tokens/s of '
              'the same setting (same run).', '',
              '| dataset | T | batch | policy | γ_max | mean draft length | spec tok/s | '
              'speedup | vs best fixed γ | α | tok/target call | identical (T=0) |',
              '|' + '---|' * 12]
    for r in res['policy_results']:
      fixed = [x for x in res['settings_results'] if x['dataset'] == r['dataset'] and
               x['temperature'] == r['temperature'] and x['batch_size'] == r['batch_size']]
      best = max(fixed, key=lambda x: x['speculative_tokens_per_s']) if fixed else None
      vs = (r['speculative_tokens_per_s'] / best['speculative_tokens_per_s']) if best else None
      best_g = '' if best is None else f' (γ={best["gamma"]})'
      lines.append(
          f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["policy"]} | '
          f'{r["gamma"]} | {_f(r["mean_draft_length"])} | '
          f'{_f(r["speculative_tokens_per_s"], ".1f")} | **{_f(r["speedup"])}** '
          f'[{_f(r["speedup_min"])}–{_f(r["speedup_max"])}] | '
          f'{_f(vs)}{best_g} | '
          f'{_f(r["alpha"], ".3f")} | {_f(r["tokens_per_target_call"])} | '
          f'{"–" if r["identical"] is None else r["identical"]} |')
  lines += ['', '## Where the time goes (cost model, per sentence, in target steps)', '',
            'Measured: the method\'s median wall time ÷ one target step ÷ sentences. '
            'Predicted: the cost model\'s phases with the α-based rounds.', '',
            '| dataset | T | batch | γ | baseline measured | baseline predicted | spec measured '
            '| spec predicted | encode target | encode draft | draft | verify | loop work | '
            'rounds measured / predicted |', '|' + '---|' * 14]
  for r in res['settings_results']:
    ph = r['predicted_phases_per_sentence']
    lines.append(
        f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} | '
        f'{_f(r["baseline_units_per_sentence"], ".1f")} | '
        f'{_f(r["baseline_units_predicted_per_sentence"], ".1f")} | '
        f'{_f(r["speculative_units_per_sentence"], ".1f")} | '
        f'{_f(r["speculative_units_predicted_per_sentence"], ".1f")} | '
        f'{_f(ph["encode_target"], ".1f")} | {_f(ph["encode_draft"], ".1f")} | '
        f'{_f(ph["draft"], ".1f")} | {_f(ph["verify"], ".1f")} | {_f(ph["overhead"], ".1f")} | '
        f'{r["rounds_measured"]} / {_f(r["rounds_predicted"], ".1f")} |')
  lines += ['', '## Compilation (first call, excluded from the timings above)', '',
            'The first call of each program on a setting\'s first batch: it includes the '
            'compilation only when that program and input shape were not compiled earlier in '
            'the run (e.g. a later dataset whose first batch has a shape seen before shows '
            'just one call).', '',
            '| dataset | T | batch | γ | baseline first call s | speculative first call s |',
            '|---|---|---|---|---|---|']
  for r in res['settings_results']:
    lines.append(f'| {r["dataset"]} | {r["temperature"]:g} | {r["batch_size"]} | {r["gamma"]} '
                 f'| {_f(r["baseline_first_call_s"])} | {_f(r["speculative_first_call_s"])} |')
  lines += verification_lines(res.get('verification_results'))
  lines += drafter_lines(res.get('drafter_results'))
  lines += startup_lines(res.get('startup'))
  hf = res.get('hf_peer') or {}
  lines += ['', '## Hugging Face peer (transformers assisted generation)', '']
  if hf.get('skipped', True):
    lines.append(hf.get('note', 'skipped'))
  else:
    lines += [
        f'Batch 1, greedy, torch threads {hf["torch_threads"]}, num_assistant_tokens: '
        f'{hf["num_assistant_tokens"]}; torch {hf["torch"]}, transformers '
        f'{hf["transformers"]}. The JAX rows are the same inputs at T=0, batch 1 (best γ).',
        '', '| dataset | method | time s (median [min–max]) | tokens | tok/s | speedup vs own '
        'baseline | outputs identical to own baseline |', '|---|---|---|---|---|---|---|']
    for run in hf['runs']:
      for name in ('hf_baseline', 'hf_assisted'):
        t = run[name]['time_s']
        lines.append(
            f'| {run["dataset"]} | {name} | {_f(t["median"], ".3f")} [{_f(t["min"], ".3f")}–'
            f'{_f(t["max"], ".3f")}] | {run[name]["tokens"]} | '
            f'{_f(run[name]["tokens_per_s"], ".1f")} | '
            + ('1.00 | – |' if name == 'hf_baseline' else
               f'{_f(run["speedup"])} | {run["identical_hf_baseline_vs_assisted"]} |'))
      sel = [r for r in res['settings_results'] if r['dataset'] == run['dataset']
             and r['batch_size'] == 1 and r['temperature'] == 0.0]
      if sel:
        best = max(sel, key=lambda r: r['speedup'])
        lines.append(f'| {run["dataset"]} | jax baseline | '
                     f'{_f(best["baseline_time_s"]["median"], ".3f")} | '
                     f'{best["baseline_tokens"]} | {_f(best["baseline_tokens_per_s"], ".1f")} | '
                     f'1.00 | – |')
        lines.append(f'| {run["dataset"]} | jax speculative γ={best["gamma"]} | '
                     f'{_f(best["speculative_time_s"]["median"], ".3f")} | '
                     f'{best["speculative_tokens"]} | '
                     f'{_f(best["speculative_tokens_per_s"], ".1f")} | {_f(best["speedup"])} | '
                     f'{best["identical"]} |')
    lines += [''] + [f'HF plain vs our JAX baseline, {run["dataset"]} (T=0, batch 1): identical '
                     f'outputs = {run["identical_hf_vs_jax_baseline"]}.' for run in hf['runs']]
  lines += ['', f'Total wall time: {res["total_wall_s"]:.1f} s.', '']
  return '\n'.join(lines)


def plot(res: dict, out_dir: pathlib.Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  rows = res['settings_results']
  if not rows:  # no model draft in the run: plot the first other drafter's exact rows
    others = [r for r in res.get('drafter_results') or [] if r['exact']]
    rows = [r for r in others if r['drafter'] == others[0]['drafter']] if others else []
  if not rows:
    return
  temps = sorted({r['temperature'] for r in rows})
  bss = sorted({r['batch_size'] for r in rows})
  dsets = list(dict.fromkeys(r['dataset'] for r in rows))
  fig, axes = plt.subplots(len(temps), len(bss), figsize=(5.5 * len(bss), 4 * len(temps)),
                           squeeze=False)
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for i, t in enumerate(temps):
    for j, bs in enumerate(bss):
      ax = axes[i][j]
      for k, d in enumerate(dsets):
        sel = sorted((r for r in rows if r['temperature'] == t and r['batch_size'] == bs
                      and r['dataset'] == d), key=lambda r: r['gamma'])
        if not sel:
          continue
        col = colors[k % len(colors)]
        g = [r['gamma'] for r in sel]
        ax.errorbar(g, [r['speedup'] for r in sel],
                    yerr=[[r['speedup'] - r['speedup_min'] for r in sel],
                          [r['speedup_max'] - r['speedup'] for r in sel]],
                    fmt='o-', color=col, label=f'{d} measured', capsize=3)
        # Theoretical curves from this setting's mean α and measured c, v.
        alpha = statistics.mean(r['alpha'] for r in sel)
        c = sel[0]['c']
        gg = np.arange(1, max(g) + 1)
        ax.plot(gg, [predicted_speedup(alpha, int(x), c) for x in gg], '--', color=col,
                label=f'{d} Thm 3.8 (α={alpha:.2f}, c={c:.2f})')
        ax.plot(g, [r['predicted_speedup'] for r in sel], ':', color=col,
                label=f'{d} cost model (all phases)')
      ax.axhline(1.0, color='gray', lw=0.8)
      ax.set_title(f'T={t:g}, batch {bs}')
      ax.set_xlabel('γ')
      ax.set_ylabel('speedup (tokens/s ratio)')
      ax.legend(fontsize=7)
  fig.tight_layout()
  atomic.write_with(out_dir / 'speedup_vs_gamma.png', lambda tmp: fig.savefig(tmp, dpi=110))
  plt.close(fig)

  labels, base_tps, best_tps = [], [], []
  for t in temps:
    for bs in bss:
      for d in dsets:
        sel = [r for r in rows if r['temperature'] == t and r['batch_size'] == bs
               and r['dataset'] == d]
        if not sel:
          continue
        best = max(sel, key=lambda r: r['speedup'])
        labels.append(f'{d}\nT={t:g} B={bs}\n(γ={best["gamma"]})')
        base_tps.append(best['baseline_tokens_per_s'])
        best_tps.append(best['speculative_tokens_per_s'])
  hf = res.get('hf_peer') or {}
  fig, ax = plt.subplots(figsize=(max(6, 1.8 * (len(labels) + 1)), 4.5))
  x = np.arange(len(labels))
  ax.bar(x - 0.2, base_tps, 0.4, label='JAX baseline (t5_generate)')
  ax.bar(x + 0.2, best_tps, 0.4, label='JAX speculative (best γ)')
  if not hf.get('skipped', True):
    for n, run in enumerate(hf['runs']):
      xh = len(labels)
      labels.append(f'HF {run["dataset"]}\nT=0 B=1')
      ax.bar(xh - 0.2, run['hf_baseline']['tokens_per_s'], 0.4, color='tab:gray',
             label='HF generate' if n == 0 else None)
      ax.bar(xh + 0.2, run['hf_assisted']['tokens_per_s'], 0.4, color='tab:olive',
             label='HF assisted (assistant_model=draft)' if n == 0 else None)
  ax.set_xticks(np.arange(len(labels)))
  ax.set_xticklabels(labels, fontsize=7)
  ax.set_ylabel('tokens / s')
  ax.legend(fontsize=8)
  fig.tight_layout()
  atomic.write_with(out_dir / 'tokens_per_second.png', lambda tmp: fig.savefig(tmp, dpi=110))
  plt.close(fig)
