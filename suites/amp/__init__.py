"""Automatic mixed precision (1.6 stable): casting rules, GradScaler, parity, speed and memory."""
