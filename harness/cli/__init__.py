"""The commands on top of the run: the CI gate (check), a training loop's batches (batch).
run_eval.py parses the command line and calls these and the runner.

May import: every other part.
"""
