"""Helpers for tests/test_browser_*.py: a JupyterLab server and the page-side JavaScript."""
