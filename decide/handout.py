"""The track's one-page handout, HTML and PDF, in English, German and Dutch (minipipe/course/handout.py).

python decide/handout.py --out build/handout              every language, HTML and PDF
python decide/handout.py --out build/handout --lang de --no-pdf
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's minipipe first

from minipipe.course.handout import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
