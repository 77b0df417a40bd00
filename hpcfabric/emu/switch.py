"""One emulated OpenFlow 1.3 switch: its tables, groups, meters, role and bundles, message by message.

:class:`EmuSwitch` takes one message (type, xid, raw bytes) and returns the
replies; packet-outs are handed to ``on_output(switch, port, frame)`` (the
process delivers them along the fabric's wiring). Flows are kept by their
OpenFlow identity ``(table, priority, match bytes)`` with the raw
instructions, so a flow stats reply returns exactly what was installed.
Semantics follow Open vSwitch where the controller relies on them: ADD
replaces, MODIFY_STRICT/DELETE_STRICT act on one entry (cookie mask honoured),
non-strict DELETE/MODIFY act on every entry whose match includes the
request's fields, a slave's writes are refused, stale role generations are
rejected, ONF bundles are applied atomically at commit.
"""

from __future__ import annotations

import struct
import time
from typing import Any, Callable

from hpcfabric.emu import wire as W

FlowKey = tuple[int, int, bytes]
OFPFC_ADD, OFPFC_MODIFY, OFPFC_MODIFY_STRICT, OFPFC_DELETE, OFPFC_DELETE_STRICT = 0, 1, 2, 3, 4
ROLE_NOCHANGE, ROLE_EQUAL, ROLE_MASTER, ROLE_SLAVE = 0, 1, 2, 3
N_TABLES = 254


class Flow:
    __slots__ = ("cookie", "idle", "hard", "flags", "instructions", "packets", "installed")

    def __init__(self, cookie: int, idle: int, hard: int, flags: int, instructions: bytes, now: float) -> None:
        self.cookie, self.idle, self.hard, self.flags = cookie, idle, hard, flags
        self.instructions = instructions
        self.packets = 0
        self.installed = now


class Port:
    __slots__ = ("no", "hw", "name", "config", "state")

    def __init__(self, no: int, hw: bytes, name: str) -> None:
        self.no, self.hw, self.name = no, hw, name
        self.config = 0
        self.state = 0

    def encode(self) -> bytes:
        return W.port_struct(self.no, self.hw, self.name, self.config, self.state)


class EmuSwitch:
    """Tables and protocol state of one switch (``dpid``, ``ports``: number -> Port)."""

    def __init__(self, name: str, dpid: int, ports: dict[int, Port],
                 on_output: Callable[["EmuSwitch", int, bytes], None] | None = None) -> None:
        self.name, self.dpid, self.ports = name, dpid, ports
        self.on_output = on_output
        self.flows: dict[FlowKey, Flow] = {}
        self.groups: dict[int, tuple[int, bytes]] = {}  # id -> (type, buckets)
        self.meters: dict[int, tuple[int, bytes]] = {}  # id -> (flags, bands)
        self.bundles: dict[int, list[bytes]] = {}
        self.role = ROLE_EQUAL
        self.generation: int | None = None
        self.counts = {"flow_mods": 0, "group_mods": 0, "meter_mods": 0, "bundles": 0, "barriers": 0,
                       "packet_outs": 0, "multipart": 0, "errors": 0, "port_mods": 0}
        self.last_flow_mod = 0.0

    # -------------------------------------------------------------- dispatch
    def handle(self, mtype: int, xid: int, buf: bytes) -> list[bytes]:
        """Replies to one message ``buf`` (header included)."""
        if mtype == W.FLOW_MOD:
            return self.write(buf, xid, self.flow_mod)
        if mtype == W.BARRIER_REQUEST:
            self.counts["barriers"] += 1
            return [W.msg(W.BARRIER_REPLY, xid)]
        if mtype == W.PACKET_OUT:
            return self.packet_out(buf, xid)
        if mtype == W.MULTIPART_REQUEST:
            self.counts["multipart"] += 1
            return self.multipart(buf, xid)
        if mtype == W.ECHO_REQUEST:
            return [W.msg(W.ECHO_REPLY, xid, buf[8:])]
        if mtype == W.EXPERIMENTER:
            return self.experimenter(buf, xid)
        if mtype == W.GROUP_MOD:
            return self.write(buf, xid, self.group_mod)
        if mtype == W.METER_MOD:
            return self.write(buf, xid, self.meter_mod)
        if mtype == W.PORT_MOD:
            return self.write(buf, xid, self.port_mod)
        if mtype == W.ROLE_REQUEST:
            return self.role_request(buf, xid)
        if mtype == W.FEATURES_REQUEST:
            return [W.features_reply(xid, self.dpid, N_TABLES)]
        if mtype == W.GET_CONFIG_REQUEST:
            return [W.msg(W.GET_CONFIG_REPLY, xid, struct.pack("!HH", 0, 0xFFFF))]
        if mtype in (W.HELLO, W.SET_CONFIG, W.SET_ASYNC, W.ECHO_REPLY, W.TABLE_MOD):
            return []
        if mtype == W.GET_ASYNC_REQUEST:
            return [W.msg(W.GET_ASYNC_REPLY, xid, struct.pack("!IIIIII", 3, 0, 7, 7, 0, 0))]
        return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)

    def fail(self, xid: int, kind: tuple[int, int], buf: bytes) -> list[bytes]:
        self.counts["errors"] += 1
        return [W.error(xid, kind, buf)]

    def write(self, buf: bytes, xid: int, apply: Callable[[bytes], tuple[int, int] | None]) -> list[bytes]:
        if self.role == ROLE_SLAVE:
            return self.fail(xid, W.BAD_REQUEST_EPERM, buf)
        err = apply(buf)
        return self.fail(xid, err, buf) if err else []

    # ----------------------------------------------------------------- flows
    def flow_mod(self, buf: bytes) -> tuple[int, int] | None:
        cookie, cookie_mask, table, command, idle, hard, priority, _bid, out_port, out_group, flags = struct.unpack_from(
            "!QQBBHHHIIIH", buf, 8)
        mlen = struct.unpack_from("!H", buf, 50)[0]
        mend = 48 + W.pad8(mlen)
        match = bytes(buf[48:mend])
        instructions = bytes(buf[mend:])
        self.counts["flow_mods"] += 1
        now = time.monotonic()
        self.last_flow_mod = now
        if command == OFPFC_ADD:
            if table >= N_TABLES:
                return W.FLOW_MOD_BAD_TABLE_ID
            self.flows[(table, priority, match)] = Flow(cookie, idle, hard, flags, instructions, now)
            return None
        if command in (OFPFC_MODIFY_STRICT, OFPFC_DELETE_STRICT):  # one entry, if its cookie matches under the mask
            key = (table, priority, match)
            f = self.flows.get(key)
            if f is not None and (f.cookie & cookie_mask) == (cookie & cookie_mask):
                if command == OFPFC_DELETE_STRICT:
                    del self.flows[key]
                else:
                    f.instructions = instructions
            return None
        if command in (OFPFC_DELETE, OFPFC_MODIFY):
            keys = self.select(table, cookie, cookie_mask, match)
            for k in keys:
                if command == OFPFC_DELETE:
                    del self.flows[k]
                else:
                    self.flows[k].instructions = instructions
            return None
        return W.FLOW_MOD_BAD_COMMAND

    def select(self, table: int, cookie: int, cookie_mask: int, match: bytes) -> list[FlowKey]:
        """Entries a non-strict request names: table (0xff all), cookie under mask, match fields included."""
        want = W.oxm_fields(match)
        out = []
        for key, f in self.flows.items():
            if table != 0xFF and key[0] != table:
                continue
            if (f.cookie & cookie_mask) != (cookie & cookie_mask):
                continue
            if want:
                have = W.oxm_fields(key[2])
                if any(have.get(k) != v for k, v in want.items()):
                    continue
            out.append(key)
        return out

    def flow_stats(self, req: bytes) -> list[bytes]:
        table, out_port, out_group, cookie, cookie_mask = struct.unpack_from("!B3xII4xQQ", req, 0)
        mlen = struct.unpack_from("!H", req, 34)[0]
        match = bytes(req[32:32 + W.pad8(mlen)])
        now = time.monotonic()
        entries = []
        for key in self.select(table, cookie, cookie_mask, match):
            f = self.flows[key]
            t, prio, m = key
            dur = now - f.installed
            body_len = 48 + len(m) + len(f.instructions)
            entries.append(struct.pack("!HBxIIHHHH4xQQQ", body_len, t, int(dur), int(dur % 1 * 1e9), prio, f.idle, f.hard,
                                       f.flags, f.cookie, f.packets, 0) + m + f.instructions)
        return entries

    # -------------------------------------------------------- groups, meters
    def group_mod(self, buf: bytes) -> tuple[int, int] | None:
        command, gtype, gid = struct.unpack_from("!HBxI", buf, 8)
        self.counts["group_mods"] += 1
        _apply(self.groups, command, gid, 0xFFFFFFFC, (gtype, bytes(buf[16:])))  # OFPG_ALL
        return None

    def meter_mod(self, buf: bytes) -> tuple[int, int] | None:
        command, flags, mid = struct.unpack_from("!HHI", buf, 8)
        self.counts["meter_mods"] += 1
        _apply(self.meters, command, mid, 0xFFFFFFFF, (flags, bytes(buf[16:])))  # OFPM_ALL
        return None

    def port_mod(self, buf: bytes) -> tuple[int, int] | None:
        port_no, config, mask = struct.unpack_from("!I4x6x2xII", buf, 8)
        self.counts["port_mods"] += 1
        p = self.ports.get(port_no)
        if p is not None:
            p.config = (p.config & ~mask) | (config & mask)
        return None

    # ------------------------------------------------------------- multipart
    def multipart(self, buf: bytes, xid: int) -> list[bytes]:
        mp_type = struct.unpack_from("!H", buf, 8)[0]
        body = buf[16:]
        if mp_type == W.MP_FLOW:
            return W.multipart_replies(xid, mp_type, self.flow_stats(body))
        if mp_type == W.MP_PORT_DESC:
            return W.multipart_replies(xid, mp_type, [p.encode() for _, p in sorted(self.ports.items())])
        if mp_type == W.MP_GROUP_DESC:
            return W.multipart_replies(xid, mp_type, [struct.pack("!HBxI", 8 + len(b), t, gid) + b
                                                      for gid, (t, b) in sorted(self.groups.items())])
        if mp_type == W.MP_METER_CONFIG:
            want = struct.unpack_from("!I", body, 0)[0] if len(body) >= 4 else 0xFFFFFFFF
            return W.multipart_replies(xid, mp_type, [struct.pack("!HHI", 8 + len(b), fl, mid) + b
                                                      for mid, (fl, b) in sorted(self.meters.items())
                                                      if want in (0xFFFFFFFF, mid)])
        if mp_type == W.MP_METER:
            out = []
            for mid, (_fl, bands) in sorted(self.meters.items()):
                nb = len(bands) // 16
                out.append(struct.pack("!IH6xIQQII", mid, 40 + 16 * nb, 0, 0, 0, 0, 0) + b"\0" * (16 * nb))
            return W.multipart_replies(xid, mp_type, out)
        if mp_type == W.MP_DESC:
            return W.desc_reply(xid, self.name)
        if mp_type == W.MP_PORT_STATS:
            return W.multipart_replies(xid, mp_type, [struct.pack("!I4x12Q", n, *([0] * 12)) + struct.pack("!II", 0, 0)
                                                      for n in sorted(self.ports)])
        return self.fail(xid, W.BAD_REQUEST_BAD_MULTIPART, buf)

    # ----------------------------------------------------------------- role
    def role_request(self, buf: bytes, xid: int) -> list[bytes]:
        role, gen = struct.unpack_from("!I4xQ", buf, 8)
        if role in (ROLE_MASTER, ROLE_SLAVE):
            if self.generation is not None and ((gen - self.generation) & (1 << 63)):
                return self.fail(xid, W.ROLE_STALE, buf)
            self.generation = gen
        if role != ROLE_NOCHANGE:
            self.role = role
        return [W.msg(W.ROLE_REPLY, xid, struct.pack("!I4xQ", self.role, self.generation or 0))]

    # --------------------------------------------------------------- bundles
    def experimenter(self, buf: bytes, xid: int) -> list[bytes]:
        exp, exp_type = struct.unpack_from("!II", buf, 8)
        if exp != W.ONF_EXPERIMENTER_ID:
            return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)
        if exp_type == W.ONF_ET_BUNDLE_ADD:
            bid = struct.unpack_from("!I", buf, 16)[0]
            if bid not in self.bundles:
                return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)
            self.bundles[bid].append(bytes(buf[24:]))
            return []
        if exp_type != W.ONF_ET_BUNDLE_CONTROL:
            return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)
        bid, ctrl, flags = struct.unpack_from("!IHH", buf, 16)
        if ctrl == 0:  # OPEN
            self.bundles[bid] = []
            return [W.bundle_reply(xid, bid, 1, flags)]
        if ctrl == 2:  # CLOSE
            return [W.bundle_reply(xid, bid, 3, flags)]
        if ctrl == 6:  # DISCARD
            self.bundles.pop(bid, None)
            return [W.bundle_reply(xid, bid, 7, flags)]
        if ctrl == 4:  # COMMIT: all or nothing
            msgs = self.bundles.pop(bid, None)
            if msgs is None:
                return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)
            if self.role == ROLE_SLAVE:
                return self.fail(xid, W.BAD_REQUEST_EPERM, buf)
            saved = dict(self.flows)
            for m in msgs:
                if m[1] == W.FLOW_MOD:
                    err = self.flow_mod(m)
                else:
                    err = W.BAD_REQUEST_BAD_TYPE
                if err:
                    self.flows = saved
                    return self.fail(xid, err, buf)
            self.counts["bundles"] += 1
            return [W.bundle_reply(xid, bid, 5, flags)]
        return self.fail(xid, W.BAD_REQUEST_BAD_TYPE, buf)

    # ----------------------------------------------------------- packet-out
    def packet_out(self, buf: bytes, xid: int) -> list[bytes]:
        _bid, _in_port, alen = struct.unpack_from("!IIH", buf, 8)
        pos, end = 24, 24 + alen
        data = bytes(buf[end:])
        self.counts["packet_outs"] += 1
        while pos + 4 <= end:
            atype, length = struct.unpack_from("!HH", buf, pos)
            if length < 4:
                break
            if atype == 0 and self.on_output is not None:  # OUTPUT
                port = struct.unpack_from("!I", buf, pos + 4)[0]
                p = self.ports.get(port)
                if p is not None and not p.config & W.OFPPC_NO_FWD and not p.state & W.OFPPS_LINK_DOWN:
                    self.on_output(self, port, data)
            pos += length
        return []


def _apply(table: dict[int, Any], command: int, key: int, every: int, value: Any) -> None:
    """A GROUP_MOD / METER_MOD on ``table``: DELETE (2) of ``key`` or of ``every`` one, else ADD/MODIFY."""
    if command != 2:
        table[key] = value
    elif key == every:
        table.clear()
    else:
        table.pop(key, None)
