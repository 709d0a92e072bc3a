"""The models minipipe trains: the course's MLP and tiny GPT (course.py, built from layers.py), and
your own (custom.py), all behind one interface, the `Task` (task.py); `make_task` picks one by
name (catalog.py).
"""

from .catalog import make_task, task_of
from .course import TASKS, GPTTask, MLPTask
from .layers import Block, Embedding, Readout, ResidualLinear
from .task import Task, seeded

__all__ = [
    "make_task",
    "task_of",
    "Task",
    "seeded",
    "TASKS",
    "MLPTask",
    "GPTTask",
    "Block",
    "Embedding",
    "Readout",
    "ResidualLinear",
]
