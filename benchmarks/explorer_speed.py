"""How long one ScheduleExplorer update takes: re-simulate + redraw (target: well under 100 ms
at classroom sizes, p <= 8, m <= 32). Prints figures only.

Measured kernel-side, as in a notebook: the explorer is given a comm that JSON-encodes every
message it would send to the browser (outside a kernel, ipywidgets would send nothing), so the
"+ send" column includes building and encoding the plotly update. Drawing in the browser
comes on top (plotly.js restyles the bars; typically tens of ms).
"""

import json
import statistics
import sys

import comm

SENT = {"bytes": 0}


class EncodingComm(comm.DummyComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        SENT["bytes"] += len(json.dumps(data, default=str))


comm.create_comm = EncodingComm  # before any widget exists

from minipipe.viz import ScheduleExplorer  # noqa: E402

SIZES = [
    ("1f1b", 4, 8, 1),
    ("gpipe", 8, 32, 1),
    ("1f1b", 8, 32, 1),
    ("interleaved", 8, 32, 2),
    ("interleaved", 8, 32, 4),
]


def main(quick: bool = False) -> None:
    repeats = 10 if quick else 40
    explorer = ScheduleExplorer()
    print(f"{'schedule':<24} {'bars':>5} {'update (median)':>16} {'p90':>8} {'sent/update':>12}")
    for kind, p, m, v in SIZES:
        explorer._hold = True  # set all four, then measure single changes
        for name, value in (("kind", kind), ("p", p), ("m", m), ("v", v)):
            explorer.controls[name].value = value
        explorer._hold = False
        explorer.update()
        times, SENT["bytes"] = [], 0
        for i in range(repeats):
            # alternate the forward cost: every change really re-simulates and redraws
            explorer.controls["forward"].value = 1.0 + 0.1 * (i % 2 + 1)
            assert explorer.error is None, explorer.error
            times.append(explorer.last_update_ms)
        times.sort()
        label = f"{kind} p={p} m={m}" + (f" v={v}" if v > 1 else "")
        print(
            f"{label:<24} {len(explorer.trace.events):>5} {statistics.median(times):>13.1f} ms "
            f"{times[int(0.9 * (len(times) - 1))]:>5.1f} ms {SENT['bytes'] / repeats / 1024:>8.0f} KiB"
        )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
