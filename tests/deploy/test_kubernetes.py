"""deploy/kubernetes/*.yaml: every YAML document parses, and the fields
docs/threat-model.md and docs/deployment.md rely on hold. sluice: drop
ALL, add exactly what start-up needs (NET_ADMIN kept; never NET_RAW or
DAC_OVERRIDE), no privilege escalation, read-only root, every path its
policy names under a mount (writable ones on writable mounts; the key
file by subPath, a plain file not the secret volume's symbolic link),
an exec startup probe on the policy's ready_file. The agent: a non-zero
uid that is not the policy's user, runAsNonRoot, drop ALL and add
nothing, no privilege escalation, read-only root, the run token as a
file, the SDK's base URL at a reverse listener, and none of sluice's
volumes. (tests/integration/test_deploy_caps.py starts sluice with the
sidecar's capability set.)"""

import glob
import json
import os
import posixpath
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

try:
    import yaml
except ImportError:
    d.fail("python3-yaml missing (scripts/deps)")
    d.done()

SLUICE_CAPS = {"NET_ADMIN", "NET_BIND_SERVICE", "CHOWN", "SETUID", "SETGID",
               "SETPCAP"}
NEVER = {"NET_RAW", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "SYS_ADMIN",
         "ALL", "SYS_PTRACE"}

files = sorted(glob.glob(os.path.join(d.SRC, "deploy", "kubernetes",
                                      "*.yaml")))
names = [os.path.basename(f) for f in files]
d.check("sidecar-pod.yaml" in names and "gateway-daemonset.yaml" in names,
        "manifests: %r" % names)


def under(path, mounts):
    """The mount (longest mountPath) path lies under, or None."""
    best = None
    for m in mounts:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    return best


def sec(c):
    return c.get("securityContext") or {}


def check_sluice(where, c, pod, policy, policy_path):
    sc = sec(c)
    caps = sc.get("capabilities") or {}
    d.check(caps.get("drop") == ["ALL"], "%s: sluice drops %r" % (
        where, caps.get("drop")))
    add = set(caps.get("add") or [])
    d.check(add == SLUICE_CAPS, "%s: sluice adds %r, want %r" % (
        where, sorted(add), sorted(SLUICE_CAPS)))
    d.check(not add & NEVER, "%s: sluice adds %r" % (where, add & NEVER))
    d.check(sc.get("allowPrivilegeEscalation") is False,
            "%s: sluice allowPrivilegeEscalation" % where)
    d.check(sc.get("readOnlyRootFilesystem") is True,
            "%s: sluice readOnlyRootFilesystem" % where)
    d.check(sc.get("privileged") in (None, False), "%s: privileged" % where)
    d.check(c.get("args", [])[:3] == ["run", "-c", policy_path],
            "%s: sluice args %r" % (where, c.get("args")))
    mounts = c.get("volumeMounts") or []
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    for m in mounts:
        d.check(m["name"] in vols, "%s: mount of undefined volume %s" % (
            where, m["name"]))
    # Every path the policy names, under a mount of the right kind.
    ro = [policy_path]
    for k in policy["tokens"]["keys"]:
        ro += [k[f] for f in ("secret_file", "public_key_file") if f in k]
    rw = [policy["state_dir"] + "/budget.db",
          policy["audit"]["path"], policy["ready_file"],
          policy["admin"]["socket"]]
    ml = policy.get("metrics", {}).get("listen") or ""
    if ml.startswith("unix:"):
        rw.append(ml[5:])
    for p in ro + rw:
        m = under(p, mounts)
        if not d.check(m is not None, "%s: %s is on no volume (read-only "
                       "root)" % (where, p)):
            continue
        if p in rw:
            d.check(not m.get("readOnly"), "%s: %s on a read-only mount" % (
                where, p))
    for k in policy["tokens"]["keys"]:
        for f in ("secret_file", "public_key_file"):
            if f in k:
                m = under(k[f], mounts)
                v = vols.get(m["name"]) if m else None
                if v and "secret" in v:
                    d.check(m["mountPath"] == k[f] and m.get("subPath"),
                            "%s: %s from a secret volume without subPath "
                            "(a symbolic link, refused)" % (where, k[f]))
                    mode = v["secret"].get("defaultMode", 0o644)
                    d.check(mode & 0o077 == 0, "%s: key mode %o" % (
                        where, mode))
    # The revocation list: watched, so it must see a ConfigMap's updates:
    # a whole-directory configMap mount (a subPath mount never updates).
    rf = policy["tokens"].get("revoked_file")
    if rf is not None:
        m = under(rf, mounts)
        v = vols.get(m["name"]) if m else None
        if d.check(v is not None and "configMap" in v,
                   "%s: revoked_file %s not from a ConfigMap" % (where, rf)):
            d.check(not m.get("subPath"),
                    "%s: revoked_file by subPath (never updated)" % where)
            d.check(m.get("readOnly") is True,
                    "%s: revoked_file mount not read-only" % where)
            d.check(posixpath.dirname(rf) == m["mountPath"].rstrip("/"),
                    "%s: revoked_file %s not at the mount's top" % (
                        where, rf))
            c["_revoked"] = (v["configMap"]["name"],
                             posixpath.basename(rf))
    probe = c.get("startupProbe") or {}
    cmd = (probe.get("exec") or {}).get("command")
    d.check(cmd == ["test", "-s", policy["ready_file"]],
            "%s: startupProbe %r (want an exec test -s of ready_file)" % (
                where, probe))
    return mounts


def policy_of(docs, pod, c, where):
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    path = c["args"][2]
    m = under(path, c.get("volumeMounts") or [])
    cm = vols[m["name"]].get("configMap") if m else None
    if not d.check(cm, "%s: the policy is not from a ConfigMap" % where):
        return None, path
    key = posixpath.relpath(path, m["mountPath"])
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and \
                doc["metadata"]["name"] == cm["name"]:
            return json.loads(doc["data"][key]), path
    d.fail("%s: ConfigMap %s not in the file" % (where, cm["name"]))
    return None, path


for f in files:
    where = os.path.basename(f)
    with open(f) as fh:
        try:
            docs = [x for x in yaml.safe_load_all(fh) if x is not None]
        except yaml.YAMLError as e:
            d.fail("%s: %s" % (where, e))
            continue
    for x in docs:
        d.check(x.get("apiVersion") and x.get("kind") and
                x.get("metadata", {}).get("name"),
                "%s: a document without apiVersion/kind/name" % where)
    secrets = {x["metadata"]["name"] for x in docs if x["kind"] == "Secret"}
    for x in docs:
        if x["kind"] == "Pod":
            pod = x["spec"]
        elif x["kind"] == "DaemonSet":
            pod = x["spec"]["template"]["spec"]
            d.check(pod.get("hostNetwork") is True,
                    "%s: a gateway DaemonSet needs hostNetwork" % where)
        else:
            continue
        for v in pod.get("volumes") or []:
            if "secret" in v:
                d.check(v["secret"]["secretName"] in secrets,
                        "%s: Secret %s not in the file" % (
                            where, v["secret"]["secretName"]))
        d.check(pod.get("automountServiceAccountToken") is False,
                "%s: service account token mounted" % where)
        allc = (pod.get("initContainers") or []) + pod["containers"]
        sl = [c for c in allc if c["name"] == "sluice"]
        if not d.check(len(sl) == 1, "%s: one sluice container" % where):
            continue
        s = sl[0]
        policy, ppath = policy_of(docs, pod, s, where)
        if policy is None:
            continue
        smounts = check_sluice(where, s, pod, policy, ppath)
        if x["kind"] == "DaemonSet":
            # A fleet revokes through one list on every node's gateway.
            rv = s.get("_revoked")
            if d.check(rv is not None, "%s: the gateway has no revoked_file "
                       "from a ConfigMap" % where):
                cms = {y["metadata"]["name"]: y for y in docs
                       if y["kind"] == "ConfigMap"}
                d.check(rv[0] in cms and rv[1] in cms[rv[0]].get("data", {}),
                        "%s: ConfigMap %s with key %s not in the file" % (
                            where, rv[0], rv[1]))
        if x["kind"] == "Pod":
            d.check(policy["netpolicy"]["mode"] == "sidecar", where)
            d.check(s in (pod.get("initContainers") or []) and
                    s.get("restartPolicy") == "Always",
                    "%s: sluice is not a native sidecar (an init container "
                    "with restartPolicy: Always)" % where)
            sysctls = {y["name"]: y["value"] for y in
                       (pod.get("securityContext") or {}).get("sysctls", [])}
            start = int(sysctls.get("net.ipv4.ip_unprivileged_port_start",
                                    "0"))
            for lst in policy["listeners"]:
                port = int(lst["listen"].rsplit(":", 1)[1])
                d.check(port < start, "%s: listener port %d not below the "
                        "pod's ip_unprivileged_port_start %d" % (
                            where, port, start))
            agents = pod["containers"]
            d.check(len(agents) == 1 and agents[0]["name"] == "agent",
                    "%s: containers %r" % (where, [c["name"] for c in
                                                   agents]))
            a = agents[0]
            asc = sec(a)
            uid = asc.get("runAsUser")
            d.check(isinstance(uid, int) and uid != 0 and
                    str(uid) != policy["user"],
                    "%s: agent runAsUser %r (policy user %s)" % (
                        where, uid, policy["user"]))
            d.check(asc.get("runAsNonRoot") is True, "%s: agent runAsNonRoot"
                    % where)
            d.check(asc.get("allowPrivilegeEscalation") is False,
                    "%s: agent allowPrivilegeEscalation" % where)
            d.check(asc.get("readOnlyRootFilesystem") is True,
                    "%s: agent readOnlyRootFilesystem" % where)
            acaps = asc.get("capabilities") or {}
            d.check(acaps.get("drop") == ["ALL"] and not acaps.get("add"),
                    "%s: agent capabilities %r" % (where, acaps))
            amounts = {m["name"] for m in a.get("volumeMounts") or []}
            shared = amounts & {m["name"] for m in smounts}
            d.check(not shared, "%s: agent mounts sluice's volumes %r" % (
                where, shared))
            env = {e["name"]: e.get("value") for e in a.get("env") or []}
            revs = ["http://" + lst["listen"] for lst in policy["listeners"]
                    if lst["type"] == "reverse"]
            d.check(env.get("ANTHROPIC_BASE_URL") in revs,
                    "%s: ANTHROPIC_BASE_URL %r not a reverse listener %r" % (
                        where, env.get("ANTHROPIC_BASE_URL"), revs))
            tok = env.get("RUN_TOKEN_FILE")
            m = under(tok or "/nonexistent", a.get("volumeMounts") or [])
            vols = {v["name"]: v for v in pod.get("volumes") or []}
            d.check(m is not None and "secret" in vols[m["name"]],
                    "%s: the run token is not a file from a Secret" % where)
            d.check(any(tok in part for part in a.get("command", [])),
                    "%s: the agent's command does not read %s" % (where, tok))
        else:
            d.check(policy["netpolicy"]["mode"] == "gateway", where)
d.done()
