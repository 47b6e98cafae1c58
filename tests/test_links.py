"""The link checker: every internal link and anchor of the built site resolves."""

from pathlib import Path

from sitetools.links import broken_links, main


def write(site: Path, page: str, body: str) -> None:
    path = site / page
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")


def test_the_built_site_has_no_broken_internal_link_or_anchor(site):
    broken = broken_links(site)
    assert not broken, "\n".join(map(str, broken))


def test_missing_pages_files_and_anchors_are_reported_with_their_page(tmp_path):
    write(tmp_path, "index.html", '<h2 id="here">x</h2><a href="guide/#setup">ok</a>')
    write(
        tmp_path,
        "guide/index.html",
        '<h2 id="setup">Setup</h2>'
        '<a href="../#here">ok</a> <a href="#setup">ok</a> <a href="https://jax.dev/">off site</a>'
        '<a href="../missing/">gone</a> <a href="../#nowhere">no anchor</a>'
        '<script src="../assets/app.js"></script> <img src="plot.png">',
    )
    write(tmp_path, "404.html", '<a href="/guide/">absolute</a> <a href="/zh/">absolute, gone</a>')
    assert sorted(map(str, broken_links(tmp_path))) == [
        "404.html: /zh/ (no file for /zh/)",
        "guide/index.html: ../#nowhere (no id 'nowhere' in index.html)",
        "guide/index.html: ../assets/app.js (no file for /assets/app.js)",
        "guide/index.html: ../missing/ (no file for /missing/)",
        "guide/index.html: plot.png (no file for /guide/plot.png)",
    ]


def test_a_link_that_climbs_out_of_the_site_is_broken(tmp_path):
    """An encoded ``..`` leads no static server out of the site, even to a file that exists."""
    (tmp_path / "outside.html").write_text("x", encoding="utf-8")
    write(tmp_path / "site", "index.html", '<a href="/%2e%2e/outside.html">up</a>')
    assert list(map(str, broken_links(tmp_path / "site"))) == [
        "index.html: /%2e%2e/outside.html (no file for /%2e%2e/outside.html)"
    ]


def test_the_command_exits_non_zero_and_counts(tmp_path, capsys):
    write(tmp_path, "index.html", '<a href="#gone">x</a>')
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"1 broken internal links or anchors in 1 pages under {tmp_path}"
    )
