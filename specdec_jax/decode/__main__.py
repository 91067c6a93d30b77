"""`python -m specdec_jax.decode` (see `specdec_jax.decode`)."""

import sys

from specdec_jax.decode.cli import main

sys.exit(main())
