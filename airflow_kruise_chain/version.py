"""The provider's version (its wheel's)."""

__version__ = "0.1.0"
