"""Presenting records: terminal tables, report figures, the HTML pages, asv's dashboard."""
