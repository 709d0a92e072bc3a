"""`minipipe bench`'s progress: a bar on a terminal, a line per configuration in a log."""
import io

from minipipe.cli import BenchProgress


def rounds(name, of):
    return [{"kind": "round", "rank": 0, "round": r, "of": of, "name": name} for r in range(of)]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_one_line_per_configuration_and_no_carriage_returns():
    log = io.StringIO()
    progress = BenchProgress(log)
    for event in rounds("small m=4", 17) + rounds("small m=8", 17) + [{"kind": "round", "rank": 1, "round": 16,
                                                                      "of": 17, "name": "small m=8"}]:
        progress(event)
    progress.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split(":")[1].strip() for line in lines] == ["small m=4", "small m=8"]
    assert all("17 rounds done" in line for line in lines)


def test_a_terminal_gets_a_bar():
    screen = Terminal()
    progress = BenchProgress(screen)
    for event in rounds("small m=4", 3):
        progress(event)
    progress.close()
    assert "\r" in screen.getvalue() and "3round" in screen.getvalue().replace(" ", "")
