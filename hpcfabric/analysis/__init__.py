"""Analyses of the paper's evaluation: rule counts at scale (Fig. 4/6), the power
model (Sec. VI-A, Fig. 11) and the Andújar et al. on/off-link energy model.

Modules: :mod:`~hpcfabric.analysis.scale` (compile-and-count, structural
checks, sampled verification), :mod:`~hpcfabric.analysis.rules` (closed forms
vs measured counts, Fig. 4/6), :mod:`~hpcfabric.analysis.power` (Sec. VI-A,
Fig. 11), :mod:`~hpcfabric.analysis.onoff` (the on/off-link model),
:mod:`~hpcfabric.analysis.plotting` (headless matplotlib), :mod:`~hpcfabric.analysis.cli`
(``hpcfabric analyze``). See docs/analysis.md.
"""
