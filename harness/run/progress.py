"""Progress of a run: in a terminal, tqdm bars for the builds and the pairs, with an ETA; in a log
that is not a terminal (CI), or without tqdm, one plain line per finished pair. What a command
prints for a terminal fits TERMINAL_WIDTH columns: a pair's line is shortened (its result file
holds everything), a message is wrapped (nothing of it is lost); --wide prints lines in full."""
from __future__ import annotations

import sys
import textwrap
from typing import Callable

TERMINAL_WIDTH = 120


def shorten(text: str, width: int | None = TERMINAL_WIDTH) -> str:
    """`text` in `width` columns, cut with '…' (None: as it is)."""
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def wrap(text: str, width: int | None = TERMINAL_WIDTH) -> str:
    """`text`'s lines in `width` columns, broken at spaces, continued two columns in (None: as it is)."""
    if width is None:
        return text
    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=True,
                                    break_on_hyphens=False) if len(line) > width else line
                     for line in text.split("\n"))


def printer(width: int | None = TERMINAL_WIDTH, file=None) -> Callable[[str], None]:
    """print, its lines wrapped to `width` (a run's progress bars are drawn for it, as for print)."""
    def out(text: str) -> None:
        print(wrap(text, width), file=file or sys.stdout)
    out.terminal = True
    return out


class Progress:
    def __init__(self, out: Callable[[str], None], pairs: int, builds: int, tty: bool | None = None,
                 width: int | None = None):
        self.out = out
        self.width = width
        self.tqdm = None
        self.pairs = self.builds = None
        if tty if tty is not None else (getattr(out, "terminal", out is print) and sys.stderr.isatty()):
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
        self.line("\n".join(shorten(line, self.width) for line in text.split("\n")))
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
