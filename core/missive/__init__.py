"""Missive: the Anthropic Messages API in front of local and self-hosted models.

The plugin API, everything a plugin may import, is :mod:`missive.api`
(versioned: :data:`missive.api.API_VERSION`). :data:`hookimpl` is also here,
for plugins written before that module existed.
"""

from .kernel.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
