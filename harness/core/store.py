"""Results on disk: results/<run-id>/<problem>__<solution>.json, one file per pair, written
atomically as soon as the pair finishes, plus run.json (the run's manifest). Resume skips
pairs already recorded for the same problem and solution content (the solution file and its
helper files, e.g. a shared .cu)."""
from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from pathlib import Path
from typing import Any

from .errors import BadInput
from .results import EvalResult, pair_key
from .solutions import Pair

MANIFEST = "run.json"


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Store:
    def __init__(self, results_dir: str | Path, run_id: str):
        self.run_id = run_id
        self.dir = Path(results_dir) / run_id

    def path_for(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def write(self, result: EvalResult) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path_for(result.key)
        _atomic_write(path, json.dumps(result.to_dict(), indent=1, default=str))
        return path

    def recorded(self, pair: Pair) -> EvalResult | None:
        """The stored result for this pair if the problem, the solution file and the helper
        files it may load (solutions.helper_files) are unchanged since."""
        path = self.path_for(pair_key(pair.problem.id, pair.solution.name))
        if not path.exists():
            return None
        result = read_result(path)
        same = (result.problem.get("sha256") == pair.problem.sha256
                and result.solution.get("sha256") == pair.solution.sha256
                and result.solution.get("sources_sha256") == pair.solution.sources_sha256)
        return result if same else None

    def write_manifest(self, data: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / MANIFEST
        old = json.loads(path.read_text()) if path.exists() else {}
        _atomic_write(path, json.dumps({**old, **data}, indent=1, default=str))

    def load(self) -> list[EvalResult]:
        return load_run(self.dir)


def read_result(path: Path) -> EvalResult:
    try:
        return EvalResult.from_dict(json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(path, f"not a readable result file: {exc}") from None


def load_run(run_dir: str | Path) -> list[EvalResult]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BadInput(run_dir, "no such results folder")
    return [read_result(p) for p in sorted(run_dir.glob("*.json")) if p.name != MANIFEST]
