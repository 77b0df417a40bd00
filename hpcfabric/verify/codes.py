"""Outcome and next-state codes shared by the verifier's engines, and channel names.

A decision of the vectorised engine (:mod:`hpcfabric.verify.engine`) is an ``int32``: ``>= 0`` is
the next decision row (the frame crosses a link and arrives there), a negative value is final:
one of the constants below, or ``DELIVER - h`` for "delivered to host id ``h``" (host ids are
positions in ``fabric.hosts``). The scalar reference walk (:mod:`hpcfabric.verify.reference.walk`) reports
the same codes, so both engines' outcomes compare directly (:func:`outcome_kind`).

A *channel* is (switch, egress port, VLAN PCP): the lossless queue a frame waits in before it
crosses a link (:func:`channel_name`); ``UNTAGGED`` stands for "no VLAN tag".
"""

from __future__ import annotations

__all__ = [
    "DROP", "PUNT", "FLOOD", "DEAD", "SCALAR", "LOOP", "SINK", "TAGGED", "DELIVER", "NEW_ROW",
    "UNTAGGED", "PCP_SLOTS", "KINDS", "outcome_kind", "cos_label", "channel_name",
]

# Next-state codes (>= 0: next row of the decision matrix).
DROP = -1  # no output: table miss or drop entry
PUNT = -2  # sent to the controller
FLOOD = -3  # more than one output
DEAD = -4  # output to a port with nothing behind it
SCALAR = -5  # matrix only: decide this row with the scalar pipeline
LOOP = -6  # walk only: hop bound exceeded / cycle
SINK = -7  # matrix only: the row where finished walks park
TAGGED = -8  # reached a host still carrying a VLAN tag
DELIVER = -16  # delivered to host id h: DELIVER - h
NEW_ROW = 2**31 - 1  # engine only: egress (port, PCP) whose row does not exist yet (never a final code)

UNTAGGED = -1  # VLAN PCP of an untagged frame (engine rows)
PCP_SLOTS = 9  # untagged + PCP 0..7

KINDS = ("delivered", "misdelivered", "dropped", "loop", "punted", "flood", "tagged")


def outcome_kind(code: int, dst_hid: int | None) -> str:
    """The outcome kind (one of :data:`KINDS`) of a final ``code`` for a frame meant for host id ``dst_hid``."""
    if code <= DELIVER:
        return "delivered" if dst_hid is not None and DELIVER - code == dst_hid else "misdelivered"
    if code in (DROP, DEAD):
        return "dropped"
    if code == PUNT:
        return "punted"
    if code == FLOOD:
        return "flood"
    if code == LOOP:
        return "loop"
    if code == TAGGED:
        return "tagged"
    raise AssertionError(f"unexpected code {code}")  # pragma: no cover


def cos_label(pcp: int) -> str:
    """A class of service as reports name it: the PCP value, or ``untagged``."""
    return "untagged" if pcp == UNTAGGED else str(pcp)


def channel_name(ch: tuple[str, int, int]) -> str:
    """``switch:port@PCP`` (``@untagged`` for untagged frames)."""
    sw, port, pcp = ch
    return f"{sw}:{port}@{cos_label(pcp)}"
