#!/usr/bin/python3
"""Port suite driver: runs two uroce-perf processes over memif, or over af_packet or af_xdp on
the netns veth pair (scripts/netns-pair), checks exit codes, data verification and link
counters, and exercises ARP, ND, ping, foreign frames and a garbage flood from the peer namespace.

Every scenario cleans up after itself (processes, memif socket, namespaces), also when it
fails or meson's timeout terminates it (SIGTERM). Needs root; exits 77 (skip) otherwise.

usage: port_test.py --perf BUILD/bench/uroce-perf --configs CONFIG_DIR --netns SCRIPT SCENARIO
"""
import argparse
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

SOCK = driver.SOCK
log = driver.log
children = driver.Children(grace=5, echo=lambda line: log(line))
procs = children.procs
args = None
netns = None   # driver.Netns of --netns, made in main()


def cleanup():
    children.stop_all()
    driver.remove(SOCK)
    netns.down()


def start(cmd, out):
    return children.start(cmd, out)


def finish(p, out, timeout):
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    text = open(out).read()
    return rc, text


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def cfg(name):
    return os.path.join(args.configs, name)


def perf_pair(server_cmd_prefix, client_cmd_prefix, scfg, ccfg, peer, opts, tag, timeout=45, during=None,
              client_first=False):
    """Runs a server and a client with the same options; returns (server_text, client_text).
    client_first: the client (a memif client) starts 1.5 s before the server has a socket."""
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    sout, cout = f"/tmp/uroce-port-{tag}-s.log", f"/tmp/uroce-port-{tag}-c.log"
    common = ["--timeout", str(timeout)] + opts
    client_cmd = client_cmd_prefix + [args.perf, "--config", ccfg, "--stats"] + common + [peer]
    if client_first:
        c = start(client_cmd, cout)
        time.sleep(1.5)
        check("@" + SOCK not in open("/proc/net/unix").read(), "a memif socket exists before the server started")
    s = start(server_cmd_prefix + [args.perf, "--config", scfg, "--stats"] + common, sout)
    if not client_first:
        # memif: the client needs the server's socket; af_packet: the server must be up first.
        t0 = time.time()
        # memif listens on an abstract socket (DPDK's default): look for it in /proc/net/unix.
        while "memif" in scfg and time.time() - t0 < 10 and "@" + SOCK not in open("/proc/net/unix").read():
            time.sleep(0.05)
        time.sleep(0.2)
        c = start(client_cmd, cout)
    if during:
        during()
    crc, ctext = finish(c, cout, timeout + 5)
    src, stext = finish(s, sout, 10)
    ok = crc == 0 and src == 0 and "data verification: OK" in ctext and "data verification: OK" in stext
    if not ok:
        log(f"--- server ({src}) ---\n{stext}\n--- client ({crc}) ---\n{ctext}")
        raise Fail(f"{tag}: server rc {src}, client rc {crc}")
    for side, text in (("server", stext), ("client", ctext)):
        chatter = [l for l in text.splitlines() if l.startswith(("TELEMETRY:", "EAL:"))]
        check(not chatter, f"{tag}: DPDK's own messages in the {side}'s output of a normal run: {chatter[:3]}")
    rows = [l for l in ctext.splitlines() if re.match(r"^ \d+ ", l)]
    log(f"{tag}: ok; " + " | ".join(" ".join(r.split()) for r in rows[-3:]))
    procs.clear()
    return stext, ctext


def counters(text, which="link"):
    for line in text.splitlines():
        if line.startswith(which + ":"):
            return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    raise Fail(f"no {which} counters in output")


OPS = [
    ("write-bw", ["--test", "write", "-a", "--max-size", "65536", "-n", "200", "-q", "2"]),
    ("send-bw", ["--test", "send", "-a", "--max-size", "65536", "-n", "200"]),
    ("read-bw", ["--test", "read", "-a", "--max-size", "65536", "-n", "200"]),
    ("fadd-bw", ["--test", "atomic", "-n", "2000"]),
    ("cas-bw", ["--test", "atomic", "-A", "cas", "-n", "2000", "-q", "2"]),
    ("write-lat", ["--test", "write", "--mode", "lat", "-a", "--max-size", "8192", "-n", "100"]),
    ("send-lat", ["--test", "send", "--mode", "lat", "-a", "--max-size", "8192", "-n", "100"]),
    ("read-lat", ["--test", "read", "--mode", "lat", "-s", "4096", "-n", "200"]),
    ("atomic-lat", ["--test", "atomic", "--mode", "lat", "-n", "200"]),
]


def memif_ring_bytes(conf):
    """The bytes of one memif ring's buffers (2^rsize slots of bsize bytes), from a config's eal line."""
    eal = next(l for l in open(conf) if l.startswith("eal"))
    kv = dict(re.findall(r"(bsize|rsize)=(\d+)", eal))
    return (1 << int(kv["rsize"])) * int(kv["bsize"])


def scenario_memif_ops():
    for tag, opts in OPS:
        stext, ctext = perf_pair([], [], cfg("memif-server.conf"), cfg("memif-client.conf"), "127.0.0.1", opts,
                                 "memif-" + tag)
        if tag == "write-lat":
            # Both rings' buffers mapped into each process when the link came up, not at their first
            # use: the first 1,024 round trips of a ping-pong otherwise take a page fault each way.
            want = 2 * memif_ring_bytes(cfg("memif-server.conf"))
            for side, text in (("server", stext), ("client", ctext)):
                got = counters(text).get("memif_mapped", 0)
                check(got >= want, f"{side}: memif_mapped={got}, both rings' buffers are {want} bytes")
    # Big messages across many MTU-sized packets.
    perf_pair([], [], cfg("memif-server.conf"), cfg("memif-client.conf"), "127.0.0.1",
              ["--test", "write", "-s", "4194304", "-n", "20"], "memif-write-4M")


def scenario_memif_client_first():
    """Two programs that open their devices at the same moment (UCX's do): the memif client waits
    for its server's socket and connects when the server has started (DpdkLink::setup, wait_link)."""
    perf_pair([], [], cfg("memif-server.conf"), cfg("memif-client.conf"), "127.0.0.1",
              ["--test", "write", "-s", "65536", "-n", "200"], "memif-client-first", client_first=True)


NSA = driver.NSA
NSB = driver.NSB


def ns_up():
    netns.up()


def scenario_veth_ops():
    ns_up()
    for tag, opts in OPS:
        if tag in ("send-lat", "read-lat"):
            continue  # covered over memif; keeps the suite short
        perf_pair(NSB, NSA, cfg("veth-b.conf"), cfg("veth-a.conf"), "198.18.0.2", opts, "veth-" + tag)


def scenario_veth_ipv6():
    """RoCEv2 over IPv6 (link-local GIDs, gid_index 0): the peer's MAC comes from ND."""
    ns_up()
    tmp = "/tmp/uroce-port-v6"
    os.makedirs(tmp, exist_ok=True)
    for s in "ab":
        text = open(cfg(f"veth-{s}.conf")).read().replace("gid_index = 1", "gid_index = 0")
        open(f"{tmp}/veth-{s}6.conf", "w").write(text)
    st, ct = perf_pair(NSB, NSA, f"{tmp}/veth-b6.conf", f"{tmp}/veth-a6.conf", "198.18.0.2",
                       ["--test", "write", "-a", "--max-size", "16384", "-n", "200"], "veth-ipv6-write")
    check("fe80::" in ct, "client did not use an IPv6 GID")
    # Whichever side resolves first solicits; the other learns the asker's MAC from the
    # solicitation's source link-layer option and needs no exchange of its own.
    ls, lc = counters(st), counters(ct)

    def answered(a, b):
        return a["nd_solicits"] >= 1 and a["nd_adverts_sent"] >= 1 and b["nd_adverts_rcvd"] >= 1

    check(answered(ls, lc) or answered(lc, ls), f"no ND exchange: server {ls}, client {lc}")


def with_keys(conf, extra, name):
    """A copy of config `conf` with the `extra` lines added (keys given twice: the last wins)."""
    d = "/tmp/uroce-port-keys"
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(open(conf).read() + "\n" + extra + "\n")
    return path


def tshark_rows(pcap, fields):
    out = subprocess.run(["tshark", "-r", pcap, "-T", "fields"] + sum([["-e", f] for f in fields], []),
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"tshark -r {pcap}: {out.stderr.strip()}")
    return [l.split("\t") for l in out.stdout.splitlines() if l]


def scenario_memif_capture():
    """Both ends capture (config key capture) a WRITE run: pcapng with one interface, every
    frame inbound or outbound, the server's cut at the default snap length (headers + 64), the
    client's whole; tshark reads both, uroce-dissect finds every client frame valid RoCE."""
    d = "/tmp/uroce-port-capture"
    subprocess.run(["rm", "-rf", d], check=False)
    os.makedirs(d)
    s = with_keys(cfg("memif-server.conf"), f"capture = {d}/s.pcapng", "capture-s.conf")
    c = with_keys(cfg("memif-client.conf"), f"capture = {d}/c.pcapng\ncapture_snaplen = 65535", "capture-c.conf")
    st, ct = perf_pair([], [], s, c, "127.0.0.1", ["--test", "write", "-s", "2048", "-n", "200"], "memif-capture")
    for side, text, pcap, snapped in (("server", st, f"{d}/s.pcapng", True), ("client", ct, f"{d}/c.pcapng", False)):
        link = counters(text)
        check(link.get("capture_frames", 0) > 0 and link.get("capture_skipped") == 0, f"{side}: link {link}")
        rows = tshark_rows(pcap, ["frame.interface_id", "frame.packet_flags_direction", "frame.cap_len", "frame.len",
                                  "udp.dstport"])
        check(len(rows) == link["capture_frames"], f"{side}: tshark {len(rows)} frames, link {link['capture_frames']}")
        check(all(r[0] == "0" and r[4] == "4791" for r in rows), f"{side}: a frame not on interface 0 or not RoCE")
        dirs = {r[1] for r in rows}
        inbound = sum(r[1] in ("1", "0x1", "0x00000001") for r in rows)
        check(len(dirs) == 2 and inbound == link["rx_roce"], f"{side}: directions {dirs}, {inbound} inbound, link {link}")
        cut = [r for r in rows if int(r[2]) < int(r[3])]
        if snapped:
            check(cut and all(int(r[2]) == 14 + 20 + 8 + 12 + 16 + 64 for r in cut if int(r[3]) > 200),
                  f"{side}: snap lengths {sorted({r[2] for r in rows})}")
        else:
            check(not cut, f"{side}: {len(cut)} frames cut")
        dis = subprocess.run([args.dissect, pcap], capture_output=True, text=True, timeout=60)
        last = dis.stdout.strip().splitlines()[-1] if dis.stdout.strip() else ""
        m = re.match(r"(\d+) frames, (\d+) roce, (\d+) icrc ok", last)
        check(m and int(m.group(1)) == len(rows), f"{side}: uroce-dissect: {last} {dis.stderr.strip()}")
        if not snapped:
            check(dis.returncode == 0 and int(m.group(3)) == len(rows), f"{side}: uroce-dissect: {last}")
        log(f"{side}: {len(rows)} frames ({inbound} in), {len(cut)} cut; dissect: {last}")


def scenario_veth_lossy():
    """fault_drop = 0.01 at both ends of the af_packet pair: WRITEs complete with every byte
    checked, the fault stages dropped frames and the engines retransmitted. Then
    fault_tx_corrupt = 0.01 at the client: every corrupted frame is an ICRC error at the server."""
    ns_up()
    a = with_keys(cfg("veth-a.conf"), "fault_drop = 0.01\nfault_seed = 1", "lossy-a.conf")
    b = with_keys(cfg("veth-b.conf"), "fault_drop = 0.01\nfault_seed = 2", "lossy-b.conf")
    st, ct = perf_pair(NSB, NSA, b, a, "198.18.0.2", ["--test", "write", "-s", "4096", "-n", "2000"], "veth-lossy",
                       timeout=90)
    dropped = retrans = 0
    for side, text in (("server", st), ("client", ct)):
        link, eng = counters(text), counters(text, "engine")
        faults = {k: v for k, v in link.items() if "_fault_" in k}
        check(faults, f"{side}: no fault counters in {link}")
        dropped += link["rx_fault_dropped"] + link["tx_fault_dropped"]
        retrans += eng.get("retransmitted", 0)  # the engine prints only its nonzero counters
        log(f"{side}: " + " ".join(f"{k}={v}" for k, v in faults.items() if v) + " | engine " +
            " ".join(f"{k}={eng.get(k, 0)}" for k in ("retransmitted", "timeouts", "out_of_seq_request", "rcvd_seq_err",
                                                       "duplicate_request", "out_of_sequence")))
    check(dropped > 0 and retrans > 0, f"dropped {dropped}, retransmitted {retrans}")
    # Corruption: the client's transmit stage flips a bit after the transport headers; the
    # frames reach the server's engine, which counts ICRC errors (and the data still arrives).
    a = with_keys(cfg("veth-a.conf"), "fault_tx_corrupt = 0.01", "corrupt-a.conf")
    st, ct = perf_pair(NSB, NSA, cfg("veth-b.conf"), a, "198.18.0.2", ["--test", "write", "-s", "4096", "-n", "1000"],
                       "veth-corrupt", timeout=90)
    corrupted = counters(ct).get("tx_fault_corrupted", 0)
    icrc = counters(st, "engine").get("icrc_errors", 0)
    log(f"client tx_fault_corrupted={corrupted}, server engine icrc_errors={icrc}")
    check(corrupted > 0 and icrc == corrupted, f"corrupted {corrupted}, server icrc_errors {icrc}")


def scenario_veth_xdp():
    """af_xdp on the same veth pair: the XDP program hands every frame of the data veth to
    uroce, so the TCP exchange uses the control pair (198.18.1.x, scripts/netns-pair)."""
    ns_up()
    for tag, opts in OPS:
        if tag not in ("write-bw", "send-bw", "read-bw", "cas-bw", "write-lat"):
            continue  # the rest is covered over af_packet and memif
        perf_pair(NSA, NSB, cfg("veth-a-xdp.conf"), cfg("veth-b-xdp.conf"), "198.18.1.1", opts, "xdp-" + tag)


def icmp_checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


PING_PY = r'''
import socket, struct, sys, time
fam, addr, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
if fam == "4":
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); dest = (addr, 0); req, rep = 8, 0
else:
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    a, _, ifc = addr.partition("%"); dest = (a, 0, 0, socket.if_nametoindex(ifc)); req, rep = 128, 129
s.settimeout(1.0)
got = 0
for seq in range(n):
    payload = b"uroce-ping" + bytes(range(22))
    hdr = struct.pack("!BBHHH", req, 0, 0, 0x7572, seq)
    if fam == "4": hdr = struct.pack("!BBHHH", req, 0, csum(hdr + payload), 0x7572, seq)
    s.sendto(hdr + payload, dest)
    end = time.time() + 1.0
    while time.time() < end:
        try: data, _ = s.recvfrom(2048)
        except socket.timeout: break
        if fam == "4": data = data[(data[0] & 15) * 4:]
        if data[0] == rep and data[8:] == payload and struct.unpack("!H", data[6:8])[0] == seq:
            got += 1; break
print("ping replies %d/%d" % (got, n)); sys.exit(0 if got == n else 1)
'''


def ping(ns, fam, addr, n=3):
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PING_PY, fam, addr, str(n)],
                       capture_output=True, text=True, timeout=20)
    log(f"ping -{fam} {addr} from {ns}: {r.stdout.strip()} {r.stderr.strip()}")
    return r.returncode == 0


FOREIGN_PY = r'''
import socket, struct, sys
ifc, dmac, n = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifc, 0))
smac = bytes.fromhex("02feedc6120e")
def ip4(src, dst, payload, proto=17):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return h + payload
def udp(dport, body): return struct.pack("!HHHH", 0xC000, dport, 8 + len(body), 0) + body
bth = struct.pack("!BBHII", 0x0a, 0, 0xffff, 0x11, 0) + bytes(20)
for i in range(n):
    s.send(dmac + smac + b"\x08\x00" + ip4("198.18.0.2", "198.18.0.99", udp(4791, bth)))   # another IP
    s.send(dmac + smac + b"\x08\x00" + ip4("198.18.0.2", "198.18.0.11", udp(4792, bth)))   # another port
print("sent", 2 * n)
'''

FLOOD_PY = r'''
import os, random, socket, struct, sys, time
ifc, dmac, secs = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifc, 0))
rnd = random.Random(5)
smac = bytes.fromhex("02feedc6120f")
ip = socket.inet_aton("198.18.0.11")
def ip4(payload, proto=17, tot=None):
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, tot or 20 + len(payload), 0, 0x4000, 64, proto, 0,
                       socket.inet_aton("198.18.0.2"), ip) + payload
frames = []
for i in range(512):
    k = i % 8
    body = os.urandom(rnd.randint(0, 200))
    if k == 0: f = os.urandom(rnd.randint(14, 300))                                   # pure garbage
    elif k == 1: f = dmac + smac + b"\x08\x00" + os.urandom(rnd.randint(0, 100))       # bad IPv4
    elif k == 2:                                                                       # RoCE, bad ICRC
        f = dmac + smac + b"\x08\x00" + ip4(struct.pack("!HHHH", 0xC000, 4791, 8 + 12 + len(body), 0) + os.urandom(12) + body)
    elif k == 3: f = dmac + smac + b"\x08\x00" + ip4(os.urandom(30), tot=1400)         # lying lengths
    elif k == 4: f = dmac + smac + b"\x08\x06" + os.urandom(28)                        # broken ARP
    elif k == 5: f = dmac + smac + b"\x86\xdd" + os.urandom(rnd.randint(0, 120))       # broken IPv6
    elif k == 6: f = b"\xff" * 6 + smac + b"\x08\x06" + os.urandom(28)                 # broadcast ARP junk
    else: f = dmac + smac + struct.pack("!H", rnd.randint(0, 0xffff)) + body          # other ethertypes
    frames.append(f[:1500])
# Until killed (secs 0) or for secs: bursts of 128 frames with a 1 ms pause between them, so
# the flood does not take a whole core from the two busy pollers on this 2-core machine.
print("flooding", flush=True)
n = 0
end = time.time() + secs if secs > 0 else float("inf")
while time.time() < end:
    for i in range(0, len(frames), 128):
        for f in frames[i:i + 128]:
            try: s.send(f)
            except OSError: pass
        n += 128
        time.sleep(0.001)
print("flood sent", n, flush=True)
'''


def scenario_veth_arp_ping():
    """A server waiting for its client answers ARP and ping (IPv4 and IPv6) from the peer
    namespace's kernel; frames for another IP or UDP port are dropped and counted."""
    ns_up()
    sout = "/tmp/uroce-port-ping-s.log"
    s = start(NSA + [args.perf, "--config", cfg("veth-a.conf"), "--stats", "--timeout", "60",
                     "--test", "write", "-s", "4096", "-n", "100"], sout)
    # Up when it answers a ping (however long the start takes, within a generous limit).
    limit = time.time() + 30
    while not ping("uroce-b", "4", "198.18.0.11", 1):
        check(time.time() < limit and s.poll() is None, "the server did not come up")
    check(ping("uroce-b", "4", "198.18.0.11"), "IPv4 ping of the uroce address failed")
    neigh = subprocess.run(["ip", "-n", "uroce-b", "neigh", "show", "198.18.0.11"], capture_output=True, text=True).stdout
    log("kernel neighbour entry:", neigh.strip())
    check("02:00:c6:12:00:11" in neigh, "the kernel did not learn the uroce MAC by ARP")
    check(ping("uroce-b", "6", "fe80::c6ff:fe12:11%uroce-vb"), "IPv6 ping of the uroce link-local address failed")
    r = subprocess.run(NSB + [sys.executable, "-c", FOREIGN_PY, "uroce-vb", "02:00:c6:12:00:11", "20"],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 0, "foreign frame sender failed: " + r.stderr)
    time.sleep(0.3)
    # A client completes the run, so the server prints its counters.
    c = start(NSB + [args.perf, "--config", cfg("veth-b.conf"), "--stats", "--timeout", "30",
                     "--test", "write", "-s", "4096", "-n", "100", "198.18.0.1"], "/tmp/uroce-port-ping-c.log")
    crc, ctext = finish(c, "/tmp/uroce-port-ping-c.log", 40)
    src, stext = finish(s, sout, 10)
    procs.clear()
    check(crc == 0 and src == 0, f"uroce-perf failed: server {src} client {crc}\n{stext}\n{ctext}")
    lc = counters(stext)
    log("server link counters:", {k: v for k, v in lc.items() if v})
    check(lc["arp_requests"] >= 1 and lc["arp_replies_sent"] >= 1, "no ARP reply counted")
    check(lc["icmp_echo"] >= 6 and lc["icmp_replies_sent"] >= 6, "echo requests not all answered")
    check(lc["nd_solicits"] >= 1 and lc["nd_adverts_sent"] >= 1, "no ND exchange counted")
    check(lc["drop_not_our_ip"] >= 20, "frames for another IP not counted")
    check(lc["drop_udp_port"] >= 20, "frames for another UDP port not counted")
    ec = counters(stext, "engine")
    check(ec["rcvd_pkts"] >= 100, "engine saw too few packets")


def scenario_veth_flood():
    """A flood of garbage frames at the server does not disturb a running transfer.

    No timing assumption: the flood starts first and runs until the end, and the transfer (a
    WRITE sweep up to 1 MiB) is repeated until the server has counted the flood's frames as
    dropped. The only timer is a generous limit on the whole scenario."""
    ns_up()
    limit = time.time() + 150
    flood = subprocess.Popen(NSB + [sys.executable, "-c", FLOOD_PY, "uroce-vb", "02:00:c6:12:00:11", "0"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready, _, _ = select.select([flood.stdout], [], [], max(1.0, limit - time.time()))
        check(ready and flood.stdout.readline().strip() == "flooding", "the flood did not start")
        runs = 0
        while True:
            runs += 1
            st, ct = perf_pair(NSA, NSB, cfg("veth-a.conf"), cfg("veth-b.conf"), "198.18.0.1",
                               ["--test", "write", "-a", "--max-size", "1048576", "--cq-mod", "16", "-n", "150"],
                               f"veth-flood-write-{runs}", timeout=60)
            check(flood.poll() is None, "the flood stopped before the transfer ended")
            lc = counters(st)
            ec = counters(st, "engine")
            log("server link counters:", {k: v for k, v in lc.items() if v})
            log("server engine counters:", {k: v for k, v in ec.items() if v})
            dropped = sum(v for k, v in lc.items() if k.startswith("drop_"))
            if dropped > 1000:
                log(f"flood seen by the server during transfer {runs}: dropped {dropped}")
                break
            check(time.time() < limit, f"flood not seen by the server in {runs} transfers (dropped {dropped})")
    finally:
        try:
            os.killpg(flood.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        flood.wait(timeout=10)


SPOOF_PY = r'''
# Forged frames with a valid ICRC (scapy computes it), from the peer namespace's kernel.
import struct, sys, time
from scapy.all import Ether, IP, IPv6, UDP, ARP, Raw, raw, sendp
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6NDOptDstLLAddr
from scapy.contrib.roce import BTH
import re
ifc, dmac, dip, log, client_ip, n = sys.argv[1:7]
n = int(n)
# Ready (scapy loaded) before the server starts; the forged frames go out as soon as the server
# prints its QP, so they arrive while the transfer runs (the test retries a run they missed).
print("ready", flush=True)
end = time.time() + 60
while True:
    try:
        m = re.search(r"local  address: \S+  QPN 0x([0-9a-f]+) PSN 0x[0-9a-f]+ RKey 0x([0-9a-f]+) VA 0x([0-9a-f]+)",
                      open(log).read())
    except FileNotFoundError:
        m = None
    if m or time.time() > end:
        break
    time.sleep(0.001)
if not m:
    sys.exit("no server address in " + log)
qpn, rkey, va = (int(x, 16) for x in m.groups())
smac = "02:fe:ed:c6:12:0f"
frames = []
# First (so that a run which saw the RoCE frames below saw these too):
# ARP lies: a gratuitous reply for the peer's address from another MAC, one for an unknown address.
frames.append(Ether(dst=dmac, src="02:66:66:66:66:66") /
              ARP(op=2, hwsrc="02:66:66:66:66:66", psrc=client_ip, hwdst=dmac, pdst=dip))
frames.append(Ether(dst=dmac, src="02:66:66:66:66:66") /
              ARP(op=2, hwsrc="02:66:66:66:66:66", psrc="198.18.0.99", hwdst=dmac, pdst=dip))
# A neighbour advertisement that crossed a router (hop limit 64, not 255).
frames.append(Ether(dst=dmac, src="02:66:66:66:66:66") / IPv6(src="fe80::66", dst="ff02::1", hlim=64) /
              ICMPv6ND_NA(tgt="fe80::66", R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr="02:66:66:66:66:66"))
for i in range(n):
    reth = struct.pack("!QII", va, rkey, 64)
    # A WRITE with the live QPN, R_Key and VA, from an address that is not the QP's peer.
    frames.append(Ether(dst=dmac, src=smac) / IP(src="198.18.0.77", dst=dip, flags="DF") /
                  UDP(sport=0xC000 + i, dport=4791, chksum=0) /
                  BTH(opcode=0x0A, dqpn=qpn, psn=i, ackreq=1) / Raw(reth + b"\x5a" * 64))
    # A request to a QP that does not exist, from the real peer's address.
    frames.append(Ether(dst=dmac, src=smac) / IP(src=client_ip, dst=dip, flags="DF") /
                  UDP(sport=0xC000, dport=4791, chksum=0) /
                  BTH(opcode=0x0A, dqpn=(qpn ^ 0x5A5A5A) or 7, psn=i, ackreq=1) / Raw(reth + b"\x5a" * 64))
sendp(frames, iface=ifc, verbose=False)
print("sent", len(frames))
'''


def scenario_veth_spoof():
    """Forged frames with a valid ICRC from the peer namespace's kernel during a transfer: a
    WRITE with the live QPN, R_Key and VA from a spoofed source, requests to a QP that does not
    exist, ARP lies and a routed neighbour advertisement. The transfer's data stays verified and
    the server counts each kind. No timing assumption: a run that ended before all forged frames
    arrived is repeated with twice the iterations, within a generous overall limit."""
    ns_up()
    n = 50
    iters = 4000
    limit = time.time() + 100
    sout = "/tmp/uroce-port-veth-spoof-s.log"
    while True:
        if os.path.exists(sout):
            os.unlink(sout)
        spoof = subprocess.Popen(NSB + ["/usr/bin/python3", "-c", SPOOF_PY, "uroce-vb", "02:00:c6:12:00:11", "198.18.0.11",
                                        sout, "198.18.0.12", str(n)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(spoof)
        if spoof.stdout.readline().strip() != "ready":
            raise Fail("the spoofing script did not start: " + spoof.communicate(timeout=10)[1][-2000:])

        def attack():
            out, err = spoof.communicate(timeout=70)
            check(spoof.returncode == 0, "the spoofing script failed: " + err[-2000:])
            log("spoofer:", out.strip())

        st, ct = perf_pair(NSA, NSB, cfg("veth-a.conf"), cfg("veth-b.conf"), "198.18.0.1",
                           ["--test", "write", "-s", "65536", "-n", str(iters)], "veth-spoof", timeout=60, during=attack)
        lc = counters(st)
        ec = counters(st, "engine")
        log(f"{iters} iterations; server engine:", {k: v for k, v in ec.items() if v})
        log("server link:", {k: v for k, v in lc.items() if v})
        if ec["dropped_source"] >= n and ec["dropped_unknown_qp"] >= n:
            break
        check(time.time() < limit, f"the forged frames never arrived during a transfer ({iters} iterations)")
        iters *= 2
    check(ec["dropped_source"] == n, f"spoofed-source WRITEs: {ec['dropped_source']} dropped of {n}")
    check(ec["dropped_unknown_qp"] >= n, f"requests to an unknown QP: {ec['dropped_unknown_qp']} dropped of {n}")
    check(lc["neigh_mac_changed"] >= 1, "the ARP lie about the peer was not counted")
    check(lc["neigh_unsolicited"] >= 1, "the gratuitous ARP reply created an entry")
    check(lc["drop_nd_hop_limit"] >= 1, "the routed neighbour advertisement was not dropped")


# DCQCN with the paper's timers (docs/congestion.md "A setting that meets issue 33's target").
DCQCN_KEYS = ("cc = dcqcn\ncc_line_rate = 40000\nrpg_time_reset = 55\nrpg_byte_reset = 1048576\n"
              "dce_tcp_rtt = 55\nrpg_min_rate = 500\n")


def bottleneck_run(name, prefixes, scfg, ccfg, peer, n, gbps, tag):
    """Four QPs of n 64 KiB WRITEs through the client's congestion point (its rate gbps): every
    frame through it, the goodput not above its rate, every CE mark arriving as one. Returns
    (the client's link counters, its engine's, the server's engine's, the goodput)."""
    st, ct = perf_pair(prefixes[0], prefixes[1], scfg, ccfg, peer,
                       ["--test", "write", "-s", "65536", "-n", str(n), "-q", "4"], tag, timeout=60)
    link, eng, seng = counters(ct), counters(ct, "engine"), counters(st, "engine")
    row = [l.split() for l in ct.splitlines() if re.match(r"^ 65536 ", l)]
    bw = float(row[-1][3]) if row else -1
    log(f"{name}: {bw:.3f} Gbit/s; bottleneck frames {link.get('bottleneck_frames')} marked "
        f"{link.get('bottleneck_marked')} dropped {link.get('bottleneck_dropped')} max queue "
        f"{link.get('bottleneck_max_queue')} B; retransmitted {eng.get('retransmitted', 0)}; server CE "
        f"{seng.get('ecn_ce_rcvd', 0)} CNPs {seng.get('cnp_sent', 0)}; client CNPs {eng.get('cnp_rcvd', 0)}")
    check(link.get("bottleneck_frames", 0) >= n * 4 * 16, f"{name}: every frame through the bottleneck: {link}")
    check(0 < bw <= gbps, f"{name}: goodput {bw} Gbit/s, not above the bottleneck's {gbps} Gbit/s")
    check(link.get("bottleneck_marked", 0) > 0 and seng.get("ecn_ce_rcvd", 0) == link["bottleneck_marked"],
          f"{name}: frames marked CE at the bottleneck arrive marked ({link.get('bottleneck_marked')} marked, "
          f"server saw {seng.get('ecn_ce_rcvd', 0)})")
    return link, eng, seng, bw


def scenario_memif_bottleneck():
    """A congestion point on the client's transmit side (keys bottleneck_*: 4 Gbit/s, a 512 KiB
    queue, RED marking from 32 to 128 KiB), every frame ECT(0): four QPs of 64 KiB WRITEs through
    it, without congestion control and with DCQCN. Both: every byte checked, the goodput never
    above the bottleneck's rate, frames marked CE. Off: the queue fills. DCQCN: the server's CNPs
    reach the client, and the bottleneck drops no more than without it."""
    bn = "bottleneck_mbps = 4000\nbottleneck_queue_kb = 512\nbottleneck_k_kb = 32\nbottleneck_kmax_kb = 128\n" \
         "bottleneck_pmax = 1\necn = ect0\n"
    got = {}
    for name, extra in (("off", "cc = off\n"), ("dcqcn", DCQCN_KEYS)):
        c = with_keys(cfg("memif-client.conf"), bn + extra, f"bottleneck-{name}.conf")
        got[name] = bottleneck_run(name, ([], []), cfg("memif-server.conf"), c, "127.0.0.1", 2000, 4.0,
                                   f"memif-bottleneck-{name}")
    off, dc = got["off"], got["dcqcn"]
    check(off[0]["bottleneck_max_queue"] > 256 * 1024, f"off: the queue fills ({off[0]['bottleneck_max_queue']} B)")
    check(dc[1].get("cnp_rcvd", 0) > 0 and dc[2].get("cnp_sent", 0) > 0,
          f"dcqcn: CNPs sent and received ({dc[2].get('cnp_sent', 0)}, {dc[1].get('cnp_rcvd', 0)})")
    check(dc[0]["bottleneck_dropped"] <= off[0]["bottleneck_dropped"],
          f"dcqcn drops no more than off ({dc[0]['bottleneck_dropped']} against {off[0]['bottleneck_dropped']})")
    # The client's capture (a shorter run): each CNP noted on the next frame it captured (the rate
    # it left the QP at, engine::Link::note), as tshark and uroce-dissect read the comments.
    d = "/tmp/uroce-port-capture"
    subprocess.run(["rm", "-rf", d], check=False)
    os.makedirs(d)
    pcap = f"{d}/bottleneck-c.pcapng"
    c = with_keys(cfg("memif-client.conf"), bn + DCQCN_KEYS + f"capture = {pcap}\n", "bottleneck-capture.conf")
    _, ct = perf_pair([], [], cfg("memif-server.conf"), c, "127.0.0.1",
                      ["--test", "write", "-s", "65536", "-n", "300", "-q", "4"], "memif-bottleneck-capture", timeout=60)
    cnps = counters(ct, "engine").get("cnp_rcvd", 0)
    comments = [r[0] for r in tshark_rows(pcap, ["frame.comment"]) if r and r[0]]
    noted = sum(len(re.findall(r"QP 0x[0-9a-f]{6} cc=dcqcn: CNP \d+: rate [0-9.]+ -> [0-9.]+ Gbit/s \(", x))
                for x in comments)
    dis = subprocess.run([args.dissect, pcap], capture_output=True, text=True, timeout=60).stdout
    shown = len(re.findall(r"cc=dcqcn: CNP \d+: rate ", dis))
    cuts = len(re.findall(r"cc=dcqcn: CNP \d+: rate [0-9.]+ -> [0-9.]+ Gbit/s \((?:cut|first CNP)\)", dis))
    log(f"capture: {cnps} CNPs received, {noted} noted in {len(comments)} frame comments (tshark), {shown} shown "
        f"by uroce-dissect, {cuts} of them cuts")
    # Every CNP noted; the last may find no frame after it before the capture closes.
    check(cnps > 0 and cnps - 1 <= noted <= cnps, f"capture: {noted} CNPs noted, {cnps} received")
    check(shown == noted and cuts > 0, f"capture: uroce-dissect shows {shown} notes ({cuts} cuts), tshark {noted}")


def scenario_veth_bottleneck():
    """The congestion point on the veth pair (af_packet): 500 Mbit/s on the client's transmit
    side, a 256 KiB queue, RED from 16 to 64 KiB, every frame ECT(0); four QPs of 64 KiB WRITEs,
    without congestion control and with DCQCN (the paper's timers, rpg_min_rate 50 Mbit/s: four
    QPs at 500 would be above the bottleneck). Both: every byte checked, every frame through the
    stage, the goodput not above its rate, the marks arriving as CE. Off: the queue fills and
    drops. DCQCN: CNPs come back, and it drops fewer frames than no congestion control."""
    ns_up()
    bn = "bottleneck_mbps = 500\nbottleneck_queue_kb = 256\nbottleneck_k_kb = 16\nbottleneck_kmax_kb = 64\n" \
         "bottleneck_pmax = 1\necn = ect0\n"
    dcqcn = DCQCN_KEYS.replace("rpg_min_rate = 500", "rpg_min_rate = 50")
    b = with_keys(cfg("veth-b.conf"), "ecn = ect0", "bottleneck-b.conf")
    got = {}
    for name, extra in (("off", "cc = off\n"), ("dcqcn", dcqcn)):
        a = with_keys(cfg("veth-a.conf"), bn + extra, f"bottleneck-a-{name}.conf")
        got[name] = bottleneck_run(name, (NSB, NSA), b, a, "198.18.0.2", 150, 0.5, f"veth-bottleneck-{name}")
    off, dc = got["off"], got["dcqcn"]
    check(off[0].get("bottleneck_dropped", 0) > 0, f"off: the queue overflows ({off[0]})")
    check(dc[1].get("cnp_rcvd", 0) > 0 and dc[1].get("cnp_rcvd", 0) == dc[2].get("cnp_sent", 0),
          f"dcqcn: the CNPs sent reach the client ({dc[2].get('cnp_sent', 0)}, {dc[1].get('cnp_rcvd', 0)})")
    check(dc[0]["bottleneck_dropped"] < off[0]["bottleneck_dropped"],
          f"dcqcn drops fewer than off ({dc[0]['bottleneck_dropped']} against {off[0]['bottleneck_dropped']})")


SCENARIOS = {
    "memif-client-first": scenario_memif_client_first,
    "memif-bottleneck": scenario_memif_bottleneck,
    "veth-bottleneck": scenario_veth_bottleneck,
    "memif-ops": scenario_memif_ops,
    "veth-ops": scenario_veth_ops,
    "veth-ipv6": scenario_veth_ipv6,
    "veth-arp-ping": scenario_veth_arp_ping,
    "veth-flood": scenario_veth_flood,
    "veth-xdp": scenario_veth_xdp,
    "veth-spoof": scenario_veth_spoof,
    "memif-capture": scenario_memif_capture,
    "veth-lossy": scenario_veth_lossy,
}


def main():
    global args, netns
    ap = argparse.ArgumentParser()
    ap.add_argument("--perf", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--netns", required=True)
    ap.add_argument("--dissect", default="uroce-dissect")
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    netns = driver.Netns(args.netns)
    if os.geteuid() != 0:
        print("skipped: needs root (DPDK vdevs, network namespaces)")
        return 77
    driver.exit_on_signals()
    try:
        SCENARIOS[args.scenario]()
        log(f"{args.scenario}: PASS")
        return 0
    except Fail as e:
        log(f"{args.scenario}: FAIL: {e}")
        return 1
    finally:
        cleanup()


if __name__ == "__main__":
    sys.exit(main())
