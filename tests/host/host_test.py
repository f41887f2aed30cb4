#!/usr/bin/env python3
"""Suite host: uroce on a netdev of the host beside the kernel (config key `netdev`,
docs/netdev.md), as rxe is used: each end's kernel address is also its uroce GID.

Two namespaces joined by a veth pair (or through a third that routes), each end's interface
owned by the kernel with an address from 198.18.0.0/15. Unmodified programs run through
scripts/uroce-run with a config holding only `name` and `netdev`, and use the kernel's address
both for their TCP exchange and for RDMA. Scenarios:
  tools    ibv_rc_pingpong (IPv4 and IPv6 link-local GIDs), ib_write_bw, ib_send_lat, rping,
           mckey (UD multicast: the kernel joins the group on the interface while the receiver
           is a member), while ping and repeated TCP transfers between the same addresses go on; the kernel
           sends no ICMP port unreachable for RoCE frames while uroce is attached (and does once
           it is not: the counter is shown to move); the device view names the netdev of each
           GID; uroce's XDP program is gone after each program.
  packet   the same over the af_packet fallback (netdev_link = af_packet): a socket filter keeps
           RoCEv2 frames only, and UDP 4791 held on the interface keeps the kernel from ICMP;
  gateway  ibv_rc_pingpong and ib_write_bw between two subnets through a router namespace: the
           next hop is the kernel's gateway, its MAC the kernel's neighbour entry.
  gids     the GID table follows the interface's addresses while a program runs: an IPv6
           address added becomes GID 2 (device view, IBV_EVENT_GID_CHANGE to ibv_asyncwatch),
           removed leaves it empty, a second IPv4 address likewise; ibv_rc_pingpong runs over
           the global IPv6 GIDs and over second IPv4 addresses;
  kill     one process per netdev (a second is refused with a clear message); a process killed
           with SIGKILL leaves its XDP program, which the next one replaces; it then works.
Every run is bounded; namespaces and processes are removed on any exit.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

suite = driver.Suite(scenarios=["tools", "packet", "gateway", "gids", "kill"], grace=2.0)
log, check = driver.log, driver.check
NS = {"a": "uroce-ha", "b": "uroce-hb", "r": "uroce-hr"}
IF = {"a": "uh-a", "b": "uh-b"}
tmp = tempfile.mkdtemp(prefix="uroce-host-")


def ns(side):
    return ["ip", "netns", "exec", NS[side]]


sh = driver.sh


def topology_down():
    driver.netns_down(NS.values())


def topology_up(routed, link="af_xdp"):
    """Direct: a 198.18.4.1/24 -- b 198.18.4.2/24. Routed: a 198.18.6.1/24 -- r -- b 198.18.7.2/24,
    each end's default route through r (198.18.6.254, 198.18.7.254)."""
    topology_down()
    for s in ("a", "b") + (("r",) if routed else ()):
        sh(f"ip netns add {NS[s]}")
        sh(f"ip -n {NS[s]} link set lo up")
    if not routed:
        sh(f"ip link add {IF['a']} netns {NS['a']} type veth peer {IF['b']} netns {NS['b']}")
        addr = {"a": "198.18.4.1", "b": "198.18.4.2"}
        for s in ("a", "b"):
            sh(f"ip -n {NS[s]} addr add {addr[s]}/24 dev {IF[s]}")
    else:
        sh(f"ip link add {IF['a']} netns {NS['a']} type veth peer uh-ra netns {NS['r']}")
        sh(f"ip link add {IF['b']} netns {NS['b']} type veth peer uh-rb netns {NS['r']}")
        addr = {"a": "198.18.6.1", "b": "198.18.7.2"}
        sh(f"ip -n {NS['a']} addr add 198.18.6.1/24 dev {IF['a']}")
        sh(f"ip -n {NS['b']} addr add 198.18.7.2/24 dev {IF['b']}")
        sh(f"ip -n {NS['r']} addr add 198.18.6.254/24 dev uh-ra")
        sh(f"ip -n {NS['r']} addr add 198.18.7.254/24 dev uh-rb")
        for i in ("uh-ra", "uh-rb"):
            sh(f"ip -n {NS['r']} link set {i} up")
        sh(f"ip netns exec {NS['r']} sysctl -qw net.ipv4.ip_forward=1")
    for s in ("a", "b"):
        sh(f"ip -n {NS[s]} link set {IF[s]} up")
    if routed:
        sh(f"ip -n {NS['a']} route add default via 198.18.6.254")
        sh(f"ip -n {NS['b']} route add default via 198.18.7.254")
    for s in ("a", "b"):
        with open(conf(s), "w") as f:
            f.write(f"name = uroce_h{s}\nnetdev = {IF[s]}\n" + (f"netdev_link = {link}\n" if link != "af_xdp" else ""))
    # IPv6 link-local addresses leave the tentative state (DAD) before anything uses them.
    t0 = time.time()
    while time.time() - t0 < 5 and any("tentative" in sh(f"ip -n {NS[s]} -6 addr show dev {IF[s]}") for s in ("a", "b")):
        time.sleep(0.1)
    return addr


def conf(side):
    return os.path.join(tmp, f"host-{side}.conf")


def xdp_attached(side):
    return "prog/xdp" in sh(f"ip -n {NS[side]} -d link show {IF[side]}")


def ll6(side):
    m = re.search(r"inet6 (fe80::[0-9a-f:]+)/64", sh(f"ip -n {NS[side]} -6 addr show dev {IF[side]}"))
    return m.group(1) if m else None


def counters(side):
    """The kernel's ICMP destination-unreachable sends and UDP datagrams to no port, in `side`."""
    out = sh(f"ip netns exec {NS[side]} nstat -az IcmpOutDestUnreachs UdpNoPorts Icmp6OutDestUnreachs Udp6NoPorts")
    v = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            v[f[0]] = int(f[1])
    return v


def start(side, args, name, env=None, netdev=False):
    """args through uroce-run in `side`'s namespace, with the two-line config, or with --netdev."""
    dev = ["--netdev", IF[side]] if netdev else ["--config", conf(side)]
    cmd = ns(side) + ["stdbuf", "-oL", "-eL", suite.run, "--lib", suite.args.lib] + dev + ["--"] + args
    return suite.children.start(cmd, out=os.path.join(tmp, name + ".log"), env=env)


def output(name):
    with open(os.path.join(tmp, name + ".log"), errors="replace") as f:
        return f.read()


def wait_port(side, port, proc, t=20):
    t0 = time.time()
    while time.time() - t0 < t:
        if re.search(r":%d\b" % port, sh(f"ip netns exec {NS[side]} ss -ltnH")):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def pair(label, server_args, client_args, judge, port=None, limit=60):
    """One server (side b) and one client (side a); judge(server_out, client_out) -> (ok, why)."""
    srv = start("b", server_args, label + "-server")
    if port:
        ready = wait_port("b", port, srv)
    else:
        time.sleep(3)   # rping listens on rdma_cm, not TCP
        ready = srv.poll() is None
    if not check(ready, f"{label}: the server did not start: {output(label + '-server')[-600:]}"):
        suite.children.stop_all()
        return False
    cli = start("a", client_args, label + "-client")
    crc = suite.children.finish(cli, limit)
    src = suite.children.finish(srv, 15)
    so, co = output(label + "-server"), output(label + "-client")
    ok, why = judge(so, co)
    log(f"{label}: server exit {src}, client exit {crc}: {why}")
    good = check(crc == 0 and src == 0 and ok, f"{label}: server {src} / client {crc}: {why}\n{so[-800:]}\n{co[-800:]}")
    for s in ("a", "b"):
        check(not xdp_attached(s), f"{label}: uroce's XDP program still attached on {IF[s]} after the program exited")
    return good


def perftest_line(size):
    def judge(so, co):
        rows = [l for l in co.splitlines() if re.match(r"^\s*%d\s+\d+\s+[\d.]+" % size, l)]
        return (len(rows) == 1, rows[0].strip() if rows else "no result line")
    return judge


def pingpong(iters):
    def judge(so, co):
        m = re.search(r"(\d+) iters in ([\d.]+) seconds", co)
        return (bool(m) and m.group(1) == str(iters) and f"{iters} iters" in so, m.group(0) if m else "no iters line")
    return judge


def rping_judge(n):
    def judge(so, co):
        c = len(re.findall(r"^ping data: rdma-ping-\d+", co, re.M))
        s = len(re.findall(r"^server ping data: rdma-ping-\d+", so, re.M))
        return (c == n and s == n, f"{c}/{n} pings verified by the client, {s}/{n} by the server")
    return judge


TCP_SERVER = r"""
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5601)); s.listen(4)
while True:
    c, _ = s.accept(); h = hashlib.sha256(); n = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big")
    while n > 0:
        d = c.recv(min(n, 65536))
        if not d: break
        h.update(d); n -= len(d)
    c.sendall(h.hexdigest().encode()); c.close()
"""
TCP_CLIENT = r"""
import hashlib, os, socket, sys, time
ok = bad = 0; t0 = time.time()
while not os.path.exists(sys.argv[2]) and time.time() - t0 < 600:
    data = os.urandom(1 << 20)
    try:
        c = socket.create_connection((sys.argv[1], 5601), timeout=5)
        c.sendall(len(data).to_bytes(8, "big") + data)
        got = c.recv(64).decode(); c.close()
        if got == hashlib.sha256(data).hexdigest(): ok += 1
        else: bad += 1
    except OSError as e:
        bad += 1; print("tcp error:", e, flush=True)
    time.sleep(0.05)
print(f"tcp transfers: {ok} ok, {bad} bad", flush=True)
"""


def background(addr):
    """ping and 1 MiB TCP transfers from a to b for as long as the scenario runs."""
    stop = os.path.join(tmp, "stop")
    driver.remove(stop)
    srv = suite.children.start(ns("b") + ["python3", "-c", TCP_SERVER, addr["b"]], out=os.path.join(tmp, "tcp-server.log"))
    time.sleep(0.5)
    cli = suite.children.start(ns("a") + ["python3", "-c", TCP_CLIENT, addr["b"], stop], out=os.path.join(tmp, "tcp-client.log"))
    png = suite.children.start(ns("a") + ["ping", "-i", "0.2", "-W", "1", addr["b"]], out=os.path.join(tmp, "ping.log"))
    return stop, srv, cli, png


def end_background(bg):
    stop, srv, cli, png = bg
    open(stop, "w").close()
    suite.children.finish(cli, 20)
    png.send_signal(signal.SIGINT)
    suite.children.finish(png, 5)
    driver.kill_group(srv, signal.SIGKILL)
    tcp, pings = output("tcp-client"), output("ping")
    m = re.search(r"tcp transfers: (\d+) ok, (\d+) bad", tcp)
    check(m and int(m.group(1)) > 0 and m.group(2) == "0", f"TCP between the kernel's addresses during the runs: {tcp.strip()[-300:]}")
    p = re.search(r"(\d+) packets transmitted, (\d+) received", pings)
    check(p and int(p.group(1)) > 0 and p.group(1) == p.group(2), f"ping during the runs: {p.group(0) if p else pings[-300:]}")
    log(f"during the runs: {m.group(0) if m else '?'}; ping {p.group(0) if p else '?'}")


def maddr(side):
    return sh(f"ip -n {NS[side]} maddr show dev {IF[side]}")


def mckey(addr, group="239.18.0.9", msgs=10):
    """UD multicast beside the kernel: the receiver (b) joins the group through rdma_cm and the
    kernel joins it on uh-b (IGMP; `ip maddr` shows it) while the receiver lives, and leaves it
    after; the sender (a) joins too and sends 10 datagrams to QP 0xFFFFFF, all received."""
    label = "mckey"
    srv = start("b", ["mckey", "-m", group, "-b", addr["b"], "-C", str(msgs)], label + "-server")
    t0 = time.time()
    while "joined dgid" not in output(label + "-server") and srv.poll() is None and time.time() - t0 < 20:
        time.sleep(0.05)
    joined = maddr("b")
    check(f"inet  {group}" in joined, f"{label}: the kernel joined {group} on {IF['b']} for the receiver: {joined}")
    cli = start("a", ["mckey", "-m", group, "-b", addr["a"], "-s", "-C", str(msgs)], label + "-client")
    crc = suite.children.finish(cli, 30)
    src = suite.children.finish(srv, 20)
    so, co = output(label + "-server"), output(label + "-client")
    ok = crc == 0 and src == 0 and "data transfers complete" in so and "return status 0" in so
    log(f"{label}: receiver exit {src}, sender exit {crc}; {IF['b']} joined {group}: {f'inet  {group}' in joined}")
    check(ok, f"{label}: receiver {src} / sender {crc}, {msgs} datagrams to {group}\n{so[-800:]}\n{co[-800:]}")
    check(f"inet  {group}" not in maddr("b"), f"{label}: {IF['b']} left {group} after the receiver: {maddr('b')}")


def tools(link="af_xdp"):
    addr = topology_up(routed=False, link=link)
    before = {s: counters(s) for s in ("a", "b")}
    bg = background(addr)
    pair("ibv_rc_pingpong -g 1", ["ibv_rc_pingpong", "-g", "1", "-n", "200"],
         ["ibv_rc_pingpong", "-g", "1", "-n", "200", addr["b"]], pingpong(200), port=18515)
    pair("ibv_rc_pingpong -g 0 (IPv6 link-local)", ["ibv_rc_pingpong", "-g", "0", "-n", "100"],
         ["ibv_rc_pingpong", "-g", "0", "-n", "100", addr["b"]], pingpong(100), port=18515)
    pair("ib_write_bw", ["ib_write_bw", "-x", "1", "-s", "65536", "-n", "2000"],
         ["ib_write_bw", "-x", "1", "-s", "65536", "-n", "2000", addr["b"]], perftest_line(65536), port=18515)
    pair("ib_send_lat", ["ib_send_lat", "-x", "1", "-s", "64", "-n", "1000"],
         ["ib_send_lat", "-x", "1", "-s", "64", "-n", "1000", addr["b"]], perftest_line(64), port=18515)
    pair("rping", ["rping", "-s", "-a", addr["b"], "-C", "10", "-v"],
         ["rping", "-c", "-a", addr["b"], "-C", "10", "-v"], rping_judge(10))
    if link == "af_xdp":
        mckey(addr)
    end_background(bg)
    after = {s: counters(s) for s in ("a", "b")}
    for s in ("a", "b"):
        moved = {k: after[s].get(k, 0) - before[s].get(k, 0) for k in after[s] if after[s].get(k, 0) != before[s].get(k, 0)}
        log(f"{NS[s]}: kernel ICMP unreachable / UDP no-port counters over the runs: {moved or 'unchanged'}")
        check(not moved, f"{NS[s]}: the kernel answered or counted RoCE frames while uroce was attached: {moved}")
    # The counter is not blind: with uroce gone, one datagram to 4791 is the kernel's (no port).
    sh(f"ip netns exec {NS['a']} python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
       f".sendto(b'x' * 40, ('{addr['b']}', 4791))\"")
    time.sleep(0.3)
    nop = counters("b").get("UdpNoPorts", 0) - after["b"].get("UdpNoPorts", 0)
    check(nop == 1, f"control: a UDP datagram to 4791 without uroce attached counted {nop} UdpNoPorts, want 1")
    log(f"control: without uroce, one datagram to {addr['b']}:4791 moved UdpNoPorts by {nop}")
    # The device view: the GIDs are the kernel's addresses, each naming the netdev (as rxe's).
    view = start("a", ["sh", "-c", "ibv_devinfo -v; rdma link show; rdma dev show; for i in 0 1; do printf 'gid %s %s %s\\n' $i "
                       "$(cat /sys/class/infiniband/uroce_ha/ports/1/gids/$i) "
                       "$(cat /sys/class/infiniband/uroce_ha/ports/1/gid_attrs/ndevs/$i); done"], "view")
    rc = suite.children.finish(view, 30)
    out = output("view")
    want_ll = ll6("a")
    check(rc == 0 and re.search(r"GID\[\s*1\]:\s+::ffff:198\.18\.4\.1, RoCE v2", out) is not None,
          f"ibv_devinfo -v shows GID 1 ::ffff:198.18.4.1: {out[-600:]}")
    check(want_ll is not None and re.search(r"GID\[\s*0\]:\s+" + re.escape(want_ll) + ", RoCE v2", out) is not None,
          f"ibv_devinfo -v shows GID 0 = the kernel's link-local {want_ll}")
    check(re.search(r"^gid 0 fe80:\S+ uh-a$", out, re.M) and re.search(r"^gid 1 \S+:c612:0401 uh-a$", out, re.M),
          f"the device view names netdev uh-a for GIDs 0 and 1: {[l for l in out.splitlines() if l.startswith('gid ')]}")
    check(re.search(r"active_mtu:\s+1024", out) is not None, "active_mtu 1024 on an interface of MTU 1500 (as rxe)")
    # RDMA netlink (verbs_shim/device_netlink.cpp): iproute2's rdma lists the device as it lists rxe's,
    # with the interface it sits on, and the node GUID libibverbs gives.
    link = re.search(r"^link uroce_ha/1 state ACTIVE physical_state LINK_UP netdev uh-a\s*$", out, re.M)
    check(link is not None, f"rdma link show: 'link uroce_ha/1 state ACTIVE physical_state LINK_UP netdev uh-a': "
          f"{[l for l in out.splitlines() if l.startswith('link')]}")
    guid = re.search(r"node_guid:\s+([0-9a-f:]{19})", out)
    dev = re.search(r"^0: uroce_ha: node_type ca fw (.+) node_guid ([0-9a-f:]{19}) ", out, re.M)
    check(guid is not None and dev is not None and dev.group(2) == guid.group(1),
          f"rdma dev show: device 0 uroce_ha, a CA, with ibv_devinfo's node_guid "
          f"({guid.group(1) if guid else None}): {dev.group(0) if dev else [l for l in out.splitlines() if l.startswith('0:')]}")
    if link and dev:
        log(f"rdma link show: {link.group(0).strip()}; rdma dev show: {dev.group(0).strip()}")


def gateway():
    addr = topology_up(routed=True)
    exceeded0 = re.search(r"IcmpOutTimeExcds\s+(\d+)", sh(f"ip netns exec {NS['r']} nstat -az IcmpOutTimeExcds"))
    pair("ibv_rc_pingpong -g 1 (routed)", ["ibv_rc_pingpong", "-g", "1", "-n", "100"],
         ["ibv_rc_pingpong", "-g", "1", "-n", "100", addr["b"]], pingpong(100), port=18515)
    pair("ib_write_bw (routed)", ["ib_write_bw", "-x", "1", "-s", "65536", "-n", "1000"],
         ["ib_write_bw", "-x", "1", "-s", "65536", "-n", "1000", addr["b"]], perftest_line(65536), port=18515)
    # The frames went to the gateway's MAC: the router forwarded them (its counters moved).
    fwd = sh(f"ip netns exec {NS['r']} nstat -az IpForwDatagrams")
    m = re.search(r"IpForwDatagrams\s+(\d+)", fwd)
    check(m and int(m.group(1)) >= 64000, f"the router forwarded the RoCE frames (64,000 of ib_write_bw's alone): {fwd.strip()}")
    # ibv_rc_pingpong asks hop limit 1; the route's (64) is used, as the kernel does for RoCE.
    exceeded = re.search(r"IcmpOutTimeExcds\s+(\d+)", sh(f"ip netns exec {NS['r']} nstat -az IcmpOutTimeExcds"))
    n_exc = int(exceeded.group(1)) - int(exceeded0.group(1)) if exceeded and exceeded0 else -1
    check(n_exc == 0, f"the router sent {n_exc} ICMP time exceeded (a hop limit of 1 reached it)")
    log(f"router: {m.group(0) if m else fwd.strip()}; ICMP time exceeded sent: {n_exc}")


def view_file(pid, rel):
    """A file of the device view of process `pid` (its own mount namespace), or None."""
    try:
        with open(f"/proc/{pid}/root/sys/class/infiniband/uroce_hb/ports/1/{rel}") as f:
            return f.read().strip()
    except OSError:
        return None


def wait_for(pred, t=3.0):
    t0 = time.time()
    while time.time() - t0 < t:
        if pred():
            return True
        time.sleep(0.05)
    return False


def gids():
    topology_up(routed=False)
    # IPv6 from the benchmarking range 2001:2::/48 (RFC 5180), as 198.18.0.0/15 for IPv4.
    watch = start("b", ["ibv_asyncwatch", "-d", "uroce_hb"], "asyncwatch")
    check(wait_for(lambda: "async event FD" in output("asyncwatch"), 20), f"ibv_asyncwatch started: {output('asyncwatch')[-300:]}")
    pid = sh("pgrep -x ibv_asyncwatch").split()
    check(len(pid) == 1, f"one ibv_asyncwatch: {pid}")
    pid = pid[0] if pid else "0"
    check(view_file(pid, "gids/2") is None, "no GID 2 before an address is added")
    sh(f"ip -n {NS['b']} addr add 2001:2:0:4::2/64 dev {IF['b']} nodad")
    want = "2001:0002:0000:0004:0000:0000:0000:0002"
    added = wait_for(lambda: view_file(pid, "gids/2") == want)
    check(added and view_file(pid, "gid_attrs/types/2") == "RoCE v2" and view_file(pid, "gid_attrs/ndevs/2") == IF["b"],
          f"the address added is GID 2: {view_file(pid, 'gids/2')} {view_file(pid, 'gid_attrs/types/2')}")
    check(wait_for(lambda: output("asyncwatch").count("IBV_EVENT_GID_CHANGE") == 1), f"one GID change event: {output('asyncwatch')}")
    sh(f"ip -n {NS['b']} addr del 2001:2:0:4::2/64 dev {IF['b']}")
    gone = wait_for(lambda: view_file(pid, "gids/2") == "0000:" * 7 + "0000" and view_file(pid, "gid_attrs/types/2") is None)
    check(gone, f"the address removed leaves GID 2 empty: {view_file(pid, 'gids/2')}")
    check(wait_for(lambda: output("asyncwatch").count("IBV_EVENT_GID_CHANGE") == 2), f"a second GID change event: {output('asyncwatch')}")
    # A second IPv4 address is a GID too (rxe has one for each address), in the first free slot.
    sh(f"ip -n {NS['b']} addr add 198.18.4.12/24 dev {IF['b']}")
    want4 = "0000:0000:0000:0000:0000:ffff:c612:040c"
    added4 = wait_for(lambda: view_file(pid, "gids/2") == want4)
    check(added4 and view_file(pid, "gid_attrs/types/2") == "RoCE v2",
          f"a second IPv4 address added is GID 2: {view_file(pid, 'gids/2')} {view_file(pid, 'gid_attrs/types/2')}")
    check(wait_for(lambda: output("asyncwatch").count("IBV_EVENT_GID_CHANGE") == 3), f"a third GID change event: {output('asyncwatch')}")
    sh(f"ip -n {NS['b']} addr del 198.18.4.12/24 dev {IF['b']}")
    gone4 = wait_for(lambda: view_file(pid, "gids/2") == "0000:" * 7 + "0000")
    check(gone4, f"the second IPv4 address removed leaves GID 2 empty: {view_file(pid, 'gids/2')}")
    log(f"GID 2 while ibv_asyncwatch ran: added -> {want if added else '?'}, removed -> {'empty' if gone else '?'}; "
        f"a second IPv4 address -> {want4 if added4 else '?'}, removed -> {'empty' if gone4 else '?'}; "
        f"{output('asyncwatch').count('IBV_EVENT_GID_CHANGE')} IBV_EVENT_GID_CHANGE")
    watch.send_signal(signal.SIGINT)
    suite.children.stop_all()
    # Global IPv6 GIDs from the interface, used by an unmodified program.
    sh(f"ip -n {NS['a']} addr add 2001:2:0:4::1/64 dev {IF['a']} nodad")
    sh(f"ip -n {NS['b']} addr add 2001:2:0:4::2/64 dev {IF['b']} nodad")
    pair("ibv_rc_pingpong -g 2 (global IPv6)", ["ibv_rc_pingpong", "-g", "2", "-n", "100"],
         ["ibv_rc_pingpong", "-g", "2", "-n", "100", "198.18.4.2"], pingpong(100), port=18515)
    # Second IPv4 addresses on both ends: GID 3 (after the IPv6 one), RoCE to them taken.
    sh(f"ip -n {NS['a']} addr add 198.18.4.11/24 dev {IF['a']}")
    sh(f"ip -n {NS['b']} addr add 198.18.4.12/24 dev {IF['b']}")
    pair("ibv_rc_pingpong -g 3 (a second IPv4 address)", ["ibv_rc_pingpong", "-g", "3", "-n", "100"],
         ["ibv_rc_pingpong", "-g", "3", "-n", "100", "198.18.4.2"], pingpong(100), port=18515)


def kill():
    addr = topology_up(routed=False)
    srv = start("b", ["ibv_rc_pingpong", "-g", "1", "-n", "100"], "first-server", netdev=True)
    check(wait_port("b", 18515, srv), f"first server listening: {output('first-server')[-400:]}")
    second = start("b", ["ibv_devinfo"], "second", netdev=True)
    rc = suite.children.finish(second, 30)
    out = output("second")
    check(rc != 0 and "in use by another uroce process" in out, f"a second process on the netdev is refused clearly: {rc} {out[-400:]}")
    log(f"second process: exit {rc}: " + next((l for l in out.splitlines() if "in use" in l), out.strip()[-200:]))
    driver.kill_group(srv, signal.SIGKILL)
    srv.wait()
    stale = xdp_attached("b")
    log(f"after SIGKILL: uroce's XDP program {'left attached' if stale else 'gone'} on {IF['b']}")
    pair("ibv_rc_pingpong after a SIGKILL", ["ibv_rc_pingpong", "-g", "1", "-n", "100"],
         ["ibv_rc_pingpong", "-g", "1", "-n", "100", addr["b"]], pingpong(100), port=18515)


def cleanup():
    suite.cleanup()
    topology_down()
    driver.keep_logs_if_failed(tmp)


driver.on_signals(cleanup)
driver.run_scenario({"tools": tools, "packet": lambda: tools("af_packet"), "gateway": gateway, "gids": gids, "kill": kill}, suite.args.scenario, cleanup)
