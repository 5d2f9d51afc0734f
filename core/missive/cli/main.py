"""The ``missive`` command line: ``serve`` (:mod:`.serve`); ``pull``,
``models``, ``plugins`` (:mod:`.local`); ``ps``, ``batches``, ``claude``
(:mod:`.running`); ``keys``, ``usage`` (:mod:`missive.cli.keys`);
``new-driver``; and the commands plugins add."""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..kernel.plugins import Kernel
from .keys import register as register_keys
from .local import models_command, plugins, pull
from .options import config_options, config_origin, load, server_and_key, unavailable
from .running import batches, claude, ps
from .serve import serve

__all__ = ["cli", "main", "config_origin"]


@click.group()
@click.version_option(version=__version__, package_name="missive-server", prog_name="missive")
def cli() -> None:
    """Missive: an Anthropic Messages API server for local models."""


for command in (serve, pull, models_command, plugins, ps, batches, claude):
    cli.add_command(command)
register_keys(cli, config_options, load, server_and_key, unavailable)


@cli.command("new-driver")
@click.argument("name")
@click.option(
    "--output",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Folder to write missive-NAME/ into.",
)
def new_driver(name: str, output: str) -> None:
    """Write missive-NAME/, a driver distribution that passes the driver contract as written.

    NAME is the driver's name (driver = "NAME" in a model entry). Then, in
    missive-NAME/: pip install -e '.[test]' && pytest
    """
    from pathlib import Path

    from ..scaffold import write_skeleton

    try:
        target = write_skeleton(name, Path(output))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except FileExistsError:
        raise click.ClickException(
            f"{Path(output) / f'missive-{name}'} exists already; nothing written"
        ) from None
    click.echo(f"wrote {target}")
    click.echo(f"next: cd {target} && pip install -e '.[test]' && pytest")


def main() -> None:
    try:
        Kernel().hook.register_commands(cli=cli)
    except Exception as exc:  # a plugin's command must not break the CLI
        print(f"warning: a plugin failed to add commands: {exc}", file=sys.stderr)
    cli()
