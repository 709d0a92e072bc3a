"""`minipipe workshop start | grade | materials`: the teacher's commands (README, "Teaching a workshop")."""
from __future__ import annotations


def add_workshop_command(sub) -> None:
    workshop = sub.add_parser("workshop", help="a workshop on one server: JupyterHub with a slice of the machine per "
                                               "participant, the gradebook, slides and notes")
    what = workshop.add_subparsers(dest="workshop_command", required=True)

    start = what.add_parser("start", help="prepare each participant's folder and slice, print the table, start the hub")
    who = start.add_mutually_exclusive_group(required=True)
    who.add_argument("--participants", "-n", type=int, help="how many: they log in as p01, p02, ...")
    who.add_argument("--names", help="their log-in names, comma-separated (ada,alan,...)")
    start.add_argument("--room", default="room", help="the workshop's folder: participants' folders, passwords, the "
                                                       "hub's state (default ./room; starting again reuses it)")
    start.add_argument("--ip", default="0.0.0.0", help="the address the hub listens on (default: all)")
    start.add_argument("--port", type=int, default=8000, help="the hub's port (default 8000)")
    start.add_argument("--password", help="one password for the whole room (at least 8 characters) instead of one "
                                          "made for each participant")
    start.add_argument("--ssl-cert", help="TLS certificate file, for https")
    start.add_argument("--ssl-key", help="TLS key file, for https")
    start.add_argument("--dry-run", action="store_true", help="prepare and print the table, but start no hub")
    start.set_defaults(func=_start)

    grade = what.add_parser("grade", help="minipipe check over every participant's exercises: one table, CSV and HTML")
    grade.add_argument("folder", nargs="?", default="room",
                       help="a workshop's room folder, or a folder with one folder per participant (default ./room)")
    grade.add_argument("--out", default="gradebook", help="where gradebook.csv and gradebook.html go (default ./gradebook)")
    grade.add_argument("--only", help="exercises to check, comma-separated (03_one_f_one_b,...); default all")
    grade.add_argument("--jobs", "-j", type=int, default=1, help="notebooks run at once (default 1)")
    grade.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    grade.set_defaults(func=_grade)

    materials = what.add_parser("materials", help="slides of every lesson (offline), instructor notes with measured "
                                                  "times, the three-hour plan")
    materials.add_argument("--out", default="build/workshop", help="where (default build/workshop)")
    materials.add_argument("--lessons", help="only these lessons, comma-separated (00,01 or 00_start_here)")
    materials.add_argument("--executed", help="a folder of lessons already executed: no lesson is run again")
    materials.add_argument("--timeout", type=float, default=600.0, help="seconds one cell may run (default 600)")
    materials.set_defaults(func=_materials)


def _start(args) -> int:
    from .start import start

    return start(args)


def _grade(args) -> int:
    from .gradebook import grade

    def say(key, mark):
        print(f"{key[0]} {key[1]}: {mark.verdict}", flush=True)

    only = [e.strip() for e in args.only.split(",")] if args.only else None
    book = grade(args.folder, timeout=args.timeout, jobs=args.jobs, only=only, progress=say)
    csv_path, html_path = book.write(args.out)
    print(f"gradebook: {csv_path} and {html_path}")
    return 0


def _materials(args) -> int:
    from .materials import build

    only = [e.strip() for e in args.lessons.split(",")] if args.lessons else None
    build(args.out, only, args.executed, args.timeout)
    print(f"materials: {args.out}/index.html")
    return 0
