"""missive-cpu: Missive for CPUs (the llama.cpp driver, the embedded SmolLM2, CPU defaults)."""

__version__ = "0.1.0"
