"""One repair planner for all the partitions of a fabric on one host, behind a Unix socket.

Each partition's controller used to start its own planner (:mod:`hpcfabric.repair.service`), and each built the
whole fabric's proof base: at dragonfly-300k ~6.5 GB and ~6 min apiece, eight of them do not fit in 24 GB.
``python -m hpcfabric.repair.shared SOCKET`` (started by the first controller of the host, a lock file decides:
:mod:`hpcfabric.controller.shared_planner`; the INI text it loaded comes on stdin) loads the fabric whole -- every
switch, whatever ``[ha] partition`` the text names --, listens on ``SOCKET`` at once, builds the proof base once
(nice +10 for two minutes at most; then, and for every plan, nice -5 where permitted:
:class:`hpcfabric.repair.service.Priority`), and answers each controller over its own connection, one request at a
time across all of them:

* ``("hello", names)`` (the switches that controller manages) -> ``ready`` (once the base is built) with the
  planner's ``generation`` (its pid and start time);
* ``("plan", failures, (generation, epoch), repaired)`` -> the plan for ``failures`` as that controller needs it:
  the summary of the plan (:func:`hpcfabric.repair.service.slim` without tables) and the tables of ITS switches that
  differ between the tables it has in force (``epoch``) and the plan's, as ``patches`` (:mod:`hpcfabric.repair.patch`)
  -- or whole (``desired``) where the planner does not know what it has in force (an epoch of another generation:
  the switches it names ``repaired``, and whatever changed since the compiled tables);
* ``("tables", names, epoch)`` -> those switches' tables at ``epoch``, whole (a patch that did not fit).

**Planned once.** The planner keeps *epochs*: epoch 0 is the compiled tables, each plan it applies is the next one
(with the tables of the switches it changed: the per-switch history is small). A plan is asked for a set of failures;
if the newest epoch is already for that set, it is not planned again: the controller gets the patches from its own
epoch to the newest one (a controller one plan behind gets the changes of both). A plan that is proven is applied at
once (under ``flow_control = pause`` an unproven one too, with a new base: as at load); under ``pfc`` an unproven plan
is discarded (the base stays at the tables in force), its verdict kept for the others asking for the same failures.
Every controller installs only proven plans and only its switches; the update order of each plan is its waves,
restricted to that controller's switches.

The process ends when its last controller has gone (or none came in its first minute); if it dies, the next
controller to ask starts another (:mod:`hpcfabric.controller.shared_planner`): that one's epoch 0 is the compiled
tables again, so a controller with repaired tables in force gets them whole once.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import replace
from typing import Any, Iterable, Mapping

from hpcfabric.repair.patch import changes, make_patch
from hpcfabric.repair.service import Priority, prepare, read_message, write_message

__all__ = ["Epochs", "SharedPlanner", "main"]

LOG = logging.getLogger("hpcfabric.repair")

#: the planner ends if no controller connected within this many seconds of its start
FIRST_CONTACT_S = 60.0


class Epochs:
    """The tables in force after each applied plan: epoch 0 ``initial``, then only the switches each plan changed."""

    def __init__(self, initial: Mapping[str, tuple[Any, ...]]) -> None:
        self.initial = initial
        self.head = 0
        self.records: list[dict[str, Any]] = []  # epoch k's plan summary at records[k - 1]
        self.history: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}

    def advance(self, tables: Mapping[str, tuple[Any, ...]], record: dict[str, Any]) -> int:
        self.head += 1
        for name, table in tables.items():
            self.history.setdefault(name, []).append((self.head, table))
        self.records.append({**record, "switches": tuple(tables)})
        return self.head

    def table(self, name: str, epoch: int) -> tuple[Any, ...]:
        """``name``'s table in force at ``epoch``."""
        for at, table in reversed(self.history.get(name, ())):
            if at <= epoch:
                return table
        return self.initial.get(name, ())

    def changed_since(self, epoch: int) -> set[str]:
        """Switches whose tables some epoch after ``epoch`` changed."""
        out: set[str] = set()
        for rec in self.records[epoch:]:
            out.update(rec["switches"])
        return out


class SharedPlanner:
    """A :class:`~hpcfabric.repair.plan.Repairer` of the whole fabric and its epochs (module docstring); thread-safe."""

    def __init__(self, rep: Any, refuse_unproven: bool, generation: str) -> None:
        self.rep = rep
        self.refuse_unproven = refuse_unproven
        self.generation = generation
        self.epochs = Epochs(dict(rep.desired))
        self.lock = threading.Lock()
        self.refused: tuple[Any, int, dict[str, Any]] | None = None  # (failures, head, summary): not proven
        self.plans = 0

    def plan(self, failures: Any, have: tuple[str, int] | None, names: Iterable[str],
             repaired: Iterable[str] = ()) -> dict[str, Any]:
        """The reply to ``("plan", failures, have, repaired)`` from the controller of switches ``names``."""
        with self.lock:
            epochs, rep = self.epochs, self.rep
            if failures != rep.failures:
                if self.refused is not None and self.refused[0] == failures and self.refused[1] == epochs.head:
                    return dict(self.refused[2], epoch=epochs.head)
                plan = rep.plan(failures)
                self.plans += 1
                summary = summarize(plan)
                if not plan.proven and self.refuse_unproven:
                    rep.discard(plan)
                    self.refused = (failures, epochs.head, summary)
                    return dict(summary, epoch=epochs.head)
                rep.apply(plan)
                if not plan.proven and rep.prove:  # installed as at load under pause: the base is built again
                    rep.state = None
                    rep.base()
                epochs.advance(plan.desired, summary)
                gc.freeze()  # the tables in force now: long-lived
            return self._reply(have, set(names), set(repaired))

    def _reply(self, have: tuple[str, int] | None, names: set[str], repaired: set[str]) -> dict[str, Any]:
        epochs = self.epochs
        head = epochs.head
        if head:
            out: dict[str, Any] = dict(epochs.records[head - 1])
        else:  # the compiled tables (a planner started again while some controllers hold repaired ones)
            verdict = {"proven": True, "verdict": "proven", "explanation": "the compiled tables, proven at load"}
            out = {"failures": self.rep.failures, "changed": (), "groups": dict(self.rep.groups), "waves": (),
                   "entries": 0, "verdict": verdict, "seconds": 0.0, "timings": {}, "proven": True,
                   "summary": {"failures": self.rep.failures.as_dict(), "changed": 0, "regrouped": 0, "entries": 0,
                               "waves": [], "proven": True, "verdict": verdict, "seconds": 0.0, "timings": {}}}
        out.pop("switches", None)
        gen, at = have if have is not None else (self.generation, 0)
        known = gen == self.generation or at == 0  # epoch 0 is the compiled tables in every generation
        at = at if gen == self.generation else 0
        mine = sorted((epochs.changed_since(at) | (set() if known else repaired)) & names)
        patches: dict[str, Any] = {}
        whole: dict[str, Any] = {}
        entries = 0
        for s in mine:
            new = epochs.table(s, head)
            if not known:
                whole[s] = new
                entries += len(new)
                continue
            old = epochs.table(s, at)
            if old is new:
                continue
            patches[s] = make_patch(old, new)
            entries += changes(patches[s])
        waves = [tuple(s for s in w if s in patches or s in whole) for w in out["waves"]]
        extra = tuple(s for s in (*patches, *whole) if not any(s in w for w in waves))
        out.update(patches=patches, desired=whole, entries=entries, epoch=head, generation=self.generation,
                   planner_plans=self.plans,
                   waves=tuple(w for w in (*waves, extra) if w), changed=tuple(mine))
        return out

    def failed(self, failures: Any, err: BaseException) -> dict[str, Any]:
        """The reply when planning ``failures`` raised ``err``: not proven, nothing to install."""
        verdict = {"proven": False, "verdict": "planner error", "explanation": f"{type(err).__name__}: {err}"}
        summary = {"failures": failures.as_dict(), "changed": 0, "regrouped": 0, "entries": 0, "waves": [],
                   "proven": False, "verdict": verdict, "seconds": 0.0, "timings": {}}
        return {"failures": failures, "changed": (), "groups": dict(self.rep.groups), "waves": (), "entries": 0,
                "verdict": verdict, "seconds": 0.0, "timings": {}, "proven": False, "summary": summary,
                "patches": {}, "desired": {}, "epoch": self.epochs.head, "generation": self.generation,
                "planner_plans": self.plans}

    def tables(self, names: Iterable[str], epoch: int) -> dict[str, Any]:
        with self.lock:
            return {s: self.epochs.table(s, min(epoch, self.epochs.head)) for s in names}


def summarize(plan: Any) -> dict[str, Any]:
    """What every controller is told of a plan (its own tables come apart)."""
    return {"failures": plan.failures, "changed": plan.changed, "groups": dict(plan.groups), "waves": plan.waves,
            "entries": plan.entries, "verdict": dict(plan.verdict), "seconds": plan.seconds,
            "timings": dict(plan.timings), "proven": plan.proven, "summary": plan.as_dict()}


def load_whole(path: str, text: str) -> Any:
    """The config ``text`` (at ``path``) with every switch of its fabric managed, compiled (from its artifact if it
    names one: every partition file)."""
    from hpcfabric.config import load_config
    from hpcfabric.config.build import build_tables

    cfg = load_config(path, compile=False, deadlock=False, text=text)
    cfg = replace(cfg, ha_switches=(), ha_partition=None)
    if cfg.compiled_dir:
        from hpcfabric.config.artifact import load_artifact

        return load_artifact(cfg, cfg.compiled_dir)
    return build_tables(cfg)


class Server:
    """The socket, its sessions (a thread each) and when to end (module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ready = threading.Event()
        self.planner: SharedPlanner | None = None
        self.info: dict[str, Any] = {}
        self.live = 0
        self.served = 0
        self.count_lock = threading.Lock()
        self.done = threading.Event()
        try:
            os.unlink(path)  # a dead planner's socket (the lock said nobody holds it)
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        mask = os.umask(0o177)  # the owner's only (0600) from the start: requests and replies are pickles
        try:
            self.sock.bind(path)
        finally:
            os.umask(mask)
        self.sock.listen(64)

    def accept_loop(self) -> None:
        self.sock.settimeout(0.5)
        started = time.monotonic()
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                if not self.served and time.monotonic() - started > FIRST_CONTACT_S:
                    LOG.error("no controller connected in %.0f s: ending", FIRST_CONTACT_S)
                    self.gone()
                continue
            conn.settimeout(None)
            with self.count_lock:
                self.live += 1
                self.served += 1
            threading.Thread(target=self.session, args=(conn,), daemon=True).start()

    def session(self, conn: socket.socket) -> None:
        rfile, wfile = conn.makefile("rb"), conn.makefile("wb")
        try:
            hello = read_message(rfile)
            if hello is None or hello[0] != "hello":
                return
            names = frozenset(hello[1])
            self.ready.wait()
            write_message(wfile, self.info)
            assert self.planner is not None
            while True:
                msg = read_message(rfile)
                if msg is None or msg[0] == "stop":
                    return
                if msg[0] == "plan":
                    got = time.monotonic()
                    try:
                        reply = self.planner.plan(msg[1], msg[2], names, msg[3] if len(msg) > 3 else ())
                    except Exception as err:  # a bug, not the controller's fault: said, nothing to install
                        LOG.exception("planning %s failed", msg[1])
                        reply = self.planner.failed(msg[1], err)
                    reply["stamps"] = {"received": got, "planned": time.monotonic()}
                    write_message(wfile, reply)
                elif msg[0] == "tables":
                    write_message(wfile, self.planner.tables(msg[1], msg[2]))
        except (OSError, ValueError, EOFError) as err:
            LOG.warning("a controller's session ended: %s", err)
        finally:
            for f in (rfile, wfile, conn):
                try:
                    f.close()
                except OSError:
                    pass
            with self.count_lock:
                self.live -= 1
                if self.live == 0:  # the last controller has gone
                    self.gone()

    def gone(self) -> None:
        """Nobody to plan for: end (at once if the base is still being built: nothing is kept)."""
        self.done.set()
        if not self.ready.is_set():
            LOG.info("no controller left before the proof base was ready: ending")
            self.close()
            os._exit(0)

    def close(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.sock.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s shared repair planner: %(message)s")
    from hpcfabric.errors import ConfigError

    if len(argv) != 2:
        print("usage: python -m hpcfabric.repair.shared SOCKET CONFIG (the config's text on stdin)", file=sys.stderr)
        return 2
    path, config_path = argv
    t0 = time.monotonic()
    text = sys.stdin.read()
    server = Server(path)
    priority = Priority()  # before the accept loop starts: its threads inherit the niceness
    threading.Thread(target=server.accept_loop, daemon=True).start()
    try:
        cfg = load_whole(config_path, text)
    except ConfigError as err:
        LOG.error("cannot load the config: %s", err)
        server.close()
        return 2
    rep, ready = prepare(cfg, priority, t0)
    generation = f"{os.getpid()}@{time.time():.6f}"
    server.planner = SharedPlanner(rep, cfg.flow_control == "pfc", generation)
    server.info = {**ready, "shared": True, "generation": generation, "pid": os.getpid(),
                   "switches": len(cfg.fabric.switches)}
    LOG.info("ready in %.1f s for %d switches (%s dependencies)", server.info["seconds"], len(cfg.fabric.switches),
             server.info["dependencies"])
    server.ready.set()
    server.done.wait()
    LOG.info("the last controller has gone: ending (%d plan(s))", server.planner.plans)
    server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
