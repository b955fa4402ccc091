"""Across torch releases: an environment per release, the release matrix, history and bisect."""
