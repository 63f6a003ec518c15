"""The software_engineering families, one module each: fix planted bugs in a vendored package, port
a legacy awk tool to Python with byte-identical output on fuzzed inputs, and plan a monorepo
release from its commit log."""
