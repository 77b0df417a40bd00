"""Andújar et al. (2022): network and cluster power with on/off links and low-power idle.

Eqs. 1-7 with the Table 2 constants (``w_sport`` 0.1, ``w_ports`` 0.816,
``Omega_port`` 5 W, ``Omega_nodes`` 300 W, ``w_snodes`` 0.5), fed by the
fraction of time each port is on (``U_port``) and each node busy (``U_cpu``):
:class:`OnOffModel`. Eq. 4 is implemented as the sum it defines
(``Omega_nodes * sum(w_snodes + (1 - w_snodes) U_cpu)``); the paper's
simplified last line drops the ``N_nodes`` factor of the first term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from hpcfabric.errors import ConfigError
from hpcfabric.topology.model import Fabric


@dataclass(frozen=True)
class OnOffModel:
    """Eqs. 1-7 of Andújar et al. with their Table 2 constants as defaults."""

    w_sport: float = 0.1  # fraction of a port's power while asleep
    w_ports: float = 0.816  # share of switch power that depends on ports
    omega_port: float = 5.0  # switch power per port (W)
    omega_nodes: float = 300.0  # max node power (W)
    w_snodes: float = 0.5  # idle node fraction

    def __post_init__(self) -> None:
        for name in ("w_sport", "w_ports", "w_snodes"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"must be a fraction in [0, 1], got {v}", field=name)
        for name in ("omega_port", "omega_nodes"):
            if getattr(self, name) < 0:
                raise ConfigError("must be >= 0", field=name)

    @staticmethod
    def _fractions(values: Iterable[float], what: str) -> list[float]:
        out = [float(u) for u in values]
        for u in out:
            if not 0.0 <= u <= 1.0:
                raise ConfigError(f"{what} must be fractions in [0, 1], got {u}", field=what)
        return out

    def ports_fraction(self, u_ports: Sequence[float], n_ports: int | None = None) -> float:
        """Eq. 1: ``W_ports = w_sport + (1 - w_sport) * mean(U_port)`` over the switch's
        ``n_ports`` ports (missing ports count as always off)."""
        u = self._fractions(u_ports, "U_port")
        n = n_ports if n_ports is not None else len(u)
        if n < len(u) or n < 1:
            raise ConfigError(f"a switch of {n} ports cannot have {len(u)} utilisations", field="N_ports")
        return self.w_sport + (1 - self.w_sport) * sum(u) / n

    def switch_power(self, u_ports: Sequence[float], n_ports: int | None = None) -> float:
        """Eq. 2: ``N_ports * Omega_port * ((1 - w_ports) + w_ports * W_ports)`` (W)."""
        n = n_ports if n_ports is not None else len(u_ports)
        return n * self.omega_port * ((1 - self.w_ports) + self.w_ports * self.ports_fraction(u_ports, n))

    def network_power(self, switches: Iterable[Sequence[float]], n_ports: int | None = None) -> float:
        """Eq. 3: sum of Eq. 2 over the switches (W)."""
        return sum(self.switch_power(u, n_ports) for u in switches)

    def nodes_power(self, u_cpu: Sequence[float]) -> float:
        """Eq. 4: ``Omega_nodes * sum(w_snodes + (1 - w_snodes) U_cpu)`` (W)."""
        u = self._fractions(u_cpu, "U_cpu")
        return self.omega_nodes * sum(self.w_snodes + (1 - self.w_snodes) * x for x in u)

    def evaluate(
        self,
        switches: Iterable[Sequence[float]],
        u_cpu: Sequence[float],
        t_exec: float,
        n_ports: int | None = None,
    ) -> dict[str, float]:
        """Eqs. 3-7: network, node and cluster power (W) and energies (J) over ``t_exec`` s."""
        if t_exec < 0:
            raise ConfigError(f"execution time must be >= 0, got {t_exec}", field="T_exec")
        w_net = self.network_power(switches, n_ports)
        w_nodes = self.nodes_power(u_cpu)
        w_cluster = w_net + w_nodes  # Eq. 5
        return {
            "W_net": w_net,
            "W_nodes": w_nodes,
            "W_cluster": w_cluster,
            "E_net": w_net * t_exec,  # Eq. 6
            "E_cluster": w_cluster * t_exec,  # Eq. 7
        }


def onoff_fabric(
    fabric: Fabric,
    model: OnOffModel | None = None,
    *,
    utilisation: float | Mapping[tuple[str, int], float] = 1.0,
    cpu: float = 1.0,
    t_exec: float = 1.0,
    n_ports: int | None = None,
) -> dict[str, Any]:
    """The on/off model on a fabric: ``utilisation`` is one fraction for every
    port in use, or a ``{(switch, port): U}`` mapping (ports not named: 0, off);
    unused ports (up to ``n_ports``, default each switch's ports in use) are off."""
    m = model or OnOffModel()
    per_switch = []
    for sw in fabric.switches:
        ports = fabric.ports(sw.name)
        if isinstance(utilisation, Mapping):
            u = [float(utilisation.get((sw.name, p), 0.0)) for p in ports]
        else:
            u = [float(utilisation)] * len(ports)
        per_switch.append((u, n_ports or len(ports)))
    w_net = sum(m.switch_power(u, n) for u, n in per_switch)
    res = m.evaluate([], [cpu] * len(fabric.hosts), t_exec)
    w_cluster = w_net + res["W_nodes"]
    return {
        "fabric": fabric.name,
        "switches": len(fabric.switches),
        "nodes": len(fabric.hosts),
        "W_net": round(w_net, 3),
        "W_nodes": round(res["W_nodes"], 3),
        "W_cluster": round(w_cluster, 3),
        "E_net": round(w_net * t_exec, 3),
        "E_cluster": round(w_cluster * t_exec, 3),
    }
