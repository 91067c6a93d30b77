"""Training the demo pair: the train job, its data, and the distillation-data job.

* `job`: `python -m specdec_jax.train` — gin-configured training (`train` configurable).
* `step`: losses (CE, KL/TV distillation, unlikelihood), schedule, optimizer, jitted step.
* `run_files`: a run folder's config, params and resumable train states (`load_run`).
* `data`: the Multi30K / WMT data pipeline; `subword`: sampled segmentations.
* `distill_data`: `python -m specdec_jax.distill_data` — a target's outputs for distillation.
* `evaluation`: greedy translation, sacreBLEU and draft agreement for dev evaluation.
"""
