"""What the Python test drivers share (tests/shim, tests/port, tests/stat, tests/ucx,
tests/rdmacm, tests/dissect, scripts/learn.py): their command line and paths (`Suite`), their
child processes and what those leave behind, the namespace pair, their output and their JSON
result lines.

Every child runs in a process group of its own (start_new_session), so that stopping it stops
whatever it started too (uroce-run -> unshare -> the program; ip netns exec -> the program).
A driver keeps one `Children`, calls `stop_all()` from its cleanup, and its cleanup runs on
every exit: normal end, failure, SIGTERM from meson's timeout, Ctrl-C (`on_signals`).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time


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


failures = []   # what check() found wrong, in order


def check(cond, what):
    """Records `what` as a failure (and prints it) unless cond holds; returns cond."""
    if not cond:
        failures.append(what)
        log("FAIL:", what)
    return cond


def sh(cmd, check_rc=True):
    """A shell command's output; RuntimeError with its stderr if it fails (unless not check_rc)."""
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr.strip()}")
    return r.stdout


class Hugepages:
    """2 MB hugepages for uroced daemons (256 more, about 2 x 128 MB), and a hugetlbfs mount every
    namespace sees (a daemon started under `ip netns exec` would mount one only its own mount
    namespace sees); down() gives them back and removes the files of the daemons named
    uroced-PREFIX* (their hugepage files and DPDK runtime folders)."""
    NR = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

    def __init__(self, prefixes):
        self.prefixes = prefixes
        self.pages = None
        self.mounted = False

    def up(self, more=256):
        with open(self.NR) as f:
            self.pages = int(f.read())
        with open(self.NR, "w") as f:
            f.write(str(self.pages + more))
        if "hugetlbfs" not in open("/proc/mounts").read():
            os.makedirs("/dev/hugepages", exist_ok=True)
            subprocess.run(["mount", "-t", "hugetlbfs", "nodev", "/dev/hugepages"], check=True, capture_output=True)
            self.mounted = True

    def down(self):
        for p in self.prefixes:
            for f in glob.glob(f"/dev/hugepages/uroced-{p}*"):
                remove(f)
            for d in glob.glob(f"/var/run/dpdk/uroced-{p}*"):
                shutil.rmtree(d, ignore_errors=True)
        if self.mounted:
            subprocess.run(["umount", "/dev/hugepages"], capture_output=True)
            self.mounted = False
        if self.pages is not None:
            with open(self.NR, "w") as f:
                f.write(str(self.pages))
            self.pages = None


def netns_down(names):
    """Deletes the network namespaces `names` (those that exist)."""
    for n in names:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def keep_logs_if_failed(tmp):
    """Removes the driver's log directory `tmp`, or says where it is kept when a check failed."""
    if not failures:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        log(f"logs kept in {tmp}")


def run_scenario(scenarios, name, cleanup):
    """Runs scenarios[name], then cleanup() whatever happens; exits 1 with the list of what
    check() found wrong, or prints "all passed"."""
    try:
        scenarios[name]()
    finally:
        cleanup()
    if failures:
        log("%d failure(s): %s" % (len(failures), "; ".join(failures)))
        sys.exit(1)
    log("all passed")


def wait_listening(link, port, server, t):
    """True once TCP `port` is listened on (in namespace uroce-b for link veth), False if
    `server` exits first or t seconds pass."""
    t0 = time.time()
    pre = NSB if link == "veth" else []
    while time.time() - t0 < t:
        out = subprocess.run(pre + ["ss", "-ltnH"], capture_output=True, text=True).stdout
        if re.search(r":%d\b" % port, out):
            return True
        if server.poll() is not None:
            return False
        time.sleep(0.05)
    return False


SOCK = "/tmp/uroce-memif.sock"   # the memif socket of config/memif-*.conf
NSA = ["ip", "netns", "exec", "uroce-a"]   # a command prefix: run in namespace uroce-a
NSB = ["ip", "netns", "exec", "uroce-b"]


def exit_on_signals():
    """SIGTERM (meson's timeout) and SIGINT raise SystemExit, so that the driver's `finally`
    runs its cleanup (the drivers that call their cleanup themselves)."""
    def handler(signum, frame):
        raise SystemExit(f"terminated by signal {signum}")
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class Suite:
    """The prologue of a suite driver that runs uroce programs from a source tree.

    The command line: --root REPO (required), --lib (liburoce-verbs.so; required unless
    lib_required is False), --results FILE (one JSON line per run, if `results`), SCENARIO (one
    of `scenarios`, if given), then the driver's own `options`: (flags, argparse keywords) pairs.
    Then the paths below --root (run: scripts/uroce-run, config(NAME): config/NAME), the
    driver's `children` (grace, echo: as Children), the namespace pair `netns` and cleanup():
    every child stopped, the memif socket removed (if remove_sock), the DPDK runtime directories
    of dead shim processes removed, the namespaces down. With `signals`, SIGTERM and SIGINT run
    cleanup() and exit (on_signals)."""

    def __init__(self, options=(), lib_required=True, results=True, scenarios=None, grace=0.0, echo=None,
                 remove_sock=False, signals=True):
        ap = argparse.ArgumentParser()
        ap.add_argument("--root", required=True)
        ap.add_argument("--lib", required=lib_required, default="")
        if results:
            ap.add_argument("--results", default="")
        ap.add_argument("scenario", choices=scenarios)
        for flags, kw in options:
            ap.add_argument(*flags, **kw)
        self.args = ap.parse_args()
        self.root = self.args.root
        self.run = os.path.join(self.root, "scripts", "uroce-run")
        self.children = Children(grace, echo)
        self.netns = Netns(os.path.join(self.root, "scripts", "netns-pair"))
        self.remove_sock = remove_sock
        if signals:
            on_signals(self.cleanup)

    def config(self, name):
        return os.path.join(self.root, "config", name)

    def cleanup(self):
        self.children.stop_all()
        if self.remove_sock:
            remove(SOCK)
        remove_stale_shim_runtime_dirs()
        self.netns.down()

    def record(self, entry):
        append_json(getattr(self.args, "results", ""), entry)
