"""The local cluster's own tests. Fixtures come from `kruise_local.pytest_plugin` (loaded through pytest's
addopts). hypothesis is imported here, while only this thread runs: its pytest plugin otherwise imports it
lazily at the end of a run, while the clusters' threads may still be working, and CPython 3.11.7 can then
fail with "SystemError: AST constructor recursion depth mismatch" after every test passed."""

import hypothesis  # noqa: F401
