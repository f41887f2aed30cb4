#!/usr/bin/python3
"""Stat suite driver: live telemetry of running uroce processes, read with uroce-stat and with
the raw DPDK telemetry protocol, while traffic runs.

  perf   uroce-perf server and client over memif, a long WRITE test: `uroce-stat res qp` shows
         both QPs in RTS with matching lqpn/rqpn; two `statistic` samples show sent_pkts
         increasing; `uroce-stat statistic --watch` prints rates; /uroce/qp,<qpn> answers with
         the requester/completer/responder state names; a non-uroce question is skipped.
  shim   ib_write_bw client and server through scripts/uroce-run over memif: `uroce-stat res qp`
         shows comm ib_write_bw, the client's QP in RTS and matching QP numbers.

Assertions never depend on speed: only "present", "matching", "increased". Every scenario
kills what it started and removes the memif socket, also on failure or SIGTERM (meson's
timeout). Needs root; exits 77 (skip) otherwise.

usage: stat_test.py --root REPO --perf BUILD/bench/uroce-perf --lib liburoce-verbs.so SCENARIO
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

suite = driver.Suite([(["--perf"], {"required": True})], lib_required=False, results=False, scenarios=["perf", "shim"],
                     grace=5, echo=lambda line: log(line), remove_sock=True, signals=False)
args = suite.args
STAT = os.path.join(suite.root, "tools", "stat", "uroce-stat")
children, cleanup = suite.children, suite.cleanup
procs = children.procs
log = driver.log
failures = []


def check(cond, msg):
    log(("ok    " if cond else "FAIL  ") + msg)
    if not cond:
        failures.append(msg)
    return cond


def start(cmd, out, env=None):
    return children.start(cmd, out, env)


def wait_for(pred, t, what, alive=()):
    t0 = time.time()
    while time.time() - t0 < t:
        if pred():
            return True
        if any(p.poll() is not None for p in alive):
            break
        time.sleep(0.1)
    log("gave up waiting for", what)
    return False


def memif_listening():
    return "@" + driver.SOCK in open("/proc/net/unix").read()


def stat(*words, timeout=30):
    r = subprocess.run([sys.executable, STAT] + list(words), capture_output=True, text=True, timeout=timeout)
    if r.stderr.strip():
        log("uroce-stat stderr:", r.stderr.strip())
    return r.returncode, r.stdout


QP_RE = re.compile(r"^link (\S+)/1 lqpn (\d+) rqpn (\d+) type (\S+) state (\S+) sq-psn (\d+) rq-psn (\d+) "
                   r"path-mtu (\d+) pid (\d+) comm (\S+)$")


def qp_rows(pids):
    """`uroce-stat res qp` rows of the processes `pids` (dicts)."""
    rc, out = stat("res", "qp")
    rows = []
    for line in out.splitlines():
        m = QP_RE.match(line)
        if m and int(m.group(9)) in pids:
            rows.append(dict(ifname=m.group(1), lqpn=int(m.group(2)), rqpn=int(m.group(3)), type=m.group(4),
                             state=m.group(5), sq_psn=int(m.group(6)), rq_psn=int(m.group(7)),
                             mtu=int(m.group(8)), pid=int(m.group(9)), comm=m.group(10)))
    return rows


def stat_values(pid):
    """`uroce-stat statistic --pid PID` as {name: value}."""
    rc, out = stat("--pid", str(pid), "statistic")
    for line in out.splitlines():
        words = line.split()
        if len(words) > 6 and words[0] == "link":
            return {words[i]: int(words[i + 1]) for i in range(6, len(words) - 1, 2)}
    return {}


def telemetry(prefix, cmd):
    """One command over the raw protocol (what dpdk-telemetry.py does)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2")
    hello = json.loads(s.recv(4096))
    s.send(cmd.encode())
    reply = json.loads(s.recv(hello["max_output_len"] + 1024))
    s.close()
    return reply


def other_dpdk_process(f):
    """f(path) while a stand-in telemetry server at `path` answers every command with null."""
    import tempfile
    import threading
    d = tempfile.mkdtemp(prefix="uroce-stat-other-")
    path = os.path.join(d, "dpdk_telemetry.v2")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(10)

    def serve():
        try:
            while True:
                conn, _ = srv.accept()
                conn.send(json.dumps({"version": "DPDK 22.11", "pid": 1, "max_output_len": 16384}).encode())
                while True:
                    cmd = conn.recv(1024).decode()
                    if not cmd:
                        break
                    conn.send(json.dumps({cmd.split(",")[0]: None}).encode())
                conn.close()
        except OSError:
            pass  # closed below, or nobody came

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        return f(path)
    finally:
        srv.close()
        shutil.rmtree(d, ignore_errors=True)


def connected_pair(rows):
    """Two rows whose lqpn/rqpn point at each other."""
    for a in rows:
        for b in rows:
            if a is not b and a["lqpn"] == b["rqpn"] and b["lqpn"] == a["rqpn"]:
                return a, b
    return None


def sc_perf():
    perf = args.perf
    # Far more data than the checks need: the pair is killed once they are done.
    opts = ["--test", "write", "-s", "65536", "-n", "100000000", "--timeout", "100"]
    s = start([perf, "--config", suite.config("memif-server.conf")] + opts, "/tmp/uroce-stat-s.log")
    if not check(wait_for(memif_listening, 15, "the memif socket", [s]), "server listens"):
        return
    c = start([perf, "--config", suite.config("memif-client.conf")] + opts + ["127.0.0.1"],
              "/tmp/uroce-stat-c.log")
    pids = {s.pid, c.pid}
    # Both QPs connected (the client's and the server's), in RTS.
    found = []
    wait_for(lambda: (found.__setitem__(slice(None), qp_rows(pids)) or
                      (len(found) == 2 and all(r["state"] == "RTS" for r in found))), 30, "two QPs in RTS", [s, c])
    for r in found:
        log("   ", r)
    check(len(found) == 2 and all(r["state"] == "RTS" for r in found), "res qp: both QPs in RTS")
    check(connected_pair(found) is not None, "res qp: lqpn/rqpn pairs match")
    check(all(r["comm"] == "uroce-perf" and r["type"] == "RC" for r in found), "res qp: comm uroce-perf, type RC")
    check({r["ifname"] for r in found} == {"uroce-memif-s", "uroce-memif-c"}, "res qp: ifnames of both configs")
    # Two samples: sent_pkts grew on the client (it is writing), rcvd_pkts on the server.
    a = stat_values(c.pid)
    a_s = stat_values(s.pid)
    time.sleep(1.0)
    b = stat_values(c.pid)
    b_s = stat_values(s.pid)
    log("    client sent_pkts %s -> %s, server rcvd_pkts %s -> %s" %
        (a.get("sent_pkts"), b.get("sent_pkts"), a_s.get("rcvd_pkts"), b_s.get("rcvd_pkts")))
    check(b.get("sent_pkts", 0) > a.get("sent_pkts", 0) > 0, "statistic: client sent_pkts increased")
    check(b_s.get("rcvd_pkts", 0) > a_s.get("rcvd_pkts", 0) > 0, "statistic: server rcvd_pkts increased")
    rxe = ["sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
           "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err", "send_err",
           "rdma_sends", "rdma_recvs"]
    check(all(k in b for k in rxe), "statistic: every rxe hw_counter name uroce has is present")
    # --watch, bounded by --count: two lines per process, the client's sent_pkts rate positive.
    rc, out = stat("--pid", str(c.pid), "statistic", "--watch", "0.5", "--count", "2")
    lines = [l for l in out.splitlines() if l.startswith("link ")]
    log("    " + "\n    ".join(lines))
    m = [re.search(r"sent_pkts/s (\d+)", l) for l in lines]
    check(rc == 0 and len(lines) == 2 and all(x and int(x.group(1)) > 0 for x in m),
          "statistic --watch 0.5 --count 2: two lines, sent_pkts/s > 0")
    # One QP in full, through the raw protocol (as dpdk-telemetry.py asks) and through uroce-stat.
    cl = [r for r in found if r["pid"] == c.pid]
    if check(len(cl) == 1, "the client's QP found"):
        q = telemetry("uroce-memif-c", "/uroce/qp,%d" % cl[0]["lqpn"])["/uroce/qp"]
        log("    /uroce/qp: " + json.dumps({k: q.get(k) for k in ("state", "requester", "completer", "responder",
                                                                  "sq_outstanding", "remote_gid")}))
        check(q.get("status") == "ok" and q.get("state") == "RTS" and q.get("lqpn") == cl[0]["lqpn"],
              "/uroce/qp,<qpn>: the QP, in RTS")
        names = re.compile(r"^[A-Z_]+$")
        check(all(isinstance(q.get(k), str) and names.match(q[k]) for k in ("requester", "completer", "responder")),
              "/uroce/qp,<qpn>: requester/completer/responder state names")
        check(q.get("remote_gid") == "198.19.0.1", "/uroce/qp,<qpn>: remote GID is the server's address")
        rc, out = stat("qp", hex(cl[0]["lqpn"]))
        check(rc == 0 and "requester" in out and "retries_left" in out, "uroce-stat qp QPN (hex)")
        q = telemetry("uroce-memif-c", "/uroce/qp,%d" % ((cl[0]["lqpn"] + 1) & 0xFFFFFF))["/uroce/qp"]
        check(q.get("status") == "no such qp", "/uroce/qp of a QP that does not exist: said so")
    q = telemetry("uroce-memif-s", "/uroce/qp,notanumber")
    check(q.get("/uroce/qp") is None, "/uroce/qp with a bad parameter: an error (null)")
    # uroce-stat skips DPDK processes without the /uroce commands (here a stand-in speaking the
    # telemetry protocol as DPDK does for an unknown command: null), and unreachable sockets.
    rc, out = other_dpdk_process(lambda path: stat("--socket", path, "res", "qp"))
    check(rc == 1 and out.strip() == "", "uroce-stat: a DPDK process without /uroce commands is skipped")
    check(stat("--socket", "/nonexistent/dpdk_telemetry.v2", "res", "qp")[0] == 1,
          "uroce-stat: an unreachable socket is skipped (exit 1, nothing found)")


def sc_shim():
    if not args.lib:
        log("no liburoce-verbs.so: skip")
        sys.exit(77)
    env = dict(os.environ, UROCE_VERBS_LIB=args.lib)
    port = str(19600 + os.getpid() % 300)
    opts = ["-p", port, "-s", "65536", "-D", "20"]
    s = start([suite.run, "--config", suite.config("memif-server.conf"), "--", "ib_write_bw", "-d", "uroce-memif-s"] + opts,
              "/tmp/uroce-stat-shim-s.log", env)
    listening = lambda: memif_listening() and re.search(r":%s\b" % port, subprocess.run(
        ["ss", "-ltnH"], capture_output=True, text=True).stdout) is not None
    if not check(wait_for(listening, 20, "ib_write_bw server", [s]), "ib_write_bw server listens"):
        return
    c = start([suite.run, "--config", suite.config("memif-client.conf"), "--", "ib_write_bw", "-d", "uroce-memif-c"] + opts +
              ["127.0.0.1"], "/tmp/uroce-stat-shim-c.log", env)
    # uroce-run execs the program: the perftest processes keep these pids.
    pids = {s.pid, c.pid}
    found = []
    # perftest's client may reach RTS before its server leaves INIT (each moves its own QP after
    # the TCP exchange): wait for both (a CI run sampled the server still in INIT).
    wait_for(lambda: (found.__setitem__(slice(None), qp_rows(pids)) or
                      (any(r["pid"] == c.pid and r["state"] == "RTS" for r in found) and
                       len(found) == 2 and all(r["state"] in ("RTR", "RTS") for r in found) and
                       connected_pair(found) is not None)), 30, "the client's QP in RTS, the server's connected",
             [s, c])
    for r in found:
        log("   ", r)
    check(len(found) == 2 and all(r["comm"] == "ib_write_bw" for r in found), "res qp: two QPs, comm ib_write_bw")
    check(any(r["pid"] == c.pid and r["state"] == "RTS" for r in found), "res qp: the client's QP in RTS")
    check(all(r["state"] in ("RTR", "RTS") for r in found), "res qp: the server's QP connected (RTR or RTS)")
    check(connected_pair(found) is not None, "res qp: lqpn/rqpn pairs match")
    a = stat_values(c.pid)
    time.sleep(1.0)
    b = stat_values(c.pid)
    log("    client sent_pkts %s -> %s" % (a.get("sent_pkts"), b.get("sent_pkts")))
    check(b.get("sent_pkts", 0) > a.get("sent_pkts", 0) > 0, "statistic: client sent_pkts increased")


def main():
    if os.geteuid() != 0:
        log("needs root: skip")
        sys.exit(77)
    driver.exit_on_signals()
    try:
        cleanup()
        {"perf": sc_perf, "shim": sc_shim}[args.scenario]()
    finally:
        cleanup()
    if failures:
        log("%d check(s) failed" % len(failures))
        sys.exit(1)
    log("all checks passed")


main()
