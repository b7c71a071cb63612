"""Policy files for the tests, with every field that matters set
explicitly (so that the defaults do not decide a test's outcome)."""

import json
import os

DEFAULT_LIMITS = {
    "max_header_bytes": 8192,
    "max_headers": 50,
    "max_body_bytes": 8 * 1024 * 1024,
    "max_connections": 64,
    "header_timeout_ms": 3000,
    "idle_timeout_ms": 10000,
    "connect_timeout_ms": 2000,
    "upstream_response_timeout_ms": 5000,
    "drain_timeout_ms": 3000,
    # Tests refuse many requests a second on purpose; the refusal budget
    # has tests of its own that set it.
    "per_client_refusals_per_s": 0,
}


def write_secret_value(path, value):
    """A secret value file (value_file), mode 0600, root-owned."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)
    return path


def route(audience, hosts, url, ca_file=None, methods=("POST",),
          prefixes=("/v1/messages",), connect=True, pins=(),
          allow_private=False, allow_plaintext=False, headers=(),
          max_requests=1000000):
    """One route; headers is a list of (name, value_file)."""
    up = {
        "url": url,
        "pin_sha256": list(pins),
        "allow_private": allow_private,
        "allow_plaintext": allow_plaintext,
        "headers": [{"name": n, "value_file": f} for n, f in headers],
    }
    if ca_file is not None:
        up["ca_file"] = ca_file
    return {
        "audience": audience,
        "hosts": list(hosts),
        "methods": list(methods),
        "path_prefixes": list(prefixes),
        "max_requests_per_token": max_requests,
        "connect": {"enabled": connect, "intercept": False},
        "upstream": up,
    }


def forward(name, listen):
    return {"name": name, "type": "forward", "listen": listen}


def reverse(name, listen, route_aud):
    return {"name": name, "type": "reverse", "listen": listen,
            "route": route_aud}


def policy(workdir, key_file, listeners, routes, resolvers, limits=None):
    """A whole policy whose state lives under workdir (created here)."""
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    state = os.path.join(workdir, "state")
    os.makedirs(state, mode=0o700, exist_ok=True)
    revoked = os.path.join(workdir, "revoked.txt")
    if not os.path.exists(revoked):
        open(revoked, "w").close()
    lim = dict(DEFAULT_LIMITS)
    lim.update(limits or {})
    return {
        "listeners": listeners,
        "tokens": {
            "leeway_s": 30,
            "max_ttl_s": 3600,
            "keys": [{"kid": "k1", "alg": "HS256", "secret_file": key_file,
                      "unlink_after_read": False}],
            "revoked_file": revoked,
        },
        "routes": routes,
        "limits": lim,
        # SLUICE_TEST_FSYNC=always runs a test file with the two-line,
        # wait-for-durability path (docs/audit.md), for a look by hand.
        "audit": {"path": os.path.join(workdir, "audit.jsonl"),
                  "fsync": os.environ.get("SLUICE_TEST_FSYNC", "never"),
                  "chain": True, "on_error": "deny"},
        "netpolicy": {"mode": "off", "resolvers": list(resolvers)},
        "admin": {"socket": os.path.join(workdir, "admin.sock")},
        "state_dir": state,
        "ready_file": os.path.join(workdir, "ready"),
    }


def write(path, doc):
    """Write atomically (a reload must never read half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
