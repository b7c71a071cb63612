#!/usr/bin/env python3
"""The verdict of a soak campaign (tests/soak/run calls it at the end).

Reads what the run left in its output directory: the load generator's
results (load/*.json), the samples of sluice's processes (samples.csv and
run/at-*.csv), the audit log, the output of `sluice audit verify`, sluice's
exit status and stderr. Prints the summary table (also written to
summary.txt, and the figures to summary.json) and exits 1 when any check
fails, 0 when all pass.
"""
import argparse
import csv
import json
import os
import re
import sys

# Any line of a sanitizer: a report ("ERROR: AddressSanitizer", UBSan's
# "runtime error:", "SUMMARY: ...") or LeakSanitizer's own failure.
SAN_RE = re.compile(r"Sanitizer|runtime error:")


def load_result(path):
    """The JSON line soakload printed, or a failed placeholder."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    return json.loads(line)
    except (OSError, ValueError):
        pass
    return {"sent": 0, "ok": 0, "errors": 1, "seconds": 0, "rps": 0,
            "status": {}, "first_error": "no result from the load generator"}


def read_samples(path):
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for r in csv.DictReader(f, fieldnames=["ts", "phase", "role",
                                                   "pid", "rss_kb", "fds"]):
                if r["ts"] == "ts" or r["fds"] is None:
                    continue
                try:
                    r["rss_kb"] = int(r["rss_kb"])
                    r["fds"] = int(r["fds"])
                except ValueError:
                    continue
                rows.append(r)
    except OSError:
        pass
    return rows


def one(rows, role):
    """The (first) row of ROLE in a one-sample file, or None."""
    for r in rows:
        if r["role"] == role:
            return r
    return None


END_OF = {"http.end": "http.request", "connect.end": "connect.tunnel"}


def count_audit(path):
    """Per (event, decision, listener): lines and requests (count)."""
    lines = 0
    kinds = {}
    groups = {}
    statuses = {}
    engine_exits = []
    starts = {}
    bad = 0
    try:
        f = open(path, encoding="utf-8")
    except OSError:
        return None
    with f:
        for raw in f:
            lines += 1
            try:
                e = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            ev = e.get("event", "?")
            kinds[ev] = kinds.get(ev, 0) + 1
            if ev == "engine.exit":
                engine_exits.append(e)
            # fsync "always": a forwarded request's start line waits for
            # its end line (docs/audit.md "Two lines with always"); the
            # pair counts as one request: who from the start, how it
            # went from the end.
            if e.get("phase") == "start":
                starts[e.get("id")] = e
                continue
            if ev in END_OF:
                st = starts.pop(e.get("id"), None)
                if st is None:
                    bad += 1
                    continue
                e = dict(st, **{k: v for k, v in e.items()
                                if k not in ("ts", "seq", "prev", "event")})
                e.pop("phase", None)
                ev = e["event"]
            if ev not in ("http.request", "connect.tunnel"):
                continue
            key = (ev, e.get("decision", "?"), e.get("listener", "?"))
            g = groups.setdefault(key, {"lines": 0, "requests": 0})
            g["lines"] += 1
            g["requests"] += int(e.get("count", 1))
            sk = (ev, e.get("listener", "?"), e.get("decision", "?"),
                  e.get("reason", "?"), e.get("status", "-"))
            statuses[sk] = statuses.get(sk, 0) + int(e.get("count", 1))
    # A start without its end: in flight when sluice stopped, which a
    # drained stop never leaves (the check below reports it).
    for e in starts.values():
        sk = (e.get("event"), e.get("listener", "?"), "started",
              "not ended", "-")
        statuses[sk] = statuses.get(sk, 0) + 1
    return {"lines": lines, "kinds": kinds, "groups": groups,
            "statuses": statuses, "engine_exits": engine_exits,
            "unparsed": bad, "unended": len(starts)}


def mb(kb):
    return "-" if kb is None else "%.1f" % (kb / 1024.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sluice-rc", required=True)
    ap.add_argument("--fsync", required=True)
    ap.add_argument("--asan", type=int, default=0)
    ap.add_argument("--rss-growth-mb", type=float, default=8)
    ap.add_argument("--rss-check", type=int, default=1)
    ap.add_argument("--load-seconds", type=float, default=0)
    a = ap.parse_args()
    out = a.out
    fails = []
    txt = []

    def p(s=""):
        txt.append(s)

    res = {}
    for name in ("fwd", "rev", "tun"):
        w = load_result(os.path.join(out, "load", "warm-%s.json" % name))
        m = load_result(os.path.join(out, "load", "%s.json" % name))
        st = dict(w.get("status", {}))
        for k, v in m.get("status", {}).items():
            st[k] = st.get(k, 0) + v
        res[name] = {"sent": w["sent"] + m["sent"], "ok": w["ok"] + m["ok"],
                     "errors": w["errors"] + m["errors"],
                     "rps": m.get("rps", 0), "seconds": m.get("seconds", 0),
                     "status": st,
                     "first_error": w.get("first_error") or
                     m.get("first_error", "")}
    labels = {"fwd": "forward (keep-alive)", "rev": "reverse (keep-alive)",
              "tun": "tunnels (CONNECT)"}
    total_req = res["fwd"]["sent"] + res["rev"]["sent"]
    kind = "asan+ubsan" if a.asan else "release"
    p("sluice soak: %d requests, %d tunnels, audit.fsync %s, %s build" %
      (total_req, res["tun"]["sent"], a.fsync, kind))
    p()
    p("%-22s %10s %10s %8s %10s" % ("load", "sent", "ok", "errors",
                                    "per s"))
    for name in ("fwd", "rev", "tun"):
        r = res[name]
        p("%-22s %10d %10d %8d %10.0f" % (labels[name], r["sent"], r["ok"],
                                          r["errors"], r["rps"]))
        if r["errors"] or r["ok"] != r["sent"]:
            fails.append("%s: %d of %d failed (first: %s; statuses %s)" %
                         (labels[name], r["sent"] - r["ok"], r["sent"],
                          r["first_error"], json.dumps(r["status"])))
    if a.load_seconds > 0:
        p("main load phase: %.1f s, %.0f requests+tunnels per s overall" %
          (a.load_seconds,
           sum(load_result(os.path.join(out, "load", n + ".json"))["sent"]
               for n in ("fwd", "rev", "tun")) / a.load_seconds))
    p()

    samples = read_samples(os.path.join(out, "samples.csv"))
    at = {k: read_samples(os.path.join(out, "run", "at-%s.csv" % k))
          for k in ("start", "warm", "end")}
    p("%-8s %8s %8s %8s %8s %12s | %9s %8s %7s" %
      ("RSS MB", "start", "warm-up", "peak", "end", "end-warm-up",
       "fds start", "warm-up", "end"))
    figures = {}
    for role in ("parent", "engine"):
        s0 = one(at["start"], role)
        sw = one(at["warm"], role)
        se = one(at["end"], role)
        rs = [r for r in samples if r["role"] == role]
        for extra in (s0, sw, se):
            if extra is not None:
                rs.append(extra)
        peak = max((r["rss_kb"] for r in rs), default=None)
        pids = sorted({r["pid"] for r in rs})
        if sw is None or se is None:
            fails.append("no %s process sampled after warm-up or at the end"
                         % role)
            p("%-8s (not sampled)" % role)
            continue
        growth = (se["rss_kb"] - sw["rss_kb"]) / 1024.0
        figures[role] = {
            "rss_kb_start": s0["rss_kb"] if s0 else None,
            "rss_kb_warm": sw["rss_kb"], "rss_kb_peak": peak,
            "rss_kb_end": se["rss_kb"],
            "fds_start": s0["fds"] if s0 else None, "fds_warm": sw["fds"],
            "fds_end": se["fds"], "pids": pids}
        p("%-8s %8s %8s %8s %8s %+12.1f | %9s %8d %7d" %
          (role, mb(s0["rss_kb"] if s0 else None), mb(sw["rss_kb"]),
           mb(peak), mb(se["rss_kb"]), growth,
           s0["fds"] if s0 else "-", sw["fds"], se["fds"]))
        if len(pids) > 1:
            fails.append("%s pid changed during the run (%s): restarted"
                         % (role, " ".join(pids)))
        if se["fds"] > sw["fds"] + 4:
            fails.append("%s fds grew from %d after warm-up to %d at the end"
                         % (role, sw["fds"], se["fds"]))
        if role == "engine" and growth > a.rss_growth_mb:
            if a.rss_check:
                fails.append("engine RSS grew %.1f MB after warm-up "
                             "(limit %g)" % (growth, a.rss_growth_mb))
            else:
                p("  (engine RSS growth not judged under --asan: its "
                  "quarantine grows; give --rss-growth-mb to judge it)")
    p("samples: %d rows in samples.csv" % len(samples))
    p()

    au = count_audit(os.path.join(out, "audit", "audit.jsonl"))
    if au is None:
        fails.append("no audit log")
        p("audit: no log")
    else:
        p("audit lines: %d (%s)" % (au["lines"], ", ".join(
            "%s %d" % kv for kv in sorted(au["kinds"].items()))))
        checks = [("http.request", "fwd", "fwd"),
                  ("http.request", "rev", "rev"),
                  ("connect.tunnel", "fwd", "tun")]
        for ev, lst, name in checks:
            g = au["groups"].get((ev, "allow", lst),
                                 {"lines": 0, "requests": 0})
            ok200 = sum(v for k, v in au["statuses"].items()
                        if k[0] == ev and k[1] == lst and k[2] == "allow" and
                        k[3] == "ok" and k[4] == 200)
            want = res[name]["ok"]
            mark = "ok" if g["lines"] == want and ok200 == want else "MISMATCH"
            p("  %-15s %-4s allow: %8d lines, %8d reason ok status 200;"
              " sent ok %8d  %s" % (ev, lst, g["lines"], ok200, want, mark))
            if mark != "ok":
                fails.append("audit %s %s: %d allow lines (%d ok/200) for %d"
                             " requests answered 200" %
                             (ev, lst, g["lines"], ok200, want))
        denied = {k: v for k, v in au["groups"].items() if k[1] != "allow"}
        for k, g in sorted(denied.items()):
            p("  %-15s %-4s %s: %d lines standing for %d requests" %
              (k[0], k[2], k[1], g["lines"], g["requests"]))
            fails.append("audit: %d %s %s refusals on %s" %
                         (g["requests"], k[0], k[1], k[2]))
        other = {k: v for k, v in au["statuses"].items()
                 if not (k[2] == "allow" and k[3] == "ok" and k[4] == 200)}
        for k, v in sorted(other.items(), key=str):
            p("  not ok: %s %s %s reason %s status %s: %d" %
              (k[0], k[1], k[2], k[3], k[4], v))
        # The one engine.exit expected is the drained engine's at the stop,
        # status 0; anything else is a crash, a kill or a failed exit.
        crashed = [e for e in au["engine_exits"]
                   if not e.get("drained") or "signal" in e or
                   e.get("status", 0) != 0]
        if crashed:
            fails.append("%d engine.exit line(s) not a clean drained exit:"
                         " %s" % (len(crashed), json.dumps(
                             {k: v for k, v in crashed[0].items()
                              if k not in ("prev", "ts")})))
        if au["unparsed"]:
            fails.append("%d audit lines are not JSON or an end line "
                         "without its start" % au["unparsed"])
        if au["unended"]:
            fails.append("%d start lines without their end line after a "
                         "drained stop" % au["unended"])
        figures["audit"] = {"lines": au["lines"], "kinds": au["kinds"]}

    try:
        with open(os.path.join(out, "run", "verify.rc")) as f:
            vrc = f.read().strip()
        with open(os.path.join(out, "verify.out"), encoding="utf-8") as f:
            vout = f.read().strip()
    except OSError:
        vrc, vout = "?", "(not run)"
    oks = [ln for ln in vout.splitlines() if ln.startswith("ok:")]
    p("audit verify: exit %s: %s" % (vrc, oks[-1] if oks else
                                     vout.splitlines()[-1] if vout else ""))
    if vrc != "0":
        fails.append("sluice audit verify failed: %s" % vout[:300])

    p("sluice exit after SIGTERM: %s" % a.sluice_rc)
    if a.sluice_rc != "0":
        fails.append("sluice exited %s after SIGTERM, not 0" % a.sluice_rc)

    san = []
    try:
        with open(os.path.join(out, "sluice.stderr"), encoding="utf-8",
                  errors="replace") as f:
            san = [ln.rstrip() for ln in f if SAN_RE.search(ln)]
    except OSError:
        pass
    if a.asan:
        p("sanitizer report lines in sluice.stderr: %d" % len(san))
        if san:
            fails.append("sanitizer report: %s" % san[0][:200])
        # The fake upstreams are test tools: their reports are shown, and
        # are not sluice's failure.
        for name in ("fakeup-plain", "fakeup-tls"):
            try:
                with open(os.path.join(out, name + ".stderr"),
                          encoding="utf-8", errors="replace") as f:
                    n = sum(1 for ln in f if SAN_RE.search(ln))
            except OSError:
                n = 0
            if n:
                p("  (%d sanitizer lines in %s.stderr: the test tool's,"
                  " not judged)" % (n, name))
    p()
    if fails:
        p("FAIL")
        for f in fails:
            p("  - " + f)
    else:
        p("PASS")
    text = "\n".join(txt) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    figures["load"] = res
    figures["load_seconds"] = a.load_seconds
    figures["sluice_rc"] = a.sluice_rc
    figures["verify_rc"] = vrc
    figures["failures"] = fails
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=1, sort_keys=True)
        f.write("\n")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
