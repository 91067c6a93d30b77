"""`python -m specdec_jax.distill_data`: the command of the distillation-data job.

The job itself is `specdec_jax.train.distill_data` (it belongs to training); this module
only keeps the documented command working.
"""
import sys

from specdec_jax.train import distill_data as _job

if __name__ == '__main__':
  sys.exit(_job.main())
