"""``make bench``: the message centre measured against its baselines in one run."""
