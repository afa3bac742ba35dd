"""The commands on top of the run: the CI gate (check). run_eval.py parses the command line and
calls these and the runner.

May import: every other part.
"""
