"""The first interpreter: schedules replayed on a cost model, giving the same `Trace` a real run gives.

    costs.py            `Costs`: what an op, a stage and a message cost
    pipeline.py         `simulate`: one pipeline's schedule, compute and messages
    network.py          links inside and between nodes; what a ring collective costs on them
    mesh_step.py        a PP×DP×TP step, collectives included (`simulate_mesh`; what it moves: traffic.py's `Traffic`)
    measured_costs.py   costs read off measured Traces: `calibrate`, `calibrate_mesh`, `fit_link`, `median`
    recompute_costs.py  activation recomputation: what each option keeps and redoes (engine, simulator, planner)
    request_stream.py   serving: a stream of requests through a forward-only pipeline
    survey.py           every schedule kind side by side

Nothing here imports torch or starts a process.
"""
