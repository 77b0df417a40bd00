"""Routing policies, one module each (like OpenSM's routing engines).

* :mod:`~hpcfabric.rules.policies.minimal` -- the ROUTE table of a switch per
  addressing mode and fabric kind (minimal paths); under the adaptive policies
  its routes become default rules that PORT_STATE may switch off;
* :mod:`~hpcfabric.rules.policies.valiant` -- oblivious Valiant: frames injected
  by a host always leave through its intermediate port (PORT_STATE entries);
* :mod:`~hpcfabric.rules.policies.conditional` -- conditional (adaptive):
  ALTERNATIVE entries taken only while the default port is paused.

PORT_STATE itself (one entry per port, fallbacks, switch-local reaction) is
:mod:`hpcfabric.rules.port_state`; the policies are put together by
:func:`hpcfabric.rules.compiler.compile_switch`.
"""
