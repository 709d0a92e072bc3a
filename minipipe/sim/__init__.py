"""The first interpreter: schedules replayed on a cost model, giving the same `Trace` a real run gives.

    pipeline.py    `Costs` and `simulate`: one pipeline's schedule, compute and messages; `calibrate`
    network.py     links inside and between nodes; ring collectives' costs
    mesh.py        a PP×DP×TP step, collectives included; calibration from a measured run
    serving.py     a stream of requests through a forward-only pipeline

Nothing here imports torch or starts a process.
"""
