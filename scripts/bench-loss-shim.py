#!/usr/bin/env python3
"""Goodput under loss through the verbs shim: unmodified perftest on uroce over memif, with the
port's fault injection dropping frames at random in both directions of both ends
(UROCE_FAULT_DROP), in go-back-N mode and with selective repeat on both ends
(`selective_repeat = on` in copies of the memif configs). The end-to-end companion of
scripts/bench-loss.sh (the FakeLink in virtual time): these figures are in real time on this
machine, so compare the ratios to the clean run of the same mode within one run.

usage: scripts/bench-loss-shim.py [--build DIR] [--seconds S] [--losses 0,0.001,0.01,0.03]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import driver  # noqa: E402

ap = argparse.ArgumentParser(usage=__doc__.split("usage: ")[1])
ap.add_argument("--build", default=os.path.join(ROOT, "build"))
ap.add_argument("--seconds", type=int, default=4)
ap.add_argument("--losses", default="0,0.001,0.01,0.03")
args = ap.parse_args()
RUN = os.path.join(ROOT, "scripts", "uroce-run")
LIB = os.path.join(os.path.abspath(args.build), "verbs_shim", "liburoce-verbs.so")
SOCK = "@/tmp/uroce-memif.sock"
children = driver.Children()


def cleanup():
    children.stop_all()
    driver.remove_stale_shim_runtime_dirs()


driver.on_signals(cleanup)

WORKLOADS = [("WRITE 64 KiB", "ib_write_bw", ["-s", "65536"], "MB/s"),
             ("SEND 4 KiB", "ib_send_bw", ["-s", "4096"], "MB/s"),
             ("FETCH_ADD 8 B", "ib_atomic_bw", ["-A", "FETCH_AND_ADD"], "Mpps")]


def configs(tmp, sr):
    out = []
    for side in ("server", "client"):
        text = open(os.path.join(ROOT, "config", f"memif-{side}.conf")).read()
        path = os.path.join(tmp, f"{side}-{'sr' if sr else 'gbn'}.conf")
        with open(path, "w") as f:
            f.write(text + f"\nselective_repeat = {'on' if sr else 'off'}\n")
        out.append(path)
    return out


def run(tool, opts, sconf, cconf, loss, port):
    env = dict(os.environ, UROCE_VERBS_LIB=LIB, UROCE_FAULT_DROP=str(loss), UROCE_FAULT_SEED="7")
    common = ["-p", str(port), "-D", str(args.seconds), "-F", "-x", "1"] + opts
    s = children.start([RUN, "--config", sconf, "--", "taskset", "-c", "0", tool, "-d", "uroce-memif-s"] + common,
                       subprocess.PIPE, env)
    t0 = time.time()
    while SOCK not in open("/proc/net/unix").read() and time.time() - t0 < 20 and s.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    c = subprocess.run([RUN, "--config", cconf, "--", "taskset", "-c", "1", tool, "-d", "uroce-memif-c"] + common +
                       ["127.0.0.1"], capture_output=True, text=True, env=env, timeout=args.seconds + 60)
    children.finish(s, 20)
    cleanup()
    m = re.search(r"^\s*\d+\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", c.stdout, re.M)
    if c.returncode != 0 or not m:
        return None
    return float(m.group(2)), float(m.group(3))   # BW average MB/s, MsgRate Mpps


def main():
    losses = [float(x) for x in args.losses.split(",")]
    rows = []
    port = 19700
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name, tool, opts, unit in WORKLOADS:
                for sr in (False, True):
                    sconf, cconf = configs(tmp, sr)
                    clean = None
                    for loss in losses:
                        port += 1
                        r = run(tool, opts, sconf, cconf, loss, port)
                        v = None if r is None else (r[0] if unit == "MB/s" else r[1])
                        if loss == 0:
                            clean = v
                        rows.append((name, "selective repeat" if sr else "go-back-N", loss, v, unit,
                                     (v / clean) if v is not None and clean else None))
                        print(f"  {name} {'sr ' if sr else 'gbn'} loss {loss:.3f}: {v} {unit}", file=sys.stderr,
                              flush=True)
        finally:
            cleanup()
    print(f"perftest through the shim on memif, -D {args.seconds}, drop at random in both directions of both ends")
    print("| workload | mode | loss | goodput | of clean |")
    print("|---|---|---:|---:|---:|")
    for name, mode, loss, v, unit, ratio in rows:
        vs = "failed" if v is None else f"{v:.3f} {unit}" if unit == "Mpps" else f"{v:.1f} {unit}"
        rs = "" if ratio is None else f"{ratio:.3f}"
        print(f"| {name} | {mode} | {loss * 100:g}% | {vs} | {rs} |")
    return 0


sys.exit(main())
