"""A light OpenFlow 1.3 switch emulator for benches and tests: thousands of switches in a few processes.

It speaks real OpenFlow 1.3 over TCP to the unchanged controller (``hpcfabric
controller`` as a subprocess): handshake, port descriptions, flow/group/meter
mods and ONF bundles applied to per-switch tables, barriers, flow/group/meter
stats, role requests, echo; packet-outs are delivered along the fabric's
cabling as packet-ins at the peer port (so LLDP discovery closes), and PAUSE,
PFC and port-status events are injected on command. ``switch`` is one switch's
state machine (bytes in, bytes out), ``wire`` the messages it sends, ``process``
one asyncio process owning a slice of the fabric (``python -m hpcfabric.emu``), ``tls``
a switch's TLS client.

It is a harness, not part of the product: nothing in ``controller/`` imports it.
It imports ``topology/`` and ``protocols/`` only. Beside it, ``etcd_cluster``: a real etcd cluster
on loopback ports for the HA tests, bench/ and ``mininet/run_reliability.py``. ``tests/test_emu.py``
cross-checks it against Open vSwitch (same tables after bring-up, read with
``ovs-ofctl`` from both).
"""
