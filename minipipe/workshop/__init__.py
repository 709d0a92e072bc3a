"""A workshop on one shared server: the teacher's side of the course.

slices.py (each participant's cores and GPUs) · limits.py (their memory and tasks, in a cgroup each)
· room.py (their folders and passwords) · hub.py (JupyterHub's spawner and authenticator for the
room) · start.py (`minipipe workshop start`) · procs.py (`minipipe workshop status | stop`) ·
gradebook.py (`minipipe workshop grade`) · materials.py (slides, notes and plan from the lessons) ·
cli.py (the commands).
"""
