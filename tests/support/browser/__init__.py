"""Helpers for tests/test_browser_*.py: Chromium, a JupyterLab server and the page-side JavaScript."""
