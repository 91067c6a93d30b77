"""Gin files shipped with the package (package data), for T5X users and our jobs.

`specdec_jax/configs/models/t5_1_{0,1}/<size>.gin` mirror T5X's
`t5x/examples/t5/t5_1_{0,1}/<size>.gin` with `models.SpeculativeEncoderDecoderModel`;
`specdec_jax/configs/t5x/` holds the T5X model gin (`speculative_model.gin`) and its
T5X-only parts (`adafactor.gin`, `restore_draft.gin`).

These folders are Python packages so that gin's system-path reader
(`gin.resource_reader`) resolves `--gin_file=specdec_jax/configs/t5x/speculative_model.gin`
and `include 'specdec_jax/configs/...'` from any working directory, through the
import system, wherever specdec_jax is installed.
"""

import pathlib

CONFIG_DIR = pathlib.Path(__file__).resolve().parent
