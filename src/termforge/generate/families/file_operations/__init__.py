"""The file_operations families, one module each: filter rotated logs, and prune duplicate files."""
