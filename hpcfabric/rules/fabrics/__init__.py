"""Compilation per fabric kind: what a kind adds to the generic per-mode routes.

* :mod:`~hpcfabric.rules.fabrics.dragonfly` -- remote-group routes shared per group, the paper's band;
* :mod:`~hpcfabric.rules.fabrics.flattened_butterfly` -- per-dimension ports, matches and compact tables;
* :mod:`~hpcfabric.rules.fabrics.updown` -- fat-tree and folded Clos: levels, uplinks, compact tables.

Explicit fabrics (and compact Dragonfly tables) need nothing of their own:
ORTC over the per-group routes of :mod:`hpcfabric.rules.destinations`, with
next hops from :class:`hpcfabric.rules.routing.ExplicitRouter`.
"""
