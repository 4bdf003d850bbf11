"""The package's version, where every layer can read it (pyproject.toml says the same)."""

__version__ = "0.1.0"
