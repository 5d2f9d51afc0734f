"""The server loads at start what a first request with tools would load
(:mod:`missive.tools.warm`), so it is not in that request's time."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_warm_up_imports_jsonschema_and_every_tool_parser() -> None:
    """In a fresh interpreter: before, neither jsonschema nor the parsers'
    modules are loaded; after, both are, and a schema check imports nothing more."""
    script = textwrap.dedent("""
        import sys
        from missive.default_plugins.tool_parsers import register_tool_parsers
        from missive.kernel.specs import load_object
        specs = {s.name: s for s in register_tool_parsers()}
        modules = {s.factory.partition(":")[0] for s in specs.values()}
        assert "jsonschema" not in sys.modules
        assert modules - set(sys.modules), "every parser module already imported: nothing to test"
        from missive.tools.warm import warm_up
        warm_up(specs)
        assert "jsonschema" in sys.modules
        assert not modules - set(sys.modules), modules - set(sys.modules)
        before = set(sys.modules)
        from missive.tools.validate import schema_error
        assert schema_error({"type": "object", "properties": {"a": {"type": "string"}}}) is None
        assert set(sys.modules) == before, set(sys.modules) - before
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
