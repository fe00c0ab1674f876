"""The provider's version (its wheel's, and the tag of its runner image)."""

__version__ = "0.1.0"
