"""termforge: terminal-agent training data, from sampled signatures to trained and evaluated policies."""

__version__ = "0.1.0"
