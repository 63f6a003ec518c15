"""The opt-in calibration family (one_step_file_task): drawn only by the `calibration` corpus kind."""
