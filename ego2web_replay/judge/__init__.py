"""Judges: turn an episode (trajectory, screenshots, answer) into a Verdict."""
