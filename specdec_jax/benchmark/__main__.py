"""`python -m specdec_jax.benchmark`: the benchmark job (`specdec_jax.benchmark.job`)."""
import sys

from specdec_jax.benchmark import job

sys.exit(job.main())
