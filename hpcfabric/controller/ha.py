"""High availability: the shared lease file, this instance's OpenFlow role, and what a role change does.

:class:`HaState` is the lease (a JSON file under ``flock``; time passed in as
``now``); :class:`HaAgent` renews it every ``lease_timeout / 5`` and, when the
role changes, starts a new session on every connected switch (a new master
claims MASTER with its generation and reconciles; a slave stops writing).
See docs/operations.md.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Callable

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.discovery import DiscoveryState
from hpcfabric.controller.framework import hub

LOG = logging.getLogger("hpcfabric.controller")


class HaState:
    """High availability: this instance's OpenFlow role and the shared lease (see docs/operations.md).

    ``role = equal``: no role requests (one controller, the default).
    ``auto``: the holder of an unexpired lease in ``lease_file`` is master, the
    others slaves; a slave takes the lease over once it has expired
    (``lease_timeout`` without renewal) with generation + 1, and claims
    MASTER on every switch with that generation id -- the switches reject
    stale claims (fencing). ``master`` / ``slave``: fixed roles (the
    master still uses the lease's generation when there is one).
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.mode = config.ha_role
        self.lease_file = config.ha_lease_file
        self.timeout = config.ha_lease_timeout
        self.instance = config.ha_instance or f"{socket.gethostname()}:{os.getpid()}"
        self.generation = 0
        self.role = "equal" if self.mode == "equal" else "slave"
        self.takeovers = 0
        self.changed_at = time.time()
        self.holder: str | None = None

    @property
    def master(self) -> bool:
        """May this instance write to the switches?"""
        return self.role in ("equal", "master")

    def master_of(self, switch: str) -> bool:
        """May this instance write to ``switch``? (The file lease covers the whole fabric.)"""
        return self.master

    def generation_of(self, switch: str) -> int:
        return self.generation

    def switches_of(self, partitions: Any) -> set[str]:  # pragma: no cover - the file lease has no partitions
        return set()

    def _locked(self, update: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
        import fcntl

        fd = os.open(self.lease_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = b""
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                raw += chunk
            try:
                lease = json.loads(raw.decode("utf-8")) if raw.strip() else {}
                if not isinstance(lease, dict):
                    lease = {}
            except (ValueError, UnicodeDecodeError):
                lease = {}
            new = update(dict(lease))
            if new is not None and new != lease:
                data = json.dumps(new).encode()
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, data)
                lease = new
            return lease
        finally:
            os.close(fd)  # closing releases the lock

    def tick(self, now: float | None = None) -> str | None:
        """Renew or take the lease; returns the new role if it changed (None otherwise)."""
        if self.mode == "equal":
            return None
        now = time.time() if now is None else now
        want_master = self.mode in ("auto", "master")
        if not self.lease_file:  # fixed master without a lease: the generation is the start time (ms)
            if self.role != "master" and want_master:
                self.generation = int(now * 1000)
                return self.set_role("master")
            return None
        me = self.instance

        def update(lease: dict[str, Any]) -> dict[str, Any] | None:
            holder, expires, gen = lease.get("holder"), float(lease.get("expires") or 0), int(lease.get("generation") or 0)
            mine = holder == me and gen == self.generation and self.role == "master"
            if mine or (want_master and (holder is None or expires <= now or self.mode == "master" and holder != me)):
                if not mine:
                    gen += 1
                return {"holder": me, "generation": gen, "expires": now + self.timeout, "pid": os.getpid()}
            return None

        lease = self._locked(update)
        self.holder = lease.get("holder")
        gen = int(lease.get("generation") or 0)
        if self.holder == me and lease.get("expires", 0) > now:
            if self.role != "master" or gen != self.generation:
                self.generation = gen
                self.takeovers += self.role == "slave"
                return self.set_role("master")
            return None
        self.generation = gen
        if self.role != "slave":
            return self.set_role("slave")
        return None

    def set_role(self, role: str) -> str:
        self.role = role
        self.changed_at = time.time()
        return role

    def release(self) -> None:
        """On a clean stop: let the lease expire now, so a peer takes over without waiting."""
        if self.mode == "equal" or not self.lease_file or self.role != "master":
            return
        me, gen = self.instance, self.generation

        def update(lease: dict[str, Any]) -> dict[str, Any] | None:
            if lease.get("holder") == me and int(lease.get("generation") or 0) == gen:
                return {**lease, "expires": 0}
            return None

        try:
            self._locked(update)
        except OSError:  # pragma: no cover
            pass

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "role": self.role, "generation": self.generation, "instance": self.instance,
                "lease_holder": self.holder, "takeovers": self.takeovers, "since": self.changed_at}


def discovery_scope(config: ControllerConfig, ha: Any) -> tuple[frozenset[str] | None, str | None]:
    """What LLDP discovery expects (switches, label): the partitions this instance masters under etcd (none
    while it masters none), the ``[ha] switches`` / ``partition`` it manages, else (None, None): the fabric."""
    if config.ha_backend == "etcd":
        active = sorted(getattr(ha, "active", ()))
        names = frozenset(ha.switches_of(active))
        if config.ha_switches:
            names &= config.managed
        return names, f"partitions {','.join(active) or '(none)'}: {len(names)} switches"
    if config.ha_switches:
        part = f" p{config.ha_partition}" if config.ha_partition is not None else ""
        return config.managed, f"partition{part}: {len(config.managed)} switches"
    return None, None


def scoped_discovery(config: ControllerConfig, fabric: Any, ha: Any) -> DiscoveryState:
    """A fresh discovery state for ``fabric`` expecting what :func:`discovery_scope` says (at start and at
    every reload: ``[ha] switches`` may have changed)."""
    state = DiscoveryState(fabric, config.lldp_timeout)
    state.set_scope(*discovery_scope(config, ha))
    return state


def make_ha(config: ControllerConfig) -> Any:
    """The HA state for ``[ha] backend``: the lease file (default, one host) or etcd (several machines)."""
    if config.ha_backend == "etcd":
        from hpcfabric.controller.etcdha import EtcdHa

        return EtcdHa(config)
    return HaState(config)


class HaAgent:
    """Keeps the lease ``ha`` and applies role changes to ``state``'s switches: ``session(sw, dp, gen)`` starts
    a new session (the sessions'), ``forget(dpid | None)`` drops flips in flight (the pausing's);
    ``active()``: the app still runs."""

    def __init__(self, state: Any, ha: Any, counters: Any, changes: Any, active: Callable[[], bool],
                 session: Callable[[Any, Any, int], None], forget: Callable[[int | None], None]) -> None:
        self.state, self.ha, self.counters, self.changes, self.active = state, ha, counters, changes, active
        self.session, self.forget = session, forget

    def loop(self) -> None:
        ha = self.ha
        if ha.mode == "equal":
            return
        last_ok = time.monotonic()
        while self.active():
            try:
                change = ha.tick()
                last_ok = time.monotonic()
            except OSError as err:
                change = None
                self.counters["lease_errors"] += 1
                LOG.error("HA lease %s: %s", getattr(ha, "lease_file", None) or "store", err)
                if ha.role == "master" and time.monotonic() - last_ok > ha.timeout:
                    ha.set_role("slave")  # we cannot renew: the lease is gone by now, so are we
                    change = "slave"
            if change:
                self.changed(change)
            hub.sleep(max(0.05, ha.timeout / 5))

    def changed(self, role: str | dict[str, str]) -> None:
        """The role changed (a dict: per partition): a new session on every connected switch concerned."""
        fab = self.state
        names = None
        if isinstance(role, dict):
            for part, r in sorted(role.items()):
                LOG.warning("HA: this instance (%s) is now %s of partition %s", self.ha.instance, r.upper(), part)
            names = self.ha.switches_of(role)
            role = "master" if "master" in role.values() else "slave"
        else:
            LOG.warning("HA: this instance (%s) is now %s (generation %d)", self.ha.instance, role.upper(),
                        self.ha.generation)
        for st in fab.switches.values():
            if st.connected and st.dp is not None and (names is None or st.name in names):
                st.gen += 1
                st.confirmed = False if not self.ha.master_of(st.name) else st.confirmed
                hub.spawn(self.session, st, st.dp, st.gen)
        if not self.ha.master:
            self.forget()
        else:
            for st in fab.switches.values():
                if not self.ha.master_of(st.name):
                    self.forget(st.dpid)
        if names is not None:  # the partitions we master changed: so do the links discovery expects
            fab.discovery.set_scope(*discovery_scope(self.state.config, self.ha))
        self.changes.mark(rediscover=names is not None)
