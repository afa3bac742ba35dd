"""The trusted verdict, what decides ok or not: an output against its float64 ground truth (numerics,
truth, screen, judge), the secret sample of timed outputs (sample), what a worker was asked to run
against what it says it ran (asked), the checks on a solution's behaviour (checks, guards,
libshare), and the timing statistics and their intervals (timing).

May import: core and isolate; never the run or the record.
"""
