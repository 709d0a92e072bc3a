"""The exercises' checkers (exercises/*.ipynb): each says, in the learner's terms, what is right
and what is not, and raises NotDoneYet or WrongAnswer (both ExerciseError) when not all is right.

    from minipipe.course.exercises import check_gpipe
    check_gpipe(my_gpipe)        # ✓ 5/5 checks passed, or what failed, with the grid or the numbers

While a checker runs the learner's code, the engine's own answers refuse to answer (guard.py), and
the cases are drawn afresh at every check: the checkers judge the learner's work by properties,
never by a copy of the engine's output.
"""
from .balance import check_balance
from .baton import check_stage_step
from .bubble import check_bubble_arithmetic
from .data_parallel import check_data_parallel
from .deadlock import check_deadlock_fixed
from .gpipe import check_gpipe
from .interleaved import check_interleaved
from .layout import check_layout
from .loss import check_loss_scaling
from .memory import check_memory_budget
from .one_f_one_b import check_one_f_one_b
from .searched import check_beat_the_search
from .serving import check_serving
from .sharded import check_sharded
from .tensor_parallel import check_tensor_parallel
from .verdict import ExerciseError, NotDoneYet, WrongAnswer
from .zero_bubble import check_zero_bubble

__all__ = ["ExerciseError", "NotDoneYet", "WrongAnswer", "check_balance", "check_beat_the_search", "check_bubble_arithmetic",
           "check_data_parallel", "check_deadlock_fixed", "check_gpipe", "check_interleaved", "check_layout",
           "check_loss_scaling", "check_memory_budget", "check_one_f_one_b", "check_serving", "check_sharded", "check_stage_step",
           "check_tensor_parallel", "check_zero_bubble"]
