"""A compiled artifact: compile and prove a fabric once, let partitioned controllers load their tables.

``hpcfabric compile --config FILE`` (or :func:`write_artifact`) compiles the
whole fabric once, runs the deadlock proof on it once, and writes a directory::

    manifest.json      format, the fingerprint it was made from, the proof's verdict,
                       the partitions (name, label, switch count, rules, file, sha256)
    p0-of-8.pickle     per partition: its switches' compiled tables, the tables to
    ...                install (host MAC rewrite, guards applied) and groups

A controller whose config sets ``[hpcfabric] compiled = DIR`` loads only the
partition files covering the switches it manages (:func:`load_artifact`) and
skips compiling and proving. The fingerprint is a SHA-256 over the topology
file's bytes, every config value that shapes the tables or the proof, and the
source of the packages that compile and prove (topology, rules, verify,
config, failover); an artifact made from anything else is refused
(:class:`~hpcfabric.errors.ConfigError`, field ``hpcfabric.compiled``, exit 2)
with what differs and the command that rebuilds it. Pure: no os-ken types.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from hpcfabric import __version__
from hpcfabric.config.build import adapt_tables, compile_rules
from hpcfabric.config.deadlock import deadlock_verdict
from hpcfabric.config.ini import config_error
from hpcfabric.config.model import ControllerConfig
from hpcfabric.rules.tables import CompiledFabric
from hpcfabric.topology.partition import partition_fabric

__all__ = ["FORMAT", "MANIFEST", "fingerprint", "load_artifact", "read_manifest", "write_artifact"]

FORMAT = 1
MANIFEST = "manifest.json"
#: the packages whose code decides the compiled tables and the proof (their source is hashed)
CODE_PACKAGES = ("topology", "rules", "verify", "config", "failover")
#: ControllerConfig fields that shape the tables, the groups or the deadlock verdict
SETTINGS = ("addressing", "widths", "routing", "cos", "cos_levels", "pause_reaction", "switch_hold_s", "cnm",
            "host_mac", "real_macs", "source_check", "punt_meters", "fabric_punt_pps", "host_punt_pps",
            "punt_burst", "fast_failover", "flow_control", "deadlock_check")

_code_hash: str | None = None


def code_hash() -> str:
    """SHA-256 over the source files of :data:`CODE_PACKAGES` (path and bytes, sorted)."""
    global _code_hash
    if _code_hash is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256(__version__.encode())
        for pkg in CODE_PACKAGES:
            for f in sorted((root / pkg).rglob("*.py")):
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        _code_hash = h.hexdigest()
    return _code_hash


def fingerprint(cfg: ControllerConfig) -> dict[str, Any]:
    """What an artifact of ``cfg`` is made from: topology bytes, table-shaping settings, code (hashes)."""
    with open(cfg.topology, "rb") as fh:
        topo = hashlib.sha256(fh.read()).hexdigest()
    settings = {k: getattr(cfg, k) for k in SETTINGS}
    if getattr(cfg, "traffic", None):  # the matrix choosing the Valiant intermediates shapes the tables too
        with open(cfg.traffic, "rb") as fh:
            settings["traffic"] = hashlib.sha256(fh.read()).hexdigest()
    settings_json = json.dumps(settings, sort_keys=True, default=list)
    return {"topology": cfg.topology, "topology_sha256": topo,
            "settings_sha256": hashlib.sha256(settings_json.encode()).hexdigest(), "settings": json.loads(settings_json),
            "code_sha256": code_hash(), "hpcfabric_version": __version__}


def _key(fp: dict[str, Any]) -> str:
    return hashlib.sha256(f"{fp['topology_sha256']}|{fp['settings_sha256']}|{fp['code_sha256']}".encode()).hexdigest()


def _interner() -> Callable[[Any], Any]:
    """Equal flows (and their matches and actions) as one object: a partition's ~840k flows at dragonfly-300k
    are ~170k distinct ones, and a pickle stores (and its reader rebuilds) each object once: 3x faster loads."""
    flows: dict[Any, Any] = {}
    parts: dict[Any, Any] = {}

    def one(f: Any) -> Any:
        g = flows.get(f)
        if g is None:
            actions = tuple(parts.setdefault(a, a) for a in f.actions)
            g = flows[f] = replace(f, match=parts.setdefault(f.match, f.match), actions=parts.setdefault(actions, actions))
        return g

    return one


def write_artifact(cfg: ControllerConfig, out_dir: str | os.PathLike[str], partitions: int = 1,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compile ``cfg`` (loaded with ``compile=False``) once, prove it, write ``partitions`` partition files
    and the manifest (last, atomically) to ``out_dir``; return the manifest. A proof that refuses the tables
    raises :class:`~hpcfabric.errors.ConfigError` and writes nothing."""
    say = progress or (lambda _m: None)
    out = Path(out_dir)
    fp = fingerprint(cfg)  # before compiling: the code and files this artifact is made from
    parts = partition_fabric(cfg.fabric, partitions)
    t0 = time.perf_counter()
    whole = compile_rules(cfg)
    t_compile = time.perf_counter() - t0
    say(f"compiled {len(whole.tables)} switches, {whole.total_flows} rules in {t_compile:.1f} s")
    t1 = time.perf_counter()
    verdict = dict(deadlock_verdict(replace(cfg, compiled=whole)))
    say(f"deadlock: {verdict.get('verdict')} ({time.perf_counter() - t1:.1f} s)")
    full = adapt_tables(cfg, whole) if cfg.fast_failover else None  # groups need the whole fabric's tables
    out.mkdir(parents=True, exist_ok=True)
    old = out / MANIFEST
    if old.exists():
        old.unlink()  # a half-rewritten artifact must not pass for the old one
    entries = []
    for part in parts:
        sub = replace(whole, tables={n: whole.tables[n] for n in part.switches})
        if full is None:
            adapted = adapt_tables(cfg, sub)
            desired, groups = adapted.desired, adapted.groups
        else:
            desired = {n: full.desired[n] for n in part.switches}
            groups = {n: full.groups[n] for n in part.switches if n in full.groups}
        name = f"{part.name}-of-{len(parts)}.pickle"
        one = _interner()
        tables = {n: replace(t, flows=tuple(one(f) for f in t.flows)) for n, t in sub.tables.items()}
        desired = {n: tuple(one(f) for f in flows) for n, flows in desired.items()}
        blob = pickle.dumps({"switches": part.switches, "tables": tables, "desired": desired,
                             "groups": dict(groups)}, protocol=pickle.HIGHEST_PROTOCOL)
        tmp = out / (name + ".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, out / name)
        entries.append({"name": part.name, "label": part.label, "switches": len(part.switches),
                        "first": part.switches[0], "last": part.switches[-1],
                        "rules": sum(len(f) for f in desired.values()), "file": name,
                        "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)})
        say(f"{part.name} ({part.label}): {entries[-1]['rules']} rules, {len(blob) / 1e6:.1f} MB")
    manifest = {"format": FORMAT, "key": _key(fp), "fingerprint": fp, "fabric": cfg.fabric.name,
                "switches": len(cfg.fabric.switches), "cos": whole.cos, "cos_levels": whole.cos_levels,
                "rules": sum(e["rules"] for e in entries), "deadlock": verdict, "partitions": entries,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "compile_s": round(t_compile, 2), "total_s": round(time.perf_counter() - t0, 2)}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, old)
    for f in out.glob("p*-of-*.pickle"):  # files of an earlier compile with another partition count
        if f.name not in {e["file"] for e in entries}:
            f.unlink()
    return manifest


def read_manifest(cfg: ControllerConfig, directory: str) -> dict[str, Any]:
    """The manifest of the artifact at ``directory``, checked against ``cfg`` (ConfigError if absent or stale)."""
    path = Path(directory) / MANIFEST
    rebuild = f"rebuild it: hpcfabric compile --config {cfg.path}"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise config_error(cfg.path, "hpcfabric.compiled", f"no compiled artifact at {directory} ({MANIFEST} "
                           f"missing); {rebuild}") from None
    except (OSError, ValueError) as err:
        raise config_error(cfg.path, "hpcfabric.compiled", f"{path} is unreadable ({err}); {rebuild}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise config_error(cfg.path, "hpcfabric.compiled", f"{path}: format {manifest.get('format') if isinstance(manifest, dict) else '?'}"
                           f", expected {FORMAT}; {rebuild}")
    fp = fingerprint(cfg)
    if manifest.get("key") != _key(fp):
        had = manifest.get("fingerprint") or {}
        what = [w for w, k in (("the topology file", "topology_sha256"), ("the table settings", "settings_sha256"),
                               ("the hpcfabric code", "code_sha256")) if had.get(k) != fp[k]] or ["its key"]
        if "the table settings" in what:
            diff = sorted(k for k in fp["settings"] if (had.get("settings") or {}).get(k) != fp["settings"][k])
            what[what.index("the table settings")] += f" ({', '.join(diff)})" if diff else ""
        raise config_error(cfg.path, "hpcfabric.compiled", f"the artifact at {directory} is stale: "
                           f"{' and '.join(what)} changed since it was compiled ({manifest.get('created')}); {rebuild}")
    return manifest


def load_artifact(cfg: ControllerConfig, directory: str) -> ControllerConfig:
    """``cfg`` (loaded with ``compile=False``) with the tables of the switches it manages taken from the artifact
    at ``directory``: the partitions whose switches it manages, which must cover exactly ``cfg.managed``."""
    manifest = read_manifest(cfg, directory)
    managed = cfg.managed
    tables: dict[str, Any] = {}
    desired: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for entry in manifest["partitions"]:
        if entry["first"] not in managed and entry["last"] not in managed:
            continue
        path = Path(directory) / entry["file"]
        try:
            blob = path.read_bytes()
        except OSError as err:
            raise config_error(cfg.path, "hpcfabric.compiled", f"{path}: {err}; rebuild it: hpcfabric compile "
                               f"--config {cfg.path}") from None
        if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            raise config_error(cfg.path, "hpcfabric.compiled", f"{path} does not match its manifest (sha256); "
                               f"rebuild it: hpcfabric compile --config {cfg.path}")
        part = pickle.loads(blob)  # noqa: S301 - our own file, checked against the manifest's sha256
        if not set(part["switches"]) <= managed:
            raise config_error(cfg.path, "ha.partition", f"the artifact's partition {entry['name']} ({entry['label']}) "
                               f"is only partly managed by this instance: the artifact has {len(manifest['partitions'])} "
                               "partitions; compile it with this config's [ha] partitions")
        tables.update(part["tables"])
        desired.update(part["desired"])
        groups.update(part["groups"])
    if set(tables) != managed:
        missing = sorted(managed - set(tables))
        raise config_error(cfg.path, "ha.partition", f"the artifact at {directory} ({len(manifest['partitions'])} "
                           f"partitions) has no partition for {', '.join(missing[:3])}"
                           f"{' and more' if len(missing) > 3 else ''}; compile it with this config's [ha] partitions")
    compiled = CompiledFabric(cfg.fabric, cfg.plan, cfg.routing, tables, cos=manifest["cos"],
                              cos_levels=manifest["cos_levels"], pause_reaction=cfg.pause_reaction,
                              switch_hold_s=cfg.switch_hold_s)
    verdict = dict(manifest["deadlock"], artifact=str(directory))
    return replace(cfg, compiled=compiled, desired=desired, groups=groups, deadlock=verdict)
