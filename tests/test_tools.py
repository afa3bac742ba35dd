"""The A/B tool's variant parsing (tools/ab_variants.py; the timing itself needs a GPU)."""
import pytest

from tools.ab_variants import variant_source

BASE = "int a = 1;\nint b = 2;\n"


def test_base_is_the_file_as_it_is():
    assert variant_source("base", BASE) == ("base", BASE)


def test_replacement_variant_replaces_the_exact_string():
    assert variant_source("two=int b = 2;@@int b = 3;", BASE) == ("two", "int a = 1;\nint b = 3;\n")


def test_replacement_that_does_not_occur_names_the_variant():
    with pytest.raises(SystemExit, match="variant x: the string to replace does not occur"):
        variant_source("x=int c = 2;@@int c = 3;", BASE)


def test_file_variant_reads_the_file(tmp_path):
    other = tmp_path / "fast.cu"
    other.write_text("// other\n")
    assert variant_source(f"old={other}", BASE) == ("old", "// other\n")


def test_neither_file_nor_replacement_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="neither OLD@@NEW nor a file"):
        variant_source(f"old={tmp_path / 'missing.cu'}", BASE)
