"""Figures and widgets that still read in an exported page, with no kernel and no network.

`jupyter nbconvert --to html --execute` keeps one representation of each output, and drops
plotly's JupyterLab mimetype ("not able to be represented"); a widget exports as a script tag
that a widget manager loaded from a CDN would render, so offline its cell stays empty. Hence:

- `embed_plotly()`: every figure also carries an HTML rendering, with plotly.js embedded once
  per notebook (plotly's own "notebook" renderer). JupyterLab keeps using the mimetype.
- `StaticFallback`: a widget displayed in a kernel also leaves a picture of its figures as it
  was last drawn (or other HTML: a check-yourself question leaves its answer in a fold). The
  picture shows only where the live widget did not render: in a page
  where the widget is still the script tag nbconvert wrote (or the text/html nbconvert picks
  when the notebook holds no widget state). A live front-end (JupyterLab, VS Code) renders the
  widget itself and leaves the picture hidden, so the widget is shown once.
- `mathjax_url()`: a local MathJax for formulas in exported pages, where one is installed;
  `drop_cdn_mathjax()` takes out the script tag loading MathJax 3 from a CDN that plotly's notebook
  renderer writes into every figure's HTML (plotly 7, not configurable), for pages that bring
  their own MathJax (the course website, the workshop's slides).
"""

from __future__ import annotations

import html
import json
import os
import re
import uuid
import weakref
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CDN_MATHJAX = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*"></script>')
NOTE = (
    "A picture of this widget as it was last drawn: its controls need a running kernel "
    "(open the notebook in JupyterLab to use them)."
)


def embed_plotly() -> None:
    """Let figures carry an HTML rendering as well as plotly's mimetype, inside a Jupyter kernel.

    Only where plotly chose its plain-Jupyter default ("plotly_mimetype"): a renderer chosen by
    the user (PLOTLY_RENDERER, or any other) and the ones plotly picks for VS Code, Colab & co
    are left alone."""
    import plotly.io as pio

    if not os.environ.get("PLOTLY_RENDERER") and pio.renderers.default == "plotly_mimetype":
        pio.renderers.default = "plotly_mimetype+notebook"


def in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__module__.startswith("ipykernel")


def ensure_plotlyjs() -> None:
    """Embed plotly.js into the notebook now if plotly has not yet done so: a widget may be the
    first plotly output of a notebook. (plotly does this on a figure's first display, through
    this private method; calling renderer.activate() instead would embed it again each time.)"""
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    pio.renderers._activate_pending_renderers(cls=MimetypeRenderer)


def figure_html(figure) -> str:
    """One figure as an HTML fragment that draws itself with the page's plotly.js."""
    import plotly.io as pio

    fig = figure.to_dict() if hasattr(figure, "to_dict") else figure
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        validate=False,
        config={"displaylogo": False},
    )


# Runs in the page. Shows the picture only where the widget's view is still the script tag an
# exporter wrote (or the text/html stand-in below), and hides it again if a widget manager
# renders the live widget's plot next to that tag. The figures sit in a <template>, inert until
# shown: a live front-end never draws the hidden copy.
SHOW_SCRIPT = """
(function () {
  var box = document.getElementById(%(box_id)s), modelId = %(model_id)s;
  if (!box) return;
  function staticView() {
    var tags = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
    for (var i = 0; i < tags.length; i++) {
      try { if (JSON.parse(tags[i].textContent).model_id === modelId) return tags[i]; } catch (e) {}
    }
    return document.querySelector('.minipipe-widget-static[data-model-id="' + modelId + '"]');
  }
  function show() {
    var view = staticView();
    if (!view || box.dataset.shown) return;
    box.dataset.shown = "1";
    box.appendChild(document.importNode(box.querySelector("template").content, true));
    box.style.display = "";
    var area = view.parentElement;
    if (!area || !window.MutationObserver) return;
    var watch = new MutationObserver(function () {
      if (area.querySelector(%(live)s)) { box.style.display = "none"; watch.disconnect(); }
    });
    watch.observe(area, {childList: true, subtree: true});
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", show); else show();
})();
"""


def fallback_box(inner_html: str, model_id: str, box_id: str, note: str = NOTE, live: str = ".js-plotly-plot") -> str:
    """`inner_html`, hidden and inert, shown by the page's script only where the widget cannot
    render; hidden again once an element matching `live` (the widget's own drawing) appears."""
    script = SHOW_SCRIPT % {"box_id": json.dumps(box_id), "model_id": json.dumps(model_id), "live": json.dumps(live)}
    return (
        f'<div class="minipipe-static-fallback" id="{box_id}" style="display:none">'
        f'<p style="font-size:12px;margin:2px 0 6px">{html.escape(note)}</p>'
        f"<template>{inner_html}</template></div><script>{script}</script>"
    )


class StaticFallback:
    """For an ipywidgets widget with figures: displayed in a kernel, it also leaves a picture of
    `static_figures()` for exported pages, redrawn after each cell run while `static_state()`
    changed (not on every slider move: rendering a large figure to HTML takes ~15 ms)."""

    static_note = NOTE  # the line above the picture
    live_selector = ".js-plotly-plot"  # what the live widget draws: the picture steps aside for it
    needs_plotlyjs = True  # the picture is made of plotly figures

    def static_figures(self) -> list:
        """The figures the widget shows now (plotly figures or figure dicts)."""
        raise NotImplementedError

    def static_html(self) -> str:
        """The picture as HTML; by default the figures of static_figures()."""
        return "".join(figure_html(f) for f in self.static_figures())

    def static_state(self) -> tuple:
        """Objects whose identity changes whenever the figures do."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None and WIDGET_VIEW in bundle:
            # what nbconvert shows when the notebook holds no widget state: a mark the picture
            # finds (a live front-end always prefers the widget view)
            bundle["text/html"] = (
                f'<div class="minipipe-widget-static" data-model-id="{html.escape(self.model_id)}"></div>'
            )
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        if not in_kernel():
            return
        if self.needs_plotlyjs:
            ensure_plotlyjs()
        box_id = f"minipipe-static-{uuid.uuid4().hex}"
        handle = display(self._fallback_bundle(box_id), raw=True, display_id=True)
        displays = self.__dict__.setdefault("_static_displays", [])
        displays.append((handle, box_id))
        self._static_drawn = self.static_state()
        _watch(self)

    def _fallback_bundle(self, box_id: str) -> dict:
        html_ = fallback_box(self.static_html(), self.model_id, box_id, self.static_note, self.live_selector)
        return {"text/html": html_, "text/plain": ""}

    def refresh_static(self, force: bool = False) -> None:
        """Redraw the pictures if the figures changed since they were last drawn."""
        state = self.static_state()
        drawn = getattr(self, "_static_drawn", None)
        if not force and drawn is not None and len(drawn) == len(state) and all(a is b for a, b in zip(drawn, state)):
            return
        self._static_drawn = state
        for handle, box_id in getattr(self, "_static_displays", []):
            handle.update(self._fallback_bundle(box_id), raw=True)


_displayed: weakref.WeakSet = weakref.WeakSet()
_hooked = False


def _watch(widget: StaticFallback) -> None:
    global _hooked
    _displayed.add(widget)
    if not _hooked:
        from IPython import get_ipython

        get_ipython().events.register("post_run_cell", _refresh_all)
        _hooked = True


def _refresh_all(result=None) -> None:
    for widget in list(_displayed):
        if getattr(widget, "comm", None) is None:  # closed
            _displayed.discard(widget)
            continue
        try:
            widget.refresh_static()
        except Exception as e:  # a picture never breaks the notebook
            print(f"minipipe: could not redraw the static picture of a widget: {e}")


def drop_cdn_mathjax(text: str) -> str:
    return CDN_MATHJAX.sub("", text)


def mathjax_url() -> str | None:
    """A file URL of a local MathJax 2.7 (the `jupyter-server-mathjax` package), for
    `jupyter nbconvert --HTMLExporter.mathjax_url=...`; None where it is not installed. The
    page then finds it on this machine only, offline."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    script = Path(jupyter_server_mathjax.__file__).parent / "static" / "MathJax.js"
    return script.as_uri() + "?config=TeX-AMS-MML_HTMLorMML-full,Safe" if script.exists() else None
