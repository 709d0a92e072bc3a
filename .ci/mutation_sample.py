"""A seeded sample of mutmut's mutants, per area of the torch-free core and the exercise checkers, run
and scored (`make mutation-sample`; `make mutation` runs them all, which takes hours on 2 cores).

    python .ci/mutation_sample.py [PER_AREA] [--seed N] [--only AREA] [--full]

mutmut writes the mutants into mutants/ and runs, for each one, the tests that reached its function
(it first runs every selected test once, watching which functions each reaches: that dominates a
sample's time). The sample runs in build/mutation-sample/, a copy of the checkout whose [tool.mutmut]
selects only QUICK_TESTS (--full: pyproject.toml's own selection, in the checkout itself); it picks
PER_AREA mutants per area, runs those, and prints killed / survived per area with the survivors'
names (`mutmut show NAME` in that folder shows one), and the killed ones a timeout stopped (mutmut's
fork server stops a worker past its time: a mutant that loops, or a hang of the tooling's). Exit
status 1 when the share killed is under --target (default 0: a sample reports, it does not gate).
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import random
import shutil
import subprocess
import sys

CHECKOUT = pathlib.Path(__file__).resolve().parent.parent
SCRATCH = CHECKOUT / "build" / "mutation-sample"
ROOT = CHECKOUT
# the tests that kill most of the sample's mutants in the least time (the schedule's, the simulator's, the
# formulas', the limits', the planner's search space and the schedule exercises' checkers)
QUICK_TESTS = [
    "tests/schedule/test_kinds.py",
    "tests/schedule/test_schedule.py",
    "tests/sim/test_simulate.py",
    "tests/planner/test_formulas.py",
    "tests/test_limits_core.py",
    "tests/planner/test_plan_space.py",
    "tests/course/test_exercise_schedules.py",
]
# each area's own tests that start no process (--area-tests): pyproject.toml's selection, `make mutation`'s
SELECTION = "\npytest_add_cli_args_test_selection = ["


def _selection(text: str) -> tuple[int, int]:
    """Where [tool.mutmut]'s test selection, a list of strings, stands in pyproject.toml's text."""
    start = text.index(SELECTION) + len(SELECTION) - 1
    return start, text.index("]", start) + 1


_TEXT = (CHECKOUT / "pyproject.toml").read_text()
AREA_TESTS = ast.literal_eval(_TEXT[slice(*_selection(_TEXT))])
AREAS = {
    "schedule": "minipipe/schedule",
    "sim": "minipipe/sim",
    "planner": "minipipe/planner",
    "traffic": "minipipe/traffic.py",
    "trace": "minipipe/trace.py",
    "exercises": "minipipe/course/exercises",
}
MUTMUT = [str(pathlib.Path(sys.executable).with_name("mutmut"))]
# mutmut's exit codes (mutmut.stats.status_by_exit_code): 1 and 3 a test failed, the others a timeout
# (a mutant that loops) or the type check; 0 every test passed, 5 and 33 no test reached it
KILLED, SURVIVED = {1, 3, 36, -24, 24, 152, 255, 37}, {0, 5, 33}
TIMED_OUT = {36, -24, 24, 152, 255}  # of the killed: named apart, a hang could be the tooling's


def metas(area: str) -> list[pathlib.Path]:
    path = ROOT / "mutants" / AREAS[area]
    return sorted(path.rglob("*.py.meta")) if path.is_dir() else [path.with_name(path.name + ".meta")]


def names(area: str) -> list[str]:
    out = []
    for meta in metas(area):
        if meta.exists():
            out += json.loads(meta.read_text())["exit_code_by_key"]
    return sorted(out)


def statuses() -> dict[str, int | None]:
    out = {}
    for area in AREAS:
        for meta in metas(area):
            if meta.exists():
                out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def scratch_copy(tests: list[str]) -> pathlib.Path:
    """build/mutation-sample/: the package, tests, exercises, lessons and catalogs copied, pyproject.toml
    with [tool.mutmut] selecting `tests`; mutants/ of an earlier sample kept while the sources match."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    for name in ("minipipe", "tests", "exercises", "lessons", "i18n"):
        if (SCRATCH / name).exists():
            shutil.rmtree(SCRATCH / name)
        shutil.copytree(CHECKOUT / name, SCRATCH / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(CHECKOUT / "README.md", SCRATCH / "README.md")
    text = (CHECKOUT / "pyproject.toml").read_text()
    start, end = _selection(text)
    files = sorted(str(f.relative_to(CHECKOUT)) for t in tests for f in CHECKOUT.glob(t))
    quick = "[" + ", ".join(f'"{t}"' for t in files) + "]"
    (SCRATCH / "pyproject.toml").write_text(text[:start] + quick + text[end:])
    return SCRATCH


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("per_area", nargs="?", type=int, default=12)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--only", choices=list(AREAS), action="append")
    ap.add_argument("--target", type=float, default=0.0, help="fail below this share killed (0..1)")
    ap.add_argument("--full", action="store_true", help="pyproject.toml's whole test selection, in the checkout")
    ap.add_argument("--area-tests", action="store_true", help="each area's own tests (AREA_TESTS), not the quick ones")
    args = ap.parse_args(argv)
    global ROOT
    ROOT = CHECKOUT if args.full else scratch_copy(AREA_TESTS if args.area_tests else QUICK_TESTS)
    areas = args.only or list(AREAS)
    if not all(names(a) for a in areas):  # mutmut writes mutants/ (and its stats) on its first run
        subprocess.run(MUTMUT + ["run", "--max-children", "2", "no-such-mutant"], cwd=ROOT, check=False)
    rng = random.Random(args.seed)
    picked = {a: sorted(rng.sample(names(a), min(args.per_area, len(names(a))))) for a in areas}
    chosen = [n for a in areas for n in picked[a]]
    with open(ROOT / "mutmut-run.log", "w") as log:  # its progress, and why it stopped if it did
        subprocess.run(MUTMUT + ["run", "--max-children", "2", *chosen], cwd=ROOT, stdout=log, stderr=log, check=False)
    status = statuses()
    scored = {}
    for a in areas:
        k = [n for n in picked[a] if status.get(n) in KILLED]
        s = [n for n in picked[a] if status.get(n) in SURVIVED]
        scored[a] = (k, s)
        other = [f"{n} ({status.get(n)})" for n in picked[a] if status.get(n) not in KILLED | SURVIVED]
        print(
            f"{a:10} tried {len(picked[a]):3}  killed {len(k):3}  survived {len(s):3}"
            + (f"  other {len(other)}" if other else "")
        )
        for n in s:
            print(f"    survived: {n}")
        for n in k:
            if status.get(n) in TIMED_OUT:
                print(f"    killed by a timeout: {n}")
        for n in other:
            print(f"    not scored: {n}")
    if any(status.get(n) is None for n in chosen):
        print(f"mutmut left mutants unscored: its output is in {ROOT / 'mutmut-run.log'}")
    killed, survived = (sum(len(pair[i]) for pair in scored.values()) for i in (0, 1))
    score = killed / max(1, killed + survived)
    print(f"score: {killed}/{killed + survived} killed ({score:.0%})")
    # the sample takes as many of each area's mutants, the full run counts each area by its size
    shares = {a: len(k) / (len(k) + len(s)) for a, (k, s) in scored.items() if k or s}
    sizes = {a: len(names(a)) for a in shares}
    weighted = sum(sizes[a] * shares[a] for a in shares) / max(1, sum(sizes.values()))
    print(f"weighted by each area's mutants ({', '.join(f'{a} {sizes[a]}' for a in shares)}): {weighted:.0%}")
    return 1 if score < args.target else 0


if __name__ == "__main__":
    sys.exit(main())
