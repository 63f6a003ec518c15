"""The data_querying families, one module each: questions over a SQLite database, and a CSV
group-by query tool."""
