"""solforge: autonomous, verifiable GPU kernel optimization."""

__version__ = "0.1.0"
