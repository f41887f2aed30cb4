#!/usr/bin/env python3
"""uroce-drill's scenarios against a peer (meson suite `drill`, docs/drill.md).

--peer uroce: the agent runs through the verbs shim (scripts/uroce-run, memif client), the drill on
  the memif server end; every scenario of tools/drill/scenarios (or --only NAME ...).
--peer rxe: the rxe lab (../shared/rxe-lab) is brought up, the agent copied to its 9p share and
  started in the guest on rxe0, the drill runs in the lab's namespace on tap-rxe (af_packet); the
  lab is brought down at the end, whatever happened.
--broken: the scenarios of tests/drill/broken against uroce, each of which must fail, with the
  message the file's `# expect-error:` line gives (a script error, or a step that differs).

Each scenario's verdict is compared with the peer's record of known differences
(docs/conformance/PEER.explain: `NAME: why`): a scenario that differs and is not listed there fails
the test; one listed that now conforms is reported (the record is out of date) and fails too.
--report-dir DIR writes the reports (PEER.md, PEER.txt) there: docs/conformance/ is made so.
Every child runs under a time limit and is killed at the end, pass or fail.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.environ.get("RXE_LAB", os.path.join(ROOT, "..", "shared", "rxe-lab", "rxe-lab.sh"))
LAB_DIR = os.environ.get("RXE_LAB_DIR", "/var/tmp/rxe-lab")
AGENT_PORT = 18600

# The subset the test command runs against rxe (the whole library: `drill.py --peer rxe --all`,
# about 15 s of drill time in the emulated guest): a scenario or two of every chapter.
RXE_REPRESENTATIVE = [
    "psn/gap", "psn/duplicate-send", "psn/wrap", "psn/middle-missing",
    "ack/msn", "ack/implicit-by-read", "ack/nak-seq-retransmit", "ack/nak-rem-access", "ack/future-ack",
    "rnr/timer-14", "rnr/requester-retries",
    "send/write-imm", "read/split", "read/reread-middle", "read/past-range", "read/requester-lost-middle",
    "atomic/fetch-add", "atomic/duplicate-replay", "error/send-too-long", "error/bad-icrc", "error/qp-in-error",
    "mtu/pad", "mtu/payload-over-mtu", "pkey/wrong-pkey", "ecn/ce-cnp", "uc/gap-drops-message", "ud/send",
]


def explained(peer):
    path = os.path.join(ROOT, "docs", "conformance", f"{peer}.explain")
    out = {}
    if os.path.exists(path):
        for line in open(path):
            if line.strip() and not line.startswith("#") and ": " in line:
                name, why = line.split(": ", 1)
                out[name.strip()] = why.strip()
    return path, out


def verdicts(text_report):
    """NAME -> verdict from the text report (uroce-drill --report)."""
    out = {}
    for line in open(text_report):
        m = re.match(r"^(conforms|differs|not applicable)\s+(\S+)\s", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def kill_group(p):
    if p and p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_drill(cmd, timeout):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, _ = p.communicate()
        out += f"\n(drill.py: uroce-drill killed after {timeout} s)\n"
    print(out, flush=True)
    return p.returncode, out


def uroce_agent(build):
    """The agent through the verbs shim, on the memif client end."""
    log = open(os.path.join(build, "drill-agent-uroce.log"), "w")
    return subprocess.Popen(
        [os.path.join(ROOT, "scripts", "uroce-run"), "--config", os.path.join(ROOT, "config", "memif-client.conf"),
         "--", os.path.join(build, "tools", "drill", "uroce-drill-agent"), "-l", "127.0.0.1", "-p", str(AGENT_PORT),
         "--once"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env=dict(os.environ, UROCE_VERBS_LIB=os.path.join(os.path.abspath(build), "verbs_shim", "liburoce-verbs.so")))


def judge(peer, report, names):
    path, known = explained(peer)
    got = verdicts(report)
    bad = []
    for n in names:
        v = got.get(n)
        if v is None:
            bad.append(f"{n}: no verdict (the run stopped early?)")
        elif v == "differs" and n not in known:
            bad.append(f"{n}: differs, and {path} does not explain it")
        elif v == "conforms" and n in known:
            bad.append(f"{n}: conforms now; {path} still explains a difference")
    counts = {k: sum(1 for n in names if got.get(n) == k) for k in ("conforms", "differs", "not applicable")}
    print(f"drill.py {peer}: {len(names)} scenarios: {counts['conforms']} conform, {counts['differs']} differ "
          f"(each explained in {os.path.relpath(path, ROOT)}), {counts['not applicable']} not applicable", flush=True)
    for b in bad:
        print("drill.py FAIL:", b, flush=True)
    return not bad


def all_names(drill):
    out = subprocess.run([drill, "--list"], capture_output=True, text=True, timeout=60).stdout
    return [l.split()[0] for l in out.splitlines() if l.startswith("  ") and "/" in l.split()[0]]


def peer_uroce(args, drill, names):
    report = os.path.join(args.build, "drill-uroce.txt")
    agent = uroce_agent(args.build)
    try:
        cmd = [drill, "--config", os.path.join(ROOT, "config", "memif-server.conf"), "--agent",
               f"127.0.0.1:{AGENT_PORT}", "--peer", "uroce (its verbs shim over memif)", "--report", report,
               "--capture-dir", os.path.join(args.build, "drill-captures-uroce")]
        if args.report_dir:
            cmd += ["--markdown", os.path.join(args.report_dir, "uroce.md"),
                    "--explain", explained("uroce")[0]]
            report = os.path.join(args.report_dir, "uroce.txt")
            cmd[cmd.index("--report") + 1] = report
        rc, _ = run_drill(cmd + names, 600)
    finally:
        kill_group(agent)
    if rc not in (0, 1) or not os.path.exists(report):
        with open(os.path.join(args.build, "drill-agent-uroce.log"), errors="replace") as f:
            print("drill.py: the agent's last lines:\n" + "".join(f.readlines()[-20:]), flush=True)
        return False
    return judge("uroce", report, names)


def peer_rxe(args, drill, names):
    report = os.path.join(args.build, "drill-rxe.txt")
    agent = None
    try:
        if subprocess.run(["bash", LAB, "up"], timeout=600).returncode != 0:
            print("drill.py FAIL: the rxe lab did not come up", flush=True)
            return False
        share = os.path.join(LAB_DIR, "share")
        shutil.copy(os.path.join(args.build, "tools", "drill", "uroce-drill-agent"), share)
        agent = subprocess.Popen(["env", "RXE_GUEST_TIMEOUT=900", "bash", LAB, "guest",
                                  f"/lab/uroce-drill-agent -l 198.18.0.2 -p {AGENT_PORT} --once"],
                                 stdout=open(os.path.join(args.build, "drill-agent-rxe.log"), "w"),
                                 stderr=subprocess.STDOUT, start_new_session=True)
        cmd = ["ip", "netns", "exec", "roce-lab", drill, "--config", os.path.join(ROOT, "config", "rxe-lab.conf"),
               "--agent", f"198.18.0.2:{AGENT_PORT}", "--agent-dev", "rxe0", "--agent-gid", "1",
               "--time-scale", "4", "--peer", "rxe (Linux 6.1 rdma_rxe)", "--report", report,
               "--capture-dir", os.path.join(args.build, "drill-captures-rxe")]
        if args.report_dir:
            cmd += ["--markdown", os.path.join(args.report_dir, "rxe.md"), "--explain", explained("rxe")[0]]
            report = os.path.join(args.report_dir, "rxe.txt")
            cmd[cmd.index("--report") + 1] = report
        rc, _ = run_drill(cmd + names, 900)
        return rc in (0, 1) and judge("rxe", report, names)
    finally:
        kill_group(agent)
        if not args.keep_up:
            subprocess.run(["bash", LAB, "down"], timeout=120)


def broken(args, drill):
    """Each scenario of tests/drill/broken fails, with the message its '# expect-error:' line says."""
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "drill", "broken", "*.drill")))
    ok = True
    agent = uroce_agent(args.build)
    try:
        for f in files:
            want = [l.split(":", 1)[1].strip() for l in open(f) if l.startswith("# expect-error:")]
            rc, out = run_drill([drill, "--config", os.path.join(ROOT, "config", "memif-server.conf"), "--agent",
                                 f"127.0.0.1:{AGENT_PORT}", "--peer", "uroce", "--capture-dir", "none", f], 120)
            good = rc != 0 and want and all(w in out for w in want)
            print(f"drill.py broken {os.path.basename(f)}: exit {rc}, "
                  f"{'the message names' if good else 'FAIL: the output lacks'} {want}", flush=True)
            ok &= bool(good)
            if "script error" in open(f).read():
                continue
            # A run that connected: the agent (--once) is gone with it; start another.
            kill_group(agent)
            agent = uroce_agent(args.build)
    finally:
        kill_group(agent)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--peer", choices=["uroce", "rxe"])
    ap.add_argument("--all", action="store_true", help="rxe: every scenario, not RXE_REPRESENTATIVE")
    ap.add_argument("--only", nargs="*", default=[], help="these scenarios only")
    ap.add_argument("--broken", action="store_true")
    ap.add_argument("--report-dir")
    ap.add_argument("--keep-up", action="store_true")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    drill = os.path.join(args.build, "tools", "drill", "uroce-drill")
    ok = True
    if args.peer:
        names = args.only or (all_names(drill) if args.peer == "uroce" or args.all else RXE_REPRESENTATIVE)
        ok &= (peer_uroce if args.peer == "uroce" else peer_rxe)(args, drill, names)
    if args.broken:
        ok &= broken(args, drill)
    print("drill.py:", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
