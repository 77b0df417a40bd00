"""OpenFlow 1.3 PACKET_IN parsed without building a match object per packet (``struct`` only).

os-ken's ``OFPPacketIn.parser`` decodes every OXM TLV of the match into
objects (``OFPMatch``, one ``OFPMatchField`` per TLV, the ``Flow``/``FlowWildcards``
of the old API): most of its cost, although the controller only reads
``match["in_port"]``. :func:`packet_in_parser` builds a parser for the
framework's own ``OFPPacketIn``/``OFPMatch`` classes (passed in: this module
imports no framework) whose message is the framework's class -- so the
framework still routes it to ``EventOFPPacketIn`` -- with the same attributes,
and whose ``match`` is a subclass of the framework's ``OFPMatch`` (same class
name) that answers ``m[k]``, ``m.get(k)`` and ``k in m`` for :data:`FAST_FIELDS`
from the TLVs, and builds the real match (the framework's parser, on the same
bytes) the first time anything else is asked (``to_jsondict``, ``fields``,
``items``, ``str``, masked or other fields). A message whose header or match
is not well formed goes to the framework's parser whole, so errors are the
framework's own.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

#: buffer_id, total_len, reason, table_id, cookie, then the match's type and length
HEAD = struct.Struct("!IHBBQHH")
MATCH_AT = 24  # the ofp_match in an ofp_packet_in (after the 8-byte header and 16 fixed bytes)
OFPMT_OXM = 1
OXM_BASIC = 0x8000
_I4, _I8, _I2 = struct.Struct("!I"), struct.Struct("!Q"), struct.Struct("!H")
#: fields answered from the TLVs when present unmasked: name -> (OXM_OF_BASIC field, its unmasked TLV header, value)
FAST_FIELDS: dict[str, tuple[int, int, struct.Struct]] = {
    "in_port": (0, 0x80000004, _I4),
    "in_phy_port": (1, 0x80000204, _I4),
    "metadata": (2, 0x80000408, _I8),
    "eth_type": (5, 0x80000A02, _I2),
    "tunnel_id": (38, 0x80004C08, _I8),
}
_MISSING = object()
#: the attributes a framework OFPMatch has that the lazy one only gets from the real parse
_FULL_ATTRS = frozenset(("_fields2", "fields", "_wc", "_flow"))


def tlvs_ok(buf: bytes, start: int, end: int) -> bool:
    """The OXM TLVs from ``start`` fill ``[start, end)`` exactly, each within ``buf``."""
    if end > len(buf):
        return False
    pos = start
    while pos < end:
        if pos + 4 > end:
            return False
        pos += 4 + buf[pos + 3]
    return pos == end


def find_field(buf: bytes, start: int, end: int, key: str) -> Any:
    """``key``'s value (an int) from the TLVs in ``[start, end)``; :data:`_MISSING` if absent, None if the
    framework must decide (masked, or not in :data:`FAST_FIELDS`). The last occurrence wins, as in os-ken."""
    spec = FAST_FIELDS.get(key)
    if spec is None:
        return None
    field, header, fmt = spec
    found: Any = _MISSING
    pos = start
    while pos < end:
        head = buf[pos] << 24 | buf[pos + 1] << 16 | buf[pos + 2] << 8 | buf[pos + 3]
        if head >> 16 == OXM_BASIC and (head >> 9) & 0x7F == field:
            found = fmt.unpack_from(buf, pos + 4)[0] if head == header else None
        pos += 4 + (head & 0xFF)
    return found


def rebuild(cls: type, state: dict[str, Any]) -> Any:
    """An instance of ``cls`` with ``state`` as its attributes (how a lazy match is copied or pickled)."""
    obj = object.__new__(cls)
    obj.__dict__.update(state)
    return obj


def lazy_match_class(match_cls: type) -> type:
    """A subclass of the framework's ``OFPMatch`` reading :data:`FAST_FIELDS` from the wire bytes."""

    class LazyMatch(match_cls):  # type: ignore[misc, valid-type]
        _lazy_buf: bytes
        _lazy_at: int

        def _full(self) -> None:
            """Become the framework's match of these bytes (its attributes copied in)."""
            real = match_cls.parser(self._lazy_buf, self._lazy_at)
            self.__dict__.update(real.__dict__)

        def __getattr__(self, name: str) -> Any:  # only for attributes not yet set
            if name in _FULL_ATTRS and "_lazy_buf" in self.__dict__:
                self._full()
                return self.__dict__[name]
            raise AttributeError(name)

        def _fast(self, key: Any) -> Any:
            if "_fields2" in self.__dict__ or not isinstance(key, str):
                return None
            at = self._lazy_at
            return find_field(self._lazy_buf, at + 4, at + self.length, key)

        def __getitem__(self, key: Any) -> Any:
            value = self._fast(key)
            if value is None:
                return super().__getitem__(key)
            if value is _MISSING:
                raise KeyError(key)
            return value

        def get(self, key: Any, default: Any = None) -> Any:
            value = self._fast(key)
            if value is None:
                return super().get(key, default)
            return default if value is _MISSING else value

        def __contains__(self, key: Any) -> bool:
            value = self._fast(key)
            if value is None:
                return super().__contains__(key)
            return value is not _MISSING

        def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles are the framework's match
            if "_fields2" not in self.__dict__:
                self._full()
            return rebuild, (match_cls, {k: v for k, v in self.__dict__.items() if not k.startswith("_lazy")})

    # to_jsondict, str() and from_jsondict name the class: keep the framework's name
    LazyMatch.__name__ = LazyMatch.__qualname__ = match_cls.__name__
    LazyMatch.__module__ = match_cls.__module__
    return LazyMatch


def packet_in_parser(msg_cls: type, match_cls: type, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """A parser ``(datapath, version, msg_type, msg_len, xid, buf) -> msg_cls instance`` like the framework's
    ``OFPPacketIn.parser`` (``fallback``, used whole for anything not well formed), with a lazy match."""
    match_type = lazy_match_class(match_cls)
    msg_cls(None)  # the framework's first __init__ of a class records its base attributes (stringify)
    new = object.__new__
    unpack = HEAD.unpack_from

    def parse(datapath: Any, version: int, msg_type: int, msg_len: int, xid: int, buf: Any) -> Any:
        raw = bytes(buf)
        if len(raw) < MATCH_AT + 4:
            return fallback(datapath, version, msg_type, msg_len, xid, buf)
        buffer_id, total_len, reason, table_id, cookie, mtype, mlen = unpack(raw, 8)
        if mtype != OFPMT_OXM or mlen < 4 or not tlvs_ok(raw, MATCH_AT + 4, MATCH_AT + mlen):
            return fallback(datapath, version, msg_type, msg_len, xid, buf)
        match = new(match_type)
        match.__dict__.update(type=mtype, length=mlen, _lazy_buf=raw, _lazy_at=MATCH_AT)
        data = raw[MATCH_AT + (mlen + 7) // 8 * 8 + 2:]
        if total_len < len(data):  # padding for 8-byte alignment
            data = data[:total_len]
        msg = new(msg_cls)
        msg.__dict__.update(datapath=datapath, version=version, msg_type=msg_type, msg_len=msg_len, xid=xid, buf=raw,
                            buffer_id=buffer_id, total_len=total_len, reason=reason, table_id=table_id,
                            cookie=cookie, match=match, data=data)
        return msg

    return parse
