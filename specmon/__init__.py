"""specmon: a live, honest monitor for speculative decoding on SGLang servers."""

__version__ = "0.1.0"
