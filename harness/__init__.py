"""The forge-zoo command line: ``python -m harness --help``."""
