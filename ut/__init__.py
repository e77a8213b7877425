"""Fixed universal transformers (Liu, Andoni, Hsu 2026) in JAX.

A universal transformer (UT) has fixed attention and value weights; it simulates
any target transformer of a class through its input embedding E alone.

Data flows one way: config -> construction -> compile -> simulate or train.
"""

__version__ = "0.1.0"
