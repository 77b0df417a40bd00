"""OpenFlow 1.3 encoding of FlowSpecs: wire bytes, ovs-ofctl text, reconciliation."""
