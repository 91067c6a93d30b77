"""Training the demo pair: the train job, its data, and the distillation-data job.

* `job`: `python -m specdec_jax.train` — gin-configured training (`train` configurable).
* `step`: losses (CE, KL/TV distillation, unlikelihood), schedule, optimizer, jitted step.
* `run_files`: a run folder's config, params and resumable train states (`load_run`).
* `data`: the Multi30K / WMT data pipeline; `subword`: sampled segmentations.
* `distill_data`: `python -m specdec_jax.distill_data` — a target's outputs for distillation.
* `evaluation`: greedy translation, sacreBLEU and draft agreement for dev evaluation.
* `gec_data`: `python -m specdec_jax.train.gec_data` — synthetic error-correction pairs.
* `jfleg_split`: `python -m specdec_jax.train.jfleg_split` — JFLEG dev fine-tuning pairs with
  a seeded held-out half (for `scripts/eval_gec.py --lines`).
"""
