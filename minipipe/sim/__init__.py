"""The first interpreter: schedules replayed on a cost model, giving the same `Trace` a real run gives.

    costs.py       `Costs`: what an op, a stage and a message cost
    pipeline.py    `simulate`: one pipeline's schedule, compute and messages
    network.py     links inside and between nodes; what a ring collective costs on them
    mesh_step.py   a PP×DP×TP step, collectives included (`simulate_mesh`; what it moves: traffic.py's `Traffic`)
    measured_costs.py  costs read off measured Traces: `calibrate`, `calibrate_mesh`, `fit_link`, `median`
    request_stream.py  a stream of requests through a forward-only pipeline (serving on the cost model)
    recompute_costs.py  activation recomputation: what each option keeps and redoes (engine, simulator, planner)

Nothing here imports torch or starts a process.
"""
