#!/usr/bin/env python3
"""Makes the lessons of docs/learn/ from traffic uroce makes itself (scripts/learn.sh).

Each lesson runs tools/lesson's uroce-lesson on two uroce endpoints joined by memif, both
through the verbs shim (scripts/uroce-run), with the client's frames captured by the port
(UROCE_CAPTURE) and, where the lesson wants it, the port's fault injection (UROCE_FAULT_*).
Then uroce-dissect prints the frames and their bytes and draws the ladder; in the QP-states
lesson uroce-stat shows the server's QP after each verbs call. The text of each lesson is
docs/learn/src/NAME.md; every {{key}} in it is replaced by real output, and the page is
written to OUT/NAME.md (OUT defaults to docs/learn), its pictures to OUT/img/.

With --check, each lesson also asserts what it teaches (the frames, the completions, the
states) and exits 1 if any does not hold: tests/learn runs it so.

usage: learn.py [--build DIR] [--out DIR] [--check] NAME|all
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
import driver  # noqa: E402  (tests/support/driver.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LESSONS = ["write-send", "go-back-n", "rnr", "read-atomic", "qp-states", "drill-psn-gap", "congestion"]
SOCK = "/tmp/uroce-learn.sock"   # not the suites' memif socket: lessons may run beside them
PORT = 18620
TIMEOUT = 60                     # seconds any one lesson may take

ap = argparse.ArgumentParser(usage=__doc__.split("usage: ")[1])
ap.add_argument("--build", default=os.path.join(ROOT, "build"))
ap.add_argument("--out", default=os.path.join(ROOT, "docs", "learn"))
ap.add_argument("--check", action="store_true")
ap.add_argument("name")
args = ap.parse_args()
BUILD = os.path.abspath(args.build)
RUN = os.path.join(ROOT, "scripts", "uroce-run")
LIB = os.path.join(BUILD, "verbs_shim", "liburoce-verbs.so")
LESSON = os.path.join(BUILD, "tools", "lesson", "uroce-lesson")
DISSECT = os.path.join(BUILD, "tools", "dissect", "uroce-dissect")
STAT = os.path.join(ROOT, "tools", "stat", "uroce-stat")
DRILL = os.path.join(BUILD, "tools", "drill", "uroce-drill")
AGENT = os.path.join(BUILD, "tools", "drill", "uroce-drill-agent")
children = driver.Children()
procs = children.procs   # start() below appends its own Popen (it needs stdin)
problems = []


def cleanup():
    children.stop_all()


driver.on_signals(cleanup)


def expect(cond, what):
    if not cond:
        problems.append(what)
        print("  NOT AS TAUGHT: " + what, flush=True)


def configs(tmp):
    """The repository's memif pair on the lessons' own socket."""
    out = []
    for side in ("server", "client"):
        text = open(os.path.join(ROOT, "config", f"memif-{side}.conf")).read()
        text = text.replace("/tmp/uroce-memif.sock", SOCK).replace("--file-prefix uroce-memif", "--file-prefix uroce-learn")
        path = os.path.join(tmp, f"{side}.conf")
        with open(path, "w") as f:
            f.write(text)
        out.append(path)
    return out


def start(tmp, side, argv, env_extra, stdin=None):
    env = dict(os.environ, UROCE_SHIM_STATS="1", **env_extra)
    conf = os.path.join(tmp, f"{side}.conf")
    log = open(os.path.join(tmp, f"{side}.out"), "w")
    p = subprocess.Popen([RUN, "--config", conf, "--lib", LIB, "--", LESSON] + argv, env=env, stdout=subprocess.PIPE
                         if stdin else log, stderr=log if not stdin else subprocess.STDOUT, stdin=stdin,
                         start_new_session=True, text=True)
    procs.append(p)
    return p


def run_pair(tmp, scenario, opts, server_env=None, client_env=None):
    """Runs one scenario on both sides; returns (server output, client output, capture path)."""
    cap = os.path.join(tmp, "client.pcapng")
    cenv = {"UROCE_CAPTURE": cap, "UROCE_CAPTURE_SNAPLEN": "65535", **(client_env or {})}
    s = start(tmp, "server", [scenario, "-p", str(PORT)] + opts, server_env or {})
    time.sleep(0.5)
    c = start(tmp, "client", [scenario, "-p", str(PORT)] + opts + ["127.0.0.1"], cenv)
    end = time.time() + TIMEOUT
    for p in (c, s):
        try:
            p.wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            expect(False, f"{scenario}: timed out after {TIMEOUT} s")
    cleanup()
    so = open(os.path.join(tmp, "server.out")).read()
    co = open(os.path.join(tmp, "client.out")).read()
    ok = s.returncode == 0 and c.returncode == 0
    expect(ok, f"{scenario}: server rc {s.returncode}, client rc {c.returncode}")
    if not ok:
        print("--- server\n" + so[-3000:] + "\n--- client\n" + co[-3000:], flush=True)
    return so, co, cap


def program_lines(text):
    """The lesson program's own lines (not DPDK's or the shim's)."""
    return "\n".join(l for l in text.splitlines() if l.startswith(("server", "client", "FAIL")))


def counters(text, keys):
    """The named counters from the shim's exit print (UROCE_SHIM_STATS), as 'k=v' text."""
    found = {}
    for k, v in re.findall(r"\b([a-z_]+)=(\d+)", text):
        if k in keys:
            found[k] = found.get(k, 0) + int(v)
    return " ".join(f"{k}={found.get(k, 0)}" for k in keys), found


def dissect(cap, *opts):
    r = subprocess.run([DISSECT, *opts, cap], capture_output=True, text=True, timeout=60)
    return r.stdout


def frames_of(lines_text):
    """[(number, line)] of the line view."""
    out = []
    for l in lines_text.splitlines():
        m = re.match(r"\s*(\d+)\s+\d+\.\d+\s", l)
        if m:
            out.append((int(m.group(1)), l))
    return out


def pick(lines_text, first, count):
    return "\n".join(l for n, l in frames_of(lines_text) if first <= n < first + count)


def bytes_of(cap, numbers):
    """The --bytes blocks of the given frame numbers."""
    out, keep = [], False
    for l in dissect(cap, "--bytes").splitlines():
        m = re.match(r"\s*(\d+)\s+\d+\.\d+\s", l)
        if m:
            keep = int(m.group(1)) in numbers
        elif not l.startswith("  "):
            keep = False
        if keep:
            out.append(l)
    return "\n".join(out)


PAGES = {}   # capture -> its page (html/NAME.html), made once per capture


def page(cap, name):
    """The capture's page (uroce-dissect --html): html/NAME.html, once per capture."""
    if cap not in PAGES:
        os.makedirs(os.path.join(args.out, "html"), exist_ok=True)
        out = os.path.join(args.out, "html", name + ".html")
        r = subprocess.run([DISSECT, "--html", out, cap], capture_output=True, text=True, timeout=120)
        expect(r.returncode in (0, 1) and os.path.exists(out), f"page {name}: {r.stderr.strip()}")
        PAGES[cap] = f"html/{name}.html"
    return PAGES[cap]


def ladder(cap, name, *opts, focus=None, html_name=None):
    """The ladder's SVG (folded, or around the first event of `focus`), and a link to the page
    of the whole capture (at that event)."""
    os.makedirs(os.path.join(args.out, "img"), exist_ok=True)
    svg = os.path.join(args.out, "img", name + ".svg")
    opts = (*opts, "--focus", focus) if focus else opts
    r = subprocess.run([DISSECT, "--ladder", svg, *opts, cap], capture_output=True, text=True, timeout=60)
    expect(r.returncode in (0, 1) and os.path.exists(svg), f"ladder {name}: {r.stderr.strip()}")
    html = page(cap, html_name or name)
    where = f"#focus={focus}" if focus else ""
    return (f"![ladder](img/{name}.svg)\n\n(`uroce-dissect --ladder img/{name}.svg {' '.join(opts)} "
            f"{os.path.basename(cap)}`: {r.stdout.strip()})\n\n"
            f"**[Click through the whole capture]({html}{where})**: every frame on the ladder, and for the one "
            f"selected its line, its fields and its bytes (`uroce-dissect --html {html} {os.path.basename(cap)}`; "
            f"keys j/k next and previous frame, n/p next and previous event).")


def first_gap(lines_text, src):
    """The frame number of the first request from `src` whose PSN skips one (the capture is
    taken after the port's fault stage, so a dropped frame is missing from it)."""
    last = None
    for n, l in frames_of(lines_text):
        m = re.search(r"\s(\S+) > \S+ .*? (RC_\S+) qp \S+ psn (\d+)", l)
        if m and m.group(1) == src and "ACKNOWLEDGE" not in m.group(2):
            psn = int(m.group(3))
            if last is not None and psn > last + 1:
                return n
            last = psn if last is None else max(last, psn)
    return None


def first_repeat(lines_text, src):
    """The frame number of the first request PSN the sender `src` sends a second time."""
    seen = set()
    for n, l in frames_of(lines_text):
        m = re.search(r"\s(\S+) > \S+ .*? (RC_\S+) qp \S+ psn (\d+)", l)
        if m and m.group(1) == src and "ACKNOWLEDGE" not in m.group(2) and "RESPONSE" not in m.group(2):
            if m.group(3) in seen:
                return n
            seen.add(m.group(3))
    return None


# ---- the lessons --------------------------------------------------------------------------

def write_send(tmp):
    so, co, cap = run_pair(tmp, "write-send", ["-s", "4096"])
    lines = dissect(cap)
    f = frames_of(lines) or [(0, "")]
    ops = [(l.split() + [""] * 8)[7] for _, l in f]
    expect(ops[:4] == ["RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"],
           f"write-send: the WRITE is FIRST, MIDDLE, MIDDLE, LAST (got {ops[:4]})")
    expect("RC_SEND_FIRST" in ops and "RC_SEND_LAST" in ops, "write-send: the SEND is in the capture")
    expect("verified" in so and "no completion" in so, "write-send: the server verified both and saw one completion")
    send_first = next((n for n, l in f if "RC_SEND_FIRST" in l), 0)
    return {"server": program_lines(so), "client": program_lines(co), "frames": lines.rstrip(),
            "bytes_write": bytes_of(cap, {f[0][0]}), "bytes_send": bytes_of(cap, {send_first}),
            "ladder": ladder(cap, "write-send")}


def go_back_n(tmp):
    so, co, cap = run_pair(tmp, "writes", ["-s", "65536", "-n", "40"],
                           client_env={"UROCE_FAULT_TX_DROP": "0.01", "UROCE_FAULT_SEED": "3"})
    lines = dissect(cap)
    f = frames_of(lines)
    nak = next((n for n, l in f if "NAK 0 (PSN sequence error)" in l), None)
    expect(nak is not None, "go-back-n: the responder sent a sequence NAK")
    rep = first_repeat(lines, "198.19.0.2")
    expect(rep is not None, "go-back-n: the requester sent a PSN again")
    ctr_text, ctr = counters(co, ["tx_fault_dropped", "retransmitted", "rcvd_seq_err", "gap_restarts", "naks_ignored",
                                  "probes", "timeouts"])
    sctr_text, _ = counters(so, ["out_of_seq_request", "duplicate_request", "out_of_sequence"])
    expect(ctr.get("tx_fault_dropped", 0) > 0, "go-back-n: the client's fault stage dropped frames")
    gap = first_gap(lines, "198.19.0.2") or nak or 1
    at = max(1, gap - 3)
    count = min(max((nak or gap) - at + 12, 20), 120)
    return {"server": program_lines(so), "client": program_lines(co), "client_counters": ctr_text,
            "server_counters": sctr_text, "nak_frames": pick(lines, at, count), "gap_frame": str(gap),
            "nak_frame": str(nak), "summary": lines.strip().splitlines()[-1],
            "ladder": ladder(cap, "go-back-n", focus="loss")}


def rnr(tmp):
    so, co, cap = run_pair(tmp, "rnr", ["-s", "4096"])
    lines = dissect(cap)
    n_rnr = lines.count("RNR NAK")
    expect(n_rnr >= 1, "rnr: the responder answered with an RNR NAK")
    ctr_text, _ = counters(co, ["rcvd_rnr_err", "retransmitted"])
    return {"server": program_lines(so), "client": program_lines(co), "frames": lines.rstrip(),
            "client_counters": ctr_text, "ladder": ladder(cap, "rnr", focus="rnr")}


def read_atomic(tmp):
    so, co, cap = run_pair(tmp, "read-atomic", ["-s", "4096", "-n", "40"],
                           server_env={"UROCE_FAULT_TX_DROP": "0.03", "UROCE_FAULT_SEED": "5"})
    lines = dissect(cap)
    ops = " ".join(l for _, l in frames_of(lines))
    for op in ("RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST", "RC_FETCH_ADD", "RC_COMPARE_SWAP",
               "RC_ATOMIC_ACKNOWLEDGE"):
        expect(op in ops, f"read-atomic: {op} in the capture")
    rep = first_repeat(lines, "198.19.0.2")
    expect(rep is not None, "read-atomic: a lost response made the requester ask again")
    ctr_text, _ = counters(so, ["tx_fault_dropped", "duplicate_request", "replayed_responses"])
    cctr_text, _ = counters(co, ["retransmitted", "probes", "timeouts", "implied_naks"])
    at = max(1, (rep or 1) - 10)
    return {"server": program_lines(so), "client": program_lines(co), "first_round": pick(lines, 1, 12),
            "replay_frames": pick(lines, at, 24), "server_counters": ctr_text, "client_counters": cctr_text,
            "ladder_round": ladder(cap, "read-atomic-round", "--count", "12", html_name="read-atomic"),
            "ladder_replay": ladder(cap, "read-atomic-replay", "--from", str(at), "--count", "24", html_name="read-atomic")}


def qp_states(tmp):
    cap = os.path.join(tmp, "client.pcapng")
    s = start(tmp, "server", ["states", "--pause", "-p", str(PORT)], {}, stdin=subprocess.PIPE)
    time.sleep(0.5)
    c = start(tmp, "client", ["states", "-p", str(PORT), "127.0.0.1"],
              {"UROCE_CAPTURE": cap, "UROCE_CAPTURE_SNAPLEN": "65535"})
    out, stat = [], {}
    end = time.time() + TIMEOUT
    for line in s.stdout:
        out.append(line.rstrip("\n"))
        m = re.match(r"paused (\w+)", line)
        if m:
            r = subprocess.run([STAT, "--pid", str(s.pid), "res", "qp"], capture_output=True, text=True, timeout=20)
            stat[m.group(1)] = r.stdout.rstrip()
            expect(m.group(1) in r.stdout, f"qp-states: uroce-stat shows the QP in {m.group(1)}")
            s.stdin.write("\n")
            s.stdin.flush()
        if time.time() > end:
            expect(False, "qp-states: timed out")
            break
    for p in (s, c):
        try:
            p.wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            expect(False, "qp-states: did not end")
    cleanup()
    so = "\n".join(out)
    co = open(os.path.join(tmp, "client.out")).read()
    for st, taken in (("RESET", False), ("INIT", False), ("RTR", True), ("RTS", True), ("ERR", False)):
        want = f"server in {st}: the SEND was {'accepted' if taken else 'not taken'}"
        expect(want in so, f"qp-states: '{want}'")
    ctr_text, _ = counters(so, ["dropped_bad_state", "rcvd_pkts", "rdma_recvs"])
    lines = dissect(cap)
    d = {"server": program_lines(so), "client": program_lines(co), "frames": lines.rstrip(),
         "server_counters": ctr_text, "ladder": ladder(cap, "qp-states")}
    for st in ("RESET", "INIT", "RTR", "RTS", "ERR"):
        d["stat_" + st] = stat.get(st, "(no answer)")
    return d


def drill_psn_gap(tmp):
    """One rule taught by running its uroce-drill scenario (psn/gap) against uroce: the agent
    through the shim on the memif client end, the drill on the server end."""
    scenario = os.path.join(ROOT, "tools", "drill", "scenarios", "psn", "gap.drill")
    log = open(os.path.join(tmp, "agent.out"), "w")
    agent = subprocess.Popen([RUN, "--config", os.path.join(tmp, "client.conf"), "--lib", LIB, "--", AGENT,
                              "-l", "127.0.0.1", "-p", str(PORT), "--once"], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    procs.append(agent)
    caps = os.path.join(tmp, "caps")
    r = subprocess.run([DRILL, "--config", os.path.join(tmp, "server.conf"), "--agent", f"127.0.0.1:{PORT}",
                        "--capture-dir", caps, "psn/gap"], capture_output=True, text=True, timeout=TIMEOUT)
    cleanup()
    out = "\n".join(l for l in r.stdout.splitlines() if not l.startswith("uroce-drill: the link"))
    expect(r.returncode == 0 and "verdict: conforms" in out, f"drill-psn-gap: the scenario conforms (rc {r.returncode})")
    cap = os.path.join(caps, "psn-gap.pcapng")
    lines = dissect(cap) if os.path.exists(cap) else ""
    naks = [n for n, l in frames_of(lines) if "NAK 0" in l]
    expect(len(naks) == 1, f"drill-psn-gap: one sequence NAK on the wire ({len(naks)})")
    text = open(scenario).read().rstrip()
    return {"scenario": text, "run": out.strip(), "frames": lines.rstrip(),
            "nak_bytes": bytes_of(cap, naks[:1]) if naks else "",
            "ladder": ladder(cap, "drill-psn-gap")}


MAKERS = {"drill-psn-gap": drill_psn_gap, "write-send": write_send, "go-back-n": go_back_n, "rnr": rnr, "read-atomic": read_atomic,
          "qp-states": qp_states}


# DCQCN with the paper's timers (docs/congestion.md), from the environment of the client (the
# reaction point); the bottleneck on its transmit side; every frame ECT(0) on both sides.
CONGESTION_ENV = {"UROCE_BOTTLENECK_MBPS": "1000", "UROCE_BOTTLENECK_QUEUE_KB": "96", "UROCE_BOTTLENECK_K_KB": "16",
                  "UROCE_BOTTLENECK_KMAX_KB": "64", "UROCE_BOTTLENECK_PMAX": "1", "UROCE_ECN": "ect0"}
DCQCN_ENV = {"UROCE_CC": "dcqcn", "UROCE_CC_LINE_RATE": "40000", "UROCE_RPG_TIME_RESET": "55",
             "UROCE_RPG_BYTE_RESET": "1048576", "UROCE_DCE_TCP_RTT": "55", "UROCE_RPG_MIN_RATE": "500"}
CC_BENCH = os.path.join(BUILD, "bench", "cc_bench")


def congestion(tmp):
    """A 1 Gbit/s congestion point on the client's transmit side: its WRITEs are marked CE once
    the queue passes K, the server answers with CNPs, DCQCN at the client cuts its rate; the
    same run without congestion control fills the queue and drops."""
    runs = {}
    for name, extra in (("off", {}), ("dcqcn", DCQCN_ENV)):
        # Headers and 64 bytes of payload of each frame (UROCE_CAPTURE_SNAPLEN 0): 6,400 frames.
        so, co, cap = run_pair(tmp, "writes", ["-s", "65536", "-n", "100"], server_env={"UROCE_ECN": "ect0"},
                               client_env={**CONGESTION_ENV, **extra, "UROCE_CAPTURE_SNAPLEN": "0"})
        keep = os.path.join(tmp, f"client-{name}.pcapng")
        if os.path.exists(cap):
            os.replace(cap, keep)
        runs[name] = (so, co, keep)
    keys = ["bottleneck_frames", "bottleneck_marked", "bottleneck_dropped", "bottleneck_max_queue", "cnp_rcvd",
            "retransmitted"]
    skeys = ["ecn_ce_rcvd", "cnp_sent"]
    v = {}
    for name, (so, co, cap) in runs.items():
        v[f"{name}_client"], c = counters(co, keys)
        v[f"{name}_server"], s = counters(so, skeys)
        v[f"{name}_programs"] = program_lines(so) + "\n" + program_lines(co)
        expect(c.get("bottleneck_marked", 0) > 0, f"congestion ({name}): the bottleneck marked frames CE")
        expect(s.get("ecn_ce_rcvd", 0) == c.get("bottleneck_marked", 0),
               f"congestion ({name}): the server received every CE mark ({s.get('ecn_ce_rcvd')} of {c.get('bottleneck_marked')})")
        expect(s.get("cnp_sent", 0) > 0 and c.get("cnp_rcvd", 0) == s.get("cnp_sent", 0),
               f"congestion ({name}): the CNPs the server sent reached the client")
        runs[name] = (so, co, cap, c)
    off, dc = runs["off"][3], runs["dcqcn"][3]
    expect(off.get("bottleneck_dropped", 0) > 0, "congestion: without congestion control the queue overflows")
    expect(dc.get("bottleneck_dropped", 0) < off.get("bottleneck_dropped", 0),
           "congestion: DCQCN drops fewer frames than no congestion control")
    cap = runs["dcqcn"][2]
    lines = dissect(cap)
    f = frames_of(lines)
    ce = next((n for n, l in f if " CE " in l or "ECN CE" in l or "ce " in l.split("RC_")[0]), None)
    cnp = next((n for n, l in f if "CNP" in l), None)
    expect(ce is not None and cnp is not None, "congestion: the capture shows a CE mark and a CNP")
    at = max(1, (ce or 1) - 2)
    v["ce_frame"], v["cnp_frame"] = str(ce), str(cnp)
    v["frames"] = pick(lines, at, max(8, (cnp or at) - at + 4) if cnp and cnp - at < 60 else 12)
    v["cnp_bytes"] = bytes_of(cap, {cnp}) if cnp else ""
    v["summary"] = lines.strip().splitlines()[-1] if lines.strip() else ""
    v["summary_cc"] = next((l for l in lines.strip().splitlines() if re.match(r"^\(\d+ CNP, ECN", l)), "")
    # What each CNP did to the rate: the engine's notes, the comments of the capture's frames.
    notes = [n for l in lines.splitlines() for m in [re.search(r"\[note: (.*)\]$", l)] if m
             for n in m.group(1).split("; ")]
    expect(notes and all(re.match(r"QP 0x[0-9a-f]{6} cc=dcqcn: CNP \d+: rate ", n) for n in notes),
           "congestion: the capture notes what each CNP did to the rate")
    note_at = next((n for n, l in f if "[note: " in l), None)
    v["note_frame"] = str(note_at)
    cuts = [n for n in notes[4:] if "(cut)" in n]
    expect(cuts, "congestion: a note of a cut")
    v["notes"] = "\n".join(notes[:4] + ["..."] + cuts[:3])
    v["notes_count"] = str(len(notes))
    v["ladder"] = ladder(cap, "congestion", focus="cnp")
    # The same algorithm in virtual time (bench/cc_bench.cpp), four flows on 10 Gbit/s.
    table = ""
    if os.path.exists(CC_BENCH):
        setting = ["--k-kb", "32", "--kmax-kb", "128", "--pmax", "1", "--set", "rpg_time_reset=55", "--set",
                   "rpg_byte_reset=1048576", "--set", "dce_tcp_rtt=55", "--set", "rpg_min_rate=500"]
        r = subprocess.run([CC_BENCH, "--flows", "4", "--cc", "off,dcqcn", "--cnp-us", "4", *setting],
                           capture_output=True, text=True, timeout=60)
        table = "\n".join(l for l in r.stdout.splitlines() if l.startswith("|"))
        expect("| dcqcn |" in table, "congestion: cc_bench ran")
    v["cc_bench"] = table
    return v


MAKERS["congestion"] = congestion


def fill(name, values):
    src = open(os.path.join(ROOT, "docs", "learn", "src", name + ".md")).read()

    def sub(m):
        key = m.group(1)
        if key not in values:
            problems.append(f"{name}: template key {key} has no value")
            return m.group(0)
        return values[key]
    page = re.sub(r"\{\{(\w+)\}\}", sub, src)
    stamp = (f"<!-- Made by `scripts/learn.sh {name}` on {datetime.date.today()} from docs/learn/src/{name}.md: "
             f"edit that, not this. -->\n")
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(stamp + page)


def main():
    names = LESSONS if args.name == "all" else [args.name]
    for n in names:
        if n not in MAKERS:
            sys.exit(f"learn: no lesson '{n}' (one of: {', '.join(LESSONS)}, all)")
    for exe in (LESSON, DISSECT, LIB, DRILL, AGENT):
        if not os.path.exists(exe):
            sys.exit(f"learn: {exe} is missing: build first (meson compile -C {BUILD})")
    os.makedirs(args.out, exist_ok=True)
    for n in names:
        print(f"lesson {n}", flush=True)
        tmp = tempfile.mkdtemp(prefix="uroce-learn-")
        try:
            configs(tmp)
            values = MAKERS[n](tmp)
            fill(n, values)
        finally:
            cleanup()
            shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"learn: {len(problems)} thing(s) not as the lessons teach:", *problems, sep="\n  ")
        return 1 if args.check else 0
    print(f"learn: {len(names)} lesson(s) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
