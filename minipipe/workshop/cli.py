"""`minipipe workshop start | status | stop | cleanup | grade | materials`: the teacher's commands
(README, "Teaching a workshop")."""

from __future__ import annotations


def add_workshop_command(sub) -> None:
    workshop = sub.add_parser(
        "workshop",
        help="a workshop on one server: JupyterHub with a slice of the machine per "
        "participant, the gradebook, slides and notes",
    )
    what = workshop.add_subparsers(dest="workshop_command", required=True)

    start = what.add_parser("start", help="prepare each participant's folder and slice, print the table, start the hub")
    who = start.add_mutually_exclusive_group(required=True)
    who.add_argument("--participants", "-n", type=int, help="how many: they log in as p01, p02, ...")
    who.add_argument("--names", help="their log-in names, comma-separated (ada,alan,...)")
    start.add_argument(
        "--room",
        default="room",
        help="the workshop's folder: participants' folders, passwords, the "
        "hub's state (default ./room; starting again reuses it)",
    )
    start.add_argument("--ip", default="0.0.0.0", help="the address the hub listens on (default: all)")
    start.add_argument("--port", type=int, default=8000, help="the hub's port (default 8000)")
    start.add_argument(
        "--password",
        help="one password for the whole room (at least 8 characters) instead of one made for each participant",
    )
    start.add_argument("--ssl-cert", help="TLS certificate file, for https")
    start.add_argument("--ssl-key", help="TLS key file, for https")
    start.add_argument(
        "--memory",
        type=float,
        help="GiB of memory for each participant (their server, kernels and "
        "ranks together; default: an equal share of the machine's)",
    )
    start.add_argument(
        "--max-tasks", type=int, help="processes and threads each participant may run at once (default 1024)"
    )
    start.add_argument("--no-limits", action="store_true", help="make no cgroups: memory and tasks are not limited")
    start.add_argument(
        "--same-user",
        action="store_true",
        help="run every participant's server as the hub's user, even as root: participants NOT kept apart",
    )
    start.add_argument("--dry-run", action="store_true", help="prepare and print the table, but start no hub")
    start.set_defaults(func=_start)

    status = what.add_parser("status", help="each participant's server, kernels, runs, memory and cores, now")
    status.add_argument("--room", default="room", help="the workshop's folder (default ./room)")
    status.add_argument("--processes", "-p", action="store_true", help="also list every process of each participant")
    status.set_defaults(func=_status)

    stop = what.add_parser("stop", help="end one participant's runs (their ranks); their server and kernels stay")
    stop.add_argument("name", help="the participant")
    stop.add_argument("--room", default="room", help="the workshop's folder (default ./room)")
    stop.add_argument(
        "--kernels",
        action="store_true",
        help="their kernels and terminals too (JupyterLab offers to restart them; unsaved variables are lost)",
    )
    stop.set_defaults(func=_stop)

    cleanup = what.add_parser(
        "cleanup",
        help="after the workshop: remove the Unix users made for the room (their "
        "processes ended, their folders kept, given to root)",
    )
    cleanup.add_argument("--room", default="room", help="the workshop's folder (default ./room)")
    cleanup.set_defaults(func=_cleanup)

    grade = what.add_parser("grade", help="minipipe check over every participant's exercises: one table, CSV and HTML")
    grade.add_argument(
        "folder",
        nargs="?",
        default="room",
        help="a workshop's room folder, or a folder with one folder per participant (default ./room)",
    )
    grade.add_argument(
        "--out", default="gradebook", help="where gradebook.csv and gradebook.html go (default ./gradebook)"
    )
    grade.add_argument("--only", help="exercises to check, comma-separated (03_one_f_one_b,...); default all")
    grade.add_argument("--jobs", "-j", type=int, default=1, help="notebooks run at once (default 1)")
    grade.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    grade.set_defaults(func=_grade)

    materials = what.add_parser(
        "materials", help="slides of every lesson (offline), instructor notes with measured times, the three-hour plan"
    )
    materials.add_argument("--out", default="build/workshop", help="where (default build/workshop)")
    materials.add_argument("--lessons", help="only these lessons, comma-separated (00,01 or 00_start_here)")
    materials.add_argument("--executed", help="a folder of lessons already executed: no lesson is run again")
    materials.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    materials.set_defaults(func=_materials)


def _start(args) -> int:
    from .start import start

    return start(args)


def _room_tables(room: str) -> tuple[dict, dict, dict | None]:
    import json
    from pathlib import Path

    hub = Path(room) / "hub"
    if not (hub / "slices.json").exists():
        raise ValueError(
            f"{room} is not a workshop's room folder (no hub/slices.json): give the folder "
            f"`minipipe workshop start --room` was given (default ./room)"
        )
    slices = json.loads((hub / "slices.json").read_text())
    saved = json.loads((hub / "limits.json").read_text()) if (hub / "limits.json").exists() else {}
    return slices, saved.get("limits", {}), saved.get("cgroups")


def _status(args) -> int:
    from .limits import Cgroups
    from .procs import process_list, room_processes, status_table

    slices, limits, cgroups = _room_tables(args.room)
    groups = Cgroups.from_settings(cgroups)
    counted = {name: groups.tasks(name) for name in slices} if groups else {}
    procs = room_processes(args.room)
    print(status_table(procs, slices, limits, counted))
    from .accounts import room_accounts

    accounts = room_accounts(args.room)
    if accounts:
        print(
            "each runs as their own Unix user: "
            + ", ".join(f"{n} as {a.login} (uid {a.uid})" for n, a in accounts.items())
        )
    if args.processes:
        for name in slices:
            print(f"{name}:\n{process_list(procs, name)}")
    return 0


def _stop(args) -> int:
    from .procs import room_processes, stop_runs

    slices, _, _ = _room_tables(args.room)
    if args.name not in slices:
        raise ValueError(f"{args.name!r} is not in this room; its participants: {', '.join(slices)}")
    stopped = stop_runs(room_processes(args.room), args.name, kernels=args.kernels)
    what = "runs and kernels" if args.kernels else "runs"
    print(
        f"{args.name}: {len(stopped)} process{'es' if len(stopped) != 1 else ''} of their {what} stopped"
        + (f" (pids {', '.join(map(str, stopped[:10]))}{', ...' if len(stopped) > 10 else ''})" if stopped else "")
    )
    return 0


def _cleanup(args) -> int:
    from pathlib import Path

    from .accounts import remove_accounts
    from .procs import alive

    hub = Path(args.room) / "hub"
    if not hub.is_dir():
        raise ValueError(
            f"{args.room} is not a workshop's room folder (no hub/): give the folder `minipipe workshop "
            f"start --room` was given (default ./room)"
        )
    pid_file = hub / "jupyterhub.pid"
    if pid_file.exists() and pid_file.read_text().strip().isdigit() and alive(int(pid_file.read_text())):
        raise ValueError(
            f"the room's hub still runs (pid {pid_file.read_text().strip()}): stop it first (Ctrl-C where "
            f"it runs, or kill that pid)"
        )
    removed = remove_accounts(args.room)
    print(
        f"removed {len(removed)} Unix user{'s' if len(removed) != 1 else ''} of the room"
        + (f": {', '.join(removed)}; their folders are root's now, with all in them" if removed else "")
    )
    return 0


def _grade(args) -> int:
    from .gradebook import grade

    def say(key, mark):
        print(f"{key[0]} {key[1]}: {mark.verdict}" + "".join(f" (⚑ {note})" for note in mark.notes), flush=True)

    only = [e.strip() for e in args.only.split(",")] if args.only else None
    book = grade(args.folder, timeout=args.timeout, jobs=args.jobs, only=only, progress=say)
    for nb in book.not_graded:
        print(f"not graded (not an exercise's name; --only NAME grades it): {nb}")
    csv_path, html_path = book.write(args.out)
    print(f"gradebook: {csv_path} and {html_path}")
    return 0


def _materials(args) -> int:
    from .materials import build

    only = [e.strip() for e in args.lessons.split(",")] if args.lessons else None
    build(args.out, only, args.executed, args.timeout)
    print(f"materials: {args.out}/index.html")
    return 0
