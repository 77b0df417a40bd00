"""Synthetic traffic patterns over a fabric model (pure): who sends to whom.

A pattern maps every host to the hosts it draws destinations from (uniformly,
frame by frame, in the traffic generator). Paper Sec. VI-B and notes §1:

* ``uniform`` (UN): every other host of the fabric.
* ``adversarial`` (ADV): the hosts of the "next" block, so that minimal
  routing concentrates a whole block's traffic on few links --
  Dragonfly: group i -> group i+1 (mod g; the paper's ADV, one global link
  carries it all); Flattened Butterfly: switch (c_0, ..., c_{N-1}) -> switch
  (c_0, ..., c_{N-1}+1) (mod k_{N-1}): every host of a switch to the one
  switch of the next "group" (the paper's FB group is a dimension-0 row) on
  its own dimension-0 position, so minimal routing has a single path, the
  direct highest-dimension link. (Shifting every dimension would be no
  harder for minimal routing and no easier for adaptive routing: both
  minimal first hops are then links the neighbours saturate themselves.)
  fat-tree / folded Clos: pod i -> pod i+1; explicit fabrics: switch i ->
  switch i+1 in fabric order.

Each destination list is sorted by host name, so runs are reproducible.
"""

from __future__ import annotations

from hpcfabric.errors import HpcfabricError
from hpcfabric.topology.model import Fabric

PATTERNS = ("uniform", "adversarial")
#: short names accepted on command lines
ALIASES = {"un": "uniform", "adv": "adversarial", "uniform": "uniform", "adversarial": "adversarial"}


class PatternError(HpcfabricError):
    """An unknown pattern, or one that does not apply to the fabric."""

    exit_code = 2


def pattern(fabric: Fabric, name: str) -> dict[str, tuple[str, ...]]:
    """``host -> destinations`` of pattern ``name`` (``uniform``/``un`` or ``adversarial``/``adv``) on ``fabric``.

    Raises
    ------
    PatternError
        For an unknown name or a fabric with a single block (no "next" block).
    """
    key = ALIASES.get(name.lower())
    if key is None:
        raise PatternError(f"unknown traffic pattern {name!r}: expected one of {', '.join(sorted(ALIASES))}")
    if key == "uniform":
        return uniform(fabric)
    return adversarial(fabric)


def uniform(fabric: Fabric) -> dict[str, tuple[str, ...]]:
    """UN: every host draws from all other hosts."""
    names = sorted(h.name for h in fabric.hosts)
    return {h: tuple(n for n in names if n != h) for h in names}


def _block_of(fabric: Fabric) -> tuple[dict[str, tuple[int, ...]], dict[tuple[int, ...], tuple[int, ...]]]:
    """(switch -> block key, block key -> next block key) for the adversarial pattern."""
    access = fabric.access_switches
    if fabric.kind == "flattened_butterfly":
        dims = tuple(fabric.params["dims"])
        block = {s.name: tuple(s.coords) for s in access}
        top = len(dims) - 1
        nxt = {c: c[:top] + ((c[top] + 1) % dims[top],) for c in block.values()}
        return block, nxt
    if fabric.kind in ("dragonfly", "fat_tree", "folded_clos"):
        block = {s.name: (s.group,) for s in access}
    else:
        block = {s.name: (i,) for i, s in enumerate(access)}
    keys = sorted(set(block.values()))
    nxt = {k: keys[(i + 1) % len(keys)] for i, k in enumerate(keys)}
    return block, nxt


def adversarial(fabric: Fabric) -> dict[str, tuple[str, ...]]:
    """ADV: every host draws from the hosts of the next block (see the module docstring)."""
    block, nxt = _block_of(fabric)
    if len(set(block.values())) < 2:
        raise PatternError(f"fabric {fabric.name!r} has a single block: the adversarial pattern needs two or more")
    members: dict[tuple[int, ...], list[str]] = {}
    for h in fabric.hosts:
        members.setdefault(block[h.switch], []).append(h.name)
    out = {}
    for h in sorted(fabric.hosts, key=lambda h: h.name):
        dests = sorted(members.get(nxt[block[h.switch]], ()))
        if not dests:
            raise PatternError(f"adversarial pattern: the block after {h.switch}'s has no hosts")
        out[h.name] = tuple(dests)
    return out
