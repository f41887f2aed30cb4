#!/usr/bin/env python3
"""Repeat and chaos runs of unmodified rdma_cm programs on uroce <-> uroce (issue 35, "Teardown
and kills"). A command of its own, not part of the test suite (it runs for many minutes).

1. Repeat runs (--runs N, default 200 per program): rping, ib_write_bw -R and ucmatose, both sides
   on uroce through scripts/uroce-run (liburoce-verbs.so + liburoce-rdmacm.so), over the netns
   veth pair (scripts/netns-pair, config/veth-*.conf) or memif (config/memif-*.conf). Each run:
   the server is started and, once it has printed the line it prints right before it listens,
   the client. Counted per run: both exit statuses, signals (a negative status, or 128 + a
   fatal signal), hangs (a side still running after --timeout seconds: killed), and the
   program's own success line (rping -V: no mismatch; ucmatose: "return status 0" on both sides;
   ib_write_bw: its result line).

2. Chaos runs (--chaos N, default 100 per program): the same pair, but one side (server and
   client alternately) is SIGKILLed a moment after the client printed its first line (its
   device is open: set-up begins), drawn uniformly from [0, T - S]: S when the client normally
   prints that line, T when the victim normally exits, both from the client's start (medians of
   the repeat runs, or of 5 calibration runs with --runs 0). Set-up, transfer and teardown are
   all hit, rather than mostly the DPDK start-up (whose jitter is larger than all three). A
   victim that had already exited by then is still counted ("victim had exited"). A process
   killed with SIGKILL says nothing (its engine dies with it: no DREQ, no REJ). The survivor must end
   within --bound seconds of the kill, with an exit status (0 or an error), never a signal and
   never still running ("hang"). Recorded per run: the victim, the kill time, whether the victim
   had already exited by then, the survivor's exit status, how long it took after the kill, and
   the last lines of both.

   A survivor *server* that never saw a connection request (the client was killed before its REQ
   left) is still listening, as it would on any RNIC: counted apart ("idle listener"), not as a
   hang. rping runs with -d so that its output shows which CM events it got (CONNECT_REQUEST).

The bound (--bound, default 30 s), from engine/param.hpp and verbs_shim/param.hpp: a survivor
learns of a silent peer only through its own traffic. Its QP's local ACK timeout is 4.096 us x
2^kRdmacmAckTimeout (14): 67 ms, times 1 + retry_count (at most 8): 0.54 s. Its CM's REQ, REP or
DREQ is resent kCmMaxRetries (15) times, 16 waits of 4.096 us x 2^kRdmacmResponseTimeout (16),
268 ms: 4.3 s, then TimeWait kCmTimewaitNs 1 s, and the leave wait at exit kShimCmLeaveWaitNs
300 ms: about 6.2 s in all, plus ARP and the program's own exit. 30 s is five times that; on
memif add port/param.hpp kLinkWaitMs (20 s): a side whose memif peer is gone waits that long for
the link in modify_qp (the bound then has little room left: use --bound 40 there). Note:
rping and perftest ask for retry_count 7: seven retries on uroce, as the IBA and a ConnectX read
it (rxe: for ever). A survivor that only waits for a RECV sends nothing at all: on a link of its
own (veth, memif) it has no way to learn that its peer died and is reported as a hang; on the
host device (--link service) the daemon sends the dead process's DREQ.

Every process runs in its own process group and is killed (SIGKILL) at the end of its run; on
any exit (normal, failure, SIGTERM, Ctrl-C) every child is stopped, the memif socket removed,
the DPDK runtime directories of our dead processes removed, and the namespaces taken down if
this run made them (tests/support/driver.py). Other people's runs on the same machine: the
configs are copies of config/ with a memif socket of our own and, on veth, endpoint addresses
and MACs of our own (198.18.0.21 and .22); the namespaces are used as found (a run during which
they disappear is counted as "void", and they are made again).

usage: tests/rdmacm/chaos.py [--runs N] [--chaos N] [--programs rping,ucmatose,ib_write_bw]
                             [--link veth|memif|service] [--build DIR] [--json FILE] [--bound S]
                             [--timeout S] [--seed N] [--kill server|client --at SECONDS]
Prints a summary table per phase; exits 1 if any run saw a signal or a hang (2: bad use).
Reproduce one chaos run: --runs 0 --chaos 1 --programs P --kill SIDE --at SECONDS.
"""
import argparse
import glob
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

log = driver.log
# The server's address on each link (the uroce endpoint's own), and each side's device name.
# On the veth pair the endpoints take addresses and MACs of their own (.21 and .22 instead of the
# configs' .11 and .12): another uroce program on the same veth pair (the namespaces are shared by
# whoever runs tests on this machine) then sees our frames as not for it, and we its.
SERVER_IP = {"memif": "198.19.0.1", "veth": "198.18.0.22", "service": "198.18.9.2"}
VETH_ADDR = {"veth-b.conf": ("198.18.0.22/24", "02:00:c6:12:00:22"), "veth-a.conf": ("198.18.0.21/24", "02:00:c6:12:00:21")}
# --link service: the host device (uroced, docs/service.md) as a user who wants uroce instead of
# rxe runs it: two namespaces of this run's own joined by a veth pair, each end's address the
# kernel's, a uroced on each end, and the programs attached to their namespace's daemon
# (uroce-run --netdev). A process killed there has someone to speak for it: the daemon sends the
# DREQs it left (port/service/daemon.cpp), as the kernel's CM does for a process that dies.
SVC_NS = ("uroce-cb", "uroce-ca")      # server's side, client's side
SVC_IF = ("uc-b", "uc-a")
SVC_ADDR = ("198.18.9.2", "198.18.9.1")
DEV = {"memif": ("uroce-memif-s", "uroce-memif-c"), "veth": ("uroce-veth-b", "uroce-veth-a"),
       "service": tuple("uroce_" + i for i in SVC_IF)}
CONF = {"memif": ("memif-server.conf", "memif-client.conf"), "veth": ("veth-b.conf", "veth-a.conf"), "service": ()}
NS = {"memif": ([], []), "veth": (driver.NSB, driver.NSA), "service": tuple(["ip", "netns", "exec", n] for n in SVC_NS)}
READY_S = 20        # the server's start-up, up to the line it prints before it listens
FATAL = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGKILL}


def rping_judge(crc, cout, src, sout):
    bad = "mismatch" in cout or "mismatch" in sout
    return crc == 0 and src == 0 and not bad, "no mismatch" if not bad else "DATA MISMATCH"


def ucmatose_judge(crc, cout, src, sout):
    good = "return status 0" in cout and "return status 0" in sout and "data transfers complete" in cout
    return crc == 0 and src == 0 and good, "'return status 0' on both sides" if good else "no 'return status 0'"


def perftest_judge(size):
    def judge(crc, cout, src, sout):
        rows = [l for l in cout.splitlines() if re.match(r"^\s*%d\s+\d+\s+[\d.]+" % size, l)]
        return crc == 0 and src == 0 and len(rows) == 1, rows[0].strip() if rows else "no result line"
    return judge


# Per program: server argv(ip, port, dev), client argv(ip, port, dev), the server's line right
# before it listens, the judge of a normal run, and what in a server's output shows that a
# connection request reached it.
PROGRAMS = {
    "rping": dict(
        server=lambda ip, p, d: ["rping", "-s", "-a", ip, "-p", p, "-V", "-C", "5", "-S", "4096", "-d"],
        client=lambda ip, p, d: ["rping", "-c", "-a", ip, "-p", p, "-V", "-C", "5", "-S", "4096", "-d"],
        ready="rdma_listen", judge=rping_judge, reached="CONNECT_REQUEST"),
    "ucmatose": dict(
        server=lambda ip, p, d: ["ucmatose", "-b", ip, "-p", p, "-c", "4", "-C", "10"],
        client=lambda ip, p, d: ["ucmatose", "-s", ip, "-p", p, "-c", "4", "-C", "10"],
        ready="cmatose: starting server", judge=ucmatose_judge, reached="cmatose: event|receiving|test complete"),
    "ib_write_bw": dict(
        server=lambda ip, p, d: ["ib_write_bw", "-R", "-d", d, "-p", p, "-n", "300", "-s", "4096", "-F"],
        client=lambda ip, p, d: ["ib_write_bw", "-R", "-d", d, "-p", p, "-n", "300", "-s", "4096", "-F", ip],
        ready="Waiting for client to connect", judge=perftest_judge(4096),
        reached=r"local address|remote address|Unexpected CM event|Failed"),
}
CMDLINE = {
    "rping": "rping -s/-c -V -C 5 -S 4096 -d",
    "ucmatose": "ucmatose -c 4 -C 10",
    "ib_write_bw": "ib_write_bw -R -n 300 -s 4096 -F",
}


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--runs", type=int, default=200, help="repeat runs per program (default 200)")
    ap.add_argument("--chaos", type=int, default=100, help="chaos runs per program (default 100)")
    ap.add_argument("--programs", default="rping,ucmatose,ib_write_bw")
    ap.add_argument("--link", choices=["veth", "memif", "service"], default="veth")
    ap.add_argument("--build", default="build", help="the meson build directory (default build)")
    ap.add_argument("--json", default="", help="one JSON line per run to this file (appended)")
    ap.add_argument("--bound", type=float, default=30.0,
                    help="seconds the survivor may take after the kill (default 30: see the top of this file)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a repeat run may take (default 60)")
    ap.add_argument("--seed", type=int, default=None, help="the kill times' random seed (default: the time)")
    ap.add_argument("--kill", choices=["server", "client"], help="always kill this side (a reproducer)")
    ap.add_argument("--at", type=float,
                    help="kill this many seconds after the client's first output line (with --kill)")
    ap.add_argument("--keep-logs", action="store_true", help="keep every run's logs, not only the failures'")
    a = ap.parse_args()
    a.programs = [p.strip() for p in a.programs.split(",") if p.strip()]
    for p in a.programs:
        if p not in PROGRAMS:
            ap.error(f"unknown program {p} (rping, ucmatose, ib_write_bw)")
    if (a.at is None) != (a.kill is None):
        ap.error("--kill and --at go together")
    if a.seed is None:
        a.seed = int(time.time())
    return a


args = parse()
build = os.path.abspath(args.build if os.path.isdir(args.build) else os.path.join(ROOT, args.build))
LIB = os.path.join(build, "verbs_shim", "liburoce-verbs.so")
CMLIB = os.path.join(build, "verbs_shim", "rdmacm", "liburoce-rdmacm.so")
RUN = os.path.join(ROOT, "scripts", "uroce-run")
UROCED = os.path.join(build, "tools", "uroced", "uroced")
XDP_PROG = os.path.join(build, "port", "roce_redirect.bpf.o")
for f in (LIB, CMLIB) + ((UROCED, XDP_PROG) if args.link == "service" else ()):
    if not os.path.exists(f):
        print(f"chaos: {f} is missing (build first)", file=sys.stderr)
        sys.exit(2)
if os.geteuid() != 0:
    print("chaos: needs root (DPDK, namespaces)", file=sys.stderr)
    sys.exit(2)
children = driver.Children()
netns = driver.Netns(os.path.join(ROOT, "scripts", "netns-pair"))
LOGDIR = tempfile.mkdtemp(prefix="uroce-chaos-")
port_counter = [9000 + (os.getpid() % 500) * 8]
rng = random.Random(args.seed)
PREFIX_TAG = f"chaos{os.getpid()}"
SOCK = f"/tmp/uroce-chaos-{os.getpid()}.sock"
CONFIGS = []   # this run's own copies of the two sides' configs (own_config), made by main()
created_netns = [False]
started_pids = []   # our children's PIDs (their uroce-shim-PID runtime directories)
bad_runs = []   # (phase, program, run, text) of every run with a signal or a hang


def remove_own_runtime_dirs():
    """The DPDK runtime directories our processes leave when killed: the shim runs DPDK with
    --file-prefix uroce-shim-PID (verbs_shim/runtime.cpp), PID the program's (uroce-run, ip netns
    exec and stdbuf exec it). Only our own children's: driver.remove_stale_shim_runtime_dirs()
    judges by /proc, and a process of another PID namespace sharing /var/run/dpdk looks dead."""
    for pid in started_pids:
        if not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(f"/var/run/dpdk/uroce-shim-{pid}", ignore_errors=True)
    started_pids.clear()
    for d in glob.glob(f"/var/run/dpdk/*-{PREFIX_TAG}"):
        shutil.rmtree(d, ignore_errors=True)


def netns_present():
    return all(os.path.exists("/var/run/netns/" + n) for n in ("uroce-a", "uroce-b"))


def ensure_netns():
    """The veth pair's namespaces: made by scripts/netns-pair if absent (and then taken down at
    the end), used as they are if present (someone else's run may be using them)."""
    if args.link == "veth" and not netns_present():
        netns.up()
        created_netns[0] = True


def void(*outs):
    """For a run that did not end well: True if the namespaces went away under it (someone else's
    netns-pair down or up): the run says nothing about uroce and is counted apart."""
    marks = ("Cannot open network namespace", "no DPDK port")
    gone = args.link == "veth" and (not netns_present() or any(m in o for o in outs for m in marks))
    if gone:
        log("  the namespaces went away during this run (not ours): run voided, namespaces made again")
        ensure_netns()
    return gone


def cleanup():
    # A second signal (timeout(1) passes on the one it got) must not cut the cleanup short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children.stop_all()
    if args.link == "service":
        for l in service_down():
            log(l)
    driver.remove(SOCK)
    remove_own_runtime_dirs()
    if created_netns[0]:
        netns.down()


def next_port():
    port_counter[0] += 1
    return str(port_counter[0])


def own_config(name):
    """config/NAME with a DPDK --file-prefix and a memif socket of this run's own (and, on veth,
    the endpoint's own address and MAC): a uroce program started by someone else from the same
    config at the same time does not share our runtime directory, socket or address."""
    with open(os.path.join(ROOT, "config", name)) as f:
        t = f.read()
    t = re.sub(r"--file-prefix (\S+)", lambda m: f"--file-prefix {m.group(1)}-{PREFIX_TAG}", t)
    t = t.replace("socket=" + driver.SOCK, "socket=" + SOCK)
    if name in VETH_ADDR:
        t = re.sub(r"^ip = .*$", "ip = " + VETH_ADDR[name][0], t, flags=re.M)
        t = re.sub(r"^mac = .*$", "mac = " + VETH_ADDR[name][1], t, flags=re.M)
    path = os.path.join(LOGDIR, name)
    with open(path, "w") as f:
        f.write(t)
    return path


def wrap(side, cmd):
    i = 0 if side == "server" else 1
    where = ["--netdev", SVC_IF[i]] if args.link == "service" else ["--config", CONFIGS[i]]
    return NS[args.link][i] + [RUN, *where, "--no-device-view", "--", "stdbuf", "-oL"] + cmd


# ---- the host device (--link service) ----

service = {"daemons": []}
huge = driver.Hugepages(["uroce_uc-"])
daemons = driver.Children()   # apart from `children`, which every run stops


def run_ok(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")


def service_up():
    """Namespaces, veth pair and addresses, 2 MB hugepages for two daemons, a uroced on each end."""
    service_down_topology()
    for n in SVC_NS:
        run_ok(["ip", "netns", "add", n])
        run_ok(["ip", "-n", n, "link", "set", "lo", "up"])
    run_ok(["ip", "link", "add", SVC_IF[0], "netns", SVC_NS[0], "type", "veth", "peer", SVC_IF[1], "netns", SVC_NS[1]])
    for n, i, a in zip(SVC_NS, SVC_IF, SVC_ADDR):
        run_ok(["ip", "-n", n, "addr", "add", a + "/24", "dev", i])
        run_ok(["ip", "-n", n, "link", "set", i, "up"])
    huge.up()
    for n, i in zip(SVC_NS, SVC_IF):
        out = os.path.join(LOGDIR, f"uroced-{i}.log")
        d = daemons.start(["ip", "netns", "exec", n, "stdbuf", "-oL", "-eL", UROCED, "--netdev", i], out,
                           dict(os.environ, UROCE_XDP_PROG=XDP_PROG))
        service["daemons"].append((d, out))
        t0 = time.time()
        while "uroced: serving" not in text(out) and d.poll() is None and time.time() - t0 < 30:
            time.sleep(0.05)
        if "uroced: serving" not in text(out):
            raise RuntimeError(f"uroced on {i} did not start: {text(out)[-600:]}")
        log(f"uroced on {i} ({n}): serving")


def service_down_topology():
    driver.netns_down(SVC_NS)


def service_down():
    """Stops the daemons (their last lines: what they sent for dead processes), then the rest."""
    lines = []
    for d, out in service["daemons"]:
        driver.kill_group(d, signal.SIGTERM)
        try:
            d.wait(timeout=15)
        except Exception:
            driver.kill_group(d, signal.SIGKILL)
            d.wait()
        lines += [l for l in text(out).splitlines() if l.startswith("uroced: stopped")]
    service["daemons"].clear()
    service_down_topology()
    huge.down()
    return lines


def env():
    # UROCE_SHIM_DEBUG=1: a SIGSEGV prints the shim's backtrace into the side's log.
    return dict(os.environ, UROCE_VERBS_LIB=LIB, UROCE_RDMACM_LIB=CMLIB, UROCE_SHIM_DEBUG="1")


def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def tail(s, n=6):
    return [l for l in s.strip().splitlines()][-n:]


def signalled(rc):
    """The fatal signal behind an exit status (negative: the process itself; 128 + n: a shell's
    report of its child's), or None."""
    if isinstance(rc, int) and rc < 0:
        return -rc
    if isinstance(rc, int) and rc > 128 and (rc - 128) in FATAL:
        return rc - 128
    return None


def start_pair(prog, tag):
    """Starts the server and waits for its ready line; returns (server, slog, clog, ready)."""
    P = PROGRAMS[prog]
    ip, port = SERVER_IP[args.link], next_port()
    slog = os.path.join(LOGDIR, f"{tag}-server.log")
    clog = os.path.join(LOGDIR, f"{tag}-client.log")
    server = children.start(wrap("server", P["server"](ip, port, DEV[args.link][0])), slog, env())
    started_pids.append(server.pid)
    t0 = time.time()
    while P["ready"] not in text(slog) and server.poll() is None and time.time() - t0 < READY_S:
        time.sleep(0.02)
    ready = P["ready"] in text(slog)
    time.sleep(0.2)  # from its print to rdma_listen: a few calls, no waits
    return server, slog, clog, ready, (ip, port)


def wait_both(procs, deadline, watch=None, first=None):
    """Waits for every process in procs (name -> Popen) until the absolute time deadline; returns
    name -> (status or "timeout", seconds from the call to its exit). With `watch` (a log file),
    first[0] becomes the seconds until that file first had something in it."""
    t0 = time.time()
    out = {}
    while len(out) < len(procs):
        if watch and first[0] is None and os.path.exists(watch) and os.path.getsize(watch) > 0:
            first[0] = time.time() - t0
        for k, p in procs.items():
            if k not in out and p.poll() is not None:
                out[k] = (p.returncode, time.time() - t0)
        if len(out) == len(procs):
            break
        if time.time() >= deadline:
            for k, p in procs.items():
                if k not in out:
                    driver.kill_group(p, signal.SIGKILL)
                    p.wait()
                    out[k] = ("timeout", time.time() - t0)
            break
        time.sleep(0.01)
    return out


def finish_logs(tag, keep):
    if keep or args.keep_logs:
        return [os.path.join(LOGDIR, f"{tag}-{s}.log") for s in ("server", "client")]
    for s in ("server", "client"):
        driver.remove(os.path.join(LOGDIR, f"{tag}-{s}.log"))
    return []


# ---- repeat runs ----


def repeat_run(prog, i):
    tag = f"{prog}-run{i}"
    server, slog, clog, ready, (ip, port) = start_pair(prog, tag)
    c0 = time.time()
    client = children.start(wrap("client", PROGRAMS[prog]["client"](ip, port, DEV[args.link][1])), clog, env())
    started_pids.append(client.pid)
    first = [None]
    res = wait_both({"server": server, "client": client}, c0 + args.timeout, clog, first)
    children.stop_all()
    remove_own_runtime_dirs()
    (src, s_t), (crc, c_t) = res["server"], res["client"]
    sout, cout = text(slog), text(clog)
    ok, detail = PROGRAMS[prog]["judge"](crc, cout, src, sout)
    sigs = [s for s in (signalled(src), signalled(crc)) if s]
    if not sigs and not ok and void(sout, cout):
        outcome = "void"
    elif sigs:
        outcome = "signal"
    elif "timeout" in (src, crc):
        outcome = "hang"
    elif ok:
        outcome = "ok"
    else:
        outcome = "error"
    if not ready:
        detail += " (the server never printed its ready line)"
    kept = finish_logs(tag, outcome != "ok")
    entry = dict(phase="repeat", program=prog, link=args.link, run=i, outcome=outcome, server_rc=src, client_rc=crc,
                 client_s=round(c_t, 3), server_s=round(s_t, 3), detail=detail,
                 client_first_output_s=round(first[0], 3) if first[0] is not None else None, signals=sigs,
                 server_tail=tail(sout) if outcome != "ok" else [], client_tail=tail(cout) if outcome != "ok" else [],
                 logs=kept)
    driver.append_json(args.json, entry)
    if outcome != "ok":
        log(f"  {prog} run {i}: {outcome.upper()} server rc {src} client rc {crc} ({detail}); logs {kept}")
        log("    server: " + " | ".join(entry["server_tail"]))
        log("    client: " + " | ".join(entry["client_tail"]))
        if outcome in ("signal", "hang"):
            bad_runs.append(("repeat", prog, i, f"server rc {src}, client rc {crc}"))
    return entry


# ---- chaos runs ----


def chaos_run(prog, i, life):
    victim = args.kill or ("server" if i % 2 == 0 else "client")
    survivor = "client" if victim == "server" else "server"
    # The delay after the client's first output line (its device is open, set-up begins):
    # uniform up to the victim's normal end. Counted from this run's own first line, so that the
    # start-up's jitter (tenths of a second, more than set-up to teardown takes) does not decide.
    after = args.at if args.at is not None else rng.uniform(0.0, max(0.0, life[victim] - life["start"]))
    tag = f"{prog}-chaos{i}"
    server, slog, clog, ready, (ip, port) = start_pair(prog, tag)
    c0 = time.time()
    client = children.start(wrap("client", PROGRAMS[prog]["client"](ip, port, DEV[args.link][1])), clog, env())
    started_pids.append(client.pid)
    procs = {"server": server, "client": client}
    while os.path.getsize(clog) == 0 and client.poll() is None and time.time() - c0 < READY_S:
        time.sleep(0.002)
    first_out = time.time() - c0
    at = first_out + after
    while time.time() - c0 < at and procs[victim].poll() is None:
        time.sleep(0.002)
    while time.time() - c0 < at:   # the victim ended first: the kill still comes at `at`
        time.sleep(0.002)
    victim_done = procs[victim].poll() is not None
    victim_rc = procs[victim].returncode
    killed_at = time.time() - c0
    driver.kill_group(procs[victim], signal.SIGKILL)
    procs[victim].wait()
    if not victim_done:
        victim_rc = "killed"
    t_kill = time.time()
    res = wait_both({survivor: procs[survivor]}, t_kill + args.bound)
    children.stop_all()
    remove_own_runtime_dirs()
    s_rc, s_t = res[survivor]
    s_out = text(slog if survivor == "server" else clog)
    v_out = text(slog if victim == "server" else clog)
    if not signalled(s_rc) and s_rc != 0 and void(s_out, v_out):
        outcome = "void"
    elif signalled(s_rc):
        outcome = "signal"
    elif s_rc == "timeout":
        # A server that never got a connection request is still listening: the client was killed
        # before its REQ left (as on any RNIC, a listener waits for the next client).
        outcome = "idle" if survivor == "server" and not re.search(PROGRAMS[prog]["reached"], s_out) else "hang"
    elif s_rc == 0:
        outcome = "exit0"
    else:
        outcome = "error"
    kept = finish_logs(tag, outcome in ("signal", "hang"))
    entry = dict(phase="chaos", program=prog, link=args.link, run=i, victim=victim, kill_at=round(killed_at, 3),
                 client_first_output_s=round(first_out, 3), kill_after_first_output=round(killed_at - first_out, 3),
                 victim_exited_before=victim_done, victim_rc=victim_rc, survivor=survivor, survivor_rc=s_rc,
                 survivor_after_kill_s=round(s_t, 3), outcome=outcome, survivor_tail=tail(s_out),
                 victim_tail=tail(v_out, 3), logs=kept, ready=ready,
                 reproduce=f"tests/rdmacm/chaos.py --build {args.build} --link {args.link} --programs {prog} "
                           f"--runs 0 --chaos 1 --kill {victim} --at {killed_at - first_out:.3f}")
    driver.append_json(args.json, entry)
    mark = {"signal": "SIGNAL", "hang": "HANG"}.get(outcome, outcome)
    log(f"  {prog} chaos {i}: kill {victim} at {killed_at:.3f} s (+{killed_at - first_out:.3f}){' (it had exited, rc %s)' % victim_rc if victim_done else ''}"
        f"; {survivor} -> {mark} rc {s_rc} after {s_t:.2f} s | {' | '.join(tail(s_out, 2))}")
    if outcome in ("signal", "hang"):
        log("    survivor's last lines: " + " | ".join(entry["survivor_tail"]))
        log("    victim's last lines: " + " | ".join(entry["victim_tail"]))
        log("    reproduce: " + entry["reproduce"] + f"  (logs {kept})")
        bad_runs.append(("chaos", prog, i, f"{victim} killed at {killed_at:.3f} s, {survivor} rc {s_rc}"))
    return entry


# ---- summaries ----


def stats(xs):
    if not xs:
        return "-"
    xs = sorted(xs)
    return "%.2f / %.2f / %.2f" % (xs[0], statistics.median(xs), xs[-1])


def repeat_table(rows):
    out = ["| program (%s) | runs | exit 0 (verified) | error exits | signals | hangs | void | client s min / median / max "
           "| server s min / median / max |" % args.link, "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for prog in args.programs:
        r = [e for e in rows if e["program"] == prog]
        if not r:
            continue
        n = lambda o: sum(1 for e in r if e["outcome"] == o)
        done = [e for e in r if e["outcome"] == "ok"]
        out.append(f"| {CMDLINE[prog]} | {len(r)} | {n('ok')} | {n('error')} | {n('signal')} | {n('hang')} | {n('void')} | "
                   f"{stats([e['client_s'] for e in done])} | {stats([e['server_s'] for e in done])} |")
    return "\n".join(out)


def chaos_table(rows):
    out = ["| program (%s) | runs | exit 0 | error exits | signals | hangs | idle listeners | void | victim had exited "
           "| survivor s after the kill: median / max (ended runs) |" % args.link,
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for prog in args.programs:
        r = [e for e in rows if e["program"] == prog]
        if not r:
            continue
        n = lambda o: sum(1 for e in r if e["outcome"] == o)
        ended = sorted(e["survivor_after_kill_s"] for e in r if e["outcome"] in ("exit0", "error", "signal"))
        st = "%.2f / %.2f" % (statistics.median(ended), ended[-1]) if ended else "-"
        out.append(f"| {CMDLINE[prog]} | {len(r)} | {n('exit0')} | {n('error')} | {n('signal')} | {n('hang')} | "
                   f"{n('idle')} | {n('void')} | {sum(1 for e in r if e['victim_exited_before'])} | {st} |")
    for side in ("server", "client"):
        out.append("")
        out.append(f"survivor {side} (the {'client' if side == 'server' else 'server'} killed): " + "; ".join(
            f"{prog}: " + ", ".join(f"{o} {sum(1 for e in rows if e['program'] == prog and e['survivor'] == side and e['outcome'] == o)}"
                                     for o in ("exit0", "error", "signal", "hang", "idle"))
            for prog in args.programs if any(e["program"] == prog for e in rows)))
    return "\n".join(out)


def main():
    driver.exit_on_signals()
    t_start = time.time()
    repeats, chaos = [], []
    try:
        CONFIGS[:] = [own_config(c) for c in CONF[args.link]]
        if args.link == "veth":
            ensure_netns()
        if args.link == "service":
            service_up()
        log(f"chaos: link {args.link}, build {build}, programs {','.join(args.programs)}, {args.runs} runs, "
            f"{args.chaos} chaos runs each, bound {args.bound:.0f} s, seed {args.seed}, logs in {LOGDIR}")
        for prog in args.programs:
            t0 = time.time()
            mine = [repeat_run(prog, i) for i in range(args.runs)]
            repeats += mine
            if args.runs:
                log(f"{prog}: {args.runs} runs in {time.time() - t0:.0f} s")
            if not args.chaos:
                continue
            # The victims' normal lifetimes from the client's start: the repeat runs', or 5 more.
            good = [e for e in mine if e["outcome"] == "ok"]
            if len(good) < 3:
                good += [e for e in (repeat_run(prog, f"cal{j}") for j in range(5)) if e["outcome"] == "ok"]
            if not good:
                log(f"{prog}: no normal run to measure its lifetime; chaos runs skipped")
                continue
            # The kill comes once the client has its device (its first output line: rping -d,
            # ucmatose and perftest print theirs after their device opened), so that set-up,
            # transfer and teardown are hit, rather than the DPDK start-up most of the time.
            life = {"client": statistics.median(e["client_s"] for e in good),
                    "server": statistics.median(e["server_s"] for e in good),
                    "start": statistics.median(e["client_first_output_s"] or 0.0 for e in good)}
            log(f"{prog}: normal lifetimes from the client's start: client {life['client']:.3f} s, "
                f"server {life['server']:.3f} s, the client's first output at {life['start']:.3f} s "
                f"(median of {len(good)}): kills uniform from the client's first line to {life['client'] - life['start']:.3f} "
                f"/ {life['server'] - life['start']:.3f} s (client / server killed) after it")
            t0 = time.time()
            chaos += [chaos_run(prog, i, life) for i in range(args.chaos)]
            log(f"{prog}: {args.chaos} chaos runs in {time.time() - t0:.0f} s")
    finally:
        cleanup()
    if repeats:
        log("\nRepeat runs:\n" + repeat_table(repeats))
    if chaos:
        log("\nChaos runs (one side SIGKILLed at a uniform moment; bound %.0f s):\n" % args.bound + chaos_table(chaos))
    log(f"\n{len(repeats)} repeat runs, {len(chaos)} chaos runs in {time.time() - t_start:.0f} s; "
        f"{len(bad_runs)} with a signal or a hang")
    for b in bad_runs:
        log("  %s %s run %s: %s" % b)
    if not bad_runs and not args.keep_logs:
        shutil.rmtree(LOGDIR, ignore_errors=True)
    else:
        log(f"logs kept in {LOGDIR}")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
