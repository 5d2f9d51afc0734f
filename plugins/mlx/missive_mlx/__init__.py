"""Missive driver for MLX models run in-process by mlx-lm.

Importing this package is cheap: the hooks live in :mod:`missive_mlx.plugin`
(no mlx import), the driver in :mod:`missive_mlx.driver` (imported only when a
model using ``driver = "mlx"`` is built).
"""

__version__ = "0.1.0"
