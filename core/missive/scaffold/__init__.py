"""``missive new-driver NAME``: a skeleton driver distribution to start from.

:func:`write_skeleton` fills the files of ``template/`` (``string.Template``
placeholders: ``$name``, ``$distribution``, ``$package``, ``$class_name``,
``$core_requirement``) into a new folder ``missive-NAME``: a pyproject with
the ``missive`` entry point, a package with the plugin, settings and a
stand-in driver, a README, and tests running the shared driver contract.
As written it passes that contract, so its author changes a working
driver toward a real backend one step at a time.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from string import Template

from .. import __version__

__all__ = ["CORE_DISTRIBUTION", "NAME_PATTERN", "core_requirement", "write_skeleton"]

#: The distribution name the core is published under (the import package is ``missive``).
CORE_DISTRIBUTION = "missive-server"

#: Driver names: lower-case words of letters and digits joined by ``-`` or ``_``.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")


def core_requirement(version: str = __version__) -> str:
    """The skeleton's requirement on the core: the releases that keep this
    one's plugin API (``0.1.0`` -> ``missive-server>=0.1,<0.2``; from 1.0,
    ``>=X.Y,<X+1``)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"{CORE_DISTRIBUTION}>={major}.{minor},<{upper}"


def write_skeleton(name: str, parent: Path) -> Path:
    """Write the skeleton of driver ``name`` into ``parent/missive-NAME``
    (created) and return that folder.

    ``name`` is the driver's name in a model entry (``driver = "NAME"``);
    the package is ``missive_NAME`` (``-`` as ``_``), the driver class
    ``<Name>Driver``.

    Raises:
        ValueError: ``name`` does not match :data:`NAME_PATTERN`, or is the
            name of a shipped or installed driver (:data:`SHIPPED`, an
            installed ``missive-NAME`` distribution).
        FileExistsError: the folder exists already (nothing is overwritten).
    """
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"driver name {name!r} must be lower-case letters and digits, words joined by - or _ (e.g. "
            "my-backend)"
        )
    taken = _taken(name)
    if taken:
        raise ValueError(
            f"driver name {name!r} is taken: {taken}; installing the skeleton would replace it. "
            "Pick another name"
        )
    suffix = name.replace("-", "_")
    values = {
        "name": name,
        "distribution": f"missive-{name}",
        "package": f"missive_{suffix}",
        "class_name": "".join(word.capitalize() for word in suffix.split("_")) + "Driver",
        "core_requirement": core_requirement(),
    }
    target = Path(parent) / values["distribution"]
    target.mkdir(parents=True, exist_ok=False)
    template = files(__name__).joinpath("template")
    for folder, out in (("", target), ("package", target / values["package"]), ("tests", target / "tests")):
        out.mkdir(exist_ok=True)
        source = template.joinpath(folder) if folder else template
        for item in sorted(source.iterdir(), key=lambda t: t.name):
            if item.is_file() and item.name.endswith(".tmpl"):
                text = Template(item.read_text(encoding="utf-8")).substitute(values)
                (out / item.name.removesuffix(".tmpl")).write_text(text, encoding="utf-8")
    return target


#: The drivers shipped with Missive (their distributions are ``missive-NAME``).
SHIPPED = frozenset({"echo", "llamacpp", "llamaserver", "mlx", "ollama", "openai", "vllm"})


def _taken(name: str) -> str | None:
    """Why ``name`` cannot be used, or None: a shipped driver, or an installed
    distribution of the name the skeleton would get."""
    from importlib.metadata import PackageNotFoundError, distribution

    if name in SHIPPED or name.replace("_", "-") in SHIPPED:
        return f"Missive ships the driver {name!r} (missive-{name})"
    try:
        distribution(f"missive-{name}")
    except PackageNotFoundError:
        return None
    return f"a distribution missive-{name} is installed"
