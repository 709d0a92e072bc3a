"""The watch over the learner's code in a sandbox: what it may call, and what it may not do.

Installed once, before any of the learner's code runs, and never removed:

- a profiler on every thread (`sys.setprofile`, and `threading.setprofile` for new threads) sees
  every call. Two lists take turns (the sandbox says which applies): while the check calls the
  learner's code, a call into the domain (domain.py: minipipe, torch's pipelining and parallelisms,
  the frameworks) that is not on the exercise's allowlist is refused; while the learner's cells run,
  only calls into the course's checkers and grader are (the cells may try the engine, as they may
  in JupyterLab: what they compute there cannot cover the sizes the check draws later). A call is
  never refused when its caller is the domain's own code (an allowed tool's insides, the sandbox's
  machinery). Callers are judged by the nearest
  frame that is not a library's (the standard library, torch, ...: those pass a call on), so a call
  through `map` or `sorted` is still the learner's; a thread's own root counts as trusted, since only
  trusted code may start a thread (the learner's code asking for one is refused). The checker's harness (harness.py,
  the code that hands the learner's objects what they need) is never refused itself, and is no more
  trusted as a caller than the learner: what it reaches through the learner's objects is the
  learner's.
- a permanent audit hook (`sys.addaudithook` cannot be undone) refuses, when the learner's code
  asks: switching the profiler or a tracer off or over (sys.setprofile, sys.settrace), starting a
  process or a thread, loading C code (ctypes), changing what the worker processes read of the
  environment (WATCHED_ENV), killing a process, taking the interpreter's frames or objects (sys._getframe from the
  learner's own line, gc), and opening minipipe's source files, the exercises' sources and the
  solutions.

A refusal ends the sandbox at once: `refuse(text)` sends it to the judge and exits the process, so
no try/except of the learner's can swallow it. The watch's state lives in closures, not in module
attributes that the learner's code could reach by importing this module.

What a pure-Python watch cannot promise: code that goes looking for the watch's own closures
(through the profile function the interpreter holds) could unpick it, and code that rewrites the
modules loaded in its own process (torch's hooks, a harness's globals through sys.modules) could
change what a harness observes of its calls. The judge never trusts the sandbox's word for anything
but data, and computes every verdict itself from that data.
"""

from __future__ import annotations

import os
import sys
import threading

from ..i18n import language
from ..i18n.messages import say as _
from ..i18n.messages import translations
from .domain import Domain, Origin, fingerprint

NEUTRAL, UNTRUSTED, TRUSTED, HOME = 0, 1, 2, 3
CHECKER_MODULES = ("minipipe.course.exercises.", "minipipe.course.grading")
# what the worker processes of a real run read of the environment to be watched as the sandbox is (and
# what would let them start something else): changed by the learner's code, refused; the rest is theirs
WATCHED_ENV = ("MINIPIPE_", "PYTHON", "LD_PRELOAD", "LD_LIBRARY_PATH")
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# audit events refused when the learner's code raises them: {event: what it does, in the learner's language}
PROCESS_EVENTS = {
    "subprocess.Popen": lambda: _("starts a process ({call})", call="subprocess"),
    "os.system": lambda: _("runs a shell command (os.system)"),
    "os.exec": lambda: _("replaces the process (os.exec)"),
    "os.posix_spawn": lambda: _("starts a process ({call})", call="os.posix_spawn"),
    "os.spawn": lambda: _("starts a process ({call})", call="os.spawn"),
    "os.fork": lambda: _("starts a process ({call})", call="os.fork"),
    "os.forkpty": lambda: _("starts a process ({call})", call="os.forkpty"),
    "os.kill": lambda: _("signals a process (os.kill)"),
    "os.killpg": lambda: _("signals a process group (os.killpg)"),
    "sys._current_frames": lambda: _("takes the interpreter's frames ({what})", what="sys._current_frames"),
    "sys.setprofile": lambda: _("switches the checker's watch off or over (sys.setprofile)"),
    "sys.settrace": lambda: _("installs a tracer over the checker's watch (sys.settrace)"),
}
# what a refusal says should its wording fail (the learner's code can reach the catalogs' module): in English
UNWORDED = "does something the exercise does not allow"


class Watch:
    """The handles the sandbox keeps: which list applies now (`use`), harness and given code to
    mark, and `judged(code)`: how a refusal would name that code, or None if it may be called."""

    def __init__(self, use, mark_harness, mark_given, judged):
        self.use, self.mark_harness, self.mark_given, self.judged = use, mark_harness, mark_given, judged


def install(
    domain: Domain, lists: dict[str, frozenset], words, refuse, protected: tuple[str, ...], start: str
) -> Watch:
    """Watch this process from now on. `lists`: {name: ("allow" or "deny", fingerprints)} (see
    `refusable`), `start` the one that applies first; `words(origin)` names a refused call in the
    learner's terms (an Origin, or a (file, qualname) of the by-file domain); `refuse(text, where)`
    reports and ends the process; `protected`: path prefixes the learner's code may not open. What a
    refusal says is in the learner's language: the catalogs are read now, before the watch."""
    translations(language())
    state = {"list": lists[start]}
    kinds: dict[int, tuple] = {}  # id(code) -> (code, refusable origin or None, role, home module, fingerprint)
    harness_ids, given_ids, homes, keep = set(), set(), {}, []
    thread_start, fork_exec, getprofile, gettrace = _thread_start(), _fork_exec(), sys.getprofile, sys.gettrace
    frame_helpers = _frame_helpers()
    foreign_c = _foreign_c()
    from .words import c_function

    bootstrap = threading.Thread._bootstrap_inner.__code__
    hook_setters = {id(f.__code__) for f in (threading.setprofile, threading.settrace)}
    importer = _importer_codes()
    busy = threading.local()

    def classify(code):
        if id(code) in harness_ids:
            entry = (code, None, UNTRUSTED, None, None)
        elif id(code) in given_ids:
            entry = (code, None, TRUSTED, None, None)
        else:
            origin = domain.origin(code)
            filename = code.co_filename
            if origin is not None:  # the engine's, or a copy of it: refused as the original; trusted if real
                real = filename in domain.real_files
                entry = (code, origin, HOME if real else UNTRUSTED, domain.module_of.get(filename), fingerprint(code))
            elif domain.is_foreign(filename):
                entry = (code, (filename, code.co_qualname), NEUTRAL, None, None)
            elif filename in domain.real_files or not domain.is_neutral(filename):
                entry = (code, None, UNTRUSTED, None, None)  # the learner's, or code under a borrowed name
            else:
                entry = (code, None, NEUTRAL, None, None)
        kinds[id(code)] = entry
        return entry

    def trusted(frame) -> bool:
        while frame is not None:
            code = frame.f_code
            entry = kinds.get(id(code)) or classify(code)
            role = entry[2]
            if role == NEUTRAL:
                frame = frame.f_back
                continue
            if role == HOME:
                home = entry[3]
                if home not in homes:
                    module = sys.modules.get(home)
                    homes[home] = None if module is None else vars(module)
                return frame.f_globals is homes[home]
            return role == TRUSTED
        return True  # a thread's root: only trusted code may start threads (the learner's are refused)

    def learners(frame) -> bool:
        code = frame.f_code
        return (kinds.get(id(code)) or classify(code))[2] == UNTRUSTED and id(code) not in harness_ids

    def learner_line(frame) -> str:
        """Where the learner's code is: "cell 4 (yours), line 3" in a cell the grader ran, else
        "line 3 of gpipe" (a function sent from a notebook)."""
        while frame is not None:
            if learners(frame):
                code = frame.f_code
                if code.co_filename.startswith("cell "):
                    return _("{cell}, line {line}", cell=code.co_filename, line=frame.f_lineno)
                return _("line {line} of {name}", line=frame.f_lineno, name=code.co_name)
            frame = frame.f_back
        return ""

    def refused(what, frame) -> None:
        """Refuse with what `what()` says, at the learner's line at or above `frame` (None: no line).
        Worded before refusing, and never raising out of the profile function or the audit hook
        (which would switch the one off, or let the learner's code catch the other's error): should
        the wording fail, the refusal says UNWORDED."""
        try:
            text, where = what(), learner_line(frame) if frame is not None else ""
        except Exception:
            text, where = UNWORDED, ""
        refuse(text, where)

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if id(code) in hook_setters and not trusted(frame.f_back):
                refused(
                    lambda: _("switches the checker's watch off for new threads (threading.{name})", name=code.co_name),
                    frame.f_back,
                )
            entry = kinds.get(id(code)) or classify(code)
            if refusable(entry) and not trusted(frame.f_back):
                refused(lambda: words(_as_asked(entry[1], frame.f_back, learners), entry[2] == UNTRUSTED), frame.f_back)
        elif event == "c_call":
            if arg is thread_start or arg is fork_exec or arg is getprofile or arg is gettrace:
                if not trusted(frame):
                    refused(
                        lambda: (
                            _("starts a thread")
                            if arg is thread_start
                            else _("starts a process")
                            if arg is fork_exec
                            else _("looks at the checker's watch (sys.getprofile)")
                        ),
                        frame,
                    )
            elif id(arg) in foreign_c and state["list"][0] == "allow" and not trusted(frame):
                refused(lambda: c_function(*foreign_c[id(arg)]), frame)

    def audit(event, args):
        if event == "object.__getattr__":
            if args[1] not in FRAME_ATTRS or getattr(busy, "on", False):
                return
        elif not (
            event in PROCESS_EVENTS
            or event in ("open", "sys._getframe", "os.putenv", "os.unsetenv")
            or event.startswith(("ctypes.", "gc."))
        ) or getattr(busy, "on", False):
            return
        busy.on = True
        try:
            caller = sys._getframe(1)
            if event == "object.__getattr__":
                if learners(caller):
                    refused(lambda: _("takes the interpreter's frames ({what})", what=args[1]), caller)
            elif event == "open":
                path = os.fsdecode(args[0]) if isinstance(args[0], bytes) else args[0]
                if (
                    isinstance(path, str)
                    and protects(os.path.realpath(path))
                    and not importing(caller)
                    and not trusted(caller)
                ):
                    refused(
                        lambda: _(
                            "opens {path}, which the check keeps to itself (the course's sources and solutions)",
                            path=path,
                        ),
                        caller,
                    )
            elif event == "sys._getframe":
                if learners(caller) or (
                    caller.f_code in frame_helpers and caller.f_back is not None and learners(caller.f_back)
                ):
                    refused(lambda: _("takes the interpreter's frames ({what})", what="sys._getframe"), caller)
            elif event in ("os.putenv", "os.unsetenv"):
                key = os.fsdecode(args[0]) if isinstance(args[0], bytes) else str(args[0])
                if key.startswith(WATCHED_ENV) and not trusted(caller):
                    refused(
                        lambda: _(
                            "changes {key} in the environment, which the processes the check starts read", key=key
                        ),
                        caller,
                    )
            elif event in ("sys.setprofile", "sys.settrace") and caller.f_code is bootstrap:
                if threading._profile_hook is not profile or threading._trace_hook is not None:
                    refused(
                        lambda: _("changed threading's profile or trace hook: a new thread would run unwatched"), None
                    )
            elif not trusted(caller):
                refused(
                    lambda: (
                        PROCESS_EVENTS[event]()
                        if event in PROCESS_EVENTS
                        else _("loads C code (ctypes)")
                        if event.startswith("ctypes.")
                        else _("looks into the interpreter's objects ({event})", event=event)
                    ),
                    caller,
                )
        finally:
            busy.on = False

    def protects(path: str) -> bool:
        return path.startswith(protected) and (path.endswith((".py", ".ipynb")) or "/solutions/" in path)

    def importing(frame) -> bool:
        """Opened by the import system reading a module's code (the profiler judges the module)."""
        return frame.f_code in importer[0] and frame.f_back is not None and frame.f_back.f_code in importer[1]

    def refusable(entry) -> bool:
        """Whether calling `entry`'s code is refused under the list in use: ("allow", fingerprints)
        refuses every call into the domain but those; ("deny", fingerprints) only those."""
        if entry[1] is None:
            return False
        mode, fps = state["list"]
        if mode == "deny":
            return entry[4] in fps
        return entry[4] not in fps and not importable(entry)

    def importable(entry) -> bool:
        """A module of minipipe's own, imported from its file: importing it computes nothing the
        learner could use (a call of what it defines is judged when it is made), so that a refusal
        names the call, not the import. The checkers' and the grader's modules stay refused."""
        origin = entry[1]
        return (
            entry[2] == HOME
            and isinstance(origin, Origin)
            and origin.qualname == "<module>"
            and origin.module.startswith("minipipe")
            and not origin.module.startswith(CHECKER_MODULES)
        )

    def use(name: str) -> None:
        state["list"] = lists[name]

    def judged(code):
        entry = kinds.get(id(code)) or classify(code)
        if refusable(entry):
            return words(entry[1], entry[2] == UNTRUSTED, verb=False)
        return None

    def mark(codes, into):
        for code in codes:
            into.add(id(code))
            kinds.pop(id(code), None)
            keep.append(code)  # alive, so that its id is never another's

    sys.addaudithook(audit)
    threading.setprofile(profile)
    sys.setprofile(profile)
    return Watch(use, lambda codes: mark(codes, harness_ids), lambda codes: mark(codes, given_ids), judged)


def _as_asked(origin, frame, learners):
    """A module refused as it is imported: named as the learner's import asked for it
    (`import minipipe.engine.stage` first runs minipipe/engine/__init__.py, refused there, but
    what the learner asked for is the stage)."""
    if not isinstance(origin, Origin) or origin.qualname != "<module>":
        return origin
    asked = None
    while frame is not None and not learners(frame):
        code = frame.f_code
        if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
            asked = frame.f_locals.get("name")
        frame = frame.f_back
    if isinstance(asked, str) and asked.startswith(origin.module + "."):
        return Origin(asked, "<module>", origin.file)
    return origin


def _foreign_c() -> dict[int, tuple[str, str]]:
    """torch's answers written in C, which the profiler sees only as they are called: {id: (dotted
    name, words)}."""
    from .domain import FOREIGN_C, resolve

    out = {}
    for dotted, said in FOREIGN_C.items():
        try:
            out[id(resolve(dotted))] = (dotted, said)
        except (ImportError, AttributeError):
            pass
    return out


def _thread_start():
    import _thread

    return _thread.start_new_thread


def _fork_exec():
    try:
        import _posixsubprocess

        return _posixsubprocess.fork_exec
    except ImportError:
        return None


def _frame_helpers() -> frozenset:
    """Library functions that hand their caller frames: asked from the learner's code, refused."""
    import inspect
    import traceback

    return frozenset(
        f.__code__
        for f in (
            inspect.currentframe,
            inspect.stack,
            inspect.getouterframes,
            traceback.walk_stack,
            traceback.extract_stack,
            traceback.print_stack,
            traceback.format_stack,
        )
    )


def _importer_codes() -> tuple[frozenset, frozenset]:
    from importlib import _bootstrap_external as ext

    return frozenset({ext.FileLoader.get_data.__code__}), frozenset({ext.SourceLoader.get_code.__code__})
