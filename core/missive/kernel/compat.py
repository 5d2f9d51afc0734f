"""Whether a plugin was built for this Missive's plugin API.

A plugin declares the plugin API version it was built for as a string
attribute of its entry point's object (its plugin module)::

    MISSIVE_API = "1"

or, for a plugin that works with several, a tuple of them
(``MISSIVE_API = ("1", "2")``). A plugin that declares nothing was written
before the declaration existed, against version ``"1"``, and is taken as
``"1"``. :class:`missive.kernel.plugins.Kernel` loads a plugin only when
:data:`API_VERSION` is among the versions it declares; otherwise
the plugin is listed by ``missive plugins`` with :func:`api_mismatch`'s
message, and the others load. What may change between versions:
docs/hooks.md, "Compatibility".
"""

from __future__ import annotations

from .. import __version__

__all__ = [
    "API_VERSION",
    "API_ATTRIBUTE",
    "UNDECLARED",
    "declared_versions",
    "api_mismatch",
    "import_failure",
]

#: The version of the plugin API: the hooks (:mod:`missive.kernel.hookspecs`) and
#: every name :mod:`missive.api` exports. It changes, to the next integer,
#: when a change could break a plugin built for the previous one
#: (docs/hooks.md, "Compatibility"); additions do not change it. Re-exported
#: as :data:`missive.api.API_VERSION`.
API_VERSION = "1"

#: The attribute of a plugin's entry point object that declares its API version.
API_ATTRIBUTE = "MISSIVE_API"
#: The version a plugin that declares none is taken to be built for.
UNDECLARED = "1"


def declared_versions(plugin: object) -> tuple[str, ...]:
    """The plugin API versions ``plugin`` declares (``(UNDECLARED,)`` when it
    declares none).

    Raises:
        TypeError: ``MISSIVE_API`` is neither a string nor a tuple or list of strings.
    """
    value = getattr(plugin, API_ATTRIBUTE, None)
    if value is None:
        return (UNDECLARED,)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"{API_ATTRIBUTE} must be a string such as \"1\" (or a tuple of them), not {value!r}")


def _newer(a: str, b: str) -> bool | None:
    """Whether version ``a`` is newer than ``b`` (None: not both integers)."""
    return int(a) > int(b) if a.isdigit() and b.isdigit() else None


def api_mismatch(name: str, version: str | None, declared: tuple[str, ...], provided: str) -> str | None:
    """None when a plugin declaring ``declared`` runs on plugin API
    ``provided``; else the one-line message ``missive plugins`` shows, saying
    which side to upgrade.

    Args:
        name: the plugin's name (its distribution's, for an entry point).
        version: its distribution's version, if known.
        declared: what :func:`declared_versions` found.
        provided: this Missive's :data:`API_VERSION`.
    """
    if provided in declared:
        return None
    label = f"{name} {version}" if version else name
    built = " or ".join(declared)
    core = f"missive-server {__version__}"
    if all(_newer(v, provided) for v in declared):
        advice = f"upgrade missive-server to a release providing plugin API {built}"
    elif all(_newer(v, provided) is False for v in declared):
        advice = f"upgrade {name} to a release built for plugin API {provided}"
    else:
        advice = f"install a release of {name} built for plugin API {provided}"
    return f"{label} was built for plugin API {built}; this Missive ({core}) provides {provided}; {advice}"


def import_failure(name: str, version: str | None, exc: BaseException, provided: str) -> str:
    """The line ``missive plugins`` shows for a plugin that raised while
    being imported: the error, and the likely cause when it is an import
    error from Missive itself (a plugin built for another release)."""
    label = f"{name} {version}" if version else name
    text = f"{label} failed to import: {type(exc).__name__}: {exc}"
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "missive":
        text += (
            f"; it may have been built for another Missive (this is missive-server {__version__}, plugin API "
            f"{provided}): upgrade {name} or missive-server"
        )
    return text
