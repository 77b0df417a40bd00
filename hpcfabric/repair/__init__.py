"""Repairs after failures: the surviving fabric compiled for a config, proven, with its update order
(:mod:`~hpcfabric.repair.plan`), and the planner process the controller asks (:mod:`~hpcfabric.repair.service`).

Above :mod:`hpcfabric.config` (a repair compiles and adapts tables as the config says) and below the
controller; the pure parts it uses live lower: :mod:`hpcfabric.topology.failures`, the routers of
:mod:`hpcfabric.rules`, the incremental proof of :mod:`hpcfabric.verify.incremental.delta`.
"""
