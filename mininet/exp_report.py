"""Experiment report: the table over repeats, the throughput ratios, PNG plots and ``report.md``.

:func:`table` averages the records of ``run_experiment.py`` per (fabric, pattern, policy);
:func:`ratios` gives conditional / minimal aggregate throughput per fabric and pattern (``df_adv_ratio``,
...); :func:`check_targets` judges them (``--check``); :func:`plots` and :func:`report_md` write what a
reader looks at.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from exp_traffic import Plan  # mininet/exp_traffic.py

#: ``--check``: the acceptance targets of the ratios (docs/experiments.md)
TARGETS = {"df_adv_ratio": (lambda v: v >= 2), "df_un_ratio": (lambda v: v >= 0.9), "fb_adv_ratio": (lambda v: v > 1)}


def mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 4) if xs else None


def table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (fabric, pattern, policy): means (and spread) over the repeats."""
    keys: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        keys.setdefault((r["fabric"], r["pattern"], r["policy"]), []).append(r)
    rows = []
    for (fab, pat, pol), rs in keys.items():
        thr = [r["throughput_mbps"] for r in rs]
        rows.append({
            "fabric": fab, "pattern": pat, "policy": pol, "runs": len(rs),
            "offered_mbps": mean([r["offered_mbps"] for r in rs]),
            "throughput_mbps": mean(thr),
            "throughput_min": min(thr), "throughput_max": max(thr),
            "loss": mean([r["loss"] for r in rs if r["loss"] is not None]),
            "latency_p50_ms": mean([r["latency_ms"]["p50"] for r in rs if r["latency_ms"]["p50"] is not None]),
            "latency_p99_ms": mean([r["latency_ms"]["p99"] for r in rs if r["latency_ms"]["p99"] is not None]),
            "per_source_min_mbps": mean([r["per_source_mbps"]["min"] for r in rs]),
            "jain_fairness": mean([r["jain_fairness"] for r in rs]),
            "pause_xoff_frames": mean([r["pause_xoff_frames"] or 0 for r in rs]),
            "controller_flips": mean([r["controller_flips"] for r in rs]),
            "queue_drops": mean([r["queue_drops"] or 0 for r in rs]),
            "lost_outside_queues": mean([r["lost_outside_queues"] or 0 for r in rs]),
            "alternative_frames": mean([r["alternative_frames"] for r in rs]),
        })
    return rows


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["fabric"], r["pattern"], r["policy"]): r for r in rows}
    out: dict[str, Any] = {}
    shorts = {"adversarial": "adv", "uniform": "un"}
    for fab in sorted({r["fabric"] for r in rows}):
        for pat in sorted({r["pattern"] for r in rows}):
            short = shorts.get(pat, pat)
            for pol, static, suffix in (("conditional-wl", "conditional", "_wl"), ("valiant-wl", "valiant", "_valiant_wl")):
                a, b = by.get((fab, pat, pol)), by.get((fab, pat, static))
                if a and b and b["throughput_mbps"]:  # workload-aware / static intermediates
                    out[f"{fab}_{short}_ratio{suffix}"] = round(a["throughput_mbps"] / b["throughput_mbps"], 3)
            base = by.get((fab, pat, "minimal"))
            for pol, suffix in (("conditional", ""), ("conditional-switch", "_switch"), ("valiant", "_valiant")):
                other = by.get((fab, pat, pol))
                if base and other and base["throughput_mbps"]:
                    out[f"{fab}_{short}_ratio{suffix}"] = round(other["throughput_mbps"] / base["throughput_mbps"], 3)
            for pol, name in (("minimal", "minimal"), ("conditional", "conditional")):
                r = by.get((fab, pat, pol))
                if r and pat == "uniform":
                    out[f"{fab}_un_loss_{name}"] = r["loss"]
    return out


def plots(records: list[dict[str, Any]], rows: list[dict[str, Any]], out: Path) -> list[str]:
    """Throughput bars, latency CDFs and per-source throughput box plots (PNG). Returns the file names."""
    from hpcfabric.analysis.plotting import pyplot

    plt = pyplot()
    files = []
    fabrics = sorted({r["fabric"] for r in rows})
    patterns = sorted({r["pattern"] for r in rows})
    policies = [p for p in ("minimal", "valiant", "valiant-wl", "conditional", "conditional-wl", "conditional-switch")
                if any(r["policy"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(fabrics), figsize=(5 * len(fabrics), 4), squeeze=False)
    for ax, fab in zip(axes[0], fabrics):
        here = [p for p in policies if any(r["policy"] == p and r["fabric"] == fab for r in rows)]
        width = 0.8 / max(len(here), 1)
        for i, pol in enumerate(here):
            ys, lo, hi = [], [], []
            for pat in patterns:
                r = next((r for r in rows if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol), None)
                ys.append(r["throughput_mbps"] if r else 0)
                lo.append((r["throughput_mbps"] - r["throughput_min"]) if r else 0)
                hi.append((r["throughput_max"] - r["throughput_mbps"]) if r else 0)
            xs = [j + i * width for j in range(len(patterns))]
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=pol)
        offered = [next((r["offered_mbps"] for r in rows if r["fabric"] == fab and r["pattern"] == pat), 0) for pat in patterns]
        for j, o in enumerate(offered):
            ax.hlines(o, j - width / 2, j - width / 2 + width * len(here), colors="k", linestyles="dashed")
        ax.set_xticks([j + width * (len(here) - 1) / 2 for j in range(len(patterns))])
        ax.set_xticklabels(patterns)
        ax.set_title(f"{fab}: aggregate delivered throughput")
        ax.set_ylabel("Mbit/s (dashed: offered)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    files.append("throughput.png")

    def latency_cdf(ax: Any, fab: str, pat: str) -> None:
        for pol in policies:
            lat = sorted(x for r in records if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol
                         for x in r["latency_sample_ms"])
            if lat:
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=pol)
        ax.set_xscale("log")
        ax.set_title(f"{fab} {pat}: one-way latency CDF")
        ax.set_xlabel("ms")
        ax.legend(fontsize=8)

    def per_source(ax: Any, fab: str, pat: str) -> None:
        here = [p for p in policies if any(r["policy"] == p and r["fabric"] == fab for r in records)]
        ax.boxplot([[x for r in records if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol
                     for x in r["per_source_all_mbps"]] for pol in here])
        ax.set_xticks(range(1, len(here) + 1), here)
        ax.set_title(f"{fab} {pat}: per-source throughput")
        ax.set_ylabel("Mbit/s")
        ax.tick_params(axis="x", labelsize=8)

    for name, draw in (("latency_cdf.png", latency_cdf), ("per_source.png", per_source)):
        fig, axes = plt.subplots(len(fabrics), len(patterns), figsize=(5 * len(patterns), 3.6 * len(fabrics)),
                                 squeeze=False)
        for a, fab in enumerate(fabrics):
            for b, pat in enumerate(patterns):
                draw(axes[a][b], fab, pat)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def report_md(rows: list[dict[str, Any]], summary: dict[str, Any], plan: Plan, files: list[str]) -> str:
    lines = [
        "# Experiment results",
        "",
        f"Generated by `mininet/run_experiment.py` on {time.strftime('%Y-%m-%d %H:%M')}: fabric links "
        f"{plan.link_mbit:g} Mbit/s with a {plan.queue_bytes}-byte FIFO, {plan.size}-byte UDP frames, "
        f"{plan.repeats} repeat(s) of {plan.warmup:g} s warm-up + {plan.measure:g} s measured; offered load per host "
        + ", ".join(f"{k} {v:g} x" for k, v in plan.load.items()) + " link rate; PAUSE emulator XOFF at "
        f"{plan.xoff} B, XON below {plan.xon} B, {plan.quanta} quanta, refreshed every {plan.refresh_ms:g} ms.",
        "",
        "| fabric | pattern | policy | runs | offered Mbit/s | delivered Mbit/s (min–max) | loss | p50 / p99 latency ms "
        "| min per-source Mbit/s | Jain | XOFF frames | flips | diverted frames | lost outside queues |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["fabric"], r["pattern"], r["policy"])):
        lines.append(
            f"| {r['fabric']} | {r['pattern']} | {r['policy']} | {r['runs']} | {r['offered_mbps']:.2f} | "
            f"{r['throughput_mbps']:.2f} ({r['throughput_min']:.2f}–{r['throughput_max']:.2f}) | "
            f"{(r['loss'] or 0):.1%} | {r['latency_p50_ms']} / {r['latency_p99_ms']} | {r['per_source_min_mbps']:.3f} | "
            f"{r['jain_fairness']:.2f} | {r['pause_xoff_frames']:.0f} | {r['controller_flips']:.0f} | "
            f"{r['alternative_frames']:.0f} | {(r['lost_outside_queues'] or 0):.1%} |")
    lines += ["", "Ratios (conditional / minimal aggregate throughput; `_wl`: workload-aware / static intermediates, "
              "this run): `" + json.dumps(
        {k: v for k, v in summary.items() if "ratio" in k or "loss" in k}, sort_keys=True) + "`", ""]
    for f in files:
        lines.append(f"![{f}]({f})")
    return "\n".join(lines) + "\n"



def check_targets(summary: dict[str, Any]) -> list[str]:
    """Failures of ``--check``: a measured ratio below its target, or UN loss of conditional above minimal's."""
    failures = []
    for key, ok in TARGETS.items():
        if key in summary and not ok(summary[key]):
            failures.append(f"{key} = {summary[key]} misses its target")
    lm, lc = summary.get("df_un_loss_minimal"), summary.get("df_un_loss_conditional")
    if lm is not None and lc is not None and lc > lm + 0.005:
        failures.append(f"UN loss conditional {lc} > minimal {lm}")
    return failures
