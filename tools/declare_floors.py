"""Write a problem family's floors.yaml (harness/core/problems.py declaration): for each problem whose
reference is one transposed 2D convolution, what every call at the benchmark shape must at least
do, established from the reference itself (on the meta device: no data, no GPU).

    python tools/declare_floors.py [FAMILY]          default conv_transpose2d; --check: exit 1 if stale

  - reads_inputs: every input pixel reaches at least one output pixel through some kernel tap
    (stride, padding, dilation and output padding followed exactly, per axis), every input
    channel has its group's weights, and the input is the only tensor: a right output depends
    on every input byte, so after the L2 flush a call reads them all from memory.
  - min_flop: 2 N Cin (Cout / groups) Hin Win, the direct count (2 N Cin (Cout / groups) Hin Win
    KH KW, what torch.utils.flop_counter counts) over the kernel's taps: Winograd and FFT
    algorithms can fold the taps away, not the mixing of each input pixel's channels into its
    group's output channels. The floor prices it at the device's fastest dense tensor-core rate
    (8-bit products: checks.peak_flops), at least 2x above any arithmetic that meets the fp32
    or tf32 class, which covers a level of Strassen-style products (8/7).

A problem whose reference is anything else gets no declaration from this tool.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADER = """\
# What every call of each problem at its benchmark shape must at least do, for the physical floor
# (harness/verdict/checks.py floor; docs/evaluation.md). Written by tools/declare_floors.py from the
# reference itself; each entry holds for the version of the file its sha256 names.
"""


def reaches_every_input(size_in: int, kernel: int, stride: int, padding: int, dilation: int,
                        output_padding: int) -> bool:
    """Whether every input index of one axis of a transposed convolution lands on an output index
    (o = i * stride - padding + k * dilation, 0 <= o < size_out) through some tap k."""
    size_out = (size_in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    return all(any(0 <= i * stride - padding + k * dilation < size_out for k in range(kernel))
               for i in range(size_in))


def declare(path: Path) -> dict | None:
    """The declaration of one problem file, or None where its reference is not one ConvTranspose2d."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from harness.core.problems import file_sha256, load_module
    mod = load_module(path)
    init = list(mod.get_init_inputs())
    with torch.device("meta"):
        model = mod.Model(*init)
        inputs = mod.get_inputs()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    leaves = [m for m in model.modules() if not list(m.children())]
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if len(convs) != 1 or leaves != convs or len(tensors) != 1 or tensors[0].dim() != 4:
        return None
    conv, x = convs[0], tensors[0].to("meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        y = model(x)
    counted = counter.get_total_flops()
    n, cin, h, w = x.shape
    cout_g = conv.out_channels // conv.groups
    direct = 2 * n * cin * cout_g * h * w * conv.kernel_size[0] * conv.kernel_size[1]
    if counted != direct or tuple(y.shape[:2]) != (n, conv.out_channels):
        return None  # the forward does more than the one convolution
    reads = all(reaches_every_input(size, conv.kernel_size[a], conv.stride[a], conv.padding[a], conv.dilation[a],
                                    conv.output_padding[a]) for a, size in enumerate((h, w)))
    entry = {"sha256": file_sha256(path)}
    if reads:
        entry["reads_inputs"] = True
    entry["min_flop"] = 2 * n * cin * cout_g * h * w
    entry["why"] = (f"one ConvTranspose2d (N={n}, Cin={cin}, Cout={conv.out_channels}, groups={conv.groups}, "
                    f"kernel={tuple(conv.kernel_size)}, stride={tuple(conv.stride)}, padding={tuple(conv.padding)}, "
                    f"dilation={tuple(conv.dilation)}, output_padding={tuple(conv.output_padding)}, "
                    f"input {h}x{w}): " + ("every input pixel reaches an output pixel; " if reads else
                                            "some input pixels reach no output pixel, so no input floor; ")
                    + "min_flop is the direct count over the kernel's taps (tools/declare_floors.py)")
    return entry


def render(declared: dict[str, dict]) -> str:
    import yaml
    return HEADER + yaml.safe_dump(declared, sort_keys=True, width=100)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("family", nargs="?", default="conv_transpose2d")
    p.add_argument("--check", action="store_true", help="exit 1 where floors.yaml is not what this tool writes")
    args = p.parse_args(argv)
    folder = ROOT / "problems" / args.family
    if not folder.is_dir():
        print(f"problems/{args.family}: no such problem family", file=sys.stderr)
        return 2
    declared = {}
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_"):
            entry = declare(path)
            if entry is not None:
                declared[path.name] = entry
    text = render(declared)
    target = folder / "floors.yaml"
    if args.check:
        same = target.is_file() and target.read_text() == text
        print(f"{target.relative_to(ROOT)}: {'up to date' if same else 'stale: run tools/declare_floors.py'}")
        return 0 if same else 1
    target.write_text(text)
    print(f"{target.relative_to(ROOT)}: {len(declared)} of {len(list(folder.glob('*.py')))} problems declared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
