#!/usr/bin/env python3
"""Checks a built documentation site: every internal link resolves, and in headless Chromium
every page loads with no console error and every image decodes.

Usage: scripts/check_site.py build/docs/html [--no-browser] [--chromium PATH]

The links are checked from the HTML files (a link to a missing file or to an anchor the target
page lacks is an error); the browser part opens each page from file:// through the DevTools
protocol (websocket-client), collects console errors, uncaught exceptions and failed loads, and
reloads every <img> eagerly to see that it decodes. Exit status 1 lists what failed.
"""
import argparse
import html.parser
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP_SCHEMES = ("http:", "https:", "mailto:", "data:", "javascript:", "ftp:")


class _Page(html.parser.HTMLParser):
    """Ids and the URLs a page refers to: (attribute, url)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key) and (key == "id" or tag == "a"):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.refs.append((f"<{tag} {key}>", attrs[key]))


def _parse(path):
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def check_links(root):
    """[problem] for internal links of the site under `root` that do not resolve."""
    root = pathlib.Path(root).resolve()
    pages = {p: _parse(p) for p in sorted(root.rglob("*.html"))}
    if not pages:
        return [f"{root}: no HTML page"]
    problems = []
    for path, page in pages.items():
        for what, url in page.refs:
            if url.startswith(SKIP_SCHEMES) or url.startswith("//"):
                continue
            parsed = urllib.parse.urlsplit(url)
            target = path if not parsed.path else (path.parent /
                                                    urllib.parse.unquote(parsed.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(root)}: {what} {url}"
            if not target.exists():
                problems.append(f"{where}: no such file")
            elif parsed.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if urllib.parse.unquote(parsed.fragment) not in ids:
                    problems.append(f"{where}: no anchor #{parsed.fragment} in the target")
    return problems


_IMAGES_JS = """
Promise.all(Array.from(document.images).map(i => new Promise(done => {
  const probe = new Image();
  probe.onload = () => done(probe.naturalWidth > 0 ? null : i.currentSrc || i.src);
  probe.onerror = () => done(i.currentSrc || i.src);
  probe.src = i.currentSrc || i.src;
}))).then(bad => JSON.stringify({count: document.images.length, bad: bad.filter(b => b)}))
"""


class _Browser:
    """Headless Chromium driven through the DevTools protocol over one page target."""

    def __init__(self, chromium):
        import websocket  # websocket-client, installed by scripts/docs.sh

        self.profile = tempfile.mkdtemp(prefix="site-check-")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--allow-file-access-from-files",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = pathlib.Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"check_site: {chromium} did not start its DevTools port")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def call(self, method, events=None, **params):
        """Sends one command and returns its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"check_site: {method}: {msg['error']}")
                return msg.get("result", {})
            if events is not None and "method" in msg:
                events.append(msg)

    def open(self, url, timeout=30):
        """Loads `url`; returns ([console problems], image report)."""
        events = []
        self.call("Page.navigate", events, url=url)
        deadline = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in events):
            if time.monotonic() > deadline:
                return [f"no load event after {timeout} s"], {"count": 0, "bad": []}
            events.append(json.loads(self.ws.recv()))
        report = self.call("Runtime.evaluate", events, expression=_IMAGES_JS, awaitPromise=True,
                           returnByValue=True)
        images = json.loads(report["result"]["value"])
        return _console_problems(events), images

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.profile, ignore_errors=True)


def _console_problems(events):
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            details = p["exceptionDetails"]
            out.append("uncaught " + details.get("exception", {}).get("description",
                                                                       details.get("text", "")))
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console." + p["type"] + ": " +
                       " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            entry = p["entry"]
            out.append(f"{entry['source']}: {entry['text']} {entry.get('url', '')}".strip())
    return out


def check_in_browser(root, chromium):
    """([problem], pages, images) from opening every page of the site."""
    root = pathlib.Path(root).resolve()
    problems, n_images = [], 0
    pages = sorted(root.rglob("*.html"))
    browser = _Browser(chromium)
    try:
        for path in pages:
            console, images = browser.open(path.as_uri())
            rel = path.relative_to(root)
            problems += [f"{rel}: {c}" for c in console]
            problems += [f"{rel}: image does not load: {b}" for b in images["bad"]]
            n_images += images["count"]
    finally:
        browser.close()
    return problems, len(pages), n_images


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", help="the built site's folder (with index.html)")
    ap.add_argument("--no-browser", action="store_true", help="check the links only")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM") or
                    shutil.which("chromium") or shutil.which("chromium-browser") or
                    shutil.which("google-chrome"))
    args = ap.parse_args(argv)
    if not (pathlib.Path(args.site) / "index.html").exists():
        print(f"check_site: {args.site} has no index.html (build the site first)", file=sys.stderr)
        return 1
    problems = check_links(args.site)
    summary = "links"
    if not args.no_browser:
        if not args.chromium:
            print("check_site: no chromium found (Debian: apt-get install chromium; or pass "
                  "--chromium PATH)", file=sys.stderr)
            return 1
        start = time.monotonic()
        browser_problems, n_pages, n_images = check_in_browser(args.site, args.chromium)
        problems += browser_problems
        summary = (f"links, and {n_pages} pages with {n_images} images in headless Chromium "
                   f"({time.monotonic() - start:.0f} s)")
    for p in problems:
        print(f"check_site: {p}", file=sys.stderr)
    print(f"check_site: {'FAILED' if problems else 'ok'}: {summary}; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
