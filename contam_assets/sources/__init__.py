"""Benchmark sources beside the TOML task specs (docs/benchmarks.md): each turns what the user named into task
specs over files the detector's registry reads, so the reference set is built by one code path."""
