"""A small etcd v3 client for the coordination store: endpoint failover over etcd3gw (the HTTP gateway).

etcd3gw speaks JSON over HTTP (``requests``), so under eventlet's monkey
patching a request is a green socket like the OpenFlow channels -- no grpc
threads (docs/ha.md says why this client). This wrapper adds what the HA code
needs and etcd3gw leaves to the caller: several endpoints (the first one that
answers is kept until it fails), revisions in range replies, and a
transaction built from compare / put / delete tuples.
"""

from __future__ import annotations

import base64
import json
from typing import Any

#: keys and values on the wire are base64 (the gateway's JSON mapping of bytes)


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def unb64(text: str | None) -> str:
    return base64.b64decode(text or "").decode()


def prefix_end(prefix: str) -> str:
    """The range end that selects every key starting with ``prefix`` (last byte + 1)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw).decode()


class EtcdUnavailable(OSError):
    """No endpoint answered (down, blackholed, or without quorum): the caller keeps its last view."""


class EtcdStore:
    """The etcd cluster at ``endpoints`` (``http://host:port`` strings), ``timeout`` seconds per request."""

    def __init__(self, endpoints: tuple[str, ...], timeout: float) -> None:
        from etcd3gw.client import Etcd3Client

        self.endpoints = endpoints
        self.timeout = timeout
        self.clients = []
        for ep in endpoints:
            scheme, _, rest = ep.partition("://")
            host, _, port = rest.rstrip("/").rpartition(":")
            self.clients.append(Etcd3Client(host=host.strip("[]"), port=int(port), protocol=scheme,
                                            timeout=timeout, api_path="/v3/"))
        self.current = 0
        self.requests = 0
        self.failovers = 0

    # ------------------------------------------------------------ transport
    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` on the current endpoint, failing over to the others in turn."""
        import requests
        from etcd3gw import exceptions as ex

        errors = []
        for k in range(len(self.clients)):
            i = (self.current + k) % len(self.clients)
            cl = self.clients[i]
            self.requests += 1
            try:
                out = cl.post(cl.get_url(path), data=json.dumps(body))
            except (requests.RequestException, ValueError) as err:  # reset mid-reply, not JSON, ...
                errors.append(f"{self.endpoints[i]}: {type(err).__name__}")
                continue
            except ex.Etcd3Exception as err:  # unreachable, timed out, 'etcdserver: no leader', ...
                detail = str(err.detail_text or type(err).__name__)
                if "lease not found" in detail:
                    return {"lease_not_found": True}
                errors.append(f"{self.endpoints[i]}: {detail[:120]}")
                continue
            if i != self.current:
                self.failovers += 1
                self.current = i
            return out
        raise EtcdUnavailable("etcd unreachable: " + "; ".join(errors))

    # ------------------------------------------------------------ operations
    def range_prefix(self, prefix: str) -> tuple[dict[str, dict[str, Any]], int]:
        """Every key under ``prefix`` -> {value, mod_revision, create_revision, lease}; and the store revision."""
        out = self.call("kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        kvs = {}
        for kv in out.get("kvs", []):
            kvs[unb64(kv["key"])] = {"value": unb64(kv.get("value")), "mod_revision": int(kv.get("mod_revision", 0)),
                                     "create_revision": int(kv.get("create_revision", 0)),
                                     "lease": int(kv.get("lease", 0))}
        return kvs, int(out.get("header", {}).get("revision", 0))

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: (id, TTL granted -- etcd raises a TTL below its minimum)."""
        out = self.call("lease/grant", {"TTL": ttl})
        return int(out["ID"]), int(out["TTL"])

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``: its TTL again, or -1 if it has expired (its keys are gone)."""
        out = self.call("lease/keepalive", {"ID": lease})
        if out.get("lease_not_found"):
            return -1
        return int(out.get("result", {}).get("TTL", -1))

    def time_to_live(self, lease: int) -> tuple[int, int]:
        """(remaining TTL, granted TTL) of ``lease``; remaining -1 when it has expired."""
        out = self.call("kv/lease/timetolive", {"ID": lease})
        if out.get("lease_not_found"):
            return -1, 0
        return int(out.get("TTL", 0)), int(out.get("grantedTTL", 0))  # the gateway leaves zero fields out

    def revoke(self, lease: int) -> None:
        self.call("kv/lease/revoke", {"ID": lease})

    def put(self, key: str, value: str, lease: int = 0) -> None:
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = lease
        self.call("kv/put", body)

    def delete(self, key: str) -> None:
        self.call("kv/deleterange", {"key": b64(key)})

    def watch_prefix(self, prefix: str) -> tuple[Any, Any]:
        """etcd's watch on every key under ``prefix`` on the current endpoint: (events iterator, cancel)."""
        return self.clients[self.current].watch_prefix(prefix)

    def txn(self, compare: list[tuple], success: list[tuple], failure: list[tuple] = ()) -> bool:
        """An etcd transaction; ``compare`` items are ``(key, target, value)`` with target ``create`` / ``mod`` /
        ``value`` (equality), ``success`` / ``failure`` items ``("put", key, value, lease)`` or ``("delete", key)``.
        True if the comparisons held (and ``success`` ran)."""
        cmp = []
        for key, target, value in compare:
            item: dict[str, Any] = {"key": b64(key), "result": "EQUAL", "target": target.upper()}
            if target == "create":
                item["create_revision"] = value
            elif target == "mod":
                item["mod_revision"] = value
            else:
                item["value"] = b64(value)
            cmp.append(item)

        def ops(items):
            out = []
            for op in items:
                if op[0] == "put":
                    req: dict[str, Any] = {"key": b64(op[1]), "value": b64(op[2])}
                    if len(op) > 3 and op[3]:
                        req["lease"] = op[3]
                    out.append({"request_put": req})
                else:
                    out.append({"request_delete_range": {"key": b64(op[1])}})
            return out

        out = self.call("kv/txn", {"compare": cmp, "success": ops(success), "failure": ops(failure)})
        return bool(out.get("succeeded", False))

    def status(self, endpoint: int) -> dict[str, Any]:
        """``/maintenance/status`` of one endpoint (no failover): its member id, leader, raft term."""
        cl = self.clients[endpoint]
        return cl.post(cl.get_url("maintenance/status"), data="{}")
