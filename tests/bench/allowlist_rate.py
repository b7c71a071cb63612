#!/usr/bin/env python3
"""CONNECT + GET + close rate through an allowlist route against the same
through a fixed-upstream route (issue 13 "Benchmarks": within 5%). One
sluice, one plain fakeup (198.18.115.2:8080) known under two names:
up.alw.test, a fixed route's upstream (connect enabled), and
pypi.alw.test, an allowlist route's host. Each operation opens a
connection to sluice, CONNECTs, sends one GET through the tunnel, reads
the response and closes; THREADS clients in a closed loop for SECONDS per
round, rounds alternating between the two routes. Prints ops/s per round
and the median ratio. Not a test: nothing here fails. As root, from the
repository root, with build/plain built:
  SLUICE_BIN=build/plain/proxy/sluice SLUICE_TOOLS=build/plain/tests \\
      python3 tests/bench/allowlist_rate.py [SECONDS] [ROUNDS] [THREADS]
"""

import os
import socket
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration", "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.netns import entered  # noqa: E402


def one(host, tok):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    try:
        s.sendall(("CONNECT %s:8080 HTTP/1.1\r\nHost: %s:8080\r\n"
                   "Proxy-Authorization: Bearer %s\r\n\r\n"
                   % (host, host, tok)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                return False
            buf += d
        if not buf.startswith(b"HTTP/1.1 200"):
            return False
        s.sendall(("GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                   "\r\n" % host).encode())
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        return got.startswith(b"HTTP/1.1 200")
    finally:
        s.close()


def round_rate(ns, host, tok, seconds, threads):
    count = [0] * threads
    errors = [0] * threads
    stop = time.monotonic() + seconds

    def loop(i):
        with entered(ns):
            while time.monotonic() < stop:
                try:
                    if one(host, tok):
                        count[i] += 1
                    else:
                        errors[i] += 1
                except OSError:
                    errors[i] += 1
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(count) / seconds, sum(errors)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    st.base.require_root()
    st.base.install_handlers()
    h = st.Harness("allowbench", 115, up_hosts=(2, 53))
    try:
        t = h.topo
        h.fakeup("up", ["%s:8080" % t.v4(2)])
        h.dns_server({"up.alw.test": {"A": [t.v4(2)]},
                      "pypi.alw.test": {"A": [t.v4(2)]}})
        routes = [
            pol.route("model", [], "http://up.alw.test:8080/",
                      allow_plaintext=True, methods=["GET"],
                      prefixes=["/"]),
            {"audience": "pkgs", "hosts": ["pypi.alw.test"],
             "upstream": {"mode": "as_requested", "ports": [8080]}},
        ]
        doc = h.policy("bench", [pol.forward("fwd", "127.0.0.1:3128")],
                       routes, limits={"max_connections": 4096})
        doc["audit"]["fsync"] = "never"
        h.sluice("bench", doc)
        toks = {"up.alw.test": h.token("model"),
                "pypi.alw.test": h.token("pkgs")}
        rates = {k: [] for k in toks}
        for r in range(rounds):
            for host in (("up.alw.test", "pypi.alw.test") if r % 2 == 0
                         else ("pypi.alw.test", "up.alw.test")):
                rate, err = round_rate(h.sbx, host, toks[host], seconds,
                                       threads)
                rates[host].append(rate)
                print("round %d %-14s %8.1f ops/s  errors %d" % (
                    r, host, rate, err), flush=True)
        fixed = statistics.median(rates["up.alw.test"])
        allow = statistics.median(rates["pypi.alw.test"])
        print("median: fixed %.1f ops/s, allowlist %.1f ops/s, "
              "allowlist/fixed %.3f" % (fixed, allow, allow / fixed))
    finally:
        for p in h.close():
            print(p, file=sys.stderr)


if __name__ == "__main__":
    main()
