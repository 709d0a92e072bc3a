"""The course website (`make site`: site/build.py), read offline in headless Chromium.

The real site is built once, as `make site` builds it (every lesson executed, in the order of
lessons/README.md), into a temporary folder, from the lessons as nbval's run executed them
(tests/support/executed_notebooks.py; a lesson nbval did not run here is executed first). Then, with
every request that is not a file blocked:
the navigation lists the lessons in that order and each link opens its lesson; every page draws
as many plots as its executed notebook made (one per plotly output, one per figure a widget
held), an animation's Play button advances its frames, every formula is typeset by the local
MathJax, and no page asks the network for anything. A screenshot of each page, the build's log
and time, and the pages' consoles go to artifacts/site/. (MINIPIPE_SITE=build/site: check the
site `make site` built instead of building one.)

The site is built in English, German and Dutch (build/site, build/site/de, build/site/nl): every page
of each has a language bar whose links open the same page in the others, and a German (Dutch) page
shows its lesson's translated heading, from a copy of i18n/ in which the first lesson's heading is
translated (planted where the catalog does not translate it yet).

The order, the landing page, the translation of a notebook block by block and the language bar's
links are also checked without a browser, on made-up tables, notebooks and catalogs.
Skipped without Chromium or the `site` extra, unless MINIPIPE_REQUIRE_BROWSER=1 (CI): then it fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from tests.support.browser.chromium import launched, offline_page, require_browser
from tests.support.browser.pages import check_animation, check_plots, expected_plots, jupyter_env
from tests.support.executed_notebooks import EXECUTED, site_builder
from tests.support.notebooks import LESSON_FILES, REPO

ARTIFACTS = REPO / "artifacts" / "site"

builder = site_builder()
LESSONS = builder.lessons()
PAGES = builder.pages()  # the lessons, then the glossary

TABLE = """# The lessons

| lesson | what it teaches |
| --- | --- |
| `00_start_here` | the start |
| `02_second` | listed before 01 |
| `01_first` | listed after 02 |
| `03_not_written_yet` | no notebook yet |

## How a lesson is written (for whoever adds or edits one)
- notes for authors
"""


def test_lessons_follow_the_table_then_the_unlisted_by_name():
    found = ["01_first", "00_start_here", "04_unlisted", "02_second", "05_also_unlisted"]
    assert builder.lesson_order(TABLE, found) == [
        "00_start_here",
        "02_second",
        "01_first",
        "04_unlisted",
        "05_also_unlisted",
    ]
    assert builder.lesson_order(TABLE, []) == []


def test_the_real_lessons_are_all_in_the_site_in_the_readmes_order():
    on_disk = sorted(path.stem for path in (REPO / "lessons").glob(LESSON_FILES))
    assert sorted(LESSONS) == on_disk
    listed = [
        name for name in builder.TABLE_ROW.findall((REPO / "lessons" / "README.md").read_text()) if name in on_disk
    ]
    assert sorted(listed) == on_disk, f"lessons/README.md's table misses {sorted(set(on_disk) - set(listed))}"
    assert LESSONS[: len(listed)] == listed
    assert PAGES == LESSONS + ["glossary"]  # the glossary last in the navigation


def test_landing_page_links_the_written_lessons_and_lists_them_in_the_toc(tmp_path, monkeypatch):
    monkeypatch.setattr(builder, "LESSONS", tmp_path)
    (tmp_path / "README.md").write_text(TABLE.replace("## How", "Words: the [glossary](glossary.ipynb).\n\n## How"))
    page = builder.landing_page(["00_start_here", "02_second", "01_first", "glossary"])
    assert "| [02_second](lessons/02_second.ipynb) |" in page
    assert "[glossary](lessons/glossary.ipynb)" in page  # a link of the README's, from the landing page
    assert "| `03_not_written_yet` |" in page  # no page to link to yet
    assert "notes for authors" not in page  # the authors' section stays out
    assert page.startswith("# minipipe")  # the README's introduction first
    toc = page.split("```{toctree}")[1]
    assert toc.index("lessons/00_start_here") < toc.index("lessons/02_second") < toc.index("lessons/01_first")


def test_staged_project_takes_executed_lessons_where_given(tmp_path):
    executed = tmp_path / "executed"
    executed.mkdir()
    ran = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# ran already")])
    nbformat.write(ran, executed / f"{LESSONS[0]}.ipynb")
    src = tmp_path / "src"
    builder.stage(src, LESSONS[:2], executed)
    staged = src / "lessons"
    assert (staged / f"{LESSONS[0]}.ipynb").read_text() == (executed / f"{LESSONS[0]}.ipynb").read_text()
    assert (staged / f"{LESSONS[1]}.ipynb").read_bytes() == (REPO / "lessons" / f"{LESSONS[1]}.ipynb").read_bytes()
    assert (src / "conf.py").exists() and (src / "_static" / "mathjax" / "MathJax.js").exists()
    assert f"lessons/{LESSONS[1]}" in (src / "index.md").read_text()


def test_translated_lesson_takes_each_translated_block_and_keeps_the_rest(tmp_path):
    import polib

    english = "# 03 · Micro-batches\n\nA batch cut in pieces.\n\n```python\nx = 1\n```\n\nNot translated yet."
    code = nbformat.v4.new_code_cell("print(1)", execution_count=1)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell(english), code, nbformat.v4.new_markdown_cell("Stale.")]
    )
    nbformat.write(nb, tmp_path / "03.ipynb")
    po = polib.POFile()
    po.append(polib.POEntry(msgid="# 03 · Micro-batches", msgstr="# 03 · Micro-Batches"))
    po.append(polib.POEntry(msgid="A batch cut in pieces.", msgstr="Ein Batch, in Stücke geschnitten."))
    po.append(polib.POEntry(msgid="Stale.", msgstr="Veraltet.", flags=["fuzzy"]))
    po.save(str(tmp_path / "03.po"))
    builder.translate(tmp_path / "03.ipynb", tmp_path / "03.po", tmp_path / "de" / "03.ipynb")
    done = nbformat.read(tmp_path / "de" / "03.ipynb", as_version=4)
    assert done.cells[0].source == (
        "# 03 · Micro-Batches\n\nEin Batch, in Stücke geschnitten.\n\n```python\nx = 1\n```\n\nNot translated yet."
    )
    assert done.cells[1] == nb.cells[1]  # the code and its output as the English run left them
    assert done.cells[2].source == "Stale."  # a fuzzy (stale) translation is not shown
    builder.translate(tmp_path / "03.ipynb", tmp_path / "none.po", tmp_path / "nl" / "03.ipynb")  # no catalog yet
    assert nbformat.read(tmp_path / "nl" / "03.ipynb", as_version=4) == nb


@pytest.mark.parametrize("lang", ["de", "nl"])
def test_translated_landing_page_is_the_readme_in_that_language_with_each_lesson_linked(lang):
    page = builder.translated_landing_page(lang, PAGES)
    readme = (REPO / f"README.{lang}.md").read_text()
    assert page.startswith(readme.split("\n", 1)[0])  # its own title
    assert "README" not in page  # the language bar links the languages, not the READMEs
    for name in PAGES:
        assert f"[{name}](lessons/{name}.ipynb)" in page, name
    assert page.rstrip().endswith("\n".join(f"lessons/{name}" for name in PAGES) + "\n```")


def site_conf():
    spec = importlib.util.spec_from_file_location("site_conf", REPO / "site" / "conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_language_bar_links_the_same_page_in_every_language():
    conf = site_conf()
    hrefs = re.compile(r'hreflang="(\w+)" lang="\w+" href="([^"]+)"')
    built = ["en", "de", "nl"]
    assert hrefs.findall(conf.language_bar("en", "lessons/04_one_f_one_b", built)) == [
        ("en", "../lessons/04_one_f_one_b.html"),
        ("de", "../de/lessons/04_one_f_one_b.html"),
        ("nl", "../nl/lessons/04_one_f_one_b.html"),
    ]
    assert hrefs.findall(conf.language_bar("nl", "index", built)) == [
        ("en", "../index.html"),
        ("de", "../de/index.html"),
        ("nl", "../nl/index.html"),
    ]
    assert 'hreflang="de" lang="de" href="../../de/lessons/x.html" aria-current="page"' in conf.language_bar(
        "de", "lessons/x", built
    )
    assert hrefs.findall(conf.language_bar("en", "index", ["en"])) == [("en", "index.html")]


# ---- the real site, in the browser ------------------------------------------------------------


def require_site_packages() -> None:
    missing = [
        name
        for name in ("sphinx", "myst_nb", "sphinx_book_theme", "jupyter_server_mathjax")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        message = f"the site needs {', '.join(missing)} (pip install -e '.[site]')"
        if os.environ.get("MINIPIPE_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (MINIPIPE_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module")
def chromium():
    require_browser()
    require_site_packages()
    with launched() as browser:
        yield browser


@pytest.fixture(scope="module")
def site(chromium, tmp_path_factory, executed):
    """`make site`'s build, into a temporary folder, from this run's executed lessons: (the pages'
    folder, the executed lessons' folder). MINIPIPE_SITE=build/site checks a site already built
    there instead (by `make site`)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if os.environ.get("MINIPIPE_SITE"):
        out = (REPO / os.environ["MINIPIPE_SITE"]).resolve()
        return out, out.parent / f"{out.name}-src" / "lessons"
    ran = {name: executed(REPO / "lessons" / f"{name}.ipynb") for name in LESSONS}
    assert {path.parent for path in ran.values()} == {EXECUTED / "lessons"}
    tmp = tmp_path_factory.mktemp("site")
    out = tmp / "site"
    committed = {path: path.read_bytes() for path in (REPO / "lessons").glob("*.ipynb")}
    catalogs = planted_catalogs(tmp / "i18n")
    start = time.perf_counter()
    # in a session of its own: a build that hangs goes with its kernels and their workers
    command = [
        sys.executable,
        str(REPO / "site" / "build.py"),
        "--out",
        str(out),
        "--executed",
        str(EXECUTED / "lessons"),
        "--catalogs",
        str(catalogs),
    ]
    with subprocess.Popen(
        command,
        env=jupyter_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as build:
        try:
            said, _ = build.communicate(timeout=1500)
        except subprocess.TimeoutExpired:
            os.killpg(build.pid, signal.SIGKILL)
            raise
    seconds = time.perf_counter() - start
    (ARTIFACTS / "build.log").write_text(said + f"\nbuilt in {seconds:.0f} s\n")
    if build.returncode:
        pytest.fail(f"site/build.py failed (all it said: artifacts/site/build.log):\n{said[-6000:]}", pytrace=False)
    print(f"site built in {seconds:.0f} s ({len(LESSONS)} lessons, executed already)")
    assert all(path.read_bytes() == text for path, text in committed.items()), "the build wrote into lessons/"
    staged = tmp / "site-src" / "lessons"
    assert all((staged / path.name).read_bytes() == path.read_bytes() for path in ran.values()), (
        "the pages are not made from the lessons as this run executed them"
    )
    return out, staged


FIRST_HEADING = {"de": "# 00 · Hier geht es los", "nl": "# 00 · Begin hier"}  # planted where not translated yet


def planted_catalogs(dest):
    """A copy of i18n/ whose German and Dutch catalogs surely translate the first lesson's heading."""
    import polib

    shutil.copytree(REPO / "i18n", dest)
    english = title(nbformat.read(REPO / "lessons" / f"{LESSONS[0]}.ipynb", as_version=4))
    for lang, planted in FIRST_HEADING.items():
        path = dest / lang / "lessons" / f"{LESSONS[0]}.po"
        po = polib.pofile(str(path)) if path.exists() else polib.POFile()
        entry = po.find(f"# {english}")
        if entry is None:
            po.append(entry := polib.POEntry(msgid=f"# {english}"))
        if not entry.msgstr or "fuzzy" in entry.flags:
            entry.msgstr, entry.flags = planted, []
        path.parent.mkdir(parents=True, exist_ok=True)
        po.save(str(path))
    return dest


def translated_heading(site_out, lang) -> str:
    """The first lesson's heading in `lang`, as the notebook its page was made from has it (the English
    executed lesson translated: site/build.py's staged project of that language)."""
    staged = site_out.parent / f"{site_out.name}-src-{lang}" / "lessons" / f"{LESSONS[0]}.ipynb"
    return title(nbformat.read(staged, as_version=4))


def title(notebook) -> str:
    """A lesson's title: the first heading of its first markdown cell."""
    first = next(c for c in notebook.cells if c.cell_type == "markdown")
    return next(line for line in first.source.splitlines() if line.startswith("# "))[2:].strip()


def heading(page) -> str:
    return page.locator("article h1").first.evaluate(
        "h => [...h.childNodes].filter(n => !(n.classList && n.classList.contains('headerlink')))"
        ".map(n => n.textContent).join('').trim()"
    )


NAV = "nav.bd-docs-nav a.reference.internal"
CODE_CELL = "article div.cell"  # myst-nb makes a div.cell of each code cell
# Sphinx's formulas (MathJax puts spans of class "math" inside them), and those MathJax typeset.
FORMULAS = "() => [...document.querySelectorAll('article .math.notranslate')]"
TYPESET = f"() => ({FORMULAS})().filter(f => f.querySelector('.MathJax')).length"


@pytest.mark.browser
@pytest.mark.timeout(1800)
def test_navigation_lists_the_lessons_in_order_and_each_link_opens_its_lesson(site, chromium):
    out, executed = site
    titles = [
        title(
            nbformat.read(
                executed / f"{name}.ipynb"
                if (executed / f"{name}.ipynb").exists()
                else REPO / "lessons" / f"{name}.ipynb",
                as_version=4,
            )
        )
        for name in PAGES
    ]
    with offline_page(chromium, ARTIFACTS, "index") as page:
        page.goto((out / "index.html").as_uri(), wait_until="load")
        page.screenshot(path=str(ARTIFACTS / "index.png"), full_page=True)
        nav = page.locator(NAV).evaluate_all("links => links.map(a => [a.getAttribute('href'), a.textContent.trim()])")
        hrefs = [href for href, _ in nav if href != "#"]
        assert hrefs == [f"lessons/{name}.html" for name in PAGES], "the lessons, then the glossary, in the navigation"
        assert [text for href, text in nav if href != "#"] == titles
        # the landing page's table links each lesson too
        table = page.locator("article table a.reference.internal").evaluate_all(
            "links => links.map(a => a.getAttribute('href'))"
        )
        assert [h.split("#")[0] for h in table] == hrefs[: len(LESSONS)]
        for i, (name, expected) in enumerate(zip(PAGES, titles)):
            # from the previous lesson's page, as a learner clicks through
            page.locator("nav.bd-docs-nav").get_by_role("link", name=expected, exact=True).click()
            page.wait_for_load_state("load")
            assert page.url.endswith(f"/lessons/{name}.html"), page.url
            assert heading(page) == expected
            following = page.locator("a.right-next")
            if i + 1 < len(PAGES):
                assert following.get_attribute("href").endswith(f"{PAGES[i + 1]}.html"), "the next page"
            else:
                assert following.count() == 0


@pytest.mark.browser
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_page_draws_every_figure_and_formula_offline(name, site, chromium):
    out, executed = site
    notebook = nbformat.read(executed / f"{name}.ipynb", as_version=4)
    plots, animations = expected_plots(notebook)
    with offline_page(chromium, ARTIFACTS, name) as page:
        page.goto((out / "lessons" / f"{name}.html").as_uri(), wait_until="load", timeout=120_000)
        check_plots(page, plots, CODE_CELL)
        for cell, frames in animations:
            check_animation(page, page.locator(CODE_CELL).nth(cell).locator(".js-plotly-plot").first, frames)
        formulas = page.evaluate(f"() => ({FORMULAS})().length")
        if any(c.cell_type == "markdown" and "$" in c.source for c in notebook.cells):
            assert formulas > 0, "the lesson's $…$ did not become formulas"
        if formulas:
            try:
                page.wait_for_function(f"n => ({TYPESET})() === n", arg=formulas, timeout=60_000)
            except Exception as e:
                raise AssertionError(f"{page.evaluate(TYPESET)} of {formulas} formulas typeset") from e
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.mark.browser
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("lang", ["en", "de", "nl"])
def test_every_page_links_the_same_page_in_the_other_languages(lang, site, chromium):
    out, _executed = site
    root = out if lang == "en" else out / lang
    others = {"en": out, "de": out / "de", "nl": out / "nl"}
    with offline_page(chromium, ARTIFACTS, f"languages-{lang}") as page:
        for name in ["index", *(f"lessons/{p}" for p in PAGES)]:
            page.goto((root / f"{name}.html").as_uri(), wait_until="domcontentloaded", timeout=120_000)
            bar = page.locator("article nav.language-switcher a").evaluate_all(
                "links => links.map(a => [a.getAttribute('hreflang'), a.href, a.getAttribute('aria-current')])"
            )
            assert [code for code, _, _ in bar] == ["en", "de", "nl"], f"{lang}/{name}: no language bar"
            for code, href, current in bar:
                assert href == (others[code] / f"{name}.html").as_uri(), f"{lang}/{name} -> {code}"
                assert (others[code] / f"{name}.html").exists()
                assert (current == "page") == (code == lang)
    assert page_lang(root / "index.html") == lang  # Sphinx's own words (search, next, ...) in that language too


def page_lang(path) -> str:
    return re.search(r'<html lang="(\w+)"', path.read_text())[1]


@pytest.mark.browser
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("lang", ["de", "nl"])
def test_a_translated_page_shows_its_translated_heading_and_the_english_outputs(lang, site, chromium):
    out, executed = site
    name = LESSONS[0]
    expected = translated_heading(out, lang)
    english = title(nbformat.read(executed / f"{name}.ipynb", as_version=4))
    assert expected and expected != english
    with offline_page(chromium, ARTIFACTS, f"{lang}-{name}") as page:
        page.goto((out / lang / "lessons" / f"{name}.html").as_uri(), wait_until="load", timeout=120_000)
        assert heading(page) == expected
        assert expected in [t.strip() for t in page.locator(NAV).all_text_contents()]  # the navigation's name too
        page.screenshot(path=str(ARTIFACTS / f"{lang}-{name}.png"), full_page=True)
    shown = (out / lang / "lessons" / f"{name}.html").read_text()
    assert shown.count('class="cell docutils container"') == (out / "lessons" / f"{name}.html").read_text().count(
        'class="cell docutils container"'
    )
