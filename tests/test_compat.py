"""Old flat import paths (before the layered packages) still work, warn, and give the new objects."""

import importlib
import warnings

import pytest

# (old path, new path) of names the docs documented before the move, and a few the compiler split moved
MOVED = [
    ("hpcfabric.compiler.compile_fabric", "hpcfabric.rules.compiler.compile_fabric"),
    ("hpcfabric.compiler.default_cos", "hpcfabric.rules.cos.default_cos"),
    ("hpcfabric.compiler.port_state_flow", "hpcfabric.rules.port_state.port_state_flow"),
    ("hpcfabric.cdg.check_deadlock_freedom", "hpcfabric.verify.cdg.check_deadlock_freedom"),
    ("hpcfabric.cdg.minimum_cos_levels", "hpcfabric.verify.cdg.minimum_cos_levels"),
    ("hpcfabric.verify.verify", "hpcfabric.verify.allpairs.verify"),
    ("hpcfabric.verify.apply_down", "hpcfabric.verify.scenarios.apply_down"),
    ("hpcfabric.flows.make_cookie", "hpcfabric.rules.flows.make_cookie"),
    ("hpcfabric.pipeline.Pipeline", "hpcfabric.verify.pipeline.Pipeline"),
    ("hpcfabric.fastfailover.resolve_groups", "hpcfabric.verify.pipeline.resolve_groups"),
    ("hpcfabric.pause.PauseState", "hpcfabric.protocols.pause.PauseState"),
    ("hpcfabric.analysis.power.OnOffModel", "hpcfabric.analysis.onoff.OnOffModel"),
    ("hpcfabric.analysis.power.onoff_fabric", "hpcfabric.analysis.onoff.onoff_fabric"),
    ("hpcfabric.ofwire.flow_mod_body", "hpcfabric.openflow.ofwire.flow_mod_body"),
]


def resolve(path):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old,new", MOVED, ids=[m[0] for m in MOVED])
def test_old_path_gives_the_new_object_with_a_warning(old, new):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = resolve(old)
    assert got is resolve(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), [
        str(w.message) for w in caught
    ]


def test_old_from_import_syntax_works():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from hpcfabric.compiler import compile_fabric  # noqa: F401
        from hpcfabric.verify import Report, verify  # noqa: F401


def test_unknown_name_names_the_new_homes():
    with pytest.raises(AttributeError, match="hpcfabric.rules.compiler"):
        resolve("hpcfabric.compiler.no_such_name")


def test_an_unknown_old_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hpcfabric.no_such_module")
