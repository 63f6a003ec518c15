"""The scientific_computing families, one module each: spectral analysis of a recording, a
nonlinear decay fit, and an exact reduction of calibrated instrument readings."""
