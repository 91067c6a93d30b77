"""The benchmark job: baseline vs speculative wall clock, cost model, HF peer, report.

`python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin` (see `job`).

* `job`: the `benchmark` gin configurable and its CLI (`main`).
* `runner`: loading the pair, timing calls (medians), the CPU's description.
* `rows`: one result row per (dataset, temperature, batch, γ or policy).
* `costs`: the per-phase cost model (Leviathan et al. §3.4, Theorem 3.8) and efficiency.
* `hf_peer`: Hugging Face assisted generation on the same inputs (the peer).
* `report`: results.json / results.md / plots, written atomically.
"""
