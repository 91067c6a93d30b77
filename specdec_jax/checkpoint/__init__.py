"""T5X checkpoint internals behind `specdec_jax.checkpoints` (the public entry point).

* `locations`: local paths and TensorStore kvstore URLs; `find_checkpoint`.
* `tree`: nested-dict helpers shared by the readers.
* `legacy`: the msgpack (+ TensorStore zarr) reader of T5X's legacy and early-Orbax layouts.
* `orbax_read`: the reader of T5X's Orbax layout (`checkpoint_<step>/state`).
* `config_check`: accounting of a checkpoint's params against a `T5Config`.
* `writers`: `save_t5x_checkpoint` (legacy) and `save_orbax_checkpoint`.
"""
