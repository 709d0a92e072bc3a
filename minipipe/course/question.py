"""Check-yourself questions that a learner answers before she sees the answer.

    ask("How many micro-batches does rank 0 hold?", f"{n}: ... because ...", number=n)
    ask("... under GPipe, and under 1F1B?", "...", numbers={"GPipe": g, "1F1B": o})
    ask("Which costs fewer bytes?", "Neither: ...", choices=["fp32", "bf16", "neither"], correct="neither")

In a kernel (JupyterLab) a question is a widget: the learner types a number (or picks a choice)
and presses Check; only then is her answer judged. Right, she sees the explanation. Wrong, she is
told so (for a number, whether it is too high or too low), and tries again; the answer and the
explanation show after her second wrong try, or at once when she presses "Show the answer",
which appears after her first. An exported page
has no kernel: there the question shows with its choices, and the answer waits in a fold
(<details>) — the static picture of minipipe.viz.offline, which a live front-end keeps hidden.
The expected value is computed in the lesson's cell, like the explanation, never typed.
"""

from __future__ import annotations

import html
import re
from fractions import Fraction

import ipywidgets as W

from ..viz.offline import StaticFallback

RIGHT, WRONG = "#009E73", "#D55E00"  # Okabe–Ito green and vermillion
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?(/(\d+(\.\d*)?|\.\d+))?", re.I)
NOTE = "Think of your answer first, then open the fold (in JupyterLab: type it and press Check)."
TRIES = 2  # wrong answers before the answer shows by itself


def parse_number(text: str) -> float | None:
    """What a learner typed, as a number: '1,234', '27.3 %', '3/11', '2.3×', '−4 ms'; None if
    there is no number at the start."""
    s = str(text).strip().replace("−", "-").replace(",", "").replace("_", "").replace(" ", "")
    found = NUMBER.match(s)
    if not found:
        return None
    try:
        return float(Fraction(found.group(0)))
    except ZeroDivisionError:
        return None


def close_enough(given: float, expected: float, tolerance: float | None = None) -> bool:
    """Exact for a count (an int), else within `tolerance` of it, relative (default 2 %: a
    learner rounds)."""
    if tolerance is None:
        tolerance = 0.0 if isinstance(expected, int) else 0.02
    return abs(given - expected) <= tolerance * abs(expected) + 1e-12


def shown(x) -> str:
    """A number as the verdict states it: a count with thousands separators, else 3 figures."""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


class Question(StaticFallback, W.VBox):
    """One question: inputs, a Check button, the verdict, and the explanation once the learner
    answered right, asked for the answer, or was wrong TRIES times.

    `number` (one value), `numbers` (label -> value) or `choices` with `correct` (one of them);
    `tolerance` is relative (numbers only; default exact for ints, 2 % for floats); `unit` is
    shown after each input."""

    static_note = NOTE
    live_selector = ".widget-subarea"  # where a widget manager draws the live widget
    needs_plotlyjs = False

    def __init__(
        self,
        question: str,
        answer: str,
        *,
        number=None,
        numbers: dict | None = None,
        choices: list | None = None,
        correct=None,
        tolerance: float | None = None,
        unit: str = "",
    ):
        given = [x is not None for x in (number, numbers, choices)]
        if sum(given) != 1:
            raise ValueError(
                "a check-yourself question takes exactly one of number=, numbers= or choices= "
                "(the answer the learner commits to before she sees the explanation)"
            )
        if choices is not None and correct not in choices:
            raise ValueError(f"correct={correct!r} is not one of the choices {choices}")
        self.question, self.answer, self.unit, self.tolerance = question, answer, unit, tolerance
        self.expected = ({"": number} if number is not None else dict(numbers)) if choices is None else {}
        for label, value in self.expected.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"the expected answer{' ' + label if label else ''} must be a number, got {value!r}")
        self.choices, self.correct = choices, correct
        self.wrong_tries, self.revealed = 0, False
        wide = dict(description_width="initial")
        self.inputs = {
            label: W.Text(
                placeholder="your answer",
                description=f"{label} " if label else "",
                style=wide,
                layout=W.Layout(width="220px" if label else "160px"),
            )
            for label in self.expected
        }
        self.choice = (
            W.RadioButtons(options=list(choices), value=None, layout=W.Layout(width="auto"))
            if choices is not None
            else None
        )
        self.button = W.Button(description="Check", tooltip="judge my answer", layout=W.Layout(width="90px"))
        self.show = W.Button(
            description="Show the answer",
            tooltip="the answer and why, without another try",
            layout=W.Layout(width="150px", display="none"),
        )  # offered after a first wrong try
        self.feedback = W.HTML("")
        self.button.on_click(lambda _: self.check())
        self.show.on_click(lambda _: self.reveal())
        header = W.HTML(f"<b>Check yourself:</b> {html.escape(question)}")
        fields = [W.HBox([box, W.HTML(html.escape(unit))]) if unit else box for box in self.inputs.values()]
        buttons = [self.button, self.show]
        row = W.HBox([*fields, *buttons]) if self.choice is None else W.VBox([self.choice, W.HBox(buttons)])
        super().__init__([header, row, self.feedback], layout=W.Layout(margin="8px 0"))
        self.add_class("minipipe-question")
        self.feedback.add_class("minipipe-question-feedback")

    # -- judging ---------------------------------------------------------------------------------
    def check(self) -> bool | None:
        """Judge what the learner gave: True if right (with the explanation), False if not (the
        answer and the explanation only once it is revealed), None (and a hint) if something is
        missing, which costs no try."""
        if self.choice is not None:
            if self.choice.value is None:
                return self._say("Pick one of the choices first.")
            if self.choice.value == self.correct:
                return self._right()
            return self._wrong(
                f"not “{self.choice.value}”", f"you chose “{self.choice.value}”; the answer is “{self.correct}”"
            )
        given = {label: parse_number(box.value) for label, box in self.inputs.items()}
        missing = [label or "your answer" for label, x in given.items() if x is None]
        if missing:
            return self._say(f"Type a number first ({', '.join(missing)}).")
        wrong = [label for label, x in given.items() if not close_enough(x, self.expected[label], self.tolerance)]
        if not wrong:
            return self._right()
        how = {label: "too high" if given[label] > self.expected[label] else "too low" for label in wrong}
        hint = "; ".join(f"{'“' + label + '” ' if label else ''}{how[label]}" for label in wrong)
        right = [f"“{label}”" for label in self.expected if label and label not in wrong]
        hint += f" (right: {', '.join(right)})" if right else ""
        said = "; ".join(
            f"{label + ': ' if label else ''}you said {shown(given[label])}, "
            f"the answer is {shown(self.expected[label])}{self.unit}"
            for label in wrong
        )
        return self._wrong(hint, said)

    def reveal(self) -> None:
        """The answer and the explanation, asked for (or after TRIES wrong tries)."""
        self.revealed = True
        self.show.layout.display = "none"
        self.feedback.value = (
            f'<div style="margin:4px 0 0 0"><b>{html.escape(self._the_answer())}</b><br>'
            f"{html.escape(self.answer)}</div>"
        )

    def _right(self) -> bool:
        self.show.layout.display = "none"
        self._verdict("✓", RIGHT, "Right.", self.answer)
        return True

    def _wrong(self, hint: str, said: str) -> bool:
        self.wrong_tries += 1
        if self.revealed or self.wrong_tries >= TRIES:
            self.revealed = True
            self.show.layout.display = "none"
            self._verdict("✗", WRONG, f"Not right{' either' if self.wrong_tries > 1 else ''} — {said}.", self.answer)
        else:
            self.show.layout.display = ""
            self._verdict("✗", WRONG, f"Not right: {hint}.", "Try again, or press “Show the answer”.")
        return False

    def _the_answer(self) -> str:
        if self.choices is not None:
            return f"The answer: “{self.correct}”."
        return (
            "The answer: "
            + ", ".join(f"{label + ' ' if label else ''}{shown(x)}{self.unit}" for label, x in self.expected.items())
            + "."
        )

    def _say(self, hint: str) -> None:
        self.feedback.value = f"<span>{html.escape(hint)}</span>"
        return None

    def _verdict(self, mark: str, colour: str, verdict: str, then: str) -> None:
        self.feedback.value = (
            f'<div style="margin:4px 0 0 0"><b style="color:{colour}">{mark} '
            f"{html.escape(verdict)}</b><br>{html.escape(then)}</div>"
        )

    # -- the page without a kernel (offline.StaticFallback) -----------------------------------------
    def static_html(self) -> str:
        return question_html(self.question, self.answer, self.expected, self.choices, self.correct, self.unit)

    def static_figures(self) -> list:
        return []

    def static_state(self) -> tuple:
        return ()  # a question's picture never changes


def question_html(
    question: str, answer: str, expected: dict | None = None, choices: list | None = None, correct=None, unit: str = ""
) -> str:
    """The question, its choices in view, the answer folded: how it reads with no kernel."""
    listed = "".join(f"<li>{html.escape(str(c))}</li>" for c in choices) if choices else ""
    if choices:
        value = f"The answer: {html.escape(str(correct))}. "
    elif expected:
        value = (
            "The answer: "
            + ", ".join(
                f"{html.escape(label) + ' ' if label else ''}{shown(x)}{html.escape(unit)}"
                for label, x in expected.items()
            )
            + ". "
        )
    else:
        value = ""
    return (
        f'<div class="minipipe-question-static" style="margin:6px 0"><b>Check yourself:</b> '
        f"{html.escape(question)}{f'<ol type=a>{listed}</ol>' if listed else ''}"
        f'<details style="margin:4px 0 0 18px"><summary>the answer</summary>'
        f'<div style="margin:4px 0 0 18px">{value}{html.escape(answer)}</div></details></div>'
    )
