"""Securing the control plane: ``[openflow] tls*`` and ``[ha] etcd_*`` (checked values), and who may claim a dpid.

* :class:`TlsSettings` -- the OpenFlow listener's key, certificate and the CA that signs the switches'
  certificates (mutual TLS), plus ``tls_names``: certificate names that may speak for several switches
  (an Open vSwitch host serving many bridges has one certificate).
* :class:`EtcdSecurity` -- the etcd client's CA, client certificate and key, user and password.
* :func:`cert_names` and :func:`may_claim` -- the identity a peer certificate gives and whether it
  covers a datapath id (pure; docs/operations.md "Securing the control plane").
"""

from __future__ import annotations

import fnmatch
import os
import ssl
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from hpcfabric.config.ini import ON_OFF, choice, closest, config_error, get_value, number, resolve_path


@dataclass(frozen=True)
class TlsSettings:
    """``[openflow] tls = on``: the listener's key and certificate, the switches' CA, names for several switches."""

    key: str
    cert: str
    ca: str
    #: (certificate name, switch-name or dpid patterns) from ``tls_names``
    names: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def describe(self) -> str:
        return f"on (ca {self.ca})"


@dataclass(frozen=True)
class EtcdSecurity:
    """``[ha] etcd_*``: TLS files and the etcd user of the etcd client (any of them may be unset)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str = field(default="", repr=False)

    @property
    def enabled(self) -> bool:
        return bool(self.ca or self.cert or self.user)


def dpid_name(dpid: int) -> str:
    """The name a certificate gives a datapath id: 16 lower-case hex digits (Open vSwitch's datapath-id)."""
    return f"{dpid:016x}"


def cert_names(peercert: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names a peer certificate (``SSLSocket.getpeercert()``) gives: its subject's commonName and its DNS /
    URI subjectAltNames; ovs-pki's ``NAME id:UUID`` (in both) counts as ``NAME``. Empty without a certificate."""
    if not peercert:
        return ()
    found = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    found += [value for kind, value in peercert.get("subjectAltName", ()) if kind in ("DNS", "URI")]
    names = (v.split(" id:", 1)[0].strip() for v in found)
    return tuple(dict.fromkeys(n for n in names if n))


def may_claim(names: Iterable[str], dpid: int, switch: str | None,
              groups: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> bool:
    """May a peer whose certificate gives ``names`` speak for ``dpid`` (switch ``switch``, None if the
    topology does not know it)? Yes if a name is the switch's name or its dpid (16 hex digits), or a
    ``tls_names`` entry for one of the names has a pattern matching either."""
    given = set(names)
    hexid = dpid_name(dpid)
    if (switch is not None and switch in given) or hexid in {n.lower() for n in given}:
        return True
    ids = (hexid, switch) if switch else (hexid,)
    return any(name in given and any(fnmatch.fnmatchcase(i, p) for i in ids for p in patterns)
               for name, patterns in groups)


# ---------------------------------------------------------------- INI keys
def _file(source: str, parser: Any, base: Any, section: str, key: str, what: str) -> str | None:
    text = get_value(parser, section, key)
    if not text:
        return None
    path = resolve_path(base, text)
    if not os.path.isfile(path):
        raise config_error(source, f"{section}.{key}", f"{path}: no such file (expected {what}; relative paths "
                           "are resolved against the config file's directory)")
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise config_error(source, f"{section}.{key}", f"{path}: cannot read: {err.strerror}") from None
    return path


def parse_tls_names(source: str, text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``NAME: PATTERN [PATTERN...], NAME: ...`` -> ((name, patterns), ...)."""
    out: dict[str, tuple[str, ...]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, pats = part.partition(":")
        name, patterns = name.strip(), tuple(pats.split())
        if not sep or not name or " " in name or not patterns:
            raise config_error(source, "openflow.tls_names", f"expected NAME: PATTERN [PATTERN...][, NAME: ...] "
                               f"like 'ovs-host1: g0s* g1s*', got {part!r}")
        if name in out:
            raise config_error(source, "openflow.tls_names", f"name {name!r} given twice")
        out[name] = patterns
    return tuple(out.items())


def tls_keys(source: str, parser: Any, base: Any) -> tuple[TlsSettings | None, float]:
    """``[openflow] tls, tls_key, tls_cert, tls_ca, tls_names, echo_timeout`` (checked)."""
    echo = number(source, "openflow.echo_timeout", get_value(parser, "openflow", "echo_timeout"), low=0.05, high=600)
    on = choice(source, "openflow.tls", get_value(parser, "openflow", "tls"), ON_OFF) == "on"
    keys = ("tls_key", "tls_cert", "tls_ca", "tls_names")
    if not on:
        given = [k for k in keys if get_value(parser, "openflow", k)]
        if given:
            raise config_error(source, f"openflow.{given[0]}", "is only used with tls = on (this config has tls = off)")
        return None, echo
    files = {}
    for key, what in (("tls_key", "the controller's private key (PEM)"), ("tls_cert", "the controller's certificate (PEM)"),
                      ("tls_ca", "the CA certificate(s) that sign the switches' certificates (PEM)")):
        files[key] = _file(source, parser, base, "openflow", key, what)
        if files[key] is None:
            raise config_error(source, f"openflow.{key}", f"missing: tls = on needs {what}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(files["tls_cert"], files["tls_key"])
    except (ssl.SSLError, OSError) as err:
        raise config_error(source, "openflow.tls_key", f"{files['tls_key']} does not load with {files['tls_cert']}: "
                           f"{getattr(err, 'reason', None) or err} (expected the private key of that certificate)") from None
    try:
        ctx.load_verify_locations(files["tls_ca"])
    except (ssl.SSLError, OSError) as err:
        raise config_error(source, "openflow.tls_ca", f"{files['tls_ca']}: not a PEM CA certificate: "
                           f"{getattr(err, 'reason', None) or err}") from None
    names = parse_tls_names(source, get_value(parser, "openflow", "tls_names"))
    return TlsSettings(files["tls_key"], files["tls_cert"], files["tls_ca"], names), echo


def check_tls_names(source: str, tls: TlsSettings | None, switches: list[str]) -> None:
    """Every ``tls_names`` pattern matches a switch of the fabric (by name or dpid)."""
    for name, patterns in tls.names if tls else ():
        for pat in patterns:
            if not any(fnmatch.fnmatchcase(n, pat) for n in switches):
                raise config_error(source, "openflow.tls_names", f"{name}: pattern {pat!r} matches no switch"
                                   f"{closest(pat, switches)}")


def etcd_keys(source: str, parser: Any, base: Any, backend: str, endpoints: tuple[str, ...]) -> EtcdSecurity | None:
    """``[ha] etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file`` (checked; backend = etcd)."""
    keys = ("etcd_ca", "etcd_cert", "etcd_key", "etcd_user", "etcd_password_file")
    given = [k for k in keys if get_value(parser, "ha", k)]
    if backend != "etcd":
        if given:
            raise config_error(source, f"ha.{given[0]}", "is only used with backend = etcd (this config has backend = file)")
        return None
    https = [e for e in endpoints if e.startswith("https://")]
    if https and len(https) != len(endpoints):
        raise config_error(source, "ha.endpoints", "mixes http:// and https:// endpoints; expected one scheme "
                           "(https for a cluster with TLS)")
    ca = _file(source, parser, base, "ha", "etcd_ca", "the CA certificate of the etcd servers (PEM)")
    cert = _file(source, parser, base, "ha", "etcd_cert", "this controller's etcd client certificate (PEM)")
    key = _file(source, parser, base, "ha", "etcd_key", "the private key of etcd_cert (PEM)")
    if (cert is None) != (key is None):
        missing = "etcd_key" if key is None else "etcd_cert"
        raise config_error(source, f"ha.{missing}", "missing: a client certificate needs both etcd_cert and etcd_key")
    if (ca or cert) and not https:
        raise config_error(source, "ha.etcd_ca" if ca else "ha.etcd_cert", "certificates need https:// endpoints "
                           f"(this config has {endpoints[0]})")
    if cert and key:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as err:
            raise config_error(source, "ha.etcd_key", f"{key} does not load with {cert}: "
                               f"{getattr(err, 'reason', None) or err}") from None
    user = get_value(parser, "ha", "etcd_user") or None
    pw_file = _file(source, parser, base, "ha", "etcd_password_file", "a file holding the etcd user's password")
    if user and any(c.isspace() for c in user):
        raise config_error(source, "ha.etcd_user", f"{user!r} must not contain spaces")
    if user and not pw_file:
        raise config_error(source, "ha.etcd_password_file", f"missing: etcd_user = {user} needs the file with its "
                           "password (one line; keep it readable by the controller only)")
    if pw_file and not user:
        raise config_error(source, "ha.etcd_user", "missing: etcd_password_file is given but no etcd_user")
    password = ""
    if pw_file:
        with open(pw_file, encoding="utf-8", errors="replace") as fh:
            password = fh.read().strip("\r\n")
        if not password:
            raise config_error(source, "ha.etcd_password_file", f"{pw_file} is empty; expected the password of {user}")
    sec = EtcdSecurity(ca, cert, key, user, password)
    return sec if sec.enabled else None
