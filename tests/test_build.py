from harness.compile.build import build_key, first_errors, plain_params


def test_first_errors_picks_compiler_lines():
    log = ("[1/2] c++ -MMD -c main.cpp -Werror=x\nFAILED: main.o\n"
           "main.cpp:7:25: error: expected ',' or ';' before 'return'\n"
           "/x/cuda.cu(12): error: identifier \"q\" is undefined\nninja: build stopped: subcommand failed.\n")
    assert first_errors(log) == ("main.cpp:7:25: error: expected ',' or ';' before 'return' | "
                                 "/x/cuda.cu(12): error: identifier \"q\" is undefined")
    assert first_errors("all good\n") == ""


def test_build_key_depends_on_sources_flags_and_arch_only():
    args = {"name": "e", "cpp_sources": "int f();", "extra_cflags": ["-O3"], "verbose": False,
            "build_directory": "/a"}
    key = build_key(plain_params(args), "2.13", "9.0")
    assert key == build_key(plain_params({**args, "verbose": True, "build_directory": "/b"}), "2.13", "9.0")
    assert "build_directory" not in plain_params(args) and "verbose" not in plain_params(args)
    args = plain_params(args)
    assert key != build_key({**args, "cpp_sources": "int g();"}, "2.13", "9.0")
    assert key != build_key({**args, "extra_cflags": ["-O2"]}, "2.13", "9.0")
    assert key != build_key(args, "2.13", "8.0")
    assert key != build_key(args, "2.12", "9.0")


def test_manifests_of_identical_sources_written_at_once_do_not_race(tmp_path):
    """Build steps of identical sources finishing together (threads of the runner, or nodes that
    share the cache) each write the same manifest: none fails, and the manifest is whole."""
    import json
    import threading
    from types import SimpleNamespace

    from harness.compile.build import read_manifest, write_manifest

    solution = SimpleNamespace(sources_sha256="abc", path=tmp_path / "gen.py")
    errors = []

    def write(i: int) -> None:
        try:
            for _ in range(50):
                write_manifest(tmp_path, solution, "2.13", "cpu", "cpu", {"extensions": [{"name": f"e{i}"}]})
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    manifest = read_manifest(tmp_path, solution, "2.13", "cpu", "cpu", present=lambda m: True)
    assert manifest["extensions"][0]["name"].startswith("e")
    assert [p.name for p in (tmp_path / "manifests").iterdir()] == [p.name for p in (tmp_path / "manifests").glob("*.json")]
    json.dumps(manifest)


def test_include_folders_count_by_what_they_hold_not_where(tmp_path):
    """The CI gate exports a revision's family to another folder: the same headers there build
    once (one key), while an edited header at the same path builds anew."""
    from harness.compile.build import INCLUDE_FILES, include_digest
    for where in ("a", "b"):
        (tmp_path / where / "sub").mkdir(parents=True)
        (tmp_path / where / "common.cuh").write_text("#define TILE 64\n")
        (tmp_path / where / "sub" / "mma.cuh").write_text("// mma\n")
    args = {"name": "e", "cpp_sources": ["int f();"], "extra_cflags": ["-O3"]}
    key_a = build_key({**args, "extra_include_paths": [str(tmp_path / "a")]}, "2.13", "9.0")
    assert key_a == build_key({**args, "extra_include_paths": [str(tmp_path / "b")]}, "2.13", "9.0")
    assert key_a != build_key(args, "2.13", "9.0")
    (tmp_path / "b" / "sub" / "mma.cuh").write_text("// mma, edited\n")
    assert key_a != build_key({**args, "extra_include_paths": [str(tmp_path / "b")]}, "2.13", "9.0")
    (tmp_path / "b" / "sub" / "mma.cuh").write_text("// mma\n")
    (tmp_path / "b" / "sub" / "new.cuh").write_text("")    # a file more, even empty, is another folder
    assert key_a != build_key({**args, "extra_include_paths": [str(tmp_path / "b")]}, "2.13", "9.0")
    # a folder that is not there, or too large to read whole, is keyed by its path, as before
    assert include_digest(str(tmp_path / "none")) == str(tmp_path / "none")
    big = tmp_path / "big"
    big.mkdir()
    for i in range(INCLUDE_FILES + 1):
        (big / f"h{i}.h").write_text("")
    assert include_digest(str(big)) == str(big)
