# Sphinx settings of the course website; site/build.py copies this file into the project it
# stages (build/site-src/) and generates the landing page and its table of contents there.
project = "minipipe: the course"
author = "minipipe"
copyright = "minipipe authors"

extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_enable_extensions = ["dollarmath", "amsmath"]

# build.py stages every lesson already executed (as `jupyter nbconvert --execute` leaves it, or as
# the test suite's nbval run left it), so myst-nb executes nothing: each notebook runs once per
# build or test run, and its pages show exactly the outputs that run checked.
nb_execution_mode = "off"
# Plotly figures carry their own HTML (minipipe.viz.offline) and are shown by it. The widget
# manager would come from a CDN: left out, so widgets show their static pictures instead.
nb_ipywidgets_js = {}
nb_merge_streams = True

# A local MathJax 2.7 (the jupyter-server-mathjax package), copied into _static/mathjax by
# build.py, as the exported pages use: formulas typeset with no network.
html_static_path = ["_static"]
html_css_files = ["course.css"]
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
# That package ships the STIX-Web fonts only (as Jupyter's classic notebook configured it).
mathjax2_config = {
    "tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]], "processEscapes": True},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None},
}
myst_update_mathjax = False

html_theme = "sphinx_book_theme"
html_title = "minipipe: the course"
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": True,
    "navigation_with_keys": True,
}
html_show_sourcelink = False
# myst-nb reads every representation of an output before it picks one (text/html for plotly's)
suppress_warnings = ["mystnb.unknown_mime_type"]

# plotly's notebook renderer writes a script tag loading MathJax 3 from a CDN into every figure's
# HTML (plotly 7, not configurable); the pages have their own MathJax and load nothing from the
# network, so it goes.
from pathlib import Path  # noqa: E402

from docutils import nodes  # noqa: E402

from minipipe.viz.offline import CDN_MATHJAX  # noqa: E402
from minipipe.viz.offline import drop_cdn_mathjax as without_cdn_mathjax  # noqa: E402


def drop_cdn_mathjax(app, doctree, docname):
    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if CDN_MATHJAX.search(text):
            node.replace(node[0], nodes.Text(without_cdn_mathjax(text)))


# The language bar: every page links to the same page in the site's other languages (English at the
# top, German and Dutch in de/ and nl/ below it; build.py writes which were built into languages.txt).
# Plain relative links, so the pages stay readable from the disk, offline.
NAMES = {"en": "English", "de": "Deutsch", "nl": "Nederlands"}
_BUILT = Path(__file__).parent / "languages.txt"
BUILT = _BUILT.read_text().split() if _BUILT.exists() else ["en"]


def language_bar(here: str, pagename: str, built=BUILT) -> str:
    root = "../" * pagename.count("/") + ("../" if here != "en" else "")  # from this page to the English top
    links = []
    for lang in built:
        href = root + ("" if lang == "en" else f"{lang}/") + pagename + ".html"
        current = ' aria-current="page"' if lang == here else ""
        links.append(
            f'<a class="language-link" hreflang="{lang}" lang="{lang}" href="{href}"{current}>{NAMES[lang]}</a>'
        )
    return f'<nav class="language-switcher" aria-label="Language / Sprache / Taal">{" · ".join(links)}</nav>\n'


def add_language_bar(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = language_bar(app.config.language or "en", pagename) + context["body"]


def setup(app):
    app.connect("doctree-resolved", drop_cdn_mathjax)
    app.connect("html-page-context", add_language_bar)
