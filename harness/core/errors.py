"""Bad input: a file or flag the harness cannot use. run_eval.py maps it to exit code 2."""


class BadInput(Exception):
    """One clear line naming the file (or flag) and what is wrong with it."""

    def __init__(self, where: str, problem: str):
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")
