"""One module per `python -m harness` command, each holding its flags and what it does
with them: ``add_parser(subparsers, full)`` declares the command's parser (``full``: every
training option explained, as `--help-all` shows them) and ``run(args) -> int`` is the
command, returning the exit status. harness/cli.py keeps the table from names to modules.

A command's module imports only argparse-level code at the top; what the command runs
(torch, the runner, the reports) is imported inside ``run``, so that `--help` stays fast.
"""
