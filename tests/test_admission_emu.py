"""Who may speak for a datapath id, against the real controller (``hpcfabric controller`` subprocess) and emulated
switches (:mod:`hpcfabric.emu`, real OpenFlow 1.3 over TCP or TLS). No mocks; loopback only.

* Plain TCP: a second emulator claiming the demo Dragonfly's 36 dpids while the first is connected is refused
  (the live sessions answer an echo), as a WARNING per dpid, in the status file and the metrics; the real
  sessions keep their tables and are never reconnected; a killed switch process that comes back is accepted
  at once. A switch process that stops answering (SIGSTOP: its connections stay open) is replaced by the new
  one after ``echo_timeout``; what the held newcomer sends meanwhile -- PAUSE, port down/up, a forged LLDP --
  changes nothing. When the old process wakes up, it is the one refused.
* TLS (``[openflow] tls = on``, per-switch certificates): the fabric confirms over TLS; a plaintext client, a
  client without a certificate, certificates of another CA and a certificate naming another switch are each
  refused with their own reason; the live sessions are untouched.
* The same TLS configuration under ``osken-manager`` and ``ryu-manager`` (the Ryu venv).
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from channel_probe import HELLO, plain_client, refused_dpids, sample, scrape, until

from hpcfabric.emu.driver import ROOT, Cluster, free_port, listening
from hpcfabric.emu.pki import Authority
from hpcfabric.protocols.lldp import build_lldp

DEMO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"
RYU_MANAGER = ROOT / ".venv-ryu" / "bin" / "ryu-manager"
OSKEN_MANAGER = Path(sys.executable).with_name("osken-manager")


def cluster(tmp_path: Path, *, tls=False, echo: float = 1.0) -> tuple[Cluster, int]:
    http = free_port()
    c = Cluster(str(DEMO), tmp_path, lldp_interval=0.5, log_level="INFO", tls=tls, openflow=f"echo_timeout = {echo}\n",
                extra=f"[metrics]\nlisten = 127.0.0.1:{http}\npoll_interval = 5\n")
    return c, http


def started(emu) -> None:
    ev = emu.events.get(timeout=60)
    assert ev.get("ev") == "started", ev


def syncs(st: dict) -> dict[str, int]:
    return {n: v["syncs"] for n, v in st["per_switch"].items()}


def test_plain_tcp_impostor_refused_and_a_restarted_switch_accepted(tmp_path):
    c, http = cluster(tmp_path)
    try:
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 60)
        st0 = c.status(0)
        assert st0["switches_confirmed"] == 36 and st0["rules_installed"] == 1680 and st0["refused_sessions"] == 0
        real = c.emus[0]
        flow_mods0 = real.ask(op="stats")["flow_mods"]
        impostor = c.spawn_emulator("impostor")  # the same 36 dpids, plain TCP
        started(impostor)
        st = until(lambda: (s := c.status(0)) and s["admission"]["refused_by_reason"].get("duplicate_session", 0) >= 36
                   and s, 30, "36 refusals")
        assert refused_dpids(c.workdir / "ctl0.log", "duplicate_session") == {f"{d:016x}" for d in range(1, 37)}
        assert {i["reason"] for i in st["impostors"]} == {"duplicate_session"}
        assert all("answered an echo" in i["detail"] for i in st["impostors"])
        imp = impostor.ask(op="stats")
        assert imp["flows"] == 0 and imp["flow_mods"] == 0 and imp["errors"] > 0  # no table; told why (EPERM)
        impostor.send(op="quit")
        impostor.p.wait(10)  # gone: none of its retries can reach the controller any more
        left = time.time()
        assert sample(scrape(http), "hpcfabric_refused_sessions_total", reason="duplicate_session") >= 36
        st = until(lambda: (s := c.status(0)) and s["time"] > left + 0.5 and s, 30, "a status written after the impostor left")
        assert st["switches_connected"] == st["switches_confirmed"] == 36 and syncs(st) == syncs(st0)
        assert real.ask(op="stats")["flow_mods"] == flow_mods0 and "disconnected" not in (c.workdir / "ctl0.log").read_text()
        # a real restart: the switch process dies (its connections close) and comes back with empty tables
        real.p.kill()
        real.p.wait(10)
        t0, w0 = time.monotonic(), time.time()
        back = c.spawn_emulator("restarted")
        c.emus[0] = back
        started(back)
        until(lambda: all((v["confirmed_at"] or 0) > w0 for v in c.status(0)["per_switch"].values()), 30,
              "every switch confirmed again")
        print(f"restart (killed, reconnected): {time.monotonic() - t0:.2f} s to 36 switches confirmed")
        assert back.ask(op="stats")["flows"] == 1680
        assert c.status(0)["admission"]["refused_by_reason"].get("duplicate_session", 0) == \
            st["admission"]["refused_by_reason"]["duplicate_session"]  # nobody refused: the old sessions were gone
    finally:
        c.stop()


def test_a_silent_switch_is_replaced_and_its_held_successor_changes_nothing(tmp_path):
    echo = 2.0
    c, http = cluster(tmp_path, echo=echo)
    try:
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 60)
        c.wait("links", 30)
        st0 = c.status(0)
        old = c.emus[0]
        os.kill(old.p.pid, signal.SIGSTOP)  # hung: its connections stay open, nothing answers
        t0, w0 = time.monotonic(), time.time()
        new = c.spawn_emulator("successor")
        started(new)
        until(lambda: c.status(0)["admission"]["pending"] == 36, 10, "36 sessions held while the old ones are probed")
        # while held: PAUSE, a port going down and up, an LLDP that claims another neighbour
        a, ap, b, bp = next(iter(c.fabric.iter_port_pairs()))
        new.send(op="pause", switch=a, port=ap, quanta=0xFFFF)
        new.send(op="port", switch=a, port=ap, up=False)
        new.send(op="port", switch=a, port=ap, up=True)
        forged = build_lldp(0x24, 9, bytes.fromhex("020000000009"), 120, b"\x00" * 8)
        new.send(op="frame", switch=a, port=ap, data=forged.hex())
        time.sleep(0.3)
        assert c.status(0)["admission"]["pending"] == 36  # still held when those arrived
        until(lambda: all((v["confirmed_at"] or 0) > w0 for v in c.status(0)["per_switch"].values()), echo + 20,
              "the successor's 36 switches confirmed")
        took = time.monotonic() - t0
        print(f"silent switch replaced: {took:.2f} s from the new process to 36 confirmed (echo_timeout {echo} s)")
        assert echo <= took < echo + 10
        st = c.status(0)
        assert st["admission"]["replaced_dead_sessions"] == 36 and st["refused_sessions"] == 0
        assert st["dropped"]["unadmitted_session"] >= 2  # the PAUSE and the forged LLDP (port status: counted too)
        assert st["pause"]["flips"] == st0["pause"]["flips"] == 0 and st["pause"]["frames"] == st0["pause"]["frames"]
        assert st["failover"]["events"] == st0["failover"]["events"] and st["failover"]["ports_down"] == []
        assert st["miswired_count"] == 0 and st["quarantined"] == [] and st["lldp"]["foreign"] == st0["lldp"]["foreign"]
        log = (c.workdir / "ctl0.log").read_text()
        assert log.count("did not answer an echo within") == 36
        # the old process wakes up: its sessions were closed; reconnecting, it is the second claimant now
        os.kill(old.p.pid, signal.SIGCONT)
        until(lambda: c.status(0)["admission"]["refused_by_reason"].get("duplicate_session", 0) >= 36, 30,
              "the woken process refused")
        assert new.ask(op="stats")["connected"] == 36 and c.status(0)["switches_confirmed"] == 36
        new.send(op="quit")
        assert "Traceback" not in (c.workdir / "ctl0.log").read_text()
    finally:
        c.stop()


def tls_client(port: int, ca: Path | None = None, cert: tuple[Path, Path] | None = None) -> str:
    """Connect with TLS (no certificate unless ``cert``); what happened: 'refused' or 'open'."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()  # noqa: SLF001
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as s:
                s.sendall(HELLO)  # OpenFlow 1.3 HELLO
                return "open" if s.recv(8) else "refused"  # TLS 1.3: the server's verdict comes after our Finished
        except (ssl.SSLError, OSError):
            return "refused"


def test_tls_fabric_confirms_and_every_kind_of_impostor_is_refused(tmp_path):
    c, http = cluster(tmp_path, tls=True)
    try:
        c.start_controllers()
        c.start_emulators()
        st0 = until(lambda: (s := c.status(0)) and s.get("switches_confirmed") == 36 and s, 60, "36 confirmed over TLS")
        assert st0["rules_installed"] == 1680 and st0["admission"]["tls"] and st0["admission"]["tls_handshakes"] == 36
        port, pki = c.ports[0], c.pki
        # 1. plaintext OpenFlow
        assert plain_client(port) == b""  # closed (or reset) without one OpenFlow message
        # 2. TLS without a client certificate; 3. a certificate of another CA
        assert tls_client(port, pki["ca"]) == "refused"
        other = Authority(tmp_path / "other-ca", "another CA")
        assert tls_client(port, pki["ca"], other.issue("g0s0")) == "refused"
        by = until(lambda: (r := c.status(0)["admission"]["refused_by_reason"]) and len(r) >= 3 and r, 10, "3 refusals")
        assert by == {"not_tls": 1, "no_certificate": 1, "untrusted_certificate": 1}, by
        # 4. whole emulators: every switch with g0s1's (valid) certificate; every switch with another CA's
        wrong = c.spawn_emulator("wrong-name", "--tls-cert", str(pki["switches"] / "g0s1-cert.pem"),
                                 "--tls-key", str(pki["switches"] / "g0s1-privkey.pem"))
        for n in c.names:
            other.issue(n, directory=tmp_path / "other-ca" / "switches")
        foreign = c.spawn_emulator("foreign-ca", "--tls-dir", str(tmp_path / "other-ca" / "switches"))
        started(wrong)
        started(foreign)
        st = until(lambda: (s := c.status(0)) and s["admission"]["refused_by_reason"].get("certificate_mismatch", 0) >= 35
                   and s["admission"]["refused_by_reason"].get("untrusted_certificate", 0) >= 37 and s, 30, "refusals")
        wrong.send(op="quit")
        foreign.send(op="quit")
        log = c.workdir / "ctl0.log"
        assert refused_dpids(log, "certificate_mismatch") == {f"{d:016x}" for d in range(1, 37)} - {"0000000000000002"}
        assert refused_dpids(log, "duplicate_session") == {"0000000000000002"}  # g0s1's own name: but g0s1 is alive
        mismatch = next(i for i in st["impostors"] if i["reason"] == "certificate_mismatch")
        assert mismatch["certificate"] == ["g0s1"] and "certificate names g0s1" in mismatch["detail"]
        text = scrape(http)
        for reason in ("not_tls", "no_certificate", "untrusted_certificate", "certificate_mismatch", "duplicate_session"):
            assert sample(text, "hpcfabric_refused_sessions_total", reason=reason) >= 1, reason
        st = c.status(0)
        assert st["switches_connected"] == st["switches_confirmed"] == 36 and syncs(st) == syncs(st0)
        assert "disconnected" not in log.read_text() and "Traceback" not in log.read_text()
    finally:
        c.stop()


@pytest.mark.parametrize("manager", ["osken", "ryu"])
def test_tls_under_the_frameworks_managers(tmp_path, manager):
    exe = OSKEN_MANAGER if manager == "osken" else RYU_MANAGER
    if not exe.exists():
        pytest.skip(f"{exe} missing (scripts/bootstrap.sh --ryu)")
    c, _ = cluster(tmp_path, tls=True)
    conf = tmp_path / "ctl.conf"
    conf.write_text(c.config_text(0))
    log = (tmp_path / "manager.log").open("w")
    p = subprocess.Popen([str(exe), "--config-file", str(conf), "hpcfabric.controller"], stdout=log,
                         stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        until(lambda: listening(c.ports[0]) or p.poll() is not None, 120, "the manager listens")
        assert p.poll() is None, (tmp_path / "manager.log").read_text()[-2000:]
        c.start_emulators()
        st = until(lambda: (s := c.status(0)) and s.get("switches_confirmed") == 36 and s, 60, "36 confirmed")
        assert st["framework"].startswith("os_ken " if manager == "osken" else "ryu ")
        assert st["admission"]["tls"] and st["admission"]["tls_handshakes"] == 36
        assert plain_client(c.ports[0]) == b""
        wrong = c.spawn_emulator("wrong-name", "--tls-cert", str(c.pki["switches"] / "g0s1-cert.pem"),
                                 "--tls-key", str(c.pki["switches"] / "g0s1-privkey.pem"))
        started(wrong)
        by = until(lambda: (r := c.status(0)["admission"]["refused_by_reason"]).get("certificate_mismatch", 0) >= 35
                   and r, 30, "mismatches refused")
        wrong.send(op="quit")
        assert by.get("not_tls") == 1 and c.status(0)["switches_confirmed"] == 36
        assert "Traceback" not in (tmp_path / "manager.log").read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        c.stop()


def test_tls_options_given_to_a_manager_beside_the_ini_are_refused(tmp_path):
    conf = tmp_path / "plain.conf"
    conf.write_text(f"[hpcfabric]\ntopology = {DEMO}\n[openflow]\nlisten_port = {free_port()}\n")
    ca = Authority(tmp_path / "pki")
    cert, key = ca.issue("controller")
    p = subprocess.run([str(OSKEN_MANAGER), "--config-file", str(conf), "--ctl-privkey", str(key), "--ctl-cert", str(cert),
                        "hpcfabric.controller"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln.lower()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert any("openflow.tls_key" in ln and "--ctl-privkey" in ln for ln in errors), errors
