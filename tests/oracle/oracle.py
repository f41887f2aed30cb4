#!/usr/bin/python3
"""Independent oracle for proto::build(): run by meson as test 'oracle' (suite proto).

usage: /usr/bin/python3 oracle.py --gen OUR_GENERATOR --seed N --count N --work DIR
       /usr/bin/python3 oracle.py --pcap FILE --meta FILE      (check an existing pair)

oracle_gen writes COUNT random valid packets (every opcode of the table, IPv4 and IPv6, payload
0 to 4096 bytes) with build(), plus one line per packet saying what it asked build() for. Then:

1. ICRC, by scapy (Debian's python3-scapy, so run with /usr/bin/python3). For IPv4 packets
   scapy.contrib.roce's BTH.compute_icrc() recomputes the ICRC from the dissected packet. That
   function does not support IPv6 (it warns "not supported" and returns 0 in scapy 2.5), so for
   IPv6 packets this script does the same thing scapy does for IPv4 (8 bytes of 0xff, then a copy
   of the IP/UDP/BTH layers with the variant fields set to ones, serialized by scapy, CRC-32 by
   zlib), with the IPv6 variant fields: traffic class, flow label, hop limit. Each result must
   equal the 4 ICRC bytes at the end of the IP packet.

2. Decoding, by tshark: each packet must decode with the opcode, destination QP and PSN that were
   asked for; where tshark decodes an extension header (RETH, AETH, DETH, AtomicETH,
   AtomicAckETH) its fields must match too, and tshark must find exactly the headers the opcode
   table names. tshark must report no expert info at all (no malformed packet, no warning);
   UDP checksums are verified (udp.check_checksum), and build() sets a real one on IPv6 and on
   about half of the IPv4 packets.
   Exclusions, each because of tshark, not of the packets:
   - tshark's heuristic dissectors for InfiniBand payloads (RPC-over-RDMA, SMB Direct, iSER,
     NVMe-RDMA, ...) are disabled: they try to read the random payload as their protocol and call
     it "Malformed" when it is not (e.g. a 1-byte payload starting 0x4_ read as a truncated IPv4
     packet). The RoCE headers are what is being checked. IB_HEURISTICS lists them.
   - CNP (opcode 0x81): tshark 4.0 does not know it and shows "Unknown (129)" followed by
     "Unknown/Vendor Specific Data" (16 reserved bytes and the ICRC). Opcode, QP and PSN still
     decode and are checked; there is no extension header to compare.
   - The generator pads frames below Ethernet's 60-byte minimum with a 2-byte zero l2_trailer (as
     a NIC does); tshark misreads an unpadded 58-byte zero-length SEND (see tools-facts.md).
   - The generator keeps QP 0 and 1 out (tshark decodes packets to them as MADs) and TTL at 16 or
     more (tshark warns about a TTL below 5, an IP matter).

Prints "oracle: N packets, scapy ICRC agrees on N, tshark agrees on N" and exits 1 on any
disagreement.
"""
import argparse
import os
import struct
import subprocess
import sys
import zlib

from scapy.all import Ether, IP, IPv6, UDP, Raw, raw, rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

# The table's Ext mask bits (proto/opcode.hpp).
K_DETH, K_XRCETH, K_FETH, K_RETH, K_ATOMIC, K_AETH, K_ATOMIC_ACK, K_IMM, K_IETH, K_CNP = (1 << i for i in range(10))

META_FIELDS = ["index", "opcode", "qp", "psn", "ipver", "plen", "vlan", "exts", "reth_va", "reth_rkey",
               "reth_len", "aeth_syndrome", "aeth_msn", "deth_qkey", "deth_srcqp", "atomic_swap_add",
               "atomic_compare", "atomic_ack_orig", "atomic_va", "atomic_rkey"]

TSHARK_FIELDS = ["frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
                 "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
                 "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.deth.q_key",
                 "infiniband.deth.srcqp", "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
                 "infiniband.atomicacketh.origremdt", "_ws.malformed", "_ws.expert.message"]


def read_meta(path):
    rows = []
    with open(path) as f:
        for line in f:
            vals = [int(x) for x in line.split()]
            rows.append(dict(zip(META_FIELDS, vals)))
    return rows


# ---- 1. ICRC by scapy ----------------------------------------------------------------------

def ip_packet_bounds(pkt):
    """(start, end) of the IP packet inside the frame bytes."""
    frame = raw(pkt)
    if pkt.haslayer(IP):
        ip = pkt[IP]
        start = len(frame) - len(raw(ip))
        return frame, start, start + ip.len
    ip = pkt[IPv6]
    start = len(frame) - len(raw(ip))
    return frame, start, start + 40 + ip.plen


def icrc_ipv6(pkt):
    """scapy.contrib.roce's IPv4 method, with the IPv6 variant fields masked."""
    pshdr = Raw(b"\xff" * 8) / pkt[IPv6].copy()
    pshdr[IPv6].tc = 0xFF
    pshdr[IPv6].fl = 0xFFFFF
    pshdr[IPv6].hlim = 0xFF
    pshdr[UDP].chksum = 0xFFFF
    pshdr[BTH].fecn = 1
    pshdr[BTH].becn = 1
    pshdr[BTH].resv6 = 0x3F
    bth = pshdr[BTH].self_build()
    payload = raw(pshdr[BTH].payload)
    pshdr[UDP].payload = Raw(bth + payload + b"\xff\xff\xff\xff")
    return struct.pack("<I", zlib.crc32(raw(pshdr)[:-4]) & 0xFFFFFFFF)


def check_icrc(packets, meta, errors):
    agree = {4: 0, 6: 0}
    for i, pkt in enumerate(packets):
        frame, start, end = ip_packet_bounds(pkt)
        wire = frame[end - 4:end]
        # Dissect again without the Ethernet padding of short frames: scapy attaches that
        # Padding layer under BTH, and compute_icrc() would then feed it into the CRC.
        pkt = Ether(frame[:end])
        if pkt.haslayer(IP):
            computed = pkt[BTH].compute_icrc(b"")   # scapy.contrib.roce, unchanged
        else:
            computed = icrc_ipv6(pkt)
        ver = 4 if pkt.haslayer(IP) else 6
        if ver != meta[i]["ipver"]:
            errors.append("packet %d: scapy sees IPv%d, generator made IPv%d" % (i, ver, meta[i]["ipver"]))
        elif computed == wire:
            agree[ver] += 1
        else:
            errors.append("packet %d (opcode 0x%02x, IPv%d): ICRC on the wire %s, scapy computes %s"
                          % (i, meta[i]["opcode"], ver, wire.hex(), computed.hex()))
    return agree


# ---- 2. tshark -----------------------------------------------------------------------------

# Short names of tshark 4.0's heuristic dissectors on InfiniBand payloads (`tshark -G
# heuristic-decodes` lists them under infiniband.payload by protocol name, but --disable-heuristic
# wants these short names): SMC-R, SMB Direct, RPC-over-RDMA, NVMe-oF RDMA, Lustre LNet, iSER,
# Ethernet/IP over IB, Mellanox EoIB, SDP, FCoIB. tshark refuses an unknown name, so a renamed
# one fails the test loudly rather than being silently kept.
IB_HEURISTICS = ["smcr_infiniband", "smb_direct_infiniband", "rpcrdma_infiniband", "nvme_rdma", "lnet_ib",
                 "iser_infiniband", "eth_over_ib", "mellanox_eoib", "sdp_infiniband", "fc_infiniband"]


def tshark_rows(pcap):
    disabled = []
    for h in IB_HEURISTICS:
        disabled += ["--disable-heuristic", h]
    cmd = ["tshark", *disabled, "-n", "-r", pcap, "-o", "udp.check_checksum:TRUE", "-T", "fields",
           "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        rows.append(dict(zip(TSHARK_FIELDS, line.split("\t"))))
    return rows


def num(s):
    return int(s, 0) if s else None


# IBA 1.5's FLUSH and ATOMIC WRITE: tshark 4.0 (Debian 12) names no header after their BTH.
# Their layout is checked byte for byte in tests/proto/headers_test.cpp instead; a tshark that
# decodes them is held to the same fields as every other opcode.
# XRC (0xa0-0xb7) likewise: tshark 4.0 names the opcodes and decodes nothing after the BTH (no
# XRCETH, not even the AETH of an XRC ACK); the XRCETH layout is checked in headers_test.cpp.
IBA15_OPCODES = (0x1c, 0x1d)
BTH_ONLY = []
XRC_BTH_ONLY = []
EXT_FIELDS = ("infiniband.reth.va", "infiniband.aeth.syndrome", "infiniband.atomiceth.swapdt",
              "infiniband.atomicacketh.origremdt", "infiniband.deth.q_key")


def check_tshark(rows, meta, errors):
    agree = 0
    if len(rows) != len(meta):
        errors.append("tshark decoded %d frames, generator made %d" % (len(rows), len(meta)))
        return 0
    for m, t in zip(meta, rows):
        bad = []
        got = (num(t["infiniband.bth.opcode"]), num(t["infiniband.bth.destqp"]), num(t["infiniband.bth.psn"]))
        want = (m["opcode"], m["qp"], m["psn"])
        if got != want:
            bad.append("opcode/qp/psn %s, want %s" % (got, want))
        if t.get("_ws.malformed") or t.get("_ws.expert.message"):
            bad.append("expert info: %r %r" % (t.get("_ws.malformed"), t.get("_ws.expert.message")))
        exts = m["exts"]
        if m["opcode"] in IBA15_OPCODES and not t.get("infiniband.reth.va"):
            BTH_ONLY.append(m["index"])
            exts = K_CNP  # compare the BTH only
        elif 0xa0 <= m["opcode"] < 0xc0 and not any(t.get(f) for f in EXT_FIELDS):
            XRC_BTH_ONLY.append(m["index"])
            exts = K_CNP
        if not exts & K_CNP:
            # (tshark field, expected value or None when the opcode has no such header)
            expect = {
                "infiniband.reth.va": m["reth_va"] if exts & K_RETH else None,
                "infiniband.reth.r_key": m["reth_rkey"] if exts & K_RETH else None,
                "infiniband.reth.dmalen": m["reth_len"] if exts & K_RETH else None,
                "infiniband.aeth.syndrome": m["aeth_syndrome"] if exts & K_AETH else None,
                "infiniband.aeth.msn": m["aeth_msn"] if exts & K_AETH else None,
                "infiniband.deth.q_key": m["deth_qkey"] if exts & K_DETH else None,
                "infiniband.deth.srcqp": m["deth_srcqp"] if exts & K_DETH else None,
                "infiniband.atomiceth.swapdt": m["atomic_swap_add"] if exts & K_ATOMIC else None,
                "infiniband.atomiceth.cmpdt": m["atomic_compare"] if exts & K_ATOMIC else None,
                "infiniband.atomicacketh.origremdt": m["atomic_ack_orig"] if exts & K_ATOMIC_ACK else None,
            }
            if exts & K_ATOMIC:
                # tshark 4.0 shows the AtomicETH virtual address and R_Key in the RETH fields.
                expect["infiniband.reth.va"] = m["atomic_va"]
                expect["infiniband.reth.r_key"] = m["atomic_rkey"]
            for field, value in expect.items():
                g = num(t.get(field, ""))
                if g != value:
                    bad.append("%s = %s, want %s" % (field, g, value))
        if bad:
            errors.append("packet %d (opcode 0x%02x, IPv%d, %d payload bytes): %s"
                          % (m["index"], m["opcode"], m["ipver"], m["plen"], "; ".join(bad)))
        else:
            agree += 1
    return agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--count", default="3000")
    ap.add_argument("--work", default=".")
    ap.add_argument("--pcap")
    ap.add_argument("--meta")
    a = ap.parse_args()
    if a.gen:
        os.makedirs(a.work, exist_ok=True)
        a.pcap = os.path.join(a.work, "oracle.pcap")
        a.meta = os.path.join(a.work, "oracle.txt")
        subprocess.run([a.gen, a.seed, a.count, a.pcap, a.meta], check=True)
    if not a.pcap or not a.meta:
        ap.error("give --gen, or --pcap and --meta")

    meta = read_meta(a.meta)
    packets = rdpcap(a.pcap)
    errors = []
    if len(packets) != len(meta) or not meta:
        errors.append("%d packets in the capture, %d lines of metadata" % (len(packets), len(meta)))
        icrc = {4: 0, 6: 0}
        ts = 0
    else:
        icrc = check_icrc(packets, meta, errors)
        ts = check_tshark(tshark_rows(a.pcap), meta, errors)
    # Coverage: every opcode, both IP versions, empty and 4096-byte payloads.
    opcodes = {(m["opcode"], m["ipver"]) for m in meta}
    plens = {m["plen"] for m in meta}
    if len({o for o, _ in opcodes}) != 63 or len(opcodes) != 126 or 0 not in plens or 4096 not in plens:
        errors.append("coverage: %d opcode/IP pairs (want 126), payload lengths %s..%s"
                      % (len(opcodes), min(plens, default=None), max(plens, default=None)))

    for e in errors[:30]:
        print("DISAGREE:", e)
    if len(errors) > 30:
        print("... and %d more" % (len(errors) - 30))
    n = len(meta)
    print("oracle: %d packets, scapy ICRC agrees on %d (%d IPv4 by scapy.contrib.roce, %d IPv6), tshark agrees on %d"
          % (n, icrc[4] + icrc[6], icrc[4], icrc[6], ts))
    if BTH_ONLY:
        print("oracle: of those, %d FLUSH / ATOMIC WRITE packets by their BTH only (this tshark decodes"
              " nothing after it for IBA 1.5's opcodes)" % len(BTH_ONLY))
    if XRC_BTH_ONLY:
        print("oracle: of those, %d XRC packets by their BTH only (this tshark decodes nothing after it"
              " for XRC opcodes)" % len(XRC_BTH_ONLY))
    ok = not errors and icrc[4] + icrc[6] == n and ts == n
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
