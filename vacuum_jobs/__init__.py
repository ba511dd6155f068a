"""Job 2: vacuum many Delta tables in one Spark run from the inventory table (see DESIGN.md)."""
