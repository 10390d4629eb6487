"""dfm's benchmark harness (`make bench`): speed measured as ratios within one run, written to BENCHMARKS.md.

Each item is a module with `measure(quick, context) -> dict` (a JSON-able section); `bench.run` runs
every item in its own process, so one crash or one item's thread pools cannot skew another.
"""
