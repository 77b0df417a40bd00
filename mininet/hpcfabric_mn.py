"""``mn --custom`` file: hpcfabric's fabrics as Mininet topologies (docs/mininet.md, "Plain mn").

    sudo mn --custom mininet/hpcfabric_mn.py --topo dragonfly,a=4,p=2,h=2 \
        --switch ovs,datapath=user,protocols=OpenFlow13 --controller remote,port=6653
    mininet> dmp            # every host asks for its hierarchical MAC (DMP), neighbour entries
    mininet> pingall

Topologies: dragonfly,a=,p=,h=[,g=,arrangement=] | fb,dims=3x3,hosts= | fattree,k= |
clos,radix=[,stages=,hosts=,pods=] | fabric,file=topologies/X.yaml (each also prefix=).
Tests: --test dmp (dmp+pingall; dmp+cli: DMP first, then the CLI).
Everything lives in mininet/mn_fabric.py; mn copies every name this file defines into its own
globals, so it defines only ``topos``, ``tests`` and ``CLI``.
"""


def _load():
    import inspect
    import os
    import sys

    # mn exec()s this file without __file__; the code object still knows its file name
    here = os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename))
    if here not in sys.path:
        sys.path.insert(0, here)
    import mn_fabric

    return mn_fabric.topos, mn_fabric.tests, mn_fabric.FabricCLI


topos, tests, CLI = _load()
del _load
