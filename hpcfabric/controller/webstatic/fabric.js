// hpcfabric fabric page: draws /api/view, colours it from /api/load, follows /events (server-sent events).
// Read-only: it only GETs. No external resources.
"use strict";
(function () {
  const svg = document.getElementById("fabric");
  const NS = "http://www.w3.org/2000/svg";
  let view = null, byEnd = {}, edgeEl = {}, nodeEl = {}, loadRound = null, state = null, group = null;

  function $(id) { return document.getElementById(id); }
  function groupFromHash() {
    const m = /group=(-?\d+)/.exec(location.hash);
    return m ? parseInt(m[1], 10) : null;
  }
  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw new Error(url + ": " + r.status);
    return r.json();
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c])); }

  function draw(v) {
    view = v; byEnd = {}; edgeEl = {}; nodeEl = {}; flagged = {};
    const pos = {};
    for (const n of v.nodes) pos[n.id] = [n.x * 1000, n.y * 1000];
    const parts = [];
    for (const e of v.edges) {
      const a = pos[e.a], b = pos[e.b];
      let d = `M${a[0].toFixed(1)} ${a[1].toFixed(1)} `;
      if (e.cls && e.cls.startsWith("dim")) {  // FB: a dimension is all-to-all: bend so links on one line stay apart
        const mx = (a[0] + b[0]) / 2, my = (a[1] + b[1]) / 2, dx = b[0] - a[0], dy = b[1] - a[1];
        const k = 0.18;
        d += `Q${(mx - dy * k).toFixed(1)} ${(my + dx * k).toFixed(1)} `;
      } else d += "L";
      d += `${b[0].toFixed(1)} ${b[1].toFixed(1)}`;
      const g = v.level === "group" ? " group" : "";
      parts.push(`<path class="edge cls-${esc(e.cls)}${g}" data-id="${esc(e.id)}" d="${d}"></path>`);
      for (const end of e.ends) byEnd[end] = e.id;
    }
    const r = v.nodes.length > 300 ? 4 : v.nodes.length > 60 ? 7 : 12;
    const labels = v.nodes.length <= 200;
    for (const n of v.nodes) {
      const [x, y] = pos[n.id];
      parts.push(`<circle class="node ${n.kind}" data-id="${esc(n.id)}" data-group="${n.group}" cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${n.kind === "switch" ? r : r + 3}"></circle>`);
      if (labels) parts.push(`<text class="label" x="${(x + r + 2).toFixed(1)}" y="${(y - r).toFixed(1)}">${esc(n.label)}</text>`);
    }
    svg.innerHTML = parts.join("");
    for (const el of svg.querySelectorAll("path.edge")) edgeEl[el.dataset.id] = el;
    for (const el of svg.querySelectorAll("circle.node")) nodeEl[el.dataset.id] = el;
    $("title").textContent = `${v.name}${v.level === "drill" ? " / " + v.label : ""} (${v.switches} switches, ${v.links} links)`;
    $("back").hidden = v.level !== "drill";
    $("hint").textContent = v.level === "group" ? "Group level: click a group to see its switches and links." : "";
  }

  function setList(id, items, total) {
    $("n-" + id).textContent = total === undefined ? items.length : total;
    $(id).innerHTML = items.slice(0, 200).map(s => `<li>${esc(s)}</li>`).join("") + (items.length > 200 ? `<li>... ${items.length - 200} more</li>` : "");
  }

  function applyState(st) {
    state = st;
    const dl = st.deadlock || {};
    const badge = $("deadlock");
    badge.textContent = `deadlock: ${dl.proven && !dl.unproven_repair ? "proven free" : dl.verdict || "not proven"} (${dl.flow_control})`;
    badge.className = "badge " + (dl.proven && !dl.unproven_repair ? "ok" : "bad");
    $("flips").textContent = `flips/s: ${st.flips_per_s} (total ${st.flips})`;
    const s = st.switches || {};
    $("switches").textContent = `switches: ${s.confirmed}/${s.expected} confirmed, ${s.connected} connected`;
    $("ha").innerHTML = "<tr><td>partition</td><td>master</td></tr>" + (st.ha || []).map(h => `<tr><td>${esc(h.partition)}</td><td>${esc(h.master || "(none)")}</td></tr>`).join("");
    setList("paused", st.paused || []);
    const down = [...new Set((st.down || []).map(p => byEnd[p] || p))].concat((st.switches_gone || []).map(n => n + " (switch gone)"));
    setList("down", down);
    setList("quarantined", st.quarantined || []);
    setList("missing", st.missing || [], st.missing_count);
    mark();
    if (view && st.load_round !== loadRound) { loadRound = st.load_round; refreshLoad(); }
  }

  let flagged = {};  // class -> Set of element ids carrying it now (only differences touch the DOM)
  function setFlags(cls, els) {
    const now = new Set(els), before = flagged[cls] || new Set();
    for (const el of before) if (!now.has(el)) el.classList.remove(cls);
    for (const el of now) if (!before.has(el)) el.classList.add(cls);
    flagged[cls] = now;
  }

  function mark() {
    if (!view || !state) return;
    const want = { paused: [], failed: [], quarantined: [], missing: [] };
    if (view.level === "group") {
      const g = state.groups || {};
      const add = (key, cls) => {
        for (const id of ((g[key] || {}).edges || [])) if (edgeEl[id]) want[cls].push(edgeEl[id]);
        for (const n of ((g[key] || {}).groups || [])) if (nodeEl["G" + n]) want[cls].push(nodeEl["G" + n]);
      };
      add("down", "failed"); add("quarantined", "quarantined"); add("paused", "paused");
    } else {
      const ends = (ports, cls) => { for (const p of ports || []) { const id = byEnd[p]; if (id && edgeEl[id]) want[cls].push(edgeEl[id]); } };
      ends(state.down, "failed");
      ends(state.quarantined, "quarantined");
      ends(state.paused, "paused");
      for (const m of state.missing || []) if (edgeEl[m]) want.missing.push(edgeEl[m]);
      for (const n of state.switches_gone || []) if (nodeEl[n]) want.failed.push(nodeEl[n]);
    }
    for (const cls in want) setFlags(cls, want[cls]);
  }

  async function refreshLoad() {
    const q = group === null ? "" : `?group=${group}`;
    try {
      const [ld, top] = await Promise.all([getJSON("/api/load" + q), getJSON("/api/top?n=10")]);
      for (const id in edgeEl) {
        const el = edgeEl[id];
        for (let i = 0; i < 10; i++) el.classList.remove("l" + i);
        const u = ld.loads[id];
        if (u !== undefined) { el.classList.add("l" + Math.min(9, Math.floor(u * 10))); el.dataset.util = u; }
      }
      $("top").innerHTML = "<tr><td>link (sender)</td><td>util</td></tr>" + top.top.map(t => `<tr><td>${esc(t.switch)}:${t.port}&rarr;${esc(t.peer)}</td><td>${(t.util * 100).toFixed(1)}%</td></tr>`).join("");
    } catch (err) { console.warn(err); }
  }

  async function open() {
    group = groupFromHash();
    document.body.dataset.ready = "0";
    const [v, st] = await Promise.all([getJSON("/api/view" + (group === null ? "" : `?group=${group}`)), getJSON("/api/state")]);
    performance.mark("hf-fetched");
    draw(v);
    const cur = state || st;  // the event stream's state when it came first (it is never older)
    loadRound = cur.load_round;  // the loads are fetched once, below
    applyState(cur);
    performance.mark("hf-drawn");
    // drawn with its live state: ready once the browser has laid it out and painted (next frame)
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    window.hfReady = performance.now();
    document.body.dataset.ready = "1";
    await refreshLoad();
    window.hfLoaded = performance.now();
  }

  svg.addEventListener("mouseover", ev => {
    const el = ev.target.closest("[data-id]");
    if (!el || !view) return;
    const id = el.dataset.id;
    const e = view.edges.find(x => x.id === id), n = view.nodes.find(x => x.id === id);
    const u = el.dataset.util !== undefined ? `, ${(el.dataset.util * 100).toFixed(1)}% busiest direction` : "";
    $("hint").textContent = e ? `${e.id} (${e.cls}${e.count ? ", " + e.count + " links" : ""}${u})` :
      n ? `${n.label}${n.switches ? " (" + n.switches + " switches, click to open)" : ""}` : "";
  });
  svg.addEventListener("click", ev => {
    const el = ev.target.closest("circle.node");
    if (el && (el.classList.contains("group") || el.classList.contains("stub"))) location.hash = "group=" + el.dataset.group;
  });
  $("back").addEventListener("click", () => { location.hash = ""; });
  window.addEventListener("hashchange", () => { open(); });

  const es = new EventSource("/events");
  es.onopen = () => { $("conn").textContent = "live"; $("conn").className = "badge ok"; };
  es.onerror = () => { $("conn").textContent = "live: reconnecting"; $("conn").className = "badge off"; };
  es.onmessage = ev => { const st = JSON.parse(ev.data); window.hfEvents = (window.hfEvents || 0) + 1; applyState(st); };
  open();
})();
