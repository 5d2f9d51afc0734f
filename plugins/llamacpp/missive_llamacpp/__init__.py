"""Missive driver for GGUF models run in-process by llama-cpp-python.

Importing this package is cheap: the hooks live in :mod:`missive_llamacpp.plugin`
(no llama_cpp import), the driver in :mod:`missive_llamacpp.driver` (imported
only when a model using ``driver = "llamacpp"`` is built).
"""

__version__ = "0.1.0"
