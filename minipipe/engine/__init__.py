"""The second interpreter: the same schedules on real torch.distributed processes.

Read in this order: config.py (a RunConfig checked into a Plan before any process starts: the
checks in run_checks.py, the cut and the shapes through it in model_cut.py) →
launch.py (`run`: the plan handed to the workers, their results gathered) → workers.py (the
processes, their watchdog, errors naming rank and action) → train.py (what each rank does; its
stages built in rank_stages.py, what a step's collectives sent in step_traffic.py) → execute.py
(the interpreter: one rank's action list) → stage.py (one stage's forward and backward) and
comm.py (the messages a schedule implies). Beside them: partition.py (layers → stages),
placement.py (device, backend, pinning), cores.py (the cores a run claims, never another run's),
stage_step.py (your own F and B), checkpoint.py, torchrun.py, faults.py (the failures tests inject).
"""
