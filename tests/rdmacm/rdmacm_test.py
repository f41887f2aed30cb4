#!/usr/bin/env python3
"""rdmacm suite driver: unmodified rdmacm-utils and perftest -R programs on uroce through
liburoce-verbs.so and liburoce-rdmacm.so (scripts/uroce-run preloads both), uroce <-> uroce
over memif (config/memif-*.conf) or the netns veth pair (scripts/netns-pair, config/veth-*.conf).
Each program's exit status and its own output are checked (rping -v prints every payload it
verified; ucmatose, udaddy, mckey, rdma_client print their result), plus the failure path: a client
connecting to a port nobody listens on gets REJECTED (reason 8, invalid service ID) and exits
within a bounded time. Every run is bounded; processes, namespaces and DPDK runtime
directories are cleaned up on every exit (tests/support/driver.py). One JSON line per run to
--results.

usage: rdmacm_test.py --root REPO --lib liburoce-verbs.so --cmlib liburoce-rdmacm.so
                      [--results FILE] [--api-test BIN] [--vanish BIN] [--socket-echo BIN]
                      memif|veth|perftest|api|vanish|rsockets
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

suite = driver.Suite([(["--cmlib"], {"required": True}), (["--api-test"], {"default": ""}),
                     (["--vanish"], {"default": "", "help": "tests/rdmacm/vanish.cpp's binary (scenario vanish)"}),
                     (["--socket-echo"], {"default": "", "help": "tests/rdmacm/socket_echo.cpp's binary (scenario rsockets)"})])
args = suite.args
children, netns, cleanup, record = suite.children, suite.netns, suite.cleanup, suite.record
LOGDIR = "/tmp"
# The server's address on each link (the uroce endpoint's own, not the kernel's).
SERVER_IP = {"memif": "198.19.0.1", "veth": "198.18.0.12"}
CLIENT_IP = {"memif": "198.19.0.2", "veth": "198.18.0.11"}
# mckey's group: administratively scoped (239/8), MAC 01:00:5e:12:00:09.
MCKEY_GROUP = "239.18.0.9"
# librspreload: rdma-core's preload that makes a program's TCP sockets rsockets.
RSPRELOAD = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"
# Ports: a different one per run, so that a TimeWait of the last run is never in the way.
port_counter = [7000 + (os.getpid() % 500) * 4]
# A client that finds nobody listening yet (the server is still starting) is run again, at most
# this long: the server's start-up is not a property of the code under test.
READY_S = 20
# How long a refused connection may take to be reported, program start-up included.
REFUSED_S = 10
# How long an unanswered REQ may take to end in UNREACHABLE: 16 waits of 268 ms (the library's
# CM response timeout, 15 resends; engine/param.hpp kRdmacmResponseTimeout), ARP and start-up.
UNREACHABLE_S = 15
# The vanish scenario's client after the kill: its SEND's retries (6 of 67 ms local ACK timeout,
# kRdmacmAckTimeout), its DREQ's 16 waits of 268 ms, TimeWait (1 s), with room.
VANISH_S = 30


log = driver.log
failures, check = driver.failures, driver.check


def next_port():
    port_counter[0] += 1
    return port_counter[0]


def wrap(link, side, cmd):
    """One side's command line: its namespace (veth) and uroce-run with its config."""
    if link == "veth":
        conf, pre = ("veth-b.conf", ["ip", "netns", "exec", "uroce-b"]) if side == "server" else \
                    ("veth-a.conf", ["ip", "netns", "exec", "uroce-a"])
    else:
        conf, pre = ("memif-server.conf" if side == "server" else "memif-client.conf"), []
    run = [suite.run, "--config", suite.config(conf), "--no-device-view", "--"]
    # stdbuf goes first: it then runs before uroce-run's preloads (its LD_PRELOAD comes last in
    # the program's). With a sanitizer's runtime preloaded ($UROCE_PRELOAD, docs/reliability.md),
    # coreutils' stdbuf itself hangs at its start.
    if cmd[:2] == ["stdbuf", "-oL"]:
        return pre + cmd[:2] + run + cmd[2:]
    return pre + run + cmd


def env(extra=None):
    return dict(os.environ, UROCE_VERBS_LIB=args.lib, UROCE_RDMACM_LIB=args.cmlib, **(extra or {}))


def text(path):
    with open(path, errors="replace") as f:
        return f.read()


def pair(link, name, server_cmd, client_cmd, timeout=60, server_exits=True, retry_refused=True, ready_line=None,
         extra_env=None, lost_race=None):
    """Starts the server, then the client; returns (client rc, client output, server rc, server
    output, seconds the client took). The client starts once the server has printed
    `ready_line` (programs that print it right before rdma_listen, after their event channel
    has started the device), or, for programs that print nothing first and make one connection,
    is run again while it is refused (the server is not listening yet; a refused attempt
    leaves nothing behind). `lost_race(client output)`: the client failed in a way that leaves
    the server waiting for ever (perftest's race, below): the server is stopped, not waited for."""
    slog = os.path.join(LOGDIR, "uroce-rdmacm-server.log")
    clog = os.path.join(LOGDIR, "uroce-rdmacm-client.log")
    log("+ server:", " ".join(server_cmd))
    # Line-buffered, so that the server's lines are in its log as it prints them.
    server = children.start(wrap(link, "server", ["stdbuf", "-oL"] + server_cmd), slog, env(extra_env))
    t0 = time.time()
    if ready_line:
        while ready_line not in text(slog) and server.poll() is None and time.time() - t0 < READY_S:
            time.sleep(0.05)
        check(ready_line in text(slog), "%s over %s: the server printed %r" % (name, link, ready_line))
        # From its print to rdma_listen: no waits, a few calls; but with a build running beside
        # the test, 0.2 s was once too short (ib_write_bw -R's client REJECTED, reason 8).
        time.sleep(1.0)
    while True:
        log("+ client:", " ".join(client_cmd))
        c0 = time.time()
        client = children.start(wrap(link, "client", ["stdbuf", "-oL"] + client_cmd), clog, env(extra_env))
        crc = children.finish(client, timeout)
        took = time.time() - c0
        cout = text(clog)
        refused = "RDMA_CM_EVENT_REJECTED" in cout or "Connection refused" in cout or "rejected" in cout
        if retry_refused and crc != 0 and refused and server.poll() is None and time.time() - t0 < READY_S:
            time.sleep(0.5)
            continue
        break
    if lost_race and crc != 0 and lost_race(cout):
        src = "stopped (its client lost perftest's race)"
        children.stop_all()
    elif server_exits:
        src = children.finish(server, timeout)
    else:
        src = "running"
        children.stop_all()
    sout = text(slog)
    log("--- client (rc %s, %.2f s):\n%s--- server (rc %s):\n%s" % (crc, took, cout[-4000:], src, sout[-4000:]))
    return crc, cout, src, sout, took


def run(link, name, server_cmd, client_cmd, ok_fn, **kw):
    crc, cout, src, sout, took = pair(link, name, server_cmd, client_cmd, **kw)
    verdict(link, name, server_cmd, client_cmd, crc, src, *ok_fn(crc, cout, src, sout))


def verdict(link, name, server_cmd, client_cmd, crc, src, ok, detail, **extra):
    """The pair's check, its record and its PASS/FAIL line."""
    check(ok, "%s over %s: %s" % (name, link, detail))
    record({"tool": name, "link": link, "client": " ".join(client_cmd), "server": " ".join(server_cmd),
            "ok": ok, "client_rc": crc, "server_rc": src, "result": detail, **extra})
    log("%s %s over %s: %s" % ("PASS" if ok else "FAIL", name, link, detail))


# ---- the programs ----


def rping(link, count=10):
    ip, port = SERVER_IP[link], next_port()

    def ok(crc, cout, src, sout):
        # rping -v prints each payload it received; the pattern moves by one letter per ping.
        want = ["rdma-ping-%d: " % i for i in range(count)]
        got_c = [w for w in want if ("ping data: " + w) in cout]
        got_s = [w for w in want if ("server ping data: " + w) in sout]
        good = crc == 0 and src == 0 and len(got_c) == count and len(got_s) == count
        return good, "client rc %s, server rc %s, %d/%d pings verified by the client, %d/%d by the server" % (
            crc, src, len(got_c), count, len(got_s), count)
    run(link, "rping -v -C %d" % count, ["rping", "-s", "-a", ip, "-p", str(port), "-v", "-C", str(count)],
        ["rping", "-c", "-a", ip, "-p", str(port), "-v", "-C", str(count)], ok)


def no_listener(link):
    """rping -c to a port where nobody listens: REJECTED (8, invalid service ID), exit 255."""
    ip, port = SERVER_IP[link], next_port()

    def ok(crc, cout, src, sout):
        rej = re.search(r"RDMA_CM_EVENT_REJECTED, error (\d+)", cout)
        good = crc not in (0, "timeout") and rej is not None and rej.group(1) == "8" and took[0] < REFUSED_S
        return good, "client rc %s after %.2f s (bound %d s), %s" % (
            crc, took[0], REFUSED_S, rej.group(0) if rej else "no REJECTED event")
    took = [0.0]
    # The server listens on another port (it also keeps the memif link up for the client).
    crc, cout, src, sout, t = pair(link, "no-listener", ["rping", "-s", "-a", ip, "-p", str(port + 1), "-C", "1"],
                                   ["rping", "-c", "-a", ip, "-p", str(port), "-C", "1"], timeout=30,
                                   server_exits=False, retry_refused=False)
    took[0] = t
    good, detail = ok(crc, cout, src, sout)
    check(good, "rping to a port nobody listens on, over %s: %s" % (link, detail))
    record({"tool": "rping (no listener)", "link": link, "ok": good, "client_rc": crc, "result": detail})
    log("%s rping (no listener) over %s: %s" % ("PASS" if good else "FAIL", link, detail))


def unreachable(link):
    """rping -c to an address with no CM behind it (the kernel's own address on the veth pair:
    it answers ARP but has no RoCE): the REQ goes unanswered through all its resends and the
    client gets UNREACHABLE (ETIMEDOUT) within a bounded time."""
    ip = "198.18.0.2"
    port = next_port()
    clog = os.path.join(LOGDIR, "uroce-rdmacm-client.log")
    cmd = ["rping", "-c", "-a", ip, "-p", str(port), "-C", "1"]
    log("+ client:", " ".join(cmd))
    t0 = time.time()
    crc = children.finish(children.start(wrap(link, "client", ["stdbuf", "-oL"] + cmd), clog, env()), 60)
    took = time.time() - t0
    cout = text(clog)
    log("--- client (rc %s, %.2f s):\n%s" % (crc, took, cout[-2000:]))
    ev = re.search(r"RDMA_CM_EVENT_UNREACHABLE, error (-?\d+)", cout)
    good = crc not in (0, "timeout") and ev is not None and took < UNREACHABLE_S
    detail = "client rc %s after %.2f s (bound %d s), %s" % (crc, took, UNREACHABLE_S,
                                                          ev.group(0) if ev else "no UNREACHABLE event")
    check(good, "rping to an address without a CM, over %s: %s" % (link, detail))
    record({"tool": "rping (no CM at the address)", "link": link, "ok": good, "client_rc": crc, "result": detail})
    log("%s rping (no CM at the address) over %s: %s" % ("PASS" if good else "FAIL", link, detail))


def ucmatose(link, conns=4, msgs=10):
    ip, port = SERVER_IP[link], next_port()

    def ok(crc, cout, src, sout):
        good = crc == 0 and src == 0 and "return status 0" in cout and "return status 0" in sout and \
            "data transfers complete" in cout
        return good, "client rc %s, server rc %s, %d connections x %d messages" % (crc, src, conns, msgs)
    run(link, "ucmatose -c %d -C %d" % (conns, msgs),
        ["ucmatose", "-b", ip, "-p", str(port), "-c", str(conns), "-C", str(msgs)],
        ["ucmatose", "-s", ip, "-p", str(port), "-c", str(conns), "-C", str(msgs)], ok,
        retry_refused=False, ready_line="cmatose: starting server")


def udaddy(link, conns=2, msgs=10):
    """udaddy's port is fixed (7174; its -p is the port space): UD ids have no TimeWait."""
    ip = SERVER_IP[link]

    def ok(crc, cout, src, sout):
        good = crc == 0 and src == 0 and "return status 0" in cout and "return status 0" in sout
        return good, "client rc %s, server rc %s, %d UD ids (SIDR) x %d messages" % (crc, src, conns, msgs)
    run(link, "udaddy -c %d -C %d" % (conns, msgs),
        ["udaddy", "-b", ip, "-c", str(conns), "-C", str(msgs)],
        ["udaddy", "-s", ip, "-c", str(conns), "-C", str(msgs)], ok,
        retry_refused=False, ready_line="udaddy: starting server")


def mckey(link, msgs=10):
    """mckey: UD multicast through rdma_join_multicast. The receiver (-b the server's address)
    joins and waits for `msgs` datagrams; the sender (-s) joins the same group and, 3 s later,
    sends them to QP 0xFFFFFF. The receiver returns only once all have arrived."""

    def ok(crc, cout, src, sout):
        joined = "mckey: joined dgid: ::ffff:%s" % MCKEY_GROUP
        good = crc == 0 and src == 0 and joined in cout and joined in sout and \
            "data transfers complete" in sout and "return status 0" in sout
        return good, "sender rc %s, receiver rc %s, %d datagrams to %s received" % (crc, src, msgs, MCKEY_GROUP)
    run(link, "mckey -C %d" % msgs, ["mckey", "-m", MCKEY_GROUP, "-b", SERVER_IP[link], "-C", str(msgs)],
        ["mckey", "-m", MCKEY_GROUP, "-b", CLIENT_IP[link], "-s", "-C", str(msgs)], ok,
        timeout=30, retry_refused=False, ready_line="mckey: joined dgid")


def rdma_server_client(link):
    ip, port = SERVER_IP[link], next_port()

    def ok(crc, cout, src, sout):
        good = crc == 0 and src == 0 and "rdma_client: end 0" in cout and "rdma_server: end 0" in sout
        return good, "client rc %s, server rc %s (rdma_create_ep, rdma_get_request, synchronous ids)" % (crc, src)
    run(link, "rdma_server/rdma_client", ["rdma_server", "-s", ip, "-p", str(port)],
        ["rdma_client", "-s", ip, "-p", str(port)], ok)


def cmtime(link, conns=20):
    ip, port = SERVER_IP[link], next_port()

    def ok(crc, cout, src, sout):
        steps = re.findall(r"^(connect|disconnect)\s+:", cout, re.M)
        good = crc == 0 and len(steps) == 2
        return good, "client rc %s, %d connections made and torn down" % (crc, conns)
    # The cmtime server keeps listening until it is stopped.
    run(link, "cmtime -c %d" % conns, ["cmtime", "-b", ip, "-p", str(port), "-c", str(conns)],
        ["cmtime", "-s", ip, "-p", str(port), "-c", str(conns)], ok, server_exits=False)


# perftest 4.5 (Debian 12) makes two connections, and its server listens for the second only
# after the first's exchange: a fast client's second REQ can come first and be REJECTED (reason
# 8, nobody listens), after which that perftest's client gives up ("Failed to create RDMA CM
# connection") and its server waits for ever (docs/rdma_cm.md, "perftest -R"; the interop
# matrix does the same). Such a pair is stopped and run again on a new port, at most
# PERFTEST_ATTEMPTS pairs in all; any other failure fails at once.
PERFTEST_ATTEMPTS = 4


def perftest_lost_race(cout):
    return "RDMA_CM_EVENT_REJECTED; error: 8" in cout


def perftest(link, tool, opts, size):
    ip = SERVER_IP[link]
    dev = {"memif": ("uroce-memif-s", "uroce-memif-c"), "veth": ("uroce-veth-b", "uroce-veth-a")}[link]

    def ok(crc, cout, src, sout):
        lines = [l for l in cout.splitlines() if re.match(r"^\s*%d\s+\d+\s+[\d.]+" % size, l)]
        good = crc == 0 and src == 0 and len(lines) == 1
        return good, "client rc %s, server rc %s, result line: %s" % (crc, src, lines[0].strip() if lines else "none")
    # The server prints its banner once its device is open and it listens; a refused first
    # client is not run again here: a second client would find the server waiting for the test's
    # own connection, not the exchange one (docs/rdma_cm.md, "perftest -R").
    name = "%s -R %s" % (tool, " ".join(opts))
    for attempt in range(1, PERFTEST_ATTEMPTS + 1):
        port = next_port()
        last = attempt == PERFTEST_ATTEMPTS
        server_cmd = [tool, "-R", "-d", dev[0], "-p", str(port)] + opts
        client_cmd = [tool, "-R", "-d", dev[1], "-p", str(port)] + opts + [ip]
        crc, cout, src, sout, _ = pair(link, name, server_cmd, client_cmd, retry_refused=False,
                                       ready_line="Waiting for client to connect", lost_race=perftest_lost_race)
        if last or not (crc != 0 and perftest_lost_race(cout)):
            break
        log("%s over %s: attempt %d of %d lost perftest's race (the client's REQ before the server's "
            "rdma_listen: REJECTED, reason 8); a new pair" % (name, link, attempt, PERFTEST_ATTEMPTS))
    good, detail = ok(crc, cout, src, sout)
    detail += " (attempt %d of %d)" % (attempt, PERFTEST_ATTEMPTS) if attempt > 1 else ""
    verdict(link, name, server_cmd, client_cmd, crc, src, good, detail, attempts=attempt)


def rsockets(link):
    """rsockets: librdmacm's socket API over RDMA (rsocket.c in the real librdmacm, whose rdma_*
    and ibv_* calls reach uroce's libraries, preloaded before it). rstream's whole matrix
    (latency and bandwidth, 64 B to 1 MiB), riostream (rsockets' RDMA WRITE to a mapped buffer,
    riomap/riowrite), rcopy of a file of random bytes compared after, and a plain TCP program
    (socket_echo: no RDMA call) whose sockets librspreload turns into rsockets."""
    ip = SERVER_IP[link]
    port = next_port()

    def table_ok(rows):
        def ok(crc, cout, src, sout):
            got = re.findall(r"^(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$", cout, re.M)
            good = crc == 0 and src == 0 and len(got) == rows
            return good, "client rc %s, server rc %s, %d of %d result rows (%s)" % (crc, src, len(got), rows, " ".join(got))
        return ok
    run(link, "rstream", ["rstream", "-b", ip, "-p", str(port)], ["rstream", "-s", ip, "-p", str(port)], table_ok(8))
    port = next_port()
    run(link, "riostream -S 65536 -C 1000", ["riostream", "-b", ip, "-p", str(port), "-S", "65536", "-C", "1000"],
        ["riostream", "-s", ip, "-p", str(port), "-S", "65536", "-C", "1000"], table_ok(1))
    src_file, dst_file = os.path.join(LOGDIR, "uroce-rcopy-src.bin"), os.path.join(LOGDIR, "uroce-rcopy-dst.bin")
    with open(src_file, "wb") as f:
        f.write(os.urandom(3 << 20))
    driver.remove(dst_file)
    port = next_port()

    def copied(crc, cout, src, sout):
        same = os.path.exists(dst_file) and open(src_file, "rb").read() == open(dst_file, "rb").read()
        return crc == 0 and same, "client rc %s, %d bytes, the copy %s" % (
            crc, 3 << 20, "identical" if same else "missing or different")
    # rcopy's client takes its options after the file names (its usage 2).
    run(link, "rcopy (3 MiB)", ["rcopy", "-p", str(port)], ["rcopy", src_file, "%s:%s" % (ip, dst_file), "-p", str(port)],
        copied, server_exits=False)
    for f in (src_file, dst_file):
        driver.remove(f)
    port = next_port()
    preload = {"UROCE_PRELOAD": RSPRELOAD}

    def echoed(crc, cout, src, sout):
        good = crc == 0 and src == 0 and "the same" in cout and ("from %s" % CLIENT_IP[link]) in sout
        line = [l for l in cout.splitlines() if l.startswith("socket_echo:")]
        return good, "client rc %s, server rc %s: %s" % (crc, src, line[-1] if line else "no result")
    run(link, "socket_echo under librspreload (4 MiB)", [args.socket_echo, "server", ip, str(port)],
        [args.socket_echo, "client", ip, str(port)], echoed, extra_env=preload, ready_line="socket_echo: listening")


# ---- scenarios ----


def sc_memif():
    rping("memif")
    no_listener("memif")
    ucmatose("memif")
    rdma_server_client("memif")
    udaddy("memif")
    mckey("memif")
    cmtime("memif")


def sc_veth():
    netns.up()
    rping("veth")
    no_listener("veth")
    ucmatose("veth")
    rdma_server_client("veth")
    udaddy("veth")
    mckey("veth")
    cmtime("veth")
    unreachable("veth")
    perftest("veth", "ib_write_bw", ["-n", "200", "-s", "4096"], 4096)


def sc_perftest():
    # Functional runs with few iterations (not measurements): the connection through rdma_cm,
    # then the transfer; the result line must be there.
    perftest("memif", "ib_write_bw", ["-n", "200", "-s", "4096"], 4096)
    perftest("memif", "ib_send_lat", ["-n", "200", "-s", "64"], 64)
    perftest("memif", "ib_read_bw", ["-n", "200", "-s", "4096"], 4096)


def sc_api():
    """api_test in one process on the veth endpoint uroce-a (connections to its own address)."""
    netns.up()
    out = os.path.join(LOGDIR, "uroce-rdmacm-api.log")
    rc = children.finish(children.start(wrap("veth", "client", [args.api_test, "198.18.0.11"]), out, env()), 60)
    t = text(out)
    log(t)
    lines = [l for l in t.splitlines() if l.startswith(("ok:", "FAIL:"))]
    good = rc == 0 and "all passed" in t
    check(good, "api_test (rc %s)" % rc)
    record({"tool": "api_test", "link": "veth (loopback)", "ok": good, "client_rc": rc,
            "result": "%d checks, %d failed" % (len(lines), sum(l.startswith("FAIL") for l in lines))})


def sc_vanish():
    """A peer that disappears: the server (uroce-b) is SIGKILLed once both sides are
    ESTABLISHED, so no DREQ is ever sent; the client (uroce-a, tests/rdmacm/vanish.cpp) must see
    its SEND fail with RETRY_EXC_ERR, then DISCONNECTED after its unanswered DREQ, then
    TIMEWAIT_EXIT, each within a bound (VANISH_S for the whole client)."""
    netns.up()
    port = str(next_port())
    go = "/tmp/uroce-rdmacm-vanish.go"
    driver.remove(go)
    slog = os.path.join(LOGDIR, "uroce-rdmacm-vanish-server.log")
    clog = os.path.join(LOGDIR, "uroce-rdmacm-vanish-client.log")
    ip = SERVER_IP["veth"]
    server = children.start(wrap("veth", "server", [args.vanish, "server", ip, port]), slog, env())
    t0 = time.time()
    while "listening" not in text(slog) and server.poll() is None and time.time() - t0 < READY_S:
        time.sleep(0.05)
    client = children.start(wrap("veth", "client", [args.vanish, "client", ip, port, go]), clog, env())
    while not ("established" in text(slog) and "established" in text(clog)) and client.poll() is None and \
            time.time() - t0 < READY_S + 10:
        time.sleep(0.05)
    both = "established" in text(slog) and "established" in text(clog)
    driver.kill_group(server, signal.SIGKILL)  # the server's process dies without a word
    server.wait()
    open(go, "w").close()
    t1 = time.time()
    crc = children.finish(client, VANISH_S)
    took = time.time() - t1
    driver.remove(go)
    cout = text(clog)
    log("--- client (rc %s, %.2f s after the kill):\n%s--- server:\n%s" % (crc, took, cout, text(slog)))
    lines = [l for l in cout.splitlines() if l.startswith(("ok:", "FAIL:"))]
    good = both and crc == 0 and "all passed" in cout
    detail = "; ".join(l for l in lines if "after" in l) or "no result lines"
    check(good, "vanish: a peer killed mid-connection (rc %s, %.1f s): %s" % (crc, took, detail))
    record({"tool": "vanish (peer killed mid-connection)", "link": "veth", "ok": good, "client_rc": crc,
            "result": detail})


def sc_rsockets():
    rsockets("memif")


SCEN = {"memif": sc_memif, "veth": sc_veth, "perftest": sc_perftest, "api": sc_api, "vanish": sc_vanish,
        "rsockets": sc_rsockets}

driver.run_scenario(SCEN, args.scenario, cleanup)
