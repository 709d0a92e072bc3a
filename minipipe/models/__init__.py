"""The models minipipe trains: the course's MLP, tiny GPT and its mixture-of-experts form (course.py,
built from layers.py and moe.py), and your own (custom.py), all behind one interface, the `Task`
(task.py); `make_task` picks one by name (catalog.py).
"""

from .catalog import make_task, task_of
from .course import TASKS, GPTTask, MLPTask, MoETask
from .layers import Block, Embedding, Readout, ResidualLinear
from .moe import MoE, MoEBlock
from .task import Task, seeded

__all__ = [
    "make_task",
    "task_of",
    "Task",
    "seeded",
    "TASKS",
    "MLPTask",
    "GPTTask",
    "MoETask",
    "Block",
    "Embedding",
    "Readout",
    "ResidualLinear",
    "MoE",
    "MoEBlock",
]
