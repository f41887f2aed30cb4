#!/usr/bin/env python3
"""Renders the shim suite's results (BUILD/shim-results.jsonl) as the markdown table of docs/interop.md."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| # | tool | options | link | exit (client/server) | result line (client) |")
print("|---|---|---|---|---|---|")
for i, e in enumerate(rows, 1):
    res = e.get("result") or []
    if e["tool"].endswith("_bw") and len(res) > 3:   # -a sweeps: first, MTU crossing, last
        pick = [r for r in res if r.split()[0] in ("2", "4096", "8192", "8388608")]
        res = pick or res[-3:]
    line = "<br>".join("`" + " ".join(r.split()) + "`" for r in res) or "-"
    rc = "%s/%s" % (e.get("client_rc"), e.get("server_rc")) if e.get("server_rc", "") != "" else str(e.get("client_rc"))
    print("| %d | %s | `%s` | %s | %s %s | %s |" % (i, e["tool"], e["options"], e["link"], rc,
                                                  "ok" if e["ok"] else "**FAIL**", line))
