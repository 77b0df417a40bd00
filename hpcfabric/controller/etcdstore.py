"""A small etcd v3 client for the coordination store: endpoint failover over etcd3gw (the HTTP gateway).

etcd3gw speaks JSON over HTTP (``requests``), so under eventlet's monkey
patching a request is a green socket like the OpenFlow channels -- no grpc
threads (docs/ha.md says why this client). This wrapper adds what the HA code
needs and etcd3gw leaves to the caller: several endpoints (the first one that
answers is kept until it fails), revisions in range replies, and a
transaction built from compare / put / delete tuples. With ``[ha] etcd_*``
(:class:`hpcfabric.config.security.EtcdSecurity`) it speaks HTTPS, presents a
client certificate and authenticates as an etcd user: the token etcd hands
out (``/v3/auth/authenticate``) goes with every request, and is fetched again
when etcd no longer knows it (a restarted member forgets simple tokens).
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


def brief(detail: str) -> str:
    """An etcd3gw error's text, short: a TLS failure's reason, else etcd's message."""
    if "SSLError" in detail or "[SSL" in detail:
        k = detail.find("[SSL")
        if k >= 0:
            return "TLS: " + detail[k:].split(" (_ssl", 1)[0].split("')", 1)[0][:160]
        inner = detail.rsplit("SSLError(", 1)[-1]
        return "TLS: " + inner.split(" (_ssl", 1)[0].replace("'", "")[:160] + " (the server refused our certificate?)"
    if '"message":"' in detail:
        return detail.split('"message":"', 1)[1].split('"', 1)[0][:160]
    return detail[:160]


class EtcdUnavailable(OSError):
    """No endpoint answered (down, blackholed, or without quorum): the caller keeps its last view."""


#: etcd's answers to a request whose token it does not know (expired, or issued before a restart)
TOKEN_ERRORS = ("invalid auth token", "user name is empty", "auth token is not provided")


class EtcdStore:
    """The etcd cluster at ``endpoints`` (``http(s)://host:port`` strings), ``timeout`` seconds per request;
    ``security``: CA, client certificate and user (:class:`hpcfabric.config.security.EtcdSecurity`)."""

    def __init__(self, endpoints: tuple[str, ...], timeout: float, security: Any = None) -> None:
        from etcd3gw.client import Etcd3Client

        self.endpoints = endpoints
        self.timeout = timeout
        self.security = security
        self.clients = []
        sec = security
        for ep in endpoints:
            scheme, _, rest = ep.partition("://")
            host, _, port = rest.rstrip("/").rpartition(":")
            self.clients.append(Etcd3Client(host=host.strip("[]"), port=int(port), protocol=scheme,
                                            ca_cert=sec.ca if sec else None, cert_cert=sec.cert if sec else None,
                                            cert_key=sec.key if sec else None, timeout=timeout, api_path="/v3/"))
        # the CA per request: a session's own ``verify`` loses to REQUESTS_CA_BUNDLE in the environment
        self.tls_kwargs = {"verify": sec.ca} if sec is not None and sec.ca else {}
        self.authenticated: set[int] = set()  # endpoints whose session carries a token etcd knows
        self.authentications = 0
        self.current = 0
        self.requests = 0
        self.failovers = 0

    @classmethod
    def for_config(cls, config: Any, timeout: float) -> "EtcdStore":
        """The store a controller config's ``[ha]`` names (endpoints, TLS files, user)."""
        return cls(config.ha_endpoints, timeout, getattr(config, "ha_etcd", None))

    # ------------------------------------------------------------ transport
    def authenticate(self, i: int) -> None:
        """Log in as ``[ha] etcd_user`` on endpoint ``i``: its token goes with every later request there."""
        cl = self.clients[i]
        cl.session.headers.pop("Authorization", None)
        out = cl.post(cl.get_url("auth/authenticate"), **self.tls_kwargs,
                      data=json.dumps({"name": self.security.user, "password": self.security.password}))
        token = out.get("token") if isinstance(out, dict) else None
        if not token:
            raise ValueError("etcd sent no auth token")
        cl.session.headers["Authorization"] = token
        self.authenticated.add(i)
        self.authentications += 1

    def post(self, i: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request on endpoint ``i`` (authenticated first with a user; once more if etcd forgot the token)."""
        from etcd3gw import exceptions as ex

        cl = self.clients[i]
        user = self.security is not None and self.security.user
        for attempt in (0, 1):
            if user and i not in self.authenticated:
                self.authenticate(i)
            try:
                return cl.post(cl.get_url(path), data=json.dumps(body), **self.tls_kwargs)
            except ex.Etcd3Exception as err:
                if user and attempt == 0 and any(t in str(err.detail_text or "") for t in TOKEN_ERRORS):
                    self.authenticated.discard(i)
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` on the current endpoint, failing over to the others in turn."""
        import requests
        from etcd3gw import exceptions as ex

        errors = []
        for k in range(len(self.clients)):
            i = (self.current + k) % len(self.clients)
            self.requests += 1
            try:
                out = self.post(i, path, body)
            except (requests.RequestException, ValueError) as err:  # reset mid-reply, not JSON, ...
                errors.append(f"{self.endpoints[i]}: {type(err).__name__}")
                continue
            except ex.Etcd3Exception as err:  # unreachable, timed out, 'etcdserver: no leader', ...
                detail = str(err.detail_text or type(err).__name__)
                if "lease not found" in detail:
                    return {"lease_not_found": True}
                errors.append(f"{self.endpoints[i]}: {brief(detail)}")
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
        return self.post(endpoint, "maintenance/status", {})
