"""Comparing runs: verdicts, this machine's noise, the campaign engine and its two-side use
(`ab`), and the expected results runs are judged by."""
