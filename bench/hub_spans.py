"""What held the controller when PAUSE reactions were slow: its hub spans set against the emulators' reactions.

Run the bench with the hub watch on, keeping its work directory::

    HPCFABRIC_HUB_WATCH=3 .venv/bin/python bench/control_scale.py --fabric table3 --emulators 2 \\
        --lldp-interval 5 --poll-interval 10 --no-reroute --no-restart --workdir /tmp/cs
    .venv/bin/python bench/hub_spans.py /tmp/cs/table3

It reads ``ctl0.log`` (``hub span`` and ``gc gen2`` lines, docs/scale.md "PAUSE tail") and
``pause_reactions.json`` (each reaction's wall-clock end; with ``HPCFABRIC_HUB_WATCH_MESSAGES=1``
also the OpenFlow messages handled in each long span) and prints, for the PAUSE window: the
controller's wall and CPU time inside long spans (wall >> CPU: the machine's other load starved
it; CPU close to wall: our own blocking), the spans grouped by where they gave the hub back, and
the spans overlapping the slowest reactions.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

SPAN = re.compile(r"hub span ([\d.]+) ms \(cpu ([\d.]+) ms\) ending ([\d.]+) in (.*?)(?: (\[.*\]))?$")
GC = re.compile(r"gc gen2 ([\d.]+) ms \(cpu ([\d.]+) ms.*ending ([\d.]+)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", help="the fabric's work directory (holds ctl0.log and pause_reactions.json)")
    ap.add_argument("--log", default="ctl0.log")
    ap.add_argument("--slowest", type=int, default=5)
    args = ap.parse_args(argv)
    d = Path(args.workdir)
    try:
        lines = (d / args.log).read_text(encoding="utf-8", errors="replace").splitlines()
        events = json.loads((d / "pause_reactions.json").read_text())
    except (OSError, ValueError) as err:
        print(f"hub_spans: {d}: {err} (expected {args.log} and pause_reactions.json from a bench run)", file=sys.stderr)
        return 2
    spans = []  # (wall ms, cpu ms, end, where)
    for line in lines:
        m = SPAN.search(line)
        if m:
            spans.append((float(m[1]), float(m[2]), float(m[3]), m[4], m[5] or ""))
            continue
        m = GC.search(line)
        if m:
            spans.append((float(m[1]), float(m[2]), float(m[3]), "gc gen2", ""))
    if not events:
        print("hub_spans: no reactions recorded", file=sys.stderr)
        return 2
    t0 = min(e["wall"] - e["us"] / 1e6 for e in events)
    t1 = max(e["wall"] for e in events)
    win = [s for s in spans if t0 <= s[2] and s[2] - s[0] / 1000 <= t1 and s[3] != "gc gen2"]
    xs = sorted(e["us"] / 1000 for e in events)
    print(f"PAUSE window {t1 - t0:.2f} s, {len(xs)} reactions: p50 {xs[len(xs) // 2]:.2f} ms, "
          f"p99 {xs[min(len(xs) - 1, int(0.99 * len(xs)))]:.2f} ms, max {xs[-1]:.2f} ms")
    print(f"long spans in the window: {len(win)}, wall {sum(s[0] for s in win):.0f} ms, "
          f"cpu {sum(s[1] for s in win):.0f} ms; gen-2 GCs: {sum(1 for s in spans if s[3] == 'gc gen2' and t0 <= s[2] <= t1 + 1)}")
    groups: dict[str, list] = collections.defaultdict(list)
    for s in win:
        groups[s[3].split(" < ")[-1]].append(s)
    for where, ss in sorted(groups.items(), key=lambda kv: -max(x[1] for x in kv[1]))[:12]:
        print(f"  {len(ss):4d} spans, max cpu {max(x[1] for x in ss):7.1f} ms, max wall {max(x[0] for x in ss):7.1f} ms"
              f"  {where}")
    for s in sorted((s for s in win if s[4]), key=lambda s: -s[1])[: args.slowest]:
        print(f"  span {s[0]:.1f} ms wall/{s[1]:.1f} cpu, messages handled {s[4]}")
    for e in sorted(events, key=lambda e: -e["us"])[: args.slowest]:
        start = e["wall"] - e["us"] / 1e6
        over = sorted((s for s in spans if s[2] >= start and s[2] - s[0] / 1000 <= e["wall"]), key=lambda s: -s[0])
        desc = "; ".join(f"{s[0]:.0f} ms wall/{s[1]:.0f} cpu {s[3].split(' < ')[-1]}" for s in over[:3])
        print(f"reaction {e['us'] / 1000:8.1f} ms ({e.get('switch')}): {desc or 'no long span'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
