"""YAML topology loader and explicit fabrics: shipped files, malformed input, semantic errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import networkx as nx
import pytest
import yaml

from hpcfabric.errors import ConfigError, TopologyError
from hpcfabric.topology.explicit import explicit_fabric
from hpcfabric.topology.loader import KINDS, load_topology, parse_topology
from hpcfabric.topology.model import Peer

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

# file -> (kind, switches, hosts, links, max radix)
SHIPPED = {
    "dragonfly-a4-p2-h2.yaml": ("dragonfly", 36, 72, 90, 7),
    "dragonfly-a2-p1-h1.yaml": ("dragonfly", 6, 6, 6, 3),
    "dragonfly-a6-p3-h3.yaml": ("dragonfly", 114, 342, 456, 11),
    "dragonfly-table3.yaml": ("dragonfly", 2064, 16512, 129 * 120 + 129 * 128 // 2, 31),
    "fb-2d-4x4.yaml": ("flattened_butterfly", 16, 64, 48, 10),
    "fb-2d-6x6.yaml": ("flattened_butterfly", 36, 324, 180, 19),  # 9 hosts + 2 x 5 neighbours
    "fb-2d-3x3.yaml": ("flattened_butterfly", 9, 18, 18, 6),
    "fb-3d-4x4x4.yaml": ("flattened_butterfly", 64, 256, 288, 13),
    "fat-tree-k4.yaml": ("fat_tree", 20, 16, 32, 4),
    "explicit-ring4.yaml": ("explicit", 4, 4, 5, 4),
    "clos-300k.yaml": ("folded_clos", 29484, 303264, 909792, 72),
    "fb-4d-300k.yaml": ("flattened_butterfly", 20250, 303750, 475875, 62),
    "dragonfly-300k.yaml": ("dragonfly", 16668, 300024, 398643, 71),
    "clos-4stage-small.yaml": ("folded_clos", 84, 72, 216, 6),
}


# ---------------------------------------------------------------------------
# shipped topologies
# ---------------------------------------------------------------------------
def test_every_shipped_file_is_covered():
    assert sorted(p.name for p in TOPOLOGIES.glob("*.yaml")) == sorted(SHIPPED)


@pytest.mark.parametrize("filename", sorted(SHIPPED))
def test_shipped_topology_loads(filename):
    path = TOPOLOGIES / filename
    f = load_topology(path)
    kind, switches, hosts, links, radix = SHIPPED[filename]
    assert (f.kind, len(f.switches), len(f.hosts), len(f.links), f.max_radix) == (kind, switches, hosts, links, radix)
    assert f.name == path.stem
    assert f.params["source"] == str(path)
    assert isinstance(f.params["addressing"], dict)
    raw = yaml.safe_load(path.read_text())
    assert isinstance(raw["description"], str) and raw["description"] and "\n" not in raw["description"]
    assert f.params["description"] == raw["description"]
    assert nx.is_connected(f.switch_graph)


def test_default_fabric_is_the_paper_fig9_dragonfly():
    f = load_topology(str(TOPOLOGIES / "dragonfly-a4-p2-h2.yaml"))
    assert {k: f.params[k] for k in "aphg"} == {"a": 4, "p": 2, "h": 2, "g": 9}
    assert f.params["addressing"] == {"mode": "compact"}
    assert len({sw.group for sw in f.switches}) == 9


def test_table3_dragonfly():
    f = load_topology(TOPOLOGIES / "dragonfly-table3.yaml")
    assert f.params["g"] == 129 and len({sw.group for sw in f.switches}) == 129


def test_explicit_ring4_layout():
    f = load_topology(TOPOLOGIES / "explicit-ring4.yaml")
    assert [(sw.name, sw.dpid, sw.group, sw.index, sw.role) for sw in f.switches] == [
        ("s1", 1, 0, 0, "access"),
        ("s2", 2, 0, 1, "access"),
        ("s3", 3, 1, 0, "access"),
        ("s4", 4, 1, 1, "access"),
    ]
    for n in range(1, 5):
        assert f.peer(f"s{n}", 1) == Peer(f"h{n}", None, "host")
        nxt, prev = f"s{n % 4 + 1}", f"s{(n - 2) % 4 + 1}"
        assert f.peer(f"s{n}", 2) == Peer(nxt, 3, "fabric")
        assert f.peer(f"s{n}", 3) == Peer(prev, 2, "fabric")
    assert f.peer("s1", 4) == Peer("s3", 4, "fabric")
    assert f.peer("s2", 4) is None
    assert nx.diameter(f.switch_graph) == 2


def test_parse_topology_from_text_and_optional_keys():
    f = parse_topology("kind: dragonfly\na: 2\np: 1\nh: 1\ng: 2\narrangement: palmtree\nname: tiny\n", "<text>")
    assert f.name == "tiny" and f.params["g"] == 2 and f.params["arrangement"] == "palmtree"
    assert f.params["source"] == "<text>" and f.params["addressing"] == {}
    assert "description" not in f.params
    f = parse_topology("kind: fat_tree\nk: 2\n", "x.yaml")
    assert f.name == "fat-tree-k2"


def test_yaml_merge_keys_and_anchors_are_fine():
    text = textwrap.dedent(
        """
        kind: flattened_butterfly
        dims: &d [3, 3]
        hosts_per_switch: 2
        addressing:
          widths: &w {dim0: 4, dim1: 4}
        """
    )
    f = parse_topology(text, "t.yaml")
    assert f.params["addressing"] == {"widths": {"dim0": 4, "dim1": 4}}


def test_explicit_defaults_from_yaml(tmp_path):
    path = tmp_path / "defaults.yaml"
    path.write_text(
        textwrap.dedent(
            """
            kind: explicit
            switches: [{name: a}, {name: b}, {name: c, group: 1}, {name: t, role: transit}]
            hosts:
              - {name: ha2, switch: a, port: 7}
              - {name: ha1, switch: a, port: 3}
              - {name: hb, switch: b, port: 1}
              - {name: hc, switch: c, port: 1}
            links:
              - {a: a, a_port: 1, b: t, b_port: 1}
              - {a: b, a_port: 2, b: t, b_port: 2}
              - {a: c, a_port: 2, b: t, b_port: 3}
            """
        )
    )
    f = load_topology(path)
    assert f.name == "explicit-4sw"
    assert [(sw.dpid, sw.group, sw.index, sw.role) for sw in f.switches] == [
        (1, 0, 0, "access"),
        (2, 0, 1, "access"),
        (3, 1, 0, "access"),
        (4, 0, 2, "transit"),
    ]
    assert {h.name: h.index for h in f.hosts} == {"ha1": 0, "ha2": 1, "hb": 0, "hc": 0}
    assert [h.name for h in f.hosts_on("a")] == ["ha1", "ha2"]


# ---------------------------------------------------------------------------
# malformed files
# ---------------------------------------------------------------------------
DF = "kind: dragonfly\na: 4\np: 2\nh: 2\n"
FB = "kind: flattened_butterfly\ndims: [4, 4]\nhosts_per_switch: 4\n"
RING = (TOPOLOGIES / "explicit-ring4.yaml").read_text()


def ring(old: str, new: str) -> str:
    assert old in RING, old
    return RING.replace(old, new, 1)


# (id, yaml text, exception type, field (None: none), fragment the message must contain)
MALFORMED = [
    ("yaml-syntax", "kind: dragonfly\na: [4, 2\np: 2\n", ConfigError, None, "line 3, column"),
    ("yaml-tab", "kind: dragonfly\n\ta: 4\n", ConfigError, None, "tabs"),
    ("yaml-duplicate-key", DF + "h: 3\n", ConfigError, None, "duplicate key 'h'"),
    ("empty-file", "", ConfigError, None, "empty"),
    ("top-level-list", "- kind: dragonfly\n- a: 4\n", ConfigError, None, "mapping at the top level"),
    ("top-level-scalar", "dragonfly\n", ConfigError, None, "got string 'dragonfly'"),
    ("missing-kind", "a: 4\np: 2\nh: 2\n", ConfigError, "kind", "missing required key 'kind'"),
    ("unknown-kind", "kind: torus\n", ConfigError, "kind", "expected one of dragonfly, flattened_butterfly"),
    ("kind-typo", "kind: fat-tree\nk: 4\n", ConfigError, "kind", "did you mean 'fat_tree'?"),
    ("kind-not-string", "kind: [dragonfly]\n", ConfigError, "kind", "expected a string"),
    ("unknown-key-typo", "kind: flattened_butterfly\ndims: [4, 4]\nhosts_per_swich: 4\n", ConfigError,
     "hosts_per_swich", "unknown key 'hosts_per_swich'; did you mean 'hosts_per_switch'?"),
    ("key-of-other-kind", DF + "dims: [4, 4]\n", ConfigError, "dims", "belongs to kind flattened_butterfly"),
    ("unknown-key-no-match", DF + "colour: blue\n", ConfigError, "colour", "valid keys: kind, name"),
    ("missing-required", "kind: dragonfly\na: 4\np: 2\n", ConfigError, "h", "missing required key 'h'"),
    ("missing-fb-hosts", "kind: flattened_butterfly\ndims: [4, 4]\n", ConfigError, "hosts_per_switch", "missing"),
    ("bool-not-int", "kind: dragonfly\na: true\np: 2\nh: 2\n", ConfigError, "a", "expected an integer, got boolean true"),
    ("quoted-int", "kind: dragonfly\na: '4'\np: 2\nh: 2\n", ConfigError, "a", "remove the quotes"),
    ("float-k", "kind: fat_tree\nk: 4.0\n", ConfigError, "k", "expected an integer, got float 4.0"),
    ("null-g", DF + "g:\n", ConfigError, "g", "got null"),
    ("dims-not-list", "kind: flattened_butterfly\ndims: 4\nhosts_per_switch: 4\n", ConfigError, "dims",
     "expected a list of integers"),
    ("dims-item-type", "kind: flattened_butterfly\ndims: [4, four]\nhosts_per_switch: 4\n", ConfigError, "dims[1]",
     "expected an integer, got string 'four'"),
    ("dims-with-1", "kind: flattened_butterfly\ndims: [4, 1]\nhosts_per_switch: 4\n", TopologyError, "dims[1]",
     ">= 2"),
    ("dims-empty", "kind: flattened_butterfly\ndims: []\nhosts_per_switch: 4\n", TopologyError, "dims", "non-empty"),
    ("g-too-big", DF + "g: 10\n", TopologyError, "g", "at most a*h+1 = 9"),
    ("p-zero", "kind: dragonfly\na: 4\np: 0\nh: 2\n", TopologyError, "p", ">= 1"),
    ("k-odd", "kind: fat_tree\nk: 5\n", TopologyError, "k", "even"),
    ("xor-not-applicable", "kind: dragonfly\na: 3\np: 1\nh: 3\narrangement: xor\n", TopologyError, "arrangement",
     "palmtree"),
    ("arrangement-unknown", DF + "arrangement: spiral\n", TopologyError, "arrangement", "spiral"),
    ("arrangement-type", DF + "arrangement: 3\n", ConfigError, "arrangement", "expected a string"),
    ("name-not-string", DF + "name: 42\n", ConfigError, "name", "quote it"),
    ("description-not-string", DF + "description: [a, b]\n", ConfigError, "description", "expected a string"),
    ("too-large", "kind: dragonfly\na: 160\np: 80\nh: 80\n", TopologyError, None, "limit"),
    ("addressing-not-mapping", DF + "addressing: compact\n", ConfigError, "addressing", "expected a mapping"),
    ("addressing-unknown-key", DF + "addressing:\n  mdoe: flat\n", ConfigError, "addressing.mdoe",
     "did you mean 'mode'?"),
    ("addressing-mode", DF + "addressing:\n  mode: per_group\n", ConfigError, "addressing.mode",
     "did you mean 'per-group'?"),
    ("width-zero", DF + "addressing:\n  widths: {group: 18, switch: 20, host: 0}\n", ConfigError,
     "addressing.widths.host", "1..46"),
    ("width-too-big", DF + "addressing:\n  widths: {host: 47}\n", ConfigError, "addressing.widths.host", "1..46"),
    ("width-bool", DF + "addressing:\n  widths: {host: yes}\n", ConfigError, "addressing.widths.host", "boolean"),
    ("width-key-typo", DF + "addressing:\n  widths: {hosts: 8}\n", ConfigError, "addressing.widths.hosts",
     "did you mean 'host'?"),
    ("widths-sum", DF + "addressing:\n  widths: {group: 20, switch: 20, host: 8}\n", ConfigError,
     "addressing.widths", "48 bits"),
    ("width-dim-on-dragonfly", DF + "addressing:\n  widths: {dim0: 4}\n", ConfigError, "addressing.widths.dim0",
     "flattened_butterfly"),
    ("width-dim-out-of-range", FB + "addressing:\n  widths: {dim2: 4}\n", ConfigError, "addressing.widths.dim2",
     "2 dimensions"),
    ("switches-not-list", "kind: explicit\nswitches: {name: s1}\nhosts: []\nlinks: []\n", ConfigError, "switches",
     "expected a list"),
    ("switch-not-mapping", ring("- {name: s2, dpid: 2, group: 0, index: 1}", "- s2"), ConfigError, "switches[1]",
     "expected a mapping"),
    ("switch-dpid-type", ring("dpid: 3,", "dpid: '0x3',"), ConfigError, "switches[2].dpid", "expected an integer"),
    ("switch-name-int", ring("{name: s1, dpid: 1", "{name: 1, dpid: 1"), ConfigError, "switches[0].name",
     "quote it"),
    ("switch-missing-name", ring("{name: s4, dpid: 4,", "{dpid: 4,"), ConfigError, "switches[3].name",
     "missing required key 'name'"),
    ("host-port-bool", ring("{name: h2, switch: s2, port: 1}", "{name: h2, switch: s2, port: true}"), ConfigError,
     "hosts[1].port", "boolean"),
    ("link-missing-key", ring("{a: s3, a_port: 2, b: s4, b_port: 3}", "{a: s3, a_port: 2, b: s4}"), ConfigError,
     "links[2].b_port", "missing required key 'b_port'"),
    ("link-key-typo", ring("{a: s1, a_port: 2,", "{a: s1, a_prot: 2,"), ConfigError, "links[0].a_prot",
     "did you mean 'a_port'?"),
    ("explicit-missing-links", "kind: explicit\nswitches: [{name: s1}]\nhosts: []\n", ConfigError, "links",
     "missing required key 'links'"),
]


@pytest.mark.parametrize("text,exc,field,fragment", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_file(tmp_path, text, exc, field, fragment):
    path = tmp_path / "topo.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_topology(path)
    err = info.value
    assert type(err) is exc, f"{type(err).__name__}: {err}"
    assert err.source == str(path)
    assert err.field == field
    message = str(err)
    assert message.startswith(f"{path}: ")
    if field is not None:
        assert f"{path}: {field}: " in message
    assert fragment in message
    assert err.exit_code == 2
    assert "Traceback" not in message


def test_there_are_at_least_20_malformed_cases():
    assert len(MALFORMED) >= 20


def test_missing_file_suggests_a_neighbour(tmp_path):
    (tmp_path / "dragonfly-a4-p2-h2.yaml").write_text(DF)
    missing = tmp_path / "dragonfly-a4-p2-h3.yaml"
    with pytest.raises(ConfigError) as info:
        load_topology(missing)
    assert type(info.value) is ConfigError and info.value.exit_code == 2
    assert str(info.value).startswith(f"{missing}: no such file")
    assert "dragonfly-a4-p2-h2.yaml" in str(info.value)


def test_missing_file_plain(tmp_path):
    missing = tmp_path / "nope" / "x.yaml"
    with pytest.raises(ConfigError, match="no such file") as info:
        load_topology(str(missing))
    assert info.value.source == str(missing) and info.value.field is None


def test_directory_and_binary_files(tmp_path):
    with pytest.raises(ConfigError, match="is a directory") as info:
        load_topology(tmp_path)
    assert info.value.source == str(tmp_path)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kind: dragonfly\n\xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        load_topology(binary)
    assert info.value.exit_code == 2 and str(binary) in str(info.value)


def test_unknown_kind_lists_every_kind(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text("kind: torus\n")
    with pytest.raises(ConfigError) as info:
        load_topology(path)
    assert all(k in str(info.value) for k in KINDS)


# ---------------------------------------------------------------------------
# explicit fabrics: semantic errors, through the loader (source filled in)
# ---------------------------------------------------------------------------
SEMANTIC = [
    ("unknown-switch-in-link", ring("{a: s4, a_port: 2, b: s1, b_port: 3}", "{a: s4, a_port: 2, b: s9, b_port: 3}"),
     "links[3].b", "unknown switch 's9'"),
    ("link-to-a-host", ring("{a: s4, a_port: 2, b: s1, b_port: 3}", "{a: s4, a_port: 2, b: h1, b_port: 3}"),
     "links[3].b", "hosts are attached"),
    ("unknown-switch-for-host", ring("{name: h3, switch: s3,", "{name: h3, switch: s7,"), "hosts[2].switch",
     "unknown switch 's7'"),
    ("port-used-twice-links", ring("{a: s1, a_port: 4, b: s3, b_port: 4}", "{a: s1, a_port: 2, b: s3, b_port: 4}"),
     "links[4].a_port", "port 2 of 's1' is used twice"),
    ("port-used-by-host", ring("{a: s2, a_port: 2, b: s3, b_port: 3}", "{a: s2, a_port: 2, b: s3, b_port: 1}"),
     "links[1].b_port", "host 'h3'"),
    ("port-used-twice-hosts", ring("{name: h2, switch: s2, port: 1}", "{name: h2, switch: s1, port: 1}"),
     "hosts[1].port", "used twice"),
    ("port-zero", ring("{name: h2, switch: s2, port: 1}", "{name: h2, switch: s2, port: 0}"), "hosts[1].port",
     "in 1..0xffffff00"),
    ("self-link", ring("{a: s1, a_port: 4, b: s3, b_port: 4}", "{a: s1, a_port: 4, b: s1, b_port: 5}"),
     "links[4].b", "to itself"),
    ("duplicate-switch-name", ring("{name: s4, dpid: 4,", "{name: s2, dpid: 4,"), "switches[3].name",
     "duplicate switch name 's2'"),
    ("duplicate-host-name", ring("{name: h4,", "{name: h1,"), "hosts[3].name", "duplicate host name 'h1'"),
    ("host-named-like-switch", ring("{name: h4,", "{name: s1,"), "hosts[3].name", "already the name of switches[0]"),
    ("duplicate-dpid", ring("dpid: 4,", "dpid: 2,"), "switches[3].dpid", "dpid 2 of 's4' is already used by 's2'"),
    ("default-dpid-collides", ring("{name: s1, dpid: 1,", "{name: s1, dpid: 2,").replace("name: s2, dpid: 2, ", "name: s2, "),
     "switches[1].dpid", "default dpid"),
    ("dpid-zero", ring("dpid: 1,", "dpid: 0,"), "switches[0].dpid", "in 1..0xffffffffffffffff"),
    ("group-index-twice", ring("{name: s4, dpid: 4, group: 1, index: 1}", "{name: s4, dpid: 4, group: 1, index: 0}"),
     "switches[3].index", "group 1 index 0 of 's4' is already taken by 's3'"),
    ("negative-group", ring("group: 1, index: 1}", "group: -1, index: 1}"), "switches[3].group", ">= 0"),
    ("bad-role", ring("group: 1, index: 1}", "group: 1, index: 1, role: core}"), "switches[3].role",
     "access, transit"),
    ("host-on-transit", ring("group: 1, index: 1}", "group: 1, index: 1, role: transit}"), "hosts[3].switch",
     "role 'transit'"),
    ("not-connected", ring("  - {a: s2, a_port: 2, b: s3, b_port: 3}\n", "").replace(
        "  - {a: s3, a_port: 2, b: s4, b_port: 3}\n", "").replace("  - {a: s4, a_port: 2, b: s1, b_port: 3}\n", "").replace(
        "  - {a: s1, a_port: 4, b: s3, b_port: 4}   # chord\n", ""),
     "links", "2 switch(es) unreachable from 's1': 's3', 's4'"),
    ("no-hosts", "kind: explicit\nswitches: [{name: s1}]\nhosts: []\nlinks: []\n", "hosts", "at least one host"),
    ("no-switches", "kind: explicit\nswitches: []\nhosts: []\nlinks: []\n", "switches", "at least one switch"),
    ("name-with-space", ring("{name: h4,", "{name: 'h 4',"), "hosts[3].name", "whitespace"),
]


@pytest.mark.parametrize("text,field,fragment", [s[1:] for s in SEMANTIC], ids=[s[0] for s in SEMANTIC])
def test_explicit_semantic_error(tmp_path, text, field, fragment):
    path = tmp_path / "explicit.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    err = info.value
    assert err.source == str(path) and err.field == field
    assert str(err).startswith(f"{path}: {field}: ")
    assert fragment in str(err)
    assert err.exit_code == 2


# ---------------------------------------------------------------------------
# explicit_fabric called directly
# ---------------------------------------------------------------------------
def _line(n: int, hosts: bool = True):
    switches = [{"name": f"s{i}"} for i in range(n)]
    host_list = [{"name": f"h{i}", "switch": f"s{i}", "port": 1} for i in range(n)] if hosts else []
    links = [{"a": f"s{i}", "a_port": 2, "b": f"s{i + 1}", "b_port": 3} for i in range(n - 1)]
    return switches, host_list, links


def test_explicit_direct_basic():
    sw, hosts, links = _line(3)
    f = explicit_fabric(sw, hosts, links, name="line")
    assert f.kind == "explicit" and f.name == "line"
    assert [s.dpid for s in f.switches] == [1, 2, 3]
    assert [s.index for s in f.switches] == [0, 1, 2]
    assert all(s.role == "access" and s.coords == (0, s.index) for s in f.switches)
    assert all(link.kind == "fabric" for link in f.links)
    assert f.peer("s1", 2) == Peer("s2", 3, "fabric")
    assert f.params["groups"] == 1


def test_explicit_direct_single_switch_no_links():
    f = explicit_fabric([{"name": "only"}], [{"name": "h", "switch": "only", "port": 5}], [])
    assert len(f.switches) == 1 and f.hosts[0].index == 0


def test_explicit_parallel_links_allowed():
    sw, hosts, links = _line(2)
    links.append({"a": "s0", "a_port": 4, "b": "s1", "b_port": 4})
    f = explicit_fabric(sw, hosts, links)
    assert len(f.links) == 2


def test_explicit_not_connected_shows_at_most_five():
    sw, hosts, _ = _line(9)
    with pytest.raises(TopologyError) as info:
        explicit_fabric(sw, hosts, [])
    err = info.value
    assert err.field == "links" and err.source is None
    assert "8 switch(es) unreachable from 's0': 's1', 's2', 's3', 's4', 's5' and 3 more" in str(err)
    assert "'s6'" not in str(err)


def test_explicit_mixed_default_index_collision():
    with pytest.raises(TopologyError) as info:
        explicit_fabric(
            [{"name": "a", "index": 1}, {"name": "b"}],
            [{"name": "h", "switch": "a", "port": 1}],
            [{"a": "a", "a_port": 2, "b": "b", "b_port": 2}],
        )
    assert info.value.field == "switches[1]" and "order of appearance" in str(info.value)


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda s, h, l: s.append("s9"), "switches[3]"),
        (lambda s, h, l: s[0].update(colour="red"), "switches[0].colour"),
        (lambda s, h, l: s[0].update(dpid=True), "switches[0].dpid"),
        (lambda s, h, l: h[0].pop("port"), "hosts[0].port"),
        (lambda s, h, l: l[0].update(a_port="2"), "links[0].a_port"),
    ],
)
def test_explicit_direct_type_errors(mutate, field):
    sw, hosts, links = _line(3)
    mutate(sw, hosts, links)
    with pytest.raises(TopologyError) as info:
        explicit_fabric(sw, hosts, links)
    assert info.value.field == field


def test_explicit_rejects_non_lists():
    with pytest.raises(TopologyError) as info:
        explicit_fabric("s1", [], [])
    assert info.value.field == "switches"
