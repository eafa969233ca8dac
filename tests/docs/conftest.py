"""Prints the documented-commands inventory (what ran at which size) after the docs tests."""
import sys


def pytest_terminal_summary(terminalreporter):
    module = sys.modules.get("test_docs_examples")
    if module is not None:
        module.terminal_summary(terminalreporter)
