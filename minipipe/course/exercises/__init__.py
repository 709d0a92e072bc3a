"""The exercises' checkers (exercises/*.ipynb): each says, in the learner's terms, what is right
and what is not, and raises NotDoneYet or WrongAnswer (both ExerciseError) when not all is right.

    from minipipe.course.exercises import check_gpipe
    check_gpipe(my_gpipe)        # ✓ 4/4 checks passed, or what failed, with the grid or the numbers
"""
from .balance import check_balance
from .baton import check_stage_step
from .bubble import check_bubble_arithmetic
from .deadlock import check_deadlock_fixed
from .gpipe import check_gpipe
from .layout import check_layout
from .loss import check_loss_scaling
from .memory import check_memory_budget
from .one_f_one_b import check_one_f_one_b
from .verdict import ExerciseError, NotDoneYet, WrongAnswer

__all__ = ["ExerciseError", "NotDoneYet", "WrongAnswer", "check_balance", "check_bubble_arithmetic",
           "check_deadlock_fixed", "check_gpipe", "check_layout", "check_loss_scaling", "check_memory_budget",
           "check_one_f_one_b", "check_stage_step"]
