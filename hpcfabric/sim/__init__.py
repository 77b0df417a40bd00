"""Frame-level fabric simulator driven by the compiled tables (docs/simulation.md).

Modules, bottom up: ``params`` (Table III parameters, ticks), ``tables`` (next-hop lookups
precomputed from the FlowSpecs through the verifier's batch engine), ``traffic`` (UN, ADV and the
topology patterns), ``engine`` (the time-stepped simulator), ``pb`` (the piggyback adaptive
reference router: not an OpenFlow policy), ``bounds`` (closed forms and the channel-load bound of
the tables), ``sweep`` (loads x seeds with confidence intervals).
"""
