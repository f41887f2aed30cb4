#!/usr/bin/env python3
"""Shim suite driver: unmodified Debian perftest and ibverbs-utils binaries on uroce through
liburoce-verbs.so (scripts/uroce-run), over the netns veth pair (scripts/netns-pair, af_packet)
and over memif. Checks exit codes and result lines; appends one JSON line per run to
--results (docs/interop.md is made from it). Every scenario cleans up after itself (processes,
memif socket, namespaces, DPDK runtime directories), also when it fails.

usage: shim_test.py --root REPO --lib liburoce-verbs.so [--results FILE] [--cxx-test BIN] SCENARIO
(--cxx-test: shim_data_test for scenario cxx, api_sweep for scenario sweep, stress for stress)
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

suite = driver.Suite([(["--cxx-test"], {"default": ""})])
args = suite.args
children, netns, cleanup, record = suite.children, suite.netns, suite.cleanup, suite.record
port_counter = [19000 + (os.getpid() % 500) * 2]
log = driver.log


def start(cmd, out):
    return children.start(cmd, out, dict(os.environ, UROCE_VERBS_LIB=args.lib))


def finish(p, timeout):
    return children.finish(p, timeout)


def ns_up():
    netns.up()


def next_port():
    port_counter[0] += 1
    return port_counter[0]


def wrap(link, side, cmd):
    """The command line for one side: namespace (veth) and uroce-run with that side's config."""
    if link == "veth":
        conf = "veth-b.conf" if side == "server" else "veth-a.conf"
        pre = driver.NSB if side == "server" else driver.NSA
    else:
        conf = "memif-server.conf" if side == "server" else "memif-client.conf"
        pre = []
    return pre + [suite.run, "--config", suite.config(conf), "--"] + cmd


def dev(link, side):
    if link == "veth":
        return "uroce-veth-b" if side == "server" else "uroce-veth-a"
    return "uroce-memif-s" if side == "server" else "uroce-memif-c"


def peer_addr(link):
    return "198.18.0.2" if link == "veth" else "127.0.0.1"


def wait_memif_socket(server, t=10):
    t0 = time.time()
    while time.time() - t0 < t:
        if "@" + driver.SOCK in open("/proc/net/unix").read():
            return True
        if server.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def wait_listen(link, port, server, t=15):
    """perftest's server opens the device, then listens on TCP `port`."""
    return driver.wait_listening(link, port, server, t)


failures, check = driver.failures, driver.check


BW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
# The last field, t_stdev, is "-nan" when perftest's variance sum overflows (a run with outliers).
LAT_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|-?nan)")


def result_lines(text, lat):
    out = []
    for line in text.splitlines():
        m = (LAT_RE if lat else BW_RE).match(line)
        if m:
            out.append(line.strip())
    return out


def verdict(ok, tag, crc, src, dt, lines, ctext, stext):
    """Logs one client/server run: a line with both exit codes, the client's result `lines`,
    both outputs' tails if it failed; check()s ok under `tag`."""
    log("%-6s %-44s client=%s server=%s %.1fs" % ("ok" if ok else "FAIL", tag, crc, src, dt))
    for l in lines:
        log("    " + l)
    if not ok:
        log("---- client output\n" + ctext[-3000:] + "\n---- server output\n" + stext[-3000:])
    check(ok, tag)


def run_perftest(link, tool, opts, sizes=None, timeout=60, expect_sizes=None):
    """One perftest client/server pair; returns True when both exit 0 with result lines."""
    port = next_port()
    lat = tool.endswith("_lat")
    scmd = wrap(link, "server", [tool, "-d", dev(link, "server"), "-p", str(port)] + opts)
    ccmd = wrap(link, "client", [tool, "-d", dev(link, "client"), "-p", str(port)] + opts + [peer_addr(link)])
    tag = "%s %s %s" % (link, tool, " ".join(opts))
    sf = open("/tmp/uroce-shim-server.log", "w+")
    cf = open("/tmp/uroce-shim-client.log", "w+")
    t0 = time.time()
    s = start(scmd, sf)
    ok_start = wait_memif_socket(s) if link == "memif" else True
    ok_start = ok_start and wait_listen(link, port, s)
    c = start(ccmd, cf)
    crc = finish(c, timeout)
    src = finish(s, 10 if crc == 0 else 3)
    dt = time.time() - t0
    sf.seek(0)
    cf.seek(0)
    stext, ctext = sf.read(), cf.read()
    cleanup_procs()
    clines = result_lines(ctext, lat)
    slines = result_lines(stext, lat)
    ok = crc == 0 and src == 0 and len(clines) > 0 and ok_start
    if expect_sizes:
        got = {int(l.split()[0]) for l in clines}
        ok = ok and all(x in got for x in expect_sizes)
    verdict(ok, tag, crc, src, dt, clines, ctext, stext)
    record({"tool": tool, "options": " ".join(opts), "link": link, "ok": ok,
            "client_rc": crc, "server_rc": src, "result": clines, "server_result": slines,
            "seconds": round(dt, 1)})
    return ok


def cleanup_procs():
    children.stop_all()


def run_pingpong(link, server_side_ns, opts, timeout=40, tool="ibv_rc_pingpong"):
    """ibv_rc_pingpong (or ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong); server_side_ns
    picks which veth namespace is the server (both ways)."""
    port = next_port()
    if link == "veth":
        if server_side_ns == "b":
            spre, cpre, sconf, cconf, sdev, cdev, peer = driver.NSB, driver.NSA, "veth-b.conf", "veth-a.conf", "uroce-veth-b", "uroce-veth-a", "198.18.0.2"
        else:
            spre, cpre, sconf, cconf, sdev, cdev, peer = driver.NSA, driver.NSB, "veth-a.conf", "veth-b.conf", "uroce-veth-a", "uroce-veth-b", "198.18.0.1"
    else:
        spre, cpre, sconf, cconf, sdev, cdev, peer = [], [], "memif-server.conf", "memif-client.conf", "uroce-memif-s", "uroce-memif-c", "127.0.0.1"
    gid = [] if "-g" in opts else ["-g", "1"]
    base = [tool] + gid + ["-p", str(port)] + opts
    scmd = spre + [suite.run, "--config", suite.config(sconf), "--"] + base + ["-d", sdev]
    ccmd = cpre + [suite.run, "--config", suite.config(cconf), "--"] + base + ["-d", cdev, peer]
    tag = "%s %s %s (server in %s)" % (link, tool, " ".join(opts), server_side_ns)
    sf = open("/tmp/uroce-shim-server.log", "w+")
    cf = open("/tmp/uroce-shim-client.log", "w+")
    t0 = time.time()
    s = start(scmd, sf)
    if link == "memif":
        wait_memif_socket(s)
    # The pingpongs listen only after opening the device: wait for the port.
    t1 = time.time()
    while time.time() - t1 < 15:
        out = subprocess.run(spre + ["ss", "-ltnH"], capture_output=True, text=True).stdout
        if re.search(r":%d\b" % port, out) or s.poll() is not None:
            break
        time.sleep(0.05)
    c = start(ccmd, cf)
    crc = finish(c, timeout)
    src = finish(s, 10)
    dt = time.time() - t0
    sf.seek(0)
    cf.seek(0)
    stext, ctext = sf.read(), cf.read()
    cleanup_procs()
    res = [l.strip() for l in ctext.splitlines() if "iters in" in l or "bytes in" in l]
    sres = [l.strip() for l in stext.splitlines() if "iters in" in l]
    ok = crc == 0 and src == 0 and len(res) == 2 and len(sres) == 1
    if tool == "ibv_xsrq_pingpong":
        # XRC: no timing lines; each side prints the SRQ numbers exchanged and "success" once
        # every message came through its XRC SRQ and the termination handshake is done.
        res = [l.strip() for l in ctext.splitlines() if "SRQN" in l]
        ok = crc == 0 and src == 0 and "success" in ctext.split() and "success" in stext.split()
    elif "-c" in opts:
        # --chk: each side says "invalid data in page N" for a buffer that came in wrong.
        bad = [l.strip() for l in (ctext + stext).splitlines() if "invalid data" in l]
        res += bad[:3]
        ok = ok and not bad
    if "-t" in opts:
        # Completion timestamps (ibv_cq_ex, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP): each side prints
        # the max, min and average time between its receive completions in device clock ticks,
        # which uroce's hca_core_clock (1 GHz) makes nanoseconds. Every receive completion but
        # the first falls within the program's own timed loop (gettimeofday): the server starts
        # its clock after the TCP exchange, and the client's first send may arrive (and be
        # stamped by the engine's thread) before the server's main thread has read it (seen in
        # CI, a 2.5 ms gap). So the span, (iterations - 1) times the average, less the largest
        # gap (which covers the first), is at most that loop's time. The tick's length itself:
        # the API sweep.
        iters = int(opts[opts.index("-n") + 1]) if "-n" in opts else 1000
        for text in (ctext, stext):
            got = dict(re.findall(r"(Max|Min|Average) receive completion clock cycles = ([0-9.]+)", text))
            per = re.search(r"iters in [0-9.]+ seconds = ([0-9.]+) usec/iter", text)
            good = len(got) == 3 and per is not None
            if good:
                mx, mn, avg, usec = float(got["Max"]), float(got["Min"]), float(got["Average"]), float(per.group(1))
                good = 0 < mn <= avg <= mx and avg * (iters - 1) - mx <= usec * 1000 * iters * 1.02
                res.append("completion times: min %.0f, average %.0f, max %.0f ns; %.2f usec/iter" % (mn, avg, mx, usec))
            else:
                res.append("completion times: not printed")
            ok = ok and good
    verdict(ok, tag, crc, src, dt, res, ctext, stext)
    record({"tool": tool, "options": " ".join(gid + opts) + " (server in " + server_side_ns + ")",
            "link": link, "ok": ok, "client_rc": crc, "server_rc": src, "result": res, "seconds": round(dt, 1)})


def run_devinfo(link):
    cmd = wrap(link, "server" if link == "memif" else "client", ["ibv_devinfo", "-v"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, UROCE_VERBS_LIB=args.lib))
    d = dev(link, "server" if link == "memif" else "client")
    ok = (r.returncode == 0 and re.search(r"hca_id:\s+%s\b" % d, r.stdout) is not None and
          "PORT_ACTIVE" in r.stdout and "Ethernet" in r.stdout and "RoCE v2" in r.stdout)
    gids = [l.strip() for l in r.stdout.splitlines() if "GID[" in l]
    log("%-6s %s ibv_devinfo -v rc=%d" % ("ok" if ok else "FAIL", link, r.returncode))
    for l in gids:
        log("    " + l)
    if not ok:
        log(r.stdout[-3000:] + r.stderr[-2000:])
    check(ok, link + " ibv_devinfo -v")
    record({"tool": "ibv_devinfo", "options": "-v", "link": link, "ok": ok, "client_rc": r.returncode,
            "server_rc": "", "result": [l for l in r.stdout.splitlines() if "hca_id" in l or "active_mtu" in l] + gids})


# ---- Scenarios ------------------------------------------------------------------------------
def sc_devinfo():
    ns_up()
    run_devinfo("veth")
    cleanup()
    run_devinfo("memif")


def sc_pingpong():
    ns_up()
    run_pingpong("veth", "b", ["-n", "200"])
    run_pingpong("veth", "a", ["-n", "200"])
    run_pingpong("veth", "b", ["-n", "200", "-e"])
    run_pingpong("veth", "a", ["-n", "200", "-N"])   # ibv_wr_* (ibv_create_qp_ex, ibv_qp_to_qp_ex)
    run_pingpong("veth", "b", ["-n", "200", "-t"])   # completion timestamps (ibv_create_cq_ex, ibv_start_poll)
    run_pingpong("veth", "b", ["-n", "100", "-s", "65536", "-m", "1024"])
    # On-demand paging: an explicit ODP MR, then the implicit one (the whole address space)
    # prefetched with ibv_advise_mr; --chk: every received buffer checked.
    run_pingpong("veth", "a", ["-n", "200", "-o", "-c"])
    run_pingpong("veth", "b", ["-n", "200", "-O", "-P", "-c"])
    cleanup()
    run_pingpong("memif", "s", ["-n", "200", "-m", "4096", "-s", "16384"])


def sc_ud_uc():
    """UD and UC queue pairs and SRQ, with rdma-core's own example programs, both ways."""
    ns_up()
    run_pingpong("veth", "b", ["-n", "200"], tool="ibv_ud_pingpong")
    run_pingpong("veth", "a", ["-n", "200", "-s", "1024"], tool="ibv_ud_pingpong")
    run_pingpong("veth", "b", ["-n", "200"], tool="ibv_uc_pingpong")
    run_pingpong("veth", "a", ["-n", "100", "-s", "65536", "-m", "1024"], tool="ibv_uc_pingpong")
    run_pingpong("veth", "b", ["-n", "200"], tool="ibv_srq_pingpong")
    # XRC: a domain, an XRC SRQ, initiator and target QPs on each side (one client: the
    # server's messages for client i go through client (i + k)'s QPs, whose domain is that
    # client's own process's here).
    run_pingpong("veth", "a", ["-n", "200"], tool="ibv_xsrq_pingpong")
    run_pingpong("veth", "b", ["-n", "100", "-e", "-s", "8192"], tool="ibv_xsrq_pingpong")
    # perftest over UD and UC.
    run_perftest("veth", "ib_send_bw", ["-c", "UD", "-n", "1000", "-s", "1024"], expect_sizes=[1024])
    run_perftest("veth", "ib_send_lat", ["-c", "UD", "-n", "500", "-s", "64"], expect_sizes=[64])
    run_perftest("veth", "ib_send_bw", ["-c", "UC", "-n", "1000", "-s", "8192"], expect_sizes=[8192])
    run_perftest("veth", "ib_write_bw", ["-c", "UC", "-n", "1000", "-s", "8192"], expect_sizes=[8192])
    run_perftest("veth", "ib_write_lat", ["-c", "UC", "-n", "500", "-s", "64"], expect_sizes=[64])
    cleanup()
    run_pingpong("memif", "s", ["-n", "200"], tool="ibv_ud_pingpong")
    run_pingpong("memif", "s", ["-n", "200", "-m", "4096", "-s", "16384"], tool="ibv_uc_pingpong")
    run_perftest("memif", "ib_send_bw", ["-c", "UD", "-n", "1000", "-s", "4096"], expect_sizes=[4096])
    run_perftest("memif", "ib_write_bw", ["-c", "UC", "-n", "1000", "-s", "65536", "-m", "4096"], expect_sizes=[65536])


def sc_gid():
    """Every GID of the table per QP: RoCEv2 over IPv6 (GID 0, link-local) and IPv4 (GID 1)
    between the same two endpoints in one run."""
    ns_up()
    run_perftest("veth", "ib_write_bw", ["-x", "0", "-n", "500", "-s", "4096"], expect_sizes=[4096])
    run_perftest("veth", "ib_write_bw", ["-x", "1", "-n", "500", "-s", "4096"], expect_sizes=[4096])
    run_perftest("veth", "ib_send_lat", ["-x", "0", "-n", "200", "-s", "64"], expect_sizes=[64])
    run_pingpong("veth", "b", ["-n", "100"], tool="ibv_rc_pingpong")
    run_pingpong("veth", "a", ["-n", "100", "-g", "0"], tool="ibv_rc_pingpong")
    run_pingpong("veth", "b", ["-n", "100", "-g", "0"], tool="ibv_ud_pingpong")
    cleanup()
    run_perftest("memif", "ib_write_bw", ["-x", "0", "-n", "500", "-s", "65536"], expect_sizes=[65536])
    run_perftest("memif", "ib_write_bw", ["-x", "1", "-n", "500", "-s", "65536"], expect_sizes=[65536])


def sc_write_bw():
    ns_up()
    for s in ["64", "2048", "2049", "65536"]:
        run_perftest("veth", "ib_write_bw", ["-n", "500", "-s", s], expect_sizes=[int(s)])
    run_perftest("veth", "ib_write_bw", ["-n", "500", "-s", "8192", "-q", "4"], expect_sizes=[8192])
    run_perftest("veth", "ib_write_bw", ["-n", "500", "-s", "8192", "-m", "1024"], expect_sizes=[8192])
    cleanup()
    run_perftest("memif", "ib_write_bw", ["-a", "-n", "100"], timeout=120)
    run_perftest("memif", "ib_write_bw", ["-n", "1000", "-s", "65536", "-m", "4096", "-q", "4"], expect_sizes=[65536])
    # 1,024 QPs in each process (issue 30; one CQ of 131,072 entries): 204,800 WRITEs.
    run_perftest("memif", "ib_write_bw", ["-n", "200", "-s", "64", "-q", "1024"], expect_sizes=[64])


def sc_send_bw():
    ns_up()
    for s in ["64", "2048", "2049", "65536"]:
        run_perftest("veth", "ib_send_bw", ["-n", "500", "-s", s], expect_sizes=[int(s)])
    run_perftest("veth", "ib_send_bw", ["-n", "500", "-s", "8192", "-q", "4"], expect_sizes=[8192])
    run_perftest("veth", "ib_send_bw", ["-n", "500", "-s", "4096", "-e"], expect_sizes=[4096])
    cleanup()
    run_perftest("memif", "ib_send_bw", ["-a", "-n", "100"], timeout=120)
    run_perftest("memif", "ib_send_bw", ["-n", "1000", "-s", "65536", "-m", "4096"], expect_sizes=[65536])
    run_perftest("memif", "ib_send_bw", ["-n", "500", "-s", "4096", "--use-srq", "-q", "2"], expect_sizes=[4096])


def sc_read_bw():
    ns_up()
    for s in ["64", "2049", "65536"]:
        run_perftest("veth", "ib_read_bw", ["-n", "500", "-s", s], expect_sizes=[int(s)])
    run_perftest("veth", "ib_read_bw", ["-n", "500", "-s", "8192", "-q", "4"], expect_sizes=[8192])
    cleanup()
    run_perftest("memif", "ib_read_bw", ["-a", "-n", "100"], timeout=120)
    run_perftest("memif", "ib_read_bw", ["-n", "500", "-s", "65536", "-m", "4096", "-e"], expect_sizes=[65536])


def sc_atomic_bw():
    ns_up()
    run_perftest("veth", "ib_atomic_bw", ["-n", "1000", "-A", "FETCH_AND_ADD"], expect_sizes=[8])
    run_perftest("veth", "ib_atomic_bw", ["-n", "1000", "-A", "CMP_AND_SWAP"], expect_sizes=[8])
    run_perftest("veth", "ib_atomic_bw", ["-n", "1000", "-q", "4"], expect_sizes=[8])
    cleanup()
    run_perftest("memif", "ib_atomic_bw", ["-n", "1000", "-A", "CMP_AND_SWAP", "-m", "4096"], expect_sizes=[8])


def sc_lat():
    ns_up()
    for tool in ["ib_write_lat", "ib_send_lat", "ib_read_lat"]:
        for s in ["2", "4096"]:
            run_perftest("veth", tool, ["-n", "200", "-s", s], expect_sizes=[int(s)])
    run_perftest("veth", "ib_send_lat", ["-n", "200", "-s", "64", "-e"], expect_sizes=[64])
    cleanup()
    for tool in ["ib_write_lat", "ib_send_lat", "ib_read_lat"]:
        run_perftest("memif", tool, ["-n", "200", "-s", "8192", "-m", "4096"], expect_sizes=[8192])


def sc_cxx():
    ns_up()
    port = next_port()
    exe = args.cxx_test
    sf = open("/tmp/uroce-shim-server.log", "w+")
    cf = open("/tmp/uroce-shim-client.log", "w+")
    s = start(driver.NSB + [suite.run, "--config", suite.config("veth-b.conf"), "--", exe, "--port", str(port)], sf)
    wait_listen("veth", port, s)
    c = start(driver.NSA + [suite.run, "--config", suite.config("veth-a.conf"), "--", exe, "--port", str(port),
                     "198.18.0.2"], cf)
    crc = finish(c, 60)
    src = finish(s, 10)
    sf.seek(0)
    cf.seek(0)
    st, ct = sf.read(), cf.read()
    log("---- client\n" + ct[-4000:] + "\n---- server\n" + st[-4000:])
    ok = crc == 0 and src == 0
    name = os.path.basename(exe)  # shim_data_test, mw_pingpong
    check(ok, name)
    record({"tool": name, "options": "", "link": "veth", "ok": ok, "client_rc": crc, "server_rc": src,
            "result": [l for l in ct.splitlines() if l.startswith("PASS") or "verified" in l]})


def sc_sweep():
    """api_sweep (--cxx-test): every libibverbs export on one uroce device, in namespace uroce-a."""
    ns_up()
    out = open("/tmp/uroce-shim-sweep.log", "w+")
    p = start(driver.NSA + [suite.run, "--config", suite.config("veth-a.conf"), "--", args.cxx_test], out)
    rc = finish(p, 100)
    out.seek(0)
    text = out.read()
    log(text[-20000:])
    summary = [l for l in text.splitlines() if " symbols, " in l]
    ok = rc == 0 and len(summary) == 1
    check(ok, "api_sweep (rc %s)" % rc)
    record({"tool": "api_sweep", "options": "", "link": "veth", "ok": ok, "client_rc": rc, "server_rc": "",
            "result": summary})


def sc_stress():
    """stress (--cxx-test): 8 workers, 2 sharers of a CQ and an SRQ, churn and events on one
    device for UROCE_STRESS_SECONDS (20), in namespace uroce-a; every byte and completion checked."""
    ns_up()
    secs = os.environ.get("UROCE_STRESS_SECONDS", "20")
    out = open("/tmp/uroce-shim-stress.log", "w+")
    p = start(driver.NSA + [suite.run, "--config", suite.config("veth-a.conf"), "--", args.cxx_test,
                            "--seconds", secs], out)
    rc = finish(p, float(secs) + 60)
    out.seek(0)
    text = out.read()
    log(text[-6000:])
    summary = re.findall(r"^stress: (\d+) operations, (\d+) bytes checked, (\d+) failures$", text, re.M)
    ok = rc == 0 and len(summary) == 1 and summary[0][2] == "0" and int(summary[0][0]) > 0
    check(ok, "stress (rc %s): %s" % (rc, summary))
    record({"tool": "stress", "options": "--seconds " + secs, "link": "veth", "ok": ok, "client_rc": rc,
            "server_rc": "", "result": summary})


# The client's faults; UROCE_SOAK_FAULTS="UROCE_FAULT_DROP=0.05 ..." replaces them.
SOAK_FAULTS = dict(kv.split("=") for kv in os.environ.get(
    "UROCE_SOAK_FAULTS", "UROCE_FAULT_DROP=0.01 UROCE_FAULT_DUPLICATE=0.01 UROCE_FAULT_REORDER=0.01 "
    "UROCE_FAULT_CORRUPT=0.001").split())


def counters(text, what):
    """The counters of the shim's exit line 'uroce-verbs: WHAT name=value ...' (UROCE_SHIM_STATS)."""
    m = re.findall(r"^uroce-verbs: %s (.*)$" % what, text, re.M)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[-1])} if m else {}


def sc_soak():
    """soak (--cxx-test): two processes over the veth pair (server in uroce-b, client in uroce-a),
    RC, UC and UD for UROCE_SOAK_SECONDS (60), faults on the client's link in both directions
    (SOAK_FAULTS: every frame crosses one fault stage); every byte and completion checked by the
    program, then the counters of both sides (UROCE_SHIM_STATS) against the faults injected."""
    ns_up()
    secs = os.environ.get("UROCE_SOAK_SECONDS", "60")
    port = next_port()
    env = dict(os.environ, UROCE_VERBS_LIB=args.lib, UROCE_SHIM_STATS="1")
    sf = open("/tmp/uroce-soak-server.log", "w+")
    cf = open("/tmp/uroce-soak-client.log", "w+")
    s = children.start(wrap("veth", "server", [args.cxx_test, "--port", str(port)]), sf, env)
    wait_listen("veth", port, s)
    c = children.start(wrap("veth", "client", [args.cxx_test, "--port", str(port), "--seconds", secs, "198.18.0.2"]),
                       cf, dict(env, **SOAK_FAULTS))
    crc = finish(c, float(secs) + 120)
    src = finish(s, 30)
    sf.seek(0)
    cf.seek(0)
    st, ct = sf.read(), cf.read()
    log("---- client\n" + ct[-6000:] + "\n---- server\n" + st[-6000:])
    summary = re.findall(r"^soak: (\d+) batches, (\d+) operations, (\d+) bytes checked, (\d+) failures$", ct, re.M)
    ok = crc == 0 and src == 0 and len(summary) == 1 and int(summary[0][1]) > 0
    check(ok, "soak (client rc %s, server rc %s): %s" % (crc, src, summary))
    ce, cl, se, sl = counters(ct, "engine"), counters(ct, "link"), counters(st, "engine"), counters(st, "link")
    facts = {}
    if ok and ce and cl and se and sl:
        # Every frame crossed the client's fault stage once: a request on its way out, a response
        # on its way in. A corrupted frame fails the ICRC check of the side that gets it (once,
        # or twice when the stage also duplicated it); nothing else fails it.
        tx_corr, rx_corr = cl.get("tx_fault_corrupted", 0), cl.get("rx_fault_corrupted", 0)
        tx_dup, rx_dup = cl.get("tx_fault_duplicated", 0), cl.get("rx_fault_duplicated", 0)
        facts = {"client tx: dropped": cl.get("tx_fault_dropped"), "duplicated": tx_dup,
                 "reordered": cl.get("tx_fault_reordered"), "corrupted": tx_corr,
                 "client rx: dropped": cl.get("rx_fault_dropped"), "rx duplicated": rx_dup,
                 "rx reordered": cl.get("rx_fault_reordered"), "rx corrupted": rx_corr,
                 "server icrc_errors": se.get("icrc_errors"), "client icrc_errors": ce.get("icrc_errors"),
                 "client retransmitted": ce.get("retransmitted"), "client sr_resends": ce.get("sr_resends"),
                 "client probes": ce.get("probes"), "client timeouts": ce.get("timeouts"),
                 "server duplicate_request": se.get("duplicate_request"),
                 "server out_of_seq_request": se.get("out_of_seq_request"),
                 "server dropped_messages (UC)": se.get("dropped_messages")}
        log("counters: " + ", ".join("%s %s" % kv for kv in facts.items()))
        check(tx_corr <= se.get("icrc_errors", 0) <= 2 * tx_corr,
              "server ICRC errors %s for %s frames corrupted toward it" % (se.get("icrc_errors"), tx_corr))
        check(rx_corr <= ce.get("icrc_errors", 0) <= 2 * rx_corr,
              "client ICRC errors %s for %s frames corrupted toward it" % (ce.get("icrc_errors"), rx_corr))
        lost = cl.get("tx_fault_dropped", 0) + cl.get("rx_fault_dropped", 0) + tx_corr + rx_corr
        resent = ce.get("retransmitted", 0) + ce.get("sr_resends", 0)
        check(lost == 0 or resent > 0, "%d frames lost, %d resent" % (lost, resent))
        # The link from the client to the server: what the server's port received is what the
        # client's engine sent, less the frames dropped, plus those duplicated (give or take the
        # few the stage still held back when the client left).
        want = ce.get("sent_pkts", 0) - cl.get("tx_fault_dropped", 0) + tx_dup
        facts["client sent_pkts"], facts["server rx_roce"] = ce.get("sent_pkts"), sl.get("rx_roce")
        # (About 1 frame in 100,000 more arrives than the count says, in either direction, with
        # or without faults there: af_packet's transmit ring; docs/reliability.md.)
        slack = 16 + want // 20000
        check(abs(sl.get("rx_roce", 0) - want) <= slack,
              "the server's port received %s RoCE frames; the client sent %s - %s dropped + %s duplicated = %s"
              % (sl.get("rx_roce"), ce.get("sent_pkts"), cl.get("tx_fault_dropped"), tx_dup, want))
        # The other way the veth and the client's af_packet ring may lose frames of their own (the
        # kernel drops what the ring has no room for) and the client leaves first: fewer.
        facts["server sent_pkts"], facts["client rx_roce"] = se.get("sent_pkts"), cl.get("rx_roce")
        check(cl.get("rx_roce", 0) <= se.get("sent_pkts", 0) + 16 + se.get("sent_pkts", 0) // 20000,
              "the client's port received %s RoCE frames, the server sent %s" % (cl.get("rx_roce"), se.get("sent_pkts")))
        check(se.get("duplicate_request", 0) > 0 or tx_dup == 0,
              "%d requests duplicated by the link, none seen as duplicates" % tx_dup)
    else:
        check(not ok, "the shim's counters (UROCE_SHIM_STATS) were printed by both sides")
    record({"tool": "soak", "options": "--seconds " + secs + " " + " ".join("%s=%s" % kv for kv in SOAK_FAULTS.items()),
            "link": "veth", "ok": ok, "client_rc": crc, "server_rc": src,
            "result": summary + [l for l in (ct + st).splitlines() if " memory: " in l or "delivered" in l],
            "counters": facts})


def sc_progress():
    """The config's `progress` modes (UROCE_PROGRESS), memif: `inline` (the applications drive;
    both sides poll their CQs), `dedicated` (the poller drives all the time), each checked by
    the drive counts the shim prints at exit (UROCE_SHIM_STATS=1)."""
    def stats(path):
        m = re.findall(r"poller drives (\d+) naps (\d+), application drives (\d+)", open(path).read())
        return [tuple(int(x) for x in t) for t in m]
    os.environ["UROCE_SHIM_STATS"] = "1"
    try:
        os.environ["UROCE_PROGRESS"] = "inline"
        for tool, opts in [("ib_send_lat", ["-n", "500", "-s", "64"]), ("ib_send_bw", ["-n", "2000", "-s", "4096"])]:
            if run_perftest("memif", tool, opts, expect_sizes=[int(opts[3])]):
                st = stats("/tmp/uroce-shim-server.log") + stats("/tmp/uroce-shim-client.log")
                # The poller turns the engine only after a millisecond without a verbs call
                # (set-up: ARP, the TCP exchange), a few hundred times at most; in thread mode it
                # spins after each piece of work and drives millions of times.
                check(len(st) == 2 and all(p < 10000 and a > 0 for p, _, a in st),
                      "inline %s: the applications drive, the poller hardly: %s" % (tool, st))
        os.environ["UROCE_PROGRESS"] = "dedicated"
        # With events (-e) the application thread sleeps in ibv_get_cq_event: one busy thread per
        # process, the poller. (ib_write_lat spins on memory: with the poller, two busy threads per
        # process, four on a machine of two cores, whose latencies then are time slices.)
        for tool, opts in [("ib_send_lat", ["-n", "200", "-s", "64", "-e"]), ("ib_send_bw", ["-n", "2000", "-s", "4096", "-e"])]:
            if run_perftest("memif", tool, opts, expect_sizes=[int(opts[3])], timeout=120):
                st = stats("/tmp/uroce-shim-server.log") + stats("/tmp/uroce-shim-client.log")
                check(len(st) == 2 and all(p > 0 and a == 0 for p, _, a in st),
                      "dedicated %s: only the poller drives: %s" % (tool, st))
    finally:
        os.environ.pop("UROCE_PROGRESS", None)
        os.environ.pop("UROCE_SHIM_STATS", None)


SCEN = {"devinfo": sc_devinfo, "progress": sc_progress, "pingpong": sc_pingpong, "ud-uc": sc_ud_uc, "gid": sc_gid, "write-bw": sc_write_bw, "send-bw": sc_send_bw,
        "read-bw": sc_read_bw, "atomic-bw": sc_atomic_bw, "lat": sc_lat, "cxx": sc_cxx,
        "sweep": sc_sweep, "stress": sc_stress, "soak": sc_soak}

driver.run_scenario(SCEN, args.scenario, cleanup)
