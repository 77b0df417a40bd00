"""Proofs over compiled tables: the reference pipeline, the vectorised engine, all-pairs, CDG, sweeps.

Modules, bottom up (each imports only those above it):

* ``pipeline`` — the scalar reference: one frame through one switch's tables (OpenFlow 1.3
  semantics), overlap check, fast-failover groups resolved; ``flatten`` — resubmit chains as
  plain entries;
* ``codes`` — outcome / next-state codes and channel names; ``walk`` — one frame through the
  fabric with the reference pipeline; ``probes`` — addresses nobody owns;
* ``engine`` (package) — the vectorised engine: destinations, views, rows, decisions, walks;
* ``scenarios`` — pause and link-down states applied to tables;
* ``allpairs`` — :func:`verify`: every host pair (and the probes) delivered?;
* ``graphs`` — packed dependency edges, cores, cycles; ``lines`` — per-port decision lines and
  single-port scenarios; ``cdg`` — the channel dependency graph check;
* ``columns``, ``sweep`` — every single paused port at scale, over destination classes;
* ``decisions`` — one switch's decisions over its destination classes; ``automorphism``,
  ``symmetry`` — symmetries of the rules and the reduced sweep; ``updown`` — the up*/down* proof;
* ``choices`` — every line's decisions, unpaused and all paused, on the engine's batch path
  (``engine.flat``, ``engine.batch``); ``unions`` — the union walk over both choices; ``proof`` —
  :func:`prove`: delivery and deadlock freedom under any set of paused ports.
"""
