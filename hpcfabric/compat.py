"""Old import paths of the flat layout (before the packages of docs/architecture.md) keep working.

``import hpcfabric.compiler`` gives a module whose names are looked up, on first use, in the
modules the old one was split into (``hpcfabric.rules.compiler``, ``hpcfabric.rules.cos``, ...),
with one :class:`DeprecationWarning` naming the new place. Nothing is imported until a name is
used, so this module adds no import edge between the layers. Installed by ``hpcfabric/__init__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

# old module (under hpcfabric.) -> the modules that now hold its public names, searched in order
MOVED: dict[str, tuple[str, ...]] = {
    "addressing": ("rules.addressing",),
    "cdg": ("verify.cdg", "verify.codes", "verify.graphs", "verify.scenarios", "verify.lines", "verify.engine.rows"),
    "cnm": ("protocols.cnm",),
    "compaction": ("rules.compaction",),
    "compiler": (
        "rules.compiler",
        "rules.tables",
        "rules.context",
        "rules.cos",
        "rules.port_state",
        "rules.destinations",
        "rules.infra",
        "rules.fabrics.updown",
        "rules.fabrics.dragonfly",
        "rules.fabrics.flattened_butterfly",
    ),
    "discovery": ("controller.discovery", "protocols.lldp"),
    "dmp": ("protocols.dmp",),
    "dmp_client": ("protocols.dmp_client",),
    "fastfailover": ("failover.groups", "verify.pipeline"),
    "flows": ("rules.flows",),
    "guards": ("rules.guards",),
    "mac_rewrite": ("rules.mac_rewrite",),
    "metrics": ("controller.metrics",),
    "ofctl": ("openflow.ofctl",),
    "ofwire": ("openflow.ofwire",),
    "patterns": ("topology.patterns",),
    "pause": ("protocols.pause",),
    "pipeline": ("verify.pipeline", "verify.flatten"),
    "reconcile": ("openflow.reconcile",),
    "routing": ("rules.routing", "rules.fabrics.flattened_butterfly", "rules.fabrics.dragonfly"),
    "sweep": ("verify.sweep", "verify.columns", "verify.scenarios"),
    "symmetry": ("verify.symmetry", "verify.automorphism", "verify.decisions"),
    "updown": ("verify.updown",),
}

# modules (or packages that replaced a module of the same name) that kept their path but not all
# their names: their ``__getattr__`` (:func:`forwarder`) forwards the names that moved out
KEPT_PATHS: dict[str, tuple[str, ...]] = {
    "analysis.power": ("analysis.onoff",),
    "verify": ("verify.scenarios", "verify.allpairs", "verify.probes", "verify.walk", "verify.codes", "verify.engine.core"),
    "failover": ("failover.reroute", "failover.groups"),
}


def lookup(old: str, name: str, homes: tuple[str, ...]) -> Any:
    """``name`` from the first of ``homes`` (under ``hpcfabric.``) that defines it; warns once."""
    if name.startswith("__"):
        raise AttributeError(name)
    for home in homes:
        module = importlib.import_module(f"hpcfabric.{home}")
        if hasattr(module, name):
            warnings.warn(
                f"hpcfabric.{old}.{name} moved to hpcfabric.{home}.{name} (see docs/architecture.md)",
                DeprecationWarning,
                stacklevel=3,
            )
            return getattr(module, name)
    raise AttributeError(f"module 'hpcfabric.{old}' has no attribute {name!r} (its names now live in "
                         + ", ".join(f"hpcfabric.{h}" for h in homes) + ")")


def forwarder(old: str) -> Any:
    """A module ``__getattr__`` (PEP 562) for a package face that replaced module ``old``."""
    homes = KEPT_PATHS[old]

    def __getattr__(name: str) -> Any:
        return lookup(old, name, homes)

    return __getattr__


class MovedModule(types.ModuleType):
    """Stand-in for an old flat module: attributes come from the new homes."""

    def __getattr__(self, name: str) -> Any:
        old = self.__name__.split(".", 1)[1]
        value = lookup(old, name, MOVED[old])
        setattr(self, name, value)
        return value


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``hpcfabric.<old>`` for every old module name and makes a :class:`MovedModule`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        head, _, old = fullname.partition(".")
        if head != "hpcfabric" or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = MovedModule(spec.name)
        module.__doc__ = f"Moved: see {', '.join('hpcfabric.' + h for h in MOVED[spec.name.split('.', 1)[1]])}."
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: names are looked up on use."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
