"""The vectorised engine: what compiled tables do with every destination at once.

Every check of :mod:`hpcfabric.verify` that walks frames in bulk (the all-pairs verifier, the CDG
oracle, the up/down proof, the union proof and its incremental form) runs on the one evaluator of
this package; :mod:`hpcfabric.verify.reference.pipeline` (one frame through one switch) and
:mod:`hpcfabric.verify.reference.walk` (one frame through the fabric) are the scalar reference it is
cross-checked against.

Premise: forwarding of a data frame at a switch depends only on its ingress port, the VLAN PCP
it arrives with and its destination MAC (rules matching ``eth_src`` are resolved per source, and
rules rewriting MACs make :class:`Engine` raise :class:`Unsupported`).

The internal API, bottom up:

* **Flat tables** (:class:`~.flat.FlatTables`, :mod:`.flat`): the data-relevant entries of many
  *variants* (a switch's entries, or a row's) as columns, with each action list's effect per PCP.
* **The evaluator** (:mod:`.batch`): :class:`~.batch.MatchClasses` splits destinations into classes
  that meet the same ``eth_dst`` entries; :func:`~.batch.decide` runs many (line, class) elements --
  a line is a variant, an ingress port and an arrival PCP -- through the tables at once.
* **Rows** (:class:`Row`, :mod:`.rows`): a switch, an ingress class (ports no data-relevant
  entry tells apart) and an arrival PCP; :func:`evaluate` runs a :class:`Destinations` set through
  a row's tables on the evaluator and returns an :class:`Outcome` (outputs, punt, error, PORT_STATE
  entry met). :func:`data_flows` / :func:`data_relevant` select the entries a data frame can meet;
  :func:`entry_key` is an entry without its ``in_port`` (rows whose entries agree share work);
  :func:`forward_data_flows` / :func:`port_classes` give one switch's entries and ingress classes to the
  per-switch checks.
* **Decisions** (:class:`Engine`, :mod:`.core`): rows of a whole fabric, created as frames
  reach them; :meth:`Engine.decide` turns an outcome into next-state codes
  (:mod:`hpcfabric.verify.codes`: the next row, or a final outcome), :meth:`Engine.matrix`
  stacks them.
* **Walks** (:meth:`Engine.walk`, :meth:`Engine.source_classes`, :meth:`Engine.ingress_ids`):
  (source class, destination) elements followed hop by hop through a decision matrix, with
  loops detected and steps back out of a frame's ingress port dropped.
"""

from hpcfabric.verify.engine.core import Engine
from hpcfabric.verify.engine.flat import Unsupported
from hpcfabric.verify.engine.rows import (Destinations, Outcome, Row, data_flows, data_relevant, entry_key, evaluate, evaluate_rows,
                                          forward_data_flows, port_classes, rewrites_pcp)

__all__ = [
    "Destinations", "Unsupported", "Row", "Outcome", "evaluate", "evaluate_rows", "data_flows", "data_relevant",
    "rewrites_pcp", "entry_key", "forward_data_flows", "port_classes", "Engine",
]
