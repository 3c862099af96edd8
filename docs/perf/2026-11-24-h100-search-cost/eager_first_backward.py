"""Eager PyTorch alone: its first backward of a process, then of a second shape (as first_backward.py,
without the library). Run twice, one process each, on the H100 (eager_first_backward.log)."""
