"""Flow rules (pure FlowSpec values): addressing, routing, compaction and the compiler.

Entry point: :func:`hpcfabric.rules.compiler.compile_fabric`. Values and
priorities: :mod:`~hpcfabric.rules.flows`, :mod:`~hpcfabric.rules.tables`;
per addressing mode :mod:`~hpcfabric.rules.destinations`, per fabric kind
:mod:`hpcfabric.rules.fabrics`, per routing policy :mod:`hpcfabric.rules.policies`;
:mod:`~hpcfabric.rules.port_state`, :mod:`~hpcfabric.rules.cos`,
:mod:`~hpcfabric.rules.infra`; table transforms :mod:`~hpcfabric.rules.guards`,
:mod:`~hpcfabric.rules.mac_rewrite`. See docs/rules.md.
"""
