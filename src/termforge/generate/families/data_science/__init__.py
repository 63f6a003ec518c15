"""The data_science families, one module each: a held-out regression scored by RMSE, a census of
shapes in a PNG, and a per-class evaluation report of a classifier's predictions."""
