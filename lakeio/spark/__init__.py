"""Spark plumbing every job shares: the session, the frames passed between steps, task sizing, step timing, the catalog."""
