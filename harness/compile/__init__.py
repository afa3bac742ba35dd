"""The build: a solution's load_inline calls turned into recipes and compiled once, in a sandboxed
process (inline, build, recipes, compiler), compile-only checks for CUDA code a machine cannot run
(compile_only), lint, and what a build's or a worker's failed outcome means (failures).

May import: core, isolate and verdict.
"""
