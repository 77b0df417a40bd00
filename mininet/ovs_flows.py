"""Flow tables and counters of the net's bridges, read and written with ``ovs-ofctl`` (OpenFlow 1.3).

* :func:`dump_flows` -> :class:`FlowStat` rows, :func:`flow_counts`, :func:`port_stats`,
  :func:`table_packets`; :func:`sync_stats` first when a counter must be current (the userspace
  datapath pushes megaflow counters to the OpenFlow rules only when its revalidators run).
* :func:`install_static_flows`: static mode, one atomic ``--bundle add-flows`` per bridge.
* :func:`port_state_entry` / :func:`wait_port_state` / :func:`set_port_state`: a fabric port's PORT_STATE
  entry, read, waited for, and flipped as the controller does on a PAUSE (static mode plays the controller).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from fabric_topo import FabricNetError, run_cmd  # mininet/fabric_topo.py (this folder is on sys.path)

from hpcfabric.rules.flows import TABLE_PORT_STATE

OFCTL = ("ovs-ofctl", "-O", "OpenFlow13")


@dataclass(frozen=True)
class FlowStat:
    """One row of ``ovs-ofctl dump-flows``."""

    table: int
    priority: int
    match: str
    n_packets: int
    actions: str
    cookie: int = 0
    n_bytes: int = 0
    duration: float = 0.0  # seconds since the entry was added (a modify keeps it)


_STAT_KEYS = frozenset(
    {"cookie", "duration", "table", "n_packets", "n_bytes", "idle_timeout", "hard_timeout", "idle_age",
     "hard_age", "importance"}
)  # fmt: skip


def parse_dump_flows(text: str) -> list[FlowStat]:
    """Parse ``ovs-ofctl -O OpenFlow13 --no-names dump-flows`` output (header lines are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if " actions=" not in line and not line.startswith("actions="):
            continue
        head, _, actions = line.partition("actions=")
        stats: dict[str, str] = {}
        match_parts: list[str] = []
        for part in head.strip().rstrip(",").split(", "):
            key, eq, value = part.partition("=")
            if eq and key in _STAT_KEYS:
                stats[key] = value
            elif part:
                match_parts.extend(p for p in part.split(",") if p)
        priority = 32768
        match = []
        for p in match_parts:
            if p.startswith("priority="):
                priority = int(p.split("=", 1)[1])
            else:
                match.append(p)
        out.append(
            FlowStat(
                table=int(stats.get("table", 0)),
                priority=priority,
                match=",".join(match),
                n_packets=int(stats.get("n_packets", 0)),
                actions=actions.strip(),
                cookie=int(stats.get("cookie", "0"), 16),
                n_bytes=int(stats.get("n_bytes", 0)),
                duration=float(stats.get("duration", "0").rstrip("s") or 0),
            )
        )
    return out


def dump_flows(
    switch: str, table: int | None = None, match: str | None = None, sync: bool = False
) -> list[FlowStat]:
    """Flows of bridge ``switch`` (the Mininet/bridge name), optionally one table / a match filter.

    ``sync``: first wait for the revalidators (:func:`sync_stats`) so the counters are current.
    """
    if sync:
        sync_stats()
    spec = ",".join(x for x in (f"table={table}" if table is not None else "", match or "") if x)
    cmd = [*OFCTL, "--no-names", "dump-flows", switch] + ([spec] if spec else [])
    return parse_dump_flows(run_cmd(cmd))


def port_stats(switch: str, port: int) -> dict[str, int]:
    """rx/tx packet counters of one port of bridge ``switch`` (read from the netdev, not lagged)."""
    text = run_cmd([*OFCTL, "--no-names", "dump-ports", switch, str(port)])
    rx = re.search(r"rx pkts=(\d+)", text)
    tx = re.search(r"tx pkts=(\d+)", text)
    if not rx or not tx:
        raise FabricNetError(f"cannot parse dump-ports {switch} {port}: {text.strip()[:200]}")
    return {"rx": int(rx.group(1)), "tx": int(tx.group(1))}


def socket_drops() -> int:
    """Frames Open vSwitch's packet sockets dropped because their receive queue was full, summed over all
    of them (``ss -0 -m``, ``skmem`` field ``d``): what the userspace datapath could not take in time."""
    text = run_cmd(["ss", "-0", "-m", "-p"])
    return sum(int(d) for line in text.splitlines() if "ovs-vswitchd" in line
               for d in re.findall(r"skmem:\(.*?\bd(\d+)\)", line))


def sync_stats(timeout: float = 10) -> bool:
    """Wait for one full revalidator cycle, so flow counters include every packet forwarded so far.

    The userspace datapath forwards through cached megaflows and pushes their
    counters to the OpenFlow rules only when the revalidators run (about every
    500 ms): without this, ``n_packets`` lags by up to half a second.
    ``ovs-appctl revalidator/wait`` returns when a cycle has completed (one
    datapath: all userspace bridges share ``netdev@ovs-netdev``).
    """
    try:
        return subprocess.run(["ovs-appctl", "revalidator/wait"], capture_output=True, timeout=timeout).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def install_static_flows(net: Any, compiled: Any) -> dict[str, int]:
    """Install flows with ``ovs-ofctl --bundle add-flows`` (no controller), one atomic bundle per bridge.

    ``compiled``: a CompiledFabric (anything with ``.tables[name].flows``) or a mapping switch -> flows.
    Returns the number of flows sent per switch.
    """
    from hpcfabric.openflow.ofctl import flows_text

    tables: Mapping[str, Iterable] = (
        {name: t.flows for name, t in compiled.tables.items()} if hasattr(compiled, "tables") else compiled
    )
    counts = {}
    prefix = getattr(net, "hf_prefix", "")
    for sw in net.hf_fabric.switches:
        flows = tuple(tables[sw.name])
        run_cmd([*OFCTL, "--bundle", "add-flows", prefix + sw.name, "-"], input=flows_text(flows), timeout=60)
        counts[sw.name] = len(flows)
    return counts


def flow_counts(net: Any) -> dict[str, int]:
    """Installed flows per model switch (from dump-flows)."""
    prefix = getattr(net, "hf_prefix", "")
    return {sw.name: len(dump_flows(prefix + sw.name)) for sw in net.hf_fabric.switches}


def table_packets(net: Any, table: int) -> int:
    """Frames counted by the entries of ``table`` on every switch (counters synced first)."""
    sync_stats()
    return sum(f.n_packets for sw in net.hf_fabric.switches for f in dump_flows(net.hf_prefix + sw.name, table=table))


# ---------------------------------------------------------------------------
# PORT_STATE entries


def is_port_state(flow: FlowStat, port: int) -> bool:
    """Is ``flow`` the entry of fabric port ``port`` (``metadata=P/0xffff``), not a bounce entry
    (``in_port=L,metadata=L``: the h = 1 detour through a neighbour, docs/rules.md)?"""
    return re.search(rf"metadata=0x{port:x}/0xffff(,|$)", flow.match) is not None and "in_port=" not in flow.match


def port_state_entry(bridge: str, port: int) -> FlowStat | None:
    """The PORT_STATE entry of ``port`` on ``bridge`` (None if there is none)."""
    for f in dump_flows(bridge, table=TABLE_PORT_STATE):
        if is_port_state(f, port):
            return f
    return None


def wait_port_state(bridge: str, port: int, paused: bool, timeout: float) -> float | None:
    """Poll until the PORT_STATE entry of ``port`` is (not) paused (``goto_table:3``); the time reached, or None
    after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ps = port_state_entry(bridge, port)
        if ps is not None and ("goto_table:3" in ps.actions) == paused:
            return time.monotonic()
        time.sleep(0.005)
    return None


def set_port_state(bridge: str, port: int, paused: bool) -> None:
    """What the controller does on a flip (static mode plays the controller): one strict modify."""
    from hpcfabric.openflow.ofctl import actions_text, match_text
    from hpcfabric.rules.port_state import port_state_flow

    f = port_state_flow(port, paused)
    spec = ",".join([f"table={f.table}", f"priority={f.priority}", *match_text(f.match)]) + f",actions={actions_text(f)}"
    run_cmd([*OFCTL, "--strict", "mod-flows", bridge, spec])


# ---------------------------------------------------------------------------
# whole bridges: transmit counters, flows against a table, groups

_PORT_TX = re.compile(r"port\s+(\d+): rx pkts=\d+.*?tx pkts=(\d+)", re.S)


def tx_counters(bridge: str) -> dict[int, int]:
    """Frames sent out of every numbered port of ``bridge`` (one ``dump-ports``; netdev counters, not lagged)."""
    return {int(p): int(tx) for p, tx in _PORT_TX.findall(run_cmd([*OFCTL, "--no-names", "dump-ports", bridge]))}


def diff_flows(bridge: str, flows: Iterable[Any]) -> list[str]:
    """The differences between ``bridge``'s flow table and ``flows`` (FlowSpecs) as Open vSwitch itself
    compares them (``ovs-ofctl diff-flows``: match, priority, table, cookie, actions; counters ignored):
    ``-`` lines only on the bridge, ``+`` lines only in ``flows``. Empty: the bridge holds exactly ``flows``."""
    import tempfile

    from hpcfabric.openflow.ofctl import flows_text

    with tempfile.NamedTemporaryFile("w", suffix=".flows", encoding="utf-8") as f:  # an absolute path: a file
        f.write(flows_text(flows))
        f.flush()
        proc = subprocess.run([*OFCTL, "diff-flows", bridge, f.name], capture_output=True, text=True, timeout=60)
    if proc.returncode not in (0, 2) or proc.stderr.strip():  # 2: they differ
        raise FabricNetError(f"ovs-ofctl diff-flows {bridge}: {proc.stderr.strip()[:300] or proc.returncode}")
    return [line for line in proc.stdout.splitlines() if line.startswith(("-", "+"))]


def dump_groups(bridge: str) -> list[str]:
    """``bridge``'s groups, one ``ovs-ofctl dump-groups`` line each, sorted."""
    text = run_cmd([*OFCTL, "--no-names", "dump-groups", bridge])
    return sorted(line.strip() for line in text.splitlines() if line.strip().startswith("group_id="))
