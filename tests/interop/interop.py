#!/usr/bin/env python3
"""uroce <-> Linux rxe interop (meson suite `interop`).

Brings up the rxe lab (../shared/rxe-lab: Linux 6.1 rdma_rxe in a QEMU guest behind tap-rxe in
namespace roce-lab), then runs Debian's unmodified perftest tools (RC, and UD/UC with -c) and the
ibv_*_pingpong programs (RC, UC, UD; IPv4 and IPv6 GIDs) between
uroce (the verbs shim over DPDK af_packet on tap-rxe, config/rxe-lab*.conf) and rxe0: uroce as
client with rxe as server, then the reverse; at path MTU 1024 and 4096 (guest link raised to
9000, on a lab NIC that carries jumbo frames: see jumbo_lab()); clean, then with
`tc qdisc add dev eth0 root netem loss 1%` in the guest. Every run's RoCE traffic is captured in
the namespace and checked with uroce-dissect (every ICRC valid, no malformed frame); rxe0's own
counters are read around each block of runs. The lab is always brought down at the end,
whatever happened.

Writes the matrix as markdown (--table) and exits non-zero if any run failed.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.environ.get("RXE_LAB", os.path.join(ROOT, "..", "shared", "rxe-lab", "rxe-lab.sh"))
DEVICE_MARK = "mrg_rxbuf=off \\\n"
NS = "roce-lab"
GUEST_IP, HOST_IP = "198.18.0.2", "198.18.0.1"
UROCE_IP = "198.18.0.10"  # config/rxe-lab*.conf
UROCE_LL = "fe80::c6ff:fe12:a"  # its IPv6 link-local address (GID 0), from MAC 02:00:c6:12:00:0a

# (label, tool, extra options). bw tools cross the path MTU (several packets per message);
# lat tools stay below it; atomics are 8 bytes.
def tools(mtu):
    big = str(4 * mtu + 100)
    return [
        ("ib_write_bw", "ib_write_bw", ["-s", big, "-n", "100"]),
        ("ib_send_bw", "ib_send_bw", ["-s", big, "-n", "100"]),
        ("ib_read_bw", "ib_read_bw", ["-s", big, "-n", "100"]),
        ("ib_atomic_bw FETCH_AND_ADD", "ib_atomic_bw", ["-A", "FETCH_AND_ADD", "-n", "100"]),
        ("ib_atomic_bw CMP_AND_SWAP", "ib_atomic_bw", ["-A", "CMP_AND_SWAP", "-n", "100"]),
        ("ib_write_lat", "ib_write_lat", ["-s", "64", "-n", "50"]),
        ("ib_send_lat", "ib_send_lat", ["-s", "64", "-n", "50"]),
        ("ib_read_lat", "ib_read_lat", ["-s", "64", "-n", "50"]),
    ]


def datagram_tools(mtu, loss):
    """UD and UC rows, and RoCEv2 over IPv6 (GID 0). On UD and UC a lost packet is a lost
    message: perftest's UD/UC send and latency tests and the pingpongs then wait for a message
    that never comes (on a hardware RNIC as here), so under loss only ib_write_bw -c UC, which
    survives it (the data is simply not all there), is run."""
    rows = [("ib_write_bw -c UC", "ib_write_bw", ["-c", "UC", "-s", str(4 * mtu + 100), "-n", "100"], ["-x", "1"])]
    if loss:
        return rows
    return rows + [
        ("ib_send_bw -c UD", "ib_send_bw", ["-c", "UD", "-s", str(mtu), "-n", "100"], ["-x", "1"]),
        ("ib_send_lat -c UD", "ib_send_lat", ["-c", "UD", "-s", "64", "-n", "50"], ["-x", "1"]),
        ("ib_send_bw -c UC", "ib_send_bw", ["-c", "UC", "-s", str(4 * mtu + 100), "-n", "100"], ["-x", "1"]),
        ("ib_write_lat -c UC", "ib_write_lat", ["-c", "UC", "-s", "64", "-n", "50"], ["-x", "1"]),
        ("ibv_ud_pingpong", "ibv_ud_pingpong", ["-n", "50", "-s", str(mtu)], ["-g", "1"]),
        ("ibv_uc_pingpong", "ibv_uc_pingpong", ["-n", "50", "-m", str(mtu), "-s", str(mtu)], ["-g", "1"]),
        ("ib_write_bw -x 0 (IPv6)", "ib_write_bw", ["-s", str(4 * mtu + 100), "-n", "100"], ["-x", "0"]),
        ("ibv_rc_pingpong -g 0 (IPv6)", "ibv_rc_pingpong", ["-n", "50", "-m", str(mtu), "-s", str(mtu)], ["-g", "0"]),
    ]


def jumbo_lab(path, workdir):
    """A lab script whose guest NIC carries frames above 1518 bytes.

    ../shared/rxe-lab creates the guest's virtio-net with mrg_rxbuf=off and without host_mtu, so
    the guest kernel posts 1518-byte receive buffers and drops every larger frame: path MTU 4096
    cannot work whatever the interface MTUs say (a kernel ping of 4000 bytes fails as well).
    With host_mtu=9000 on that -device line the device advertises VIRTIO_NET_F_MTU and the guest
    posts big buffers. If the lab script lacks it, this returns a copy (in the build directory)
    with exactly that one option added and the original's mtime, so the lab's initramfs is
    reused; everything else (kernel, rxe, perftest, working files) is the lab's own."""
    text = open(path).read()
    if "host_mtu=" in text:
        return path
    if text.count(DEVICE_MARK) != 1:
        raise RuntimeError(f"{path}: cannot find the virtio-net -device line to add host_mtu=9000")
    copy = os.path.join(workdir, "rxe-lab-jumbo.sh")
    with open(copy, "w") as f:
        f.write(text.replace(DEVICE_MARK, DEVICE_MARK.replace("mrg_rxbuf=off", "mrg_rxbuf=off,host_mtu=9000")))
    st = os.stat(path)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    return copy


def rxe_counters():
    """rxe0's own protocol counters (sysfs hw_counters in the guest), name -> value."""
    r = guest("cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H . *", timeout=60)
    out = {}
    for line in r.stdout.splitlines():
        name, _, value = line.partition(":")
        if value.strip().isdigit():
            out[name.strip()] = int(value)
    return out


def sh(cmd, timeout=120, check=False):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def lab(*args, timeout=600):
    return sh(["bash", LAB, *args], timeout=timeout)


def guest(cmd, timeout=120):
    env = dict(os.environ, RXE_GUEST_TIMEOUT=str(timeout))
    return subprocess.run(["bash", LAB, "guest", cmd], capture_output=True, text=True, timeout=timeout + 40, env=env)


def collect(proc):
    """Waits (bounded) for a server process; returns its output and exit status."""
    try:
        out = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
    return out, proc.returncode


def result_line(out):
    """The last data row of perftest's table, or pingpong's summary."""
    rows = [l.strip() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+", l)]
    if rows:
        return " ".join(rows[-1].split())
    m = [l.strip() for l in out.splitlines() if "iters in" in l or "bytes in" in l]
    return m[-1] if m else ""


def zero_figures(line):
    """A perftest row whose figures (after size and iterations) are all zero."""
    f = line.split()
    return len(f) > 2 and all(re.fullmatch(r"[0-9.]+", x) for x in f) and all(float(x) == 0 for x in f[2:])


class Runner:
    def __init__(self, build, lib):
        self.build = build
        self.lib = lib
        self.dissect = os.path.join(build, "tools", "dissect", "uroce-dissect")
        self.rows = []
        self.retried = []
        self.counters = []  # (mtu, loss, {rxe0 hw counter: increase}) per block of runs
        self.capdir = os.path.join(build, "interop-captures")
        os.makedirs(self.capdir, exist_ok=True)

    def uroce(self, conf, argv):
        return ["ip", "netns", "exec", NS, os.path.join(ROOT, "scripts", "uroce-run"), "--config",
                os.path.join(ROOT, "config", conf), "--lib", self.lib, "--", *argv]

    def run_one(self, name, tool, opts, direction, mtu, loss, conf, gid_opt):
        tag = f"{tool}-{'_'.join(o.replace('-', '') for o in opts)}-{direction}-{mtu}-{loss}"
        pcap = os.path.join(self.capdir, re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".pcap")
        # --immediate-mode: without it libpcap's TPACKET_V3 ring hands packets over a block at a
        # time (on fill or after its timeout), and a short run's frames could all still sit in an
        # unretired block at SIGINT: "0 packets captured, 200 received by filter".
        cap = subprocess.Popen(["ip", "netns", "exec", NS, "tcpdump", "-i", "tap-rxe", "--immediate-mode", "-w", pcap, "-U",
                                "udp port 4791"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Start only once tcpdump says it listens (a busy machine delays it by seconds).
        deadline = time.time() + 15
        while time.time() < deadline:
            line = cap.stderr.readline()
            if not line or "listening on" in line:
                break
        # The DPDK af_packet port toggles the tap's promiscuous flag as processes start and exit,
        # which can take tcpdump's away: frames between rxe and uroce are for neither tap MAC.
        sh(["ip", "netns", "exec", NS, "ip", "link", "set", "tap-rxe", "promisc", "on"])
        t0 = time.time()
        # -F (--CPU-freq) for perftest on both sides: perftest times with the TSC and calibrates
        # it against gettimeofday at report time; in the emulated guest, and on this 2-core host
        # while QEMU and a busy poller share it, that fit intermittently fails (stderr
        # "Correlation coefficient r^2: 0.53 < 0.9", "Can't produce a report", exit 1) after the
        # transfer succeeded. -F keeps the exit status about the transfer and its completions
        # (a failed calibration's report shows 0.00; see zero_figures()).
        freq = ["-F"] if tool.startswith("ib_") else []
        rxe_argv = [tool, "-d", "rxe0", *gid_opt, *opts, *freq]
        uro_argv = [tool, "-d", "uroce0", *gid_opt, *opts, *freq]
        srv_out = cli_out = ""
        srv_rc = cli_rc = None
        try:
            if direction == "uroce->rxe":
                srv = subprocess.Popen(["bash", LAB, "guest", "timeout 90 " + " ".join(rxe_argv)],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env=dict(os.environ, RXE_GUEST_TIMEOUT="100"))
                time.sleep(4)
                try:
                    c = subprocess.run(["timeout", "90", *self.uroce(conf, uro_argv + [GUEST_IP])],
                                       capture_output=True, text=True, timeout=120)
                    cli_out, cli_rc = c.stdout + c.stderr, c.returncode
                finally:
                    srv_out, srv_rc = collect(srv)
            else:
                srv = subprocess.Popen(["timeout", "90", *self.uroce(conf, uro_argv)], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
                time.sleep(2.5)
                try:
                    c = guest("timeout 90 " + " ".join(rxe_argv + [HOST_IP]), timeout=100)
                    cli_out, cli_rc = c.stdout + c.stderr, c.returncode
                finally:
                    srv_out, srv_rc = collect(srv)
        finally:
            time.sleep(0.5)
            cap_early_exit = cap.poll()  # tcpdump gone before the end of the run?
            cap.send_signal(signal.SIGINT)
            try:
                cap_err = cap.communicate(timeout=10)[1]
            except subprocess.TimeoutExpired:
                cap.kill()
                cap_err = ""
        secs = time.time() - t0
        d = sh([self.dissect, pcap], timeout=60)
        summary = d.stdout.strip().splitlines()[-1] if d.stdout.strip() else "(no output)"
        m = re.search(r"(\d+) frames, (\d+) roce, (\d+) icrc ok, (\d+) icrc bad, (\d+) malformed", summary)
        # Every captured frame must be valid RoCE (uroce-dissect exits 0: no bad ICRC, nothing
        # malformed). An empty capture (tcpdump on the tap intermittently records nothing in this
        # lab) proves nothing either way: it is reported as such, not counted as a failure.
        capture_ok = bool(m) and d.returncode == 0
        if capture_ok and int(m.group(2)) == 0:
            summary += " (capture missed: tcpdump recorded nothing"
            # What tcpdump said, to find out why (it happens in this lab now and then).
            said = " / ".join(l.strip() for l in (cap_err or "").splitlines() if l.strip())
            summary += (f"; it had exited with {cap_early_exit}" if cap_early_exit is not None else "") + \
                       (f"; tcpdump: {said}" if said else "") + ")"
        elif capture_ok:
            # Both directions were checked (RC always answers), and a multi-packet message really
            # used the path MTU: its packets carry exactly `mtu` bytes, none more.
            sent = {"uroce": 0, "rxe": 0}
            biggest = 0
            for l in d.stdout.splitlines():
                f = re.match(r"\s*\d+\s+\S+\s+(\S+) > \S+ ", l)
                if f:
                    sent["uroce" if f.group(1) in (UROCE_IP, UROCE_LL) else "rxe"] += 1
                    pl = re.search(r" payload (\d+)", l)
                    biggest = max(biggest, int(pl.group(1)) if pl else 0)
            summary += f" (from uroce {sent['uroce']}, from rxe {sent['rxe']}; largest payload {biggest})"
            # UD and UC bandwidth tests send one way only (nothing acknowledges them).
            oneway = "-c" in opts and tool.endswith("_bw")
            sender = "uroce" if direction == "uroce->rxe" else "rxe"
            if not sent[sender] or (not oneway and (not sent["uroce"] or not sent["rxe"])):
                capture_ok = False
                summary += " ONE DIRECTION MISSING"
            if biggest > mtu or (tool in ("ib_write_bw", "ib_send_bw", "ib_read_bw") and biggest != mtu):
                capture_ok = False
                summary += f" PAYLOAD NOT THE PATH MTU {mtu}"
        ok = srv_rc == 0 and cli_rc == 0 and capture_ok
        line = result_line(cli_out) or result_line(srv_out)
        if zero_figures(line):
            # The client's perftest could not calibrate its clock (-F, see rxe_argv): it reports
            # 0.00. The server's own line, when it prints one, has figures.
            other = result_line(srv_out)
            line = (f"{other} (server's line: the client's perftest clock calibration failed)"
                    if other and not zero_figures(other) else
                    f"{line} (perftest's clock calibration failed: figures 0.00)")
        self.rows.append(dict(tool=name, direction=direction, mtu=mtu, loss=loss, ok=ok, srv=srv_rc, cli=cli_rc,
                              line=line, capture=summary if m else "capture unreadable", secs=secs, note=""))
        if not ok and os.path.exists(pcap):  # keep a failed run's capture (a retry reuses the name)
            kept = pcap[:-5] + time.strftime("-failed-%H%M%S.pcap")
            os.replace(pcap, kept)
            summary += f" (kept: {os.path.basename(kept)})"
        status = "ok" if ok else "FAILED"
        print(f"[{status}] {name:28s} {direction:11s} mtu {mtu} loss {loss}%  server {srv_rc} client {cli_rc}  "
              f"{line}  | {summary}  ({secs:.0f} s)", flush=True)
        if not ok or getattr(self, "verbose", False):
            n = 200 if getattr(self, "verbose", False) else 6
            tail = lambda s: "\n".join(s.strip().splitlines()[-n:])
            print(f"    client output:\n{tail(cli_out)}\n    server output:\n{tail(srv_out)}", flush=True)
        return ok

    def run(self, *args):
        """One run; a failure is tried once more (unless --no-retry). Both attempts stay in the record: the emulated
        guest is slow and occasionally misses (see docs/interop.md), and a second failure fails."""
        if self.run_one(*args) or self.no_retry:
            return self.rows[-1]["ok"]
        first = self.rows.pop()
        print("    retrying once", flush=True)
        ok = self.run_one(*args)
        why = f"1st attempt failed: exit {first['srv']} / {first['cli']}, {first['capture']}"
        self.rows[-1]["note"] = why
        self.retried.append((first, self.rows[-1]))
        return ok

    def table(self):
        out = ["| tool | direction | path MTU | loss | result | server / client exit | capture (uroce-dissect) |",
               "|---|---|---:|---:|---|---|---|"]
        for r in self.rows:
            res = ("ok: " if r["ok"] else "**FAILED**: ") + (r["line"] or "(no result line)")
            if r["note"]:
                res += f" ({r['note']})"
            out.append(f"| {r['tool']} | {r['direction']} | {r['mtu']} | {r['loss']}% | {res} | {r['srv']} / {r['cli']} "
                       f"| {r['capture']} |")
        if self.counters:
            names = sorted({k for _, _, d in self.counters for k in d})
            out += ["", "rxe0's hw_counters, increase over each block of runs (both directions, all tools):", "",
                    "| path MTU | loss | " + " | ".join(names) + " |",
                    "|---:|---:|" + "---:|" * len(names)]
            for mtu, loss, d in self.counters:
                out.append(f"| {mtu} | {loss}% | " + " | ".join(str(d.get(k, 0)) for k in names) + " |")
        return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--table", help="write the markdown matrix here")
    # Path MTU 4096 needs a lab link that carries jumbo frames: see jumbo_lab().
    ap.add_argument("--mtus", default="1024,4096")
    ap.add_argument("--losses", default="0,1")
    ap.add_argument("--keep-up", action="store_true", help="do not bring the lab down (debugging)")
    ap.add_argument("--only", help="run only the tools whose label contains this text")
    ap.add_argument("--dirs", default="uroce->rxe,rxe->uroce")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole matrix this many times")
    ap.add_argument("--no-retry", action="store_true", help="a failed run is not tried again")
    ap.add_argument("--verbose", action="store_true", help="print both sides' whole output")
    a = ap.parse_args()
    lib = os.path.join(a.build, "verbs_shim", "liburoce-verbs.so")
    for f in (lib, os.path.join(a.build, "tools", "dissect", "uroce-dissect")):
        if not os.path.exists(f):
            print(f"interop: {f} is missing (build first)", file=sys.stderr)
            return 1
    if os.geteuid() != 0:
        print("interop: needs root (namespaces, DPDK, QEMU)", file=sys.stderr)
        return 1
    global LAB
    if any(int(x) > 1024 for x in a.mtus.split(",")):
        lab_script = jumbo_lab(LAB, a.build)
        if lab_script != LAB:
            print(f"interop: {LAB} gives the guest no host_mtu (frames above 1518 bytes are dropped); "
                  f"using {lab_script}, the same script with host_mtu=9000 on the virtio-net device", flush=True)
            LAB = lab_script
    r = Runner(a.build, lib)
    r.verbose = a.verbose
    r.no_retry = a.no_retry
    t_start = time.time()
    try:
        b = lab("build", timeout=1200)
        if b.returncode != 0:
            print("interop: rxe-lab build failed\n" + b.stderr[-2000:], file=sys.stderr)
            return 1
        lab("down", timeout=120)  # a lab left over from an earlier run
        u = lab("up", timeout=600)
        if u.returncode != 0:
            print("interop: rxe-lab up failed\n" + u.stderr[-2000:], file=sys.stderr)
            return 1
        for mtu in [int(x) for x in a.mtus.split(",")] * a.repeat:
            conf = "rxe-lab.conf" if mtu == 1024 else "rxe-lab-4096.conf"
            link_mtu = "1500" if mtu == 1024 else "9000"
            guest(f"ip link set eth0 mtu {link_mtu}")
            sh(["ip", "netns", "exec", NS, "ip", "link", "set", "tap-rxe", "mtu", link_mtu])
            for loss in [int(x) for x in a.losses.split(",")]:
                guest("tc qdisc del dev eth0 root 2>/dev/null; " +
                      (f"tc qdisc add dev eth0 root netem loss {loss}%" if loss else "true"))
                dirs = a.dirs.split(",")
                before = rxe_counters()
                for name, tool, opts in tools(mtu):
                    if a.only and a.only not in name:
                        continue
                    for direction in dirs:
                        r.run(name, tool, opts, direction, mtu, loss, conf, ["-x", "1"])
                for direction in dirs if not a.only or a.only in "ibv_rc_pingpong" else []:
                    r.run("ibv_rc_pingpong", "ibv_rc_pingpong", ["-g", "1", "-n", "50", "-m", str(mtu), "-s", str(mtu)],
                              direction, mtu, loss, conf, [])
                for name, tool, opts, gid in datagram_tools(mtu, loss):
                    if a.only and a.only not in name:
                        continue
                    for direction in dirs:
                        r.run(name, tool, opts, direction, mtu, loss, conf, gid)
                after = rxe_counters()
                delta = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}
                r.counters.append((mtu, loss, delta))
                print(f"rxe0 counters over mtu {mtu} loss {loss}%: " +
                      (", ".join(f"{k} {v}" for k, v in delta.items()) or "(none read)"), flush=True)
        guest("tc qdisc del dev eth0 root 2>/dev/null; true")
    finally:
        if not a.keep_up:
            lab("down", timeout=120)
    text = r.table()
    if a.table:
        with open(a.table, "w") as f:
            f.write(text + "\n")
    failed = sum(1 for x in r.rows if not x["ok"])
    print(f"interop: {len(r.rows)} runs in {time.time() - t_start:.0f} s, {len(r.retried)} passed or failed "
          f"only on a second attempt:")
    for first, second in r.retried:
        print(f"  {first['tool']} {first['direction']} mtu {first['mtu']} loss {first['loss']}%: 1st exit "
              f"{first['srv']}/{first['cli']} ({first['capture']}), 2nd {'ok' if second['ok'] else 'FAILED'}")
    print(f"{len(r.rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
