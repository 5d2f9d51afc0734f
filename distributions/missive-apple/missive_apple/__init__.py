"""missive-apple: Missive for Apple Silicon (the MLX driver, a default MLX model, its defaults)."""

__version__ = "0.1.0"
