#!/usr/bin/env python3
"""Tests of uroce-dissect, run by meson (suite proto).

usage: test_dissect.py UROCE_DISSECT GOLDEN_DIR WORK_DIR [MAKE_LOSSY_CAPTURE]

1. Every golden capture: exit 0 and a summary whose roce / icrc ok counts match the per-file
   table of GOLDEN_DIR/INDEX.md (the frame count is checked against the pcap itself).
2. A capture made here from rxe/write_small.pcap with a corrupted ICRC, truncated packets and
   a bad IPv4 checksum, as pcap and as pcapng: exit 1 and the right counts and messages.
3. --errors, --qp (decimal and hex, against QP counts read here from the bytes), --bytes
   (exact lines for the RDMA WRITE Only of rxe/write_small.pcap) and usage errors.
3b. CM MADs: the line of every MAD of tutorial/rdma_cm.pcap, the --bytes layout of its REQ, and
   REJ, MRA, SIDR_REQ, SIDR_REP, LAP and a non-CM MAD made here from the REQ's frame.
4. --ladder: the SVG parses, one arrow per selected frame, labels and tooltips match the line
   view, --qp / --from / --count select the right frames, the golden captures show no
   retransmission (except the RNR retries of rxe/send_rnr_nak.pcap), the lossy capture of
   MAKE_LOSSY_CAPTURE shows retransmissions, sequence NAKs and the RNR NAK where its frames
   say so, a bad ICRC is marked, 500 frames stay readable, bad input is a clean error.

Only the standard library is used: pcap files are read and written with struct.
"""
import os
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

FAILURES, check = driver.failures, driver.check


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


def write_pcapng(path, frames, comments=None):
    """frames as Enhanced Packet Blocks; comments: {index: text}, each an opt_comment."""
    def block(btype, body):
        body += b"\0" * ((4 - len(body) % 4) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))  # section header
    out += block(1, struct.pack("<HHI", 1, 0, 65535))                    # interface: Ethernet
    for i, fr in enumerate(frames):
        ts = 1700000000 * 1000000 + i
        body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(fr), len(fr)) + fr
        text = (comments or {}).get(i)
        if text is not None:
            c = text.encode()
            body += b"\0" * ((4 - len(body) % 4) % 4)
            body += struct.pack("<HH", 1, len(c)) + c + b"\0" * ((4 - len(c) % 4) % 4) + struct.pack("<HH", 0, 0)
        out += block(6, body)
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


# ---- the ladder diagram ---------------------------------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"


def ladder(exe, work, *args, fold=False):
    """Runs --ladder (with --no-fold unless fold); returns (rc, stdout lines, stderr,
    (root, {frame number: <g> element}) or None)."""
    import xml.etree.ElementTree as ET
    out_svg = os.path.join(work, "ladder.svg")
    if os.path.exists(out_svg):
        os.remove(out_svg)
    rc, out, err = run(exe, "--ladder", out_svg, *(() if fold else ("--no-fold",)), *args)
    if not os.path.exists(out_svg):
        return rc, out, err, None
    try:
        root = ET.parse(out_svg).getroot()
    except ET.ParseError as e:
        check(False, "ladder %s: SVG does not parse: %s" % (args, e))
        return rc, out, err, None
    frames = {}
    for g in root.iter(SVG + "g"):
        if "frame" in g.get("class", "").split():
            frames[int(g.get("data-frame"))] = g
    return rc, out, err, (root, frames)


def classes(g):
    return set(g.get("class", "").split())


def arrows(g):
    return [e for e in g if e.get("class") == "arrow"]


def label_of(g):
    return next(e.text for e in g if e.get("class") == "label")


def line_view(exe, path):
    """{frame number: line} of the line view."""
    _, out, _ = run(exe, path)
    return {int(l.split()[0]): l for l in out if l[:1] == " " and l.split()[0].isdigit()}


def note_tests(exe, work, lossy, lines):
    """A capture's comments (pcapng opt_comment; uroce's port writes there the rate a CNP left a
    QP at): shown at the end of the frame's line, beside its arrow in the ladder (never folded
    away), found by --focus note; control bytes in a comment are not printed."""
    frames = read_pcap(lossy)
    nums = sorted(lines)
    k = nums[len(nums) // 2]      # a frame in the middle of a quiet run, most likely
    text = "QP 0x000011 cc=dcqcn: CNP 1: rate 40.00 -> 20.00 Gbit/s (first CNP)"
    noted = os.path.join(work, "noted.pcapng")
    write_pcapng(noted, frames, {k - 1: text, k: "two\nlines\x1b[31m"})
    rc, out, _ = run(exe, noted)
    got = {n: l for l in out for m in [re.match(r"^ *(\d+) ", l)] if m for n in [int(m.group(1))]}
    check(rc == 0 and got.get(k, "").endswith("  [note: %s]" % text), "note: frame %d's line %r" % (k, got.get(k)))
    check(got.get(k + 1, "").endswith("  [note: two lines [31m]"), "note: control bytes: %r" % got.get(k + 1))
    check(sum("[note:" in l for l in out) == 2, "note: %d lines with a note, want 2" % sum("[note:" in l for l in out))
    rc, _, _, res = ladder(exe, work, "--focus", "note", noted, fold=True)
    check(rc == 0 and res is not None and k in res[1], "ladder --focus note: frame %d drawn: %s" % (
        k, sorted(res[1])[:10] if res else None))
    if res:
        texts = [t.text or "" for t in res[0].iter(SVG + "text")]
        check(any(("note: " + text) in t for t in texts), "ladder: the note beside its frame")
    rc, _, err, _ = ladder(exe, work, "--focus", "note", lossy, fold=True)
    check(rc == 2 and "no such event" in err, "--focus note without a comment: rc %d %r" % (rc, err))


def story_tests(exe, work, lossy, lines, dropped):
    """The ladder as a story on the lossy capture: folding, the NAK-resend links, --focus, and
    (on a copy without the dropped frames, as a capture after the loss would be) the PSNs not seen."""
    def groups(root, cls):
        return [g for g in root.iter(SVG + "g") if cls in g.get("class", "").split()]
    # Folded: fewer frames drawn, every frame drawn or inside exactly one band, every NAK drawn.
    rc, out, _, res = ladder(exe, work, lossy, fold=True)
    if not check(rc == 0 and res is not None, "lossy, folded: rc %d" % rc):
        return
    root, frames = res
    bands = groups(root, "fold")
    folded = set()
    for b in bands:
        a, z = int(b.get("data-from")), int(b.get("data-to"))
        inside = {n for n in lines if a <= n <= z}
        check(len(inside) == int(b.get("data-frames")) and not (inside & set(frames)) and not (inside & folded),
              "band %d..%d: %d frames, drawn or folded twice" % (a, z, len(inside)))
        folded |= inside
    check(bands and set(frames) | folded == set(lines), "lossy, folded: %d bands, %d drawn + %d folded of %d" % (
        len(bands), len(frames), len(folded), len(lines)))
    naks = sorted(n for n, l in lines.items() if "NAK" in l)
    check(all(n in frames for n in naks), "lossy, folded: every NAK drawn")
    check(out and "folded in" in out[0], "ladder stdout says what was folded: %s" % out[:1])
    # Links: each sequence NAK is linked to a later resend of the PSN it expects.
    links = groups(root, "linked")
    seq = {n for n, l in lines.items() if "NAK 0 (PSN sequence error)" in l}
    linked_naks = {int(g.get("data-from")) for g in links if int(g.get("data-from")) in seq}
    check(linked_naks, "lossy: NAKs linked to their resends")
    for g in links:
        a, z = int(g.get("data-from")), int(g.get("data-to"))
        if a not in seq:
            continue
        psn = lambda n: int(lines[n].split()[lines[n].split().index("psn") + 1])
        check(z > a and psn(z) == psn(a) and "retx" in classes(frames[z]),
              "link %d -> %d: the resend of the NAKed psn" % (a, z))
    # --focus nak: the first NAK and a few frames before it.
    rc, _, _, res = ladder(exe, work, "--focus", "nak", lossy, fold=True)
    first_nak = min(naks)
    check(rc == 0 and res and first_nak in res[1] and min(res[1]) < first_nak and min(res[1]) >= first_nak - 12,
          "--focus nak: first NAK %d drawn, from %s" % (first_nak, res and min(res[1])))
    rc, _, err, _ = ladder(exe, work, "--focus", "cnp", lossy, fold=True)
    check(rc == 2 and "no such event" in err, "--focus cnp without a CNP: rc %d %r" % (rc, err))
    # Without the dropped frames: most missing fresh request PSNs are drawn as not seen (not
    # after a READ, whose responses take PSNs), and nothing that was not dropped is.
    frames_all = read_pcap(lossy)
    after = os.path.join(work, "lossy_after.pcap")
    write_pcap(after, [fr for i, fr in enumerate(frames_all) if i + 1 not in set(dropped)])
    rc, _, _, res = ladder(exe, work, after)
    if not check(res is not None, "ladder of the capture after the loss"):
        return
    not_seen = set()
    for g in [g for g in groups(res[0], "lost") if g.get("data-before")]:
        t = next(e.text for e in g if e.tag == SVG + "title")
        m = re.match(r"not seen: psn (\d+)(?:\.\.(\d+))? ", t)
        if check(m, "lost row title %r" % t):
            not_seen |= set(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    sent = set()
    fresh_lost, any_lost = set(), set()   # PSNs dropped the first time they were sent; dropped at all
    for n in sorted(lines):
        f = lines[n].split()
        if f[7] == "RC_ACKNOWLEDGE" or "READ" in f[7] or "ATOMIC" in f[7]:
            continue
        psn = int(f[f.index("psn") + 1])
        if n in dropped:
            any_lost.add(psn)
            if (f[2], psn) not in sent:
                fresh_lost.add(psn)
        sent.add((f[2], psn))
    check(not_seen and not_seen <= any_lost, "not seen %s, dropped %s" % (sorted(not_seen), sorted(any_lost)))
    check(len(not_seen) * 2 >= len(fresh_lost), "most dropped fresh PSNs drawn as not seen: %d of %d" % (
        len(not_seen), len(fresh_lost)))


def ladder_tests(exe, golden, work, make_lossy):
    table = index_table(golden)
    # Every golden capture: parses, one arrow per RoCE frame, tooltips are the line view, no
    # retransmission or duplicate highlighted (rxe/send_rnr_nak.pcap: the retries after RNR NAKs).
    for rel in sorted(table):
        path = os.path.join(golden, rel)
        rc, out, err, res = ladder(exe, work, path)
        if not check(rc == 0 and res is not None, "ladder %s: rc %d %s" % (rel, rc, err)) and res is None:
            continue
        root, frames = res
        lines = line_view(exe, path)
        check(sorted(frames) == sorted(lines), "ladder %s: frames %s, line view %s" % (rel, sorted(frames)[:5], sorted(lines)[:5]))
        check(all(len(arrows(g)) == 1 for g in frames.values()), "ladder %s: one arrow per frame" % rel)
        check(all(g.find(SVG + "title").text == lines.get(n) for n, g in frames.items()),
              "ladder %s: tooltips are the line view" % rel)
        marked = sorted(n for n, g in frames.items() if classes(g) & {"retx", "dup"})
        if rel == "rxe/send_rnr_nak.pcap":
            rnr = sorted(n for n, l in lines.items() if "RNR NAK" in l)
            check(rnr == [2, 4, 6] and sorted(n for n, g in frames.items() if "rnr" in classes(g)) == rnr,
                  "send_rnr_nak: RNR NAKs %s" % rnr)
            check(marked == [3, 5, 7], "send_rnr_nak: retries marked %s, want [3, 5, 7]" % marked)
        else:
            check(marked == [], "ladder %s: retransmission/duplicate marked on a clean capture: %s" % (rel, marked[:10]))

    # Labels of rxe/write_small.pcap, and the ACK's coverage.
    rc, out, _, (root, frames) = ladder(exe, work, os.path.join(golden, "rxe/write_small.pcap"))
    check(label_of(frames[1]) == "RC_RDMA_WRITE_ONLY psn 256 len 64 A", "label 1: %r" % label_of(frames[1]))
    check(label_of(frames[2]) == "RC_ACKNOWLEDGE psn 256 ACK msn 1", "label 2: %r" % label_of(frames[2]))
    check(frames[2].get("data-acks") == "256..256", "ACK 2 covers psn 256: %r" % frames[2].get("data-acks"))
    check(out[0].startswith("ladder ") and summary(out) == (4, 4, 4, 0, 0), "ladder stdout: %s" % out)
    rc, out, _, (root, frames) = ladder(exe, work, os.path.join(golden, "rxe/write_imm_4k.pcap"))
    last = [g for g in frames.values() if g.get("data-opcode") == "0x09"]
    check(len(last) == 1 and "imm 0xc0de" in label_of(last[0]), "WRITE_LAST_IMM label shows the immediate")
    ack = [g for g in frames.values() if g.get("data-opcode") == "0x11"]
    check(len(ack) == 1 and ack[0].get("data-acked-packets") == "4", "the one ACK of write_imm_4k covers 4 requests")
    # Endpoint columns: the two addresses with their QPs.
    heads = [g.get("data-address") for g in root.iter(SVG + "g") if g.get("class") == "endpoint"]
    check(heads == ["198.18.1.1", "198.18.1.2"], "columns: %s" % heads)

    # --from / --count.
    path = os.path.join(golden, "rxe/write_64k.pcap")
    for args, want in ((["--from", "10", "--count", "5"], list(range(10, 15))),
                       (["--from=60", "--count=100"], list(range(60, 66))),
                       (["--count", "3"], [1, 2, 3]),
                       (["--from", "1000"], [])):
        rc, out, _, res = ladder(exe, work, *args, path)
        got = sorted(res[1]) if res else None
        check(rc == 0 and got == want, "ladder %s: frames %s, want %s" % (args, got, want))

    # --qp: frames to the QP, and frames from it (to its peer). The peer's --qp gives the same
    # set; the frames to the peer go the opposite way.
    for rel in ("tutorial/rdma_cm.pcap", "tutorial/nccl/tree2_node1.pcap"):
        path = os.path.join(golden, rel)
        frames_all = read_pcap(path)
        dq = {i + 1: dest_qp(fr) for i, fr in enumerate(frames_all) if dest_qp(fr) is not None}
        for q in sorted(set(dq.values())):
            rc, _, _, res = ladder(exe, work, "--qp", hex(q), path)
            sel = set(res[1]) if res else set()
            to_q = {n for n, x in dq.items() if x == q}
            others = {dq[n] for n in sel - to_q}
            check(rc == 0 and to_q <= sel and len(others) <= 1, "%s --qp %#x: %d frames, %d to it, others to %s" % (
                rel, q, len(sel), len(to_q), others))
            if len(others) == 1:
                p = others.pop()
                _, _, _, res2 = ladder(exe, work, "--qp", str(p), path)
                check(res2 and set(res2[1]) == sel, "%s: --qp %#x and its peer %#x select the same frames" % (rel, q, p))
        rc, _, _, res = ladder(exe, work, "--qp", "0x123456", path)
        check(rc == 0 and res and not res[1], "%s --qp with no match draws nothing" % rel)

    # A bad ICRC is highlighted (and the exit status says so, as in the line view).
    ws = read_pcap(os.path.join(golden, "rxe/write_small.pcap"))
    bad = os.path.join(work, "ladder_bad_icrc.pcap")
    write_pcap(bad, [ws[0][:-1] + bytes([ws[0][-1] ^ 1]), ws[1]])
    rc, _, _, res = ladder(exe, work, bad)
    check(rc == 1 and res and "icrc-bad" in classes(res[1][1]) and "icrc-bad" not in classes(res[1][2]),
          "bad ICRC: rc %d, classes %s" % (rc, res and classes(res[1][1])))

    # 500 frames stay readable: evenly spaced rows at least 20 units apart, constant width.
    many = []
    for rel in ("rxe/write_64k.pcap", "rxe/read_64k.pcap", "rxe/perftest_read_bw.pcap", "tutorial/rdma_cm.pcap"):
        many += read_pcap(os.path.join(golden, rel))
    big = os.path.join(work, "ladder_500.pcap")
    write_pcap(big, many[:500])
    rc, _, _, res = ladder(exe, work, big)
    if check(res is not None and len(res[1]) == 500, "500-frame ladder"):
        ys = [float(next(e for e in g if e.get("class") == "label").get("y")) for _, g in sorted(res[1].items())]
        check(all(b - a >= 20 for a, b in zip(ys, ys[1:])), "500 frames: labels at least 20 apart")
        h, w = float(res[0].get("height")), float(res[0].get("width"))
        ncols = sum(1 for g in res[0].iter(SVG + "g") if g.get("class") == "endpoint")
        check(h >= 500 * 20 and w <= 400 + 700 * ncols, "500 frames, %d columns: %gx%g" % (ncols, w, h))
    rc, _, _, res = ladder(exe, work, "--count", "4", big)
    check(res is not None and float(res[0].get("height")) < 700, "4 frames: a small picture")

    # The lossy capture (two engines on the FakeLink with seeded loss).
    if make_lossy:
        lossy = os.path.join(work, "lossy.pcap")
        p = subprocess.run([make_lossy, lossy], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "make_lossy_capture: rc %d %s %s" % (p.returncode, p.stdout, p.stderr))
        rc, _, _, res = ladder(exe, work, lossy)
        lines = line_view(exe, lossy)
        if check(rc == 0 and res is not None and sorted(res[1]) == sorted(lines), "lossy ladder: rc %d" % rc):
            frames = res[1]
            def having(cls):
                return sorted(n for n, g in frames.items() if cls in classes(g))
            seq = sorted(n for n, l in lines.items() if "NAK 0 (PSN sequence error)" in l)
            rnr = sorted(n for n, l in lines.items() if "RNR NAK" in l)
            check(seq and having("nak-seq") == seq, "lossy: sequence NAKs %s, marked %s" % (seq, having("nak-seq")))
            check(rnr and having("rnr") == rnr, "lossy: RNR NAKs %s, marked %s" % (rnr, having("rnr")))
            # Retransmissions: every request PSN sent again by the same side is marked, and no
            # frame whose PSN is past everything its side sent before (READ responses count
            # for the requester) is marked.
            seen, top, repeats, fresh = {}, {}, set(), set()
            for n in sorted(lines):
                f = lines[n].split()
                src, op, psn = f[2], f[7], int(f[f.index("psn") + 1])
                if op == "RC_ACKNOWLEDGE":
                    continue
                side = src if "READ_RESPONSE" not in op else f[4]
                if "READ_RESPONSE" not in op and (src, psn) in seen:
                    repeats.add(n)
                if side in top and psn <= top[side]:
                    pass
                else:
                    fresh.add(n)
                    top[side] = psn
                seen[(src, psn)] = n
            retx = set(having("retx"))
            check(repeats and repeats <= retx, "lossy: repeated PSNs %s not all marked (%s)" % (sorted(repeats), sorted(retx)))
            check(not (retx & fresh), "lossy: fresh PSNs marked as retransmissions: %s" % sorted(retx & fresh))
            # The generator says which frames were dropped: each dropped request's PSN is
            # sent again later, and that later frame is marked.
            dropped = [int(x) for l in p.stdout.splitlines() if l.startswith("dropped frames:") for x in l.split()[2:]]
            check(dropped, "lossy: the generator lists its dropped frames")
            for d in dropped:
                f = lines[d].split()
                if f[7] == "RC_ACKNOWLEDGE" or "READ_RESPONSE" in f[7]:
                    continue
                psn = int(f[f.index("psn") + 1])
                again = [n for n in sorted(lines) if n > d and lines[n].split()[2] == f[2]
                         and int(lines[n].split()[lines[n].split().index("psn") + 1]) == psn]
                check(again and again[0] in retx, "lossy: dropped frame %d (psn %d) resent as %s, marked %s" % (
                    d, psn, again[:1], sorted(retx)[:5]))

        story_tests(exe, work, lossy, lines, dropped)
        note_tests(exe, work, lossy, lines)

    # Bad input: a clean error, exit 2, no SVG claimed.
    garbage = os.path.join(work, "garbage.pcap")
    with open(garbage, "wb") as f:
        f.write(b"this is not a capture file at all" * 10)
    cut = os.path.join(work, "cut.pcap")
    with open(os.path.join(golden, "rxe/write_small.pcap"), "rb") as f:
        data = f.read()
    with open(cut, "wb") as f:
        f.write(data[:24 + 16 + 30])   # a record cut inside its frame
    for args in ([garbage], [os.path.join(work, "missing.pcap")], ["--count", "0", cut], ["--from", "x", cut]):
        rc, _, err, _ = ladder(exe, work, *args)
        check(rc == 2 and err.startswith("uroce-dissect: "), "ladder %s: rc %d, stderr %r" % (args, rc, err))
    # The mangled frames of the robustness check (cut at every length, bits flipped): drawn,
    # one arrow each, no crash or sanitizer report.
    mangled = os.path.join(work, "mangled.pcap")
    rc, out, err, res = ladder(exe, work, mangled)
    check(rc in (0, 1) and not err and res is not None and len(res[1]) == summary(out)[1],
          "ladder of mangled frames: rc %d, %s, stderr %s" % (rc, out[-1:], err[:300]))
    # ... and their page: written, its data valid JSON with one frame per RoCE frame, every
    # field row and span inside the frame.
    import json
    page = os.path.join(work, "mangled.html")
    rc, out, err = run(exe, "--html", page, mangled)
    data = None
    if os.path.exists(page):
        m = re.search(r'<script id="uroce-data" type="application/json">(.*?)</script>', open(page).read(), re.S)
        data = json.loads(m.group(1)) if m else None
    if check(rc in (0, 1) and not err and data is not None, "page of mangled frames: rc %d %r" % (rc, err[:300])):
        check(len(data["frames"]) == summary(out)[1], "page of mangled frames: %d frames" % len(data["frames"]))
        inside = all(r[0] + r[1] <= f["len"] for f in data["frames"] for r in f["fr"]) and \
            all(0 <= a < b <= f["len"] for f in data["frames"] for a, b, _ in data["span_sets"][f["sp"]])
        check(inside, "page of mangled frames: every field and span inside its frame")
    rc, _, err, res = ladder(exe, work, cut)
    check(rc in (0, 1, 2) and not err.startswith("=="), "ladder of a cut capture: rc %d %r" % (rc, err))
    rc, _, err = run(exe, "--ladder", "/nonexistent-dir/x.svg", os.path.join(golden, "rxe/write_small.pcap"))
    check(rc == 2 and "cannot write" in err, "ladder to an unwritable path: rc %d %r" % (rc, err))
    for args in (["--from", "3", cut], ["--ladder"], ["--ladder", os.path.join(work, "l.svg"), "--bytes", cut]):
        rc, _, err = run(exe, *args)
        check(rc == 2 and err, "args %s: rc %d, want 2 and a message" % (args, rc))
    print("ladder: golden, labels, --from/--count, --qp, bad ICRC, 500 frames, lossy capture, bad input checked")



# ---- CM MADs (UD SEND to QP 1) -------------------------------------------------------------------

# The CM part of each MAD line of tutorial/rdma_cm.pcap (kernel CM on rxe: two connections to
# port 18515, then their tear-down). Field values as tshark decodes the same frames
# (tests/proto/cm_test.cpp checks every field against it).
RDMA_CM_LINES = {
    1: "CM REQ local_id 0x64c0c56d sid 0x0000000001064853 (TCP 18515) qpn 0x00003d psn 8176132 RC mtu 1024"
       "  ip 10.1.16.62:52471 > 10.1.16.61:18515",
    2: "CM REP local_id 0x8988f456 remote_id 0x64c0c56d qpn 0x00003b psn 7503213",
    3: "CM RTU local_id 0x64c0c56d remote_id 0x8988f456",
    24: "CM REQ local_id 0x65c0c56d sid 0x0000000001064853 (TCP 18515) qpn 0x00003e psn 11502415 RC mtu 1024"
        "  ip 10.1.16.62:50878 > 10.1.16.61:18515",
    25: "CM REP local_id 0x8b88f456 remote_id 0x65c0c56d qpn 0x00003c psn 8201096",
    30: "CM RTU local_id 0x65c0c56d remote_id 0x8b88f456",
    91: "CM DREQ local_id 0x65c0c56d remote_id 0x8b88f456 remote_qpn 0x00003c",
    92: "CM DREQ local_id 0x8b88f456 remote_id 0x65c0c56d remote_qpn 0x00003e",
    93: "CM DREP local_id 0x8b88f456 remote_id 0x65c0c56d",
    94: "CM DREP local_id 0x65c0c56d remote_id 0x8b88f456",
    95: "CM DREQ local_id 0x8988f456 remote_id 0x64c0c56d remote_qpn 0x00003d",
    96: "CM DREP local_id 0x64c0c56d remote_id 0x8988f456",
}

# --bytes of frame 1 of tutorial/rdma_cm.pcap: the REQ, field by field (IBA vol. 1 table 106,
# Linux's include/rdma/ibta_vol1_c12.h) and the rdma_cm IP header at the front of its private data.
RDMA_CM_REQ_BYTES = """\
    1   0.000000  10.1.16.62 > 10.1.16.61 sport 55410  UD_SEND_ONLY qp 0x000001 psn 26 A  DETH qkey=0x80010000 srcqp=0x000001  payload 256  CM REQ local_id 0x64c0c56d sid 0x0000000001064853 (TCP 18515) qpn 0x00003d psn 8176132 RC mtu 1024  ip 10.1.16.62:52471 > 10.1.16.61:18515  icrc ok
  0000  Ethernet 14 bytes, 000e IPv4 20 bytes, 0022 UDP 8 bytes
  002a  BTH          +0   64                       OpCode      = 0x64 UD_SEND_ONLY
  002b               +1   00                       SE=0 M=0 PadCnt=0 TVer=0     [0 0 00 0000]
  002c               +2   ff ff                    P_Key       = 0xffff
  002e               +4   00                       FECN=0 BECN=0 Resv6a=0       [0 0 000000]
  002f               +5   00 00 01                 DestQP      = 0x000001 (1)
  0032               +8   80                       A=1 Resv7=0                  [1 0000000]
  0033               +9   00 00 1a                 PSN         = 26 (0x00001a)
  0036  DETH         +0   80 01 00 00              Q_Key       = 0x80010000
  003a               +4   00                       Reserved    = 0x00
  003b               +5   00 00 01                 SrcQP       = 0x000001 (1)
  003e  payload           256 bytes
  003e  MAD          +0   01                       BaseVersion = 0x01
  003f               +1   07                       MgmtClass   = 0x07 (CM)
  0040               +2   02                       ClassVersion = 0x02
  0041               +3   03                       R=0 Method=0x03 (Send)       [0 0000011]
  0042               +4   00 00                    Status      = 0x0000
  0044               +6   00 00                    ClassSpecific = 0x0000
  0046               +8   00 00 00 02 6d c5 c0 64  TID         = 0x000000026dc5c064
  004e               +16  00 10                    AttributeID = 0x0010 REQ (ConnectRequest)
  0050               +18  00 00                    Reserved    = 0x0000
  0052               +20  00 00 00 00              AttrModifier = 0x00000000
  0056  CM REQ       +0   64 c0 c5 6d              LocalCommID = 0x64c0c56d
  005e               +8   00 00 00 00 01 06 48 53  ServiceID   = 0x0000000001064853 (TCP 18515)
  0066               +16  02 50 56 ff fe a7 7d 03  LocalCAGUID = 0x025056fffea77d03
  0072               +28  00 00 00 00              LocalQ_Key  = 0x00000000
  0076               +32  00 00 3d                 LocalQPN    = 0x00003d (61)
  0079               +35  00                       RespRes     = 0x00 (0)
  007a               +36  00 00 00                 LocalEECN   = 0x000000
  007d               +39  00                       InitDepth   = 0x00 (0)
  007e               +40  00 00 00                 RemoteEECN  = 0x000000
  0081               +43  a0                       RemoteCMTO=20 Transport=0 (RC) E2EFC=0 [10100 00 0]
  0082               +44  7c c2 04                 StartingPSN = 0x7cc204 (8176132)
  0085               +47  a7                       LocalCMTO=20 RetryCount=7    [10100 111]
  0086               +48  ff ff                    P_Key       = 0xffff
  0088               +50  37                       PathMTU=3 (1024) RDC=0 RNRRetry=7 [0011 0 111]
  0089               +51  f0                       MaxCMRetries=15 SRQ=0 ExtTransport=0 [1111 0 000]
  008a  primary path +0   ff ff                    LocalLID    = 0xffff
  008c               +2   ff ff                    RemoteLID   = 0xffff
  008e               +4   00 00 00 00 00 00 00 00  LocalGID    = ::ffff:10.1.16.62
  0096               +12  00 00 ff ff 0a 01 10 3e
  009e               +20  00 00 00 00 00 00 00 00  RemoteGID   = ::ffff:10.1.16.61
  00a6               +28  00 00 ff ff 0a 01 10 3d
  00ae               +36  91 a3 c0 00              FlowLabel   = 0x91a3c (bits 0-19), PacketRate=0 (byte 3 bits 2-7)
  00b2               +40  00                       TClass      = 0x00
  00b3               +41  40                       HopLimit    = 0x40 (64)
  00b4               +42  00                       SL=0 SubnetLocal=0           [0000 0 000]
  00b5               +43  88                       LocalAckTO=17                [10001 000]
  00b6  alt. path    +0   00 00                    LocalLID    = 0x0000
  00b8               +2   00 00                    RemoteLID   = 0x0000
  00ba               +4   00 00 00 00 00 00 00 00  LocalGID    = ::
  00c2               +12  00 00 00 00 00 00 00 00
  00ca               +20  00 00 00 00 00 00 00 00  RemoteGID   = ::
  00d2               +28  00 00 00 00 00 00 00 00
  00da               +36  00 00 00 00              FlowLabel   = 0x00000 (bits 0-19), PacketRate=0 (byte 3 bits 2-7)
  00de               +40  00                       TClass      = 0x00
  00df               +41  00                       HopLimit    = 0x00 (0)
  00e0               +42  00                       SL=0 SubnetLocal=0           [0000 0 000]
  00e1               +43  00                       LocalAckTO=0 SAP=0           [00000 0 00]
  00e2  rdma_cm      +0   00                       Version     = 0x00
  00e3               +1   40                       IPVersion=4                  [0100 0000]
  00e4               +2   cc f7                    SrcPort     = 0xccf7 (52471)
  00e6               +4   00 00 00 00 00 00 00 00  SrcIP       = 10.1.16.62
  00ee               +12  00 00 00 00 0a 01 10 3e
  00f6               +20  00 00 00 00 00 00 00 00  DstIP       = 10.1.16.61
  00fe               +28  00 00 00 00 0a 01 10 3d
  0106               +176                           private data after the rdma_cm header, 56 bytes (0 nonzero)
  013e  ICRC         +0   53 68 31 45              ICRC        = 0x45316853 (least significant byte first), ok
    2   0.002284  10.1.16.61 > 10.1.16.62 sport 55410  UD_SEND_ONLY qp 0x000001 psn 18 A  DETH qkey=0x80010000 srcqp=0x000001  payload 256  CM REP local_id 0x8988f456 remote_id 0x64c0c56d qpn 0x00003b psn 7503213  icrc ok
  0000  Ethernet 14 bytes, 000e IPv4 20 bytes, 0022 UDP 8 bytes
  002a  BTH          +0   64                       OpCode      = 0x64 UD_SEND_ONLY
"""


def roce_icrc(frame):
    """The ICRC of an IPv4 RoCEv2 frame without VLAN tags or IP options (IBA A17.8: CRC-32 over
    8 bytes of ones, the IP header with TOS, TTL and checksum as ones, UDP with its checksum as
    ones, the BTH with byte 4 as ones, and the rest up to the ICRC), least significant byte first."""
    import zlib
    ip = bytearray(frame[14:34])
    ip[1], ip[8], ip[10:12] = 0xFF, 0xFF, b"\xff\xff"
    udp = bytearray(frame[34:42])
    udp[6:8] = b"\xff\xff"
    bth = bytearray(frame[42:54])
    bth[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + frame[54:-4]))


def with_mad(frame, attr, body, mgmt_class=0x07):
    """Frame 1 of rdma_cm.pcap (a REQ) carrying another MAD: attribute `attr`, CM message `body`
    (zero-padded to 232 bytes), with a fresh ICRC."""
    f = bytearray(frame)
    mad = 14 + 20 + 8 + 12 + 8
    f[mad + 1] = mgmt_class
    struct.pack_into("!H", f, mad + 16, attr)
    f[mad + 24:mad + 256] = body + bytes(232 - len(body))
    f[-4:] = roce_icrc(bytes(f))
    return bytes(f)


def cm_tests(exe, golden, work):
    path = os.path.join(golden, "tutorial/rdma_cm.pcap")
    rc, out, _ = run(exe, path)
    lines = {int(l.split()[0]): l for l in out if l[:1] == " " and l.split()[0].isdigit()}
    for n, text in RDMA_CM_LINES.items():
        line = lines.get(n, "")
        check(line.endswith("UD_SEND_ONLY qp 0x000001 psn %s A  DETH qkey=0x80010000 srcqp=0x000001  payload 256  "
                            % line.split(" psn ")[1].split()[0] + text + "  icrc ok") if " psn " in line else False,
              "rdma_cm.pcap frame %d: %r, want ... %r" % (n, line, text))
    check(sum(1 for l in lines.values() if "  CM " in l) == len(RDMA_CM_LINES), "only the 12 MADs have a CM part")
    # The first data packets use the PSNs the CM exchanged: the passive side sends from the REQ's
    # starting PSN, the active side from the REP's.
    check(" RC_SEND_ONLY qp 0x00003b psn 7503213 " in lines.get(4, ""), "frame 4: %r" % lines.get(4))
    check(" RC_SEND_ONLY qp 0x00003d psn 8176132 " in lines.get(6, ""), "frame 6: %r" % lines.get(6))

    rc, out, _ = run(exe, "--bytes", path)
    want = RDMA_CM_REQ_BYTES.splitlines()
    check(rc == 0 and out[:len(want)] == want, "--bytes of the REQ differs:\n" + "\n".join(
        "%s\n   want %s" % (a, b) for a, b in zip(out[:len(want)], want) if a != b))
    for frag in ("  0056  CM REP       +0   89 88 f4 56              LocalCommID = 0x8988f456",
                 "  0062               +12  00 00 3b                 LocalQPN    = 0x00003b (59)",
                 "  006a               +20  72 7d 6d                 StartingPSN = 0x727d6d (7503213)",
                 "  005e               +8   00 00 3c                 RemoteQPN   = 0x00003c (60)"):
        check(frag in out, "--bytes lacks %r" % frag)

    # Messages the captures lack, made from the REQ's frame: REJ (nobody listens), MRA, SIDR
    # (rdma_cm's UD ids), LAP (named, not decoded), and a MAD of another class on QP 1.
    req = read_pcap(path)[0]
    ids = bytes.fromhex("a0a0a0a0" "64c0c56d")
    rej = ids + bytes([0x00, 0x00]) + struct.pack("!H", 8)
    mra = ids + bytes([0x40, 23 << 3])
    cma = bytes([0x00, 0x40]) + struct.pack("!H", 40000) + bytes(12) + bytes([198, 18, 0, 1]) + bytes(12) + bytes([198, 18, 0, 2])
    sidr_req = struct.pack("!IHHQ", 0x11, 0xFFFF, 0, 0x0000000001111c06) + cma
    sidr_rep = struct.pack("!IBBH", 0x11, 0, 0, 0) + bytes([0x00, 0x00, 0x42, 0]) + struct.pack("!QI", 0x0000000001111c06, 0x01234567)
    frames = [with_mad(req, 0x0012, rej), with_mad(req, 0x0011, mra), with_mad(req, 0x0017, sidr_req),
              with_mad(req, 0x0018, sidr_rep), with_mad(req, 0x0019, b""), with_mad(req, 0x0012, rej, mgmt_class=0x03)]
    want = [
        "CM REJ local_id 0xa0a0a0a0 remote_id 0x64c0c56d reason 8 (invalid service ID) rejects REQ",
        "CM MRA local_id 0xa0a0a0a0 remote_id 0x64c0c56d for REP service_timeout 23",
        "CM SIDR_REQ request_id 0x00000011 sid 0x0000000001111c06 (UDP 7174)  ip 198.18.0.1:40000 > 198.18.0.2:7174",
        "CM SIDR_REP request_id 0x00000011 status 0 (success) qpn 0x000042 qkey 0x01234567 sid 0x0000000001111c06 (UDP 7174)",
        "CM LAP (not decoded)",
        "MAD: management class is not CM (0x07)",
    ]
    made = os.path.join(work, "cm_made.pcap")
    write_pcap(made, frames)
    rc, out, _ = run(exe, made)
    check(rc == 0 and summary(out) == (6, 6, 6, 0, 0), "cm_made.pcap: rc %d summary %s" % (rc, summary(out)))
    for line, text in zip(out, want):
        check(line.endswith("payload 256  " + text + "  icrc ok"), "made MAD: %r, want ... %r" % (line, text))
    rc, out, _ = run(exe, "--bytes", made)
    for frag in ("  0060               +10  00 08                    Reason      = 8 (invalid service ID)",
                 "  005e               +8   00                       MsgRejected=0 (REQ)          [00 000000]",
                 "  005e               +8   40                       MsgMRAed=1 (REP)             [01 000000]",
                 "  0066  rdma_cm      +0   00                       Version     = 0x00",
                 "  0062               +12  00 00 00 00 01 11 1c 06  ServiceID   = 0x0000000001111c06 (UDP 7174)"):
        check(frag in out, "--bytes of cm_made.pcap lacks %r" % frag)
    # tshark reads the made REJ as the dissector does (it does not decode MRA or SIDR).
    import shutil
    if shutil.which("tshark"):
        p = subprocess.run(["tshark", "-r", made, "-Y", "frame.number == 1", "-T", "fields",
                            "-e", "infiniband.mad.attributeid", "-e", "infiniband.cm.rej.localcommid",
                            "-e", "infiniband.cm.rej.remotecommid", "-e", "infiniband.cm.rej.msgrej",
                            "-e", "infiniband.cm.rej.reason"], capture_output=True, text=True, timeout=60)
        got = p.stdout.split()
        check(got == ["0x0012", "0xa0a0a0a0", "0x64c0c56d", "0x00", "0x0008"], "tshark on the made REJ: %r" % got)
    else:
        print("cm: tshark not found, the made REJ not cross-checked")
    print("cm: %d MAD lines of rdma_cm.pcap, the REQ's layout, %d made MADs" % (len(RDMA_CM_LINES), len(frames)))


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

    # A capture cut at a snap length (uroce's port keeps the headers and 64 bytes by default):
    # the headers are decoded, the ICRC is not checked, nothing is called malformed. A frame cut
    # short on the wire (the capture has all it had) stays malformed.
    w64k = read_pcap(os.path.join(golden, "rxe/write_64k.pcap"))[0]    # a WRITE FIRST, 1024 B payload
    snap = os.path.join(work, "snapped.pcap")
    with open(snap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 126, 1))
        for i, (fr, keep) in enumerate(((w64k, 126), (ack, len(ack)), (cut, len(cut)))):
            f.write(struct.pack("<IIII", 1700000000, i, keep, len(fr)) + fr[:keep])
    rc, out, _ = run(exe, snap)
    text = "\n".join(out)
    check(rc == 1 and summary(out) == (3, 3, 1, 0, 1), "snapped: rc %d summary %s" % (rc, summary(out)))
    check("RC_RDMA_WRITE_FIRST qp 0x" in out[0] and "payload 1024" in out[0] and
          "(snapped: 126 of %d bytes captured, icrc not checked)" % len(w64k) in out[0] and "MALFORMED" not in out[0],
          "snapped: the cut WRITE FIRST: " + out[0])
    check("MALFORMED: truncated in IP payload" in out[2], "snapped: the frame cut on the wire: " + out[2])
    check("(1 frame cut short by the capture's snap length: headers decoded, ICRC not checked)" in text,
          "snapped: no note of the snapped frame:\n" + text)
    rc, out, _ = run(exe, "--bytes", snap)
    check(any("not checked (snapped)" in l for l in out) or any("frame ends" in l for l in out),
          "snapped --bytes:\n" + "\n".join(out[:30]))

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
    # The CM MADs of rdma_cm.pcap (too long for the loop above): cut at every length, and bit
    # flips inside the MAD with the ICRC made good again, so that the MAD decoding meets them.
    for fr in read_pcap(os.path.join(golden, "tutorial/rdma_cm.pcap")):
        if dest_qp(fr) != 1:
            continue
        for n in range(42, len(fr), 7):
            mangled.append(fr[:n])
        for _ in range(60):
            b = bytearray(fr)
            bit = rnd.randrange(62 * 8, (len(b) - 4) * 8)
            b[bit // 8] ^= 1 << (bit % 8)
            b[-4:] = roce_icrc(bytes(b))
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

    cm_tests(exe, golden, work)
    ladder_tests(exe, golden, work, sys.argv[4] if len(sys.argv) > 4 else None)

    if FAILURES:
        print("dissect: %d failure(s)" % len(FAILURES))
        return 1
    print("dissect: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
