"""The planner: the fastest pipeline × tensor × data layouts of a real model on a real cluster,
predicted from shapes and published figures (no processes, no torch)."""
