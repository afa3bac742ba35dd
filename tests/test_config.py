import dataclasses

import pytest

from harness import REPO_ROOT
from harness.core.config import Config, load_config, parse_override, with_overrides
from harness.core.errors import BadInput
from conftest import FIXTURES


def test_default_yaml_matches_dataclass_defaults():
    """configs/default.yaml spells out the defaults, plus the problems' extra correctness shapes."""
    cfg = load_config(REPO_ROOT / "configs" / "default.yaml")
    family = sorted((REPO_ROOT / "problems" / "conv_transpose2d").glob("*.py"))
    assert len(family) == 9 and set(cfg.correctness.extra_shapes) >= {f.stem for f in family}
    plain = dataclasses.replace(cfg, source="x", correctness=dataclasses.replace(cfg.correctness, extra_shapes={}))
    assert plain == dataclasses.replace(Config(), source="x")


def test_config_is_frozen():
    cfg = load_config(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3


def test_unknown_nested_key_names_file_and_key():
    path = FIXTURES / "configs" / "unknown_key.yaml"
    with pytest.raises(BadInput) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert "correctness.tolerence" in str(err.value)


def test_unknown_top_level_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("devise: cuda\n")
    with pytest.raises(BadInput, match="unknown key 'devise'"):
        load_config(path)


@pytest.mark.parametrize("text, message", [
    ("correctness:\n  trials: three\n", "correctness.trials' must be int"),
    ("device: tpu\n", "device must be one of"),
    ("timing: 5\n", "key 'timing' must be a mapping"),
    ("correctness: {trials: 0}\n", "trials must be >= 1"),
    ("a: [\n", "not valid YAML"),
    ("timing: {gate_max_regression: 1.5}\n", "gate_max_regression must be in"),
    ("build: {yield_to_lanes: sometimes}\n", "build.yield_to_lanes must be one of auto, on, off"),
    ("build: {stagger: maybe}\n", "build.stagger must be one of auto, on, off"),
])
def test_bad_values_rejected(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match=message):
        load_config(path)


def test_missing_file():
    with pytest.raises(BadInput, match="config file not found"):
        load_config("/nonexistent/config.yaml")


def test_int_accepted_for_float_and_partial_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("correctness:\n  fp32: {atol: 1}\n")
    cfg = load_config(path)
    assert cfg.correctness.fp32.atol == 1.0 and isinstance(cfg.correctness.fp32.atol, float)
    assert cfg.correctness.fp32.rel_l2 == Config().correctness.fp32.rel_l2  # partial: the rest from defaults
    assert cfg.correctness.trials == Config().correctness.trials
    assert cfg.source == str(path)


def test_overrides_are_applied_and_checked():
    cfg = with_overrides(load_config(None), dict([parse_override("timing.min_samples=20"), ("device", "cpu")]))
    assert cfg.timing.min_samples == 20 and cfg.device == "cpu"
    with pytest.raises(BadInput, match="unknown config key 'timing.nope'"):
        with_overrides(cfg, {"timing.nope": 1})
    with pytest.raises(BadInput, match="must be int"):
        with_overrides(cfg, {"timing.min_samples": "many"})


def test_samples_and_rounds_are_auto_by_device_or_a_number():
    """timing.max_samples and timing.rounds: auto (the device's, harness/verdict/timing.py AUTO_TIMING: 1000
    in 30 on CUDA, 100 in 10 on the CPU) or a whole number, which every device then takes as it is."""
    from harness.verdict.timing import AUTO_TIMING, for_device
    t = load_config(None).to_dict()["timing"]
    assert (t["max_samples"], t["rounds"]) == ("auto", "auto")
    for device in ("cuda", "cpu"):
        assert {k: for_device(t, device)[k] for k in ("max_samples", "rounds")} == AUTO_TIMING[device]
    assert (for_device(t, "cpu")["max_samples"], for_device(t, "cpu")["rounds"]) == (100, 10)
    assert (for_device(t, "cuda")["max_samples"], for_device(t, "cuda")["rounds"]) == (1000, 30)
    cfg = with_overrides(load_config(None), dict([parse_override("timing.rounds=20"),
                                                  parse_override("timing.min_samples=200")]))
    t = cfg.to_dict()["timing"]
    assert for_device(t, "cuda")["rounds"] == for_device(t, "cpu")["rounds"] == 20
    assert for_device(t, "cpu")["max_samples"] == 200            # auto, but never below min_samples
    for key, value in (("timing.rounds", "many"), ("timing.max_samples", 2.5), ("timing.rounds", True)):
        with pytest.raises(BadInput, match=f"'{key}' must be a whole number or auto"):
            with_overrides(cfg, {key: value})
    with pytest.raises(BadInput, match="timing.rounds must be auto or >= 1"):
        with_overrides(cfg, {"timing.rounds": 0})
    with pytest.raises(BadInput, match="min_samples <= max_samples"):
        with_overrides(cfg, {"timing.max_samples": 50})
    with pytest.raises(BadInput, match="timing.gate_rounds must be >= 2"):
        with_overrides(cfg, {"timing.gate_rounds": 1})


@pytest.mark.parametrize("text, message", [
    ("correctness:\n  extra_shapes: {'57': {batch_size: 1}}\n", "must be a list of non-empty mappings"),
    ("checks: {library_passthrough: warn}\n", "must be 'flag' or 'fail'"),
    ("correctness:\n  fp32: {atol: 1, rtoll: 2}\n", "unknown key 'correctness.fp32.rtoll'"),
])
def test_numerics_and_checks_keys_validated(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match=message):
        load_config(path)


@pytest.mark.parametrize("key, word, expected", [("sandbox", "off", "off"), ("checks.secret_timed_checks", "off", "off"),
                                                 ("checks.secret_timed_checks", "on", "on"),
                                                 ("timing.move_inputs", "off", "off")])
def test_a_bare_on_or_off_is_the_word_yaml_read_as_a_boolean(key, word, expected):
    """YAML 1.1 reads `off` as false: `--set checks.secret_timed_checks=off` failed on the H200
    ('must be str, got bool False') as `--set sandbox=off` once did."""
    cfg = with_overrides(load_config(None), dict([parse_override(f"{key}={word}")]))
    section, _, name = key.rpartition(".")
    assert getattr(getattr(cfg, section) if section else cfg, name) == expected
    with pytest.raises(BadInput, match="auto, on or off"):
        with_overrides(cfg, dict([parse_override("checks.secret_timed_checks=yes_please")]))


def test_timing_move_inputs_takes_auto_on_or_off():
    cfg = load_config(None)
    assert cfg.timing.move_inputs == "auto"
    with pytest.raises(BadInput, match="timing.move_inputs must be auto, on or off"):
        with_overrides(cfg, {"timing.move_inputs": "sometimes"})


def test_the_default_extra_shapes_are_keyed_by_id_not_by_a_number_kernelbench_levels_share(tmp_path):
    """Level 2's 71 (a Conv2d) is not level 1's 71: the family's extra shapes must not reach it, or
    validate() refuses a whole batch that holds it (seen with a corpus of KernelBench solutions)."""
    from harness.core import problems
    cfg = load_config(REPO_ROOT / "configs" / "default.yaml")
    level2 = tmp_path / "level2" / "71_Conv2d_Divide_LeakyReLU.py"
    level2.parent.mkdir()
    level2.write_text("import torch\nbatch_size = 2\nin_channels = 3\n\n"
                      "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                      "def get_inputs():\n    return [torch.rand(batch_size, in_channels, 4, 4)]\n\n"
                      "def get_init_inputs():\n    return []\n")
    other = problems.problem_from_path(level2)
    assert problems.extra_shapes_for(other, cfg.correctness.extra_shapes) == []
    problems.validate(other, problems.extra_shapes_for(other, cfg.correctness.extra_shapes), "default.yaml")
    own = problems.select("71")[0]
    assert len(problems.extra_shapes_for(own, cfg.correctness.extra_shapes)) == 3


def test_large_sums_applies_the_tf32_atol_rms_on_every_device_unless_off():
    """correctness.large_sums auto (= on): the tf32 class's atol_rms on CPU and CUDA runs alike (on CUDA
    since the GPU smoke and the tf32 class's GPU calibration ran with it); off leaves it out; the
    other classes untouched."""
    import dataclasses

    from harness.core.config import class_tolerances, load_config, with_overrides
    def tf32(setting, device):
        cfg = with_overrides(load_config(None), {"correctness.large_sums": setting})
        tols = class_tolerances(dataclasses.asdict(cfg)["correctness"], "fp32")
        assert list(tols) == ["fp32", "tf32"] and tols["fp32"]["atol"] == cfg.correctness.fp32.atol
        return tols["tf32"]["atol_rms"]
    assert tf32("auto", "cpu") == 16 and tf32("auto", "cuda") == 16
    assert tf32("on", "cuda") == 16 and tf32("off", "cpu") is None and tf32("off", "cuda") is None


def test_build_stagger_auto_staggers_cuda_runs_of_this_host_only():
    from harness.core.config import build_stagger
    assert [build_stagger("auto", d) for d in ("cuda", "cpu")] == [True, False]
    assert build_stagger("on", "cpu") and not build_stagger("off", "cuda")
    assert not build_stagger("on", "cuda", "ray") and not build_stagger("auto", "cuda", "ray")


def test_worker_start_auto_forks_cuda_workers_only():
    from harness.core.config import worker_start
    assert [worker_start("auto", d) for d in ("cuda", "cpu")] == ["fork", "exec"]
    assert worker_start("exec", "cuda") == "exec" and worker_start("fork", "cpu") == "fork"


def test_the_noise_bound_is_on_on_every_device_unless_set_off():
    """correctness.noise_bound auto: on on the CPU and on CUDA (since the GPU smoke ran with it)."""
    from harness.core.config import noise_bound
    assert noise_bound({}) and noise_bound({"noise_bound": "auto"})
    assert noise_bound({"noise_bound": "on"}) and not noise_bound({"noise_bound": "off"})
    with pytest.raises(BadInput, match="noise_bound"):
        with_overrides(load_config(None), {"correctness.noise_bound": "maybe"})
