"""Tooling run by hand or by `make`, neither the product nor its tests (``python -m tools.…``)."""
