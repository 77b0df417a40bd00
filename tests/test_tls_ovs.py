"""The OpenFlow channel against real Open vSwitch: plain TCP with impostors, then ``ssl:`` with ovs-pki certificates.

The demo Dragonfly (a4-p2-h2: 36 switches, 1,680 rules, 90 links) as 36 userspace bridges cabled with patch
ports, driven by ``hpcfabric controller`` (subprocess, :class:`hpcfabric.emu.driver.Cluster`).

* Plain TCP: every rule confirmed, every link discovered; an emulator claiming the same 36 dpids is refused
  (36 WARNINGs, ``duplicate_session`` in status and metrics) while Open vSwitch keeps its connections (the
  same 36 TCP connections before and after, ``ss``) and no table is rewritten; a bridge deleted and created again
  (a switch restart) is back with its full table within seconds.
* TLS: certificates made here with ``ovs-pki`` (``init``, ``req+sign ctl controller``, ``req+sign
  ovs-host switch``), ``ovs-vsctl set-ssl`` and ``ssl:127.0.0.1:PORT``, ``[openflow] tls = on``,
  ``tls_names = ovs-host: *`` (one Open vSwitch serves every bridge with one certificate): the fabric
  confirms and discovers over TLS. A client with a certificate of another CA (a second ``ovs-pki init``), a
  plaintext client and an emulator whose (valid) certificate names g0s1 while claiming every dpid are
  refused with their reasons, in status and metrics; the bridges' sessions are untouched; a bridge restart
  reconnects over TLS.

Needs root, ovs-vsctl and ovs-pki (skipped otherwise); run under ``flock /tmp/hpcfabric-ovs.lock``. Everything
created is removed by name at the end (bridges, the SSL settings).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from channel_probe import HELLO, plain_client, refused_dpids, sample, scrape, until

from hpcfabric.emu.driver import ROOT, Cluster, free_port
from ovs_pki import ovs_ca, ovs_pki  # tests/ovs_pki.py

pytestmark = [
    pytest.mark.ovs,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for Open vSwitch"),
    pytest.mark.skipif(shutil.which("ovs-vsctl") is None or shutil.which("ovs-pki") is None,
                       reason="needs ovs-vsctl and ovs-pki"),
]

DEMO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"
TAG = f"hs{os.getpid() % 1000:03d}"


def ovs(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=300)


class Bed:
    """The demo fabric as userspace bridges with patch ports (names ``<TAG><switch>``)."""

    def __init__(self) -> None:
        from hpcfabric.topology.loader import load_topology

        self.fabric = load_topology(str(DEMO))
        self.bridges = {s.name: f"{TAG}{s.name}" for s in self.fabric.switches}
        self.target = ""

    def bridge_cmd(self, names: list[str]) -> list[str]:
        cmd = []
        dpid = {s.name: s.dpid for s in self.fabric.switches}
        for n in names:
            b = self.bridges[n]
            cmd += ["--", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev", "protocols=OpenFlow13",
                    "fail_mode=secure", f"other_config:datapath-id={dpid[n]:016x}", "other_config:disable-in-band=true"]
            if self.target:
                cmd += ["--", "set-controller", b, self.target, "--", "set", "controller", b, "max_backoff=1000"]
        for a, ap, b, bp in self.fabric.iter_port_pairs():
            for x, xp, y, yp in ((a, ap, b, bp), (b, bp, a, ap)):
                if x in names:
                    name, peer = f"{TAG}{x}p{xp}", f"{TAG}{y}p{yp}"
                    cmd += ["--", "add-port", self.bridges[x], name, "--", "set", "interface", name, "type=patch",
                            f"options:peer={peer}", f"ofport_request={xp}"]
        return cmd

    def build(self) -> None:
        ovs("ovs-vsctl", *self.bridge_cmd(list(self.bridges)))

    def connect(self, target: str) -> None:
        self.target = target
        cmd = ["ovs-vsctl"]
        for b in self.bridges.values():
            cmd += ["--", "set-controller", b, target, "--", "set", "controller", b, "max_backoff=1000"]
        ovs(*cmd)

    def restart(self, name: str) -> None:
        """The switch restarts: its bridge deleted and made again (empty table, same dpid and cabling)."""
        ovs("ovs-vsctl", "del-br", self.bridges[name])
        ovs("ovs-vsctl", *self.bridge_cmd([name]))

    @staticmethod
    def connections(port: int) -> set[str]:
        """Open vSwitch's TCP connections to the controller's ``port`` (their local addresses): the same set
        later means no bridge reconnected meanwhile."""
        out = ovs("ss", "-Htnp", "state", "established", f"( dport = :{port} )").stdout
        return {ln.split()[2] for ln in out.splitlines() if "ovs-vswitchd" in ln}

    def cleanup(self) -> None:
        ovs("ovs-vsctl", *[x for b in self.bridges.values() for x in ("--", "--if-exists", "del-br", b)], check=False)
        ovs("ovs-vsctl", "del-ssl", check=False)


@pytest.fixture(scope="module")
def bed():
    if ovs("ovs-vsctl", "--timeout=5", "show", check=False).returncode:
        pytest.skip("Open vSwitch is not running (scripts/bootstrap.sh starts it)")
    b = Bed()
    try:
        b.build()
        yield b
    finally:
        b.cleanup()


def bring_up(c: Cluster, bed: Bed, target: str) -> dict:
    c.start_controllers()
    bed.connect(target)
    c.wait("confirmed", 90)
    c.wait("links", 60)
    st = c.status(0)
    assert st["switches_confirmed"] == 36 and st["rules_installed"] == 1680 and st["links_discovered"] == 90
    return st


def restarted(c: Cluster, bed: Bed, name: str) -> float:
    """Seconds from a bridge's re-creation to its full table confirmed again."""
    t0, w0 = time.monotonic(), time.time()
    bed.restart(name)
    until(lambda: (c.status(0)["per_switch"][name]["confirmed_at"] or 0) > w0, 60, f"{name} confirmed again")
    return time.monotonic() - t0


def untouched(c: Cluster, bed: Bed, st0: dict, conns0: set[str]) -> None:
    """The bridges' sessions were never dropped: the same 36 TCP connections from Open vSwitch, no table
    rewritten, no disconnect logged."""
    st = c.status(0)
    assert st["switches_connected"] == st["switches_confirmed"] == 36
    assert {n: v["syncs"] for n, v in st["per_switch"].items()} == {n: v["syncs"] for n, v in st0["per_switch"].items()}
    assert len(conns0) == 36 and bed.connections(c.ports[0]) == conns0
    assert "disconnected" not in (c.workdir / "ctl0.log").read_text()


def test_plain_tcp_impostor_refused_and_a_restarted_bridge_reconnects(bed, tmp_path):
    http = free_port()
    c = Cluster(str(DEMO), tmp_path, lldp_interval=0.5, log_level="INFO", openflow="echo_timeout = 1\n",
                extra=f"[metrics]\nlisten = 127.0.0.1:{http}\n")
    try:
        st0 = bring_up(c, bed, f"tcp:127.0.0.1:{c.ports[0]}")
        conns0 = bed.connections(c.ports[0])
        impostor = c.spawn_emulator("impostor")
        assert impostor.events.get(timeout=60)["ev"] == "started"
        until(lambda: c.status(0)["admission"]["refused_by_reason"].get("duplicate_session", 0) >= 36, 30, "refusals")
        time.sleep(1)
        stats = impostor.ask(op="stats")
        impostor.send(op="quit")
        assert stats["flows"] == 0 and stats["flow_mods"] == 0
        assert len(refused_dpids(c.workdir / "ctl0.log", "duplicate_session")) == 36
        assert sample(scrape(http), "hpcfabric_refused_sessions_total", reason="duplicate_session") >= 36
        untouched(c, bed, st0, conns0)
        took = restarted(c, bed, "g0s0")
        print(f"plain TCP: bridge g0s0 re-created -> confirmed in {took:.2f} s")
        assert took < 15
    finally:
        c.stop()


def test_tls_with_ovs_pki_certificates(bed, tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    files = ovs_pki(pki, ("ctl", "controller"), ("ovs-host", "switch"), ("g0s1", "switch"))
    rogue = ovs_pki(tmp_path / "rogue", ("rogue", "switch"))["rogue"]  # a second ovs-pki: another CA
    http = free_port()
    c = Cluster(str(DEMO), tmp_path / "run", lldp_interval=0.5, log_level="INFO", openflow="echo_timeout = 1\n",
                tls={"ca": ovs_ca(pki, "switch"), "cert": files["ctl"][0], "key": files["ctl"][1],
                     "names": "ovs-host: *"}, extra=f"[metrics]\nlisten = 127.0.0.1:{http}\n")
    c.workdir.mkdir()
    try:
        ovs("ovs-vsctl", "set-ssl", str(files["ovs-host"][1]), str(files["ovs-host"][0]), str(ovs_ca(pki, "controller")))
        st0 = bring_up(c, bed, f"ssl:127.0.0.1:{c.ports[0]}")
        assert st0["admission"]["tls"] and st0["admission"]["tls_handshakes"] >= 36
        conns0 = bed.connections(c.ports[0])
        port = c.ports[0]
        # a certificate of another CA
        ctx = ssl.create_default_context(cafile=str(ovs_ca(pki, "controller")))
        ctx.check_hostname = False
        ctx.load_cert_chain(str(rogue[0]), str(rogue[1]))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                with ctx.wrap_socket(raw) as s:
                    s.sendall(HELLO)
                    if not s.recv(8):
                        raise ConnectionResetError("closed")
        # plaintext OpenFlow
        assert plain_client(port) == b""
        # an emulator with g0s1's certificate (signed by the switch CA) claiming every dpid
        impostor = c.spawn_emulator("impostor", "--tls-ca", str(ovs_ca(pki, "controller")),
                                    "--tls-cert", str(files["g0s1"][0]), "--tls-key", str(files["g0s1"][1]))
        assert impostor.events.get(timeout=60)["ev"] == "started"
        by = until(lambda: (r := c.status(0)["admission"]["refused_by_reason"]).get("certificate_mismatch", 0) >= 35
                   and r.get("duplicate_session", 0) >= 1 and r, 30, "the impostor refused")
        stats = impostor.ask(op="stats")
        impostor.send(op="quit")
        assert stats["flows"] == 0 and stats["flow_mods"] == 0
        assert by.get("untrusted_certificate") == 1 and by.get("not_tls") == 1, by
        st = c.status(0)
        mism = [i for i in st["impostors"] if i["reason"] == "certificate_mismatch"]
        assert mism and all(i["certificate"] == ["g0s1"] and i["switch"] != "g0s1" for i in mism), mism[:2]
        text = scrape(http)
        for reason in ("untrusted_certificate", "not_tls", "certificate_mismatch", "duplicate_session"):
            assert sample(text, "hpcfabric_refused_sessions_total", reason=reason) >= 1, reason
        assert sample(text, "hpcfabric_tls_handshakes_total") >= 36
        untouched(c, bed, st0, conns0)
        took = restarted(c, bed, "g0s0")
        print(f"TLS: bridge g0s0 re-created -> confirmed in {took:.2f} s")
        assert took < 15
        assert "Traceback" not in (c.workdir / "ctl0.log").read_text()
    finally:
        c.stop()
        ovs("ovs-vsctl", "del-ssl", check=False)
