"""Securing the control plane, without a network: the INI keys, certificate names, and the admission of sessions.

* ``[openflow] tls*`` / ``echo_timeout`` and ``[ha] etcd_*`` mistakes: ``hpcfabric check`` exits 2 with one line
  naming the file and ``section.key`` (real CLI subprocesses, real certificate files).
* :func:`hpcfabric.config.security.cert_names` / :func:`~hpcfabric.config.security.may_claim`: ovs-pki's
  ``NAME id:UUID`` subjects, subjectAltNames, dpids, ``tls_names`` patterns.
* The real app with fake switches (tests/test_ops_fakes.py): a second session for a connected dpid is held,
  and nothing it sends -- PAUSE, LLDP, port status, barrier replies, errors -- changes anything; the live one
  answers the echo, so the newcomer is refused (status, counters); a dead live one (no echo) is replaced.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_ops_fakes import O, FakeSwitch, make_app, settle

from hpcfabric.config import load_config
from hpcfabric.config.security import cert_names, may_claim
from hpcfabric.emu.pki import Authority
from hpcfabric.protocols.lldp import build_lldp
from hpcfabric.protocols.pause import build_pause

ROOT = Path(__file__).resolve().parent.parent
A2 = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"
HPCFABRIC = ROOT / ".venv" / "bin" / "hpcfabric"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = Authority(d / "ca")
    other = Authority(d / "other")
    cert, key = ca.issue("controller")
    ocert, okey = other.issue("controller")
    pw = d / "pw"
    pw.write_text("secret\n")
    empty = d / "empty"
    empty.write_text("")
    return {"ca": ca.ca, "cert": cert, "key": key, "okey": okey, "pw": pw, "empty": empty, "junk": d / "ca" / "cakey.pem"}


def tls(p: dict, **kw: str) -> str:
    keys = {"tls": "on", "tls_key": p["key"], "tls_cert": p["cert"], "tls_ca": p["ca"], **kw}
    return "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)


ETCD = "[ha]\nbackend = etcd\nendpoints = https://127.0.0.1:2379\n"

# (id, [openflow] or [ha] text -- a function of the pki files, field, fragment)
CASES = [
    ("tls-no-key", lambda p: "[openflow]\n" + tls(p, tls_key=None), "openflow.tls_key", "missing: tls = on needs"),
    ("tls-key-file-missing", lambda p: "[openflow]\n" + tls(p, tls_key="nowhere.pem"), "openflow.tls_key",
     "no such file"),
    ("tls-key-of-another-cert", lambda p: "[openflow]\n" + tls(p, tls_key=p["okey"]), "openflow.tls_key",
     "does not load with"),
    ("tls-ca-not-pem", lambda p: "[openflow]\n" + tls(p, tls_ca=p["pw"]), "openflow.tls_ca", "not a PEM CA certificate"),
    ("tls-off-with-key", lambda p: f"[openflow]\ntls_key = {p['key']}\n", "openflow.tls_key",
     "only used with tls = on"),
    ("tls-value", lambda p: "[openflow]\ntls = yes\n", "openflow.tls", "not one of on, off"),
    ("tls-names-syntax", lambda p: "[openflow]\n" + tls(p, tls_names="host1 g0s0"), "openflow.tls_names",
     "NAME: PATTERN"),
    ("tls-names-no-switch", lambda p: "[openflow]\n" + tls(p, tls_names="host1: g9*"), "openflow.tls_names",
     "matches no switch"),
    ("echo-timeout", lambda p: "[openflow]\necho_timeout = 0\n", "openflow.echo_timeout", "out of range"),
    ("etcd-cert-without-key", lambda p: ETCD + f"etcd_cert = {p['cert']}\n", "ha.etcd_key", "needs both"),
    ("etcd-key-mismatch", lambda p: ETCD + f"etcd_cert = {p['cert']}\netcd_key = {p['okey']}\n", "ha.etcd_key",
     "does not load with"),
    ("etcd-certs-over-http", lambda p: "[ha]\nbackend = etcd\nendpoints = http://127.0.0.1:2379\n"
     f"etcd_ca = {p['ca']}\n", "ha.etcd_ca", "need https:// endpoints"),
    ("etcd-mixed-schemes", lambda p: "[ha]\nbackend = etcd\nendpoints = https://a:2379,http://b:2379\n",
     "ha.endpoints", "mixes http:// and https://"),
    ("etcd-user-no-password", lambda p: ETCD + "etcd_user = hpcfabric\n", "ha.etcd_password_file", "missing"),
    ("etcd-password-empty", lambda p: ETCD + f"etcd_user = hpcfabric\netcd_password_file = {p['empty']}\n",
     "ha.etcd_password_file", "is empty"),
    ("etcd-password-no-user", lambda p: ETCD + f"etcd_password_file = {p['pw']}\n", "ha.etcd_user", "missing"),
    ("etcd-keys-file-backend", lambda p: f"[ha]\netcd_ca = {p['ca']}\n", "ha.etcd_ca", "only used with backend = etcd"),
    ("etcd-ca-missing", lambda p: ETCD + "etcd_ca = nope.pem\n", "ha.etcd_ca", "no such file"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_security_keys_exit_2_with_one_line(tmp_path, pki, case):
    cid, text, field, fragment = case
    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {A2}\n{text(pki)}")
    cli = [str(HPCFABRIC)] if HPCFABRIC.exists() else [sys.executable, "-m", "hpcfabric.cli"]
    p = subprocess.run(cli + ["check", str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and p.stdout == "" and len(lines) == 1, (p.returncode, p.stderr)
    assert lines[0].startswith(f"hpcfabric: error: {path}: {field}: ") and fragment in lines[0], lines[0]


def test_good_tls_and_etcd_keys_load(tmp_path, pki):
    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {A2}\n[openflow]\n{tls(pki, tls_names='mn-host: g0* 0000000000000005')}"
                    f"echo_timeout = 1.5\n{ETCD}etcd_ca = {pki['ca']}\netcd_cert = {pki['cert']}\n"
                    f"etcd_key = {pki['key']}\netcd_user = ctl\netcd_password_file = {pki['pw']}\n")
    cfg = load_config(path, compile=False)
    assert cfg.tls.names == (("mn-host", ("g0*", "0000000000000005")),) and cfg.echo_timeout == 1.5
    assert cfg.ha_etcd.user == "ctl" and cfg.ha_etcd.password == "secret" and "secret" not in repr(cfg.ha_etcd)
    assert cfg.summary()["tls"].startswith("on")


def test_certificate_names_and_claims():
    ovs = {"subject": ((("organizationName", "Open vSwitch"),), (("commonName", "g0s1 id:2b75-84ff"),)),
           "subjectAltName": (("DNS", "g0s1 id:2b75-84ff"),)}
    assert cert_names(ovs) == ("g0s1",)
    san = {"subject": ((("organizationName", "x"),),), "subjectAltName": (("DNS", "rack1"), ("IP Address", "10.0.0.1"),
                                                                           ("DNS", "0000000000000005"))}
    assert cert_names(san) == ("rack1", "0000000000000005") and cert_names(None) == () and cert_names({}) == ()
    assert may_claim(("g0s1",), 2, "g0s1") and not may_claim(("g0s1",), 1, "g0s0")
    assert may_claim(("00000000000000AB",), 0xAB, None) and not may_claim(("00000000000000ab",), 0xAC, None)
    groups = (("rack1", ("g0*", "00000000000000ff")),)
    assert may_claim(("rack1",), 1, "g0s0", groups) and may_claim(("rack1",), 0xFF, None, groups)
    assert not may_claim(("rack1",), 5, "g1s0", groups) and not may_claim(("rack2",), 1, "g0s0", groups)
    assert not may_claim((), 1, "g0s0", (("", ("*",)),))


def fake_app(tmp_path, echo: float = 0.3):
    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {A2}\nrouting = conditional\nreload_poll = 0\nlldp_interval = 0.2\n"
                    f"[openflow]\necho_timeout = {echo}\n")
    app = make_app(path, tmp_path / "status.json")
    sws = {st.name: FakeSwitch(app, st.dpid, list(range(1, 6))) for st in app.switches.values()}
    for sw in sws.values():
        sw.connect()
    settle()
    assert all(s.confirmed for s in app.switches.values())
    return app, sws


def test_a_held_newcomer_changes_nothing_and_is_refused_while_the_live_session_answers(tmp_path):
    from os_ken.lib import hub

    app, sws = fake_app(tmp_path)
    real = sws["g0s0"]
    port = next(iter(app.fabric.fabric_ports("g0s0")))
    impostor = FakeSwitch(app, real.id, list(range(1, 6)))
    impostor.connect()  # held: the live session is being echoed
    assert app.admission.pending and app.by_dpid[real.id].dp is real
    c = app.counters
    before = (c["flips"], app.failover.events, dict(app.discovery.neighbors), len(real.log), c["switch_errors"])
    impostor.packet_in(port, build_pause(bytes.fromhex("020000000001"), 0xFFFF))
    impostor.packet_in(port, build_lldp(6, 3, bytes.fromhex("020000000006"), 120, app.wiring.nonce))  # even "ours"
    desc = SimpleNamespace(port_no=port, config=0, state=O.OFPPS_LINK_DOWN, hw_addr="02:00:00:00:00:01")
    app._port_status(SimpleNamespace(msg=SimpleNamespace(datapath=impostor, reason=O.OFPPR_MODIFY, desc=desc)))
    app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=impostor, xid=real.xid)))
    app._error(SimpleNamespace(msg=SimpleNamespace(datapath=impostor, xid=real.xid, type=1, code=1)))
    assert (c["flips"], app.failover.events, dict(app.discovery.neighbors)) == before[:3]
    assert c["unadmitted_messages"] == 5 and c["switch_errors"] == before[4] and impostor.log == []
    for _ in range(20):
        settle()
        hub.sleep(0.01)
    assert "echo" in real.log and not app.admission.pending
    st = app.status()
    assert st["refused_sessions"] == 1 and st["impostors"][0]["reason"] == "duplicate_session"
    assert st["impostors"][0]["switch"] == "g0s0" and st["per_switch"]["g0s0"]["connected"]
    assert app.by_dpid[real.id].dp is real and len(real.log) == before[3] + 1  # just the echo
    assert any(m.startswith("type_1") for m in impostor.log)  # told why: OFPT_ERROR (HELLO_FAILED/EPERM)
    app.sessions.disconnected(impostor)  # its connection ends: the real switch stays
    assert app.status()["switches_connected"] == 6


def test_a_dead_live_session_is_replaced_after_the_echo_timeout(tmp_path):
    from os_ken.lib import hub

    app, sws = fake_app(tmp_path, echo=0.2)
    old = sws["g0s1"]
    old.alive = False  # its sends fail, nothing answers
    new = FakeSwitch(app, old.id, list(range(1, 6)))
    t0 = time.monotonic()
    new.connect()
    while app.by_dpid[old.id].dp is not new and time.monotonic() - t0 < 5:
        hub.sleep(0.01)
    assert app.by_dpid[old.id].dp is new and app.admission.replaced == 1 and time.monotonic() - t0 >= 0.2 - 0.05
    for _ in range(20):
        settle()
        hub.sleep(0.01)
    assert app.switches["g0s1"].confirmed and new.flow_mods() > 0
    app.sessions.disconnected(old)  # the dead session's late end changes nothing
    assert app.status()["switches_connected"] == 6 and app.status()["refused_sessions"] == 0
