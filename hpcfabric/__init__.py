"""hpcfabric: an OpenFlow fabric for HPC on commodity Ethernet switches.

The package is a pure core (topology models, hierarchical addressing, rule
compilation and compaction, a fake OpenFlow pipeline and verifier) plus thin
shells: the os-ken controller app (`hpcfabric.controller`), the Mininet adapter
(`mininet/`) and the command line (`hpcfabric.cli`).
"""

__version__ = "0.1.0"
