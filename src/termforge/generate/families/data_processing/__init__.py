"""The data_processing families, one module each: a messy CSV join/aggregation, and a streaming
transform program."""
