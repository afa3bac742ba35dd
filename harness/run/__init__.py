"""The run: the runner and its lanes (one per GPU, local or on a Ray cluster), one pair's pipeline
and phases (pipeline, pair), the worker process, the only code that imports solution code
(worker), the pool of spare workers, CPU placement, the lane's check of its own sandbox, and the
progress line.

May import: core, isolate, verdict, compile and record.
"""
