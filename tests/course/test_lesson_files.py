"""Every part that lists the lessons finds the same ones, a sequel among them (13b_five_axes comes
right after 13_3d_parallelism, '_' sorting before 'b'): the site, a workshop participant's folder,
the teacher's materials and the tests' own lists."""

from pathlib import Path

from minipipe.workshop import materials, room
from tests.support.executed_notebooks import site_builder

builder = site_builder()

REPO = Path(__file__).resolve().parents[2]


def on_disk() -> list[str]:
    return sorted(p.stem for p in (REPO / "lessons").glob("*.ipynb") if p.stem[:2].isdigit())


def test_every_lister_finds_every_lesson_the_sequel_too():
    lessons = on_disk()
    assert "13b_five_axes" in lessons and lessons.index("13b_five_axes") == lessons.index("13_3d_parallelism") + 1
    assert sorted(builder.lessons()) == lessons
    assert (
        sorted(Path(k).stem for k in room.course_files() if k.startswith("lessons/") and k.endswith(".ipynb"))
        == lessons
    )
    assert [p.stem for p in materials.lesson_paths()] == lessons


def test_a_lesson_is_chosen_by_its_number_or_its_name():
    assert [p.stem for p in materials.lesson_paths(["13"])] == ["13_3d_parallelism"]
    assert [p.stem for p in materials.lesson_paths(["13b"])] == ["13b_five_axes"]
    assert [p.stem for p in materials.lesson_paths(["13b_five_axes", "00"])] == ["00_start_here", "13b_five_axes"]


def test_the_sites_table_reads_a_sequels_row():
    table = "| `13_3d_parallelism` | x |\n| `13b_five_axes` | y |\n| `glossary` | z |\n"
    assert builder.TABLE_ROW.findall(table) == ["13_3d_parallelism", "13b_five_axes"]
