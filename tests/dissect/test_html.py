#!/usr/bin/env python3
"""Browser test of uroce-dissect --html (tools/dissect/page.html), run by meson (suite proto).

usage: test_html.py UROCE_DISSECT GOLDEN_DIR WORK_DIR MAKE_LOSSY_CAPTURE [SCREENSHOT_DIR]

Needs Chromium, its chromedriver and Selenium (Debian 12: chromium chromium-driver
python3-selenium, in scripts/install-deps.sh); without them it says so and exits 77 (skipped).

1. A page for every golden capture (GOLDEN_DIR/**/*.pcap*), for the lossy capture of
   MAKE_LOSSY_CAPTURE, for that capture without the frames its fault stage dropped (as a capture
   after the loss would be: "not seen" rows) and for a capture of about 50,000 frames made here;
   each page is self-contained (no http(s) src/href, no external script, style or font).
2. Each page in headless Chromium from a file:// address: it gets ready (bounded wait), loads
   nothing from anywhere, logs no error, has as many frames as the line view has RoCE frames;
   frame by frame (every frame of a small capture, the first 30 and a sample of a large one;
   ArrowDown for some, clicks on the ladder's rows for others) the selected frame's line is the
   line view's and its field rows are the --bytes lines under it; the pointer over a field
   lights exactly its bytes in the hex dump, over a byte its field.
3. The lossy captures: n / p go to the next / previous event, a band unfolds on a click (and on
   Enter) and folds again, the "not seen" rows are there, a NAK shows its link and jumps to the
   resend, #focus=loss and #f<N> select the frame they name, the filters hide what they should.
4. 50,000 frames: ready within the bounded wait, a few hundred row elements at most, the last
   frame can be jumped to (and the first event found with n).
5. The pages kept in docs/ (the lessons' docs/learn/html and the reference captures'
   docs/captures/html): each self-contained, ready, its frames in its script, the story's first
   frame selected, n finds an event where the page has one, nothing loaded from elsewhere, no
   error logged. (Their captures are not kept: the dissector's pages of the captures above are
   the ones checked field by field.)
6. With SCREENSHOT_DIR: go-back-n.png (the capture after the loss at #focus=loss) and
   write-small.png (rxe/write_small.pcap), at 1600x1000.

No timing is asserted. The browser (chromedriver's whole process group) is killed at the end
whatever happens.
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
import driver  # noqa: E402  (tests/support/driver.py)
import test_dissect as td  # noqa: E402  (read_pcap, write_pcap, roce_icrc)

FAILURES, check, log = driver.failures, driver.check, driver.log

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
READY_WAIT = 30       # seconds a page may take to get ready
DOCS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs"))
SMALL = 70            # captures up to this many frames are clicked through whole
FIRST, SAMPLE = 30, 12
# The test command clicks through every fourth golden page (and write_small) as above and, on
# the others, FIRST_LIGHT frames and a sample of SAMPLE_LIGHT (each page is still loaded, counted
# and checked for errors): 1,046 frames in 72 s -> 488 in 41 s. UROCE_HTML_GOLDEN=all: every page
# whole (the separate command in docs/dissect.md).
FIRST_LIGHT, SAMPLE_LIGHT = 4, 2
FULL_EVERY = 4


def import_selenium():
    """Selenium, from the Debian package if this python does not have it (a pyenv python)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        return webdriver, Service, ActionChains, By, Keys
    except ImportError:
        return None


# ---- the dissector's own output -------------------------------------------------------------

FRAME_LINE = re.compile(r"^ *(\d+) +\d+\.\d{6}  ")
FIELD_LINE = re.compile(r"^  [0-9a-f]{4}  ")


def run(exe, *args, timeout=120):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout.splitlines(), p.stderr


def line_view(exe, path):
    """{frame number: line}, and the summary tuple of the last line."""
    _, out, _ = run(exe, path)
    lines = {int(m.group(1)): l for l in out for m in [FRAME_LINE.match(l)] if m}
    return lines, td.summary(out)


def bytes_view(exe, path):
    """{frame number: [the --bytes lines under its line]}."""
    _, out, _ = run(exe, "--bytes", path)
    res, cur = {}, None
    for l in out:
        m = FRAME_LINE.match(l)
        if m:
            cur = res.setdefault(int(m.group(1)), [])
        elif cur is not None and FIELD_LINE.match(l):
            cur.append(l)
        else:
            cur = None
    return res


def collapse(s):
    return " ".join(s.split())


def page_data(html):
    m = re.search(r'<script id="uroce-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1)) if m else None


def story_order(data):
    """Frame indexes top to bottom, bands unfolded (the order of next / previous frame)."""
    order = []
    for r in data["rows"]:
        if r["k"] == "f":
            order.append(r["i"])
        elif r["k"] == "band":
            order.extend(range(r["from"], r["to"] + 1))
    seen = set(order)
    return order + [i for i in range(len(data["frames"])) if i not in seen]


# ---- captures made here ---------------------------------------------------------------------

def make_big(golden, path, pairs=25000, gap_every=5000):
    """About 50,000 frames: rxe/write_small's WRITE and its ACK again and again, PSN and MSN
    counting up (fresh ICRCs); every gap_every-th WRITE left out, so that the page has PSNs not
    seen, events and several bands."""
    ws = td.read_pcap(os.path.join(golden, "rxe/write_small.pcap"))
    w, a = ws[0], ws[1]
    out = []
    for k in range(pairs):
        for tpl, msn in ((w, None), (a, k + 1)):
            if msn is None and k % gap_every == gap_every // 2:
                continue
            f = bytearray(tpl)
            f[51:54] = ((256 + k) & 0xFFFFFF).to_bytes(3, "big")
            if msn is not None:
                f[55:58] = msn.to_bytes(3, "big")
            f[-4:] = td.roce_icrc(bytes(f))
            out.append(bytes(f))
    td.write_pcap(path, out)
    return len(out)


def write_page(exe, capture, out_html):
    """uroce-dissect --html; the page's text, or None."""
    if os.path.exists(out_html):
        os.remove(out_html)
    rc, out, err = run(exe, "--html", out_html, capture)
    if not check(rc in (0, 1) and os.path.exists(out_html), "--html %s: rc %d %s" % (capture, rc, err.strip()[:300])):
        return None
    with open(out_html, encoding="utf-8") as f:
        return f.read()


EXTERNAL = [
    (re.compile(r"""\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", re.I), "an http(s) src/href"),
    (re.compile(r"<script\b[^>]*\bsrc\s*=", re.I), "a script with src"),
    (re.compile(r"<link\b", re.I), "a <link>"),
    (re.compile(r"@import|url\(\s*[\"']?\s*(?:https?:)?//", re.I), "a CSS import or remote url()"),
    (re.compile(r"@@(?:TITLE|DATA)@@"), "a placeholder left"),
]


def self_contained(name, html):
    bad = [what for rx, what in EXTERNAL if rx.search(html)]
    check(not bad, "%s: not self-contained: %s" % (name, ", ".join(bad)))
    data = page_data(html)
    check(data is not None and data.get("version") == 1, "%s: no uroce-data JSON" % name)
    return data


# ---- the browser ----------------------------------------------------------------------------

class Browser:
    def __init__(self, sel):
        self.webdriver, self.Service, self.ActionChains, self.By, self.Keys = sel
        self.profile = tempfile.mkdtemp(prefix="uroce-chromium-")
        o = self.webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--user-data-dir=" + self.profile, "--window-size=1600,1000"):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # chromedriver in a process group of its own: kill() stops it and the browser it started.
        self.service = self.Service(CHROMEDRIVER, popen_kw={"start_new_session": True})
        self.d = None
        self.options = o
        self.last = None

    def start(self):
        self.d = self.webdriver.Chrome(service=self.service, options=self.options)
        self.d.set_page_load_timeout(90)
        self.d.set_script_timeout(30)
        self.d.set_window_size(1600, 1000)

    def kill(self):
        try:
            if self.d:
                self.d.quit()
        except Exception as e:  # noqa: BLE001  (a dead browser: killed below)
            log("browser quit: %s" % e)
        p = getattr(self.service, "process", None)
        if p is not None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=5)
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def load(self, path, hash_=""):
        """Loads the page; True once window.uroce.ready (within READY_WAIT)."""
        if self.last == path:      # the same page again (another #hash): load it afresh
            self.d.get("about:blank")
        self.last = path
        self.d.get("file://" + os.path.abspath(path) + hash_)
        t0 = time.time()
        while time.time() - t0 < READY_WAIT:
            if self.js("return !!(window.uroce && window.uroce.ready)"):
                return True
            time.sleep(0.05)
        return False

    def errors(self):
        return [e["message"] for e in self.d.get_log("browser") if e.get("level") == "SEVERE"]

    def key(self, k):
        """A key to the page, typed with the focus where it is (the body, unless a click put it
        on a button or a band)."""
        self.actions().send_keys(k).perform()

    def body_key(self, k):
        """A key sent to the body element."""
        self.d.find_element(self.By.TAG_NAME, "body").send_keys(k)

    def actions(self):
        return self.ActionChains(self.d, duration=0)   # no 250 ms pointer moves

    def selected(self):
        return self.js("return window.uroce.selected()")

    def hover(self, el):
        self.js("arguments[0].scrollIntoView({block: 'center'})", el)
        self.actions().move_to_element(el).perform()


# What the detail pane shows: [selected frame, #detail-line's text, the field rows, rows in the DOM].
SNAP_FN = """
function uroceSnapshot() {
  var rows = Array.from(document.querySelectorAll('#fields tr.field')).map(function (tr) {
    function c(k) { var e = tr.querySelector('td.' + k); return e ? e.textContent : ''; }
    return [+tr.getAttribute('data-o'), +tr.getAttribute('data-n'), c('off'), c('hdr'), c('hoff'), c('bytes'), c('text')];
  });
  var line = document.getElementById('detail-line');
  return [window.uroce.selected(), line ? line.textContent : null, rows, window.uroce.rowsRendered()];
}
"""
SNAPSHOT = SNAP_FN + "return uroceSnapshot();"
# A keydown listener registered after the page's own: it records what each key selected, so
# that several keys can go in one action and be checked after.
RECORDER = SNAP_FN + """
if (!window.uroceRec) {
  window.uroceRec = [];
  document.addEventListener('keydown', function () { window.uroceRec.push(uroceSnapshot()); });
}
window.uroceRec.length = 0;
"""

HIGHLIGHTS = """
var lit = Array.from(document.querySelectorAll('#hexdump span.b.hl')).map(function (e) { return +e.getAttribute('data-off'); });
var all = Array.from(document.querySelectorAll('#hexdump span.b')).map(function (e) { return +e.getAttribute('data-off'); });
var trs = Array.from(document.querySelectorAll('#fields tr.field.hl')).map(function (e) { return +e.getAttribute('data-k'); });
return [lit.sort(function (a, b) { return a - b; }), all, trs];
"""

ROW_IN_VIEW = """
var g = document.querySelector('#layer .row-frame[data-frame="' + arguments[0] + '"]');
if (!g) return false;
var r = g.getBoundingClientRect(), s = document.getElementById('ladder').getBoundingClientRect();
var h = document.getElementById('heads').getBoundingClientRect();
return r.top >= h.bottom - 1 && r.bottom <= s.bottom - 16;
"""

HEX_BYTES = re.compile(r"^(?:[0-9a-f]{2} )*[0-9a-f]{2}$")


def check_frame(b, name, n, lines, blines, stats, snap=None):
    """The selected frame is n, its line and field rows are the dissector's (snap: a snapshot
    taken already, else one is taken now)."""
    sel, line, rows, rendered = snap or b.js(SNAPSHOT)
    if not check(sel == n, "%s: selected %s, want frame %d" % (name, sel, n)):
        return None
    check(line == lines.get(n), "%s frame %d: #detail-line\n  %r\n  want %r" % (name, n, line, lines.get(n)))
    want = blines.get(n, [])
    if not check(len(rows) == len(want), "%s frame %d: %d field rows, --bytes prints %d lines" % (
            name, n, len(rows), len(want))):
        return rows
    for row, printed in zip(rows, want):
        o, cnt, off, hdr, hoff, byts, text = row
        L = collapse(printed)
        ok = L.split()[0] == off and int(off, 16) == o
        if hdr:
            ok = ok and (" " + hdr + " ") in (" " + L + " ")
        if hoff:
            ok = ok and (" " + hoff + " ") in (" " + L + " ")
        if HEX_BYTES.match(byts):
            ok = ok and (" " + byts + " ") in (" " + L + " ")
        if collapse(text):
            ok = ok and L.endswith(" " + collapse(text))
        if not check(ok, "%s frame %d: field row %r does not match the --bytes line %r" % (name, n, row, printed)):
            break
    check(rendered < 400, "%s: %d rows in the DOM" % (name, rendered))
    stats["frames"] += 1
    return rows


def check_hover(b, name, n, rows, pick, byte_too=False, stats=None):
    """The pointer over field row `pick` lights exactly its embedded bytes; with byte_too, over
    its first byte, that field (the first whose bytes hold it)."""
    By = b.By
    with_bytes = [k for k, r in enumerate(rows) if r[1] > 0]
    if not with_bytes:
        return
    k = with_bytes[pick % len(with_bytes)]
    o, cnt = rows[k][0], rows[k][1]
    tr = b.d.find_elements(By.CSS_SELECTOR, '#fields tr.field[data-k="%d"] td.off' % k)
    if not check(tr, "%s frame %d: field row %d not found" % (name, n, k)):
        return
    b.hover(tr[0])
    if stats is not None:
        stats["hovers"] += 1
    lit, all_, trs = b.js(HIGHLIGHTS)
    want = sorted(x for x in all_ if o <= x < o + cnt)
    check(lit == want and trs == [k], "%s frame %d: hover on field %d [%d, %d): bytes lit %s, rows lit %s" % (
        name, n, k, o, o + cnt, lit[:20], trs))
    span = b.d.find_elements(By.CSS_SELECTOR, '#hexdump span.b[data-off="%d"]' % o) if byte_too else None
    if span:
        b.hover(span[0])
        lit, all_, trs = b.js(HIGHLIGHTS)
        first = next(j for j, r in enumerate(rows) if r[1] > 0 and r[0] <= o < r[0] + r[1])
        fo, fn = rows[first][0], rows[first][1]
        check(trs == [first] and lit == sorted(x for x in all_ if fo <= x < fo + fn),
              "%s frame %d: hover on byte %d: rows lit %s (want [%d]), bytes %s" % (name, n, o, trs, first, lit[:20]))


ROW_TO_CLICK = """
var g = document.querySelector('#layer .row-frame[data-frame="' + arguments[0] + '"]');
if (!g) return null;
var r = g.getBoundingClientRect(), s = document.getElementById('ladder').getBoundingClientRect();
var h = document.getElementById('heads').getBoundingClientRect();
return r.top >= h.bottom - 1 && r.bottom <= s.bottom - 16 ? g.querySelector('text') : null;
"""
RUN = 8   # frames per keyboard run (one action, checked after from the recorder)


def click_through(b, name, data, lines, blines, stats, all_frames, light=False):
    """From the first frame on, in runs: the first frame of a run by a click on its row (if in
    view; else ArrowDown sent to the body), the others by ArrowDown (one action for the run,
    each key's result recorded in the page and checked after); the pointer over a field of the
    run's last frame. Every frame when all_frames, else the first FIRST and a sample (selected
    with window.uroce.select)."""
    F = data["frames"]
    order = story_order(data)
    first, sample = (FIRST_LIGHT, SAMPLE_LIGHT) if light else (FIRST, SAMPLE)
    steps = min(first, len(order)) if light else len(order) if all_frames else min(FIRST, len(order))
    clicks = keys = 0
    rows = check_frame(b, name, F[order[0]]["n"], lines, blines, stats)
    if rows is None:
        return
    check_hover(b, name, F[order[0]]["n"], rows, 0, byte_too=True, stats=stats)
    s = 1
    while s < steps:
        n = F[order[s]]["n"]
        el = b.js(ROW_TO_CLICK, n)
        if el is not None:
            el.click()
            clicks += 1
        else:
            b.body_key(b.Keys.ARROW_DOWN)
            keys += 1
        if check_frame(b, name, n, lines, blines, stats) is None:
            return
        s += 1
        run = order[s:min(s + RUN, steps)]
        if not run:
            break
        b.js(RECORDER)
        b.key(b.Keys.ARROW_DOWN * len(run))
        keys += len(run)
        snaps = b.js("return window.uroceRec")
        if not check(len(snaps) == len(run), "%s: %d keys recorded, %d sent" % (name, len(snaps), len(run))):
            return
        for i, snap in zip(run, snaps):
            rows = check_frame(b, name, F[i]["n"], lines, blines, stats, snap)
            if rows is None:
                return
        check_hover(b, name, F[run[-1]]["n"], rows, s, stats=stats)
        s += len(run)
    if steps >= RUN + 2:
        check(clicks > 0 and keys > 0, "%s: %d clicks and %d keys, want some of each" % (name, clicks, keys))
    if light or not all_frames:
        rnd = random.Random(len(F))
        for i in sorted(rnd.sample(range(len(F)), min(sample, len(F)))) + [len(F) - 1]:
            n = F[i]["n"]
            b.js("window.uroce.select(arguments[0])", n)
            check(b.js(ROW_IN_VIEW, n), "%s: frame %d selected but its row is not in view" % (name, n))
            rows = check_frame(b, name, n, lines, blines, stats)
            if rows and i % 3 == 0:
                check_hover(b, name, n, rows, i, stats=stats)


def check_page(b, name, path, data, capture, exe, stats, all_frames=None, light=False):
    """Loads the page and clicks through it."""
    if not check(b.load(path), "%s: not ready within %d s" % (name, READY_WAIT)):
        return False
    lines, summ = line_view(exe, capture)
    blines = bytes_view(exe, capture)
    F = data["frames"]
    nframes = b.js("return window.uroce.frames ? window.uroce.frames() : null")
    check(len(F) == len(lines) and [f["n"] for f in F] == sorted(lines) and summ and summ[1] == len(F)
          and nframes in (None, len(F)),
          "%s: %d frames in the page (%s in its script), the line view has %d (summary %s)" % (
              name, len(F), nframes, len(lines), summ))
    if F:
        first = F[story_order(data)[0]]["n"]
        check(b.selected() == first, "%s: at load frame %s is selected, want %d" % (name, b.selected(), first))
        click_through(b, name, data, lines, blines, stats, len(F) <= SMALL if all_frames is None else all_frames,
                      light)
    res = b.js("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    check(all(r.startswith(("file:", "data:", "blob:", "about:")) for r in res), "%s: loaded %s" % (name, res[:5]))
    errs = b.errors()
    check(not errs, "%s: browser errors: %s" % (name, errs[:3]))
    return True


# ---- the story: events, bands, "not seen", links, focus, filters ------------------------------

def story_checks(b, name, path, data, want_lost):
    By, F = b.By, data["frames"]
    order = story_order(data)
    b.load(path)
    # n / p: next and previous event.
    events = [i for i in order if F[i]["ev"]]
    if check(events, "%s: no frame with an event" % name):
        start = order.index(order[0])
        nxt = [i for i in order[start + 1:] if F[i]["ev"]]
        b.key("n")
        check(b.selected() == F[nxt[0]]["n"], "%s: n selects %s, want the first event %d" % (
            name, b.selected(), F[nxt[0]]["n"]))
        if len(nxt) > 1:
            b.key("n")
            check(b.selected() == F[nxt[1]]["n"], "%s: n again: %s, want %d" % (name, b.selected(), F[nxt[1]]["n"]))
            b.key("p")
            check(b.selected() == F[nxt[0]]["n"], "%s: p: %s, want %d" % (name, b.selected(), F[nxt[0]]["n"]))
        ev = b.js("return document.getElementById('detail').textContent")
        check(all(("event: " + e) in ev for e in F[nxt[0]]["ev"]), "%s: the event frame shows its events" % name)

    # A band: unfolds on a click, folds again; another unfolds on Enter.
    bands = [r for r in data["rows"] if r["k"] == "band"]
    if check(bands, "%s: no band" % name):
        b.load(path)
        r = bands[0]
        el = b.d.find_elements(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"]' % r["from"])
        if check(el, "%s: band %d..%d not drawn" % (name, r["from"], r["to"])):
            before = len(b.d.find_elements(By.CSS_SELECTOR, "#layer .row-frame"))
            b.js("arguments[0].scrollIntoView({block: 'center'})", el[0])
            time.sleep(0.2)
            b.d.find_element(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"] text' % r["from"]).click()
            after = len(b.d.find_elements(By.CSS_SELECTOR, "#layer .row-frame"))
            inside = [g.get_attribute("data-frame") for g in b.d.find_elements(By.CSS_SELECTOR, "#layer .row-frame")]
            gone = not b.d.find_elements(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"]' % r["from"])
            check(after > before and gone and str(F[r["from"]]["n"]) in inside,
                  "%s: click on band %d..%d: %d frame rows before, %d after, band gone %s" % (
                      name, r["from"], r["to"], before, after, gone))
            fold = b.d.find_elements(By.CSS_SELECTOR, '#layer .row-fold[data-from="%d"] text' % r["from"])
            if check(fold, "%s: no way to fold band %d..%d again" % (name, r["from"], r["to"])):
                fold[0].click()
                check(b.d.find_elements(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"]' % r["from"]),
                      "%s: band %d..%d did not fold again" % (name, r["from"], r["to"]))
        if len(bands) > 1:
            r = bands[1]
            el = b.d.find_elements(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"]' % r["from"])
            if el:
                b.js("arguments[0].focus()", el[0])
                b.key(b.Keys.ENTER)
                check(not b.d.find_elements(By.CSS_SELECTOR, '#layer .row-band[data-from="%d"]' % r["from"]),
                      "%s: Enter on band %d..%d did not unfold it" % (name, r["from"], r["to"]))
        # Selecting a frame inside a folded band unfolds it and shows the frame.
        b.load(path)
        r = bands[-1]
        n = F[(r["from"] + r["to"]) // 2]["n"]
        b.js("window.uroce.select(arguments[0])", n)
        check(b.js(ROW_IN_VIEW, n), "%s: frame %d (in band %d..%d) selected, its row not in view" % (
            name, n, r["from"], r["to"]))

    # "Not seen" rows.
    lost = [r for r in data["rows"] if r["k"] == "lost"]
    check(bool(lost) == want_lost, "%s: %d lost rows in the data, want some: %s" % (name, len(lost), want_lost))
    if lost:
        r = lost[0]
        b.js("window.uroce.select(arguments[0])", F[r["at"]]["n"])
        el = b.d.find_elements(By.CSS_SELECTOR, "#layer .row-lost")
        texts = [e.get_attribute("textContent") for e in el]
        check(any(r["label"] in t for t in texts), "%s: lost row %r not drawn (%s)" % (name, r["label"], texts[:3]))

    # Links: a NAK shows the resend that answers it, and the jump goes there.
    naks = [l for l in data["links"] if F[l["from"]]["oc"] in ("nak", "rnr")]
    if check(naks, "%s: no link from a NAK" % name):
        for l in naks[:3]:
            a, z = F[l["from"]]["n"], F[l["to"]]["n"]
            b.js("window.uroce.select(arguments[0])", a)
            texts = [e.get_attribute("textContent") for e in b.d.find_elements(By.CSS_SELECTOR, "#detail-links .link-text")]
            check(l["text"] in texts, "%s: NAK frame %d shows links %s, want %r" % (name, a, texts, l["text"]))
            partner = b.d.find_elements(By.CSS_SELECTOR, '#layer .row-frame[data-frame="%d"]' % z)
            check(partner and "is-linked" in partner[0].get_attribute("class"),
                  "%s: NAK frame %d selected, resend %d not highlighted" % (name, a, z))
            check(b.d.find_elements(By.CSS_SELECTOR, "#layer path.link.link-active"),
                  "%s: no connector drawn between frames %d and %d" % (name, a, z))
            jump = b.d.find_elements(By.CSS_SELECTOR, '#detail-links button.jump[data-frame="%d"]' % z)
            if check(jump, "%s: NAK frame %d: no jump to frame %d" % (name, a, z)):
                jump[0].click()
                check(b.selected() == z, "%s: jump from NAK %d went to %s, want %d" % (name, a, b.selected(), z))

    # The address: #focus=KIND and #fN.
    for kind, at in sorted(data["focus"].items()):
        b.load(path, "#focus=" + kind)
        check(b.selected() == F[at]["n"], "%s#focus=%s: frame %s selected, want %d" % (name, kind, b.selected(), F[at]["n"]))
    n = F[len(F) // 2]["n"]
    b.load(path, "#f%d" % n)
    check(b.selected() == n and b.js(ROW_IN_VIEW, n), "%s#f%d: frame %s selected" % (name, n, b.selected()))

    # Filters: responses hidden, frame navigation skips them; one QP.
    b.load(path)
    box = b.d.find_element(By.CSS_SELECTOR, "input.oc-filter[value=resp]")
    box.click()
    drawn = [int(g.get_attribute("data-frame")) for g in b.d.find_elements(By.CSS_SELECTOR, "#layer .row-frame")]
    by_n = {f["n"]: f for f in F}
    check(drawn and all(by_n[x]["oc"] != "resp" for x in drawn), "%s: responses filtered out, still drawn: %s" % (
        name, [x for x in drawn if by_n[x]["oc"] == "resp"][:5]))
    if F[order[0]]["oc"] != "resp":
        b.js("window.uroce.select(arguments[0])", F[order[0]]["n"])
    went = []
    for _ in range(6):
        b.key(b.Keys.ARROW_DOWN)
        went.append(b.selected())
    check(all(by_n[x]["oc"] != "resp" for x in went if x), "%s: ArrowDown with responses hidden went to %s" % (name, went))
    box.click()
    qps = sorted({f["qp"] for f in F if f["qp"] >= 0})
    if len(qps) > 1:
        from selenium.webdriver.support.ui import Select
        q = qps[0]
        Select(b.d.find_element(By.ID, "qp-filter")).select_by_value(str(q))
        drawn = [int(g.get_attribute("data-frame")) for g in b.d.find_elements(By.CSS_SELECTOR, "#layer .row-frame")]
        check(drawn and all(q in (by_n[x]["qp"], by_n[x]["sqp"]) for x in drawn), "%s: QP %#x filter draws %s" % (
            name, q, drawn[:8]))
    check(not b.errors(), "%s: browser errors in the story checks" % name)


def big_checks(b, name, path, data, capture, exe):
    """About 50,000 frames: ready, few row elements, the last frame, the first event."""
    F = data["frames"]
    t0 = time.time()
    if not check(b.load(path), "%s: not ready within %d s" % (name, READY_WAIT)):
        return
    log("%s: %d frames, ready after %.1f s (page %.0f MB)" % (name, len(F), time.time() - t0,
                                                            os.path.getsize(path) / 1e6))
    lines, summ = line_view(exe, capture)
    check(len(F) == len(lines) == summ[1], "%s: %d frames in the page, %d in the line view" % (name, len(F), len(lines)))
    r0 = b.js("return window.uroce.rowsRendered()")
    check(0 < r0 < 300, "%s: %d rows in the DOM at load" % (name, r0))
    last = F[-1]["n"]
    b.js("window.uroce.select(arguments[0])", last)
    sel, line, rows, r1 = b.js(SNAPSHOT)
    check(sel == last and line == lines[last] and b.js(ROW_IN_VIEW, last),
          "%s: jump to the last frame %d: selected %s, row in view %s" % (name, last, sel, b.js(ROW_IN_VIEW, last)))
    check(0 < r1 < 300, "%s: %d rows in the DOM at the last frame" % (name, r1))
    b.key(b.Keys.ARROW_UP)
    order = story_order(data)
    check(b.selected() == F[order[-2]]["n"], "%s: ArrowUp from the last frame: %s" % (name, b.selected()))
    # Scrolling through: the rows follow, their number stays small.
    most = 0
    for frac in (0.25, 0.5, 0.75, 0.1):
        b.js("var s = document.getElementById('ladder'); s.scrollTop = s.scrollHeight * arguments[0];", frac)
        time.sleep(0.1)
        most = max(most, b.js("return window.uroce.rowsRendered()"))
    check(0 < most < 300, "%s: up to %d rows in the DOM while scrolling" % (name, most))
    b.js("window.uroce.select(arguments[0])", F[order[0]]["n"])
    if data["focus"]:
        b.key("n")
        want = next(F[i]["n"] for i in order[1:] if F[i]["ev"])
        check(b.selected() == want, "%s: n from the first frame: %s, want %d" % (name, b.selected(), want))
    check(not b.errors(), "%s: browser errors" % name)


def screenshots(b, shots, after_page, write_small_page):
    os.makedirs(shots, exist_ok=True)
    b.d.set_window_size(1600, 1000)
    # The page itself 1600x1000 (the window's size includes what a window has around its page).
    b.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": 1600, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    for page, hash_, png in ((after_page, "#focus=loss", "go-back-n.png"), (write_small_page, "", "write-small.png")):
        if page and b.load(page, hash_):
            b.d.save_screenshot(os.path.join(shots, png))
            log("screenshot %s" % os.path.join(shots, png))


# ---- main -----------------------------------------------------------------------------------

def check_kept_page(b, path, stats):
    """A page kept in docs/ (made by learn.py or capture-pages.sh from a capture not kept)."""
    name = os.path.relpath(path, DOCS)
    with open(path, encoding="utf-8") as f:
        data = self_contained(name, f.read())
    if not data or not check(b.load(path), "%s: not ready within %d s" % (name, READY_WAIT)):
        return
    F = data["frames"]
    nframes = b.js("return window.uroce.frames ? window.uroce.frames() : null")
    check(F and nframes in (None, len(F)), "%s: %d frames in the page, %s in its script" % (name, len(F), nframes))
    if F:
        first = F[story_order(data)[0]]["n"]
        check(b.selected() == first, "%s: at load frame %s is selected, want %d" % (name, b.selected(), first))
        order = story_order(data)
        nxt = [i for i in order[1:] if F[i]["ev"]]
        if nxt:
            b.key("n")
            check(b.selected() == F[nxt[0]]["n"], "%s: n selects %s, want the first event %d" % (
                name, b.selected(), F[nxt[0]]["n"]))
    res = b.js("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    check(all(r.startswith(("file:", "data:", "blob:", "about:")) for r in res), "%s: loaded %s" % (name, res[:5]))
    errs = b.errors()
    check(not errs, "%s: browser errors: %s" % (name, errs[:3]))
    stats["kept"] += 1


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    exe, golden, work, make_lossy = (os.path.abspath(a) for a in sys.argv[1:5])
    shots = os.path.abspath(sys.argv[5]) if len(sys.argv) == 6 else None
    sel = import_selenium()
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)] + ([] if sel else ["selenium"])
    if missing:
        print("html: skipped, not installed: %s (scripts/install-deps.sh)" % ", ".join(missing))
        return 77
    driver.exit_on_signals()
    os.makedirs(work, exist_ok=True)
    t_start = time.time()

    # 1. The pages, each self-contained.
    pages = []   # (name, html path, capture, data)
    for cap in sorted(glob.glob(os.path.join(golden, "**", "*.pcap*"), recursive=True)):
        rel = os.path.relpath(cap, golden)
        out = os.path.join(work, "html-" + re.sub(r"[^A-Za-z0-9]+", "_", rel) + ".html")
        html = write_page(exe, cap, out)
        if html is not None:
            data = self_contained(rel, html)
            if data:
                pages.append((rel, out, cap, data))
    check(len(pages) >= 20, "%d golden pages, want every golden capture" % len(pages))

    lossy = os.path.join(work, "html-lossy.pcap")
    p = subprocess.run([make_lossy, lossy], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "make_lossy_capture: rc %d %s %s" % (p.returncode, p.stdout, p.stderr))
    dropped = {int(x) for l in p.stdout.splitlines() if l.startswith("dropped frames:") for x in l.split()[2:]}
    after = os.path.join(work, "html-lossy-after.pcap")
    td.write_pcap(after, [fr for i, fr in enumerate(td.read_pcap(lossy)) if i + 1 not in dropped])
    story = []
    for name, cap, want_lost in (("lossy", lossy, False), ("lossy-after", after, True)):
        out = os.path.join(work, "html-%s.html" % name)
        html = write_page(exe, cap, out)
        if html is not None and self_contained(name, html):
            story.append((name, out, cap, page_data(html), want_lost))

    big = os.path.join(work, "html-big.pcap")
    nbig = make_big(golden, big)
    big_html = os.path.join(work, "html-big.html")
    html = write_page(exe, big, big_html)
    big_data = self_contained("big", html) if html is not None else None
    html = None
    log("html: %d golden pages, lossy pages, a %d-frame page written (%.1f s)" % (len(pages), nbig, time.time() - t_start))

    # 2-5 in the browser.
    b = None
    stats = {"frames": 0, "hovers": 0, "kept": 0}
    try:
        b = Browser(sel)
        b.start()
        t = time.time()
        every = os.environ.get("UROCE_HTML_GOLDEN", "sample") == "all"
        for i, (name, out, cap, data) in enumerate(pages):
            light = not every and i % FULL_EVERY != 0 and name != "rxe/write_small.pcap"
            check_page(b, name, out, data, cap, exe, stats, light=light)
        log("html: golden pages checked (%d frames, %s, %.0f s)" % (
            stats["frames"], "every page whole" if every else "one page in %d whole, the rest in part" % FULL_EVERY,
            time.time() - t))
        for name, out, cap, data, want_lost in story:
            t = time.time()
            check_page(b, name, out, data, cap, exe, stats, all_frames=True)
            story_checks(b, name, out, data, want_lost)
            log("html: %s checked (%.0f s)" % (name, time.time() - t))
        if big_data:
            t = time.time()
            big_checks(b, "big", big_html, big_data, big, exe)
            log("html: big checked (%.0f s)" % (time.time() - t))
        t = time.time()
        kept = sorted(glob.glob(os.path.join(DOCS, "learn", "html", "*.html")) +
                      glob.glob(os.path.join(DOCS, "captures", "html", "*.html")))
        check(len(kept) >= 10, "%d pages kept in docs/, want the lessons' and the reference captures'" % len(kept))
        for path in kept:
            check_kept_page(b, path, stats)
        log("html: %d pages kept in docs/ loaded and checked (%.0f s)" % (stats["kept"], time.time() - t))
        if shots:
            ws = next((out for name, out, _, _ in pages if name == "rxe/write_small.pcap"), None)
            screenshots(b, shots, next((out for name, out, *_ in story if name == "lossy-after"), None), ws)
    finally:
        if b:
            b.kill()
    log("html: %d frames checked in the browser, %d hovers, %.0f s" % (stats["frames"], stats["hovers"],
                                                                      time.time() - t_start))
    if FAILURES:
        print("html: %d failure(s)" % len(FAILURES))
        return 1
    print("html: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
