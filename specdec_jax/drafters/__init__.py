"""Model-free drafters' data: n-gram tables estimated from a corpus, their files.

The drafting itself runs inside the compiled loop (`specdec_jax.decoding.drafters`);
this package only builds and reads what those drafters carry (`tables`).
"""
