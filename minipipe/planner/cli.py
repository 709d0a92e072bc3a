"""`minipipe plan`: the planner from a terminal (cli.py adds the subcommand)."""
from __future__ import annotations

from ..schedule import recompute as recomputation
from .search import plan


def add_arguments(parser) -> None:
    """`minipipe plan`'s options (cli.py adds the subcommand)."""
    from .presets import GPUS, MODELS  # noqa: F401 (names for the help text)

    parser.add_argument("--model", default="gpt3-175b", help=f"a model preset: {', '.join(MODELS)} (default gpt3-175b)")
    parser.add_argument("--gpus", type=int, default=1024, help="GPUs in the cluster (default 1024)")
    parser.add_argument("--gpu", default="a100-80gb", help=f"a GPU preset: {', '.join(GPUS)} (default a100-80gb)")
    parser.add_argument("--batch", type=int, default=None,
                        help="global batch in sequences (default: the model's published one)")
    parser.add_argument("--precision", default="bf16-mixed", help="bf16-mixed (default), fp16-mixed or fp32")
    parser.add_argument("--optimizer", default="adam", help="adam (default), sgd or sgd-momentum")
    parser.add_argument("--efficiency", type=float, default=None,
                        help="achieved fraction of the GPU's peak for the compute (default: calibrated on a "
                             "published run on that GPU, see minipipe.planner.published)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="default: the GPU preset's node (8)")
    parser.add_argument("--distributed-optimizer", action="store_true",
                        help="shard the optimizer state over data parallelism (ZeRO stage 1)")
    parser.add_argument("--no-sequence-parallel", action="store_true",
                        help="keep norms and dropouts whole on every tensor-parallel rank")
    parser.add_argument("--recompute", default=",".join(recomputation.NAMES),
                        help="activation recomputation to consider, comma-separated (default none,selective,full)")
    parser.add_argument("--top", type=int, default=10, help="layouts to print (default 10)")
    parser.add_argument("--every", action="store_true",
                        help="print every fitting row, not the best of each tp·pp·dp")
    parser.set_defaults(func=command)


def command(args) -> int:
    result = plan(args.model, args.gpus, args.gpu, batch=args.batch, precision=args.precision,
                  optimizer=args.optimizer, efficiency=args.efficiency, gpus_per_node=args.gpus_per_node,
                  sequence_parallel=not args.no_sequence_parallel, distributed_optimizer=args.distributed_optimizer,
                  recompute=tuple(x.strip() for x in args.recompute.split(",") if x.strip()))
    print(result.table(top=args.top, every=args.every))
    return 0
