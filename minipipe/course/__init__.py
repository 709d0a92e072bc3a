"""What the course's notebooks share: the lessons' helpers (lesson.py) and the exercises' checkers
(exercises/)."""
