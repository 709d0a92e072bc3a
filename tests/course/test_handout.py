"""The decision makers' handout: self-contained HTML in three languages with the track's figures, and a PDF of
exactly one A4 page (printed by headless Chromium: browser-marked)."""

import re
from pathlib import Path

import pytest

from minipipe.course import handout
from minipipe.course.handout_text import TEXT
from tests.support.browser.chromium import CHROMIUM

NUMBERS = handout.figures()  # once: the planner's searches take a few seconds


@pytest.mark.parametrize("lang", handout.LANGUAGES)
def test_the_page_is_offline_and_whole(lang):
    page = handout.render(lang, NUMBERS)
    assert f'<html lang="{lang}">' in page
    assert not re.search(r"https?://|<script|<link|<img|@import|url\(|src=", page), "the page must fetch nothing"
    assert not re.search(r"\{[a-z_0-9]+(:[^}]*)?\}|\$[a-z_]+", page), "a placeholder was left unfilled"
    assert page.count("<li>") == len(TEXT[lang]["questions"]) and page.count("<tr>") == 4 + 1 + 4


def test_every_language_says_the_same_things():
    keys = {lang: set(text) for lang, text in TEXT.items()}
    assert keys["de"] == keys["en"] == keys["nl"]
    for lang, text in TEXT.items():
        assert len(text["claims"]) == len(TEXT["en"]["claims"]) and len(text["questions"]) == len(
            TEXT["en"]["questions"]
        )
        for key, words in text.items():
            if isinstance(words, str):
                assert set(re.findall(r"\{(\w+)", words)) == set(re.findall(r"\{(\w+)", TEXT["en"][key])), (lang, key)


def test_the_figures_are_the_tracks():
    from minipipe.course import decide

    bill = decide.training_bill("llama2-70b", "a100-80gb", 1024)
    assert NUMBERS["layout_factor"] == bill.slowest.money / bill.best.money
    assert NUMBERS["train_405b"] == decide.fewest_gpus("llama3-405b", "h100-sxm")
    en, de = handout.render("en", NUMBERS), handout.render("de", NUMBERS)
    assert f"{NUMBERS['best_money']:.1f} M" in en
    assert f"{NUMBERS['best_money']:.1f}".replace(".", ",") + " Mio." in de  # the German decimal comma
    assert "1.024 A100" in de and "1,024 A100s" in en


def test_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="choose one of en, de, nl"):
        handout.render("fr", NUMBERS)


def pages(pdf: Path) -> int:
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf.read_bytes()))


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_each_pdf_is_one_a4_page(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("printing the PDF needs /usr/bin/chromium (apt-get install -y chromium)")
    written = handout.write(tmp_path, pdf=True)
    pdfs = [p for p in written if p.suffix == ".pdf"]
    assert len(pdfs) == len(handout.LANGUAGES)
    for pdf in pdfs:
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF") and pages(pdf) == 1, f"{pdf.name}: {pages(pdf)} pages"
        box = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", data)
        assert box and (round(float(box[1])), round(float(box[2]))) == (595, 842), "not A4"  # points
