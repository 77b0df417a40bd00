"""High availability over etcd: one lease per instance, one master key and one generation counter per partition.

Keys under ``<prefix>/<fabric>/`` (docs/ha.md):

* ``members/<instance>`` -- attached to the instance's lease: the live instances;
* ``master/<partition>`` -- ``{instance, generation, since}``, attached to the master's lease (it vanishes
  when the lease expires or is revoked);
* ``gen/<partition>`` -- the partition's generation counter, never attached to a lease.

A claim is one etcd transaction: *master key absent and generation key unchanged since read* -> put
``gen + 1`` and the master key. etcd (raft) serialises it: at most one claim per generation succeeds, the
generation only grows. The holder renews its lease every ``tick``; it stops acting as master once
``granted TTL`` has passed since the start of its last successful renewal (etcd's own expiry comes later,
so the old master is silent before any standby can claim). Partitions are derived from the topology
(:func:`hpcfabric.topology.partition.partition_fabric`) and balanced over the live instances
(:func:`~hpcfabric.topology.partition.assign`, sticky: as few moves as balance allows): a free partition
is claimed by its balanced owner at once, by anybody after one TTL; a master hands over one partition
per tick that balance gives to another live instance.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.etcdstore import EtcdStore, EtcdUnavailable
from hpcfabric.topology.partition import assign, partition_fabric


class EtcdHa:
    """The etcd backend of the HA state (same face as :class:`hpcfabric.controller.ha.HaState`)."""

    def __init__(self, config: ControllerConfig, store: EtcdStore | None = None) -> None:
        self.mode = "auto"
        self.backend = "etcd"
        self.ttl = int(config.ha_ttl)
        self.timeout = float(self.ttl)  # the agent ticks every timeout / 5
        self.instance = config.ha_instance or f"{socket.gethostname()}:{os.getpid()}"
        self.prefix = f"{config.ha_prefix.rstrip('/')}/{config.fabric.name}/"
        self.parts = partition_fabric(config.fabric, config.ha_partitions)
        self.part_of = {sw: p.name for p in self.parts for sw in p.switches}
        self.store = store or EtcdStore.for_config(config, timeout=max(0.2, self.ttl / 4))
        self.lease = 0
        self.granted = self.ttl
        self.lease_ok = float("-inf")  # monotonic start of the last successful grant / renewal
        self.owned: dict[str, int] = {}  # partition -> generation, as etcd says (last view)
        self.values: dict[str, str] = {}  # partition -> our master key's value (to release exactly ours)
        self.active: dict[str, int] = {}  # partitions this instance acts as master for
        self.view: dict[str, dict[str, Any]] = {}
        self.members: list[str] = []
        self.free_since: dict[str, float] = {}
        self.takeovers = 0
        self.handovers = 0
        self.claims = 0  # claim transactions that succeeded
        self.errors = 0
        self.last_error = ""
        self.role = "slave"
        self.generation = 0
        self.holder: str | None = None
        self.changed_at = time.time()

    # ------------------------------------------------------------ the face the controller uses
    def deadline(self) -> float:
        """Monotonic time until which our lease is surely alive at etcd (the server expires it later)."""
        return self.lease_ok + self.granted - min(0.2, self.granted * 0.1)

    @property
    def master(self) -> bool:
        """Master of at least one partition, with a live lease."""
        return bool(self.active) and time.monotonic() < self.deadline()

    def master_of(self, switch: str) -> bool:
        """May this instance write to ``switch`` now (master of its partition, lease alive)?"""
        return self.part_of.get(switch) in self.active and time.monotonic() < self.deadline()

    def generation_of(self, switch: str) -> int:
        """The generation id to send to ``switch`` (ours if master of its partition, else the last seen)."""
        p = self.part_of.get(switch)
        if p in self.active:
            return self.active[p]
        return int(self.view.get(p, {}).get("generation", 0))

    def switches_of(self, partitions: Any) -> set[str]:
        want = set(partitions)
        return {sw for sw, p in self.part_of.items() if p in want}

    # ------------------------------------------------------------ one round
    def tick(self, now: float | None = None) -> dict[str, str] | None:
        """Renew, read, claim / hand over; returns {partition: new role} for the partitions whose role changed."""
        try:
            self.sync(time.monotonic() if now is None else now)
        except EtcdUnavailable as err:
            self.errors += 1
            self.last_error = str(err)
        except (KeyError, ValueError, TypeError) as err:  # a reply we cannot read: as if unreachable
            self.errors += 1
            self.last_error = f"unexpected etcd reply: {type(err).__name__}: {err}"
        live = time.monotonic() < self.deadline()
        new = dict(self.owned) if live else {}
        changes = {p: "master" for p, g in new.items() if self.active.get(p) != g}
        changes.update({p: "slave" for p in self.active if p not in new})
        self.takeovers += sum(1 for p in changes if changes[p] == "master" and self.view.get(p, {}).get("taken"))
        self.active = new
        role = "master" if new else "slave"
        if role != self.role or changes:
            self.role = role
            self.changed_at = time.time()
        self.generation = max(new.values(), default=max((int(v.get("generation", 0)) for v in self.view.values()),
                                                        default=0))
        self.holder = self.instance if new else None
        return changes or None

    def sync(self, now: float) -> None:
        st = self.store
        if self.lease:
            t = time.monotonic()
            if st.keepalive(self.lease) > 0:
                self.lease_ok = t
            else:  # expired at etcd: our keys are gone, another instance may hold our partitions by now
                self.lease, self.owned, self.values = 0, {}, {}
        if not self.lease:
            t = time.monotonic()
            self.lease, self.granted = st.grant(self.ttl)
            self.lease_ok = t
            st.put(self.prefix + "members/" + self.instance, json.dumps({"since": time.time(), "pid": os.getpid()}),
                   self.lease)
        kvs, _rev = st.range_prefix(self.prefix)
        members, masters, gens = [], {}, {}
        for key, kv in kvs.items():
            kind, _, name = key[len(self.prefix):].partition("/")
            if kind == "members":
                members.append(name)
            elif kind == "master":
                try:
                    masters[name] = {**json.loads(kv["value"]), "lease": kv["lease"], "raw": kv["value"]}
                except ValueError:
                    masters[name] = {"instance": "?", "generation": 0, "lease": kv["lease"], "raw": kv["value"]}
            elif kind == "gen":
                gens[name] = (int(kv["value"] or 0), kv["mod_revision"])
        self.members = sorted(members)
        desired = assign([p.name for p in self.parts], members,
                         {p: m.get("instance") for p, m in masters.items() if m.get("instance") in members})
        owned, view, claimed = {}, {}, set()
        for part in self.parts:
            p = part.name
            m = masters.get(p)
            taken = False
            if m is None:
                self.free_since.setdefault(p, now)
                if desired.get(p) == self.instance or now - self.free_since[p] >= self.granted:
                    g, rev = gens.get(p, (0, 0))
                    value = json.dumps({"instance": self.instance, "generation": g + 1, "since": time.time()})
                    if st.txn([(self.prefix + "master/" + p, "create", 0), (self.prefix + "gen/" + p, "mod", rev)],
                              [("put", self.prefix + "gen/" + p, str(g + 1)),
                               ("put", self.prefix + "master/" + p, value, self.lease)]):
                        m = {"instance": self.instance, "generation": g + 1, "lease": self.lease, "raw": value}
                        taken = g > 0
                        claimed.add(p)
                        self.claims += 1
            if m is not None:
                self.free_since.pop(p, None)
                if m["instance"] == self.instance and m["lease"] == self.lease:
                    owned[p] = int(m["generation"])
                    self.values[p] = m["raw"]
            view[p] = {"master": m["instance"] if m else None, "generation": int(m["generation"]) if m else
                       gens.get(p, (0, 0))[0], "standbys": [x for x in self.members if not m or x != m["instance"]],
                       "lease": m["lease"] if m else 0, "taken": taken}
        # balance: hand one partition per round to its balanced owner (it claims it on its next round);
        # not one claimed in this very round (the members may have changed since; the next round decides)
        for p in sorted(owned):
            if desired.get(p) not in (None, self.instance) and p not in claimed:
                key = self.prefix + "master/" + p
                if st.txn([(key, "value", self.values[p])], [("delete", key)]):
                    del owned[p]
                    self.handovers += 1
                    view[p] = {**view[p], "master": None, "lease": 0}
                break
        self.owned = owned
        self.view = view

    def release(self) -> None:
        """On a clean stop: revoke the lease -- our master keys vanish, the others claim at their next round."""
        if self.lease:
            try:
                self.store.revoke(self.lease)
            except EtcdUnavailable:
                pass
            self.lease, self.owned, self.active = 0, {}, {}

    def as_dict(self) -> dict[str, Any]:
        now = time.monotonic()
        parts = []
        for part in self.parts:
            v = self.view.get(part.name, {})
            mine = part.name in self.active
            parts.append({"partition": part.name, "covers": part.label, "switches": len(part.switches),
                          "master": v.get("master"), "standbys": v.get("standbys", []),
                          "generation": v.get("generation", 0),
                          "lease_age": round(now - self.lease_ok, 3) if mine else None})
        return {"mode": self.mode, "backend": "etcd", "role": self.role, "generation": self.generation,
                "instance": self.instance, "lease_holder": self.holder, "takeovers": self.takeovers,
                "handovers": self.handovers, "claims": self.claims, "since": self.changed_at, "etcd_errors": self.errors,
                "etcd_last_error": self.last_error, "members": self.members, "active": sorted(self.active),
                "partitions": parts}
