"""docs/policy.schema.json against the real loader: the schema is a valid
draft 2020-12 schema; every policy here and in examples/ validates, and so
does the normalized policy `sluice check` prints for it; documents the
loader refuses for a reason a schema can express are refused by the
schema too.

No network: only `sluice check`."""

import copy
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import jsonschema  # noqa: E402  (Debian python3-jsonschema)

from sluicetest.base import ENV  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCHEMA = os.path.join(TOP, "docs", "policy.schema.json")


class TestPolicySchema(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(SCHEMA) as f:
            cls.schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(cls.schema)
        cls.v = jsonschema.Draft202012Validator(cls.schema)
        cls.tmp = tempfile.mkdtemp(prefix="sluice-schema-")
        cls.secret = cls.write("k.key", os.urandom(48).hex().encode())
        cls.header = cls.write("h.key", b"sk-real-key")
        cls.revoked = cls.write("revoked.txt", b"# none\n")

    @classmethod
    def tearDownClass(cls):
        for n in os.listdir(cls.tmp):
            os.unlink(os.path.join(cls.tmp, n))
        os.rmdir(cls.tmp)

    @classmethod
    def write(cls, name, data):
        p = os.path.join(cls.tmp, name)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o600)
        return p

    def minimal(self):
        return {
            "listeners": [{"type": "forward", "listen": "127.0.0.1:808"}],
            "tokens": {"keys": [{"alg": "HS256", "secret_file":
                                 self.secret}]},
            "routes": [{"audience": "model",
                        "upstream": {"url": "https://api.example.com/v1"}}],
            "netpolicy": {"mode": "off"},
        }

    def full(self):
        return {
            "user": "nobody",
            "listeners": [
                {"type": "forward", "listen": "127.0.0.1:808",
                 "name": "fwd"},
                {"type": "reverse", "listen": "[::1]:80", "name": "rev",
                 "route": "model"},
                {"type": "intercept", "listen": "127.0.0.1:443",
                 "name": "ic", "host": "model.test"},
                {"type": "intercept", "listen": "127.0.0.1:81",
                 "name": "ic80", "host": "api.example.com", "port": 80},
                {"type": "transparent", "listen": "127.0.0.1:843",
                 "name": "tp"}],
            "tokens": {"issuer": "cp", "leeway_s": 10, "max_ttl_s": 900,
                       "keys": [{"alg": "HS256", "kid": "k1",
                                 "secret_file": self.secret,
                                 "unlink_after_read": False}],
                       "revoked_file": self.revoked},
            "routes": [{
                "audience": "model", "hosts": ["model.test", "198.18.9.9"],
                "methods": ["POST", "GET"],
                "path_prefixes": ["/v1/messages"],
                "max_requests_per_token": 10,
                "connect": {"enabled": True, "intercept": True,
                            "ports": [443, 80]},
                "token_header": "x-api-key",
                "upstream": {
                    "url": "https://api.example.com:8443/base",
                    "ca_file": "/etc/ssl/certs/ca-certificates.crt",
                    "pin_sha256": ["A" * 43 + "="],
                    "allow_private": False, "allow_plaintext": False,
                    "strip_token": True,
                    "headers": [{"name": "x-api-key",
                                 "value_file": self.header}]}}],
            "limits": {"max_header_bytes": 8192, "max_headers": 50,
                       "max_body_bytes": 1048576, "max_connections": 100,
                       "header_timeout_ms": 5000, "idle_timeout_ms": 30000,
                       "connect_timeout_ms": 2000,
                       "upstream_response_timeout_ms": 60000,
                       "drain_timeout_ms": 1000,
                       "per_client_connections": 10,
                       "per_client_refusals_per_s": 5},
            "audit": {"path": "/var/log/sluice/a.jsonl", "fsync": "always",
                      "chain": True, "on_error": "deny"},
            "netpolicy": {"mode": "sidecar", "table": "sl",
                          "allow_loopback": True,
                          "resolvers": ["198.18.0.53"], "log_group": 9,
                          "sandbox_interfaces": ["sbx-*"],
                          "flush_on_exit": False},
            "admin": {"socket": "/run/sluice/admin.sock"},
            "metrics": {"listen": "unix:/run/sluice/metrics.sock"},
            "state_dir": "/var/lib/sluice-test",
            "ready_file": "/run/sluice/ready",
            "intercept": {"ca": "ephemeral",
                          "ca_cert_out": "/run/sluice/ca.pem", "ca_days": 2,
                          "leaf_days": 1, "max_leaves": 100},
        }

    def check(self, doc):
        p = self.write("policy.json", json.dumps(doc).encode())
        return subprocess.run([ENV.bin, "check", "-c", p],
                              capture_output=True, text=True, timeout=30)

    def errors(self, doc):
        return sorted(e.message for e in self.v.iter_errors(doc))

    def allowlist(self):
        doc = self.minimal()
        doc["enforce"] = "report"
        doc["routes"].append({
            "comment": "packages", "audience": "pkgs",
            "hosts": ["pypi.org", "*.pythonhosted.org"],
            "upstream": {"mode": "as_requested", "ports": [443, 80],
                         "allow_private": False}})
        return doc

    def test_policies_and_their_normalized_form(self):
        for name, doc in (("minimal", self.minimal()), ("full", self.full()),
                          ("allowlist", self.allowlist())):
            self.assertEqual(self.errors(doc), [], name)
            p = self.check(doc)
            self.assertEqual(p.returncode, 0, (name, p.stderr))
            norm = json.loads(p.stdout)
            self.assertEqual(self.errors(norm), [], name)

    def test_normalized_output_loads_again(self):
        """`sluice check` accepts what it prints (nulls, sha256), and the
        second print is the first but for the file's hash."""
        for name, doc in (("minimal", self.minimal()), ("full", self.full()),
                          ("allowlist", self.allowlist())):
            p = self.check(doc)
            self.assertEqual(p.returncode, 0, (name, p.stderr))
            first = json.loads(p.stdout)
            p2 = self.check(first)
            self.assertEqual(p2.returncode, 0, (name, p2.stderr))
            second = json.loads(p2.stdout)
            first.pop("sha256")
            second.pop("sha256")
            self.assertEqual(first, second, name)
        doc = self.minimal()
        doc["sha256"] = "abc"
        p = self.check(doc)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("sha256: not 64 lower-case hex digits", p.stderr)
        doc = self.minimal()
        doc["listeners"] = None  # a required value cannot be null
        self.assertEqual(self.check(doc).returncode, 1)

    def test_examples(self):
        """Every example policy shipped in examples/ validates."""
        files = sorted(glob.glob(os.path.join(TOP, "examples", "**",
                                              "*.json"), recursive=True))
        for f in files:
            with open(f) as fh:
                doc = json.load(fh)
            if "listeners" not in doc:
                continue  # not a policy
            self.assertEqual(self.errors(doc), [], f)

    def test_injection_warning(self):
        """Injected credentials with netpolicy off: sluice check warns."""
        doc = self.minimal()
        doc["routes"][0]["upstream"]["headers"] = [
            {"name": "x-api-key", "value_file": self.header}]
        p = self.check(doc)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("injects credentials upstream while netpolicy.mode "
                      "is off", p.stderr)
        self.assertNotIn("sk-real-key", p.stdout + p.stderr)
        doc = self.full()  # sidecar mode, with a header: no such warning
        p = self.check(doc)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("injects credentials", p.stderr)
        self.assertEqual(self.errors(json.loads(p.stdout)), [])

    def test_fd_limit_warning(self):
        """max_connections beyond the descriptor limit: check warns."""
        import resource

        def low():
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        doc = self.minimal()
        p = self.write("policy.json", json.dumps(doc).encode())
        r = subprocess.run([ENV.bin, "check", "-c", p], capture_output=True,
                           text=True, timeout=30, preexec_fn=low)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("limits.max_connections (4096) needs about 8256 file "
                      "descriptors, and the limit here is 1024", r.stderr)
        doc["limits"] = {"max_connections": 400}
        p = self.write("policy.json", json.dumps(doc).encode())
        r = subprocess.run([ENV.bin, "check", "-c", p], capture_output=True,
                           text=True, timeout=30, preexec_fn=low)
        self.assertNotIn("file descriptors", r.stderr)

    def test_refused_by_both(self):
        """Mistakes the loader refuses are refused by the schema too."""
        cases = {
            "unknown key": lambda d: d.update(bogus=1),
            "unknown route key": lambda d: d["routes"][0].update(x=1),
            "bad listener type": lambda d: d["listeners"][0].update(
                type="socks"),
            "reverse without route": lambda d: d["listeners"].append(
                {"type": "reverse", "listen": "127.0.0.1:80"}),
            "intercept without host": lambda d: d["listeners"].append(
                {"type": "intercept", "listen": "127.0.0.1:443"}),
            "host on a forward listener": lambda d: d["listeners"][0]
            .update(host="api.example.com"),
            "port on a transparent listener": lambda d: d["listeners"]
            .append({"type": "transparent", "listen": "127.0.0.1:843",
                     "port": 443}),
            "leeway out of range": lambda d: d["tokens"].update(
                leeway_s=601),
            "no keys": lambda d: d["tokens"].update(keys=[]),
            "HS256 with a public key": lambda d: d["tokens"]["keys"][0]
            .update(public_key_file="/x.pem"),
            "bad fsync": lambda d: d.update(audit={"fsync": "sometimes"}),
            "relative state_dir": lambda d: d.update(state_dir="var/lib"),
            "intercept without the section": lambda d: d.update(
                intercept={"ca": "files"}),
            "max_headers too small": lambda d: d.update(
                limits={"max_headers": 7}),
            "bad mode": lambda d: d.update(netpolicy={"mode": "on"}),
            "string for a number": lambda d: d.update(
                limits={"max_connections": "10"}),
            "bad enforce": lambda d: d.update(enforce="warn"),
            "no workers": lambda d: d.update(workers=0),
            "too many workers": lambda d: d.update(workers=9),
            "workers not a number": lambda d: d.update(workers="2"),
            "bare * host": lambda d: d["routes"][0].update(hosts=["*"]),
            "* inside a host": lambda d: d["routes"][0].update(
                hosts=["a.*.example"]),
            "as_requested with a url": lambda d: d["routes"][0][
                "upstream"].update(mode="as_requested"),
            "ports on a fixed upstream": lambda d: d["routes"][0][
                "upstream"].update(ports=[443]),
            "unknown upstream mode": lambda d: d["routes"][0].update(
                upstream={"mode": "direct"}),
        }
        for name, change in cases.items():
            doc = copy.deepcopy(self.minimal())
            change(doc)
            self.assertNotEqual(self.errors(doc), [], name)
            p = self.check(doc)
            self.assertEqual(p.returncode, 1, (name, p.stdout, p.stderr))


if __name__ == "__main__":
    unittest.main(verbosity=2)
