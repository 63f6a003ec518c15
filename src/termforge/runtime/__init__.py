"""Sandboxes: bwrap and Apptainer sessions on a root filesystem given as a value, limits and
their accounting, host-side tree walks. Nothing here builds an image (termforge.images does).
"""
