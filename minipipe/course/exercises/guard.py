"""The engine's answers out of reach while a learner's function runs.

An exercise asks for something minipipe already knows: a schedule, a formula, a cut, an autograd
function. While a checker runs the learner's function, every engine function that would be the
answer refuses, however it is reached: imported under another name or from another path, through
importlib (a reloaded module too), a lambda, a module attribute, a bound method, a thread started
meanwhile. A profiler (`sys.setprofile`, and `threading.setprofile` for new threads) watches every
Python call and stops at the first into one of those functions, recognised by the code it runs
(file, first line and name), not by how it was looked up.

    value = ask(fn, 3, 4, name="gpipe(3, 4)", answers=SCHEDULES, advice="write the order yourself")

raises a Mistake such as "gpipe(3, 4) calls the engine's own GPipe (minipipe.schedule.generators.gpipe);
write the order yourself". The learner's result is made plain (`take`) inside the watch, so that a
lazy value (a generator, an object that computes when read) cannot call the engine later.

What no watch can see is a result copied into a literal beforehand (a table of the engine's
schedules, a pasted text). The checkers meet that with cases drawn afresh at every check, larger
than a table would hold, and with exercises whose answer the engine's own output does not satisfy.
"""
from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import types
from typing import Callable, Iterable

from .verdict import Mistake, call

Answers = dict            # {function, class or module: what it is, in the learner's terms}


class _Reached(BaseException):
    """Raised into the learner's code where it calls an engine answer. A BaseException, so that the
    learner's own `except Exception:` does not swallow it (and if a bare `except:` does, the watch
    still remembers)."""


def _code_objects(obj) -> Iterable[types.CodeType]:
    if isinstance(obj, types.ModuleType):
        for value in vars(obj).values():
            if getattr(value, "__module__", None) == obj.__name__ and (inspect.isfunction(value) or inspect.isclass(value)):
                yield from _code_objects(value)
    elif inspect.isclass(obj):
        for value in vars(obj).values():
            target = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if inspect.isfunction(target):
                yield from _code_objects(target)
    else:
        fn = inspect.unwrap(getattr(obj, "__func__", obj))
        if hasattr(fn, "__code__"):
            stack = [fn.__code__]
            while stack:                       # the function and the functions defined inside it
                code = stack.pop()
                yield code
                stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]


def _key(code: types.CodeType) -> tuple:
    return code.co_filename, code.co_firstlineno, code.co_name


def _where(obj) -> str:
    module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    name = getattr(obj, "__qualname__", None)
    return f"{module}.{name}" if name and not isinstance(obj, types.ModuleType) else module


class Watch:
    """The profiler: stops at the first call into one of `answers` and remembers which."""

    def __init__(self, answers: Answers):
        self.says: dict[tuple, str] = {}
        # a function's own words before its class's or module's: make_schedule is named as itself
        for obj, what in sorted(answers.items(), key=lambda item: (inspect.isclass(item[0]),
                                                                   isinstance(item[0], types.ModuleType))):
            for code in _code_objects(obj):
                if not code.co_filename.startswith("<"):    # code made by exec (a dataclass's __init__) is shared
                    self.says.setdefault(_key(code), f"{what} ({_where(obj)})")
        self.files = {key[0] for key in self.says}
        self.reached: str | None = None

    def __call__(self, frame, event, arg):
        if event != "call" or frame.f_code.co_filename not in self.files:
            return
        said = self.says.get(_key(frame.f_code))
        if said is not None:
            self.reached = self.reached or said
            raise _Reached(said)


@contextlib.contextmanager
def watching(answers: Answers):
    """Run the block with `answers` out of reach; yields the Watch (its `reached` says what was
    called). A block that switched the watch off itself is refused."""
    watch = Watch(answers)
    before, before_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(watch)
    threading.setprofile(watch)
    try:
        yield watch
    except _Reached:
        pass
    finally:
        still = sys.getprofile() is watch
        sys.setprofile(before)
        threading.setprofile(before_threads)
    if not still and watch.reached is None:
        raise Mistake("your code switched off the checker's watch (sys.setprofile) while it ran; the check needs "
                      "it to see that the answer is your own work")


def ask(fn: Callable, *args, name: str, answers: Answers, advice: str, take: Callable = lambda value: value,
        **kwargs):
    """Call the learner's `fn(*args, **kwargs)` with `answers` out of reach, and `take` its result
    (make it plain) inside the watch. A call into an answer is a Mistake that names it."""
    with watching(answers) as watch:
        value = take(call(fn, *args, name=name, **kwargs))
    if watch.reached:
        raise Mistake(f"{name} calls {watch.reached}; {advice}")
    return value


# -- what is out of reach, exercise by exercise ---------------------------------------------------
def schedules() -> Answers:
    """Every way to have minipipe write a schedule: the generators, the registry, the run config."""
    from ...engine import config
    from ...schedule import generators, kinds

    return {generators.gpipe: "the engine's own GPipe", generators.one_f_one_b: "the engine's own 1F1B",
            generators.interleaved_1f1b: "the engine's own interleaved 1F1B", generators.zb_h1: "the engine's own ZB-H1",
            generators.naive: "the engine's own naive schedule", generators.inference: "the engine's own schedules",
            kinds.make_schedule: "make_schedule, the engine's own schedules",
            kinds.get: "the engine's registry of schedules", config.prepare: "the engine's own run set-up"}


def formulas() -> Answers:
    """The textbook formulas (theory, and the registry's lambdas behind them) and the simulator."""
    from ... import trace
    from ...schedule import kinds, theory
    from ...schedule.ir import Schedule
    from ...sim import pipeline

    lambdas = {fn: "the engine's own formulas in its registry of schedules" for kind in kinds.KINDS.values()
               for fn in (kind.makespan, kind.peak_inflight) if fn is not None}
    return {**lambdas, theory: "the engine's own formulas", kinds: "the engine's registry of schedules",
            pipeline.simulate: "the engine's simulator", trace.Trace.peak_inflight: "the simulator's count of micro-batches held",
            Schedule.messages.func: "the engine's own count of messages"}


def partitioner() -> Answers:
    from ...engine import partition

    return {partition.split_evenly: "the engine's own partitioner", partition.partition: "the engine's own partitioner",
            partition._cheapest_split: "the engine's own partitioner"}


def profiler() -> Answers:
    from ...engine import partition

    return {partition.profile_layers: "the engine's own profiler", partition._forward_backward: "the engine's own profiler"}


def stage_steps() -> Answers:
    """The engine's own forward and backward of a stage, and the training loop around them."""
    from ...engine import execute, launch, stage, train

    return {stage.Stage.forward: "the engine's own stage forward (Stage.forward)",
            stage.Stage.backward: "the engine's own stage backward (Stage.backward)",
            stage.Stage.backward_input: "the engine's own stage backward", stage.Stage.backward_weight:
            "the engine's own stage backward", stage.Stage._run: "the engine's own stage forward",
            execute.Executor: "the engine's own executor", train: "the engine's own training loop",
            launch.run: "the engine's run", launch.run_many: "the engine's run"}


def tensor_parallel() -> Answers:
    from ...parallel import tensor

    return {tensor.CopyToTP: "the engine's own f (CopyToTP)", tensor.ReduceFromTP: "the engine's own g (ReduceFromTP)",
            tensor.GatherFromTP: "the engine's own all-gather", tensor.collective: "the engine's own collectives",
            tensor.ColumnParallelLinear: "the engine's own column-parallel layer",
            tensor.RowParallelLinear: "the engine's own row-parallel layer"}


def data_parallel() -> Answers:
    from torch.nn.parallel import DistributedDataParallel

    from ...parallel import data

    return {data.assign_buckets: "the engine's own bucketing (assign_buckets)", data.GradReducer: "the engine's own "
            "gradient reducer (GradReducer)", DistributedDataParallel: "torch's own DistributedDataParallel"}


def serving() -> Answers:
    """The engine's model of a request stream and its rounds: the stream itself (its arrivals and
    when each micro-batch is complete), the serving simulator, the replay under both, the rounds."""
    from ...schedule import replay, rounds
    from ...schedule.validate import validated_replay
    from ...sim import request_stream as served

    return {served.simulate_serving: "the engine's serving simulator (simulate_serving)",
            served.result_of: "the engine's serving simulator", served.StreamResult: "the engine's serving results",
            served.Stream: "the engine's own stream of requests (Stream)", served.ServeCosts: "the engine's serving "
            "cost model (ServeCosts)", replay.replay: "the engine's replay of a schedule (the simulator's core)",
            validated_replay: "the engine's replay of a schedule (the simulator's core)",
            rounds.repeat: "the engine's own generation rounds (repeat)", rounds.Rounds: "the engine's own generation "
            "rounds (Rounds)"}


def sharded() -> Answers:
    """FSDP's and ZeRO's arithmetic: frameworks/fsdp.py (its formula, its padded units, its ring
    share), the ring formula itself, the byte accounting, and the planner's memory and cost model."""
    from ... import traffic
    from ...frameworks import fsdp
    from ...parallel import accounting
    from ...planner import footprint as memory, search, shapes
    from ...planner.evaluate import evaluate

    return {fsdp.formula_bytes: "FSDP's own byte formula (frameworks/fsdp.py)", fsdp.unit_bytes: "FSDP's own padded "
            "unit sizes (frameworks/fsdp.py)", fsdp.ring_share: "the engine's ring formula", fsdp: "minipipe's FSDP "
            "(frameworks/fsdp.py)", traffic.ring_bytes: "the engine's ring formula (traffic.ring_bytes)",
            accounting: "the engine's byte and memory accounting", memory: "the planner's memory model",
            shapes.bytes_per_parameter: "the planner's bytes per parameter", evaluate: "the planner's cost model "
            "(evaluate)", search: "the planner's search"}
