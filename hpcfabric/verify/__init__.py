"""Proofs over compiled tables; nothing here changes a table. Grouped by role (docs/architecture.md has the map):

* ``reference/`` -- the scalar ground truth: ``pipeline`` (one frame through one switch's tables, OpenFlow
  1.3 semantics, overlap check, fast-failover groups), ``flatten`` (resubmit chains as plain entries),
  ``walk`` (one frame hop by hop through the fabric);
* ``engine/`` -- the vectorised engine, one evaluator (``flat``: entries as columns; ``batch``: destination
  classes and the decisions of many lines at once, for the union proof and repairs) and, over it, ``rows``
  + ``core`` (rows of one switch created as walks reach them, for the verifier, the oracle and up/down);
  cross-checked against ``reference`` in the tests;
* shared parts: ``codes`` (outcome / next-state codes, channel names), ``probes`` (addresses nobody owns),
  ``scenarios`` (pause and link-down states applied to tables), ``graphs`` (packed edges, cycles),
  ``decisions`` (one switch's entries, port classes; destination classes are the engine's ``MatchClasses``);
* ``oracle/`` -- brute force: ``allpairs.verify`` (every host pair delivered, unpaused or with given ports
  paused) and ``cdg.check_deadlock_freedom`` (the CDG oracle: every host pair in the unpaused fabric and
  with every single port paused, over ``lines``);
* ``union/`` -- the union proof ``proof.prove`` (the verdict of ``check`` and the controller): ``choices``
  (every line's decision, unpaused and all paused), ``pairs`` (destination columns, injections, the
  dependency verdict), ``unions`` (the walk over both choices), ``automorphism`` + ``orbits`` (the one
  symmetry check: one column per orbit);
* ``updown`` -- the up*/down* proof of fat-trees and folded Clos, switch by switch;
* ``incremental/`` -- the union proof of a change (repairs): ``delta`` over ``redecide``, ``deltawalk``,
  ``depgraph``.

Three ways to a deadlock verdict: the union proof, the CDG oracle, the up*/down* proof.
"""
