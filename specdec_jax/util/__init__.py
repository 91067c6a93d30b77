"""Job-side utilities: atomic writes (`atomic`), strict JSON (`jsonio`), the repository's
and shared data's paths (`paths`), and the T5X-style `--gin_file` flags of every entry
point (`flags`). The decoding core and the model families import none of them."""
