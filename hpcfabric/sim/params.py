"""Simulator parameters (paper Table III defaults) and their conversion to clock ticks.

Time advances in ticks of ``frame time / ticks_per_frame`` (frame time = ``frame_bytes * 8 /
link_gbps`` ns: 200 ns for 1,000-byte frames at 40 Gb/s). Every latency is rounded to whole
ticks; with ``ticks_per_frame=5`` (40 ns ticks) the Table III latencies are exact, with the
default 1 (200 ns ticks, five times fewer steps) local and host links round to 0 and the global
link to 2 ticks. :meth:`SimParams.zero_load_ns` is the closed-form latency of a path in the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hpcfabric.errors import HpcfabricError

__all__ = ["SimParams", "REACTIONS", "ParamError", "SWITCH_MODELS"]

#: switch models (docs/simulation.md, "Switch models"): input FIFOs per port and class (head-of-line
#: blocking), virtual output queues per input, class and output, and the commodity shared-buffer,
#: output-queued switch with per-port/per-class PFC thresholds and headroom; BookSim2's input-queued
#: router with a calibrated output queue (iq) or with its VC allocation per output VC (iqvc)
SWITCH_MODELS = ("fifo", "voq", "shared", "iq", "iqvc")

#: PORT_STATE flip reaction delays (ns): ideal; switch-local (an in-switch reaction: one
#: pipeline latency); controller (docs/controller.md, bench/pause_reaction_modes.py: p50 1.7-2.6 ms
#: from PAUSE to the first data frame on the Valiant port, controller mode).
REACTIONS = {"ideal": 0.0, "switch": 200.0, "controller": 2.0e6}


class ParamError(HpcfabricError):
    exit_code = 2


@dataclass(frozen=True)
class SimParams:
    link_gbps: float = 40.0
    frame_bytes: int = 1000
    switch_ns: float = 200.0
    local_ns: float = 40.0
    global_ns: float = 400.0
    host_ns: float = 40.0
    ticks_per_frame: int = 1
    buffer_frames: int = 32  # per input port and class of service (32 KB)
    xoff_frames: int | None = None  # default: buffer minus the headroom a PAUSE round trip needs
    xon_frames: int | None = None  # default: xoff / 2
    reaction: str | float = "ideal"  # a REACTIONS name or ns
    pause_hold_ns: float = 0.0  # a flipped PORT_STATE entry stays flipped this long after the last PAUSE
    pause_from: str = "receiver"  # who PAUSEs a port: its receiver's buffer (802.3x); "egress": also its own backlog
    source_queue: int = 64  # frames a host holds before refusing new ones
    warmup_slots: int = 1000
    window_slots: int = 1000
    drain_slots: int = 4000  # at most this long after the window for measured frames to arrive
    stall_slots: int = 2000  # a queue whose head has not moved this long is checked for a deadlock cycle
    switch: str = "fifo"  # switch model (SWITCH_MODELS): input FIFOs, virtual output queues, shared-buffer output queues
    speedup: int | None = None  # frames an input port may send per frame time (fifo/voq; 0: no limit; None: fifo 0, voq 1)
    iterations: int | None = None  # allocation rounds per frame time: voq (or fifo with a speedup) grant/accept, default 3;
    #                                iq input-first rounds = BookSim's internal speedup, default 2;
    #                                iqvc internal steps (VC then switch allocation), default 2
    shared_frames: int | None = None  # shared model: buffer pool per switch (default buffer_frames x its ports)
    shared_alpha: float = 1.0  # shared model: an ingress account may hold alpha x the free pool before XOFF
    output_frames: int | None = None  # iq/iqvc: frames an output port may hold granted ahead of the wire (its output
    #                                   queue); default iq 2 (calibrated), iqvc its credit bound, classes x buffer_frames
    #                                   (BookSim's output buffer is unbounded: only the downstream credits per VC bind it)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("link_gbps", "frame_bytes", "ticks_per_frame", "buffer_frames", "source_queue", "window_slots",
                     "stall_slots"):
            if not getattr(self, name) > 0:
                raise ParamError(f"simulator parameter {name} must be positive, got {getattr(self, name)}")
        for name in ("switch_ns", "local_ns", "global_ns", "host_ns", "pause_hold_ns", "warmup_slots", "drain_slots"):
            if getattr(self, name) < 0:
                raise ParamError(f"simulator parameter {name} must be >= 0, got {getattr(self, name)}")
        if self.switch not in SWITCH_MODELS:
            raise ParamError(f"switch model must be one of {', '.join(SWITCH_MODELS)}, got {self.switch!r}")
        if self.speedup is not None and self.speedup < 0 or self.iterations is not None and self.iterations < 1:
            raise ParamError(f"speedup must be >= 0 and iterations >= 1, got {self.speedup}, {self.iterations}")
        if self.output_frames is not None and self.output_frames < 0:
            raise ParamError(f"output_frames must be >= 0, got {self.output_frames}")
        if self.shared_frames is not None and self.shared_frames < 1 or not 0 < self.shared_alpha <= 64:
            raise ParamError(f"shared_frames must be >= 1 and shared_alpha in (0, 64], got {self.shared_frames}, "
                             f"{self.shared_alpha}")
        if self.pause_from not in ("receiver", "egress"):
            raise ParamError(f"pause_from must be 'receiver' or 'egress', got {self.pause_from!r}")
        if isinstance(self.reaction, str) and self.reaction not in REACTIONS:
            raise ParamError(f"reaction must be one of {', '.join(REACTIONS)} or a delay in ns, got {self.reaction!r}")
        if self.xoff_frames is not None and not 0 < self.xoff_frames <= self.buffer_frames - self.headroom:
            raise ParamError(f"xoff_frames (--xoff) must be in 1..{self.buffer_frames - self.headroom} "
                             f"(buffer {self.buffer_frames} minus a PAUSE round trip of {self.headroom} frames)")

    # -- derived -----------------------------------------------------------
    @property
    def frame_ns(self) -> float:
        return self.frame_bytes * 8 / self.link_gbps

    @property
    def tick_ns(self) -> float:
        return self.frame_ns / self.ticks_per_frame

    def ticks(self, ns: float) -> int:
        return int(round(ns / self.tick_ns))

    @property
    def rounds(self) -> int:
        """Allocation rounds per frame time (``iterations``, default 2 for iq and iqvc, 3 otherwise)."""
        return self.iterations if self.iterations is not None else (2 if self.switch in ("iq", "iqvc") else 3)

    def output_queue(self, classes: int) -> int:
        """Output queue of the iq models in frames per port (``output_frames``; default iq 2, iqvc
        ``classes`` x ``buffer_frames``, else 0). iqvc's default is BookSim's: its output buffer has no
        bound of its own (``output_buffer_size = -1``), a frame enters it with a credit of its VC
        downstream, so a port holds at most one buffer per VC; the per-VC credit check binds first
        on every link, this bound only on host ports (no credits)."""
        if self.output_frames is not None:
            return self.output_frames
        if self.switch == "iqvc":
            return classes * self.buffer_frames
        return 2 if self.switch == "iq" else 0

    @property
    def reaction_ns(self) -> float:
        return REACTIONS[self.reaction] if isinstance(self.reaction, str) else float(self.reaction)

    @property
    def headroom(self) -> int:
        """Frames that can still arrive after XOFF: a link round trip plus one frame in
        serialisation at each end, in frames (rounded up), plus one."""
        k = self.ticks_per_frame
        worst = 2 * self.ticks(max(self.global_ns, self.local_ns, self.host_ns)) + 2 * k
        return -(-worst // k) + 1

    @property
    def xoff(self) -> int:
        return self.xoff_frames if self.xoff_frames is not None else max(1, self.buffer_frames - self.headroom)

    @property
    def xon(self) -> int:
        return self.xon_frames if self.xon_frames is not None else max(0, self.xoff // 2)

    def zero_load_ns(self, switches: int, local: int, global_: int) -> float:
        """Latency of a frame crossing ``switches`` switches over ``local`` local and ``global_``
        global links (plus the two host links) with no queueing: every link costs one frame
        serialisation plus its latency, every switch its latency (store and forward), all in
        whole ticks."""
        k, t = self.ticks_per_frame, self.ticks
        links = (switches + 1) * k + 2 * t(self.host_ns) + local * t(self.local_ns) + global_ * t(self.global_ns)
        return (links + switches * t(self.switch_ns)) * self.tick_ns

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(frame_ns=self.frame_ns, tick_ns=self.tick_ns, xoff=self.xoff, xon=self.xon, reaction_ns=self.reaction_ns)
        return d
