"""What the Python test drivers share (tests/shim, tests/port, tests/stat, tests/ucx,
tests/rdmacm, scripts/learn.py): their child processes and what those leave behind, the
namespace pair, their output and their JSON result lines.

Every child runs in a process group of its own (start_new_session), so that stopping it stops
whatever it started too (uroce-run -> unshare -> the program; ip netns exec -> the program).
A driver keeps one `Children`, calls `stop_all()` from its cleanup, and its cleanup runs on
every exit: normal end, failure, SIGTERM from meson's timeout, Ctrl-C (`on_signals`).
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys


class Children:
    """The processes a driver started. grace: seconds between SIGTERM and SIGKILL in stop_all()
    (0: SIGKILL at once)."""

    def __init__(self, grace=0.0, echo=None):
        self.procs = []
        self.grace = grace
        self.echo = echo   # a function that prints each command line before it starts, or None

    def start(self, cmd, out=None, env=None):
        """Starts cmd with stdout and stderr to `out`: a file name (written anew), an open file,
        subprocess.PIPE, or None (the driver's own output)."""
        if self.echo:
            self.echo("+ " + " ".join(cmd))
        f = open(out, "w") if isinstance(out, str) else out
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.procs.append(p)
        return p

    def finish(self, p, timeout):
        """p's exit status, or "timeout" (then p's whole group is killed)."""
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p, signal.SIGKILL)
            p.wait()
            return "timeout"

    def stop_all(self):
        """Stops every child still running, with its process group, and forgets them all."""
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            kill_group(p, signal.SIGTERM if self.grace else signal.SIGKILL)
        for p in live:
            try:
                p.wait(timeout=self.grace or None)
            except subprocess.TimeoutExpired:
                kill_group(p, signal.SIGKILL)
                p.wait()
        self.procs.clear()


def kill_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def remove_stale_shim_runtime_dirs():
    """DPDK runtime directories of shim processes that are gone (a killed process leaves its own)."""
    for d in glob.glob("/var/run/dpdk/uroce-shim-*"):
        pid = d.rsplit("-", 1)[-1]
        if pid.isdigit() and not os.path.exists("/proc/" + pid):
            shutil.rmtree(d, ignore_errors=True)


def remove(path):
    if os.path.exists(path):
        os.unlink(path)


def on_signals(cleanup):
    """SIGTERM (meson's timeout) and SIGINT run `cleanup`, then exit with status 1."""
    def handler(signum, frame):
        cleanup()
        sys.exit(1)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def log(*a):
    """Print at once: meson and people read the drivers' output as it comes."""
    print(*a, flush=True)


def append_json(path, entry):
    """One JSON line per run to `path` (the --results file), if there is one."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Netns:
    """The namespace pair of scripts/netns-pair: up() when a scenario needs it, down() from the
    driver's cleanup (only if it is up, so a cleanup may call it any number of times)."""

    def __init__(self, script):
        self.script = script
        self.is_up = False

    def up(self):
        subprocess.run([self.script, "up"], check=True)
        self.is_up = True

    def down(self):
        if self.is_up:
            subprocess.run([self.script, "down"], check=False)
            self.is_up = False
