"""The shared vocabulary of every part: errors, the config, problems and solutions (their files and
contracts), results and the run folder that stores them (store), the precision classes, a worker's
events, and which file a failure is to blame on (blame).

May import: nothing else of the harness.
"""
