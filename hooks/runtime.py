"""Placeholder: the calculator engineer replaces this hook (Pyodide runtime + estimator wheel)."""
