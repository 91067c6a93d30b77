"""Gin files (package data); see specdec_jax/configs/__init__.py."""
