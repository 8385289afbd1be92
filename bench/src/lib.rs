//! Placeholder: the benchmarks arrive with the benchmark issue (DESIGN.md §8).
