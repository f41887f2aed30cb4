#!/usr/bin/env python3
"""Prints the ninja targets the tests of some meson suites need, one per line, relative to the
build directory: each test's program when the build makes it, and the outputs of the targets it
depends on (`meson introspect --tests`: cmd[0] and depends; `--targets`: their files).

    scripts/suite-targets.py BUILD_DIR SUITE...

`ninja -C BUILD_DIR $(scripts/suite-targets.py BUILD_DIR SUITE...)` then builds exactly those,
and `meson test -C BUILD_DIR --no-rebuild --suite SUITE...` runs them (scripts/build.sh does the
first with UROCE_SUITES). A suite matches a test's suite "project:name" by name, as meson test's
--suite does. Exits 1 if no test is in the suites.
"""
import json
import os
import subprocess
import sys


def introspect(build, what):
    return json.loads(subprocess.run(["meson", "introspect", "--" + what, build], check=True,
                                     capture_output=True, text=True).stdout)


def in_suites(test, suites):
    for s in test.get("suite", []):
        project, _, name = s.rpartition(":")
        if name in suites or (project and project in suites):
            return True
    return False


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1].strip())
    build, suites = os.path.abspath(sys.argv[1]), set(sys.argv[2:])
    files = {t["id"]: t["filename"] for t in introspect(build, "targets")}
    tests = [t for t in introspect(build, "tests") if in_suites(t, suites)]
    if not tests:
        print(f"suite-targets: no test in suites {' '.join(sorted(suites))} in {build}", file=sys.stderr)
        return 1
    out = set()
    for t in tests:
        paths = [t["cmd"][0]] + [f for d in t.get("depends", []) for f in files.get(d, [])]
        for p in paths:
            rel = os.path.relpath(os.path.abspath(p), build)
            if not rel.startswith(".."):  # made by the build (not a script of the source tree)
                out.add(rel)
    print("\n".join(sorted(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
