"""The benchmark scripts of ``benchmarks/`` as modules, for the tests that
run a short version of one (tests/test_soak.py, tests/test_keys_flood.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_bench(name: str) -> Any:
    """``benchmarks/NAME.py``, imported as the module ``NAME``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
