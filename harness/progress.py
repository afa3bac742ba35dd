"""Progress of a run: in a terminal, tqdm bars for the builds and the pairs, with an ETA; in a log
that is not a terminal (CI), or without tqdm, one plain line per finished pair."""
from __future__ import annotations

import sys
from typing import Callable


class Progress:
    def __init__(self, out: Callable[[str], None], pairs: int, builds: int, tty: bool | None = None):
        self.out = out
        self.tqdm = None
        self.pairs = self.builds = None
        if tty if tty is not None else (out is print and sys.stderr.isatty()):
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.tqdm = tqdm
            self.pairs = tqdm(total=pairs, desc="pairs ", unit="pair", position=0, file=sys.stderr)
            if builds:
                self.builds = tqdm(total=builds, desc="builds", unit="build", position=1, file=sys.stderr)

    def line(self, text: str) -> None:
        if self.tqdm is not None:
            self.tqdm.write(text, file=sys.stdout)
        else:
            self.out(text)

    def pair_done(self, text: str, status: str) -> None:
        self.line(text)
        if self.pairs is not None:
            self.pairs.set_postfix_str(status, refresh=False)
            self.pairs.update(1)

    def build_done(self) -> None:
        if self.builds is not None:
            self.builds.update(1)

    def close(self) -> None:
        for bar in (self.builds, self.pairs):
            if bar is not None:
                bar.close()
