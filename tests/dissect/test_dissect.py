#!/usr/bin/env python3
"""Tests of uroce-dissect, run by meson (suite proto).

usage: test_dissect.py UROCE_DISSECT GOLDEN_DIR WORK_DIR

1. Every golden capture: exit 0 and a summary whose roce / icrc ok counts match the per-file
   table of GOLDEN_DIR/INDEX.md (the frame count is checked against the pcap itself).
2. A capture made here from rxe/write_small.pcap with a corrupted ICRC, truncated packets and
   a bad IPv4 checksum, as pcap and as pcapng: exit 1 and the right counts and messages.
3. --errors, --qp (decimal and hex, against QP counts read here from the bytes), --bytes
   (exact lines for the RDMA WRITE Only of rxe/write_small.pcap) and usage errors.

Only the standard library is used: pcap files are read and written with struct.
"""
import os
import re
import struct
import subprocess
import sys

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


# ---- capture files -------------------------------------------------------------------------

def read_pcap(path):
    """Frames of a classic little- or big-endian pcap file (microsecond or nanosecond)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise ValueError(path + ": not a classic pcap file")
    off, frames = 24, []
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(e + "IIII", data[off:off + 16])
        frames.append(data[off + 16:off + 16 + caplen])
        off += 16 + caplen
    return frames


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1700000000, i, len(fr), len(fr)))
            f.write(fr)


def write_pcapng(path, frames):
    def block(btype, body):
        body += b"\0" * ((4 - len(body) % 4) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))  # section header
    out += block(1, struct.pack("<HHI", 1, 0, 65535))                    # interface: Ethernet
    for i, fr in enumerate(frames):
        ts = 1700000000 * 1000000 + i
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(fr), len(fr)) + fr)
    with open(path, "wb") as f:
        f.write(out)


# ---- running the dissector ----------------------------------------------------------------

SUMMARY = re.compile(r"^(\d+) frames, (\d+) roce, (\d+) icrc ok, (\d+) icrc bad, (\d+) malformed$")


def run(exe, *args):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines(), p.stderr


def summary(lines):
    m = SUMMARY.match(lines[-1]) if lines else None
    return tuple(int(x) for x in m.groups()) if m else None


def index_table(golden):
    """{relative path: (roce packets, icrc ok)} from INDEX.md's per-file table."""
    rows = {}
    row = re.compile(r"^\| `([^`]+)` \| (\d+) \| .* \| (\d+)/(\d+) \|$")
    with open(os.path.join(golden, "INDEX.md")) as f:
        for line in f:
            m = row.match(line.strip())
            if m:
                rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return rows


# ---- frame surgery --------------------------------------------------------------------------

def ipv4_checksum(hdr):
    s = sum(struct.unpack("!%dH" % (len(hdr) // 2), hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def cut_ipv4_roce(frame, keep_l3):
    """Keeps the first keep_l3 bytes of the IP packet and makes IP and UDP lengths (and the
    IPv4 checksum) agree, so that parse() meets the short packet at the transport headers."""
    f = bytearray(frame[:14 + keep_l3])
    struct.pack_into("!H", f, 16, keep_l3)
    struct.pack_into("!H", f, 24, 0)
    struct.pack_into("!H", f, 24, ipv4_checksum(bytes(f[14:34])))
    struct.pack_into("!H", f, 38, keep_l3 - 20)
    return bytes(f)


def dest_qp(frame):
    """Destination QP of an untagged IPv4/IPv6 RoCEv2 frame, or None."""
    et = struct.unpack("!H", frame[12:14])[0]
    if et == 0x0800 and frame[23] == 17:
        udp = 14 + (frame[14] & 15) * 4
    elif et == 0x86DD and frame[20] == 17:
        udp = 54
    else:
        return None
    if struct.unpack("!H", frame[udp + 2:udp + 4])[0] != 4791 or len(frame) < udp + 20:
        return None
    return int.from_bytes(frame[udp + 13:udp + 16], "big")


# The layout of frame 1 of rxe/write_small.pcap, checked field by field against its bytes
# (IBA vol. 1 9.2 BTH, 9.3.3 RETH).
WRITE_SMALL_BYTES = """\
    1   0.000000  198.18.1.1 > 198.18.1.2 sport 49881  RC_RDMA_WRITE_ONLY qp 0x00001b psn 256 A  RETH va=0x000055e280507000 rkey=0x00000c30 len=64  payload 64  icrc ok
  0000  Ethernet 14 bytes, 000e IPv4 20 bytes, 0022 UDP 8 bytes
  002a  BTH          +0   0a                       OpCode      = 0x0a RC_RDMA_WRITE_ONLY
  002b               +1   00                       SE=0 M=0 PadCnt=0 TVer=0     [0 0 00 0000]
  002c               +2   ff ff                    P_Key       = 0xffff
  002e               +4   00                       FECN=0 BECN=0 Resv6a=0       [0 0 000000]
  002f               +5   00 00 1b                 DestQP      = 0x00001b (27)
  0032               +8   80                       A=1 Resv7=0                  [1 0000000]
  0033               +9   00 01 00                 PSN         = 256 (0x000100)
  0036  RETH         +0   00 00 55 e2 80 50 70 00  VA          = 0x000055e280507000
  003e               +8   00 00 0c 30              R_Key       = 0x00000c30
  0042               +12  00 00 00 40              DMALen      = 64
  0046  payload           64 bytes
  0086  ICRC         +0   e9 14 94 6f              ICRC        = 0x6f9414e9 (least significant byte first), ok
    2   0.000596  198.18.1.2 > 198.18.1.1 sport 49881  RC_ACKNOWLEDGE qp 0x00001b psn 256  AETH ACK credits=31 (no credit limit) msn=1  icrc ok
  0000  Ethernet 14 bytes, 000e IPv4 20 bytes, 0022 UDP 8 bytes
  002a  BTH          +0   11                       OpCode      = 0x11 RC_ACKNOWLEDGE
  002b               +1   00                       SE=0 M=0 PadCnt=0 TVer=0     [0 0 00 0000]
  002c               +2   ff ff                    P_Key       = 0xffff
  002e               +4   00                       FECN=0 BECN=0 Resv6a=0       [0 0 000000]
  002f               +5   00 00 1b                 DestQP      = 0x00001b (27)
  0032               +8   00                       A=0 Resv7=0                  [0 0000000]
  0033               +9   00 01 00                 PSN         = 256 (0x000100)
  0036  AETH         +0   1f                       Syndrome    = 0x1f [000 11111] ACK credits=31 (no credit limit)
  0037               +1   00 00 01                 MSN         = 1
  003a  ICRC         +0   5e 2e e9 07              ICRC        = 0x07e92e5e (least significant byte first), ok
""".splitlines()


def main():
    exe, golden, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)

    # 1. Golden captures against INDEX.md.
    table = index_table(golden)
    check(len(table) == 42, "INDEX.md lists 42 files (found %d)" % len(table))
    total_roce = 0
    for rel, (roce, ok) in sorted(table.items()):
        path = os.path.join(golden, rel)
        rc, out, err = run(exe, path)
        s = summary(out)
        nframes = len(read_pcap(path))
        # RoCE v1 frames are counted as roce but not decoded, so not ICRC-checked (see --help).
        v1 = sum(1 for line in out if "RoCE v1 (ethertype 0x8915, GRH), not decoded" in line)
        want = (nframes, roce, ok - v1, 0, 0)
        check(rc == 0 and s == want, "%s: rc %d summary %s, want rc 0 and %s %s" % (rel, rc, s, want, err))
        total_roce += s[1] if s else 0
    check(total_roce == 2590, "golden total roce %d, want 2590" % total_roce)
    print("golden: %d files, %d roce packets, summaries match INDEX.md" % (len(table), total_roce))

    # The ConnectX CNP: its line shows the opcode, BECN, the ECN field and the DSCP; the line
    # before the summary counts CNPs and ECN marks (a capture without either has no such line).
    rc, out, _ = run(exe, os.path.join(golden, "hardware/cnp_connectx4lx_from_scapy_roce_uts.pcap"))
    check(rc == 0 and len(out) == 3 and out[0].endswith("sport 0  CNP qp 0x000118 psn 0 BECN ECT0 dscp 48  icrc ok"),
          "CNP line: %r" % out[:1])
    check(len(out) == 3 and out[1] == "(1 CNP, ECN: 1 ECT0, 0 ECT1, 0 CE)", "CNP/ECN count line: %r" % out[1:2])
    rc, out, _ = run(exe, os.path.join(golden, "rxe/write_small.pcap"))
    check(not any(l.startswith("(") for l in out), "no CNP/ECN line for rxe/write_small.pcap")

    # 2. A capture with errors.
    ws = read_pcap(os.path.join(golden, "rxe/write_small.pcap"))
    write, ack = ws[0], ws[1]
    bad_icrc = write[:-1] + bytes([write[-1] ^ 0x01])
    cut = write[:60]                      # the IP length says more: truncated in IP payload
    in_reth = cut_ipv4_roce(write, 20 + 8 + 12 + 10)   # lengths agree, ends 10 bytes into RETH
    bad_ipsum = bytearray(ack)
    bad_ipsum[24] ^= 0xFF
    other = bytearray(ack)
    struct.pack_into("!H", other, 36, 53)   # UDP to port 53: not RoCE
    struct.pack_into("!H", other, 24, 0)
    frames = [write, bad_icrc, cut, in_reth, bytes(bad_ipsum), bytes(other), ack]
    want = (7, 6, 2, 1, 3)
    for name, writer in (("errors.pcap", write_pcap), ("errors.pcapng", write_pcapng)):
        path = os.path.join(work, name)
        writer(path, frames)
        rc, out, err = run(exe, path)
        check(rc == 1 and summary(out) == want, "%s: rc %d summary %s, want 1 and %s" % (name, rc, summary(out), want))
        text = "\n".join(out)
        for frag in ("    2 ", "ICRC BAD (wire 0x", "MALFORMED: truncated in IP payload",
                     "RC_RDMA_WRITE_ONLY qp 0x00001b psn 256  MALFORMED: truncated in RETH",
                     "MALFORMED: bad IPv4 header checksum"):
            check(frag in text, "%s: output lacks %r" % (name, frag))
        check(not any(line.startswith("    6 ") for line in out), name + ": the non-RoCE frame 6 was listed")

    # --errors: only the four bad packets, same summary.
    path = os.path.join(work, "errors.pcap")
    rc, out, _ = run(exe, "--errors", path)
    listed = [int(line.split()[0]) for line in out[:-1]]
    check(rc == 1 and listed == [2, 3, 4, 5] and summary(out) == want,
          "--errors: rc %d frames %s summary %s" % (rc, listed, summary(out)))
    rc, out, _ = run(exe, "--errors", os.path.join(golden, "rxe/write_64k.pcap"))
    check(rc == 0 and out == ["65 frames, 65 roce, 65 icrc ok, 0 icrc bad, 0 malformed"],
          "--errors on a clean capture printed %s" % out[:3])
    # --bytes on a truncated packet stops where the frame does.
    rc, out, _ = run(exe, "--bytes", "--errors", path)
    check("  003e               +8   (frame ends at 0x0040, inside RETH)" in out,
          "--bytes of the RETH-truncated packet:\n" + "\n".join(out))

    # 3. --qp, in decimal and hex, against the QPs read from the bytes.
    path = os.path.join(golden, "tutorial/rdma_cm.pcap")
    qps = {}
    for fr in read_pcap(path):
        q = dest_qp(fr)
        if q is not None:
            qps[q] = qps.get(q, 0) + 1
    check(len(qps) > 2, "rdma_cm.pcap has several QPs")
    nframes = len(read_pcap(path))
    for q, n in sorted(qps.items()):
        for arg in (str(q), hex(q)):
            rc, out, _ = run(exe, "--qp", arg, path)
            listed = [line for line in out[:-1] if not line.startswith("(")]
            check(rc == 0 and summary(out) == (nframes, n, n, 0, 0) and len(listed) == n
                  and all(" qp 0x%06x " % q in line for line in listed),
                  "--qp %s: rc %d summary %s, want %d packets" % (arg, rc, summary(out), n))
    rc, out, _ = run(exe, "--qp", "0x123456", path)
    check(rc == 0 and summary(out) == (nframes, 0, 0, 0, 0), "--qp with no match: %s" % out)

    # --bytes: exact layout of the first two packets of rxe/write_small.pcap.
    rc, out, _ = run(exe, "--bytes", os.path.join(golden, "rxe/write_small.pcap"))
    check(rc == 0 and out[:len(WRITE_SMALL_BYTES)] == WRITE_SMALL_BYTES,
          "--bytes write_small.pcap differs:\n" + "\n".join(out[:len(WRITE_SMALL_BYTES)]))

    # Robustness: every RoCE frame of a few captures cut at every length (IP/UDP lengths left
    # as they were, and also made to agree), plus single-bit flips, through --bytes. The
    # dissector must finish normally (exit 0 or 1; a crash or sanitizer report is a failure),
    # list every one of these frames and count it as exactly one of ok / bad / malformed.
    import random
    rnd = random.Random(4791)
    mangled = []
    for rel in ("rxe/write_small.pcap", "rxe/atomic_cswap.pcap", "rxe/host_to_rxe0.pcap",
                "tutorial/pingpong_ud.pcap", "hardware/cnp_connectx4lx_from_scapy_roce_uts.pcap"):
        for fr in read_pcap(os.path.join(golden, rel)):
            if dest_qp(fr) is None or len(fr) > 200:
                continue
            for n in range(42, len(fr)):
                mangled.append(fr[:n])
                if fr[12:14] == b"\x08\x00" and n >= 34:
                    mangled.append(cut_ipv4_roce(fr, n - 14))
            for _ in range(40):
                b = bytearray(fr)
                bit = rnd.randrange(42 * 8, len(b) * 8)
                b[bit // 8] ^= 1 << (bit % 8)
                mangled.append(bytes(b))
    path = os.path.join(work, "mangled.pcap")
    write_pcap(path, mangled)
    rc, out, err = run(exe, "--bytes", path)
    s = summary(out)
    check(rc in (0, 1) and s is not None and s[0] == len(mangled) and s[1] == s[2] + s[3] + s[4] and not err,
          "mangled frames: rc %d summary %s (%d frames) stderr %s" % (rc, s, len(mangled), err[:500]))
    print("robustness: %d mangled frames, summary %s" % (len(mangled), s))

    # Usage and file errors exit 2; --help exits 0.
    for args in ([], ["--qp"], ["--qp", "zz", path], ["--qp", "0x1000000", path], ["--nope", path],
                 [os.path.join(work, "does-not-exist.pcap")], [path, path]):
        rc, _, err = run(exe, *args)
        check(rc == 2 and err, "args %s: rc %d, want 2 and a message" % (args, rc))
    rc, out, _ = run(exe, "--help")
    check(rc == 0 and out and out[0].startswith("usage: uroce-dissect"), "--help: rc %d" % rc)

    if FAILURES:
        print("dissect: %d failure(s)" % len(FAILURES))
        return 1
    print("dissect: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
