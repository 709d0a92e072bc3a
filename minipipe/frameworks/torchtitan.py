"""The whole torchtitan command that trains a minipipe schedule from its CSV.

    schedule = make_schedule("zb-v", p=4, m=8, v=2)
    open("zb-v.csv", "w").write(to_csv(schedule))                 # torch_runtime.to_csv
    flags(schedule, "zb-v.csv")        # ['--parallelism.pipeline_parallel_degree', '4', ...]
    " ".join(command(schedule, "zb-v.csv"))   # torchrun --nproc_per_node 4 -m torchtitan.train ...

Checked against torchtitan 0.3.0, torchtitan/distributed/pipeline_parallel.py. Given
`--parallelism.pipeline_parallel_schedule_csv`, `_build_pipeline_schedule` makes a
`_PipelineScheduleRuntime` and loads the file into it (`_load_csv`). But the stages each rank builds
were decided before, from `--parallelism.pipeline_parallel_schedule`'s name alone:

- `_get_pipeline_metadata`: one stage per rank for a single-stage schedule class (a subclass of
  torch's PipelineScheduleSingle: 1F1B, GPipe), two for any other, unless
  `--parallelism.pipeline_parallel_layers_per_stage` L is given: then ceil((layers +
  first_stage_less_layers + last_stage_less_layers) / L) stages in all (those two count the
  embedding and the output as one layer each, by default);
- `_get_pp_rank_to_stage_indices_mapping`: for ZBVZeroBubble and DualPipeV a V (rank r holds
  stages r and 2p−1−r), for every other name a loop (rank r holds r, r+p, r+2p, ...).

So the CSV alone fits only a schedule of one stage per rank, and only where the training config's
own schedule name is a single-stage one (the llama3 debug model's is Interleaved1F1B): the command
names the schedule class whose placement is the CSV's, PipelineScheduleSingle or
PipelineScheduleMulti for a loop (the generic classes the option's help names; torchtitan's own
CSV test uses the second) and ZBVZeroBubble for a V. Micro-batches: `--training.local_batch_size`
÷ `--parallelism.pipeline_parallel_microbatch_size` must be the CSV's m (`_build_pipeline_schedule`
divides them; torchtitan's main branch since names `--parallelism.num_pp_microbatches` instead).
"""

from __future__ import annotations

import math

from ..schedule.ir import Schedule

# torchtitan's defaults for the two layers' worth the embedding and the output count for
FIRST_LESS, LAST_LESS = 1, 1


def style(schedule: Schedule) -> str:
    """torchtitan's word for how the schedule's stages sit on ranks: "loop" (stage s on rank s mod p)
    or "v" (two per rank: s on rank s for s < p, else on 2p−1−s); ValueError for any other placement."""
    p, n = schedule.p, schedule.n_stages
    if all(rank == s % p for s, rank in enumerate(schedule.placement)):
        return "loop"
    if n == 2 * p and all(rank == (s if s < p else n - 1 - s) for s, rank in enumerate(schedule.placement)):
        return "v"
    raise ValueError(
        f"stages on ranks {list(schedule.placement)}: torchtitan places stages in a loop (stage s on "
        f"rank s mod p) or, for ZBVZeroBubble and DualPipeV, a V of 2 per rank "
        f"(_get_pp_rank_to_stage_indices_mapping); this placement is neither"
    )


def schedule_name(schedule: Schedule) -> str:
    """The --parallelism.pipeline_parallel_schedule that makes torchtitan build this schedule's stages."""
    if style(schedule) == "v":
        return "ZBVZeroBubble"  # DualPipeV places the same; the CSV gives the order either way
    return "PipelineScheduleSingle" if schedule.v == 1 else "PipelineScheduleMulti"


def layers_per_stage(schedule: Schedule, num_layers: int) -> int:
    """The --parallelism.pipeline_parallel_layers_per_stage that gives p·v stages for a model of
    num_layers transformer layers, as `_get_pipeline_metadata` counts them; ValueError if none does."""
    total, n = num_layers + FIRST_LESS + LAST_LESS, schedule.n_stages
    fits = [size for size in range(1, total + 1) if math.ceil(total / size) == n]
    if not fits:
        near = sorted({math.ceil(total / size) for size in range(1, total + 1)})
        raise ValueError(
            f"no pipeline_parallel_layers_per_stage makes {n} stages of {num_layers} layers (+ "
            f"{FIRST_LESS + LAST_LESS} for the embedding and output): torchtitan can make "
            f"{', '.join(map(str, near))} stages of this model; choose v so that p·v is one of them"
        )
    return fits[0]


def flags(schedule: Schedule, csv_path: str, microbatch_size: int = 1, num_layers: int | None = None) -> list[str]:
    """torchtitan's options that train `schedule` from the CSV at `csv_path` (written by to_csv):
    its ranks, the schedule name that places its stages, its micro-batches, and the layers per stage
    when v is neither 1 nor 2 (then `num_layers`, the model's transformer layers, is needed)."""
    if not isinstance(microbatch_size, int) or microbatch_size < 1:
        raise ValueError(f"microbatch_size is a whole number of samples >= 1; got {microbatch_size!r}")
    out = [
        "--parallelism.pipeline_parallel_degree",
        str(schedule.p),
        "--parallelism.pipeline_parallel_schedule",
        schedule_name(schedule),
        "--parallelism.pipeline_parallel_schedule_csv",
        csv_path,
        "--training.local_batch_size",
        str(schedule.m * microbatch_size),
        "--parallelism.pipeline_parallel_microbatch_size",
        str(microbatch_size),
    ]
    if schedule.v > 2:
        if num_layers is None:
            raise ValueError(
                f"v={schedule.v} stages per rank: torchtitan makes 2 unless "
                f"--parallelism.pipeline_parallel_layers_per_stage says otherwise; give num_layers "
                f"(the model's transformer layers) to compute it"
            )
        out += ["--parallelism.pipeline_parallel_layers_per_stage", str(layers_per_stage(schedule, num_layers))]
    return out


def command(
    schedule: Schedule,
    csv_path: str,
    module: str = "llama3",
    config: str = "llama3_debugmodel",
    microbatch_size: int = 1,
    num_layers: int | None = None,
) -> list[str]:
    """The whole command, on one machine of p GPUs: torchrun, torchtitan's trainer, its model and
    config (--module, --config), and `flags`. On several machines add torchrun's --nnodes and
    --rdzv-endpoint, as lesson 15 does for minipipe."""
    return [
        "torchrun",
        "--nproc_per_node",
        str(schedule.p),
        "-m",
        "torchtitan.train",
        "--module",
        module,
        "--config",
        config,
        *flags(schedule, csv_path, microbatch_size, num_layers),
    ]
