"""scripts/check_site.py finds what it is for: a dead link, a missing anchor, a console error, an
image that does not decode (on a tiny site written here), and passes a clean page."""
import base64
import importlib.util
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
check_site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_site)

# A 1x1 PNG, so that a good image is really decoded by the browser.
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
                         "hQGAhKmMIQAAAABJRU5ErkJggg==")


def _site(tmp_path, broken):
    (tmp_path / "sub").mkdir(parents=True)
    (tmp_path / "ok.png").write_bytes(PIXEL)
    (tmp_path / "sub" / "a.html").write_text(
        '<html><body><h1 id="x">A</h1><a href="../index.html#top">up</a>'
        '<img src="../ok.png"></body></html>')
    body = '<a id="top" href="sub/a.html#x">a</a> <a href="https://example.org/">out</a>'
    if broken:
        (tmp_path / "bad.png").write_bytes(b"not a png")
        body += ('<a href="missing.html">m</a> <a href="sub/a.html#nowhere">n</a>'
                 '<img src="bad.png"><script>console.error("boom")</script>')
    (tmp_path / "index.html").write_text(f"<html><body>{body}</body></html>")
    return tmp_path


def test_links_clean_site(tmp_path):
    assert check_site.check_links(_site(tmp_path, broken=False)) == []


def test_links_broken_site(tmp_path):
    problems = check_site.check_links(_site(tmp_path, broken=True))
    assert any("missing.html: no such file" in p for p in problems), problems
    assert any("no anchor #nowhere" in p for p in problems), problems
    assert len(problems) == 2, problems


def test_browser_sees_console_errors_and_broken_images(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium (scripts/setup.sh installs it for the test command)")
    clean = check_site.check_in_browser(_site(tmp_path / "clean", broken=False), chromium)
    assert clean == ([], 2, 1), clean
    problems, pages, images = check_site.check_in_browser(_site(tmp_path / "bad", broken=True),
                                                          chromium)
    assert pages == 2 and images == 2
    assert any("console.error: boom" in p for p in problems), problems
    assert any("image does not load" in p and "bad.png" in p for p in problems), problems
    assert check_site.main([str(tmp_path / "bad")]) == 1
