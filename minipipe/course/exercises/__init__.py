"""The exercises' checks (exercises/*.ipynb): each says, in the learner's terms, what is right and
what is not, and raises NotDoneYet or WrongAnswer (both ExerciseError) when not all is right.

    from minipipe.course.exercises import check_gpipe
    check_gpipe(my_gpipe)        # ✓ 5/5 checks passed, or what failed, with the grid or the numbers

A check never judges in the learner's own process: `check_gpipe(my_gpipe)` sends the learner's
functions by value to a fresh judge (minipipe/course/grading/), which runs them in a sandbox under
the exercise's allowlist (each checker module's ALLOWED) and computes the verdict itself, the same
verdict `minipipe check` and the workshop's gradebook give. The checkers themselves (one module per
exercise) are imported by the judge only.
"""

from __future__ import annotations

from .verdict import ExerciseError, NotDoneYet, WrongAnswer

CHECKERS = {
    "check_loss_scaling": "loss",
    "check_gpipe": "gpipe",
    "check_one_f_one_b": "one_f_one_b",
    "check_deadlock_fixed": "deadlock",
    "check_memory_budget": "memory",
    "check_stage_step": "baton",
    "check_interleaved": "interleaved",
    "check_balance": "balance",
    "check_bubble_arithmetic": "bubble",
    "check_zero_bubble": "zero_bubble",
    "check_tensor_parallel": "tensor_parallel",
    "check_data_parallel": "data_parallel",
    "check_layout": "layout",
    "check_serving": "serving",
    "check_sharded": "sharded",
    "check_beat_the_search": "searched",
}


def _check(name: str):
    def check(*answers, timeout: float = 600.0) -> None:
        import os

        if os.environ.get("MINIPIPE_SANDBOX"):  # a check called in a cell the grader runs: the grader judges
            print(f"({name} is not run inside the grader: the grader calls the course's own check)")
            return
        from ..grading.run import judge_objects

        result = judge_objects(name, answers, timeout)
        if result.status == "passed":
            print(result.text)
            return
        raise (NotDoneYet if result.status == "not done yet" else WrongAnswer)(result.text)

    check.__name__ = check.__qualname__ = name
    check.__doc__ = (
        f"Check your answer to the exercise: the course's grader judges it in fresh processes, with "
        f"the exercise's own checker ({CHECKERS[name]}.py), and prints the verdict; NotDoneYet or "
        f"WrongAnswer if not all is right."
    )
    return check


for _name in CHECKERS:
    globals()[_name] = _check(_name)

__all__ = ["ExerciseError", "NotDoneYet", "WrongAnswer", *CHECKERS]
