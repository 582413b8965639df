"""Speed and accuracy benchmarks for dpsql, side by side with plain DuckDB and SmartNoise SQL."""
