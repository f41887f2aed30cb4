#!/usr/bin/env python3
"""uroce <-> another RoCE implementation: the interop matrix (meson suite `interop`).

The peer is any host whose shell is reachable through a command prefix (`ssh root@host`, or
the rxe lab's `rxe-lab.sh guest`): the prefix plus one argument, a shell command line, runs
that command on the peer and returns its output and exit status. The peer is described by
its RDMA device, the GID indices of its RoCE v2 IPv4 (and optionally IPv6) GIDs, the address
its perftest/pingpong servers listen on, its netdev, and whether the runner may change that
netdev's MTU and put `tc netem` loss on it. uroce runs here, through the verbs shim
(scripts/uroce-run), with one config file per path MTU.

--lab (what `meson test --suite interop` runs) brings up ../shared/rxe-lab (Linux 6.1 rdma_rxe
in a QEMU guest behind tap-rxe in namespace roce-lab) and then runs exactly the generic path
with the lab's command prefix and values (rxe0, GID 1 / 0, eth0, netem and MTU allowed), and
brings the lab down at the end, whatever happened. scripts/interop-peer runs the same matrix
against a peer given on the command line (docs/hardware.md).

The matrix: Debian's unmodified perftest tools (RC, and UD/UC with -c) and the
ibv_*_pingpong programs (RC, UC, UD; IPv4 and IPv6 GIDs), uroce as client with the peer as
server, then the reverse; at path MTU 1024 and 4096; clean, then with `tc qdisc add dev NETDEV
root netem loss 1%` on the peer. Every run's RoCE traffic is captured on the uroce side with
frames from both sides (tcpdump on an interface, or uroce's own capture: config key `capture`)
and checked with uroce-dissect (every ICRC valid, no malformed frame); the peer's own counters
(sysfs hw_counters, or `rdma statistic`) are read around each block of runs.

That is the whole matrix (`--verbs all --cm all`, the defaults). The meson suite runs a
representative part of it (`--verbs representative --cm representative`: VERBS_REPRESENTATIVE,
CM_REPRESENTATIVE); `--list` prints the runs a set of options selects without running any.

Writes the matrix as markdown (--table) and exits non-zero if any run failed.
"""
import argparse
import contextlib
import io
import ipaddress
import os
import re
import shlex
import shutil
import select
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.environ.get("RXE_LAB", os.path.join(ROOT, "..", "shared", "rxe-lab", "rxe-lab.sh"))
DEVICE_MARK = "mrg_rxbuf=off \\\n"
# uroce's GID table (docs/engine.md): 0 the IPv6 link-local address, 1 the IPv4-mapped one.
UROCE_GID = {"v4": 1, "v6": 0}


# (label, tool, extra options, GID flag, GID family). bw tools cross the path MTU (several
# packets per message); lat tools stay below it; atomics are 8 bytes.
def tools(mtu):
    big = str(4 * mtu + 100)
    x = ("-x", "v4")
    return [
        ("ib_write_bw", "ib_write_bw", ["-s", big, "-n", "100"], *x),
        ("ib_send_bw", "ib_send_bw", ["-s", big, "-n", "100"], *x),
        ("ib_read_bw", "ib_read_bw", ["-s", big, "-n", "100"], *x),
        ("ib_atomic_bw FETCH_AND_ADD", "ib_atomic_bw", ["-A", "FETCH_AND_ADD", "-n", "100"], *x),
        ("ib_atomic_bw CMP_AND_SWAP", "ib_atomic_bw", ["-A", "CMP_AND_SWAP", "-n", "100"], *x),
        ("ib_write_lat", "ib_write_lat", ["-s", "64", "-n", "50"], *x),
        ("ib_send_lat", "ib_send_lat", ["-s", "64", "-n", "50"], *x),
        ("ib_read_lat", "ib_read_lat", ["-s", "64", "-n", "50"], *x),
        ("ibv_rc_pingpong", "ibv_rc_pingpong", ["-n", "50", "-m", str(mtu), "-s", str(mtu)], "-g", "v4"),
        # Memory windows (tests/shim/mw_pingpong.cpp, ours): type 2 bound by a work request and
        # type 1 by ibv_bind_mw, WRITE and READ through them, SEND with Invalidate, the
        # invalidated key refused; every byte checked on both sides.
        ("mw_pingpong (memory windows)", "mw_pingpong", ["-p", VERBS_PORT], "-g", "v4"),
    ]


def datagram_tools(mtu, loss):
    """UD and UC rows, and RoCEv2 over IPv6 (link-local GIDs). On UD and UC a lost packet is a
    lost message: perftest's UD/UC send and latency tests and the pingpongs then wait for a
    message that never comes (on a hardware RNIC as here), so under loss only ib_write_bw -c UC,
    which survives it (the data is simply not all there), is run."""
    big = str(4 * mtu + 100)
    rows = [("ib_write_bw -c UC", "ib_write_bw", ["-c", "UC", "-s", big, "-n", "100"], "-x", "v4")]
    if loss:
        return rows
    return rows + [
        ("ib_send_bw -c UD", "ib_send_bw", ["-c", "UD", "-s", str(mtu), "-n", "100"], "-x", "v4"),
        ("ib_send_lat -c UD", "ib_send_lat", ["-c", "UD", "-s", "64", "-n", "50"], "-x", "v4"),
        ("ib_send_bw -c UC", "ib_send_bw", ["-c", "UC", "-s", big, "-n", "100"], "-x", "v4"),
        ("ib_write_lat -c UC", "ib_write_lat", ["-c", "UC", "-s", "64", "-n", "50"], "-x", "v4"),
        ("ibv_ud_pingpong", "ibv_ud_pingpong", ["-n", "50", "-s", str(mtu)], "-g", "v4"),
        ("ibv_uc_pingpong", "ibv_uc_pingpong", ["-n", "50", "-m", str(mtu), "-s", str(mtu)], "-g", "v4"),
        ("ib_write_bw -x 0 (IPv6)", "ib_write_bw", ["-s", big, "-n", "100"], "-x", "v6"),
        ("ibv_rc_pingpong -g 0 (IPv6)", "ibv_rc_pingpong", ["-n", "50", "-m", str(mtu), "-s", str(mtu)], "-g", "v6"),
    ]


def judge_rping(count, verbose):
    def judge(cout, sout):
        if not verbose:  # -V: the client compares what it read back with what it wrote
            bad = "mismatch" in cout or "mismatch" in sout
            return not bad, f"{count} pings{' (DATA MISMATCH)' if bad else ', data validated by the client (-V)'}"
        want = [f"rdma-ping-{i}: " for i in range(count)]
        c = sum(1 for w in want if "ping data: " + w in cout)
        srv = sum(1 for w in want if "server ping data: " + w in sout)
        return c == count and srv == count, f"{c}/{count} pings verified by the client, {srv}/{count} by the server"
    return judge


def judge_status(both=True, also=""):
    def judge(cout, sout):
        good = "return status 0" in cout and (not both or "return status 0" in sout) and also in cout
        return good, "'return status 0'" + (" on both sides" if both else "") + (f", '{also}'" if also else "")
    return judge


def judge_lines(client_line, server_line):
    def judge(cout, sout):
        return client_line in cout and server_line in sout, f"'{client_line}', '{server_line}'"
    return judge


def judge_rstream(cout, sout):
    """rstream with -S and -C prints one result row, "custom", on each side."""
    rows = [bool(re.search(r"^custom\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s", t, re.M)) for t in (cout, sout)]
    return all(rows), "the result row ('custom ...') on both sides"


def judge_cmtime(conns):
    def judge(cout, sout):
        steps = re.findall(r"^(connect|disconnect)\s+:", cout, re.M)
        return len(steps) == 2, f"{conns} connections made and torn down (cmtime's connect and disconnect lines)"
    return judge


def judge_perftest(size):
    def judge(cout, sout):
        rows = [l for l in cout.splitlines() if re.match(r"^\s*%d\s+\d+\s+[\d.]+" % size, l)]
        return len(rows) == 1, "the result line printed"
    return judge


# rdma_cm rows: rdmacm-utils' programs and perftest -R, unmodified, connecting through the two CMs
# on QP 1 (uroce's liburoce-rdmacm, the peer kernel's rdma_cm) to the server's RDMA address (its
# own IP: uroce's is the config's `ip`, not the kernel's address beside it). Each row: (label,
# server argv, client argv, judge(client output, server output) -> (ok, text), flags); argv
# functions take (server address, port, the side's device). Flags: "keeps" (the server keeps
# listening: stopped after the client), "ud" (datagrams: a lost one is lost for good, so not run
# under loss), "bulk" (a message crosses the path MTU: its packets must carry exactly the MTU),
# "perftest" (perftest -R: never run again when refused, see run_cm_one), "short" (the server
# ends on its own within 30 s or has failed: mckey's receiver waits for every datagram), "mcast"
# (multicast: the join is local on RoCE, so the capture holds no CM exchange, and only the
# client sends: RoCE frames one way). An
# argument SELF is replaced with the running side's own address (mckey's sender binds to it: the
# guest has no route to a multicast group to choose a source by).
SELF = "@SELF@"
# mckey's group: administratively scoped (239/8), MAC 01:00:5e:12:00:09.
MCKEY_GROUP = "239.18.0.9"


def cm_tools(mtu, loss):
    big = str(4 * mtu + 100)
    # rping's READ and WRITE of exactly 4 x MTU: every packet full, the last too (issue 35: the
    # server once ended before its WRITE's completion at -S 16384, path MTU 4096).
    exact = str(4 * mtu)
    rows = [
        ("rping -v -C 10", lambda a, p, d: ["rping", "-s", "-a", a, "-p", p, "-v", "-C", "10"],
         lambda a, p, d: ["rping", "-c", "-a", a, "-p", p, "-v", "-C", "10"], judge_rping(10, True), ()),
        (f"rping -V -S {exact} -C 5", lambda a, p, d: ["rping", "-s", "-a", a, "-p", p, "-V", "-S", exact, "-C", "5"],
         lambda a, p, d: ["rping", "-c", "-a", a, "-p", p, "-V", "-S", exact, "-C", "5"], judge_rping(5, False),
         ("bulk",)),
        (f"ucmatose -c 4 -C 10 -S {big}",
         lambda a, p, d: ["ucmatose", "-b", a, "-p", p, "-c", "4", "-C", "10", "-S", big],
         lambda a, p, d: ["ucmatose", "-s", a, "-p", p, "-c", "4", "-C", "10", "-S", big],
         judge_status(True, "data transfers complete"), ("bulk",)),
        # udaddy's port is fixed (7174; its -p is the port space).
        ("udaddy -c 2 -C 10", lambda a, p, d: ["udaddy", "-b", a, "-c", "2", "-C", "10"],
         lambda a, p, d: ["udaddy", "-s", a, "-c", "2", "-C", "10"], judge_status(True), ("ud",)),
        # UD multicast: the receiver joins 239.18.0.9 and waits for 10 datagrams; the sender joins
        # as well and, 3 s later, sends them to QP 0xFFFFFF.
        ("mckey -C 10", lambda a, p, d: ["mckey", "-m", MCKEY_GROUP, "-b", a, "-C", "10"],
         lambda a, p, d: ["mckey", "-m", MCKEY_GROUP, "-b", SELF, "-s", "-C", "10"],
         judge_lines("return status 0", "data transfers complete"), ("ud", "short", "mcast")),
        ("rdma_server / rdma_client", lambda a, p, d: ["rdma_server", "-s", a, "-p", p],
         lambda a, p, d: ["rdma_client", "-s", a, "-p", p], judge_lines("rdma_client: end 0", "rdma_server: end 0"), ()),
        # rsockets (librdmacm's rsocket.c over rdma_cm and verbs: on uroce's side over
        # liburoce-rdmacm and the shim): a stream of 100 transfers of 64 KiB, latency and bandwidth.
        ("rstream -S 65536 -C 100 (rsockets)",
         lambda a, p, d: ["rstream", "-b", a, "-p", p, "-S", "65536", "-C", "100"],
         lambda a, p, d: ["rstream", "-s", a, "-p", p, "-S", "65536", "-C", "100"], judge_rstream, ()),
        ("cmtime -c 20", lambda a, p, d: ["cmtime", "-b", a, "-p", p, "-c", "20"],
         lambda a, p, d: ["cmtime", "-s", a, "-p", p, "-c", "20"], judge_cmtime(20), ("keeps",)),
        (f"ib_write_bw -R -s {big}", lambda a, p, d: ["ib_write_bw", "-R", "-d", d, "-p", p, "-s", big, "-n", "100", "-F"],
         lambda a, p, d: ["ib_write_bw", "-R", "-d", d, "-p", p, "-s", big, "-n", "100", "-F", a],
         judge_perftest(int(big)), ("bulk", "perftest")),
        ("ib_send_lat -R -s 64", lambda a, p, d: ["ib_send_lat", "-R", "-d", d, "-p", p, "-s", "64", "-n", "50", "-F"],
         lambda a, p, d: ["ib_send_lat", "-R", "-d", d, "-p", p, "-s", "64", "-n", "50", "-F", a],
         judge_perftest(64), ("perftest",)),
        (f"ib_read_bw -R -s {big}", lambda a, p, d: ["ib_read_bw", "-R", "-d", d, "-p", p, "-s", big, "-n", "100", "-F"],
         lambda a, p, d: ["ib_read_bw", "-R", "-d", d, "-p", p, "-s", big, "-n", "100", "-F", a],
         judge_perftest(int(big)), ("bulk", "perftest")),
    ]
    return [r for r in rows if not (loss and "ud" in r[4])]


# The rdma_cm rows the test command runs (`--cm representative`, meson suite interop), per
# (path MTU, loss): label prefixes. Every program once, both directions, a message above the path
# MTU at each MTU and under loss, and the refusals; `--cm all` (the default) runs every row in
# every block (docs/rdma_cm.md has its table).
# A label ending in "@in" runs only with the peer as client. perftest -R is run so: with uroce as
# the client, most runs see uroce's second REQ reach the emulated server before it listens for it
# (perftest 4.5's race, run_cm_one), and a run can lose it four times in a row (`--cm all` shows it).
CM_REPRESENTATIVE = {
    (1024, 0): ("rping -v", "ucmatose", "udaddy", "mckey", "rdma_server", "rping (nobody listens)", "ib_send_lat -R@in",
                "rstream"),
    (4096, 0): ("rping -V", "ib_write_bw -R@in", "ib_read_bw -R@in", "cmtime", "rping (path MTU"),
    (1024, 1): ("rping -V",),
    (4096, 1): ("ucmatose",),
}


def cm_selected(mode, mtu, loss, label, peer_is_client):
    if mode == "all":
        return True
    for p in CM_REPRESENTATIVE.get((mtu, loss), ()) if mode == "representative" else ():
        prefix, _, only_in = p.partition("@")
        if label.startswith(prefix) and (not only_in or peer_is_client):
            return True
    return False


# The verbs rows (perftest, the ibv_*_pingpong programs) the test command runs (`--verbs
# representative`, meson suite interop), per (path MTU, loss): exact labels, each run in both
# directions. Every program but ib_write_lat runs in one of the clean blocks, every transport and
# operation the tools carry too (RC, UC and UD SEND, RC and UC WRITE, READ, both atomics, memory
# windows); each clean block has RC, UC, UD and IPv6 rows; under 1% loss the WRITE stream and
# ibv_rc_pingpong at 1024 (and ib_write_bw -c UC, the one UC row that survives loss), and the
# WRITE and READ streams at 4096. A label runs in one clean block only (the WRITE stream and the
# UD SEND stream at 1024). Five labels whose operations other rows carry run only in the whole
# matrix (since 2026-12-07, for the test command's time: ib_write_lat, ib_send_bw -c UC and
# ib_write_lat -c UC at 1024, ibv_rc_pingpong and ib_send_lat -c UD at 4096). 38 of the 112 rows
# against the lab; `--verbs all` (the default: scripts/interop-peer and runs by hand) runs every
# row in every block.
VERBS_REPRESENTATIVE = {
    (1024, 0): ("ib_write_bw", "ib_atomic_bw FETCH_AND_ADD", "ib_read_lat", "ib_send_bw -c UD",
                "mw_pingpong (memory windows)", "ibv_uc_pingpong", "ibv_rc_pingpong -g 0 (IPv6)"),
    (4096, 0): ("ib_send_bw", "ib_read_bw", "ib_atomic_bw CMP_AND_SWAP", "ib_send_lat",
                "ib_write_bw -c UC", "ibv_ud_pingpong", "ib_write_bw -x 0 (IPv6)"),
    (1024, 1): ("ib_write_bw", "ibv_rc_pingpong", "ib_write_bw -c UC"),
    (4096, 1): ("ib_write_bw", "ib_read_bw"),
}


def verbs_selected(mode, mtu, loss, label):
    return mode == "all" or (mode == "representative" and label in VERBS_REPRESENTATIVE.get((mtu, loss), ()))


def verbs_representative_stale():
    """The labels of VERBS_REPRESENTATIVE that name no row of their block (a renamed tool)."""
    return [f"{label} (path MTU {mtu}, {loss}% loss)" for (mtu, loss), labels in VERBS_REPRESENTATIVE.items()
            for label in labels if label not in [t[0] for t in tools(mtu) + datagram_tools(mtu, loss)]]


def jumbo_lab(path, workdir):
    """A lab script whose guest NIC carries frames above 1518 bytes.

    Older copies of ../shared/rxe-lab created the guest's virtio-net with mrg_rxbuf=off and
    without host_mtu, so the guest kernel posted 1518-byte receive buffers and dropped every
    larger frame: path MTU 4096 cannot work whatever the interface MTUs say. With host_mtu=9000
    on that -device line the device advertises VIRTIO_NET_F_MTU and the guest posts big buffers.
    If the lab script lacks it, this returns a copy (in the build directory) with exactly that
    one option added and the original's mtime, so the lab's initramfs is reused."""
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


# How long a client refused because its server is not listening yet is run again.
CM_READY_S = 20
# How long a refused connection may take to be reported, program start-up (uroce-run, or the
# emulated guest) included.
CM_REFUSED_S = 15


def sh(cmd, timeout=120, check=False):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


class Peer:
    """The other RoCE implementation, on a host reached by `prefix + [command line]`."""

    def __init__(self, prefix, dev, tcp_ip, gid, port=1, netdev=None, netem=False, set_mtu=False, name="peer",
                 cm_ip=None, path=None):
        self.prefix = prefix          # e.g. ["ssh", "root@host"]
        self.dev = dev                # its RDMA device, e.g. mlx5_0 or rxe0
        self.tcp_ip = tcp_ip          # where its servers listen (perftest / pingpong TCP exchange)
        self.gid = gid                # {"v4": index, "v6": index or None}
        self.port = port
        self.netdev = netdev          # for netem and MTU changes
        self.netem = netem
        self.set_mtu = set_mtu
        self.name = name
        self.cm_ip = cm_ip or tcp_ip   # its RDMA address (rdma_cm), by default the same
        self.path = path              # a directory put first on its PATH (programs it lacks)

    def line(self, cmd):
        return f"export PATH={self.path}:$PATH; {cmd}" if self.path else cmd

    def run(self, cmd, timeout=120):
        return subprocess.run(self.prefix + [self.line(cmd)], capture_output=True, text=True, timeout=timeout + 40)

    def start(self, cmd):
        return subprocess.Popen(self.prefix + [self.line(cmd)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def counters(self):
        """The device's own protocol counters, name -> value: sysfs hw_counters (rxe, mlx5), else
        `rdma statistic show link DEV/PORT` (name value pairs)."""
        d = f"/sys/class/infiniband/{self.dev}/ports/{self.port}/hw_counters"
        r = self.run(f"cd {d} 2>/dev/null && grep -H . * 2>/dev/null || rdma statistic show link {self.dev}/{self.port}",
                     timeout=60)
        out = {}
        for line in r.stdout.splitlines():
            name, sep, value = line.partition(":")
            if sep and value.strip().isdigit() and " " not in name.strip():
                out[name.strip()] = int(value)
        if not out:  # `rdma statistic` prints "link DEV/1 name value name value ..."
            words = r.stdout.split()
            for i in range(len(words) - 1):
                if words[i + 1].isdigit() and not words[i].isdigit() and words[i] != "link":
                    out[words[i]] = int(words[i + 1])
        return out

    def preflight(self):
        """The device, its GIDs and the tools, before anything runs. Returns a text, or raises."""
        idx = " ".join(str(i) for i in self.gid.values() if i is not None)
        d = f"/sys/class/infiniband/{self.dev}/ports/{self.port}"
        r = self.run(f"test -d {d} || {{ echo 'no device {self.dev}'; exit 1; }}; "
                     f"for i in {idx}; do echo \"GID $i $(cat {d}/gids/$i) $(cat {d}/gid_attrs/types/$i 2>/dev/null)\"; done; "
                     "for t in ib_write_bw ib_send_bw ib_read_bw ib_atomic_bw ib_write_lat ib_send_lat ib_read_lat "
                     "ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong timeout; do command -v $t >/dev/null || "
                     "echo \"missing $t\"; done; uname -r", timeout=60)
        text = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or "missing " in text or "no device" in text:
            raise RuntimeError(f"peer preflight failed ({' '.join(self.prefix)}):\n{text}")
        return text


class Local:
    """The uroce side: configs per path MTU, the namespace it runs in, its capture."""

    def __init__(self, confs, ns=None, tcp_ip=None, capture="tcpdump", iface=None, set_mtu=False, extra_addrs=()):
        self.confs = confs            # {path MTU: config file}
        self.ns = ns
        self.tcp_ip = tcp_ip          # where uroce's servers listen (the kernel address beside uroce)
        self.capture = capture        # "tcpdump" (on iface) or "uroce" (the port writes the pcap)
        self.iface = iface
        self.set_mtu = set_mtu
        self.addrs = set(extra_addrs)  # uroce's own IP addresses, to tell its frames from the peer's
        for c in confs.values():
            self.addrs |= conf_addresses(c)
        # uroce's RDMA address for rdma_cm (its config's `ip`; the same in every config).
        self.cm_ip = conf_ip(next(iter(confs.values())))

    def wrap(self, argv):
        return (["ip", "netns", "exec", self.ns] if self.ns else []) + argv


def conf_addresses(path):
    """uroce's addresses in a config file: ip, each ip6, and the link-local address of its mac."""
    out = set()
    for line in open(path):
        k, _, v = line.split("#")[0].partition("=")
        k, v = k.strip(), v.strip()
        if k in ("ip", "ip6"):
            out.add(str(ipaddress.ip_address(v.split("/")[0])))
        elif k == "mac" and v != "port":  # fe80::/64 with the modified EUI-64 of the MAC
            b = [int(x, 16) for x in v.split(":")]
            iid = bytes([b[0] ^ 2, b[1], b[2], 0xff, 0xfe, b[3], b[4], b[5]])
            out.add(str(ipaddress.IPv6Address(bytes([0xfe, 0x80]) + bytes(6) + iid)))
    return out


def conf_ip(path):
    for line in open(path):
        k, _, v = line.split("#")[0].partition("=")
        if k.strip() == "ip":
            return v.strip().split("/")[0]
    return None


def collect(proc):
    """Waits (bounded) for a server process; returns its output and exit status (with what
    await_listening read of it first)."""
    try:
        out = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
    return getattr(proc, "early", "") + (out or ""), proc.returncode


# A verbs server (perftest, ibv_*_pingpong) is ready for its client once its TCP exchange port
# listens; a client started before that is refused. The servers run with a marker line printed
# when the port listens (listening_then_mark) or, locally, are watched with ss (local_listening);
# either wait is bounded by LISTEN_WAIT_S, after which the client is started anyway.
LISTEN_MARK = "==uroce-interop: listening=="
LISTEN_WAIT_S = 8
VERBS_PORT = "18515"  # perftest's and the pingpong programs' default exchange port


def exchange_port(argv):
    return argv[argv.index("-p") + 1] if "-p" in argv[:-1] else VERBS_PORT


def listening_then_mark(cmd, port):
    """A shell line running `cmd` that prints LISTEN_MARK once TCP `port` listens (or after
    LISTEN_WAIT_S), then exits with cmd's status. It reads /proc/net/tcp{,6} (a listening
    socket: local port `port`, remote address all zeros, state 0A), which every Linux peer has
    (the lab guest's busybox tools have no ss)."""
    polls = int(LISTEN_WAIT_S * 10)
    return (f"{cmd} & p=$!; i=0; while [ $i -lt {polls} ] && "
            f"! grep -qs ':{int(port):04X} [0:]* 0A ' /proc/net/tcp /proc/net/tcp6; "
            f"do sleep 0.1; i=$((i+1)); done; echo '{LISTEN_MARK}'; wait $p")


def await_mark(proc):
    """Reads proc's output until LISTEN_MARK (bounded); keeps what it read for collect()."""
    fd, got, end = proc.stdout.fileno(), b"", time.time() + LISTEN_WAIT_S + 20
    while LISTEN_MARK.encode() not in got and time.time() < end:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            got += chunk
    proc.early = got.decode(errors="replace").replace(LISTEN_MARK + "\n", "")


def local_listening(local, port, proc):
    """Waits until TCP `port` listens in the local side's namespace, proc exits, or LISTEN_WAIT_S."""
    end = time.time() + LISTEN_WAIT_S
    while time.time() < end and proc.poll() is None:
        r = subprocess.run(local.wrap(["ss", "-Hltn", f"sport = :{port}"]), capture_output=True, text=True)
        if r.stdout.strip():
            return
        time.sleep(0.1)


def result_line(out):
    """The last data row of perftest's table, pingpong's summary, or what our own programs verified."""
    rows = [l.strip() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+", l)]
    if rows:
        return " ".join(rows[-1].split())
    m = [l.strip() for l in out.splitlines() if "iters in" in l or "bytes in" in l]
    if m:
        return m[-1]
    v = [l.strip() for l in out.splitlines() if l.startswith("verified")]
    return f"{len(v)} checks verified, last: {v[-1]}" if v else ""


def zero_figures(line):
    """A perftest row whose figures (after size and iterations) are all zero."""
    f = line.split()
    return len(f) > 2 and all(re.fullmatch(r"[0-9.]+", x) for x in f) and all(float(x) == 0 for x in f[2:])


class Runner:
    def __init__(self, build, lib, peer, local):
        self.build = build
        self.lib = lib
        self.peer = peer
        self.local = local
        self.dissect = os.path.join(build or "", "tools", "dissect", "uroce-dissect")
        self.rows = []
        self.retried = []
        self.skipped = []
        self.perftest_opts = []
        self.verbose = self.no_retry = False
        self.counters = []  # (mtu, loss, {peer counter: increase}) per block of runs
        self.cm = "all"  # which rdma_cm rows (--cm; "" none); --cm-only runs only them
        self.cm_only = False
        self.verbs = "all"  # which perftest / pingpong rows (--verbs)
        self.cm_ports = iter(range(7400 + os.getpid() % 400 * 8, 65000))  # a new port per run: no TimeWait in the way
        self.capdir = os.path.join(build, "interop-captures") if build else None  # made by main()

    def out_dir(self):
        return f"uroce->{self.peer.name}"

    def in_dir(self):
        return f"{self.peer.name}->uroce"

    def uroce(self, conf, argv):
        return self.local.wrap([os.path.join(ROOT, "scripts", "uroce-run"), "--config", conf, "--lib", self.lib, "--",
                                *argv])

    def start_capture(self, pcap, conf):
        """tcpdump on the uroce side's interface, or a copy of the config that makes uroce write
        every frame it receives and sends to `pcap` (config key capture). Returns (conf, tcpdump)."""
        if self.local.capture == "uroce":
            fd, copy = tempfile.mkstemp(prefix="interop-", suffix=".conf", dir=self.capdir)
            with os.fdopen(fd, "w") as f:
                # Whole frames: uroce-dissect checks every ICRC (the default snap keeps 64 bytes).
                f.write(open(conf).read() + f"\ncapture = {pcap}\ncapture_snaplen = 65535\n")
            if os.path.exists(pcap):
                os.remove(pcap)
            return copy, None
        # --immediate-mode: without it libpcap's TPACKET_V3 ring hands packets over a block at a
        # time (on fill or after its timeout), and a short run's frames could all still sit in an
        # unretired block at SIGINT: "0 packets captured, 200 received by filter".
        cap = subprocess.Popen(self.local.wrap(["tcpdump", "-i", self.local.iface, "--immediate-mode", "-w", pcap, "-U",
                                                "udp port 4791"]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Start only once tcpdump says it listens (a busy machine delays it by seconds).
        deadline = time.time() + 15
        while time.time() < deadline:
            line = cap.stderr.readline()
            if not line or "listening on" in line:
                break
        # A DPDK af_packet port toggles the interface's promiscuous flag as processes start and
        # exit, which can take tcpdump's away: frames between the peer and uroce are for neither
        # of the kernel's MACs.
        sh(self.local.wrap(["ip", "link", "set", self.local.iface, "promisc", "on"]))
        return conf, cap

    def run_one(self, name, tool, opts, gid_flag, family, direction, mtu, loss):
        conf = self.local.confs[mtu]
        tag = f"{tool}-{'_'.join(o.replace('-', '') for o in opts)}-{family}-{direction}-{mtu}-{loss}"
        pcap = os.path.join(self.capdir, re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".pcap")
        run_conf, cap = self.start_capture(pcap, conf)
        t0 = time.time()
        # -F (--CPU-freq) for perftest on both sides: perftest times with the TSC and calibrates
        # it against gettimeofday at report time; in an emulated guest, and on a 2-core host
        # while QEMU and a busy poller share it, that fit intermittently fails (stderr
        # "Correlation coefficient r^2: 0.53 < 0.9", "Can't produce a report", exit 1) after the
        # transfer succeeded. -F keeps the exit status about the transfer and its completions
        # (a failed calibration's report shows 0.00; see zero_figures()).
        freq = ["-F", *self.perftest_opts] if tool.startswith("ib_") else []
        peer_argv = [tool, "-d", self.peer.dev, gid_flag, str(self.peer.gid[family]), *opts, *freq]
        local_tool = os.path.join(self.build, OUR_PROGRAMS[tool]) if tool in OUR_PROGRAMS else tool
        uro_argv = [local_tool, "-d", "uroce0", gid_flag, str(UROCE_GID[family]), *opts, *freq]
        srv_out = cli_out = ""
        srv_rc = cli_rc = None
        try:
            if direction == self.out_dir():
                srv = self.peer.start(listening_then_mark("timeout 90 " + shlex.join(peer_argv), exchange_port(peer_argv)))
                await_mark(srv)
                try:
                    c = subprocess.run(["timeout", "90", *self.uroce(run_conf, uro_argv + [self.peer.tcp_ip])],
                                       capture_output=True, text=True, timeout=120)
                    cli_out, cli_rc = c.stdout + c.stderr, c.returncode
                finally:
                    srv_out, srv_rc = collect(srv)
            else:
                srv = subprocess.Popen(["timeout", "90", *self.uroce(run_conf, uro_argv)], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
                local_listening(self.local, exchange_port(uro_argv), srv)
                try:
                    c = self.peer.run("timeout 90 " + shlex.join(peer_argv + [self.local.tcp_ip]), timeout=100)
                    cli_out, cli_rc = c.stdout + c.stderr, c.returncode
                finally:
                    srv_out, srv_rc = collect(srv)
        finally:
            cap_state = self.stop_capture(cap, run_conf, conf)
        ok = srv_rc == 0 and cli_rc == 0
        line = result_line(cli_out) or result_line(srv_out)
        if zero_figures(line):
            # The client's perftest could not calibrate its clock (-F, see above): it reports
            # 0.00. The server's own line, when it prints one, has figures.
            other = result_line(srv_out)
            line = (f"{other} (server's line: the client's perftest clock calibration failed)"
                    if other and not zero_figures(other) else
                    f"{line} (perftest's clock calibration failed: figures 0.00)")
        # UD and UC bandwidth tests send one way only (nothing acknowledges them).
        oneway = "-c" in opts and tool.endswith("_bw")
        bulk = tool in ("ib_write_bw", "ib_send_bw", "ib_read_bw")
        return self.finish_row(name, direction, mtu, loss, ok, srv_rc, cli_rc, srv_out, cli_out, line, pcap, cap_state,
                               t0, oneway, bulk, cm=False)

    def stop_capture(self, cap, run_conf, conf):
        time.sleep(0.5)
        cap_early_exit = cap_err = None
        if cap:
            cap_early_exit = cap.poll()  # tcpdump gone before the end of the run?
            cap.send_signal(signal.SIGINT)
            try:
                cap_err = cap.communicate(timeout=10)[1]
            except subprocess.TimeoutExpired:
                cap.kill()
                cap_err = ""
        if run_conf != conf:
            os.remove(run_conf)
        return cap_early_exit, cap_err

    def finish_row(self, name, direction, mtu, loss, ok, srv_rc, cli_rc, srv_out, cli_out, line, pcap, cap_state, t0,
                   oneway, bulk, cm):
        """Checks the run's capture with uroce-dissect, records the row and prints it. `ok`: the
        programs' verdict; `bulk`: a message crossed the path MTU; `cm`: the connection was made
        through the CMs (the capture must hold the CM exchange, counted by message)."""
        cap_early_exit, cap_err = cap_state
        secs = time.time() - t0
        race = False
        if os.path.exists(pcap):
            d = sh([self.dissect, pcap], timeout=60)
            out_lines = d.stdout.strip().splitlines()
            summary = out_lines[-1] if out_lines else "(no output)"
        else:
            d, out_lines, summary = None, [], "(no capture file)"
        m = re.search(r"(\d+) frames, (\d+) roce, (\d+) icrc ok, (\d+) icrc bad, (\d+) malformed", summary)
        # Every captured frame must be valid RoCE (uroce-dissect exits 0: no bad ICRC, nothing
        # malformed). An empty capture (tcpdump on the lab's tap intermittently records nothing)
        # proves nothing either way: it is reported as such, not counted as a failure.
        capture_ok = bool(m) and d is not None and d.returncode == 0
        if capture_ok and int(m.group(2)) == 0:
            summary += " (capture missed: nothing recorded"
            said = " / ".join(l.strip() for l in (cap_err or "").splitlines() if l.strip())
            summary += (f"; tcpdump had exited with {cap_early_exit}" if cap_early_exit is not None else "") + \
                       (f"; tcpdump: {said}" if said else "") + ")"
        elif capture_ok:
            # Both directions were checked (RC always answers), and a multi-packet message really
            # used the path MTU: its packets carry exactly `mtu` bytes, none more.
            sent = {"uroce": 0, "peer": 0}
            biggest = 0
            for l in out_lines:
                f = re.match(r"\s*\d+\s+\S+\s+(\S+) > \S+ ", l)
                if f:
                    sent["uroce" if f.group(1) in self.local.addrs else "peer"] += 1
                    pl = re.search(r" payload (\d+)", l)
                    biggest = max(biggest, int(pl.group(1)) if pl else 0)
            extra = [l for l in out_lines if l.startswith("(") and "CNP" in l]  # CNPs and ECN marks, if any
            summary += (f" (from uroce {sent['uroce']}, from {self.peer.name} {sent['peer']}; largest payload {biggest})" +
                        (" " + extra[0] if extra else ""))
            sender = "uroce" if direction == self.out_dir() else "peer"
            if cm == "refused":
                sender = "peer" if direction == self.out_dir() else "uroce"  # the one that sends the REJ
            if not sent[sender] or (not oneway and (not sent["uroce"] or not sent["peer"])):
                capture_ok = False
                summary += " ONE DIRECTION MISSING"
            if biggest > mtu or (bulk and biggest != mtu):
                capture_ok = False
                summary += f" PAYLOAD NOT THE PATH MTU {mtu}"
            if cm == "refused":
                summary += " (CM: " + " ".join(l.split(" CM ")[1].split()[0] for l in out_lines if " CM " in l) + ")"
                if not any(" CM REQ " in l for l in out_lines) or not any(" CM REJ " in l for l in out_lines):
                    capture_ok = False
                    summary += " NO REQ AND REJ"
            elif cm:
                # The set-up (REQ REP RTU, or SIDR_REQ SIDR_REP) and, for a connection, the
                # tear-down (DREQ DREP) must all be there, each at least once.
                msgs = {}
                for l in out_lines:
                    c = re.search(r" CM (\w+)", l)
                    if c:
                        msgs[c.group(1)] = msgs.get(c.group(1), 0) + 1
                # tcpdump on the lab's tap now and then misses a frame: the request and its answer
                # must be there, and for a connection some of its tear-down.
                sidr = "SIDR_REQ" in msgs or "SIDR_REP" in msgs
                summary += " (CM: " + " ".join(f"{k} {v}" for k, v in sorted(msgs.items())) + ")"
                if (sidr and not ("SIDR_REQ" in msgs and "SIDR_REP" in msgs)) or \
                   (not sidr and not ("REQ" in msgs and "REP" in msgs and ("DREQ" in msgs or "DREP" in msgs))):
                    capture_ok = False
                    summary += " CM EXCHANGE INCOMPLETE"
                # perftest 4.5's client gives up (and does not retry properly: fixed upstream in
                # 23.04) when its second connection's REQ reaches a server that does not listen
                # for it yet: an emulated peer is slow to call rdma_listen. Recognised by the
                # peer's REJ 8 after an accepted first connection; run() tries such a run again.
                rej8 = any(re.search(r" CM REJ .*reason 8\b", l) for l in out_lines)
                if not ok and rej8 and msgs.get("REP", 0) >= 1 and msgs.get("REQ", 0) >= 2:
                    race = True
        ok = ok and capture_ok
        if race:
            summary += " (perftest's second-connection race: REJ 8 before the server listened)"
        self.rows.append(dict(tool=name, direction=direction, mtu=mtu, loss=loss, ok=ok, srv=srv_rc, cli=cli_rc,
                              line=line, capture=summary if m else "capture unreadable: " + summary, secs=secs,
                              note="", race=race))
        if not ok and os.path.exists(pcap):  # keep a failed run's capture (a retry reuses the name)
            kept = pcap[:-5] + time.strftime("-failed-%H%M%S.pcap")
            os.replace(pcap, kept)
            summary += f" (kept: {os.path.basename(kept)})"
        status = "ok" if ok else "FAILED"
        print(f"[{status}] {name:28s} {direction:11s} mtu {mtu} loss {loss}%  server {srv_rc} client {cli_rc}  "
              f"{line}  | {summary}  ({secs:.0f} s)", flush=True)
        if not ok or self.verbose:
            n = 200 if self.verbose else 6
            tail = lambda s: "\n".join(s.strip().splitlines()[-n:])
            print(f"    client output:\n{tail(cli_out)}\n    server output:\n{tail(srv_out)}", flush=True)
        return ok

    def run_cm_one(self, name, server, client, judge, flags, direction, mtu, loss):
        """One rdma_cm row: the server on one side, then the client on the other. A client
        refused because the server does not listen yet (REJ 8 from either CM: the server's start
        is not what is tested) is run again, for at most CM_READY_S."""
        conf = self.local.confs[mtu]
        port = str(next(self.cm_ports))
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"cm-{name}-{direction}-{mtu}-{loss}")
        pcap = os.path.join(self.capdir, tag + ".pcap")
        run_conf, cap = self.start_capture(pcap, conf)
        t0 = time.time()
        srv_out = cli_out = ""
        srv_rc = cli_rc = None
        # perftest -R makes two connections (its exchange, then the test's QPs) and its server
        # listens for the second only after the first; a client run again would find the server
        # waiting for the second: perftest clients are started once, after the head start.
        refused = lambda out: "perftest" not in flags and ("REJECTED" in out or "rejected" in out or "error 8" in out)

        def until_accepted(srv, run_client):
            """run_client() -> (output, exit status), again while refused and the server runs."""
            while True:
                out, rc = run_client()
                if not (rc and refused(out) and srv.poll() is None and time.time() - t0 < CM_READY_S):
                    return out, rc
                time.sleep(1)

        def own(argv, ip):
            return [ip if x == SELF else x for x in argv]

        def uroce_client():
            argv = own(client(self.peer.cm_ip, port, "uroce0"), self.local.cm_ip)
            c = subprocess.run(["timeout", "90", *self.uroce(run_conf, argv)],
                               capture_output=True, text=True, timeout=120)
            return c.stdout + c.stderr, c.returncode

        def peer_client():
            argv = own(client(self.local.cm_ip, port, self.peer.dev), self.peer.cm_ip)
            c = self.peer.run("timeout 90 " + shlex.join(argv), timeout=100)
            return c.stdout + c.stderr, c.returncode
        try:
            if direction == self.out_dir():
                # A server that keeps listening is bounded by its timeout: the guest's command
                # channel runs one command at a time, so it cannot be stopped by a second one.
                # 15 s: the client (cmtime -c 20) ends about 3 s after the server starts.
                # A perftest server that lost the race waits for a connection that never comes.
                limit = ("timeout -s INT 15 " if "keeps" in flags else "timeout 45 " if "perftest" in flags else
                         "timeout 30 " if "short" in flags else "timeout 120 ")
                srv = self.peer.start(limit + shlex.join(server(self.peer.cm_ip, port, self.peer.dev)))
                # The kernel's CM rejects a REQ for a port nobody listens on yet (reason 8), and
                # until_accepted starts the client again; perftest's clients are started once.
                time.sleep(4 if "perftest" in flags else 1)
                try:
                    cli_out, cli_rc = until_accepted(srv, uroce_client)
                finally:
                    srv_out, srv_rc = collect(srv)
            else:
                srv = subprocess.Popen(["timeout", "30" if "short" in flags else "120",
                                        *self.uroce(run_conf, server(self.local.cm_ip, port, "uroce0"))],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
                time.sleep(2.5)
                try:
                    cli_out, cli_rc = until_accepted(srv, peer_client)
                finally:
                    if "keeps" in flags:
                        time.sleep(0.5)
                        os.killpg(srv.pid, signal.SIGINT)
                    srv_out, srv_rc = collect(srv)
        finally:
            cap_state = self.stop_capture(cap, run_conf, conf)
        good, what = judge(cli_out, srv_out)
        srv_ok = srv_rc == 0 or ("keeps" in flags and srv_rc is not None)
        ok = good and cli_rc == 0 and srv_ok
        return self.finish_row(name, direction, mtu, loss, ok, srv_rc, cli_rc, srv_out, cli_out, what, pcap, cap_state,
                               t0, "mcast" in flags, "bulk" in flags, cm="mcast" not in flags)

    def run_cm_refused(self, name, direction, mtu, loss, server_conf, reason):
        """A connection the passive CM refuses: `rping -c` to a port nobody listens on (REJ 8,
        invalid service ID), or, with `server_conf` a uroce config at a smaller path MTU than the
        peer's REQ asks for, to a uroce listener that cannot take it (REJ 26, invalid path MTU).
        The client must report REJECTED with that reason and exit, within CM_REFUSED_S. In the
        direction peer->uroce a uroce rping server keeps the port's CM alive (listening on the
        port for REJ 26, on the next one for REJ 8)."""
        conf = self.local.confs[mtu]
        port = next(self.cm_ports)
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"cm-{name}-{direction}-{mtu}-{loss}")
        pcap = os.path.join(self.capdir, tag + ".pcap")
        run_conf, cap = self.start_capture(pcap, server_conf or conf)
        t0 = time.time()
        srv_out, srv_rc, took = "", None, 0.0
        try:
            if direction == self.out_dir():
                c0 = time.time()
                c = subprocess.run(["timeout", "60", *self.uroce(run_conf, ["rping", "-c", "-a", self.peer.cm_ip, "-p",
                                                                          str(port), "-C", "1"])],
                                   capture_output=True, text=True, timeout=90)
                took = time.time() - c0
                cli_out, cli_rc = c.stdout + c.stderr, c.returncode
            else:
                listen = port if reason == 26 else port + 1
                srv = subprocess.Popen(["timeout", "60", *self.uroce(run_conf, ["rping", "-s", "-a", self.local.cm_ip, "-p",
                                                                              str(listen), "-C", "1"])],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
                time.sleep(2.5)
                try:
                    c0 = time.time()
                    c = self.peer.run(f"timeout 60 rping -c -a {self.local.cm_ip} -p {port} -C 1", timeout=70)
                    took = time.time() - c0
                    cli_out, cli_rc = c.stdout + c.stderr, c.returncode
                finally:
                    os.killpg(srv.pid, signal.SIGINT)
                    srv_out, srv_rc = collect(srv)
        finally:
            cap_state = self.stop_capture(cap, run_conf, server_conf or conf)
            if server_conf:
                # The DPDK af_packet port sets its interface's MTU to the config's link_mtu
                # (1500 here): give the tap back the block's, or every larger frame after this
                # row is dropped on its way out.
                self.set_local_mtu(mtu)
        ev = re.search(r"RDMA_CM_EVENT_REJECTED, error (-?\d+)", cli_out)
        ok = cli_rc not in (0, 124) and ev is not None and ev.group(1) == str(reason) and took < CM_REFUSED_S
        what = (f"client exit {cli_rc} after {took:.2f} s (bound {CM_REFUSED_S} s), "
                f"{ev.group(0) if ev else 'no REJECTED event'} (want error {reason})")
        return self.finish_row(name, direction, mtu, loss, ok, srv_rc if srv_rc is not None else "-", cli_rc, srv_out,
                               cli_out, what, pcap, cap_state, t0, True, False, cm="refused")

    def run(self, fn, *args):
        """One run; a failure is tried once more (unless --no-retry). Both attempts stay in the
        record: an emulated guest is slow and occasionally misses (see docs/interop.md), and a
        second failure fails."""
        if fn(*args) or self.no_retry:
            return self.rows[-1]["ok"]
        first = self.rows.pop()
        print("    retrying once", flush=True)
        ok = fn(*args)
        races = 0
        while not ok and self.rows[-1].get("race") and races < 2:  # perftest's race, at most twice more
            races += 1
            print("    perftest's second-connection race again: retrying", flush=True)
            self.rows.pop()
            ok = fn(*args)
        why = f"1st attempt failed: exit {first['srv']} / {first['cli']}, {first['capture']}"
        if races:
            why += f"; {races} more attempt(s) lost perftest's second-connection race"
        self.rows[-1]["note"] = why
        self.retried.append((first, self.rows[-1]))
        return ok

    def set_local_mtu(self, mtu):
        if self.local.set_mtu:
            sh(self.local.wrap(["ip", "link", "set", self.local.iface, "mtu", "1500" if mtu <= 1024 else "9000"]))

    def matrix(self, mtus, losses, dirs, only, repeat):
        p = self.peer
        try:
            for mtu in mtus * repeat:
                link_mtu = "1500" if mtu <= 1024 else "9000"
                if p.set_mtu:
                    p.run(f"ip link set {p.netdev} mtu {link_mtu}")
                self.set_local_mtu(mtu)
                for loss in losses:
                    if loss and not p.netem:
                        self.skipped.append(f"path MTU {mtu}, {loss}% loss: the peer allows no tc netem")
                        continue
                    if p.netem:
                        p.run(f"tc qdisc del dev {p.netdev} root 2>/dev/null; " +
                              (f"tc qdisc add dev {p.netdev} root netem loss {loss}%" if loss else "true"))
                    before = p.counters()
                    for name, tool, opts, gflag, fam in ([] if self.cm_only else tools(mtu) + datagram_tools(mtu, loss)):
                        if (only and only not in name) or not verbs_selected(self.verbs, mtu, loss, name):
                            continue
                        if p.gid.get(fam) is None:
                            self.skipped.append(f"{name} (path MTU {mtu}, {loss}% loss): no IPv6 GID index for the peer")
                            continue
                        for direction in dirs:
                            self.run(self.run_one, name, tool, opts, gflag, fam, direction, mtu, loss)
                    for name, server, client, judge, flags in (cm_tools(mtu, loss) if self.cm else []):
                        if only and only not in name:
                            continue
                        for direction in dirs:
                            if cm_selected(self.cm, mtu, loss, name, direction == self.in_dir()):
                                self.run(self.run_cm_one, name, server, client, judge, flags, direction, mtu, loss)
                    if self.cm and not loss:  # the refusals (each MAD lost would only delay them)
                        for direction in dirs:
                            if (not only or only in "rping (nobody listens)") and \
                                    cm_selected(self.cm, mtu, loss, "rping (nobody listens)", direction == self.in_dir()):
                                self.run(self.run_cm_refused, "rping (nobody listens)", direction, mtu, loss, None, 8)
                        small = [m for m in self.local.confs if m < mtu]
                        if small and self.in_dir() in dirs and (not only or only in "rping (path MTU above uroce's)") and \
                                cm_selected(self.cm, mtu, loss, "rping (path MTU above uroce's)", True):
                            self.run(self.run_cm_refused, f"rping (path MTU above uroce's {min(small)})", self.in_dir(),
                                     mtu, loss, self.local.confs[min(small)], 26)
                    after = p.counters()
                    delta = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}
                    self.counters.append((mtu, loss, delta))
                    print(f"{p.name} counters over mtu {mtu} loss {loss}%: " +
                          (", ".join(f"{k} {v}" for k, v in delta.items()) or "(none read, or none moved)"), flush=True)
        finally:
            if p.netem:
                p.run(f"tc qdisc del dev {p.netdev} root 2>/dev/null; true")

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
            out += ["", f"{self.peer.dev}'s counters ({self.peer.name}), increase over each block of runs "
                        "(both directions, all tools):", "",
                    "| path MTU | loss | " + " | ".join(names) + " |",
                    "|---:|---:|" + "---:|" * len(names)]
            for mtu, loss, d in self.counters:
                out.append(f"| {mtu} | {loss}% | " + " | ".join(str(d.get(k, 0)) for k in names) + " |")
        if self.skipped:
            out += ["", "Not run: " + "; ".join(self.skipped) + "."]
        return "\n".join(out)


class DryPeer(Peer):
    """A peer for --list: its values, but a command on it runs nothing (and reads no counters)."""

    def run(self, cmd, timeout=120):
        return subprocess.CompletedProcess(cmd, 0, "", "")


class Listing(Runner):
    """--list: the rows matrix() would run, recorded instead of run; nothing touches the peer,
    the lab, the local interface or the build directory."""

    def run(self, fn, *args):
        kind = {"run_one": "verbs", "run_cm_one": "rdma_cm", "run_cm_refused": "rdma_cm"}[fn.__name__]
        name, (direction, mtu, loss) = args[0], args[1:4] if fn.__name__ == "run_cm_refused" else args[-3:]
        self.rows.append(dict(kind=kind, tool=name, direction=direction, mtu=mtu, loss=loss, ok=True))
        return True

    def set_local_mtu(self, mtu):
        pass

    def listing(self):
        out = [f"{r['tool']:34} {r['direction']:12} {r['mtu']:>5} {r['loss']:>2}%  {r['kind']}" for r in self.rows]
        n = {k: sum(1 for r in self.rows if r["kind"] == k) for k in ("verbs", "rdma_cm")}
        out.append(f"{len(self.rows)} runs: {n['verbs']} verbs (--verbs {self.verbs}), "
                   f"{n['rdma_cm']} rdma_cm (--cm {self.cm or 'none'})")
        return "\n".join(out + [f"not run: {x}" for x in self.skipped])


# Programs the lab's guest image lacks (its initramfs copies a list of rdmacm-utils' programs
# without mckey): copied from this host into the lab's 9p share, which the guest mounts at /lab,
# after `rxe-lab.sh up`; the guest runs them from LAB_GUEST_BIN (first on the peer's PATH). The
# guest has the libraries they need (librdmacm, libibverbs, libnl).
LAB_EXTRA_TOOLS = ["/usr/bin/mckey"]
LAB_GUEST_BIN = "/lab/bin"
# Test programs of ours that rows run on both sides by name: uroce's side runs the build's, the
# lab's guest the copy in its share.
OUR_PROGRAMS = {"mw_pingpong": os.path.join("tests", "shim", "mw_pingpong")}


def lab_share_tools(build):
    share = os.path.join(os.environ.get("RXE_LAB_DIR", "/var/tmp/rxe-lab"), "share", "bin")
    os.makedirs(share, exist_ok=True)
    for t in LAB_EXTRA_TOOLS + [os.path.join(build, p) for p in OUR_PROGRAMS.values()]:
        if os.path.exists(t):
            shutil.copy2(t, share)


def lab_peer_and_local(args, peer_cls=Peer):
    """The rxe lab as a generic peer: its command prefix and its values."""
    global LAB
    if peer_cls is Peer and any(int(x) > 1024 for x in args.mtus.split(",")):
        lab_script = jumbo_lab(LAB, args.build)
        if lab_script != LAB:
            print(f"interop: {LAB} gives the guest no host_mtu (frames above 1518 bytes are dropped); "
                  f"using {lab_script}, the same script with host_mtu=9000 on the virtio-net device", flush=True)
            LAB = lab_script
    # The guest's command channel: `rxe-lab.sh guest 'CMD'` (RXE_GUEST_TIMEOUT bounds it).
    peer = peer_cls(["env", "RXE_GUEST_TIMEOUT=150", "bash", LAB, "guest"], dev="rxe0", tcp_ip="198.18.0.2",
                gid={"v4": 1, "v6": 0}, netdev="eth0", netem=True, set_mtu=True, name="rxe", path=LAB_GUEST_BIN)
    local = Local({1024: os.path.join(ROOT, "config", "rxe-lab.conf"),
                   4096: os.path.join(ROOT, "config", "rxe-lab-4096.conf")},
                  ns="roce-lab", tcp_ip="198.18.0.1", capture="tcpdump", iface="tap-rxe", set_mtu=True)
    return peer, local


def generic_peer_and_local(args, peer_cls=Peer):
    confs = {}
    for item in args.uroce_conf:
        mtu, sep, path = item.partition("=")
        if not sep:
            mtu, path = "", item
        path = os.path.abspath(path)
        if not os.path.exists(path):
            raise SystemExit(f"interop: {path} not found")
        for m in ([int(mtu)] if mtu else [int(x) for x in args.mtus.split(",")]):
            confs[m] = path
    missing = [m for m in (int(x) for x in args.mtus.split(",")) if m not in confs]
    if missing:
        raise SystemExit(f"interop: no --uroce-conf for path MTU {missing}")
    gid6 = None if args.peer_gid6 in (None, "", "none") else int(args.peer_gid6)
    peer = peer_cls(shlex.split(args.peer_cmd), dev=args.peer_dev, tcp_ip=args.peer_ip,
                gid={"v4": args.peer_gid, "v6": gid6}, port=args.peer_port, netdev=args.peer_netdev,
                netem=args.peer_netem, set_mtu=args.peer_set_mtu, name=args.peer_name)
    if (peer.netem or peer.set_mtu) and not peer.netdev:
        raise SystemExit("interop: --peer-netem and --peer-set-mtu need --peer-netdev")
    local = Local(confs, ns=args.local_ns, tcp_ip=args.local_ip, capture=args.capture, iface=args.local_iface,
                  set_mtu=args.local_set_mtu, extra_addrs=args.uroce_addr)
    if local.capture == "tcpdump" and not local.iface:
        raise SystemExit("interop: --capture tcpdump needs --local-iface")
    return peer, local


def directions(spec, r):
    dirs = []
    for d in spec.split(","):  # also the old spellings uroce->rxe, rxe->uroce
        if d in ("out", "both") or d.startswith("uroce->"):
            dirs.append(r.out_dir())
        if d in ("in", "both") or d.endswith("->uroce"):
            dirs.append(r.in_dir())
    return dirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="the meson build directory (needed unless --list)")
    ap.add_argument("--table", help="write the markdown matrix here")
    ap.add_argument("--lab", action="store_true", help="bring up ../shared/rxe-lab and use its guest as the peer")
    g = ap.add_argument_group("a peer host (without --lab)")
    g.add_argument("--peer-cmd", help="command prefix that runs one shell command line on the peer, e.g. 'ssh root@host'")
    g.add_argument("--peer-dev", help="the peer's RDMA device (mlx5_0, rxe0, ...)")
    g.add_argument("--peer-ip", help="the peer's address for the TCP exchange (its servers listen there)")
    g.add_argument("--peer-gid", type=int, help="GID index of the peer's RoCE v2 IPv4 GID (show_gids)")
    g.add_argument("--peer-gid6", help="GID index of its RoCE v2 IPv6 GID (IPv6 rows; 'none' skips them)")
    g.add_argument("--peer-port", type=int, default=1)
    g.add_argument("--peer-netdev", help="the peer's netdev under the RDMA device (for netem and MTU)")
    g.add_argument("--peer-netem", action="store_true", help="the runner may put tc netem loss on --peer-netdev")
    g.add_argument("--peer-set-mtu", action="store_true", help="the runner may set --peer-netdev's MTU (1500 / 9000)")
    g.add_argument("--peer-name", default="peer", help="its name in the table (e.g. cx5)")
    g.add_argument("--uroce-conf", action="append", default=[],
                   help="uroce config: MTU=FILE per path MTU, or FILE for all (repeatable)")
    g.add_argument("--uroce-addr", action="append", default=[], help="another address of uroce's (frames from it are uroce's)")
    g.add_argument("--local-ns", help="network namespace uroce runs in")
    g.add_argument("--local-ip", help="the address beside uroce that uroce's servers' TCP exchange listens on")
    g.add_argument("--capture", choices=["uroce", "tcpdump"], default="uroce",
                   help="uroce: the DPDK port writes the pcap (config key capture); tcpdump: on --local-iface")
    g.add_argument("--local-iface")
    g.add_argument("--local-set-mtu", action="store_true", help="set --local-iface's MTU (1500 / 9000) per path MTU")
    ap.add_argument("--perftest-opts", default="",
                    help="more options for every perftest tool on both sides (e.g. a traffic class)")
    ap.add_argument("--mtus", default="1024,4096")
    ap.add_argument("--losses", default="0,1")
    ap.add_argument("--keep-up", action="store_true", help="do not bring the lab down (debugging)")
    ap.add_argument("--only", help="run only the tools whose label contains this text")
    ap.add_argument("--dirs", default="out,in", help="out (uroce is the client), in (the peer is), or both")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole matrix this many times")
    ap.add_argument("--no-retry", action="store_true", help="a failed run is not tried again")
    ap.add_argument("--cm", choices=["all", "representative", "none"], default="all",
                    help="the rdma_cm rows (rdmacm-utils, perftest -R): all, the test command's selection, or none")
    ap.add_argument("--cm-only", action="store_true", help="only the rdma_cm rows")
    ap.add_argument("--verbs", choices=["all", "representative"], default="all",
                    help="the perftest and ibv_*_pingpong rows: all, or the test command's selection "
                         "(VERBS_REPRESENTATIVE)")
    ap.add_argument("--list", action="store_true",
                    help="print the runs the other options select (tool, direction, path MTU, loss) and exit: "
                         "nothing is run, no lab, no root needed; the lab's values unless --peer-cmd is given")
    ap.add_argument("--verbose", action="store_true", help="print both sides' whole output")
    a = ap.parse_args()
    if a.verbs == "representative" and verbs_representative_stale():
        ap.error("VERBS_REPRESENTATIVE names rows that do not exist: " + "; ".join(verbs_representative_stale()))
    if a.list:
        peer, local = generic_peer_and_local(a, DryPeer) if a.peer_cmd else lab_peer_and_local(a, DryPeer)
        r = Listing(None, None, peer, local)
        r.cm, r.cm_only, r.verbs = (a.cm if a.cm != "none" else ""), a.cm_only, a.verbs
        with contextlib.redirect_stdout(io.StringIO()):  # matrix()'s counter lines: none were read
            r.matrix([int(x) for x in a.mtus.split(",")], [int(x) for x in a.losses.split(",")],
                     directions(a.dirs, r), a.only, a.repeat)
        print(r.listing())
        return 0
    if not a.build:
        ap.error("--build is needed")
    lib = os.path.join(a.build, "verbs_shim", "liburoce-verbs.so")
    for f in (lib, os.path.join(a.build, "tools", "dissect", "uroce-dissect")):
        if not os.path.exists(f):
            print(f"interop: {f} is missing (build first)", file=sys.stderr)
            return 1
    if os.geteuid() != 0:
        print("interop: needs root (DPDK, namespaces, capture)", file=sys.stderr)
        return 1
    if not a.lab and not all((a.peer_cmd, a.peer_dev, a.peer_ip, a.peer_gid is not None, a.uroce_conf, a.local_ip)):
        ap.error("without --lab: --peer-cmd, --peer-dev, --peer-ip, --peer-gid, --uroce-conf and --local-ip are needed")
    peer, local = lab_peer_and_local(a) if a.lab else generic_peer_and_local(a)
    r = Runner(a.build, lib, peer, local)
    os.makedirs(r.capdir, exist_ok=True)
    r.verbose = a.verbose
    r.no_retry = a.no_retry
    r.cm = a.cm if a.cm != "none" else ""
    r.cm_only = a.cm_only
    r.verbs = a.verbs
    r.perftest_opts = shlex.split(a.perftest_opts)
    dirs = directions(a.dirs, r)
    t_start = time.time()
    try:
        if a.lab:
            b = sh(["bash", LAB, "build"], timeout=1200)
            if b.returncode != 0:
                print("interop: rxe-lab build failed\n" + b.stderr[-2000:], file=sys.stderr)
                return 1
            sh(["bash", LAB, "down"], timeout=120)  # a lab left over from an earlier run
            u = sh(["bash", LAB, "up"], timeout=600)
            if u.returncode != 0:
                print("interop: rxe-lab up failed\n" + u.stderr[-2000:], file=sys.stderr)
                return 1
            lab_share_tools(a.build)
        print(f"interop: peer {peer.name}: {' '.join(peer.prefix)} (device {peer.dev}, GID v4 {peer.gid['v4']}, "
              f"v6 {peer.gid['v6']}, servers at {peer.tcp_ip}); uroce {sorted(local.addrs)}, capture {local.capture}",
              flush=True)
        print("\n".join("  " + l for l in peer.preflight().splitlines()), flush=True)
        r.matrix([int(x) for x in a.mtus.split(",")], [int(x) for x in a.losses.split(",")], dirs, a.only, a.repeat)
    finally:
        if a.lab and not a.keep_up:
            sh(["bash", LAB, "down"], timeout=120)
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
    for s in r.skipped:
        print(f"  not run: {s}")
    print(f"{len(r.rows) - failed} passed, {failed} failed")
    return 1 if failed or not r.rows else 0


if __name__ == "__main__":
    sys.exit(main())
