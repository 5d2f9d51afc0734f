"""Missive: the Anthropic Messages API in front of local and self-hosted models.

Public plugin API: :data:`hookimpl` (mark hook implementations), the spec
classes in :mod:`missive.specs`, :class:`missive.driver.Driver`, the events in
:mod:`missive.events`, :class:`missive.capabilities.Capabilities` and the
errors in :mod:`missive.errors`.
"""

from .hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
