from harness.build import build_key, first_errors


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
    key = build_key(args, "2.13", "9.0")
    assert key == build_key({**args, "verbose": True, "build_directory": "/b"}, "2.13", "9.0")
    assert key != build_key({**args, "cpp_sources": "int g();"}, "2.13", "9.0")
    assert key != build_key({**args, "extra_cflags": ["-O2"]}, "2.13", "9.0")
    assert key != build_key(args, "2.13", "8.0")
    assert key != build_key(args, "2.12", "9.0")
