"""Every ``hpcfabric`` import in the repository names a module (and name) that exists; the flat layout's old
paths (``hpcfabric.compiler``, ``hpcfabric.pipeline``, ...) are gone and fail loudly."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("hpcfabric", "tests", "bench", "mininet", "scripts")


def imports() -> dict[tuple[str, str | None], str]:
    """(module, name or None) -> the first place that imports it, over every .py file of FOLDERS."""
    found: dict[tuple[str, str | None], str] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    items = [(a.name, None) for a in node.names if a.name.split(".")[0] == "hpcfabric"]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "hpcfabric":
                    items = [(node.module, a.name) for a in node.names]
                else:
                    continue
                for item in items:
                    found.setdefault(item, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_hpcfabric_import_in_the_repository_resolves() -> None:
    seen = imports()
    assert len(seen) > 300  # the walk found the imports
    bad = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eventlet's deprecation banner
        for (module, name), where in sorted(seen.items(), key=lambda kv: kv[1]):
            try:
                mod = importlib.import_module(module)
                if name not in (None, "*") and not hasattr(mod, name):
                    importlib.import_module(f"{module}.{name}")
            except ImportError as err:
                bad.append(f"{where}: {module} {name or ''}: {err}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("old", ["hpcfabric.compiler", "hpcfabric.pipeline", "hpcfabric.cdg", "hpcfabric.pause"])
def test_old_flat_paths_are_import_errors(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_a_module_forwards_no_moved_name() -> None:
    power = importlib.import_module("hpcfabric.analysis.power")
    assert not hasattr(power, "OnOffModel")  # it lives in hpcfabric.analysis.onoff, and only there
    assert hasattr(importlib.import_module("hpcfabric.analysis.onoff"), "OnOffModel")
