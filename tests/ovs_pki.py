"""Open vSwitch's ``ovs-pki`` for ``test_tls_ovs.py``: ``init`` once, ``req+sign`` per name, as
docs/operations.md tells a site to (the emulator's own CA is :mod:`hpcfabric.emu.pki`)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def ovs_pki(directory: str | Path, *names: tuple[str, str]) -> dict[str, tuple[Path, Path]]:
    """``ovs-pki init`` in ``directory`` (its ``controllerca/`` and ``switchca/``) if not done, then
    ``ovs-pki req+sign NAME TYPE`` for each (name, type) with type ``controller`` or ``switch``; returns
    name -> (certificate, private key) paths (files in ``directory``)."""
    d = Path(directory).resolve()
    common = [f"--dir={d / 'pki'}", f"--log={d / 'ovs-pki.log'}"]
    if not (d / "pki" / "switchca" / "cacert.pem").exists():
        subprocess.run(["ovs-pki", "init", *common], check=True, capture_output=True, timeout=120)
    out = {}
    for name, kind in names:
        if not (d / f"{name}-cert.pem").exists():
            subprocess.run(["ovs-pki", "req+sign", name, kind, *common], check=True, capture_output=True,
                           timeout=120, cwd=d)
        out[name] = (d / f"{name}-cert.pem", d / f"{name}-privkey.pem")
    return out


def ovs_ca(directory: str | Path, kind: str) -> Path:
    """The CA certificate ``ovs-pki`` made in ``directory`` for ``kind`` (``controller`` or ``switch``)."""
    return Path(directory).resolve() / "pki" / f"{kind}ca" / "cacert.pem"
