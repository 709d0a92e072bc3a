"""The decision makers' one-page handout, in English, German and Dutch: HTML from handout.html (beside this
module; its words in handout_text.py), the PDF printed by headless Chromium (A4, one page). Its figures
are the track's notebooks' (minipipe.course.decide).

    python decide/handout.py --out build/handout              every language, HTML and PDF
    python decide/handout.py --out build/handout --lang de --no-pdf
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import tempfile
from pathlib import Path
from string import Template
from typing import Any

from ..planner.presets import MODELS
from . import decide
from .handout_text import TEXT

HERE = Path(__file__).resolve().parent

CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
LANGUAGES = tuple(TEXT)


def figures() -> dict[str, float | int | str]:
    """Every number the handout states, computed as the notebooks compute it."""
    h100 = "h100-sxm"
    bill = decide.training_bill("llama2-70b", "a100-80gb", 1024)
    pipe2, pipe8 = (decide.serving_point("llama2-70b", h100, 1, pp, 1) for pp in (2, 8))
    tensor8 = decide.serving_point("llama2-70b", h100, 8, 1, 1)
    batched = decide.serving_point("llama2-70b", h100, 8, 1, 64)
    return {
        "train_7b": decide.fewest_gpus("llama2-7b", h100) or 0,
        "serve_7b": decide.fewest_gpus_to_serve("llama2-7b", h100),
        "train_70b": decide.fewest_gpus("llama2-70b", h100) or 0,
        "serve_70b": decide.fewest_gpus_to_serve("llama2-70b", h100),
        "train_405b": decide.fewest_gpus("llama3-405b", h100) or 0,
        "serve_405b": decide.fewest_gpus_to_serve("llama3-405b", h100),
        "best_money": bill.best.money / 1e6,
        "best_days": bill.best.days,
        "slowest_money": bill.slowest.money / 1e6,
        "slowest_days": bill.slowest.days,
        "layout_factor": bill.slowest.money / bill.best.money,
        "price_a100": bill.price,
        "published_share": bill.best.gpu_hours / decide.PUBLISHED_GPU_HOURS["llama2-70b"][0],
        "pipe2_ms": pipe2.token_ms,
        "pipe8_ms": pipe8.token_ms,
        "tensor8_ms": tensor8.token_ms,
        "throughput_factor": pipe8.tokens_per_s / pipe2.tokens_per_s,
        "cost_batch1": tensor8.dollars_per_million,
        "cost_batch64": batched.dollars_per_million,
        "batch_factor": tensor8.dollars_per_million / batched.dollars_per_million,
        "model_70b": MODELS["llama2-70b"].name,
        "model_405b": MODELS["llama3-405b"].name,
    }


def claims(lang: str, numbers: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The source text's four business claims: (claim, computed figure, verdict), in `lang`."""
    say = decide.Numbers(lang)
    return [(say.format(c, **numbers), say.format(f, **numbers), v) for c, f, v in TEXT[lang]["claims"]]  # type: ignore[attr-defined]


def claims_table(lang: str, numbers: dict[str, Any]) -> str:
    """The claims as a Markdown table, for the track's fourth notebook."""
    text = TEXT[lang]
    rows = [f"| {text['claim']} | {text['figure']} | {text['verdict']} |", "| --- | --- | --- |"]
    return "\n".join(rows + [f"| {c} | {f} | {v} |" for c, f, v in claims(lang, numbers)])


def render(lang: str, numbers: dict[str, float | int | str] | None = None) -> str:
    """The handout as one self-contained HTML page (no network: no fonts, scripts or images fetched)."""
    if lang not in TEXT:
        raise ValueError(f"unknown language {lang!r}; choose one of {', '.join(LANGUAGES)}")
    numbers = figures() if numbers is None else numbers
    text, say = TEXT[lang], decide.Numbers(lang)

    def put(words: str) -> str:
        return html.escape(say.format(words, **numbers))

    fill = {key: put(value) for key, value in text.items() if isinstance(value, str)}
    fill["questions"] = "\n".join(f"<li>{put(item)}</li>" for item in text["questions"])  # type: ignore[union-attr]
    fill["claims"] = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in claims(lang, numbers)
    )
    table = {key: put(f"{{{key}}}") for key in numbers}
    return Template((HERE / "handout.html").read_text(encoding="utf-8")).substitute(table, **fill, lang=lang)


def browser() -> str | None:
    return next((found for name in CHROMIUM if (found := shutil.which(name))), None)


def print_pdf(page: Path, pdf: Path, chromium: str | None = None) -> None:
    """Print `page` to `pdf` with headless Chromium, offline (no network is needed or allowed)."""
    chromium = chromium or browser()
    if chromium is None:
        raise RuntimeError("printing the PDF needs Chromium: apt-get install -y chromium (or pass --no-pdf)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--no-pdf-header-footer",
                f"--print-to-pdf={pdf}",
                page.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def write(out: Path, languages: tuple[str, ...] = LANGUAGES, pdf: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    numbers, written = figures(), []
    for lang in languages:
        page = out / f"handout-{lang}.html"
        page.write_text(render(lang, numbers), encoding="utf-8")
        written.append(page)
        if pdf:
            print_pdf(page, page.with_suffix(".pdf"))
            written.append(page.with_suffix(".pdf"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The decision makers' one-page handout, HTML and PDF.")
    parser.add_argument("--out", type=Path, default=Path("build/handout"), help="folder to write into")
    parser.add_argument("--lang", choices=LANGUAGES, action="append", help="a language (default: all)")
    parser.add_argument("--no-pdf", action="store_true", help="HTML only (no Chromium needed)")
    args = parser.parse_args(argv)
    for path in write(args.out, tuple(args.lang or LANGUAGES), pdf=not args.no_pdf):
        print(path)
    return 0
