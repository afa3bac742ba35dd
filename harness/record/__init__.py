"""The record: stored results read back as standings, leaderboards (text and HTML) and the gate's
comparisons of two results or of two versions timed in the same rounds (gate).

May import: core and verdict (the interval statistics); never the run.
"""
