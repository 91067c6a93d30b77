"""`python -m specdec_jax.train`: the training job (`specdec_jax.train.job`)."""
import sys

from specdec_jax.train import job

sys.exit(job.main())
